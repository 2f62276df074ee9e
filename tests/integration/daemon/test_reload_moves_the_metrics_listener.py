"""A reload takes [metrics] listen: /metrics moved to another port, turned off and on again, with no
restart (which on a pair's master hands the group over). An address another socket holds is told
in the reload's answer, and /metrics stays where it was."""

import subprocess

from daemon_net import read_line

FIRST, SECOND = "127.0.0.1:9477", "127.0.0.1:9478"
TAKEN = "127.0.0.1:9479"
HOLD = f"""
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", {TAKEN.rsplit(':', 1)[1]}))
s.listen()
print("listening", flush=True)
time.sleep(60)
"""


def scrape(lan, listen):
    """The HTTP status of GET /metrics at `listen`, 0 when nothing answers there."""
    out = lan.fw.exec("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-m", "3", f"http://{listen}/metrics",
                      check=False)
    return int(out.stdout or 0)


def reload_with_listen(fw, listen):
    """Rewrites the daemon's [metrics] listen and reloads."""
    lines = [l if not l.startswith("listen") else f'listen = "{listen}"' for l in fw.config.read_text().splitlines()]
    fw.config.write_text("\n".join(lines) + "\n")
    out = fw.ctl("reload", check=False)
    assert "which a reload does not take" not in out.stdout + out.stderr, out
    return out


def test_reload_moves_the_metrics_listener(lan, daemon_factory):
    fw = daemon_factory()
    assert scrape(lan, FIRST) == 200

    # Moved: the old port no longer answers, the new one does.
    assert reload_with_listen(fw, SECOND).returncode == 0
    assert f"reload: metrics {FIRST} -> http://{SECOND}/metrics" in fw.log_text()
    assert scrape(lan, SECOND) == 200
    assert scrape(lan, FIRST) == 0

    # Off, and on again where it began.
    assert reload_with_listen(fw, "").returncode == 0
    assert f"reload: metrics {SECOND} -> off" in fw.log_text()
    assert scrape(lan, SECOND) == 0
    assert reload_with_listen(fw, FIRST).returncode == 0
    assert scrape(lan, FIRST) == 200

    # A port another socket holds: told, and /metrics stays where it was.
    holder = lan.topo.spawn(lan.fw, [lan.python, "-c", HOLD], stdout=subprocess.PIPE)
    assert read_line(holder, 10).strip() == "listening"
    out = reload_with_listen(fw, TAKEN)
    assert f"metrics: cannot listen on {TAKEN}" in out.stdout + out.stderr, out
    assert scrape(lan, FIRST) == 200
    lan.topo.stop(holder)
    assert fw.proc.poll() is None
