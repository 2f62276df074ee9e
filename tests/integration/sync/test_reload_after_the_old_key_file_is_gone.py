"""A key changed as README's "Changing the keys" says, its old file then deleted: later reloads read
the files the running config names, never the ones the node started with. With the node's own
traffic queued (`hooks = "forward+local"`) the hooks leave the sync interface unqueued, and a
reload that rebuilt them from the [sync] section the node started with would read the deleted file
and fail, the rest of the reload untaken."""

import shutil

from netns import wait_until
from test_defer_holds_first_packets_until_peer_acks import connect
from test_reload_moves_the_sync_link import tcp_states


def reload(node):
    out = node.ctl("reload", check=False)
    return out.returncode, out.stdout + out.stderr


def test_a_reload_after_the_old_key_file_is_gone(make_pair):
    pair = make_pair()
    a, b = pair.a, pair.b
    for node in (a, b):
        node.config.write_text(node.config.read_text().replace("[queue]\n", '[queue]\nhooks = "forward+local"\n'))
    pair.start()

    moved = a.dir / "sync.key"
    shutil.copy(pair.key, moved)
    moved.chmod(0o600)
    a.config.write_text(a.config.read_text().replace(f'key_file = "{pair.key}"', f'key_file = "{moved}"'))
    assert reload(a)[0] == 0
    pair.key.rename(pair.key.with_suffix(".old"))  # the old file gone

    # Another reload of A, one that changes its hooks: taken.
    a.config.write_text(a.config.read_text().replace('exclude_interfaces = ["sync0"]', "exclude_interfaces = []"))
    rc, answer = reload(a)
    assert rc == 0, answer
    assert "cannot" not in answer, answer
    wait_until(lambda: "hooks replaced" in a.log_text(), 5, what="fwA's hooks replaced")
    connect(pair, 5)
    wait_until(lambda: tcp_states(b) >= 5, 5, what="fwB has the connections opened after the reloads")
