"""[failover] notify: the operator's script runs at each role change of the builtin election, as
keepalived's notify script and devd's carp actions do: `SCRIPT ROLE VHID CAUSE`. Each node's script
records what it was told. The backup is reloaded with another script, which alone tells of its
takeover once the master is killed; a clean stop ends with STOP."""

import signal
import time

ADVBASE_MS = 200


def install_script(p, name):
    script = p.dir / f"{name}-notify.sh"
    script.write_text(f'#!/bin/sh\necho "$1 $2 $3" >> "{p.dir / (name + ".roles")}"\n')
    script.chmod(0o755)
    return script


def roles(p, name):
    path = p.dir / f"{name}.roles"
    return path.read_text().splitlines() if path.exists() else []


def test_notify_script_runs_at_each_role_change(pair_factory):
    p = pair_factory(advbase_ms=ADVBASE_MS, daemon="pairwalld", sync=False, ipv6=False)
    for node in ("a", "b"):
        p.start(node, extra=f'notify = "{install_script(p, node)}"\n')
    p.wait_roles({"a": "master", "b": "backup"}, timeout=10)
    p.wait_for(lambda: roles(p, "a") == ["BACKUP 1 start", "MASTER 1 master down"], 2,
               what=lambda: f"a's script told of its start and election, got {roles(p, 'a')}")
    assert roles(p, "b") == ["BACKUP 1 start"], p.log("b")

    p.reload_with("b", [(str(p.dir / "b-notify.sh"), str(install_script(p, "b2")))])
    killed = p.kill("a")
    p.wait_for(lambda: "MASTER 1 master down" in roles(p, "b2"), 3,
               what=lambda: f"b's new script told of its takeover, got {roles(p, 'b2')}")
    took_over = time.monotonic() - killed
    assert took_over < 3 * ADVBASE_MS / 1000 + 1, took_over
    assert p.role("b") == "master"

    p.kill("b", sig=signal.SIGTERM)
    p.wait_for(lambda: roles(p, "b2")[-1:] == ["STOP 1 shutdown"], 3,
               what=lambda: f"b's script told of its stop, got {roles(p, 'b2')}")
    assert roles(p, "b2") == ["MASTER 1 master down", "STOP 1 shutdown"]
    assert roles(p, "b") == ["BACKUP 1 start"]
    assert roles(p, "a") == ["BACKUP 1 start", "MASTER 1 master down"]  # killed: no word
    assert "exited with status" not in p.log("b"), p.log("b")
