"""The sync and failover keys change while both nodes run, in the three reloads README's "Changing
the keys" gives. At no step does a node refuse what the other signs: the master keeps its group and
the sync link stays up. The counters of what arrived under the second key show that each reload
took effect: a node that has moved to the new key is heard under it by a node that has not."""

import signal
import time

from failover_net import KEY, METRICS_PORT, SYNC_KEY

# Slow enough that a busy host does not make the backup take over while the test waits.
ADVBASE_MS = 400


def metrics(p, node):
    """Every sample of the node's /metrics: {(name, frozenset(labels)): value}."""
    script = (f"import urllib.request; print(urllib.request.urlopen("
              f"'http://127.0.0.1:{METRICS_PORT}/metrics', timeout=5).read().decode())")
    out = {}
    for line in p.nsexec(node, "/usr/bin/python3", "-c", script).stdout.splitlines():
        if not line or line.startswith("#"):
            continue
        key, value = line.rsplit(" ", 1)
        name, _, labels = key.partition("{")
        pairs = (kv.split("=", 1) for kv in labels.rstrip("}").split(",") if kv)
        out[(name, frozenset((k, v.strip('"')) for k, v in pairs))] = float(value)
    return out


def sample(m, name, **labels):
    want = frozenset(labels.items())
    return sum(v for (n, l), v in m.items() if n == name and want <= l)


def write_key(p, name, text):
    path = p.dir / name
    path.write_text(text + "\n")
    path.chmod(0o600)
    return path


class Keys:
    """The key files of both nodes' [sync] and [failover] sections, changed by SIGHUP."""

    def __init__(self, p):
        self.p = p
        self.reloads = {"a": 0, "b": 0}
        write_key(p, "sync-old.key", SYNC_KEY)
        write_key(p, "sync-new.key", "another-sync-key-fedcba9876543210fedcba98")
        write_key(p, "failover-old.key", KEY)
        write_key(p, "failover-new.key", "another-failover-key-fedcba98765")

    def set(self, node, key, accept):
        """key_file `key`, accept_key_file `accept` (None: none), in both sections; then a reload."""
        path = self.p.dir / f"{node}-pairwalld.toml"
        head, tail = path.read_text().split("[failover]", 1)

        def keyed(section, prefix):
            kept = [line for line in section.rstrip("\n").split("\n")
                    if not line.startswith(("key_file", "accept_key_file"))]
            kept.append(f'key_file = "{self.p.dir / (prefix + key)}.key"')
            if accept:
                kept.append(f'accept_key_file = "{self.p.dir / (prefix + accept)}.key"')
            return "\n".join(kept) + "\n"

        path.write_text(keyed(head, "sync-") + "\n[failover]" + keyed(tail, "failover-"))
        self.p.procs[(node, "failoverd")].send_signal(signal.SIGHUP)
        self.reloads[node] += 1
        self.p.wait_for(lambda: self.p.log(node).count("SIGHUP: keys re-read") >= self.reloads[node], 5,
                        what=f"{node} re-read its keys")


def on_second_key(p, node):
    m = metrics(p, node)
    return (sample(m, "pairwall_sync_datagrams_on_accept_key_total"),
            sample(m, "pairwall_failover_adverts_on_accept_key_total"))


def refused(p, node):
    m = metrics(p, node)
    return (sample(m, "pairwall_sync_drops_total", reason="bad_tag"),
            sample(m, "pairwall_failover_adverts_rejected_total", reason="bad_tag"))


def test_sync_and_failover_keys_change_in_three_reloads_without_a_gap(pair_factory):
    p = pair_factory(advbase_ms=ADVBASE_MS, ipv6=False, daemon="pairwalld")
    keys = Keys(p)
    p.start("a")
    p.wait_for(lambda: p.role("a") == "master", 10, what="a master")
    p.start("b")
    p.wait_roles({"a": "master", "b": "backup"}, timeout=5)
    for node in ("a", "b"):
        keys.set(node, "old", None)  # the same keys, from the files this test rewrites
    p.wait_for(lambda: sample(metrics(p, "b"), "pairwall_sync_peer_state", state="up") == 1, 10, what="sync up")

    def settle():
        time.sleep(3 * ADVBASE_MS / 1000)  # three advertisements, six sync keepalives

    # 1. Both accept the new key; both still sign with the old one.
    keys.set("a", "old", "new")
    keys.set("b", "old", "new")
    settle()
    assert on_second_key(p, "b") == (0, 0)

    # 2. a signs with the new key first: b hears both its sync datagrams and its advertisements under
    # its second key, and a hears b's (b is backup: sync alone) under its own second key.
    keys.set("a", "new", "old")
    settle()
    b_sync, b_adverts = on_second_key(p, "b")
    assert b_sync > 0 and b_adverts > 0
    a_sync, _ = on_second_key(p, "a")
    assert a_sync > 0
    keys.set("b", "new", "old")
    settle()
    # Both sign with the new key now: nothing more arrives under the old one.
    before = on_second_key(p, "a"), on_second_key(p, "b")
    settle()
    assert (on_second_key(p, "a"), on_second_key(p, "b")) == before

    # 3. The old key is forgotten.
    keys.set("a", "new", None)
    keys.set("b", "new", None)
    settle()

    for node in ("a", "b"):
        assert refused(p, node) == (0, 0), p.log(node)
        assert sample(metrics(p, node), "pairwall_sync_peer_state", state="up") == 1
    assert (p.role("a"), p.role("b")) == ("master", "backup")
    assert p.last_transition("b", "master") is None
