"""The packed form's layout rule, applied here to the proto's messages by
reflection (as proto/packed_form.cc does), against the package: the
builder's methods encode, and statecache._packed decodes, every kind with
random arguments and results (late_values included). Also: the builder's
methods and the result dataclasses carry exactly the proto's field names,
so a field added to the proto fails here until the package follows
(test_step_mirror.py checks types, defaults and the layout itself)."""

import inspect
import random

import pytest

import statecache
from statecache import _packed, _step
from statecache.v1 import statecache_pb2 as pb

KINDS = sorted(pb.Operation.DESCRIPTOR.fields, key=lambda f: f.number)
HASH_FIELDS = ("hash", "hashes", "block_hashes")


class Columns:
    def __init__(self):
        self.ids = b""
        self.lengths = []
        self.values = []
        self.hashes = []
        self.late = []


# Fields numbered from here on were added after the layout was fixed: the
# rule skips them; a result's travel in late_values.
LATE = 100


def plain_columns(columns):
    """An OperationColumns as a dict of PackedOperations' fields (lists)."""
    return {"kinds": columns.kinds.tolist(),
            "request_ids": bytes(columns.request_ids),
            "request_id_lengths": columns.request_id_lengths.tolist(),
            "args": columns.args.tolist(),
            "hashes": columns.hashes.tolist()}


def append(message, c):
    """The layout rule: `message`'s fields in field-number order, those
    numbered LATE and above left out."""
    for f in sorted(message.DESCRIPTOR.fields, key=lambda f: f.number):
        if f.number >= LATE:
            continue
        value = getattr(message, f.name)
        column = c.hashes if f.name in HASH_FIELDS else c.values
        if f.label == f.LABEL_REPEATED:
            c.values.append(len(value))
            for v in value:
                if f.message_type is not None:
                    append(v, c)
                else:
                    column.append(int(v))
        elif f.type == f.TYPE_STRING:
            data = value.encode()
            c.ids += data
            c.lengths.append(len(data))
        elif f.message_type is not None:
            append(value, c)
        else:
            column.append(int(value))


def append_late(message, c):
    """A result's late fields (numbered LATE and above), in field-number
    order, to late_values."""
    for f in sorted(message.DESCRIPTOR.fields, key=lambda f: f.number):
        if f.number >= LATE:
            c.late.append(int(getattr(message, f.name)))


def random_value(f, rng):
    if f.type == f.TYPE_STRING:
        return "r%d-\u00e9" % rng.randrange(1000)
    if f.type == f.TYPE_BOOL:
        return rng.random() < 0.5
    if f.name in HASH_FIELDS:
        return rng.randrange(1 << 63)
    if f.type in (f.TYPE_UINT64, f.TYPE_UINT32):
        return rng.randrange(1 << 20)
    return rng.randrange(-1, 1 << 20)


def random_message(cls, rng):
    """Random values for every field."""
    message = cls()
    for f in message.DESCRIPTOR.fields:
        if f.label == f.LABEL_REPEATED:
            n = rng.randrange(4)
            if f.message_type is not None:
                for _ in range(n):
                    getattr(message, f.name).add().CopyFrom(random_message(
                        getattr(pb, f.message_type.name), rng))
            else:
                getattr(message, f.name).extend(
                    random_value(f, rng) for _ in range(n))
        else:
            setattr(message, f.name, random_value(f, rng))
    return message


def as_kwargs(message):
    """A list-form operation message as the builder method's keywords."""
    kwargs = {}
    for f in message.DESCRIPTOR.fields:
        value = getattr(message, f.name)
        if f.label == f.LABEL_REPEATED:
            if f.message_type is not None:
                value = [{g.name: getattr(v, g.name)
                          for g in v.DESCRIPTOR.fields} for v in value]
            else:
                value = list(value)
        kwargs[f.name] = value
    return kwargs


def test_every_kind_encodes_by_the_layout_rule():
    rng = random.Random(7)
    operations = []
    for _ in range(20):
        for kind in KINDS:
            message = random_message(getattr(pb, kind.message_type.name), rng)
            operations.append((kind, message))
    rng.shuffle(operations)

    want = Columns()
    builder = statecache.StepBuilder(sender=None)
    for kind, message in operations:
        append(message, want)
        getattr(builder, kind.name)(**as_kwargs(message))
    columns = builder.columns()
    columns.check()
    got = plain_columns(columns)
    assert got["kinds"] == [kind.number for kind, _ in operations]
    assert got["request_ids"] == want.ids
    assert got["request_id_lengths"] == want.lengths
    assert got["args"] == want.values
    assert got["hashes"] == want.hashes
    # What send() sends over gRPC: the same columns, in the message's wire
    # form (encode() writes the same bytes from the builder's lists).
    sent = pb.PackedOperations.FromString(_packed.encode_columns(columns))
    assert sent == pb.PackedOperations(**got)
    assert builder.encode() == _packed.encode_columns(columns)
    request = pb.StepRequest.FromString(_step.step_request(
        _step.step_request_prefix("session-\u00e9"), builder.encode()))
    assert request.session_id == "session-\u00e9"
    assert request.packed == sent


def test_encoding_edge_values():
    big = (1 << 63) - 1
    builder = statecache.StepBuilder(sender=None)
    builder.checkpoint("\u00e9" * 100, boundary_blocks=-1, hash=big,
                       anchor_pos=-(1 << 63))
    builder.admit("x" * 300, width=1, num_tokens=1 << 40)
    builder.lookup(-5)
    sent = pb.PackedOperations.FromString(builder.encode())
    assert list(sent.args) == [-1, -(1 << 63), 1, 1 << 40, 0, 0, 0]
    assert list(sent.hashes) == [big, -5]
    assert list(sent.request_id_lengths) == [200, 300]
    assert sent.request_ids == ("\u00e9" * 100 + "x" * 300).encode()
    assert pb.PackedOperations.FromString(
        statecache.StepBuilder(None).encode()) == pb.PackedOperations()
    edge = builder.columns()
    assert pb.PackedOperations.FromString(
        _packed.encode_columns(edge)) == sent
    assert edge.args.tolist() == list(sent.args)
    # What the columns (send()'s and the step channel's) refuse, as encode()
    # does: before anything is sent.
    for bad, error in [(dict(hash=1 << 63), TypeError),
                       (dict(hash="1"), TypeError)]:
        with pytest.raises(error):
            statecache.StepBuilder(None).lookup(**bad).encode()
        with pytest.raises(error):
            statecache.StepBuilder(None).lookup(**bad).columns()
    for build in (lambda b: b.encode(), lambda b: b.columns()):
        with pytest.raises(ValueError, match="int64"):
            build(statecache.StepBuilder(None).admit("a", 1, 1 << 64))
        with pytest.raises(TypeError, match="float"):
            build(statecache.StepBuilder(None).admit("a", 1, 2.5))
        with pytest.raises(TypeError):
            build(statecache.StepBuilder(None).release(7))


def test_every_kind_decodes_by_the_layout_rule():
    rng = random.Random(11)
    kinds, expected = [], []
    packed = Columns()
    codes, messages = [], []
    for _ in range(20):
        for kind in KINDS:
            result_type = getattr(
                pb, pb.OperationResult.DESCRIPTOR.fields_by_name[kind.name]
                .message_type.name)
            kinds.append(kind.number)
            if rng.random() < 0.2:
                code = rng.choice([3, 5, 6, 8, 9, 14])
                codes.append(code)
                messages.append("refused %d" % len(kinds))
                expected.append((kind.name, None, code, messages[-1]))
                continue
            message = random_message(result_type, rng)
            codes.append(0)
            append(message, packed)
            append_late(message, packed)
            expected.append((kind.name, message, 0, ""))
    wire = pb.PackedResults(codes=codes, messages=messages,
                            values=packed.values, request_ids=packed.ids,
                            request_id_lengths=packed.lengths,
                            hashes=packed.hashes, late_values=packed.late)
    assert packed.late, "no result with a late field was drawn"
    wire = pb.PackedResults.FromString(wire.SerializeToString())
    results = _step.decode_results(kinds, wire)
    assert len(results) == len(kinds)
    for (name, message, code, text), result in zip(expected, results):
        assert type(result) is _step.RESULT_TYPES[
            pb.Operation.DESCRIPTOR.fields_by_name[name].number]
        assert (result.code, result.message) == (code, text)
        if message is None:
            continue
        for f in message.DESCRIPTOR.fields:
            value = getattr(message, f.name)
            got = getattr(result, f.name)
            if f.label == f.LABEL_REPEATED and f.message_type is not None:
                assert len(got) == len(value)
                for g, v in zip(got, value):
                    for sub in v.DESCRIPTOR.fields:
                        assert getattr(g, sub.name) == getattr(v, sub.name)
            elif f.label == f.LABEL_REPEATED:
                assert got == list(value)
            else:
                assert got == value, (name, f.name)


def test_results_that_do_not_follow_the_rule_raise_internal():
    kinds = [_step.ADMIT, _step.RELEASE]
    with pytest.raises(statecache.Internal, match="2 operations"):
        _step.decode_results(kinds, pb.PackedResults(codes=[0]))
    with pytest.raises(statecache.Internal, match="too short"):
        _step.decode_results(kinds, pb.PackedResults(
            codes=[0, 0], values=[1, 7, -1], late_values=[0]))
    with pytest.raises(statecache.Internal, match="longer"):
        _step.decode_results(kinds, pb.PackedResults(
            codes=[0, 0], values=[1, 7, -1, 0, 0, 1, 99],
            late_values=[0, 0, 0, 0]))
    # admit's from_tier, branch_blocks, continuation_blocks and
    # ladder_blocks are in late_values: exactly four entries.
    with pytest.raises(statecache.Internal, match="late_values"):
        _step.decode_results(kinds, pb.PackedResults(
            codes=[0, 0], values=[1, 7, -1, 0, 0, 1]))
    with pytest.raises(statecache.Internal, match="late_values"):
        _step.decode_results(kinds, pb.PackedResults(
            codes=[0, 0], values=[1, 7, -1, 0, 0, 1],
            late_values=[1, 0, 0, 0, 0]))
    with pytest.raises(statecache.Internal, match="too short"):
        _step.decode_results(kinds, pb.PackedResults(
            codes=[0, 0], values=[1, 7, -1, 0, 0, 1], late_values=[1]))
    with pytest.raises(statecache.Internal, match="too short"):
        _step.decode_results(kinds, pb.PackedResults(codes=[5, 5]))
    admit, release = _step.decode_results(kinds, pb.PackedResults(
        codes=[0, 0], values=[1, 7, -1, 0, 0, 1], late_values=[1, 5, 9, 16]))
    assert admit == statecache.AdmitResult(
        slots=[7], fork_src=-1, adopted=False, from_tier=True,
        branch_blocks=5, continuation_blocks=9, ladder_blocks=16)
    assert release.slots_released == 1


def test_names_mirror_the_proto():
    for kind in KINDS:
        method = getattr(statecache.StepBuilder, kind.name)
        params = list(inspect.signature(method).parameters)[1:]
        assert params == [f.name for f in sorted(
            kind.message_type.fields, key=lambda f: f.number)], kind.name
        result_field = pb.OperationResult.DESCRIPTOR.fields_by_name[kind.name]
        cls = _step.RESULT_TYPES[kind.number]
        assert cls.__name__ == result_field.message_type.name
        assert list(cls.__dataclass_fields__) == [
            f.name for f in result_field.message_type.fields] + [
            "code", "message"]
    for cls, message in [(statecache.SlotMove, pb.SlotMove),
                         (statecache.Reservation, pb.Reservation),
                         (statecache.MidstepPosition, pb.MidstepPosition),
                         (statecache.Stats, pb.GetStatsResponse),
                         (statecache.WarmRestart, pb.WarmRestartStats),
                         (statecache.SessionInfo, pb.SessionInfo),
                         (statecache.Identity, pb.Identity),
                         (statecache.TransferConfig, pb.TransferConfig),
                         (statecache.ResizeResult, pb.ResizeResponse),
                         (statecache.DrainResult, pb.DrainResponse),
                         (statecache.StateTensor, pb.StateTensor),
                         (statecache.TensorPlacement, pb.TensorPlacement)]:
        assert sorted(cls.__dataclass_fields__) == sorted(
            f.name for f in message.DESCRIPTOR.fields), cls.__name__
    memory_fields = set(statecache.StateMemory.__dataclass_fields__)
    assert memory_fields - {"_mmap"} == {
        f.name for f in pb.StateMemory.DESCRIPTOR.fields}
