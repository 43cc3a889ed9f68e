"""The step channel from Python, against a real daemon: which transport a
session uses and why; results identical to gRPC's, bit for bit, for the
same passes (replies in parts, passes too big for the area); the errors a
channel session meets are those a gRPC session meets (eviction, detach,
whole-step refusals, a daemon restarted or killed), and it never hangs."""

import os
import random
import time

import numpy as np
import pytest

import statecache
from statecache.testing import Daemon
from statecache.v1 import statecache_pb2 as pb

from conftest import BLOCK, MODEL_ID, attach, identity_flags
from test_columnar import RandomPasses, columnar_call

# A daemon's death is noticed within the client's silence (1 s, or 10
# heartbeats), then GetStats is asked for up to 1 s: well within this.
DEAD_WITHIN = 6.0


def channels_open(client):
    """GetStats' step_channels_open (None with stubs older than it)."""
    stats = client._admin_stub.GetStats(pb.GetStatsRequest(), timeout=5)
    return getattr(stats, "step_channels_open", None)


def no_channels_open(client):
    return channels_open(client) in (0, None)


def wait_for(condition, seconds=3.0):
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def same_columns(a, b):
    """Two ResultColumns hold the same results, bit for bit (the epoch
    aside)."""
    for name in ("codes", "values", "late_values", "hashes",
                 "request_id_lengths"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), name
    assert a.messages == b.messages
    assert bytes(a.request_ids) == bytes(b.request_ids)


# ------------------------------------------------------------ transport


def test_auto_uses_the_channel_over_a_unix_socket(client):
    with attach(client, transport="auto") as session:
        assert session.transport == "channel"
        assert session.transport_reason == ""
        assert "over channel" in repr(session)
        assert channels_open(client) in (1, None)
        session.ping()
        assert session.step().begin_pass().send()[0].ok
    assert wait_for(lambda: no_channels_open(client))
    with attach(client, transport="grpc") as session:
        assert session.transport == "grpc"
        assert session.transport_reason == 'transport="grpc"'
        session.ping()
        assert no_channels_open(client)
    with pytest.raises(ValueError, match="transport"):
        attach(client, transport="shm")


def test_the_default_transport_is_the_environments(client, monkeypatch):
    monkeypatch.setenv("STATECACHE_TRANSPORT", "grpc")
    with client.attach(MODEL_ID, BLOCK) as session:
        assert session.transport == "grpc"
    monkeypatch.delenv("STATECACHE_TRANSPORT")
    with client.attach(MODEL_ID, BLOCK) as session:
        assert session.transport == "channel"


def test_a_tcp_client_falls_back_to_grpc_or_raises(tmp_path):
    with Daemon(identity_flags() + ["--insecure_tcp"],
                listen="127.0.0.1:0") as daemon, \
            statecache.Client.connect(daemon.address) as client:
        with attach(client, transport="auto") as session:
            assert session.transport == "grpc"
            assert "TCP" in session.transport_reason
            assert session.step().begin_pass().send()[0].ok
        with pytest.raises(statecache.FailedPrecondition, match="TCP"):
            attach(client, transport="channel")
        # The session attach made for it was detached again.
        assert wait_for(lambda: client.admin.stats().sessions == 0)


def test_a_daemon_without_channels_falls_back_or_raises(start_daemon):
    daemon = start_daemon("--max_step_channels=0")
    with statecache.Client.connect(daemon.address) as client:
        with attach(client, transport="auto") as session:
            assert session.transport == "grpc"
            assert "did not open a step channel" in session.transport_reason
        with pytest.raises(statecache.FailedPrecondition):
            attach(client, transport="channel")


def test_detach_closes_the_channel(client):
    session = attach(client, transport="channel")
    name = session._channel.name
    assert not os.path.exists("/dev/shm/" + name.lstrip("/"))  # unlinked
    session.step().admit("d", 1, 10).send()[0].check()
    assert session.detach() == 1
    assert session.transport == "grpc"
    assert session.transport_reason == "detached"
    assert wait_for(lambda: no_channels_open(client))
    # A step of a detached session is refused, as over gRPC.
    with pytest.raises(statecache.NotFound):
        session.step().begin_pass().send()
    # Closing the client closes its sessions' channels too.
    other = attach(client, transport="channel")
    client.close()
    assert other.transport == "grpc"
    with pytest.raises(ValueError):
        other.step().begin_pass().send()


# ------------------------------------------------------------ results


def test_results_are_gRPCs_bit_for_bit(start_daemon):
    """The same random passes on two identical daemons, one session over
    the channel, one over gRPC: the same result columns, byte for byte,
    and the same dataclasses through the per-operation builder."""
    daemons = [start_daemon("--num_spec=1", num_slots=24) for _ in range(2)]
    passes, forms = RandomPasses(9), random.Random(10)
    with statecache.Client.connect(daemons[0].address) as c0, \
            statecache.Client.connect(daemons[1].address) as c1, \
            attach(c0, num_spec=1, advise_placement=True,
                   transport="channel") as over_channel, \
            attach(c1, num_spec=1, advise_placement=True,
                   transport="grpc") as over_grpc:
        for i in range(40):
            batches = passes.next_pass()
            if i % 2:
                step = statecache.ColumnarStep(None)
                for name, operations in batches:
                    columnar_call(step, name, operations, forms)
                columns = step.columns()
                same_columns(over_channel.send_columns(columns),
                             over_grpc.send_columns(columns))
            else:
                got = []
                for session in (over_channel, over_grpc):
                    step = session.step()
                    for name, operations in batches:
                        for op in operations:
                            getattr(step, name)(**op)
                    got.append(step.send())
                assert got[0] == got[1]
        assert over_channel.transport == "channel"


def test_a_reply_larger_than_the_area_arrives_whole(start_daemon):
    """Replies bigger than a 4096-byte reply area come in parts
    (kContinue); passes bigger than the request area go over gRPC. Read-only
    operations, so both sessions see the same daemon state."""
    daemon = start_daemon("--step_channel_area_bytes=4096")
    with statecache.Client.connect(daemon.address) as client, \
            attach(client, transport="channel") as over_channel, \
            attach(client, transport="grpc") as over_grpc:
        step = over_channel.columns()
        step.admit(["a", "b"], 1, 3 * BLOCK, block_hashes=[[1, 2, 3],
                                                            [4, 5]])
        step.send().check()
        columns_of = []
        for n in (10, 100, 1200):
            step = statecache.ColumnarStep(None)
            step.lookup(np.arange(n) % 7)
            step.release(["nobody-%d" % i for i in range(n)])  # refused
            step.resumable_hit(3 * BLOCK + 1, [1, 2, 3], 3)
            columns_of.append(step.columns())
        sizes = []
        for columns in columns_of:
            got = over_channel.send_columns(columns)
            want = over_grpc.send_columns(columns)
            same_columns(got, want)
            sizes.append(reply_bytes(got))
        assert over_channel.transport == "channel"
        # The 10-op pass's reply fit the area, the 100-op pass's came in
        # parts; the 1200-op pass's request (its hashes alone 9600 bytes)
        # did not fit the area: it went over gRPC, and the channel stays.
        assert sizes[0] <= 4096 < sizes[1]
        assert over_channel._channel.fits(columns_of[1])
        assert not over_channel._channel.fits(columns_of[2])


def reply_bytes(results):
    """The size of a reply holding `results` (proto/step_channel.h)."""
    def align(n):
        return (n + 7) & ~7
    return (64 + align(8 * len(results.values))
            + align(8 * len(results.late_values))
            + align(8 * len(results.hashes)) + align(4 * len(results.codes))
            + align(4 * len(results.request_id_lengths))
            + align(4 * len(results.messages))
            + align(len(results.request_ids))
            + sum(len(m.encode()) for m in results.messages))


def test_whole_step_refusals_raise_as_over_grpc(start_daemon):
    daemon = start_daemon("--max_ops_per_step=4")
    with statecache.Client.connect(daemon.address) as client, \
            attach(client, transport="channel") as over_channel, \
            attach(client, transport="grpc") as over_grpc:
        errors = []
        for session in (over_channel, over_grpc):
            step = session.step()
            for i in range(5):
                step.lookup(i)
            with pytest.raises(statecache.InvalidArgument) as e:
                step.send()
            errors.append(e.value)
        assert errors[0].message == errors[1].message
        assert over_channel.transport == "channel"
        assert over_channel.step().lookup(1).send()[0].ok


def test_a_pass_too_big_for_the_area_meets_grpcs_limit(start_daemon):
    daemon = start_daemon("--max_message_bytes=4096",
                          "--step_channel_area_bytes=4096")
    with statecache.Client.connect(daemon.address) as client, \
            attach(client, transport="channel") as session:
        with pytest.raises(statecache.ResourceExhausted) as e:
            session.step().admit("huge", width=1, num_tokens=1,
                                 block_hashes=list(range(1, 2000))).send()
        assert "4096" in e.value.message
        assert session.transport == "channel"
        assert session.step().begin_pass().send()[0].ok


# ------------------------------------------------------------ errors


def test_eviction_closes_the_channel_and_steps_see_lease_lost(client):
    sessions = [attach(client, transport=t, client_name="evicted-%s" % t)
                for t in ("channel", "channel", "grpc")]
    handles = {s.handle for s in sessions}
    for info in client.admin.sessions():
        if info.handle in handles:
            client.admin.evict(info.handle)
    # At once (the channel may still be open: the Step is refused there),
    # and after the daemon closed it (the Step goes over gRPC).
    at_once, later, over_grpc = sessions
    assert wait_for(lambda: later._channel.closed)
    errors = []
    for session in sessions:
        with pytest.raises(statecache.LeaseLost) as e:
            session.step().begin_pass().send()
        assert not isinstance(e.value, statecache.EpochChanged)
        assert "evicted" in str(e.value)
        errors.append(e.value)
        assert isinstance(session.lost, statecache.LeaseLost)
    assert later.transport == "grpc"
    assert "closed" in later.transport_reason
    for session in sessions:
        session.close()
    assert wait_for(lambda: no_channels_open(client))


def test_a_killed_daemon_is_unavailable_and_never_hangs(daemon):
    with statecache.Client.connect(daemon.address, timeout=2) as client:
        session = attach(client, transport="channel")
        session.step().admit("k", 1, 10).send()[0].check()
        daemon.kill()
        start = time.monotonic()
        with pytest.raises(statecache.Unavailable) as e:
            session.step().begin_pass().send()
        assert time.monotonic() - start < DEAD_WITHIN
        assert "heartbeat" in e.value.message
        assert session.transport == "grpc"
        assert "heartbeat" in session.transport_reason
        start = time.monotonic()
        with pytest.raises(statecache.Unavailable):
            session.step().begin_pass().send()  # now over gRPC
        assert time.monotonic() - start < DEAD_WITHIN
        session.close()


@pytest.mark.parametrize("how", ["restart", "kill and start"])
def test_a_restarted_daemon_is_epoch_changed_on_both(daemon, how):
    """After a restart (SIGTERM: the daemon closes the channel) both
    sessions' next step raises EpochChanged. After a SIGKILL and a new
    daemon, the channel session finds its heartbeat stopped, the gRPC
    session its connection broken: each raises Unavailable until GetStats
    answers with the new epoch (its reconnection backs off), then
    EpochChanged."""
    with statecache.Client.connect(daemon.address) as client:
        over_channel = attach(client, transport="channel")
        over_grpc = attach(client, transport="grpc")
        for s in (over_channel, over_grpc):
            s.step().admit("x", 1, 10).send()[0].check()
        if how == "restart":
            daemon.restart()
        else:
            daemon.kill()
            daemon.start()
        errors = []
        for session in (over_channel, over_grpc):
            start = time.monotonic()
            while True:
                try:
                    session.step().begin_pass().send()
                except statecache.EpochChanged as e:
                    errors.append(e)
                    break
                except statecache.Unavailable:
                    assert how != "restart"
                assert time.monotonic() - start < 2 * DEAD_WITHIN
            assert session.transport == "grpc"
        assert errors[0].new_epoch == errors[1].new_epoch != 0
        # A new session gets a channel of the new daemon.
        with attach(client, transport="auto") as again:
            assert again.transport == "channel"
            assert again.step().begin_pass().send()[0].ok
