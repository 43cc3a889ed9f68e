"""Every error class from a real refusal of a real daemon, the admin calls,
and connecting."""

import concurrent.futures
import os

import grpc
import pytest

import statecache

from conftest import BLOCK, MODEL_ID, attach


def test_connect_to_a_missing_socket_is_unavailable(tmp_path):
    address = "unix:%s/nothing.sock" % tmp_path
    with pytest.raises(statecache.Unavailable) as e:
        statecache.Client.connect(address, timeout=0.3)
    assert e.value.code == grpc.StatusCode.UNAVAILABLE
    assert address in e.value.message
    assert address in str(e.value)


def test_default_address(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert statecache.default_address() == (
        "unix:/run/statecache/statecached.sock")
    monkeypatch.setattr(os, "geteuid", lambda: 1234)
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/1234")
    assert statecache.default_address() == (
        "unix:/run/user/1234/statecache/statecached.sock")
    monkeypatch.setenv("XDG_RUNTIME_DIR", "relative/dir")
    assert statecache.default_address() == (
        "unix:/tmp/statecache-1234/statecached.sock")
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert statecache.default_address() == (
        "unix:/tmp/statecache-1234/statecached.sock")


def test_client_and_ping(daemon):
    with statecache.Client.connect(daemon.address) as client:
        assert client.address == daemon.address
        client.ping()
    with pytest.raises(ValueError):  # closed channel
        client.ping()


def test_step_on_a_detached_session_is_not_found(client):
    session = attach(client)
    session.step().admit("r", width=1, num_tokens=5).send()
    assert session.detach() == 1
    with pytest.raises(statecache.NotFound) as e:
        session.step().begin_pass().send()
    # The client detached it: a plain NotFound, not a lost lease.
    assert not isinstance(e.value, statecache.LeaseLost)
    assert e.value.code == grpc.StatusCode.NOT_FOUND
    assert session.session_id in e.value.message
    with pytest.raises(statecache.NotFound):
        session.detach()
    session.close()  # nothing left to do, no error


def test_evicted_session_raises_lease_lost(client, session):
    assert client.admin.evict("s1") == 0
    with pytest.raises(statecache.LeaseLost) as e:
        session.step().begin_pass().send()
    assert not isinstance(e.value, statecache.EpochChanged)
    assert isinstance(e.value, statecache.NotFound)
    assert isinstance(session.lost, statecache.LeaseLost)
    with pytest.raises(statecache.LeaseLost):  # stays lost, no RPC
        session.keep_alive()
    with pytest.raises(statecache.NotFound):
        client.admin.evict("no-such-session")


def test_too_many_operations_is_invalid_argument(start_daemon):
    daemon = start_daemon("--max_ops_per_step=8")
    with statecache.Client.connect(daemon.address) as client, \
            attach(client) as session:
        assert session.max_operations_per_step == 8
        step = session.step()
        for _ in range(9):
            step.begin_pass()
        with pytest.raises(statecache.InvalidArgument) as e:
            step.send()
        assert "8" in e.value.message
        with session.stream() as stream:
            step = stream.step()
            for _ in range(9):
                step.begin_pass()
            with pytest.raises(statecache.InvalidArgument):
                step.send()
            # The stream stays open after a refused message.
            assert len(stream.step().begin_pass().send()) == 1
        assert session.lost is None


def test_malformed_packed_step_is_invalid_argument(session):
    # An int32 argument beyond int32: the daemon refuses the whole step.
    with pytest.raises(statecache.InvalidArgument) as e:
        session.step().admit("big", width=1 << 40, num_tokens=1).send()
    assert "int32" in e.value.message


def test_long_client_name_is_invalid_argument(client):
    with pytest.raises(statecache.InvalidArgument) as e:
        attach(client, client_name="x" * 257)
    assert "256" in e.value.message
    attach(client, client_name="x" * 256).close()


def test_identity_mismatch_is_failed_precondition(client):
    with pytest.raises(statecache.FailedPrecondition) as e:
        client.attach("another/model", BLOCK)
    assert "model_id" in e.value.message
    with pytest.raises(statecache.FailedPrecondition) as e:
        client.attach(MODEL_ID, BLOCK, num_spec=3)
    assert "num_spec" in e.value.message


def test_drain_makes_attach_unavailable(client, session):
    admitted, = session.step().admit("d", width=1, num_tokens=5).send()
    assert admitted.ok
    drained = client.admin.drain()
    assert drained == statecache.DrainResult(draining=True, requests=1)
    assert client.admin.stats().draining
    with pytest.raises(statecache.Unavailable):
        attach(client)
    refused, released = (session.step().admit("e", width=1, num_tokens=5)
                         .release("d").send())
    assert refused.code == grpc.StatusCode.UNAVAILABLE.value[0]
    with pytest.raises(statecache.Unavailable):
        refused.check()
    assert released.ok
    assert client.admin.drain(resume=True).draining is False
    attach(client).close()


def test_oversized_message_is_resource_exhausted(start_daemon):
    daemon = start_daemon("--max_message_bytes=4096")
    # gRPC's message limit (test_channel.py: a pass too big for the step
    # channel's area goes over gRPC, and meets it there).
    with statecache.Client.connect(daemon.address) as client, \
            attach(client, transport="grpc") as session:
        # Refused by the daemon's gRPC server, before the daemon's code.
        with pytest.raises(statecache.ResourceExhausted) as e:
            session.step().admit("huge", width=1, num_tokens=1,
                                 block_hashes=list(range(1, 2000))).send()
        assert "4096" in e.value.message
        assert session.step().begin_pass().send()[0].ok


def test_full_pool_refuses_admit_with_code_8(start_daemon):
    # Inside a step a shortage is a result (RESOURCE_EXHAUSTED = 8), not an
    # exception: the step's other operations ran.
    daemon = start_daemon(num_slots=2)
    with statecache.Client.connect(daemon.address) as client, \
            attach(client) as session:
        a, b, c = (session.step()
                   .admit("a", width=2, num_tokens=1)
                   .admit("b", width=1, num_tokens=1)
                   .release("a").send())
        assert a.ok and c.ok
        assert b.code == 8 and not b.ok
        with pytest.raises(statecache.ResourceExhausted):
            b.check()


def test_admin_stats_sessions_resize(client, session):
    stats = client.admin.stats()
    assert isinstance(stats, statecache.Stats)
    assert stats.epoch == session.epoch
    assert stats.slots_total == 64 and stats.sessions == 1
    assert stats.identity.model_id == MODEL_ID
    assert stats.transfer.kind == "fork"
    assert stats.backend == "none"
    sessions = client.admin.sessions()
    assert [s.handle for s in sessions] == ["s1"]
    assert sessions[0].session_id == ""  # the holder's secret
    assert sessions[0].principal == "uid:%d" % os.geteuid()
    assert sessions[0].client_name == "pytest"
    assert 0 < sessions[0].lease_remaining_ms <= 10000

    # A shrink moves the live request off the top slots in the session's
    # own begin_pass, which tells it where it went: the operator's call
    # waits (in another thread) while the engine runs its passes.
    step = session.step()
    for i in range(6):
        step.admit("x%d" % i, width=1, num_tokens=1)
    slots = [r.slots[0] for r in step.send()]
    assert slots == [0, 1, 2, 3, 4, 5]
    step = session.step()
    for i in range(5):
        step.release("x%d" % i)
    step.send()
    with concurrent.futures.ThreadPoolExecutor(1) as operator:
        shrink = operator.submit(client.admin.resize, 3, deadline=5)
        moves = []
        while not shrink.done():
            begin, = session.step().begin_pass().send()
            moves += begin.moves
        resized = shrink.result()
    assert resized.num_slots == 3 and resized.relocated == 1
    assert len(moves) == 1
    move = moves[0]
    assert (move.request_id, move.index, move.from_slot) == ("x5", 0, 5)
    assert 0 <= move.to_slot < 3
    assert client.admin.resize(64).num_slots == 64
    with pytest.raises(statecache.InvalidArgument):
        client.admin.resize(0)


def test_stuck_shrink_is_deadline_exceeded(start_daemon):
    daemon = start_daemon(num_slots=4)
    with statecache.Client.connect(daemon.address) as client, \
            attach(client) as session:
        # a's committed slot becomes a pinned fork source (slot 0), a moves
        # to slot 1: shrinking to 1 slot has nowhere to put a.
        admit, = session.step().admit("a", width=1, num_tokens=70,
                                      block_hashes=[7]).send()
        checkpoint, = session.step().checkpoint("a", 1, 7).send()
        assert checkpoint.kept and checkpoint.state_slot == 1
        with pytest.raises(statecache.DeadlineExceeded):
            client.admin.resize(1, deadline=0.2)


def test_errors_pickle_and_print():
    import pickle
    for error in [statecache.EpochChanged("restarted", 1, 2),
                  statecache.NotFound("gone"),
                  statecache.Error("odd", grpc.StatusCode.DATA_LOSS)]:
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is type(error)
        assert (copy.code, copy.message, str(copy)) == (
            error.code, error.message, str(error))
    assert str(statecache.NotFound("gone")) == "NOT_FOUND: gone"
    assert pickle.loads(pickle.dumps(
        statecache.EpochChanged("r", 1, 2))).new_epoch == 2


def test_session_cap_and_slot_quota_are_resource_exhausted(start_daemon):
    daemon = start_daemon("--max_sessions=2", "--max_slots_per_session=3")
    with statecache.Client.connect(daemon.address) as client, \
            attach(client) as first, attach(client) as second:
        with pytest.raises(statecache.ResourceExhausted) as e:
            attach(client)
        assert "--max_sessions=2" in e.value.message
        # The quota: one session cannot take the pool from the other.
        wide, = first.step().admit("wide", width=4, num_tokens=5).send()
        with pytest.raises(statecache.ResourceExhausted) as e:
            wide.check()
        assert "--max_slots_per_session" in e.value.message
        fits, = first.step().admit("fits", width=3, num_tokens=5).send()
        assert fits.ok
        theirs, = second.step().admit("theirs", width=3, num_tokens=5).send()
        assert theirs.ok
    # Detached: room for a new session again.
    with statecache.Client.connect(daemon.address) as client:
        attach(client).close()
