"""hooks = "forward+local" also queues the node's own INPUT/OUTPUT traffic: a service on the
firewall itself is reachable only as the rules say, its replies pass by state, and loopback (the
control socket's clients, metrics scrapes) is never queued. The node's own neighbour discovery is
then filtered too, so the rules pass it (as pf rule sets do). With "forward" the node's own traffic
is not filtered at all. The node's own replies (`block return-rst`) carry the configured mark,
which the hooks let through: queued, `block all` would drop them."""

import subprocess

from daemon_net import ALLOWED, BLOCKED, PEER, REJECTED, RULES, settle

LOCAL_RULES = RULES + "pass inet6 proto icmp6 icmp6-type { neighbrsol neighbradv }\n"


def serve_on_fw(lan):
    p = lan.topo.spawn(lan.fw, [lan.python, str(PEER), "serve", "--tcp", str(ALLOWED), str(BLOCKED), "--lifetime",
                                "120"], stdout=subprocess.PIPE)
    assert b"serving" in p.stdout.readline()


def test_local_hooks_filter_the_node_itself(lan, daemon_factory):
    serve_on_fw(lan)
    fw = daemon_factory(hooks="forward+local", rules=LOCAL_RULES)
    hooks = lan.hooks_present()
    assert any("-A INPUT -j PAIRWALL" in l for l in hooks), hooks
    assert any("-A OUTPUT -j PAIRWALL" in l for l in hooks), hooks
    assert any("-i lo -j RETURN" in l for l in hooks), hooks

    before = fw.reasons()
    for family in (4, 6):
        assert lan.connect_to_fw(family, ALLOWED)["result"] == "ok"
        assert lan.connect_to_fw(family, BLOCKED, timeout=1.0)["result"] == "timeout"
    # Forwarded traffic is still filtered as before.
    assert lan.connect(4, ALLOWED)["result"] == "ok"
    assert lan.connect(4, BLOCKED, timeout=1.0)["result"] == "timeout"
    settle()
    after = fw.reasons()
    assert after["state"] > before["state"]
    assert after["rule_block"] >= before["rule_block"] + 3
    # Loopback is not queued: metrics over 127.0.0.1 still answer.
    assert "pairwall_packets_total" in lan.fw.exec("curl", "-s", "-m", "3", "http://127.0.0.1:9477/metrics").stdout


def test_local_hooks_let_the_nodes_own_replies_through_by_the_configured_mark(lan, daemon_factory):
    fw = daemon_factory(hooks="forward+local", rules=LOCAL_RULES, mark=0x100000)
    hooks = lan.hooks_present()
    assert any("-m mark --mark 0x100000/0x100000 -j RETURN" in l for l in hooks), hooks
    for family in (4, 6):
        refused = lan.connect_to_fw(family, REJECTED, timeout=3)
        assert refused["result"] == "refused", refused
    assert fw.reasons()["rule_block"] >= 2


def test_forward_hooks_leave_the_node_alone(lan, fw):
    serve_on_fw(lan)
    assert not any("INPUT" in l or "OUTPUT" in l for l in lan.hooks_present())
    assert lan.connect_to_fw(4, BLOCKED)["result"] == "ok"
