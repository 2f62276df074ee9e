"""A reload takes [queue] fail_open, hooks and exclude_interfaces. fail_open: the hooks'
--queue-bypass (replaced make-before-break), the kernel's policy for a full queue, and whether the
hooks stay when the daemon stops. With the queue cut to one packet, a burst loses packets
fail-closed (the kernel counts them dropped) and none fail-open (the kernel passes what finds the
queue full); a daemon made fail-open by a reload removes its hooks when it stops. hooks =
"forward+local" filters the node's own traffic from the reload on, and an interface added to
exclude_interfaces is no longer queued."""

from daemon_net import BLOCKED
from test_local_hooks_filter_the_node_itself import LOCAL_RULES, serve_on_fw
from test_reload_takes_queue_limits import burst, queue


def drops(fw):
    return int(queue(fw).get("drops", 0))


def hooks(lan):
    return lan.fw.exec("iptables", "-w", "-S", "PAIRWALL", check=False).stdout


def reload_with(fw, fail_open):
    text = fw.config.read_text()
    text = text.replace("fail_open = true", "fail_open = false").replace("[queue]\nmaxlen = 1\n", "[queue]\n")
    text = text.replace("[queue]\n", "[queue]\nmaxlen = 1\n")
    if fail_open:
        text = text.replace("fail_open = false", "fail_open = true")
    fw.config.write_text(text)
    out = fw.ctl("reload")
    assert "which a reload does not take" not in out.stdout + out.stderr, out


def test_reload_switches_fail_open(lan, daemon_factory):
    fw = daemon_factory(fail_open=False)
    reload_with(fw, False)  # the queue cut to one packet
    assert fw.json("status").get("fail_open", False) is False
    assert "NFQUEUE" in hooks(lan) and "--queue-bypass" not in hooks(lan)
    burst(lan)
    closed = drops(fw)
    assert closed > 0

    reload_with(fw, True)
    assert fw.json("status")["fail_open"] is True
    assert "reload: hooks replaced (chain PAIRWALL): forward, fail-open" in fw.log_text()
    assert "--queue-bypass" in hooks(lan), hooks(lan)
    assert "fail-open" in fw.ctl("status").stdout
    burst(lan)
    assert drops(fw) == closed  # what found the queue full passed

    reload_with(fw, False)
    assert "--queue-bypass" not in hooks(lan)
    burst(lan)
    assert drops(fw) > closed

    # Fail-open again, then stopped: its hooks go with it, as a fail-open node's do.
    reload_with(fw, True)
    assert fw.stop() == 0
    assert "NFQUEUE" not in hooks(lan), hooks(lan)


def reload_queue(fw, lines):
    """Rewrites the daemon's [queue] section with `lines` in place of its hooks setting and reloads."""
    text = fw.config.read_text()
    head, rest = text.split("[queue]\n", 1)
    rest = "".join(l + "\n" for l in rest.splitlines() if not l.startswith(("hooks", "exclude_interfaces")))
    fw.config.write_text(head + "[queue]\n" + lines + rest)
    out = fw.ctl("reload")
    assert "which a reload does not take" not in out.stdout + out.stderr, out


def test_reload_changes_what_the_hooks_queue(lan, daemon_factory):
    serve_on_fw(lan)
    fw = daemon_factory(rules=LOCAL_RULES)
    assert lan.connect_to_fw(4, BLOCKED)["result"] == "ok"  # the node's own traffic is not queued
    assert lan.connect(4, BLOCKED, timeout=1.0)["result"] == "timeout"

    reload_queue(fw, 'hooks = "forward+local"\n')
    assert "-A INPUT -j PAIRWALL" in lan.fw.exec("iptables", "-w", "-S", "INPUT").stdout
    assert lan.connect_to_fw(4, BLOCKED, timeout=1.0)["result"] == "timeout"

    # The client's interface excluded: forwarded or not, its traffic passes unqueued.
    reload_queue(fw, 'hooks = "forward+local"\nexclude_interfaces = ["f0"]\n')
    assert "-A PAIRWALL -i f0 -j RETURN" in hooks(lan), hooks(lan)
    assert lan.connect_to_fw(4, BLOCKED)["result"] == "ok"
    assert lan.connect(4, BLOCKED)["result"] == "ok"

    reload_queue(fw, 'hooks = "forward"\n')
    assert "-j PAIRWALL" not in lan.fw.exec("iptables", "-w", "-S", "INPUT").stdout
    assert lan.connect(4, BLOCKED, timeout=1.0)["result"] == "timeout"
    assert lan.connect_to_fw(4, BLOCKED)["result"] == "ok"
    assert fw.proc.poll() is None
