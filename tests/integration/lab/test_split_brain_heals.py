"""The advertisement path is cut both ways for 3 s: both nodes become master (split brain); once they
hear each other again, exactly one master remains within one advertisement interval (plus polling)."""

import time

from pairwall_lab import chaos, topology

from lab_support import ADVBASE_MS


def test_split_brain_heals(make_lab):
    lab = make_lab("builtin", sync=False)
    chaos.block_adverts(lab)
    try:
        deadline = time.monotonic() + 3.0
        both = False
        while time.monotonic() < deadline:
            both = both or list(lab.driver.roles().values()) == ["master", "master"]
            time.sleep(0.1)
    finally:
        chaos.clear_faults(lab)
    assert both, "the partition did not produce two masters: the scenario proves nothing"
    t0 = time.monotonic()
    while time.monotonic() - t0 < 5:
        roles = lab.driver.roles()
        if sorted(roles.values()) == ["backup", "master"]:
            break
        time.sleep(0.05)
    healed_ms = (time.monotonic() - t0) * 1000
    assert sorted(roles.values()) == ["backup", "master"], roles
    # One advertisement interval (with the largest skew) plus two role polls.
    assert healed_ms <= ADVBASE_MS * (1 + 254 / 256) + 300, f"healed after {healed_ms:.0f} ms"
    time.sleep(0.5)
    held = topology.vip_holders(lab.prefix)
    assert [n for n, v in held.items() if v] == [lab.master()], held
