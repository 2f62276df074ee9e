"""`received-on` in the running daemon: an out pass's rule tests the interface a forwarded packet
arrived on. Out on the server side, port 8081 passes only what arrived on the client side; a rule
that wants it arrived on the server side never matches client traffic, and a quick block of what
did not arrive on the client side leaves the client's connections alone."""

from daemon_net import ALLOWED, BLOCKED, RULES, settle

ARRIVED_RULES = (
    RULES
    + "pass in on $in_if proto tcp to port 8081\n"
    + "pass out on $out_if proto tcp to port 8081 received-on $out_if\n"
    + "block out quick on $out_if proto tcp received-on ! $in_if\n"
)
WANTS_SERVER_SIDE = "pass out on f1 proto tcp from any to any port 8081 flags S/SA keep state received-on f1"
QUICK_BLOCK = "block out quick on f1 proto tcp all received-on ! f0"


def test_received_on_lets_out_what_arrived_inside(lan, tmp_path, daemon_factory):
    fw = daemon_factory(rules=ARRIVED_RULES)
    shown = fw.ctl("rules", "show").stdout
    assert WANTS_SERVER_SIDE in shown and QUICK_BLOCK in shown, shown

    for family in (4, 6):
        assert lan.connect(family, ALLOWED)["result"] == "ok", family
        assert lan.connect(family, BLOCKED, timeout=1.0)["result"] == "timeout", family
    settle()
    assert fw.decided(QUICK_BLOCK) == 0, fw.reasons()
    assert fw.decided(WANTS_SERVER_SIDE) == 0, fw.reasons()

    # Arrived on the client side: now the out pass lets it by.
    changed = tmp_path / "arrived-inside.conf"
    changed.write_text(ARRIVED_RULES.replace("port 8081 received-on $out_if", "port 8081 received-on $in_if"))
    fw.json("rules", "load", changed)
    for family in (4, 6):
        assert lan.connect(family, BLOCKED)["result"] == "ok", family
    settle()
    assert fw.decided(WANTS_SERVER_SIDE.replace("received-on f1", "received-on f0")) == 2, fw.reasons()
