"""A short run of `pairwall-bench rules --quick` keeps the namespace benchmarks working: the suite
builds its namespaces, loads the same match set into pairwalld, iptables and iptables + ipset, runs
the lossless-rate search for each, and writes JSON and a plot. The full suites never run here (see
tools/bench/README.md); this one proves the harness, and that it measures what it claims to: a
linear iptables chain slows down as it grows."""

import json
import os
import signal
import subprocess
from pathlib import Path

from netns import cleanup_stale

REPO = Path(__file__).resolve().parents[3]
BENCH = Path(os.environ.get("PAIRWALL_BIN_DIR", REPO / "build" / "bin")) / "pairwall-bench"
STACKS = ("pairwalld", "pairwalld_state", "iptables", "iptables_ipset")


def test_bench_rules_suite_measures_every_stack(require_root, tmp_path):
    out = tmp_path / "rules.json"
    bench = subprocess.Popen([str(BENCH), "rules", "--json", "--quick", "--out", str(out)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _, stderr = bench.communicate(timeout=600)
    finally:
        # Whatever happened, nothing of the run stays: its process group, then what its namespaces hold.
        if bench.poll() is None:
            os.killpg(bench.pid, signal.SIGKILL)
            bench.wait()
        left_behind = cleanup_stale("pwb-")
    assert bench.returncode == 0, stderr[-3000:]
    result = json.loads(out.read_text())
    pps = result["rules_lossless_pps"]
    assert set(STACKS) <= set(pps), pps.keys()
    for stack in STACKS:
        for count in ("10", "1000"):
            assert pps[stack][count] > 0, (stack, count, pps[stack])
            assert result["points"][stack][count]["loaded"] > 0, result["points"][stack][count]
    # 1000 rules walked one by one cost the kernel far more than 10 (pf's Fig. 5 before skip-steps).
    assert pps["iptables"]["1000"] < pps["iptables"]["10"], pps["iptables"]
    assert out.with_suffix(".png").stat().st_size > 10_000
    # Nothing left behind: the suite removes the namespaces it made.
    assert not left_behind, left_behind
