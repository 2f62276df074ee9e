"""A reload takes [queue] maxlen and rcvbuf_bytes on the running queues: an operator whose queues
overflow under load raises them without the restart that would hand a pair's group over. The kernel
holds what the reload says: a burst that the default length of 65,536 packets takes whole overflows
a queue cut to one packet, and the kernel counts the packets it dropped for want of room."""

from daemon_net import ALLOWED, SERVER4, UDP_PORT, metric

BURST = 3000
SEND = f"""
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range({BURST}):
    s.sendto(b"x" * 32, ("{SERVER4}", {UDP_PORT}))
"""


def queue(fw):
    """The first queue's part of `pairwallctl status --json`."""
    return fw.json("status")["queues"][0]


def burst(lan):
    lan.client.exec(lan.python, "-c", SEND, timeout=30)


def reload_with(fw, settings):
    """Rewrites the daemon's [queue] section with `settings` added and reloads."""
    text = fw.config.read_text()
    head, rest = text.split("[queue]\n", 1)
    rest = "".join(l + "\n" for l in rest.splitlines() if not l.startswith(("maxlen", "rcvbuf_bytes", "gso")))
    fw.config.write_text(head + "[queue]\n" + settings + rest)
    out = fw.ctl("reload")
    assert "which a reload does not take" not in out.stdout + out.stderr, out


def test_reload_takes_queue_limits(lan, daemon_factory):
    fw = daemon_factory()
    q = queue(fw)
    assert q["max_len"] == 65536, q
    start_rcvbuf = int(q["rcvbuf_bytes"])

    # The default length takes the whole burst.
    burst(lan)
    assert int(queue(fw).get("drops", 0)) == 0

    # One packet and a 1 MiB buffer: the kernel says so, and drops what finds the queue full.
    reload_with(fw, "maxlen = 1\nrcvbuf_bytes = 1048576\n")
    q = queue(fw)
    assert q["max_len"] == 1, q
    assert int(q["rcvbuf_bytes"]) == 2 * 1048576 != start_rcvbuf, q  # the kernel doubles the request
    assert "reload: queues hold 65536 -> 1 packets" in fw.log_text()
    assert metric(lan, 'pairwall_queue_max_len{queue="0"}') == 1
    assert metric(lan, 'pairwall_queue_rcvbuf_bytes{queue="0"}') == 2 * 1048576
    burst(lan)
    dropped = int(queue(fw).get("drops", 0))
    assert dropped > 0

    # Raised again: the same burst passes whole.
    reload_with(fw, "maxlen = 65536\n")
    assert queue(fw)["max_len"] == 65536
    burst(lan)
    assert int(queue(fw).get("drops", 0)) == dropped
    assert fw.proc.poll() is None


# Sends and reads at once: a client that sends the whole 2 MiB before reading deadlocks whenever the
# socket buffers on the way hold less, and the echo server, its own send stuck, gives up after a
# second and resets the connection.
BULK = f"""
import socket, threading
s = socket.create_connection(("{SERVER4}", {ALLOWED}), timeout=10)
data = b"x" * (1 << 21)
threading.Thread(target=s.sendall, args=(data,), daemon=True).start()
got = 0
while got < len(data):
    chunk = s.recv(1 << 16)
    if not chunk:
        break
    got += len(chunk)
print(got)
"""


def mean_packet_bytes(fw, transfer):
    """The mean size of the packets the queue saw while `transfer` ran."""
    before = queue(fw)
    transfer()
    after = queue(fw)
    packets = int(after["packets"]) - int(before.get("packets", 0))
    return (int(after["bytes"]) - int(before.get("bytes", 0))) / packets


def test_reload_takes_gso(lan, daemon_factory):
    """[queue] gso: on, the kernel queues TCP's GSO packets whole (tens of KB each); a reload that
    turns it off has the kernel cut them to the MTU before queueing, and one that turns it on again
    restores it."""
    fw = daemon_factory()

    def bulk():
        out = lan.client.exec(lan.python, "-c", BULK, timeout=60).stdout
        assert int(out) == 1 << 21, out

    assert mean_packet_bytes(fw, bulk) > 3000
    reload_with(fw, "gso = false\n")
    assert "reload: gso on -> off" in fw.log_text()
    assert mean_packet_bytes(fw, bulk) <= 1500
    reload_with(fw, "gso = true\n")
    assert mean_packet_bytes(fw, bulk) > 3000
