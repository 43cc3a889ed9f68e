"""A pass's operations (StepBuilder) and their results (one dataclass each).

The builder appends every operation's fields to the columns of the packed
form (PackedOperations: kinds, request ids, integer arguments, hashes) by
the layout rule in statecache.proto, a few list appends per operation, and
send() writes the columns' wire bytes itself (see "encoding" below); the
results are read back from PackedResults by the same rule. Nothing here
builds a protobuf message per operation.

No layout is written here by hand: at import, each builder method and each
result reader is generated from the proto's descriptors (each message's
fields in field-number order, placed by the rule, see _place), so they
follow statecache.proto as compiled; the methods' signatures and docstrings
below are the API, checked against the descriptors.
"""

import inspect
import re
import struct
from dataclasses import field, fields, make_dataclass
from typing import List

from ._errors import Internal, error_for
from ._proto import pb as _pb

__all__ = [
    "StepBuilder",
    "MidstepPosition",
    "SlotMove",
    "Reservation",
    "BeginPassResult",
    "AdmitResult",
    "ResumableHitResult",
    "LookupResult",
    "ReserveResult",
    "PublishResult",
    "CancelResult",
    "CheckpointResult",
    "ConsumeForkResult",
    "AdoptForkSourceResult",
    "ReleaseResult",
    "UnindexResult",
    "ClearIndexResult",
    "CopyResult",
    "SnapshotResult",
]

# ------------------------------------------------------------------ the rule

# Operation's kinds by name: their field numbers are the packed form's kinds.
_KINDS = {f.name: f for f in _pb.Operation.DESCRIPTOR.oneofs_by_name["kind"]
          .fields}
# A kind's result message: OperationResult's field of the same name.
_RESULT_FIELDS = _pb.OperationResult.DESCRIPTOR.fields_by_name
_HASH_NAMES = ("hash", "hashes", "block_hashes")


# Fields numbered from here on were added after the layouts were fixed:
# the layout rule skips them (a layout never changes). An operation's are
# carried by the list form only; a result's by PackedResults.late_values.
_LIST_ONLY_NUMBER = 100


def _by_number(descriptor):
    """A message's packed fields in field-number order (the layout
    rule's)."""
    return sorted((f for f in descriptor.fields
                   if f.number < _LIST_ONLY_NUMBER), key=lambda f: f.number)


def _place(f):
    """Where the layout rule puts field `f`: "id" (request_ids and
    request_id_lengths), "hash" (hashes), "value" (args, or values for
    results: any other scalar, bools as 0/1); for a repeated field its
    length in args/values, then the elements: "hashes" (`hashes`,
    `block_hashes`), "values" or "each" (a message's fields, per element)."""
    if f.label == f.LABEL_REPEATED:
        if f.message_type is not None:
            return "each"
        return "hashes" if f.name in _HASH_NAMES else "values"
    if f.type == f.TYPE_STRING:
        return "id"
    return "hash" if f.name in _HASH_NAMES else "value"


def _generate(source, name, namespace):
    """The function `name` that `source` defines, run in `namespace`."""
    exec(compile(source, "<statecache: %s>" % name, "exec"),  # noqa: S102
         namespace)
    return namespace[name]


# Operation's `kind` field numbers (the packed form's kinds).
BEGIN_PASS = _KINDS["begin_pass"].number
ADMIT = _KINDS["admit"].number
RESUMABLE_HIT = _KINDS["resumable_hit"].number
LOOKUP = _KINDS["lookup"].number
RESERVE = _KINDS["reserve"].number
PUBLISH = _KINDS["publish"].number
CANCEL = _KINDS["cancel"].number
CHECKPOINT = _KINDS["checkpoint"].number
CONSUME_FORK = _KINDS["consume_fork"].number
ADOPT_FORK_SOURCE = _KINDS["adopt_fork_source"].number
RELEASE = _KINDS["release"].number
UNINDEX = _KINDS["unindex"].number
CLEAR_INDEX = _KINDS["clear_index"].number
COPY = _KINDS["copy"].number
SNAPSHOT = _KINDS["snapshot"].number


# ------------------------------------------------------------------ results


class _Result:
    """What every operation result has besides its own fields."""

    __slots__ = ()

    @property
    def ok(self):
        """True when the operation applied (code 0)."""
        return self.code == 0

    def check(self):
        """Returns self if the operation applied, else raises its refusal
        as the matching :class:`statecache.Error` subclass."""
        if self.code != 0:
            raise error_for(self.code, self.message)
        return self


def _is_slot(name):
    """Whether a field names a slot, whose "none" is -1."""
    return name == "slot" or name.endswith("_slot") or name == "fork_src"


def _dataclass(name, doc, base=object):
    """A dataclass of the proto message `name`'s fields, in declaration
    order, each at its default (-1 for a slot: "none"); after them `code`
    and `message` when `base` is _Result."""
    spec = []
    for f in _pb.DESCRIPTOR.message_types_by_name[name].fields:
        if f.label == f.LABEL_REPEATED:
            element = (_CLASSES[f.message_type.name] if f.message_type
                       else int)
            spec.append((f.name, List[element], field(default_factory=list)))
        elif f.type == f.TYPE_STRING:
            spec.append((f.name, str, ""))
        elif f.type == f.TYPE_BOOL:
            spec.append((f.name, bool, False))
        else:
            spec.append((f.name, int, -1 if _is_slot(f.name) else 0))
    if base is _Result:
        spec += [("code", int, 0), ("message", str, "")]
    cls = make_dataclass(name, spec, bases=(base,), slots=True,
                         namespace={"__doc__": doc})
    cls.__module__ = __name__
    _CLASSES[name] = cls
    return cls


# The classes below, by message name (the elements first).
_CLASSES = {}

MidstepPosition = _dataclass(
    "MidstepPosition",
    "A position a forward will pass (reserve's argument); a ``(position, "
    "hash)`` tuple or a dict with those keys does as well.")
SlotMove = _dataclass(
    "SlotMove",
    "A live request's slot the pool moved (a shrink): re-point its slot "
    "``index`` from ``from_slot`` to ``to_slot`` before the next forward.")
Reservation = _dataclass("Reservation", "A midstep checkpoint's slot.")


def _result(name, note=""):
    return _dataclass(name, "The result of %s: the proto message's fields, "
                      "then `code` (0 OK, else the refusal's google.rpc.Code "
                      "number) and `message`; refused, the fields are at "
                      "their defaults (-1 for a slot: none).%s" % (name, note),
                      _Result)


# Every result, one per operation kind, field for field as in the proto.
BeginPassResult = _result("BeginPassResult")
AdmitResult = _result(
    "AdmitResult",
    " The first forward reads ``fork_src`` when it is set, else slot 0 when "
    "``blocks_resumed`` > 0 (``adopted``), else nothing: a cold start "
    "(``blocks_resumed`` == 0) gets slots holding whatever their last "
    "holder left (another request's state), so its forward starts from the "
    "zero state at token 0 and never reads them.")
ResumableHitResult = _result("ResumableHitResult")
LookupResult = _result("LookupResult")
ReserveResult = _result("ReserveResult")
PublishResult = _result("PublishResult")
CancelResult = _result("CancelResult")
CheckpointResult = _result("CheckpointResult")
ConsumeForkResult = _result("ConsumeForkResult")
AdoptForkSourceResult = _result("AdoptForkSourceResult")
ReleaseResult = _result("ReleaseResult")
UnindexResult = _result("UnindexResult")
ClearIndexResult = _result("ClearIndexResult")
CopyResult = _result("CopyResult")
SnapshotResult = _result("SnapshotResult")

# The result class of each kind, by kind number.
RESULT_TYPES = {
    kind.number: _CLASSES[_RESULT_FIELDS[name].message_type.name]
    for name, kind in _KINDS.items()
}


# ------------------------------------------------------------------ decoding
#
# PackedResults' `values` column is read as one list, and each result is
# built straight from it by its message's fields in the rule's order. The
# code that does it is generated from the descriptors (_decoder_lines): for
# the kinds a pass carries most, inline in the decoding loop; for the others
# a reader each, reader(values, at, columns) -> (result, next at), where
# `columns` reads the request id and hash columns (only begin_pass's moves
# and reserve's reservations use them).


class _Columns:
    """Cursors over PackedResults' request id and hash columns."""

    __slots__ = ("ids", "lengths", "hashes", "id", "offset", "hash")

    def __init__(self, packed):
        self.ids = packed.request_ids
        self.lengths = packed.request_id_lengths
        self.hashes = packed.hashes
        self.id = 0
        self.offset = 0
        self.hash = 0

    def next_id(self):
        length = self.lengths[self.id]
        start = self.offset
        self.offset = start + length
        self.id += 1
        return self.ids[start:self.offset].decode()

    def next_hash(self):
        h = self.hashes[self.hash]
        self.hash += 1
        return h

    def used_up(self):
        return (self.id == len(self.lengths) and self.offset == len(self.ids)
                and self.hash == len(self.hashes))


class _Names:
    """Fresh local names for generated code."""

    def __init__(self):
        self.count = 0

    def __call__(self, stem):
        self.count += 1
        return "_%s%d" % (stem, self.count)


def _decoder_lines(descriptor, store, names, indent="    "):
    """Source lines that read one `descriptor` message from `v` at `at` (and
    the columns `c`) into its dataclass, then run `store` % the construction
    and leave `at` past it. `names` makes the locals."""
    cls = _CLASSES[descriptor.name]
    order = [f.name for f in fields(cls)][:len(descriptor.fields)]
    rule = _by_number(descriptor)
    fixed = all(_place(f) in ("id", "hash", "value") for f in rule)
    # A fixed layout whose dataclass has the rule's order reads inline, each
    # value from v[at + offset]; otherwise through locals, in the rule's
    # order, `at` moving past each list.
    packed = {f.name for f in rule}
    inline = fixed and [n for n in order if n in packed] == [f.name
                                                             for f in rule]
    lines, exprs, offset = [], {}, 0

    def at_plus(k):
        return "v[at + %d]" % k if k else "v[at]"

    for f in rule:
        place = _place(f)
        if place in ("id", "hash", "value"):
            expr = {"id": "c.next_id()", "hash": "c.next_hash()",
                    "value": at_plus(offset)}[place]
            if place == "value":
                if f.type == f.TYPE_BOOL:
                    expr += " != 0"
                offset += 1
            if inline:
                exprs[f.name] = expr
            else:
                exprs[f.name] = names(f.name)
                lines.append("%s%s = %s" % (indent, exprs[f.name], expr))
            continue
        # A list: its length, then its elements.
        n, items = names("n"), names(f.name)
        exprs[f.name] = items
        lines.append("%s%s = %s" % (indent, n, at_plus(offset)))
        lines.append("%sat += %d" % (indent, offset + 1))
        offset = 0
        if place == "values":
            lines.append("%s%s = v[at:at + %s]" % (indent, items, n))
            lines.append("%sif %s < 0 or len(%s) != %s:" % (indent, n, items,
                                                              n))
            lines.append("%s    raise IndexError(%r)" % (indent, f.full_name))
            lines.append("%sat += %s" % (indent, n))
        elif place == "hashes":
            lines.append("%s%s = [c.next_hash() for _ in range(%s)]"
                         % (indent, items, n))
        else:
            lines.append("%s%s = []" % (indent, items))
            lines.append("%sfor _ in range(%s):" % (indent, n))
            lines += _decoder_lines(f.message_type, items + ".append(%s)",
                                    names, indent + "    ")
    # A list-only field (not in the rule) is at its default.
    construction = "%s(%s)" % (cls.__name__, ", ".join(
        [exprs[name] if name in exprs
         else repr(cls.__dataclass_fields__[name].default) for name in order]
        + (['0', '""'] if "code" in cls.__dataclass_fields__ else [])))
    lines.append(indent + store % construction)
    if offset:
        lines.append("%sat += %d" % (indent, offset))
    return lines


def _reader(kind):
    """The generated reader of kind `kind`'s result (see above)."""
    name = "_read_" + kind.name
    lines = ["def %s(v, at, c):" % name]
    lines += _decoder_lines(_RESULT_FIELDS[kind.name].message_type,
                            "result = %s", _Names())
    lines.append("    return result, at")
    return _generate("\n".join(lines) + "\n", name, dict(_CLASSES))


_READERS = {kind.number: _reader(kind) for kind in _KINDS.values()}

# Each kind's late result fields (numbered _LIST_ONLY_NUMBER and above), in
# field-number order, as (name, is_bool); kinds without any are left out.
_LATE_FIELDS = {}
for _kind in _KINDS.values():
    _late = sorted((f for f in _RESULT_FIELDS[_kind.name].message_type.fields
                    if f.number >= _LIST_ONLY_NUMBER),
                   key=lambda f: f.number)
    if _late:
        _LATE_FIELDS[_kind.number] = tuple(
            (f.name, f.type == f.TYPE_BOOL) for f in _late)
del _kind, _late


def _apply_late_values(kinds, codes, out, late):
    """Sets the late fields of each successful result from `late` (the
    PackedResults column), in order; IndexError when it is short, a
    ValueError naming the column when it is longer than they use."""
    at = 0
    for i, kind in enumerate(kinds):
        names = _LATE_FIELDS.get(kind)
        if names is None or codes[i]:
            continue
        result = out[i]
        for name, is_bool in names:
            value = late[at]
            at += 1
            setattr(result, name, value != 0 if is_bool else value)
    if at != len(late):
        raise ValueError("late_values holds %d values, the operations use %d"
                         % (len(late), at))

# The kinds of a steady pass, decoded inline (a call less each).
_INLINE_KINDS = (CHECKPOINT, CONSUME_FORK, RELEASE, RESUMABLE_HIT)


def _decoding_loop():
    """The generated loop over a pass's results: returns the results, the
    values used and the refusals read. IndexError when a column is short."""
    names = _Names()
    lines = ["def _decode(kinds, codes, v, c, messages, types, readers):",
             "    out = []",
             "    append = out.append",
             "    at = 0",
             "    refused = 0",
             "    for kind, code in zip(kinds, codes):",
             "        if code:",
             "            append(types[kind](code=code,"
             " message=messages[refused]))",
             "            refused += 1"]
    for kind in _INLINE_KINDS:
        name = next(n for n, k in _KINDS.items() if k.number == kind)
        lines.append("        elif kind == %d:" % kind)
        lines += _decoder_lines(_RESULT_FIELDS[name].message_type,
                                "append(%s)", names, " " * 12)
    lines += ["        else:",
              "            result, at = readers[kind](v, at, c)",
              "            append(result)",
              "    return out, at, refused"]
    return _generate("\n".join(lines) + "\n", "_decode", dict(_CLASSES))


_decode = _decoding_loop()


def decode_results(kinds, packed):
    """The results of a packed step (PackedResults `packed`) for the
    operations `kinds`, one dataclass each.

    Raises Internal when `packed` does not follow the layout rule for these
    kinds (e.g. a daemon that predates the packed form answers none)."""
    codes = list(packed.codes)
    if len(codes) != len(kinds):
        raise Internal(
            "packed results carry %d codes for %d operations (a daemon that "
            "predates the packed form?)" % (len(codes), len(kinds)))
    v = list(packed.values)
    columns = _Columns(packed)
    messages = packed.messages if any(codes) else ()
    try:
        out, at, refused = _decode(kinds, codes, v, columns, messages,
                                   RESULT_TYPES, _READERS)
        if refused != len(messages):
            raise IndexError("more messages than refusals")
    except IndexError as e:
        raise Internal("packed results too short for the operations (%s)"
                       % e) from None
    if at != len(v) or not columns.used_up():
        raise Internal("packed results longer than the operations use")
    # A daemon that predates late_values sends none: those fields stay at
    # their defaults.
    if packed.late_values:
        try:
            _apply_late_values(kinds, codes, out, packed.late_values)
        except IndexError:
            raise Internal("packed results: late_values is too short for "
                           "the operations") from None
        except ValueError as e:
            raise Internal("packed results: %s" % e) from None
    return out


# ------------------------------------------------------------------ encoding
#
# The request goes out as bytes this module writes (grpc sends them as
# they are): building PackedOperations through protobuf's Python API costs
# ~0.2 us per element, writing the columns here a few hundredths. Each
# column is one length-delimited packed field of PackedOperations:
#   kinds (1):   varints 1..15, one byte each: bytes(kinds);
#   request_ids (2): the ids' UTF-8, concatenated;
#   request_id_lengths (3): varints, one byte each below 128;
#   args (4):    varints of int64, each value's encoding cached;
#   hashes (5):  sfixed64, little-endian: one struct.pack.
# Field order does not matter to the parser. A StepRequest is session_id
# (1) and packed (3).

_INT64 = 1 << 63
_UINT64_MASK = (1 << 64) - 1


def _varint(n):
    """The varint of a non-negative int (or of an int64, two's
    complement)."""
    n &= _UINT64_MASK
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


class _VarintCache(dict):
    """int64 value -> its varint bytes, filled on first use (a pass's
    arguments repeat: widths, block counts, token counts). Bounded."""

    def __missing__(self, value):
        if not isinstance(value, int):
            try:
                value = value.__index__()
            except AttributeError:
                raise TypeError("an operation argument must be an integer, "
                                "not %s" % type(value).__name__) from None
        if not -_INT64 <= value < _INT64:
            raise ValueError("operation argument %d is beyond int64" % value)
        if len(self) >= 1 << 16:
            self.clear()
        encoded = self[value] = _varint(value)
        return encoded


_VARINTS = _VarintCache()
_varint_of = _VARINTS.__getitem__


def _field(tag, payload):
    return tag + _varint(len(payload)) + payload


def encode_packed(kinds, ids, args, hashes):
    """PackedOperations' wire bytes for the columns (`ids`: str request
    ids, in order). Raises TypeError / ValueError for a request id that is
    not a str, an argument or hash that is not an int64."""
    parts = []
    if kinds:
        parts.append(_field(b"\x0a", bytes(kinds)))
    if ids:
        joined = "".join(ids)
        data = joined.encode()
        lengths = (list(map(len, ids)) if len(data) == len(joined)
                   else [len(i.encode()) for i in ids])
        parts.append(_field(b"\x12", data))
        if max(lengths) < 0x80:
            parts.append(_field(b"\x1a", bytes(lengths)))
        else:
            parts.append(_field(b"\x1a", b"".join(map(_varint, lengths))))
    if args:
        parts.append(_field(b"\x22", b"".join(map(_varint_of, args))))
    if hashes:
        try:
            data = struct.pack("<%dq" % len(hashes), *hashes)
        except struct.error as e:
            raise TypeError("hashes must be integers in [-2**63, 2**63): %s"
                            % e) from None
        parts.append(_field(b"\x2a", data))
    return b"".join(parts)


def step_request_prefix(session_id):
    """StepRequest's session_id field, to put before packed's."""
    return _field(b"\x0a", session_id.encode())


def step_request(prefix, packed):
    """StepRequest's wire bytes: the session's prefix, then `packed`."""
    return prefix + b"\x1a" + _varint(len(packed)) + packed


# ------------------------------------------------------------------ builder


def _element(p, names, what):
    """A repeated message's element as its fields' values, in the rule's
    order: from a tuple, a dict of some of the fields (the others 0) or an
    object with them as attributes (e.g. MidstepPosition)."""
    if isinstance(p, tuple):
        if len(p) != len(names):
            raise TypeError("%s: an element is a tuple of %d, not %d (%s)"
                            % (what, len(names), len(p), ", ".join(names)))
        return p
    if isinstance(p, dict):
        unknown = set(p) - set(names)
        if unknown:
            raise TypeError("%s: an element has unknown field %r"
                            % (what, sorted(unknown)[0]))
        return tuple(p.get(name, 0) for name in names)
    return tuple(getattr(p, name) for name in names)


def _encoder_lines(rule, values, names, indent, lengths=None):
    """Source lines that append the fields `rule` (a message's fields in the
    rule's order) to the builder's columns, from the expressions `values`
    (field name -> expression; a list's length from `lengths` where it has
    one). `names` makes the locals."""
    lines, args = [], []

    def flush():
        if len(args) == 1:
            lines.append("%s_args.append(%s)" % (indent, args[0]))
        elif args:
            lines.append("%s_args += (%s)" % (indent, ", ".join(args)))
        args.clear()

    for f in rule:
        place, value = _place(f), values[f.name]
        if place == "id":
            flush()
            lines.append("%s_ids.append(%s)" % (indent, value))
        elif place == "value":
            args.append("(1 if %s else 0)" % value
                        if f.type == f.TYPE_BOOL else value)
        elif place == "hash":
            flush()
            lines.append("%s_hashes.append(%s)" % (indent, value))
        else:
            args.append((lengths or {}).get(f.name, "len(%s)" % value))
            flush()
            if place == "hashes":
                lines.append("%s_hashes += %s" % (indent, value))
            elif place == "values":
                lines.append("%s_args += %s" % (indent, value))
            else:
                element = _by_number(f.message_type)
                locals_ = {g.name: names(g.name) for g in element}
                lines.append("%sfor %s, in %s:" % (
                    indent, ", ".join(locals_[g.name] for g in element),
                    value))
                lines += _encoder_lines(element, locals_, names,
                                        indent + "    ")
    flush()
    return lines


def _operation(stub):
    """The builder method of the operation `stub` is named after: appends
    the kind and its fields to the columns by the layout rule. The stub
    gives the API (its parameters, which must be the operation's fields in
    field-number order, their defaults and the docstring); its body is not
    used."""
    kind = _KINDS[stub.__name__]
    rule = _by_number(kind.message_type)
    params = list(inspect.signature(stub).parameters)[1:]
    if params != [f.name for f in rule]:
        raise TypeError("StepBuilder.%s(%s) does not match the proto's %s(%s)"
                        % (stub.__name__, ", ".join(params),
                           kind.message_type.name,
                           ", ".join(f.name for f in rule)))
    names = _Names()
    values = {f.name: f.name for f in rule}
    lengths = {}
    lines = ["def %s(self%s):" % (stub.__name__,
                                  "".join(", " + p for p in params))]
    # Lists first: one that has no length, or an element of the wrong
    # shape, raises before anything is appended.
    for f in rule:
        if _place(f) == "each":
            values[f.name] = names(f.name)
            lines.append("    %s = [_element(p, %r, %r) for p in %s]" % (
                values[f.name], tuple(g.name for g in _by_number(
                    f.message_type)), stub.__name__ + "()", f.name))
        elif _place(f) in ("hashes", "values"):
            lengths[f.name] = names("n")
            lines.append("    %s = len(%s)" % (lengths[f.name], f.name))
    body = _encoder_lines(rule, values, names, "    ", lengths)
    # A column used more than once (or in a loop) is looked up once.
    for column in ("_ids", "_args", "_hashes"):
        use = re.compile(r"(?<![\w.])%s\b" % column)
        uses = [line for line in body if use.search(line)]
        if len(uses) > 1 or any(line.startswith(" " * 8) for line in uses):
            lines.append("    %s = self.%s" % (column, column))
        else:
            body = [use.sub("self." + column, line) for line in body]
    lines.append("    self._kinds.append(%d)" % kind.number)
    lines += body
    lines.append("    return self")
    method = _generate("\n".join(lines) + "\n", stub.__name__,
                       {"_element": _element})
    method.__defaults__ = stub.__defaults__
    method.__doc__ = stub.__doc__
    method.__qualname__ = stub.__qualname__
    method.__module__ = stub.__module__
    return method


class StepBuilder:
    """The ordered operations of one pass, sent as one Step.

    Get one from ``session.step()`` (unary ``Step``) or ``stream.step()``
    (over ``StepStream``). Each method appends one operation, whose keyword
    arguments are the proto message's fields, and returns the builder, so
    calls chain; :meth:`send` runs them and returns one result per
    operation, in order::

        # A 300-token prompt: its 4 block hashes, all 4 in the KV cache;
        # its anchor is its end rounded down to a block, token 256.
        results = (session.step()
                   .begin_pass()
                   .admit("r1", width=1, num_tokens=300, anchor_pos=256,
                          block_hashes=hashes, kv_hit_blocks=4)
                   .send())
        admit = results[1]          # an AdmitResult
        admit.slots, admit.fork_src, admit.blocks_resumed

    The arguments' meanings and each operation's refusals are documented
    in statecache.proto. Hashes are integers in [0, 2**63); request ids are
    str (UTF-8, <= 256 bytes). An unknown keyword raises TypeError at once,
    naming it (the builder is left as it was); an argument of the wrong type
    raises TypeError (ValueError: beyond int64) at :meth:`send` at the
    latest, before anything is sent.

    A builder is not thread-safe; build each pass on one thread. After
    :meth:`send` it is empty again and may build the next pass.
    """

    __slots__ = ("_sender", "_kinds", "_ids", "_args", "_hashes")

    def __init__(self, sender=None):
        # sender(packed bytes, kinds) -> results; None: encode only.
        self._sender = sender
        self._kinds = []
        self._ids = []
        self._args = []
        self._hashes = []

    def __len__(self):
        return len(self._kinds)

    def __repr__(self):
        return "<StepBuilder of %d operations>" % len(self._kinds)

    def clear(self):
        """Drops the operations added so far."""
        self._kinds = []
        self._ids = []
        self._args = []
        self._hashes = []

    def columns(self):
        """The operations so far as the packed form's columns: a dict of
        PackedOperations' fields (kinds, request_ids, request_id_lengths,
        args, hashes), e.g. for ``PackedOperations(**step.columns())``."""
        ids = [i.encode() for i in self._ids]
        return {
            "kinds": list(self._kinds),
            "request_ids": b"".join(ids),
            "request_id_lengths": list(map(len, ids)),
            "args": list(self._args),
            "hashes": list(self._hashes),
        }

    def encode(self):
        """The operations so far as PackedOperations' serialized bytes
        (what :meth:`send` sends)."""
        return encode_packed(self._kinds, self._ids, self._args,
                             self._hashes)

    def send(self):
        """Runs the operations as one Step and returns their results, a list
        with one dataclass per operation in the order added (AdmitResult for
        an admit, ...). A refused operation is a result with a non-zero
        ``.code`` and its ``.message``; it had no effect, and the later
        operations still ran.

        Raises (nothing applied): LeaseLost / EpochChanged when the session
        is gone; InvalidArgument (more than max_operations_per_step
        operations, a malformed column); ResourceExhausted (a message over
        the daemon's --max_message_bytes); Unavailable / DeadlineExceeded
        (no answer); TypeError / ValueError (an argument of the wrong type
        or beyond int64: nothing sent, the builder keeps its operations).
        """
        if self._sender is None:
            raise ValueError("this StepBuilder has no session to send to "
                             "(get one from session.step())")
        kinds = self._kinds
        packed = self.encode()
        self.clear()
        return self._sender(packed, kinds)

    # ---- the operations, in Operation's field-number order. Each is
    # generated by _operation from the proto's descriptor: it writes its
    # message's fields in field-number order, request ids to the id column,
    # `hash` fields and hash lists to `hashes`, every other scalar (bools as
    # 0/1, a list's length first) to `args`.

    @_operation
    def begin_pass(self):
        """Ticks the session's pin clock (BeginPassResult: moves,
        pins_released)."""

    @_operation
    def admit(self, request_id, width, num_tokens, anchor_pos=0,
              block_hashes=(), kv_hit_blocks=0):
        """Admits a request with `width` slots, resuming up to
        `kv_hit_blocks` blocks of `block_hashes` from a checkpoint
        (AdmitResult: slots, fork_src, blocks_resumed, adopted).
        `anchor_pos` is the prompt's end rounded down to a full block (0
        when it has none): only a checkpoint there is kept as known, every
        other is a guess, spent first."""

    @_operation
    def resumable_hit(self, num_tokens, block_hashes=(), kv_hit_blocks=0,
                      assume_checkpointed=False):
        """How many of `kv_hit_blocks` admit would resume; changes nothing
        (ResumableHitResult: blocks)."""

    @_operation
    def lookup(self, hash):  # noqa: A002 - the proto's field name
        """The slot holding the checkpoint for `hash`, or -1
        (LookupResult: slot)."""

    @_operation
    def reserve(self, request_id, positions=()):
        """Takes a destination slot for each midstep position the forward
        will pass: ``(position, hash)`` tuples, dicts with those keys, or
        MidstepPosition (ReserveResult: reservations). For a request
        admitted in this pass, send it in a Step after the admit's: the
        forward's start is the admit's blocks_resumed."""

    @_operation
    def publish(self, request_id, keep_all=False):
        """Files the reserved slots the forward wrote as checkpoints
        (PublishResult: published)."""

    @_operation
    def cancel(self, request_id):
        """The forward never ran: the reservations go back
        (CancelResult: cancelled)."""

    @_operation
    def checkpoint(self, request_id, boundary_blocks, hash,  # noqa: A002
                   anchor_pos=0):
        """Fork checkpoint of the committed state, which must be exactly at
        `boundary_blocks` blocks, filed under `hash`, the hash of the block
        ending there (block_hashes[boundary_blocks - 1])
        (CheckpointResult: state_slot, fork_src, kept)."""

    @_operation
    def consume_fork(self, request_id):
        """The forward reading the request's fork source was issued
        (ConsumeForkResult: fork_src)."""

    @_operation
    def adopt_fork_source(self, request_id):
        """Before a forward whose chunk is too short to fork: the request
        takes its fork source over as its committed slot, which that
        forward reads and writes in place (AdoptForkSourceResult:
        state_slot)."""

    @_operation
    def release(self, request_id):
        """The request finished or was preempted
        (ReleaseResult: slots_released)."""

    @_operation
    def unindex(self, hashes=()):
        """These hashes' KV blocks were evicted (UnindexResult:
        orphaned)."""

    @_operation
    def clear_index(self):
        """Drops every checkpoint hash (ClearIndexResult)."""

    @_operation
    def copy(self, request_id, from_index, to_index):
        """Copies the request's slot `from_index` onto its slot `to_index`
        with the daemon's copy engine (CopyResult: bytes)."""

    @_operation
    def snapshot(self, request_id, position, hash):  # noqa: A002
        """Copy-mode checkpoint of the committed slot at `position`, filed
        under `hash` (SnapshotResult: slot, kept)."""
