"""The package's plain values mirror the proto they are read from: each
dataclass has exactly its message's fields, under the same names, of the
matching Python type. A field added to GetStatsResponse (or any message
below) and forgotten here fails this test; so does one left behind after
the proto dropped it."""

import dataclasses
import typing

import pytest

import statecache
from statecache.v1 import statecache_pb2 as pb
from google.protobuf.descriptor import FieldDescriptor

# Each plain value and the message it mirrors.
MIRRORS = [
    (statecache.Stats, pb.GetStatsResponse),
    (statecache.WarmRestart, pb.WarmRestartStats),
    (statecache.Identity, pb.Identity),
    (statecache.TransferConfig, pb.TransferConfig),
    (statecache.SessionInfo, pb.SessionInfo),
    (statecache.ResizeResult, pb.ResizeResponse),
    (statecache.DrainResult, pb.DrainResponse),
]

_SCALARS = {
    FieldDescriptor.CPPTYPE_INT32: int, FieldDescriptor.CPPTYPE_INT64: int,
    FieldDescriptor.CPPTYPE_UINT32: int, FieldDescriptor.CPPTYPE_UINT64: int,
    FieldDescriptor.CPPTYPE_DOUBLE: float, FieldDescriptor.CPPTYPE_FLOAT: float,
    FieldDescriptor.CPPTYPE_BOOL: bool, FieldDescriptor.CPPTYPE_STRING: str,
    FieldDescriptor.CPPTYPE_ENUM: int,
}


def _expected_type(field):
    if field.cpp_type == FieldDescriptor.CPPTYPE_MESSAGE:
        for cls, message in MIRRORS:
            if message.DESCRIPTOR is field.message_type:
                return cls
        raise AssertionError("%s has no plain mirror" % field.full_name)
    return _SCALARS[field.cpp_type]


@pytest.mark.parametrize("cls,message", MIRRORS,
                         ids=[c.__name__ for c, _ in MIRRORS])
def test_a_plain_value_has_its_messages_fields(cls, message):
    hints = typing.get_type_hints(cls)
    mirrored = {f.name for f in dataclasses.fields(cls)}
    in_proto = {f.name for f in message.DESCRIPTOR.fields}
    assert mirrored == in_proto, (
        "missing from %s: %s; not in %s: %s" % (
            cls.__name__, sorted(in_proto - mirrored),
            message.DESCRIPTOR.name, sorted(mirrored - in_proto)))
    for field in message.DESCRIPTOR.fields:
        assert hints[field.name] is _expected_type(field), field.full_name


def test_stats_reads_every_field_from_the_message():
    """What the daemon sends arrives: every field set to a distinct value
    comes back through the plain value (the nested ones too)."""
    response = pb.GetStatsResponse()
    expected = {}
    for n, field in enumerate(pb.GetStatsResponse.DESCRIPTOR.fields, 1):
        if field.cpp_type == FieldDescriptor.CPPTYPE_MESSAGE:
            continue
        value = _expected_type(field)(n) if field.cpp_type != \
            FieldDescriptor.CPPTYPE_STRING else "v%d" % n
        if field.cpp_type == FieldDescriptor.CPPTYPE_BOOL:
            value = True
        setattr(response, field.name, value)
        expected[field.name] = value
    response.warm_restart.outcome = "restored"
    response.warm_restart.saves = 7
    response.identity.model_id = "m"
    response.transfer.kind = "fork"
    stats = statecache._client._plain(statecache.Stats, response)
    for name, value in expected.items():
        assert getattr(stats, name) == value, name
    assert stats.warm_restart == statecache.WarmRestart(outcome="restored",
                                                        saves=7)
    assert stats.identity.model_id == "m"
    assert stats.transfer.kind == "fork"
