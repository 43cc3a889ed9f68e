"""What one connection may cost the daemon, against a real daemon on a Unix
socket (docs/operators.md, "What a connection may cost"): connections that
never send the HTTP/2 preface are closed after --handshake_timeout_ms and
cannot keep a well-behaved client out while they wait, wrong first bytes
are closed at once, and an HTTP/2 rapid reset (h2_abuse.py) keeps the
daemon's memory bounded.
"""

import threading
import time

import pytest

import statecache
from statecache.testing import Daemon
from statecache.v1 import statecache_pb2 as pb

import h2_abuse
from conftest import attach, identity_flags

# Low, so that the silent connections below fill it.
MAX_CONNECTIONS = 8
# Short, so that the test waits for it; the default is 10 s.
HANDSHAKE_TIMEOUT_MS = 500
# Resident memory the daemon may reach while a rapid-reset burst of
# RESET_PAIRS streams runs on one connection (it starts near 20 MiB).
RSS_BOUND = 256 << 20
RESET_PAIRS = 100000
# How far above its resident memory before the bursts the daemon may stay
# once the abusers are gone.
RSS_RETURNED = 32 << 20


def _eventually(condition, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


def _served(daemon):
    """A well-behaved client: connects, attaches, steps, reads the stats."""
    with statecache.Client.connect(daemon.address, timeout=5) as client:
        with attach(client) as session:
            assert session.step().begin_pass().send()[0].ok
        client.admin.stats()
    return True


@pytest.fixture
def gated(tmp_path):
    daemon = Daemon(identity_flags() + [
        "--max_connections=%d" % MAX_CONNECTIONS,
        "--handshake_timeout_ms=%d" % HANDSHAKE_TIMEOUT_MS])
    yield daemon
    daemon.close()


def test_silent_connections_are_closed_and_cannot_lock_a_client_out(gated):
    started = time.monotonic()
    silent = h2_abuse.open_silent(gated.address, MAX_CONNECTIONS)
    # They fill the cap, yet a client that speaks at once is served: the
    # oldest silent connection makes way for it.
    assert _served(gated), gated.log()
    # Every silent one is closed: at the cap, or after the timeout.
    assert _eventually(lambda: all(h2_abuse.closed(s) for s in silent),
                       10 * HANDSHAKE_TIMEOUT_MS / 1000), gated.log()
    assert time.monotonic() - started >= HANDSHAKE_TIMEOUT_MS / 1000
    assert "silent for the handshake timeout" in gated.log()
    for s in silent:
        s.close()
    assert _served(gated)


def test_a_silent_connection_is_not_closed_before_the_timeout(gated):
    s = h2_abuse.open_silent(gated.address, 1)[0]
    opened = time.monotonic()
    assert _eventually(lambda: h2_abuse.closed(s), 10), gated.log()
    assert time.monotonic() - opened >= 0.8 * HANDSHAKE_TIMEOUT_MS / 1000
    s.close()


def test_a_connection_that_is_not_http2_is_closed_at_once(gated):
    s = h2_abuse.connect(gated.address)
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    sent = time.monotonic()
    assert _eventually(lambda: h2_abuse.closed(s), 5), gated.log()
    # Long before the handshake timeout.
    assert time.monotonic() - sent < HANDSHAKE_TIMEOUT_MS / 1000
    s.close()
    assert _served(gated)


def test_a_preface_sent_in_pieces_is_served(gated):
    s = h2_abuse.connect(gated.address)
    preface = h2_abuse.PREFACE
    s.sendall(preface[:5])
    time.sleep(0.05)  # lets the first piece arrive alone: not a wait
    s.sendall(preface[5:] + h2_abuse.frame(0x4, 0, 0))
    # The server's SETTINGS come back, and the connection stays open past
    # the handshake timeout.
    s.settimeout(5)
    assert s.recv(9)[3] == 0x4  # a SETTINGS frame
    time.sleep(2 * HANDSHAKE_TIMEOUT_MS / 1000)  # outlives the timeout
    assert not h2_abuse.closed(s), gated.log()
    s.close()


def test_a_bad_handshake_timeout_is_a_configuration_error(tmp_path):
    for bad in ("0", "5", "600001", "x"):
        with pytest.raises(Exception):
            Daemon(identity_flags() + ["--handshake_timeout_ms=" + bad],
                   ready_timeout=10)


def test_a_rapid_reset_burst_is_cut_off_and_its_memory_returned(gated):
    """100,000 HEADERS + RST_STREAM pairs on one connection took Debian's
    gRPC to gigabytes, kept after the connection closed. The daemon shuts
    a connection that abandons streams faster than --max_resets_per_second
    and gives the memory back; a scheduler on its own connection keeps
    stepping throughout, never cut off."""
    pid = gated.process.pid
    baseline = h2_abuse.rss_bytes(pid)
    with statecache.Client.connect(gated.address, timeout=5) as client, \
            attach(client) as session:
        stop = threading.Event()
        steps = []
        failures = []

        def scheduler():
            while not stop.is_set():
                try:
                    assert session.step().begin_pass().send()[0].ok
                    steps.append(1)
                except Exception as e:  # noqa: BLE001 (reported below)
                    failures.append(e)
                    return

        runner = threading.Thread(target=scheduler)
        runner.start()
        try:
            results = [h2_abuse.rapid_reset(
                gated.address, RESET_PAIRS,
                path="/statecache.v1.StateCache/Attach", wait_close=10)
                for _ in range(2)]
        finally:
            stop.set()
            runner.join(30)
        assert not failures, failures
        assert steps
    for result in results:
        assert result.closed_by_peer, results
        assert result.pairs_sent < RESET_PAIRS, results
    assert "rapid reset" in gated.log()
    assert h2_abuse.rss_bytes(pid, "VmHWM") < RSS_BOUND, results
    # Once the abusers are gone, what their calls held goes back.
    assert _eventually(
        lambda: h2_abuse.rss_bytes(pid) < baseline + RSS_RETURNED, 10), (
        baseline, h2_abuse.rss_bytes(pid))
    assert _served(gated)


def test_a_busy_client_that_cancels_a_little_is_never_cut_off(gated):
    """What the defence must not catch: a client with many calls in flight
    at once and some cancelled (deadlines that pass), on one connection."""
    with statecache.Client.connect(gated.address, timeout=5) as client:
        stub = client._stub
        for _ in range(20):
            futures = [stub.Ping.future(pb.PingRequest(), timeout=5)
                       for _ in range(50)]
            for f in futures[:10]:
                f.cancel()
            for f in futures[10:]:
                f.result()
        with attach(client) as session:
            for _ in range(200):
                assert session.step().begin_pass().send()[0].ok
    assert "rapid reset" not in gated.log()
