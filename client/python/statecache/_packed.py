"""The packed form of a step, both halves: the layout rule, read from the
proto's descriptors, the operations' columns encoded as PackedOperations'
wire bytes, and PackedResults decoded into the result dataclasses.

The layout rule is statecache.proto's (see PackedOperations): a message's
fields in field-number order, each placed by its type and name. A string
(`request_id`) goes to the request id columns; a field named `hash` to
`hashes`; any other scalar (bools as 0/1) to `args` (`values`, for
results); a repeated field puts its length in args/values, then its
elements: `hashes` and `block_hashes` elements are hashes, a repeated
message's elements are each element's fields in turn. Fields numbered
LATE_FIELD_NUMBER and above are skipped: a result's such fields travel in
PackedResults.late_values, in field-number order.

:func:`layout` applies the rule to a message's descriptor; the decoder walks
those layouts, so no layout is written down here. The builder's methods
(StepBuilder, in _step.py) append their fields to the columns in plain code;
client/python/tests/test_step_mirror.py checks each against :func:`layout`.

Encoding writes the wire bytes itself, each field's tag taken from the
descriptors (and each field's type checked against what is written):
protobuf's Python API converts and checks every element of a repeated field
one at a time, which is slower than the few joins and one struct.pack here
(bench/python_step_bench.py's breakdown times both).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, fields
from typing import Any, Callable, Iterable, Sequence

import numpy as np
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from ._columns import OperationColumns, ResultColumns
from ._errors import Internal
from ._proto import pb as _pb

__all__ = [
    "ID", "HASH", "VALUE", "HASHES", "VALUES", "EACH",
    "LATE_FIELD_NUMBER", "HASH_NAMES", "KINDS",
    "Entry", "place", "layout", "late_fields",
    "operation_message", "result_message",
    "encode_operations", "encode_columns", "result_columns",
    "step_request_prefix", "step_request", "ResultDecoder",
]

# ------------------------------------------------------------------ the rule

# Where a field goes (see place()).
ID = "id"            # request_id_lengths and request_ids
HASH = "hash"        # hashes
VALUE = "value"      # args (operations) or values (results)
HASHES = "hashes"    # its length in args/values, its elements in hashes
VALUES = "values"    # its length in args/values, then its elements there
EACH = "each"        # its length in args/values, then each element's fields

# Fields numbered from here on were added after the layouts were fixed; the
# rule skips them (a layout never changes). A result's are carried by
# PackedResults.late_values; an operation's by the list form only.
LATE_FIELD_NUMBER = 100

# The fields whose values are hashes (the hashes column).
HASH_NAMES = frozenset({"hash", "hashes", "block_hashes"})

# Operation's kinds, by name: their field numbers in Operation's `kind`
# oneof are the packed form's kinds.
KINDS: dict[str, int] = {
    f.name: f.number
    for f in _pb.Operation.DESCRIPTOR.oneofs_by_name["kind"].fields}


@dataclass(frozen=True, slots=True)
class Entry:
    """One field of a message as the layout rule places it.

    Attributes:
        name: the field's name.
        place: ID, HASH, VALUE, HASHES, VALUES or EACH.
        is_bool: a bool field (0/1 on the wire).
        element: for EACH, the element message's descriptor.
    """

    name: str
    place: str
    is_bool: bool = False
    element: Descriptor | None = None


def place(field: FieldDescriptor) -> str:
    """Where the layout rule puts `field` (ID, HASH, VALUE, HASHES, VALUES
    or EACH)."""
    if field.label == FieldDescriptor.LABEL_REPEATED:
        if field.message_type is not None:
            return EACH
        return HASHES if field.name in HASH_NAMES else VALUES
    if field.type == FieldDescriptor.TYPE_STRING:
        return ID
    if field.message_type is not None:
        raise TypeError("the layout rule has no place for %s, a message "
                        "field" % field.full_name)
    return HASH if field.name in HASH_NAMES else VALUE


def _entry(field: FieldDescriptor) -> Entry:
    return Entry(field.name, place(field),
                 field.type == FieldDescriptor.TYPE_BOOL,
                 field.message_type)


def layout(message: Descriptor) -> tuple[Entry, ...]:
    """The packed fields of `message` in the rule's order (field-number
    order, those numbered LATE_FIELD_NUMBER and above left out)."""
    return tuple(_entry(f) for f in sorted(message.fields,
                                           key=lambda f: f.number)
                 if f.number < LATE_FIELD_NUMBER)


def late_fields(message: Descriptor) -> tuple[Entry, ...]:
    """The fields of `message` numbered LATE_FIELD_NUMBER and above, in
    field-number order (a result's: one late_values entry each)."""
    late = tuple(_entry(f) for f in sorted(message.fields,
                                           key=lambda f: f.number)
                 if f.number >= LATE_FIELD_NUMBER)
    for entry in late:
        if entry.place != VALUE:
            raise TypeError("%s.%s: a late field must be a scalar"
                            % (message.name, entry.name))
    return late


def operation_message(kind: int) -> Descriptor:
    """The message of operation kind `kind` (Admit for 2, ...)."""
    return _pb.Operation.DESCRIPTOR.fields_by_number[kind].message_type


def result_message(kind: int) -> Descriptor:
    """The result message of operation kind `kind` (AdmitResult for 2,
    ...): OperationResult's field of the kind's name."""
    name = _pb.Operation.DESCRIPTOR.fields_by_number[kind].name
    return _pb.OperationResult.DESCRIPTOR.fields_by_name[name].message_type


# ------------------------------------------------------------------ encoding
#
# Each column is one length-delimited field of PackedOperations:
#   kinds:              varints below 128, one byte each: bytes(kinds);
#   request_ids:        the ids' UTF-8, concatenated;
#   request_id_lengths: varints, one byte each below 128;
#   args:               varints of int64, each value's encoding cached;
#   hashes:             sfixed64, little-endian: one struct.pack.
# Field order does not matter to a parser. A StepRequest is its session_id
# then its packed field.

_INT64 = 1 << 63
_UINT64_MASK = (1 << 64) - 1


def _varint(n: int) -> bytes:
    """The varint of a non-negative int (or of an int64, two's
    complement)."""
    n &= _UINT64_MASK
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _tag(message: Any, name: str, field_type: int,
         repeated: bool = False) -> bytes:
    """The length-delimited tag of `message`'s field `name`, after checking
    that its type is `field_type` (the encoding below writes that type)."""
    f = message.DESCRIPTOR.fields_by_name[name]
    if f.type != field_type or (f.label == f.LABEL_REPEATED) != repeated:
        raise TypeError("%s changed type: the packed encoder writes it as "
                        "type %d%s" % (f.full_name, field_type,
                                       " (repeated)" if repeated else ""))
    return _varint(f.number << 3 | 2)


_T = FieldDescriptor
_KINDS_TAG = _tag(_pb.PackedOperations, "kinds", _T.TYPE_UINT32, True)
_IDS_TAG = _tag(_pb.PackedOperations, "request_ids", _T.TYPE_BYTES)
_LENGTHS_TAG = _tag(_pb.PackedOperations, "request_id_lengths",
                    _T.TYPE_UINT32, True)
_ARGS_TAG = _tag(_pb.PackedOperations, "args", _T.TYPE_INT64, True)
_HASHES_TAG = _tag(_pb.PackedOperations, "hashes", _T.TYPE_SFIXED64, True)
_SESSION_TAG = _tag(_pb.StepRequest, "session_id", _T.TYPE_STRING)
_PACKED_TAG = _tag(_pb.StepRequest, "packed", _T.TYPE_MESSAGE)
del _T
if max(KINDS.values()) >= 0x80:
    raise TypeError("a kind number above 127: bytes(kinds) no longer "
                    "writes the kinds column")


class _VarintCache(dict):
    """int64 value -> its varint bytes, filled on first use (a pass's
    arguments repeat: widths, block counts, token counts). Bounded."""

    def __missing__(self, value: Any) -> bytes:
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


_varint_of = _VarintCache().__getitem__


def _field(tag: bytes, payload: bytes) -> bytes:
    return tag + _varint(len(payload)) + payload


def encode_operations(kinds: Sequence[int], ids: Sequence[str],
                      args: Sequence[int], hashes: Sequence[int]) -> bytes:
    """PackedOperations' wire bytes for the columns (`ids`: the str request
    ids, in order).

    Raises:
        TypeError: a request id that is not a str, an argument or hash that
            is not an integer (or a hash beyond int64).
        ValueError: an argument beyond int64.
    """
    parts = []
    if kinds:
        parts.append(_field(_KINDS_TAG, bytes(kinds)))
    if ids:
        joined = "".join(ids)
        data = joined.encode()
        lengths = (list(map(len, ids)) if len(data) == len(joined)
                   else [len(i.encode()) for i in ids])
        parts.append(_field(_IDS_TAG, data))
        if max(lengths) < 0x80:
            parts.append(_field(_LENGTHS_TAG, bytes(lengths)))
        else:
            parts.append(_field(_LENGTHS_TAG,
                                b"".join(map(_varint, lengths))))
    if args:
        parts.append(_field(_ARGS_TAG, b"".join(map(_varint_of, args))))
    if hashes:
        try:
            data = struct.pack("<%dq" % len(hashes), *hashes)
        except struct.error as e:
            raise TypeError("hashes must be integers in [-2**63, 2**63): %s"
                            % e) from None
        parts.append(_field(_HASHES_TAG, data))
    return b"".join(parts)


def encode_columns(columns: OperationColumns) -> bytes:
    """PackedOperations' wire bytes for `columns` (see
    :class:`OperationColumns`; :meth:`OperationColumns.check` is the
    caller's to have run).

    The args' varints are written through the same cache as
    :func:`encode_operations` (faster here than computing them with numpy
    over a pass's few hundred small values); the hashes are the int64
    column's bytes as they are.
    """
    parts = []
    kinds = columns.kinds
    if len(kinds):
        if int(kinds.max()) < 0x80:
            parts.append(_field(_KINDS_TAG, kinds.astype(np.uint8).tobytes()))
        else:
            parts.append(_field(_KINDS_TAG,
                                b"".join(map(_varint, kinds.tolist()))))
    lengths = columns.request_id_lengths
    if len(lengths):
        parts.append(_field(_IDS_TAG, bytes(columns.request_ids)))
        if int(lengths.max()) < 0x80:
            parts.append(_field(_LENGTHS_TAG,
                                lengths.astype(np.uint8).tobytes()))
        else:
            parts.append(_field(_LENGTHS_TAG,
                                b"".join(map(_varint, lengths.tolist()))))
    if len(columns.args):
        parts.append(_field(_ARGS_TAG,
                            b"".join(map(_varint_of, columns.args.tolist()))))
    if len(columns.hashes):
        parts.append(_field(_HASHES_TAG,
                            columns.hashes.astype("<i8", copy=False)
                            .tobytes()))
    return b"".join(parts)


def result_columns(packed: Any, epoch: int) -> ResultColumns:
    """PackedResults `packed` (a parsed message) and the response's
    `epoch` as a :class:`ResultColumns`."""
    def column(field: Any, dtype: type) -> np.ndarray:
        return np.fromiter(field, dtype, len(field))

    return ResultColumns(
        codes=column(packed.codes, np.uint32),
        messages=list(packed.messages),
        values=column(packed.values, np.int64),
        late_values=column(packed.late_values, np.int64),
        hashes=column(packed.hashes, np.int64),
        request_ids=packed.request_ids,
        request_id_lengths=column(packed.request_id_lengths, np.uint32),
        epoch=epoch)


def step_request_prefix(session_id: str) -> bytes:
    """StepRequest's session_id field, to put before its packed field."""
    return _field(_SESSION_TAG, session_id.encode())


def step_request(prefix: bytes, packed: bytes) -> bytes:
    """StepRequest's wire bytes: the session's `prefix`
    (:func:`step_request_prefix`), then `packed` (PackedOperations' wire
    bytes) as its packed field."""
    return prefix + _field(_PACKED_TAG, packed)


# ------------------------------------------------------------------ decoding


def _as_list(column: Any) -> list:
    """A column's values as a list of plain ints (numpy's as ints, not
    numpy scalars)."""
    return column.tolist() if isinstance(column, np.ndarray) else list(column)


class _Columns:
    """Cursors over the results' request id and hash columns."""

    __slots__ = ("ids", "lengths", "hashes", "id", "offset", "hash")

    def __init__(self, packed: Any) -> None:
        self.ids = bytes(packed.request_ids)
        self.lengths = _as_list(packed.request_id_lengths)
        self.hashes = _as_list(packed.hashes)
        self.id = 0
        self.offset = 0
        self.hash = 0

    def next_id(self) -> str:
        length = self.lengths[self.id]
        start = self.offset
        self.offset = start + length
        self.id += 1
        if self.offset > len(self.ids):
            raise IndexError("request_ids")
        return self.ids[start:self.offset].decode()

    def next_hash(self) -> int:
        h = self.hashes[self.hash]
        self.hash += 1
        return h

    def next_hashes(self, count: int) -> list[int]:
        start = self.hash
        self.hash = start + count
        if self.hash > len(self.hashes):
            raise IndexError("hashes")
        return list(self.hashes[start:self.hash])

    def used_up(self) -> bool:
        return (self.id == len(self.lengths) and self.offset == len(self.ids)
                and self.hash == len(self.hashes))


def _maker(cls: type, names: Sequence[str]) -> Callable[..., Any]:
    """What builds a `cls` from the values of `names`, in order: the class
    itself when those are its first fields, else a function passing them
    by name."""
    if [f.name for f in fields(cls)][:len(names)] == list(names):
        return cls
    names = tuple(names)

    def make(*row: Any) -> Any:
        return cls(**dict(zip(names, row)))
    return make


# How a kind's result is read (the decoding loop's fast paths):
_SINGLE = 0   # one value, not a bool, no late field: make(values[at])
_FIXED = 1    # values only, at most one of them a bool: a slice of values
_GENERAL = 2  # anything else: field by field (ResultDecoder._read)


def _steps(entries: tuple[Entry, ...]) -> tuple[tuple, ...]:
    """A layout as ResultDecoder._read walks it: (place, count, bools,
    element) steps, each a run of `count` VALUE fields read as one slice
    (`bools`: the indexes of the bools among them), or one field of
    another place (`element`: an EACH field's element message name)."""
    steps: list[tuple] = []
    for e in entries:
        if e.place != VALUE:
            steps.append((e.place, 0, (),
                          e.element.name if e.element else None))
        elif steps and steps[-1][0] == VALUE:
            _, count, bools, _ = steps[-1]
            steps[-1] = (VALUE, count + 1,
                         bools + ((count,) if e.is_bool else ()), None)
        else:
            steps.append((VALUE, 1, (0,) if e.is_bool else (), None))
    return tuple(steps)


class ResultDecoder:
    """Reads PackedResults into one dataclass per operation, by each kind's
    result layout (see :func:`layout`) and late fields.

    `classes` are the dataclasses of every result message and of the
    messages their repeated fields hold, each named after its message; a
    result class takes the message's fields, and `code` and `message`, as
    keywords.
    """

    def __init__(self, classes: Iterable[type]) -> None:
        self.classes = {cls.__name__: cls for cls in classes}
        # Operation kind -> its result's class.
        self.result_types: dict[int, type] = {}
        # Indexed by operation kind: (maker, form, values taken (_FIXED),
        # late values taken, the row index of its bool (_FIXED; -1: none)).
        self._plans: list[tuple | None] = [None] * (max(KINDS.values()) + 1)
        # A _GENERAL kind -> (its layout's steps, the indexes of the bools
        # among its late fields).
        self._general: dict[int, tuple] = {}
        # Element message name -> (its maker, its layout's steps).
        self._elements: dict[str, tuple] = {}
        for kind in KINDS.values():
            self._plan(kind)

    def _plan(self, kind: int) -> None:
        message = result_message(kind)
        cls = self.classes[message.name]
        self.result_types[kind] = cls
        entries = layout(message)
        late = late_fields(message)
        row = entries + late
        bools = [i for i, e in enumerate(row) if e.is_bool]
        if any(e.place != VALUE for e in entries) or len(bools) > 1:
            form = _GENERAL
        elif len(row) == 1 and not late and not bools:
            form = _SINGLE
        else:
            form = _FIXED
        self._plans[kind] = (_maker(cls, [e.name for e in row]), form,
                             len(entries), len(late),
                             bools[0] if form == _FIXED and bools else -1)
        if form == _GENERAL:
            self._general[kind] = (_steps(entries), tuple(
                i for i, e in enumerate(late) if e.is_bool))
        self._add_elements(entries)

    def _add_elements(self, entries: tuple[Entry, ...]) -> None:
        for e in entries:
            if e.place == EACH and e.element.name not in self._elements:
                element = layout(e.element)
                self._elements[e.element.name] = (_maker(
                    self.classes[e.element.name],
                    [f.name for f in element]), _steps(element))
                self._add_elements(element)

    def _read(self, steps: tuple[tuple, ...], values: list[int], at: int,
              columns: _Columns) -> tuple[list, int]:
        """The fields `steps` (see _steps) read from `values` at `at` (and
        the columns), in the rule's order, and where `values` goes on.
        IndexError when a column is short."""
        row: list[Any] = []
        for where, count, bools, element in steps:
            if where == VALUE:
                end = at + count
                part = values[at:end]
                if len(part) != count:
                    raise IndexError("values")
                at = end
                for i in bools:
                    part[i] = part[i] != 0
                row += part
            elif where == ID:
                row.append(columns.next_id())
            elif where == HASH:
                row.append(columns.next_hash())
            else:
                count = values[at]
                at += 1
                if count < 0:
                    raise IndexError("a negative length")
                if where == VALUES:
                    end = at + count
                    items = values[at:end]
                    if len(items) != count:
                        raise IndexError("values")
                    at = end
                elif where == HASHES:
                    items = columns.next_hashes(count)
                else:
                    make, element_steps = self._elements[element]
                    items = []
                    for _ in range(count):
                        parts, at = self._read(element_steps, values, at,
                                               columns)
                        items.append(make(*parts))
                row.append(items)
        return row, at

    def decode(self, kinds: Sequence[int], packed: Any) -> list:
        """The results of a packed step for the operations `kinds`, one
        dataclass each, in order. `packed` is a :class:`ResultColumns` or a
        parsed PackedResults (any object with their columns).

        Raises Internal when `packed` does not follow the layout rule for
        these kinds."""
        codes = _as_list(packed.codes)
        if len(codes) != len(kinds):
            raise Internal("packed results carry %d codes for %d operations"
                           % (len(codes), len(kinds)))
        values = _as_list(packed.values)
        late_values = _as_list(packed.late_values)
        messages = packed.messages
        columns = _Columns(packed)
        plans = self._plans
        single, fixed = _SINGLE, _FIXED
        out = []
        append = out.append
        at = late_at = refused = 0
        try:
            for kind, code in zip(kinds, codes):
                if code:
                    append(self.result_types[kind](
                        code=code, message=messages[refused]))
                    refused += 1
                    continue
                make, form, size, late, flag = plans[kind]
                if form == single:
                    append(make(values[at]))
                    at += 1
                    continue
                if form == fixed:
                    end = at + size
                    row = values[at:end]
                    at = end
                else:
                    steps, late_bools = self._general[kind]
                    row, at = self._read(steps, values, at, columns)
                if late:
                    end = late_at + late
                    more = late_values[late_at:end]
                    if len(more) != late:
                        raise IndexError("late_values")
                    late_at = end
                    if form != fixed:
                        for i in late_bools:
                            more[i] = more[i] != 0
                    row += more
                if flag >= 0:
                    row[flag] = row[flag] != 0
                append(make(*row))
        except IndexError as e:
            raise Internal("packed results too short for the operations "
                           "(%s)" % e) from None
        if at > len(values):
            raise Internal("packed results too short for the operations")
        if (at != len(values) or refused != len(messages)
                or not columns.used_up()):
            raise Internal("packed results longer than the operations use")
        if late_at != len(late_values):
            raise Internal("packed results: late_values holds %d values, "
                           "the operations use %d"
                           % (len(late_values), late_at))
        return out
