#!/usr/bin/env bash
# Everything CI runs: dependencies, a formatting check, a warnings-as-errors release build, the
# unit tests, the same tests under address+undefined sanitizers and under the thread sanitizer, a
# short run of every fuzz target, the integration tests in network namespaces (root required for
# those), and the daemon's and sync's integration tests again against the sanitized build.
#
#   tools/run-tests.sh              all of it
#   PAIRWALL_SKIP_SANITIZERS=1 ...  skip the sanitizer builds, the fuzz runs and the sanitized daemon
#                                   (faster local runs)
#   PAIRWALL_FUZZ_SECONDS=N ...     seconds per fuzz target (default 20)
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }
jobs=$(nproc)

step "dependencies"
bash tools/install-deps.sh

if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  step "formatting (clang-format, .clang-format)"
  git ls-files -z '*.cc' '*.h' | xargs -0 clang-format --dry-run -Werror
fi

step "release build (-Werror)"
cmake --preset release >/dev/null
cmake --build --preset release -j"$jobs"

step "unit tests"
ctest --test-dir build --output-on-failure -j"$jobs"

if [[ -z "${PAIRWALL_SKIP_SANITIZERS:-}" ]]; then
  step "unit tests under address+undefined sanitizers"
  cmake --preset asan >/dev/null
  cmake --build --preset asan -j"$jobs"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -j"$jobs"

  # The queue workers share the state table, and the sync and control threads reach the engine:
  # the unit tests that run them on threads of their own are where a race shows.
  step "unit tests under the thread sanitizer"
  cmake --preset tsan >/dev/null
  cmake --build --preset tsan -j"$jobs"
  TSAN_OPTIONS=halt_on_error=1 ctest --test-dir build-tsan --output-on-failure -j"$jobs"

  step "fuzz targets (short runs)"
  cmake --preset fuzz >/dev/null
  cmake --build --preset fuzz -j"$jobs" --target fuzz_packet fuzz_rules fuzz_compile fuzz_advert fuzz_sync fuzz_engine fuzz_config
  seconds="${PAIRWALL_FUZZ_SECONDS:-20}"
  for target in build-fuzz/bin/fuzz_*; do
    [[ -x "$target" ]] || continue
    name=$(basename "$target" | sed 's/^fuzz_//')
    corpus="tests/fuzz/corpus/$name"
    work=$(mktemp -d)
    cp -r "$corpus"/. "$work"/ 2>/dev/null || true
    dict=()
    [[ -f "tests/fuzz/$name.dict" ]] && dict=(-dict="tests/fuzz/$name.dict")
    echo "fuzzing $name for ${seconds}s"
    # The whole report when the target finds something (the finding, the input, the stack), else
    # the final statistics.
    if ! "$target" -max_total_time="$seconds" -print_final_stats=1 "${dict[@]}" "$work" >"$work.log" 2>&1; then
      grep -v '^#[0-9]' "$work.log" | tail -n 60
      rm -rf "$work" "$work.log"
      exit 1
    fi
    tail -n 3 "$work.log"
    rm -rf "$work" "$work.log"
  done
fi

# Unconditional: asking first whether there are tests (`find | grep -q`) fails under pipefail
# whenever grep exits before find has written everything (find dies of SIGPIPE), and then skipped
# the whole suite.
step "integration tests (network namespaces)"
if [[ $(id -u) -ne 0 ]]; then
  echo "integration tests need root (network namespaces, NFQUEUE)" >&2
  exit 1
fi
python3 -m pytest -q -p no:cacheprovider tests/integration

if [[ -z "${PAIRWALL_SKIP_SANITIZERS:-}" ]]; then
  # The real daemon under address+undefined sanitizers, with real NFQUEUE traffic, sync and the
  # control socket: the paths the unit tests drive with fakes. Its reports go to files, so that one
  # from a process a test stopped (a leak at exit, a finding after the test's last check) fails the
  # step as well as one that fails a test. The failover suite is left out: its bounds are the
  # timing the sanitizers' slowdown breaks. PAIRWALL_SANITIZED tells a test whose bound is a
  # latency to allow for that slowdown.
  step "daemon and sync integration tests against the address+undefined build"
  reports=$(mktemp -d)
  PAIRWALL_BIN_DIR="$PWD/build-asan/bin" PAIRWALL_SANITIZED=1 ASAN_OPTIONS="detect_leaks=1:log_path=$reports/asan" \
    UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$reports/ubsan" \
    python3 -m pytest -q -p no:cacheprovider tests/integration/daemon tests/integration/sync
  if compgen -G "$reports/*" >/dev/null; then
    cat "$reports"/*
    exit 1
  fi
  rm -rf "$reports"
fi

step "all tests passed"
