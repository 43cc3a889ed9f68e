"""The columnar API mirrors statecache.proto, checked against its
descriptors, with no daemon:

* every Operation kind has a ColumnarStep method whose parameters are the
  operation message's fields, same names, field-number order (a repeated
  field's flat form's lengths a keyword, `<name>_lengths`), with
  StepBuilder's defaults;
* each method fills the columns exactly as the per-operation builder does
  for the same operations, whatever the arguments' form (lists, numpy
  arrays, flat arrays with lengths, scalars broadcast, RequestIds);
* the results of every kind, refusals and late fields included, read from
  random columns, are exactly what the dataclass decoder reads: the same
  values, field by field, as arrays.

A field added to the proto and forgotten here fails."""

import inspect
import random
import typing

import numpy as np
import pytest

import statecache
from statecache import _columnar, _packed, _step
from statecache.v1 import statecache_pb2 as pb

from test_layout import Columns, append, append_late, random_message
from test_step_mirror import plain_columns

KINDS = sorted(pb.Operation.DESCRIPTOR.oneofs_by_name["kind"].fields,
               key=lambda f: f.number)
KIND_IDS = [k.name for k in KINDS]
LATE = 100


def by_number(message):
    return sorted(message.fields, key=lambda f: f.number)


def result_message(kind):
    return pb.OperationResult.DESCRIPTOR.fields_by_name[kind.name] \
        .message_type


# ------------------------------------------------------------ the methods


@pytest.mark.parametrize("kind", KINDS, ids=KIND_IDS)
def test_every_kind_has_a_columnar_method_with_its_fields(kind):
    method = getattr(statecache.ColumnarStep, kind.name, None)
    assert method is not None, "ColumnarStep has no %s()" % kind.name
    assert method.__doc__, kind.name
    signature = inspect.signature(method)
    params = list(signature.parameters.values())[1:]
    positional = [p for p in params if p.kind == p.POSITIONAL_OR_KEYWORD]
    keyword = [p for p in params if p.kind == p.KEYWORD_ONLY]
    fields = by_number(kind.message_type)
    assert [p.name for p in positional] == [f.name for f in fields]
    repeated = [f.name for f in fields if f.label == f.LABEL_REPEATED]
    assert [p.name for p in keyword] == [n + "_lengths" for n in repeated]
    assert all(p.default is None for p in keyword)
    # The per-operation builder's defaults.
    per_op = inspect.signature(getattr(statecache.StepBuilder, kind.name))
    for p in positional:
        assert p.default == per_op.parameters[p.name].default, (
            kind.name, p.name)
    hints = typing.get_type_hints(method)
    assert hints["return"] is _columnar.Batch


def test_every_method_is_the_kind_it_appends():
    step = statecache.ColumnarStep(None)
    for kind in KINDS:
        values = {f.name: sample(f, 1, random.Random(kind.number))[0]
                  for f in kind.message_type.fields}
        batch = getattr(step, kind.name)(**values)
        assert batch.kind == kind.name and batch.count == 1
    assert step.columns().kinds.tolist() == [k.number for k in KINDS]


# ------------------------------------------------------------ the columns


def sample(f, n, rng):
    """`n` random values of field `f`, one per operation (a list each for
    a repeated field: of (position, hash) rows for a message)."""
    def one(g):
        if g.type == g.TYPE_STRING:
            return "id-%d-\u00e9" % rng.randrange(1000)
        if g.type == g.TYPE_BOOL:
            return rng.random() < 0.5
        if g.name in ("hash", "hashes", "block_hashes"):
            return rng.randrange(-(1 << 63), 1 << 63)
        return rng.choice([0, -1, 1, 127, 128, 1 << 40, (1 << 63) - 1,
                           -(1 << 63), rng.randrange(1 << 20)])
    if f.label != f.LABEL_REPEATED:
        return [one(f) for _ in range(n)]
    if f.message_type is None:
        return [[one(f) for _ in range(rng.randrange(4))] for _ in range(n)]
    return [[tuple(one(g) for g in by_number(f.message_type))
             for _ in range(rng.randrange(4))] for _ in range(n)]


def per_op_columns(kind, values, n):
    builder = statecache.StepBuilder(None)
    for i in range(n):
        getattr(builder, kind.name)(**{name: v[i]
                                       for name, v in values.items()})
    return plain_columns(builder.columns())


def as_form(kind, values, form):
    """The arguments and keywords of a columnar call in `form`."""
    args, keywords = {}, {}
    for f in by_number(kind.message_type):
        v = values[f.name]
        if form == "lists":
            args[f.name] = v
        elif f.type == f.TYPE_STRING:
            args[f.name] = (statecache.RequestIds(v) if form == "request_ids"
                            else np.array(v))
        elif f.label == f.LABEL_REPEATED:
            lengths = np.array([len(x) for x in v], np.int32)
            flat = [x for per in v for x in per]
            if f.message_type is not None:
                flat = np.array(flat, np.int64).reshape(
                    len(flat), len(f.message_type.fields))
            else:
                flat = np.array(flat, np.int64)
            args[f.name] = flat
            keywords[f.name + "_lengths"] = lengths
        elif f.type == f.TYPE_BOOL:
            args[f.name] = np.array(v, bool)
        else:
            args[f.name] = np.array(v, np.int64)
    return args, keywords


@pytest.mark.parametrize("form", ["lists", "arrays", "request_ids"])
@pytest.mark.parametrize("kind", KINDS, ids=KIND_IDS)
def test_each_method_fills_the_columns_as_the_builder(kind, form):
    rng = random.Random(kind.number * 7 + len(form))
    fields = kind.message_type.fields
    n = 5 if fields else 1
    values = {f.name: sample(f, n, rng) for f in fields}
    want = per_op_columns(kind, values, n)
    step = statecache.ColumnarStep(None)
    args, keywords = as_form(kind, values, form)
    batch = getattr(step, kind.name)(**args, **keywords)
    assert (batch.start, batch.count) == (0, n)
    columns = step.columns()
    columns.check()
    assert plain_columns(columns) == want
    # Positionally too, in field-number order.
    again = statecache.ColumnarStep(None)
    getattr(again, kind.name)(*[args[f.name] for f in by_number(
        kind.message_type)], **keywords)
    assert plain_columns(again.columns()) == want


@pytest.mark.parametrize("kind", KINDS, ids=KIND_IDS)
def test_scalars_broadcast_and_calls_append_in_order(kind):
    rng = random.Random(kind.number)
    fields = kind.message_type.fields
    values = {f.name: sample(f, 1, rng) for f in fields}
    # The same value for 3 operations: scalars (and the per-operation
    # lists, given once per operation) broadcast to the ids' count.
    n = 3
    repeated = {f.name: values[f.name] * n for f in fields}
    want = per_op_columns(kind, repeated, n) if fields else None
    step = statecache.ColumnarStep(None)
    first = step.begin_pass()
    arguments = {}
    for f in by_number(kind.message_type):
        v = values[f.name][0]
        # A list per operation, all the same; any other field a scalar.
        arguments[f.name] = [v] * n if f.label == f.LABEL_REPEATED else v
    if fields and not any(f.label == f.LABEL_REPEATED for f in fields):
        # All scalars make one operation: one column says 3.
        name = by_number(kind.message_type)[-1].name
        arguments[name] = [arguments[name]] * n
    batch = getattr(step, kind.name)(**arguments)
    assert (first.start, first.count) == (0, 1)
    if not fields:
        assert (batch.start, batch.count) == (1, 1)
        return
    assert (batch.start, batch.count) == (1, n)
    got = plain_columns(step.columns())
    assert got["kinds"] == [1] + want["kinds"]
    assert got["args"] == want["args"]
    assert got["hashes"] == want["hashes"]
    assert got["request_ids"] == want["request_ids"]


def test_a_single_list_is_one_operation():
    step = statecache.ColumnarStep(None)
    one = step.unindex([5, 6, 7])
    arr = step.unindex(np.array([8, 9]))
    rows = step.reserve("r", [(64, 1), (128, 2)])
    assert [b.count for b in (one, arr, rows)] == [1, 1, 1]
    want = statecache.StepBuilder(None).unindex([5, 6, 7]).unindex(
        [8, 9]).reserve("r", [(64, 1), (128, 2)])
    assert plain_columns(step.columns()) == plain_columns(want.columns())


def test_two_dimensional_arrays_are_a_list_per_operation():
    step = statecache.ColumnarStep(None)
    step.resumable_hit([100, 200], np.array([[1, 2], [3, 4]]), 2)
    step.reserve(["a", "b"], np.array([[[64, 1]], [[64, 2]]]))
    want = (statecache.StepBuilder(None)
            .resumable_hit(100, [1, 2], 2).resumable_hit(200, [3, 4], 2)
            .reserve("a", [(64, 1)]).reserve("b", [(64, 2)]))
    assert plain_columns(step.columns()) == plain_columns(want.columns())


def test_request_ids_select():
    ids = statecache.RequestIds(["a", "\u00e9b", "c", "dd"])
    assert ids.tolist() == ["a", "\u00e9b", "c", "dd"]
    assert ids[1:3].tolist() == ["\u00e9b", "c"]
    assert ids[::2].tolist() == ["a", "c"]
    assert ids[np.array([3, 0])].tolist() == ["dd", "a"]
    assert ids[np.array([True, False, False, True])].tolist() == ["a", "dd"]
    assert statecache.RequestIds.from_utf8(b"ab\xc3\xa9", [1, 3]).tolist() \
        == ["a", "b\u00e9"]


# ------------------------------------------------------------ the results


def random_pass(rng, batches, sizes=(0, 1, 1, 2, 5)):
    """Random results of `batches` batches of random kinds (refusals and
    late fields among them), as a PackedResults, with their batches."""
    kinds, spans = [], []
    wire = Columns()
    codes, messages = [], []
    for _ in range(batches):
        kind = rng.choice(KINDS)
        count = rng.choice(sizes)
        spans.append((kind, len(kinds), count))
        for _ in range(count):
            kinds.append(kind.number)
            if rng.random() < 0.25:
                codes.append(rng.choice([3, 5, 6, 8, 9, 14]))
                messages.append("refused %d \u00e9" % len(kinds))
                continue
            codes.append(0)
            message = random_message(getattr(pb, result_message(kind).name),
                                     rng)
            append(message, wire)
            append_late(message, wire)
    packed = pb.PackedResults(codes=codes, messages=messages,
                              values=wire.values, request_ids=wire.ids,
                              request_id_lengths=wire.lengths,
                              hashes=wire.hashes, late_values=wire.late)
    return kinds, spans, pb.PackedResults.FromString(
        packed.SerializeToString())


def check_batch(got, want, kind):
    """A BatchResult `got` against the dataclasses `want`, field by field
    and as rows."""
    message = result_message(kind)
    names = [f.name for f in message.fields]
    assert set(got.fields) == set(names)
    assert list(got.fields) == [f.name for f in by_number(message)
                                if f.number < LATE] + [
        f.name for f in by_number(message) if f.number >= LATE]
    assert got.codes.tolist() == [r.code for r in want]
    assert got.ok.tolist() == [r.ok for r in want]
    assert got.messages == [r.message for r in want]
    for f in message.fields:
        column = getattr(got, f.name)
        expected = [getattr(r, f.name) for r in want]
        if f.label != f.LABEL_REPEATED:
            assert isinstance(column, np.ndarray)
            assert column.dtype == (bool if f.type == f.TYPE_BOOL
                                    else np.int64), f.full_name
            assert column.tolist() == expected, f.full_name
        elif f.message_type is None:
            assert isinstance(column, statecache.Lists)
            assert column.tolist() == expected, f.full_name
            assert column.lengths.tolist() == [len(x) for x in expected]
        else:
            assert isinstance(column, statecache.RecordLists)
            assert [column[i] for i in range(len(want))] == expected
            for g in f.message_type.fields:
                values = getattr(column, g.name)
                flat = [getattr(e, g.name) for per in expected for e in per]
                assert list(values if isinstance(values, list)
                            else values.tolist()) == flat, g.full_name
    assert got.rows() == want


@pytest.mark.parametrize("seed", range(6))
def test_results_read_as_the_dataclass_decoder(seed):
    rng = random.Random(seed)
    kinds, spans, packed = random_pass(rng, 40)
    columns = _packed.result_columns(packed, epoch=7)
    want = _step.decode_results(kinds, columns)
    assert want == _step.decode_results(kinds, packed)
    token = object()
    results = statecache.ColumnarResults(columns, np.array(kinds, np.uint32),
                                         token)
    assert results.epoch == 7 and len(results) == len(kinds)
    for kind, start, count in spans:
        batch = _columnar.Batch(kind.name, start, count, token)
        check_batch(results[batch], want[start:start + count], kind)


@pytest.mark.parametrize("seed", range(3))
def test_large_batches_read_as_the_dataclass_decoder(seed):
    """Batches past the size read in Python (lists among their results)
    are read by numpy calls: the same values."""
    rng = random.Random(100 + seed)
    kinds, spans, packed = random_pass(rng, 12, sizes=(65, 90))
    columns = _packed.result_columns(packed, epoch=7)
    want = _step.decode_results(kinds, columns)
    token = object()
    results = statecache.ColumnarResults(columns, np.array(kinds, np.uint32),
                                         token)
    for kind, start, count in spans:
        assert count > _columnar._SMALL
        check_batch(results[_columnar.Batch(kind.name, start, count, token)],
                    want[start:start + count], kind)
        # A part of a run, as a later batch of the same kind would be.
        part = _columnar.Batch(kind.name, start + 3, count - 5, token)
        check_batch(results[part], want[start + 3:start + count - 2], kind)


def test_every_result_field_was_drawn():
    """The random passes above carry every kind, accepted and refused, and
    non-default values of every field (late ones included)."""
    seen = set()
    for seed in range(6):
        kinds, spans, packed = random_pass(random.Random(seed), 40)
        for r in _step.decode_results(kinds, packed):
            seen.add((type(r).__name__, r.ok))
    assert seen >= {(_step.RESULT_TYPES[k.number].__name__, ok)
                    for k in KINDS for ok in (True, False)}


def test_results_that_do_not_follow_the_rule_raise_internal():
    kinds = np.array([_step.ADMIT, _step.RELEASE], np.uint32)

    def columns(**fields):
        packed = pb.PackedResults(**fields)
        return _packed.result_columns(packed, 1)

    with pytest.raises(statecache.Internal, match="2 operations"):
        statecache.ColumnarResults(columns(codes=[0]), kinds)
    with pytest.raises(statecache.Internal):
        statecache.ColumnarResults(columns(
            codes=[0, 0], values=[1, 7, -1], late_values=[0]), kinds)
    with pytest.raises(statecache.Internal, match="values"):
        statecache.ColumnarResults(columns(
            codes=[0, 0], values=[1, 7, -1, 0, 0, 1, 99],
            late_values=[0, 0, 0, 0]), kinds)
    with pytest.raises(statecache.Internal, match="late_values"):
        statecache.ColumnarResults(columns(
            codes=[0, 0], values=[1, 7, -1, 0, 0, 1]), kinds)
    with pytest.raises(statecache.Internal, match="messages"):
        statecache.ColumnarResults(columns(codes=[5, 5], messages=["x"]),
                                   kinds)
    with pytest.raises(statecache.Internal):
        statecache.ColumnarResults(columns(
            codes=[0, 5], values=[-3], messages=["x"]), kinds)
    ok = statecache.ColumnarResults(columns(
        codes=[0, 0], values=[1, 7, -1, 0, 0, 1],
        late_values=[1, 5, 9, 16]), kinds, token := object())
    admit = ok[_columnar.Batch("admit", 0, 1, token)]
    assert admit.rows() == [statecache.AdmitResult(
        slots=[7], fork_src=-1, adopted=False, from_tier=True,
        branch_blocks=5, continuation_blocks=9, ladder_blocks=16)]
    with pytest.raises(ValueError, match="not of this pass"):
        ok[_columnar.Batch("admit", 0, 1, object())]
