"""The step API mirrors statecache.proto, checked against its descriptors:

* every Operation kind has a StepBuilder method whose parameters are the
  operation message's fields, same names, field-number order;
* every result message (and every message a result or an operation holds
  in a list) has a dataclass with exactly its fields, in declaration order,
  of the matching types and defaults;
* the packed layout the codec (statecache._packed) derives from the
  descriptors is the rule statecache.proto documents for PackedOperations
  and PackedResults, re-derived here on its own, and the builder's methods
  fill the columns by it.

A field added to the proto and forgotten on the Python side fails here.
The public API carries type hints, and the package ships py.typed."""

import collections.abc
import dataclasses
import inspect
import os
import re
import typing

import pytest

import statecache
from statecache import _client, _errors, _memory, _packed, _step, testing
from statecache.v1 import statecache_pb2 as pb

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = os.path.join(HERE, os.pardir, os.pardir, os.pardir, "proto",
                     "statecache", "v1", "statecache.proto")

KINDS = sorted(pb.Operation.DESCRIPTOR.oneofs_by_name["kind"].fields,
               key=lambda f: f.number)
KIND_IDS = [k.name for k in KINDS]
# Fields numbered from here on were added after the layouts were fixed.
LATE = 100


def result_message(kind):
    return pb.OperationResult.DESCRIPTOR.fields_by_name[kind.name] \
        .message_type


def by_number(message):
    return sorted(message.fields, key=lambda f: f.number)


def element_messages():
    """The messages held in lists by operations and results (SlotMove,
    MidstepPosition, Reservation)."""
    found = {}
    for kind in KINDS:
        for message in (kind.message_type, result_message(kind)):
            for f in message.fields:
                if f.message_type is not None:
                    found[f.message_type.name] = f.message_type
    return sorted(found.values(), key=lambda m: m.name)


# ------------------------------------------------------------ the builder


def expected_parameter_type(f):
    if f.label == f.LABEL_REPEATED:
        return None  # checked below: a collection
    if f.type == f.TYPE_STRING:
        return str
    if f.type == f.TYPE_BOOL:
        return bool
    return int


@pytest.mark.parametrize("kind", KINDS, ids=KIND_IDS)
def test_every_kind_has_a_builder_method_with_its_fields(kind):
    method = getattr(statecache.StepBuilder, kind.name, None)
    assert method is not None, "StepBuilder has no %s()" % kind.name
    assert method.__doc__, kind.name
    params = list(inspect.signature(method).parameters.values())[1:]
    fields = by_number(kind.message_type)
    # The package sends the packed form only, which carries no operation
    # field numbered LATE and above (the list form does).
    assert all(f.number < LATE for f in fields), (
        "%s has a field numbered >= %d: it travels in the list form only, "
        "which StepBuilder does not send" % (kind.message_type.name, LATE))
    assert [p.name for p in params] == [f.name for f in fields]
    hints = typing.get_type_hints(method)
    assert hints["return"] is statecache.StepBuilder
    for p, f in zip(params, fields):
        want = expected_parameter_type(f)
        if want is None:
            origin = typing.get_origin(hints[p.name])
            assert origin in (collections.abc.Collection,
                              collections.abc.Iterable), (f.full_name,
                                                          hints[p.name])
            assert p.default == (), f.full_name
        else:
            assert hints[p.name] is want, f.full_name


# ------------------------------------------------------------ the dataclasses


def is_slot(name):
    """A field naming a slot, whose "none" (its default) is -1."""
    return name == "slot" or name.endswith("_slot") or name == "fork_src"


def expected_field(f):
    """(type, default) of the dataclass field mirroring proto field `f`."""
    if f.label == f.LABEL_REPEATED:
        element = (getattr(statecache, f.message_type.name)
                   if f.message_type is not None else int)
        return list[element], []
    if f.type == f.TYPE_STRING:
        return str, ""
    if f.type == f.TYPE_BOOL:
        return bool, False
    assert f.message_type is None, f.full_name
    return int, -1 if is_slot(f.name) else 0


def check_mirror(cls, message, extra=()):
    assert dataclasses.is_dataclass(cls), cls
    assert "__slots__" in vars(cls), "%s: not slots=True" % cls.__name__
    assert cls.__doc__ and not cls.__doc__.startswith(cls.__name__ + "("), \
        cls.__name__
    names = [f.name for f in message.fields] + [name for name, _, _ in extra]
    own = dataclasses.fields(cls)
    assert [f.name for f in own] == names, (
        "%s: fields %s, the proto's %s" % (
            cls.__name__, [f.name for f in own], names))
    hints = typing.get_type_hints(cls)
    made = cls()
    for f in message.fields:
        want_type, want_default = expected_field(f)
        assert hints[f.name] == want_type, f.full_name
        assert getattr(made, f.name) == want_default, f.full_name
    for name, want_type, want_default in extra:
        assert hints[name] is want_type, (cls.__name__, name)
        assert getattr(made, name) == want_default, (cls.__name__, name)


@pytest.mark.parametrize("kind", KINDS, ids=KIND_IDS)
def test_every_result_message_has_its_dataclass(kind):
    message = result_message(kind)
    cls = _step.RESULT_TYPES[kind.number]
    assert cls is getattr(statecache, message.name)
    assert message.name in statecache.__all__
    check_mirror(cls, message, [("code", int, 0), ("message", str, "")])
    assert cls().ok and cls(code=5, message="gone").ok is False
    with pytest.raises(statecache.NotFound, match="gone"):
        cls(code=5, message="gone").check()


@pytest.mark.parametrize("message", element_messages(),
                         ids=[m.name for m in element_messages()])
def test_every_element_message_has_its_dataclass(message):
    cls = getattr(statecache, message.name)
    assert message.name in statecache.__all__
    check_mirror(cls, message)


# ------------------------------------------------------------ the layout


def documented_place(f):
    """The layout rule as statecache.proto's PackedOperations comment states
    it, for field `f`: a string field: the request id columns; a field named
    `hash`: hashes; any other scalar: args (values); a repeated field: its
    length in args, then its elements (`block_hashes` and `hashes` elements
    are hashes; a repeated message's, each element's fields)."""
    if f.label == f.LABEL_REPEATED:
        if f.message_type is not None:
            return "each"
        return "hashes" if f.name in ("block_hashes", "hashes") else "values"
    if f.type == f.TYPE_STRING:
        return "id"
    return "hash" if f.name == "hash" else "value"


def every_packed_message():
    messages = {}
    for kind in KINDS:
        messages[kind.message_type.name] = kind.message_type
        messages[result_message(kind).name] = result_message(kind)
    for m in element_messages():
        messages[m.name] = m
    return sorted(messages.values(), key=lambda m: m.name)


@pytest.mark.parametrize("message", every_packed_message(),
                         ids=[m.name for m in every_packed_message()])
def test_the_codec_layout_is_the_documented_rule(message):
    got = _packed.layout(message)
    want = [(f.name, documented_place(f)) for f in by_number(message)
            if f.number < LATE]
    assert [(e.name, e.place) for e in got] == want
    for entry, f in zip(got, [f for f in by_number(message)
                              if f.number < LATE]):
        assert entry.is_bool == (f.type == f.TYPE_BOOL), f.full_name
    late = [f.name for f in by_number(message) if f.number >= LATE]
    assert [e.name for e in _packed.late_fields(message)] == late


def test_the_proto_comments_examples():
    """The examples statecache.proto gives, and its list of kinds."""
    def places(name):
        return [(e.name, e.place) for e in _packed.layout(
            pb.DESCRIPTOR.message_types_by_name[name])]

    # "admit is: request_id; args width, num_tokens, anchor_pos,
    # len(block_hashes); that many hashes; args kv_hit_blocks."
    assert places("Admit") == [
        ("request_id", "id"), ("width", "value"), ("num_tokens", "value"),
        ("anchor_pos", "value"), ("block_hashes", "hashes"),
        ("kv_hit_blocks", "value")]
    # "checkpoint is: request_id; args boundary_blocks; hashes hash; args
    # anchor_pos."
    assert places("Checkpoint") == [
        ("request_id", "id"), ("boundary_blocks", "value"),
        ("hash", "hash"), ("anchor_pos", "value")]
    # "admit's result is: len(slots), the slots..., fork_src,
    # blocks_resumed, adopted." (from_tier and the placement advice,
    # numbered 100 and above, in late_values.)
    assert places("AdmitResult") == [
        ("slots", "values"), ("fork_src", "value"),
        ("blocks_resumed", "value"), ("adopted", "value")]
    assert [e.name for e in _packed.late_fields(pb.AdmitResult.DESCRIPTOR)] \
        == ["from_tier", "branch_blocks", "continuation_blocks",
            "ladder_blocks"]
    with open(PROTO) as f:
        proto = f.read()
    listed = re.search(r"Operation's `kind` oneof \(([^)]*)\)", proto)
    assert listed, "statecache.proto no longer lists the kinds"
    kinds = dict((name, int(number)) for number, name in re.findall(
        r"(\d+) (\w+)", re.sub(r"\s*//\s*", " ", listed.group(1))))
    assert kinds == _packed.KINDS == {k.name: k.number for k in KINDS}


def sample(f, counter):
    """A distinct value for field `f` (a list of two for a repeated one)."""
    def one(g):
        counter[0] += 1
        if g.type == g.TYPE_STRING:
            return "id-%d-\u00e9" % counter[0]
        if g.type == g.TYPE_BOOL:
            return True
        return counter[0] * 1000 + 7
    if f.label != f.LABEL_REPEATED:
        return one(f)
    if f.message_type is None:
        return [one(f), one(f)]
    return [tuple(one(g) for g in by_number(f.message_type))
            for _ in range(2)]


def by_the_codec_layout(message, values, columns):
    """Appends `values` (field name -> value) to `columns` as the codec's
    layout of `message` places them."""
    ids, args, hashes = columns
    for entry in _packed.layout(message):
        value = values[entry.name]
        if entry.place == _packed.ID:
            ids.append(value)
        elif entry.place == _packed.HASH:
            hashes.append(value)
        elif entry.place == _packed.VALUE:
            args.append(int(value))
        else:
            args.append(len(value))
            if entry.place == _packed.HASHES:
                hashes.extend(value)
            elif entry.place == _packed.VALUES:
                args.extend(value)
            else:
                for element in value:
                    by_the_codec_layout(
                        entry.element, dict(zip(
                            [f.name for f in by_number(entry.element)],
                            element)), columns)


@pytest.mark.parametrize("kind", KINDS, ids=KIND_IDS)
def test_each_builder_method_fills_the_columns_by_the_layout(kind):
    counter = [0]
    values = {f.name: sample(f, counter) for f in kind.message_type.fields}
    builder = statecache.StepBuilder(None)
    getattr(builder, kind.name)(**values)
    ids, args, hashes = [], [], []
    by_the_codec_layout(kind.message_type, values, (ids, args, hashes))
    columns = plain_columns(builder.columns())
    assert columns["kinds"] == [kind.number]
    assert columns["request_ids"] == "".join(ids).encode()
    assert columns["request_id_lengths"] == [len(i.encode()) for i in ids]
    assert columns["args"] == args
    assert columns["hashes"] == hashes
    # Positionally too, in field-number order.
    positional = statecache.StepBuilder(None)
    getattr(positional, kind.name)(*[values[f.name]
                                     for f in by_number(kind.message_type)])
    assert plain_columns(positional.columns()) == columns


def plain_columns(columns):
    """An OperationColumns as a dict of lists."""
    return {"kinds": columns.kinds.tolist(),
            "request_ids": bytes(columns.request_ids),
            "request_id_lengths": columns.request_id_lengths.tolist(),
            "args": columns.args.tolist(),
            "hashes": columns.hashes.tolist()}


# ------------------------------------------------------------ types, py.typed


def public_callables():
    """Every public function, class and method of the package's modules."""
    found = []
    for module in (statecache, _client, _errors, _memory, _step, testing):
        for name in module.__all__:
            obj = getattr(module, name)
            if getattr(obj, "__module__", "").split(".")[0] != "statecache":
                continue
            if inspect.isfunction(obj):
                found.append(("%s.%s" % (module.__name__, name), obj))
            elif inspect.isclass(obj):
                for attr, member in vars(obj).items():
                    if attr.startswith("_") and attr != "__init__":
                        continue
                    member = getattr(member, "__func__", member)
                    member = getattr(member, "fget", member)
                    if inspect.isfunction(member):
                        found.append(("%s.%s.%s" % (module.__name__, name,
                                                    attr), member))
    return found


def test_the_public_api_has_type_hints():
    missing = []
    for name, func in public_callables():
        signature = inspect.signature(func)
        for i, p in enumerate(signature.parameters.values()):
            if i == 0 and p.name in ("self", "cls"):
                continue
            if p.annotation is inspect.Parameter.empty:
                missing.append("%s(%s)" % (name, p.name))
        if signature.return_annotation is inspect.Signature.empty:
            missing.append("%s -> ?" % name)
        try:
            typing.get_type_hints(func)  # every hint resolves...
        except NameError as e:  # ...but the optional numpy's and torch's
            assert e.name in ("numpy", "torch_module"), (name, e)
    assert not missing, "no type hint: " + ", ".join(missing)


def test_the_package_ships_py_typed():
    package = os.path.dirname(os.path.realpath(_step.__file__))
    assert os.path.isfile(os.path.join(package, "py.typed"))
    with open(os.path.join(package, os.pardir, "pyproject.toml")) as f:
        pyproject = f.read()
    assert re.search(r'\[tool\.setuptools\.package-data\]\s*\n'
                     r'statecache = \[[^\]]*"py\.typed"', pyproject)
