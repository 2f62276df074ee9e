#!/usr/bin/python3
"""Lab traffic: long-lived TCP connections, a UDP echo flow and a 10 ms ping, with sequence checks.

Runs inside the lab's namespaces, one process per side, standard library only so it can be started as a
plain script by `ip netns exec`:

  traffic.py server --port 5201 --udp-port 5202 --duration 60
  traffic.py client --server 10.10.2.10 --connections 200 --duration 12 --samples s.jsonl --summary r.json

Dual stack: the server with --bind6 ADDR listens there too, and the client with --server6 ADDR opens every
other connection to it and sends each probe in both families (the summary's ping6 and udp6).

TCP: each connection carries fixed-size records both ways every --interval-ms. A record holds the sender's
sequence number and the highest sequence it has received in order from the other side, so the client sees
both directions of every connection (server-to-client by arrival, client-to-server by the echoed ack). A
record out of order, a bad magic, a reset or an EOF ends the connection; the client reconnects (that
connection no longer counts as surviving). The server aborts (RST) on a sequence violation so the client
learns of it.

UDP: the client sends a datagram every --probe-ms; the server echoes it. Ping: ICMP echo every --probe-ms
over a raw socket. For both, the client keeps the send time, reply time and the reply's IP TTL: the lab's
firewalls stamp probe replies with a per-node TTL, so each reply tells which node forwarded it.

Every 100 ms the client appends one JSON line of counters to --samples; at the end it writes --summary
(per-connection results and every probe). The server's --summary says what it saw: every connection it
accepted (peer address and port, accept time, last record received) and every UDP peer, which is how a
translating pair shows on the server's side. Both processes stop after --duration seconds whatever happens.
"""

import argparse
import asyncio
import json
import os
import signal
import socket
import struct
import sys
import time

MAGIC = 0x50574C31  # "PWL1"
# magic, connection id, sequence, ack (highest in-order sequence received from the peer), send time
RECORD_HEAD = struct.Struct("!IIQQd")
UDP_HEAD = struct.Struct("!IQd")
ICMP_ECHO_REQUEST = 8
ICMP_ECHO_REPLY = 0
ICMP6_ECHO_REQUEST = 128
ICMP6_ECHO_REPLY = 129
# Linux values (in.h); Python's socket module does not export IP_RECVTTL.
IP_RECVTTL = getattr(socket, "IP_RECVTTL", 12)
IP_TTL = socket.IP_TTL
SAMPLE_PERIOD_S = 0.1
# Time after the last probe during which late replies are still counted.
REPLY_GRACE_S = 1.0


def now():
    # CLOCK_MONOTONIC is one clock for every network namespace (no time namespace is used), so the
    # orchestrator's kill instant and these timestamps compare directly.
    return time.monotonic()


def pack_record(size, conn_id, seq, ack):
    head = RECORD_HEAD.pack(MAGIC, conn_id, seq, ack, now())
    return head + b"\0" * (size - len(head))


class RecordReader:
    """Splits a byte stream into fixed-size records and checks their sequence."""

    def __init__(self, size):
        self.size = size
        self.buf = bytearray()
        self.expected = 1
        self.last_ack = 0

    def feed(self, data):
        """Returns (records, acks advanced?, error or None)."""
        self.buf += data
        count = 0
        acked = False
        off = 0
        while len(self.buf) - off >= self.size:
            magic, _cid, seq, ack, _ts = RECORD_HEAD.unpack_from(self.buf, off)
            off += self.size
            if magic != MAGIC:
                del self.buf[:off]
                return count, acked, "bad-magic"
            if seq != self.expected:
                del self.buf[:off]
                return count, acked, f"sequence: expected {self.expected}, got {seq}"
            self.expected += 1
            if ack > self.last_ack:
                self.last_ack = ack
                acked = True
            count += 1
        del self.buf[:off]
        return count, acked, None


# ---------------------------------------------------------------------------------------------- server


class ServerConn(asyncio.Protocol):
    def __init__(self, server):
        self.server = server
        self.reader = RecordReader(server.args.record)
        self.transport = None
        self.seq = 0
        self.paused = False

    def connection_made(self, transport):
        self.transport = transport
        self.server.conns.add(self)
        # What the server sees of each connection (its peer is the client, or whoever translated it).
        host, port = transport.get_extra_info("peername")[:2]
        self.seen = {"peer": [host, port], "accepted": now(), "last_rx": None, "rx_records": 0, "closed": None}
        self.server.accepted.append(self.seen)

    def data_received(self, data):
        n, _acked, err = self.reader.feed(data)
        if n:
            self.seen["last_rx"] = now()
            self.seen["rx_records"] += n
        if err:
            self.server.violations += 1
            # An abort sends RST: the client must see that its stream was broken.
            self.transport.abort()

    def connection_lost(self, exc):
        self.server.conns.discard(self)
        self.seen["closed"] = now()

    def pause_writing(self):
        self.paused = True

    def resume_writing(self):
        self.paused = False

    def tick(self):
        if self.paused or self.transport.is_closing():
            return
        self.seq += 1
        self.transport.write(pack_record(self.server.args.record, 0, self.seq, self.reader.expected - 1))


class UdpEcho(asyncio.DatagramProtocol):
    """Echoes on one socket; the counters are the server's, shared by its sockets of both families."""

    def __init__(self, server):
        self.server = server
        self.transport = None

    def connection_made(self, transport):
        self.transport = transport

    def datagram_received(self, data, addr):
        self.server.udp_echoed += 1
        t = now()
        seen = self.server.udp_peers.setdefault(addr[:2], {"peer": list(addr[:2]), "first": t, "last": t,
                                                           "datagrams": 0})
        seen["last"] = t
        seen["datagrams"] += 1
        self.transport.sendto(data, addr)


class Server:
    def __init__(self, args):
        self.args = args
        self.conns = set()
        self.accepted = []  # ServerConn.seen of every connection accepted, in order
        self.violations = 0
        self.udp_echoed = 0
        self.udp_peers = {}  # (address, port) -> {"first", "last", "datagrams"}

    async def ticker(self):
        period = self.args.interval_ms / 1000.0
        next_t = now()
        while True:
            next_t += period
            for c in list(self.conns):
                c.tick()
            await asyncio.sleep(max(0.0, next_t - now()))

    async def run(self):
        loop = asyncio.get_running_loop()
        hosts = [self.args.bind] + ([self.args.bind6] if self.args.bind6 else [])
        srv = await loop.create_server(lambda: ServerConn(self), host=hosts, port=self.args.port,
                                       backlog=4096, reuse_address=True)
        udp_transports = [(await loop.create_datagram_endpoint(lambda: UdpEcho(self),
                                                               local_addr=(host, self.args.udp_port)))[0]
                          for host in hosts]
        tick = asyncio.ensure_future(self.ticker())
        stop = loop.create_future()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, lambda: stop.done() or stop.set_result(None))
        print("ready", flush=True)
        try:
            await asyncio.wait_for(stop, timeout=self.args.duration)
        except asyncio.TimeoutError:
            pass
        tick.cancel()
        srv.close()
        for c in list(self.conns):
            c.transport.close()
        for udp_tr in udp_transports:
            udp_tr.close()
        if self.args.summary:
            write_json(self.args.summary, {"violations": self.violations, "udp_echoed": self.udp_echoed,
                                           "conns": self.accepted, "udp_peers": list(self.udp_peers.values())})


# ---------------------------------------------------------------------------------------------- client


class ClientConn(asyncio.Protocol):
    def __init__(self, client, conn):
        self.client = client
        self.conn = conn
        self.reader = RecordReader(client.args.record)
        self.transport = None
        self.seq = 0
        self.paused = False

    def connection_made(self, transport):
        self.transport = transport
        sock = transport.get_extra_info("socket")
        # Small records must not wait for Nagle: a stall would hide in the coalescing.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data):
        t = now()
        c = self.conn
        n, acked, err = self.reader.feed(data)
        c["rx_bytes"] += len(data)
        self.client.tick_rx_bytes += len(data)
        if n:
            if c["last_rx"] is not None:
                gap = t - c["last_rx"]
                if gap > c["max_rx_gap"]:
                    c["max_rx_gap"], c["max_rx_gap_end"] = gap, t
            c["last_rx"] = t
            c["rx_records"] += n
            self.client.tick_progress.add(c["id"])
        if acked:
            self.client.tick_acked_bytes += (self.reader.last_ack - c["acked"]) * self.client.args.record
            if c["last_ack"] is not None:
                gap = t - c["last_ack"]
                if gap > c["max_ack_gap"]:
                    c["max_ack_gap"], c["max_ack_gap_end"] = gap, t
            c["last_ack"] = t
            c["acked"] = self.reader.last_ack
        if err:
            self.client.fail(self, t, err)
            self.transport.abort()

    def connection_lost(self, exc):
        if self.client.stopping:
            return
        kind = "eof" if exc is None else type(exc).__name__
        self.client.fail(self, now(), kind)

    def pause_writing(self):
        self.paused = True

    def resume_writing(self):
        self.paused = False

    def tick(self):
        if self.paused or self.transport is None or self.transport.is_closing():
            return
        self.seq += 1
        self.conn["tx_records"] += 1
        self.client.tick_tx_bytes += self.client.args.record
        self.transport.write(pack_record(self.client.args.record, self.conn["id"], self.seq,
                                         self.reader.expected - 1))


class Client:
    def __init__(self, args):
        self.args = args
        self.stopping = False
        # With --server6, every other connection is IPv6's.
        self.conns = [self.new_conn_record(i, "inet6" if args.server6 and i % 2 else "inet")
                      for i in range(args.connections)]
        self.protos = {}
        self.failures = 0
        self.tick_rx_bytes = 0
        self.tick_tx_bytes = 0
        self.tick_acked_bytes = 0
        self.tick_progress = set()
        self.ping = []  # [send_t, reply_t | None, ttl | None]
        self.udp = []
        self.ping6 = []  # the same in IPv6 (--server6), the hop limit for the TTL
        self.udp6 = []
        self.churn = []  # [start, end | None, "ok" | failure kind | None]
        self.ident = os.getpid() & 0xFFFF
        self.samples_out = None

    @staticmethod
    def new_conn_record(i, family):
        return {"id": i, "family": family, "established": None, "failures": [], "reconnects": 0, "rx_bytes": 0,
                "rx_records": 0, "tx_records": 0, "acked": 0, "last_rx": None, "last_ack": None,
                "max_rx_gap": 0.0, "max_rx_gap_end": None, "max_ack_gap": 0.0, "max_ack_gap_end": None}

    def fail(self, proto, t, kind):
        c = proto.conn
        if self.protos.get(c["id"]) is not proto:
            return  # an old connection's late callback
        self.failures += 1
        c["failures"].append([t, kind])
        self.protos.pop(c["id"], None)
        if not self.stopping and c["reconnects"] < self.args.max_reconnects:
            asyncio.get_running_loop().call_later(0.1, lambda: asyncio.ensure_future(self.connect(c)))

    async def connect(self, c):
        if self.stopping:
            return
        loop = asyncio.get_running_loop()
        if c["established"] is not None:
            c["reconnects"] += 1
        try:
            _tr, proto = await asyncio.wait_for(
                loop.create_connection(lambda: ClientConn(self, c),
                                       self.args.server6 if c["family"] == "inet6" else self.args.server,
                                       self.args.port),
                timeout=3.0)
        except (OSError, asyncio.TimeoutError) as e:
            c["failures"].append([now(), "connect:" + type(e).__name__])
            if not self.stopping and c["reconnects"] < self.args.max_reconnects:
                loop.call_later(0.2, lambda: asyncio.ensure_future(self.connect(c)))
            return
        if c["established"] is None:
            c["established"] = now()
        self.protos[c["id"]] = proto

    async def churn_one(self):
        """One short connection: connect, one record each way, close. Result kept as [start, end, ok|kind]."""
        t = now()
        entry = [t, None, None]
        self.churn.append(entry)
        writer = None
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(self.args.server, self.args.port), timeout=3.0)
            writer.write(pack_record(self.args.record, 0xFFFFFFFF, 1, 0))
            head = await asyncio.wait_for(reader.readexactly(self.args.record), timeout=3.0)
            magic, _cid, seq, _ack, _ts = RECORD_HEAD.unpack_from(head)
            entry[2] = "ok" if magic == MAGIC and seq == 1 else "bad-record"
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as e:
            entry[2] = type(e).__name__
        finally:
            entry[1] = now()
            if writer is not None:
                writer.close()

    async def churn_ticker(self):
        period = 1.0 / self.args.churn_per_s
        next_t = now()
        pending = set()
        while True:
            next_t += period
            task = asyncio.ensure_future(self.churn_one())
            pending.add(task)
            task.add_done_callback(pending.discard)
            await asyncio.sleep(max(0.0, next_t - now()))

    async def tcp_ticker(self):
        period = self.args.interval_ms / 1000.0
        next_t = now()
        while True:
            next_t += period
            for p in list(self.protos.values()):
                p.tick()
            await asyncio.sleep(max(0.0, next_t - now()))

    async def probe_ticker(self, families):
        """families: (ping socket or None, its probes, echo request type, server, UDP socket, its probes) for
        IPv4, and for IPv6 with --server6."""
        period = self.args.probe_ms / 1000.0
        next_t = now()
        seq = 0
        while True:
            next_t += period
            seq += 1
            t = now()
            for ping_sock, pings, request, server, udp_sock, udps in families:
                if ping_sock is not None:
                    pings.append([t, None, None])
                    try:
                        ping_sock.sendto(icmp_echo(self.ident, seq & 0xFFFF, len(pings) - 1, request), (server, 0))
                    except OSError:
                        pass  # no route while the VIP moves: counts as lost
                udps.append([t, None, None])
                try:
                    udp_sock.send(UDP_HEAD.pack(MAGIC, len(udps) - 1, t))
                except OSError:
                    pass
            await asyncio.sleep(max(0.0, next_t - now()))

    def on_ping_reply(self, sock):
        while True:
            try:
                pkt = sock.recv(2048)
            except (BlockingIOError, InterruptedError):
                return
            t = now()
            ihl = (pkt[0] & 0x0F) * 4
            if len(pkt) < ihl + 8 + 4:
                continue
            ttl = pkt[8]
            icmp_type, _code, _ck, ident, _seq = struct.unpack_from("!BBHHH", pkt, ihl)
            if icmp_type != ICMP_ECHO_REPLY or ident != self.ident:
                continue
            (index,) = struct.unpack_from("!I", pkt, ihl + 8)
            if index < len(self.ping) and self.ping[index][1] is None:
                self.ping[index][1] = t
                self.ping[index][2] = ttl

    def on_ping6_reply(self, sock):
        # A raw ICMPv6 socket reads the message without the IPv6 header: the hop limit comes as ancillary data.
        while True:
            try:
                pkt, anc, _flags, _addr = sock.recvmsg(2048, socket.CMSG_SPACE(4))
            except (BlockingIOError, InterruptedError):
                return
            t = now()
            if len(pkt) < 8 + 4:
                continue
            icmp_type, _code, _ck, ident, _seq = struct.unpack_from("!BBHHH", pkt, 0)
            if icmp_type != ICMP6_ECHO_REPLY or ident != self.ident:
                continue
            (index,) = struct.unpack_from("!I", pkt, 8)
            if index < len(self.ping6) and self.ping6[index][1] is None:
                self.ping6[index][1] = t
                self.ping6[index][2] = hop_limit(anc)

    def on_udp_reply(self, sock, probes, reply_ttl):
        """reply_ttl: how the reply's TTL (IPv4) or hop limit (IPv6) is read from its ancillary data."""
        while True:
            try:
                data, anc, _flags, _addr = sock.recvmsg(256, socket.CMSG_SPACE(4))
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                continue  # ICMP unreachable reported on the connected socket while routes move
            t = now()
            if len(data) < UDP_HEAD.size:
                continue
            magic, index, _ts = UDP_HEAD.unpack_from(data)
            if magic != MAGIC or index >= len(probes) or probes[index][1] is not None:
                continue
            probes[index][1] = t
            probes[index][2] = reply_ttl(anc)

    async def sampler(self):
        next_t = now()
        ping_i = udp_i = ping6_i = udp6_i = 0
        while True:
            next_t += SAMPLE_PERIOD_S
            await asyncio.sleep(max(0.0, next_t - now()))
            t = now()
            # Probes sent in the last period, judged by their replies so far; a late reply is counted in
            # the summary, not retroactively here.
            ping_new = self.ping[ping_i:]
            udp_new = self.udp[udp_i:]
            ping_i, udp_i = len(self.ping), len(self.udp)
            ping6_new = self.ping6[ping6_i:]
            udp6_new = self.udp6[udp6_i:]
            ping6_i, udp6_i = len(self.ping6), len(self.udp6)
            rtts = [(r - s) * 1000 for s, r, _ in ping_new if r is not None]
            ttls = {}
            for _s, r, ttl in ping_new + udp_new + ping6_new + udp6_new:
                if r is not None:
                    ttls[str(ttl)] = ttls.get(str(ttl), 0) + 1
            line = {"t": round(t, 4), "tcp_rx_bytes": self.tick_rx_bytes, "tcp_tx_bytes": self.tick_tx_bytes,
                    "tcp_acked_bytes": self.tick_acked_bytes,
                    "tcp_alive": len(self.protos), "tcp_progressing": len(self.tick_progress),
                    "tcp_failures": self.failures, "ping_sent": len(ping_new), "ping_rcvd": len(rtts),
                    "ping_rtt_ms": round(sum(rtts) / len(rtts), 3) if rtts else None,
                    "udp_sent": len(udp_new), "udp_rcvd": sum(1 for _s, r, _ in udp_new if r is not None),
                    "reply_ttl": ttls}
            if self.args.server6:
                rtts6 = [(r - s) * 1000 for s, r, _ in ping6_new if r is not None]
                line.update({"ping6_sent": len(ping6_new), "ping6_rcvd": len(rtts6),
                             "ping6_rtt_ms": round(sum(rtts6) / len(rtts6), 3) if rtts6 else None,
                             "udp6_sent": len(udp6_new),
                             "udp6_rcvd": sum(1 for _s, r, _ in udp6_new if r is not None)})
            self.tick_rx_bytes = self.tick_tx_bytes = self.tick_acked_bytes = 0
            self.tick_progress = set()
            if self.samples_out:
                self.samples_out.write(json.dumps(line) + "\n")
                self.samples_out.flush()

    async def run(self):
        loop = asyncio.get_running_loop()
        args = self.args
        stop = loop.create_future()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, lambda: stop.done() or stop.set_result(None))
        if args.samples:
            self.samples_out = open(args.samples, "w", encoding="utf-8")

        # Open the connections in waves so the SYN burst does not overflow the listen queue.
        for i in range(0, len(self.conns), 50):
            await asyncio.gather(*(self.connect(c) for c in self.conns[i:i + 50]))
        established = sum(1 for c in self.conns if c["established"] is not None)

        ping_sock = None
        try:
            ping_sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
            ping_sock.setblocking(False)
            loop.add_reader(ping_sock.fileno(), self.on_ping_reply, ping_sock)
        except PermissionError:
            print("warning: no raw socket (not root): ping disabled", file=sys.stderr)
        udp_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        udp_sock.setsockopt(socket.IPPROTO_IP, IP_RECVTTL, 1)
        udp_sock.setblocking(False)
        udp_sock.connect((args.server, args.udp_port))
        loop.add_reader(udp_sock.fileno(), self.on_udp_reply, udp_sock, self.udp, ip_ttl)
        families = [(ping_sock, self.ping, ICMP_ECHO_REQUEST, args.server, udp_sock, self.udp)]
        ping6_sock = None
        if args.server6:
            if ping_sock is not None:
                ping6_sock = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
                ping6_sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVHOPLIMIT, 1)
                ping6_sock.setblocking(False)
                loop.add_reader(ping6_sock.fileno(), self.on_ping6_reply, ping6_sock)
            udp6_sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
            udp6_sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVHOPLIMIT, 1)
            udp6_sock.setblocking(False)
            udp6_sock.connect((args.server6, args.udp_port))
            loop.add_reader(udp6_sock.fileno(), self.on_udp_reply, udp6_sock, self.udp6, hop_limit)
            families.append((ping6_sock, self.ping6, ICMP6_ECHO_REQUEST, args.server6, udp6_sock, self.udp6))

        start = now()
        senders = [asyncio.ensure_future(self.probe_ticker(families))]
        if args.churn_per_s > 0:
            senders.append(asyncio.ensure_future(self.churn_ticker()))
        tasks = senders + [asyncio.ensure_future(x) for x in (self.tcp_ticker(), self.sampler())]
        print(json.dumps({"ready": True, "established": established, "t": start}), flush=True)
        try:
            await asyncio.wait_for(asyncio.shield(stop), timeout=args.duration)
        except asyncio.TimeoutError:
            pass
        end = now()
        for t in senders:
            t.cancel()  # no new probes or short connections; late replies still count
        await asyncio.sleep(REPLY_GRACE_S if not stop.done() else 0)
        self.stopping = True
        for t in tasks:
            t.cancel()
        for p in list(self.protos.values()):
            p.transport.close()
        if self.samples_out:
            self.samples_out.close()
        summary = {"start": start, "end": end, "connections": args.connections, "established": established,
                   "interval_ms": args.interval_ms, "probe_ms": args.probe_ms, "conns": self.conns,
                   "ping": self.ping, "udp": self.udp, "ping_enabled": ping_sock is not None,
                   "churn": self.churn}
        if args.server6:
            summary.update({"server6": args.server6, "ping6": self.ping6, "udp6": self.udp6})
        if args.summary:
            write_json(args.summary, summary)
        print(json.dumps({"done": True, "failures": self.failures}), flush=True)


def ip_ttl(ancillary):
    """The IPv4 TTL of a datagram read with IP_RECVTTL, or None."""
    for level, ctype, cdata in ancillary:
        if level == socket.IPPROTO_IP and ctype == IP_TTL:
            return struct.unpack("i", cdata[:4])[0]
    return None


def hop_limit(ancillary):
    """The IPv6 hop limit of a datagram read with IPV6_RECVHOPLIMIT, or None."""
    for level, ctype, cdata in ancillary:
        if level == socket.IPPROTO_IPV6 and ctype == socket.IPV6_HOPLIMIT:
            return struct.unpack("i", cdata[:4])[0]
    return None


def icmp_checksum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def icmp_echo(ident, seq, index, request=ICMP_ECHO_REQUEST):
    # The probe index rides in the payload: the 16-bit ICMP sequence wraps, the index does not. An ICMPv6
    # checksum covers the IPv6 pseudo-header, which the kernel fills in on a raw ICMPv6 socket.
    payload = struct.pack("!I", index) + b"pairwall-lab"
    head = struct.pack("!BBHHH", request, 0, 0, ident, seq)
    ck = icmp_checksum(head + payload) if request == ICMP_ECHO_REQUEST else 0
    return struct.pack("!BBHHH", request, 0, ck, ident, seq) + payload


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="mode", required=True)
    for name in ("server", "client"):
        s = sub.add_parser(name)
        s.add_argument("--port", type=int, default=5201)
        s.add_argument("--udp-port", type=int, default=5202)
        s.add_argument("--duration", type=float, required=True, help="hard bound on the run, seconds")
        s.add_argument("--record", type=int, default=200, help="TCP record size, bytes (>= 32)")
        s.add_argument("--interval-ms", type=float, default=20.0, help="TCP record period per connection")
        s.add_argument("--summary", help="JSON file written at the end")
    srv = sub.choices["server"]
    srv.add_argument("--bind", default="0.0.0.0")
    srv.add_argument("--bind6", help="an IPv6 address to listen on as well (dual stack)")
    cli = sub.choices["client"]
    cli.add_argument("--server", required=True)
    cli.add_argument("--server6", help="the server's IPv6 address: every other connection and a copy of each "
                                       "probe go there")
    cli.add_argument("--connections", type=int, default=10)
    cli.add_argument("--probe-ms", type=float, default=10.0, help="ping and UDP probe period")
    cli.add_argument("--samples", help="JSON lines, one per 100 ms")
    cli.add_argument("--max-reconnects", type=int, default=20)
    cli.add_argument("--churn-per-s", type=float, default=0.0,
                     help="short connections per second (one record each way, then closed)")
    args = p.parse_args(argv)
    if args.record < RECORD_HEAD.size:
        p.error(f"--record must be at least {RECORD_HEAD.size} bytes")
    if not 0 < args.duration <= 3600:
        p.error("--duration must be in (0, 3600] seconds")
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    # Belt and braces: whatever the event loop does, this process ends.
    signal.signal(signal.SIGALRM, lambda *_: os._exit(3))
    signal.alarm(int(args.duration) + 30)
    runner = Server(args) if args.mode == "server" else Client(args)
    asyncio.run(runner.run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
