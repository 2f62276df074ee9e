#!/usr/bin/env bash
# The main job: on a fresh Debian 12 machine, install what pairwall needs, build it, bring up a
# firewall pair in network namespaces, run a failover drill under load and print what happened.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j"$(nproc)"
exec python3 tools/lab/pairwall-lab demo "$@"
