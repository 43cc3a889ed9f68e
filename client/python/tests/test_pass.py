"""Scheduler passes through the package against a real daemon: cold admit,
checkpoint, resume from it, midstep reserve/publish, refusals as results,
the stream, and every operation kind's results equal to the list form's."""

import pytest

import statecache
from statecache.v1 import statecache_pb2 as pb
from statecache.v1 import statecache_pb2_grpc as pb_grpc

from conftest import BLOCK, MODEL_ID, SMALL_LAYOUT, attach

OK, NOT_FOUND, ALREADY_EXISTS = 0, 5, 6


def hashes(seed, n):
    """Chained block hashes in [0, 2**63)."""
    out, h = [], seed
    for _ in range(n):
        h = (h * 6364136223846793005 + 1442695040888963407) % (1 << 63)
        out.append(h)
    return out


def ok(results):
    for i, r in enumerate(results):
        assert r.ok, "operation %d refused: %d %s" % (i, r.code, r.message)
    return results


def test_session_attributes(daemon, session):
    assert session.session_id
    assert session.epoch != 0
    assert session.lease_ttl == pytest.approx(10.0)
    assert session.num_slots == 64
    assert session.transfer == statecache.TransferConfig(
        kind="fork", fork_tokens=1, readable_midstep=True)
    assert session.max_operations_per_step == 4096
    assert session.memory is None  # no --layout
    assert session.identity.model_id == MODEL_ID


def test_cold_admit_checkpoint_then_resume(session, client):
    h = hashes(1, 3)
    # Turn 1: a cold start, a fork checkpoint at 2 blocks, the forward that
    # reads it, the end of the turn.
    results = ok(session.step()
                 .begin_pass()
                 .admit("a", width=1, num_tokens=2 * BLOCK + 10,
                        anchor_pos=2 * BLOCK, block_hashes=h[:2],
                        kv_hit_blocks=0)
                 .send())
    assert len(results) == 2
    begin, admit = results
    assert isinstance(begin, statecache.BeginPassResult)
    assert isinstance(admit, statecache.AdmitResult)
    assert admit.blocks_resumed == 0 and admit.fork_src == -1
    assert not admit.adopted and len(admit.slots) == 1
    a = admit.slots[0]

    checkpoint, consumed = ok(session.step()
                              .checkpoint("a", boundary_blocks=2, hash=h[1])
                              .consume_fork("a")
                              .send())
    assert checkpoint.kept
    assert checkpoint.fork_src == a  # the committed slot is filed
    assert checkpoint.state_slot not in (a, -1)
    assert consumed.fork_src == a
    released, = ok(session.step().release("a").send())
    assert released.slots_released == 1
    ok(session.step().begin_pass().send())
    ok(session.step().begin_pass().send())  # the pin clears: a is filed

    # Turn 2 resumes at 2 blocks from the checkpoint, into a fresh slot.
    hit, admit, lookup = ok(session.step()
                            .resumable_hit(3 * BLOCK + 10, block_hashes=h,
                                           kv_hit_blocks=3)
                            .admit("b", width=1, num_tokens=3 * BLOCK + 10,
                                   anchor_pos=3 * BLOCK, block_hashes=h,
                                   kv_hit_blocks=3)
                            .lookup(h[1])
                            .send())
    assert hit.blocks == 2
    assert admit.blocks_resumed == 2
    assert admit.fork_src == a
    assert admit.slots[0] != a
    assert lookup.slot == a
    consumed, released = ok(session.step().consume_fork("b").release("b")
                            .send())
    assert consumed.fork_src == a
    assert released.slots_released == 1
    stats = client.admin.stats()
    assert stats.resumes_fork == 1
    assert stats.resume_blocks_resumed == 2
    assert stats.checkpoints_kept == 1


def test_reserve_publish_midstep(session):
    assert session.transfer.readable_midstep
    h = hashes(2, 4)
    _, admit, reserve = ok(session.step()
                           .begin_pass()
                           .admit("c", width=1, num_tokens=4 * BLOCK + 1,
                                  anchor_pos=4 * BLOCK, block_hashes=h)
                           .reserve("c", positions=[
                               (BLOCK, h[0]),
                               {"position": 2 * BLOCK, "hash": h[1]},
                               statecache.MidstepPosition(3 * BLOCK, h[2])])
                           .send())
    reservations = reserve.reservations
    assert [(r.position, r.hash) for r in reservations] == [
        (BLOCK, h[0]), (2 * BLOCK, h[1]), (3 * BLOCK, h[2])]
    slots = {r.slot for r in reservations}
    assert len(slots) == 3 and admit.slots[0] not in slots
    publish, l0, l2 = ok(session.step().publish("c").lookup(h[0]).lookup(h[2])
                         .send())
    assert publish.published == 3
    assert l0.slot == reservations[0].slot
    assert l2.slot == reservations[2].slot

    # A reservation the forward never wrote goes back with cancel.
    reserve, cancel, lookup = ok(session.step()
                                 .reserve("c", [(4 * BLOCK, h[3])])
                                 .cancel("c").lookup(h[3]).send())
    assert len(reserve.reservations) == 1
    assert cancel.cancelled == 1
    assert lookup.slot == -1
    ok(session.step().release("c").send())


def test_refused_operations_are_results(session):
    results = (session.step()
               .admit("d", width=1, num_tokens=10)
               .admit("d", width=1, num_tokens=10)
               .release("nobody")
               .release("d")
               .send())
    first, again, nobody, release = results
    assert first.ok and release.ok and release.slots_released == 1
    assert again.code == ALREADY_EXISTS and not again.ok
    assert "d" in again.message
    assert isinstance(again, statecache.AdmitResult)
    assert again.slots == [] and again.fork_src == -1
    assert nobody.code == NOT_FOUND and "nobody" in nobody.message
    with pytest.raises(statecache.AlreadyExists) as e:
        again.check()
    assert e.value.message == again.message
    with pytest.raises(statecache.NotFound):
        nobody.check()
    assert release.check() is release


def test_stream_runs_the_same_pass(session):
    h = hashes(3, 2)
    with session.stream() as stream:
        for turn in range(3):
            _, admit = ok(stream.step().begin_pass()
                          .admit("s%d" % turn, width=1,
                                 num_tokens=2 * BLOCK + 5, block_hashes=h,
                                 kv_hit_blocks=0)
                          .send())
            assert len(admit.slots) == 1
            released, = ok(stream.step().release("s%d" % turn).send())
            assert released.slots_released == 1
    with pytest.raises(ValueError):
        stream.step().begin_pass().send()


def test_builder_chains_and_resets(session):
    step = session.step()
    assert step.begin_pass() is step
    step.lookup(5).lookup(6)
    assert len(step) == 3
    assert len(step.send()) == 3
    assert len(step) == 0
    assert step.begin_pass().send()[0].ok  # reusable after send


def test_unknown_or_bad_arguments_raise_type_error(session):
    step = session.step()
    with pytest.raises(TypeError, match="kv_hits"):
        step.admit("x", width=1, num_tokens=1, kv_hits=0)
    with pytest.raises(TypeError, match="pos"):
        step.reserve("x", [{"pos": 1, "hash": 2}])
    assert len(step) == 0  # the refused calls added nothing
    step.begin_pass().release(17)  # a request id is a str
    with pytest.raises(TypeError):
        step.send()
    assert len(step) == 2  # nothing was sent
    with pytest.raises(TypeError):
        session.step().lookup("not a hash").send()
    with pytest.raises(TypeError):
        session.step().admit("x", width="1", num_tokens=1).send()


# ---- every kind, packed (this package) against the list form (raw stubs)
# on two identical daemons: the same decisions, so the same results.


def _scenario():
    h, g = hashes(10, 3), hashes(20, 2)
    return [
        [("begin_pass", {}),
         ("admit", dict(request_id="a", width=2, num_tokens=3 * BLOCK + 1,
                        anchor_pos=3 * BLOCK, block_hashes=h,
                        kv_hit_blocks=0)),
         ("admit", dict(request_id="b", width=1, num_tokens=2 * BLOCK + 1,
                        anchor_pos=0, block_hashes=g, kv_hit_blocks=0)),
         ("resumable_hit", dict(num_tokens=3 * BLOCK + 1, block_hashes=h,
                                kv_hit_blocks=3, assume_checkpointed=True)),
         ("lookup", dict(hash=h[2])),
         ("reserve", dict(request_id="a",
                          positions=[(BLOCK, h[0]), (2 * BLOCK, h[1])])),
         ("release", dict(request_id="zz")),
         ("admit", dict(request_id="a", width=1, num_tokens=1))],
        [("publish", dict(request_id="a", keep_all=True)),
         ("cancel", dict(request_id="b")),
         ("checkpoint", dict(request_id="b", boundary_blocks=2, hash=g[1],
                             anchor_pos=2 * BLOCK)),
         ("adopt_fork_source", dict(request_id="b")),
         ("consume_fork", dict(request_id="b")),
         ("copy", dict(request_id="a", from_index=1, to_index=0)),
         ("copy", dict(request_id="a", from_index=0, to_index=0)),
         ("snapshot", dict(request_id="a", position=3 * BLOCK, hash=h[2]))],
        [("begin_pass", {}),
         ("lookup", dict(hash=h[1])),
         ("unindex", dict(hashes=[h[0], 12345])),
         ("release", dict(request_id="a")),
         ("clear_index", {}),
         ("lookup", dict(hash=h[2])),
         ("release", dict(request_id="b"))],
    ]


def _list_operation(name, kwargs):
    fields = dict(kwargs)
    if name == "reserve":
        fields["positions"] = [pb.MidstepPosition(position=p, hash=h)
                               for p, h in kwargs["positions"]]
    message = getattr(pb, pb.Operation.DESCRIPTOR.fields_by_name[name]
                      .message_type.name)(**fields)
    return pb.Operation(**{name: message})


def _as_plain(message):
    """A result message's fields as the package's dataclasses hold them."""
    out = {}
    for f in message.DESCRIPTOR.fields:
        value = getattr(message, f.name)
        if f.label == f.LABEL_REPEATED:
            value = [(_as_plain(v) if f.message_type else v) for v in value]
        out[f.name] = value
    return out


def _dataclass_plain(result):
    out = {}
    for name in result.__dataclass_fields__:
        if name in ("code", "message"):
            continue
        value = getattr(result, name)
        if isinstance(value, list):
            value = [(_dataclass_plain(v) if hasattr(v, "__dataclass_fields__")
                      else v) for v in value]
        out[name] = value
    return out


def test_every_kind_matches_the_list_form(start_daemon):
    packed_daemon = start_daemon(layout=SMALL_LAYOUT, num_slots=16)
    list_daemon = start_daemon(layout=SMALL_LAYOUT, num_slots=16)

    import grpc
    channel = grpc.insecure_channel(list_daemon.address)
    stub = pb_grpc.StateCacheStub(channel)
    attached = stub.Attach(pb.AttachRequest(identity=pb.Identity(
        model_id=MODEL_ID, hash_block_size=BLOCK)), timeout=5)

    seen_kinds, seen_codes = set(), set()
    with statecache.Client.connect(packed_daemon.address) as client, \
            attach(client) as session:
        for operations in _scenario():
            step = session.step()
            for name, kwargs in operations:
                getattr(step, name)(**kwargs)
            got = step.send()
            want = stub.Step(pb.StepRequest(
                session_id=attached.session_id,
                operations=[_list_operation(n, k) for n, k in operations]),
                timeout=5).results
            assert len(got) == len(want) == len(operations)
            for (name, _), g, w in zip(operations, got, want):
                seen_kinds.add(name)
                seen_codes.add(w.code)
                assert (g.code, g.message) == (w.code, w.message), name
                assert type(g).__name__ == type(getattr(w, name)).__name__
                if w.code == OK:
                    assert _dataclass_plain(g) == _as_plain(
                        getattr(w, name)), name
    channel.close()
    assert seen_kinds == set(pb.Operation.DESCRIPTOR.fields_by_name)
    assert {OK, NOT_FOUND, ALREADY_EXISTS} <= seen_codes
