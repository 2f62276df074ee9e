"""`block return` through the real daemon on the node's own traffic (hooks = "forward+local"): a UDP
datagram to the firewall's inside address is answered with a port unreachable, one to the inside
network's broadcast address (10.77.1.255, as a NetBIOS name query is sent) is dropped without an
answer, as RFC 1122 3.2.2 asks: every host of the network would hear it. The client counts the
unreachables that quote its datagrams on a raw ICMP socket."""

from daemon_net import FW_IN4

RULES = """\
block return in on f0 inet proto udp to port 137
"""

# Sends three datagrams to DST:137 from one socket, then counts for 1.5 s the ICMP destination
# unreachables that quote that socket's port.
COUNT_ANSWERS = """
import select, socket, sys, time
icmp = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
udp.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
udp.bind(("0.0.0.0", 0))
port = udp.getsockname()[1]
for _ in range(3):
    udp.sendto(b"x" * 50, (sys.argv[1], 137))
answers, deadline = 0, time.monotonic() + 1.5
while (left := deadline - time.monotonic()) > 0:
    if not select.select([icmp], [], [], left)[0]:
        break
    data = icmp.recv(2048)
    icmp_at = (data[0] & 15) * 4
    quote = data[icmp_at + 8:]
    quoted_udp = (quote[0] & 15) * 4 if quote else 0
    if data[icmp_at] == 3 and int.from_bytes(quote[quoted_udp:quoted_udp + 2], "big") == port:
        answers += 1
print(answers)
"""


def answers_to(lan, dst):
    return int(lan.client.exec(lan.python, "-c", COUNT_ANSWERS, dst).stdout.strip())


def test_reject_leaves_broadcasts_unanswered(lan, daemon_factory):
    fw = daemon_factory(hooks="forward+local", rules=RULES)
    before = fw.reasons().get("rule_block", 0)
    assert answers_to(lan, FW_IN4) == 3, fw.reasons()
    assert answers_to(lan, "10.77.1.255") == 0, fw.reasons()
    # Both were the block rule's: the broadcasts reached the rules and were dropped there.
    assert fw.reasons().get("rule_block", 0) >= before + 6, fw.reasons()
