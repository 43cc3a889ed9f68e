"""Columnar passes against a real daemon: the same passes through the
per-operation builder and through ColumnarStep, on two identical daemons,
give the same results (every kind, refusals, late fields, lists of slots
and reservations); bad arguments raise before anything is sent; the
stream and send_columns run columnar passes too."""

import random

import numpy as np
import pytest

import statecache
from statecache.v1 import statecache_pb2 as pb

from conftest import BLOCK, SMALL_LAYOUT, attach
from test_columnar_mirror import check_batch

KINDS = {f.name: f for f in pb.Operation.DESCRIPTOR.oneofs_by_name["kind"]
         .fields}
OK, NOT_FOUND, ALREADY_EXISTS, RESOURCE_EXHAUSTED = 0, 5, 6, 8


class RandomPasses:
    """Random passes of batches (kind, list of per-operation keyword
    dicts): ids mostly of requests admitted before (some unknown, some
    admitted twice), hashes from a few chained conversations, so the
    daemon accepts most operations and refuses some."""

    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.ids = ["r%d" % i for i in range(24)] + ["\u00e9-%d" % i
                                                     for i in range(4)]
        self.convs = []
        for c in range(6):
            h, chain = 1000 + c, []
            for _ in range(6):
                h = (h * 6364136223846793005 + 1442695040888963407) % (
                    1 << 63)
                chain.append(h)
            self.convs.append(chain)

    def operation(self, name):
        rng = self.rng
        conv = rng.choice(self.convs)
        blocks = rng.randrange(1, len(conv) + 1)
        rid = rng.choice(self.ids)
        if name == "admit":
            return dict(request_id=rid, width=rng.choice([1, 1, 2]),
                        num_tokens=blocks * BLOCK + rng.randrange(BLOCK),
                        anchor_pos=blocks * BLOCK,
                        block_hashes=conv[:blocks],
                        kv_hit_blocks=rng.randrange(blocks + 1))
        if name == "resumable_hit":
            return dict(num_tokens=blocks * BLOCK + 3,
                        block_hashes=conv[:blocks],
                        kv_hit_blocks=rng.randrange(blocks + 1),
                        assume_checkpointed=rng.random() < 0.5)
        if name == "lookup":
            return dict(hash=rng.choice(conv))
        if name == "reserve":
            k = rng.randrange(0, 4)
            return dict(request_id=rid, positions=[
                ((i + 1) * BLOCK, conv[i]) for i in range(k)])
        if name == "publish":
            return dict(request_id=rid, keep_all=rng.random() < 0.5)
        if name == "checkpoint":
            return dict(request_id=rid, boundary_blocks=blocks,
                        hash=conv[blocks - 1],
                        anchor_pos=rng.choice([0, blocks * BLOCK]))
        if name == "unindex":
            return dict(hashes=rng.sample(conv, rng.randrange(3)))
        if name == "copy":
            return dict(request_id=rid, from_index=rng.randrange(2),
                        to_index=rng.randrange(2))
        if name == "snapshot":
            return dict(request_id=rid, position=blocks * BLOCK,
                        hash=conv[blocks - 1])
        if name in ("begin_pass", "clear_index"):
            return {}
        return dict(request_id=rid)  # cancel, consume_fork, adopt, release

    def next_pass(self):
        rng = self.rng
        batches = [("begin_pass", [{}])]
        weights = {"admit": 6, "release": 3, "checkpoint": 4,
                   "consume_fork": 3, "resumable_hit": 2, "lookup": 2,
                   "reserve": 2, "publish": 2, "cancel": 1,
                   "adopt_fork_source": 1, "unindex": 1, "copy": 1,
                   "snapshot": 1, "clear_index": 0.1, "begin_pass": 0.2}
        names = list(weights)
        for _ in range(rng.randrange(3, 9)):
            name = rng.choices(names, [weights[n] for n in names])[0]
            count = 1 if name in ("begin_pass", "clear_index") else \
                rng.randrange(0, 7)
            batches.append((name, [self.operation(name)
                                   for _ in range(count)]))
        return batches


def columnar_call(step, name, operations, rng):
    """Appends `operations` (keyword dicts of kind `name`) to a
    ColumnarStep in one call, its arguments in a random form."""
    if name in ("begin_pass", "clear_index"):
        return getattr(step, name)()
    fields = sorted(KINDS[name].message_type.fields, key=lambda f: f.number)
    form = rng.choice(["lists", "arrays", "flat"])
    args, keywords = {}, {}
    for f in fields:
        column = [op[f.name] for op in operations]
        if f.type == f.TYPE_STRING:
            if form == "arrays":
                column = statecache.RequestIds(column)
            elif form == "flat" and len(set(column)) == 1 and column:
                column = column[0]  # one str for every operation
        elif f.label == f.LABEL_REPEATED:
            if form == "flat":
                keywords[f.name + "_lengths"] = np.array(
                    [len(x) for x in column], np.uint32)
                flat = [x for per in column for x in per]
                column = (np.array(flat, np.int64).reshape(len(flat), 2)
                          if f.message_type is not None
                          else np.array(flat, np.int64))
            elif not column:
                column = ()
        elif form != "lists":
            column = np.array(column, bool if f.type == f.TYPE_BOOL
                              else np.int64)
            if form == "flat" and len(set(column.tolist())) == 1 \
                    and any(g.type == g.TYPE_STRING or
                            g.label == g.LABEL_REPEATED for g in fields):
                column = column[0]  # a scalar, broadcast
        args[f.name] = column
    if not operations:
        # No operations: every column empty (a str would broadcast to 1).
        # (An empty list alone is one operation's empty list: lengths say
        # there are none.)
        args = {f.name: (statecache.RequestIds([])
                         if f.type == f.TYPE_STRING else []) for f in fields}
        keywords = {f.name + "_lengths": [] for f in fields
                    if f.label == f.LABEL_REPEATED}
    return getattr(step, name)(**args, **keywords)


def test_columnar_passes_equal_the_per_operation_builders(start_daemon):
    flags = ("--num_spec=1",)
    daemons = [start_daemon(*flags, layout=SMALL_LAYOUT, num_slots=24)
               for _ in range(2)]
    passes = RandomPasses(5)
    forms = random.Random(6)
    seen = set()
    late_seen = slots_seen = reservations_seen = 0
    with statecache.Client.connect(daemons[0].address) as per_op_client, \
            statecache.Client.connect(daemons[1].address) as col_client, \
            attach(per_op_client, num_spec=1,
                   advise_placement=True) as per_op, \
            attach(col_client, num_spec=1,
                   advise_placement=True) as columnar:
        for _ in range(60):
            batches = passes.next_pass()
            step = per_op.step()
            for name, operations in batches:
                for op in operations:
                    getattr(step, name)(**op)
            want = step.send()
            cstep = columnar.columns()
            handles = [columnar_call(cstep, name, ops, forms)
                       for name, ops in batches]
            assert len(cstep) == len(want)
            results = cstep.send()
            assert len(results) == len(want)
            at = 0
            for (name, operations), batch in zip(batches, handles):
                assert (batch.kind, batch.start, batch.count) == (
                    name, at, len(operations))
                got = results[batch]
                part = want[at:at + len(operations)]
                check_batch(got, part, KINDS[name])
                at += len(operations)
                for r in part:
                    seen.add((name, r.code))
                    late_seen += any(getattr(r, f, 0) for f in (
                        "branch_blocks", "continuation_blocks"))
                    slots_seen += len(getattr(r, "slots", ())) > 1
                    reservations_seen += len(getattr(r, "reservations",
                                                     ())) > 0
    assert {name for name, code in seen if code == OK} >= set(KINDS) - {
        "adopt_fork_source"}
    assert {code for _, code in seen} >= {OK, NOT_FOUND, ALREADY_EXISTS}
    assert late_seen and slots_seen and reservations_seen


# ------------------------------------------------------------ bad input


def bad_calls():
    """(call on a ColumnarStep, the exception, what its message says)."""
    return [
        (lambda s: s.admit(["a"], np.array([1.0]), 10), TypeError,
         "width must be integers"),
        (lambda s: s.admit(["a"], 1, [10.5]), TypeError, "num_tokens"),
        (lambda s: s.admit(["a"], 1, "10"), TypeError, "num_tokens"),
        (lambda s: s.admit([b"a"], 1, 10), TypeError, "str"),
        (lambda s: s.admit(b"a", 1, 10), TypeError, "request_id"),
        (lambda s: s.admit([1], 1, 10), TypeError, "str"),
        (lambda s: s.admit(["a", "b", "c"], [1, 1], 10), ValueError,
         "disagree"),
        (lambda s: s.admit(["a", "b"], 1, 10, block_hashes=[1, 2, 3],
                           block_hashes_lengths=[2, 2]), ValueError,
         "add up to 4"),
        (lambda s: s.admit(["a", "b"], 1, 10, block_hashes=[1, 2, 3],
                           block_hashes_lengths=[-1, 4]), ValueError,
         "negative"),
        (lambda s: s.admit(["a", "b"], 1, 10, block_hashes=[1, 2, 3]),
         ValueError, "single list"),
        (lambda s: s.admit(["a"], [1 << 63], 10), ValueError, "int64"),
        (lambda s: s.admit(["a"], np.array([1 << 63], np.uint64), 10),
         ValueError, "int64"),
        (lambda s: s.admit("a", 1 << 64, 10), ValueError, "int64"),
        (lambda s: s.lookup([1, 1 << 64]), ValueError, "int64"),
        (lambda s: s.lookup([1, None]), TypeError, "integers"),
        (lambda s: s.admit(["a"], 1, 10, block_hashes=[[1.5]]), TypeError,
         "block_hashes"),
        (lambda s: s.admit(["a"], 1, 10, block_hashes=[[1 << 64]]),
         ValueError, "int64"),
        (lambda s: s.admit(["\ud800"], 1, 10), ValueError, "Unicode"),
        (lambda s: s.admit(np.array([[1, 2]]), 1, 10), TypeError,
         "request_id"),
        (lambda s: s.checkpoint(["a"], np.array([[1]]), 5), ValueError,
         "1-D"),
        (lambda s: s.reserve(["a"], [[(64, 1, 9)]]), ValueError, "fields"),
        (lambda s: s.reserve("a", [64, 1], positions_lengths=[1]),
         TypeError, "rows"),
        (lambda s: s.unindex(5), TypeError, "list per operation"),
        (lambda s: s.unindex([1, 2], hashes_lengths=2), TypeError,
         "one length per operation"),
        (lambda s: s.publish(["a", "b"], keep_all=[True]), ValueError,
         "disagree"),
        (lambda s: statecache.RequestIds.from_utf8(b"\xff", [1]),
         ValueError, "UTF-8"),
        (lambda s: statecache.RequestIds.from_utf8(b"ab", [1]),
         ValueError, "add up"),
    ]


@pytest.mark.parametrize("call,error,says", bad_calls())
def test_bad_arguments_raise_before_anything_is_added(call, error, says):
    step = statecache.ColumnarStep(None)
    step.begin_pass()
    before = step.columns()
    with pytest.raises(error, match=says):
        call(step)
    assert len(step) == 1
    after = step.columns()
    assert after.kinds.tolist() == before.kinds.tolist()
    assert after.args.tolist() == before.args.tolist()


def test_nothing_is_sent_after_bad_arguments(client, session):
    before = client.admin.stats()
    step = session.columns()
    step.begin_pass()
    with pytest.raises(TypeError):
        step.admit(["a", "b"], [1, 2.5], 10)
    with pytest.raises(ValueError):
        step.release(["a", "\udc80"])
    results = step.send()  # the begin_pass alone
    assert len(results) == 1 and results.codes.tolist() == [0]
    after = client.admin.stats()
    assert after.requests == before.requests == 0


def test_send_columns_checks_its_columns(session):
    good = statecache.ColumnarStep(None)
    good.release(["x", "y"])
    columns = good.columns()
    answer = session.send_columns(columns)
    assert answer.codes.tolist() == [NOT_FOUND, NOT_FOUND]
    assert len(answer.messages) == 2 and answer.epoch == session.epoch
    bad = statecache.OperationColumns(
        kinds=columns.kinds.astype(np.int64), request_ids=b"xy",
        request_id_lengths=columns.request_id_lengths,
        args=columns.args, hashes=columns.hashes)
    with pytest.raises(TypeError, match="kinds"):
        session.send_columns(bad)
    bad.kinds = columns.kinds
    bad.request_ids = b"xyz"
    with pytest.raises(ValueError, match="add up"):
        session.send_columns(bad)


# ------------------------------------------------------------ use


def test_a_columnar_pass(session):
    step = session.columns()
    begin = step.begin_pass()
    ids = statecache.RequestIds(["a", "b", "c"])
    hashes = np.array([11, 12, 21, 22, 31], np.int64)
    admits = step.admit(ids, width=1, num_tokens=[150, 140, 100],
                        anchor_pos=[128, 128, 64], block_hashes=hashes,
                        kv_hit_blocks=0,
                        block_hashes_lengths=[2, 2, 1])
    again = step.admit("a", 1, 10)  # a duplicate: refused
    results = step.send()
    assert len(step) == 0
    assert results[begin].ok.all()
    a = results[admits].check()
    assert a.slots.lengths.tolist() == [1, 1, 1]
    assert len(set(a.slots.values.tolist())) == 3
    assert a.blocks_resumed.tolist() == [0, 0, 0]
    assert a.fork_src.tolist() == [-1, -1, -1]
    assert a.adopted.dtype == bool
    assert results.refused == [again.start]
    dup = results[again]
    assert dup.codes.tolist() == [ALREADY_EXISTS] and not dup.ok[0]
    assert "a" in dup.messages[0]
    assert dup.slots.tolist() == [[]] and dup.fork_src.tolist() == [-1]
    with pytest.raises(statecache.AlreadyExists):
        dup.check()
    with pytest.raises(statecache.AlreadyExists):
        results.check()

    # The ids encoded once serve the next calls too.
    after = session.columns()
    ck = after.checkpoint(ids[:2], boundary_blocks=2,
                          hash=hashes[[1, 3]])
    forks = after.consume_fork(ids[:2])
    gone = after.release(ids)
    results = after.send()
    c = results[ck].check()
    assert c.kept.tolist() == [True, True]
    assert c.fork_src.tolist() == [int(s) for s in a.slots.values[:2]]
    assert results[forks].fork_src.tolist() == c.fork_src.tolist()
    assert results[gone].slots_released.tolist() == [1, 1, 1]
    with pytest.raises(ValueError, match="not of this pass"):
        results[admits]


def test_columnar_over_the_stream(session):
    with session.stream() as stream:
        step = stream.columns()
        step.begin_pass()
        admits = step.admit(["s1", "s2"], 1, 64 + 5)
        results = step.send()
        assert results[admits].check().slots.lengths.tolist() == [1, 1]
        step.release(["s1", "s2"])
        assert step.send().codes.tolist() == [0, 0]


def test_an_empty_columnar_pass_is_a_round_trip(session):
    results = session.columns().send()
    assert len(results) == 0 and results.epoch == session.epoch
    step = session.columns()
    empty = step.release([])
    step.begin_pass()
    results = step.send()
    assert len(results[empty]) == 0 and len(results) == 1
