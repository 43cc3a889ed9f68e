"""The columnar pass: operations added many at a time as numpy columns
(:class:`ColumnarStep`), and their results read back as numpy arrays
(:class:`ColumnarResults`, :class:`BatchResult`), with no Python object
per operation or per result.

Each of ColumnarStep's methods is one Operation kind, its parameters the
kind's message fields in field-number order, named as in statecache.proto
(and as :class:`StepBuilder`'s keyword arguments); each call appends one
operation per element of its array arguments and returns a :class:`Batch`
naming them. Both directions follow the layout rule, read from the proto's
descriptors (:func:`._packed.layout`): nothing here lists a kind's fields.
client/python/tests/test_columnar_mirror.py checks each method against the
descriptors.
"""

from __future__ import annotations

import bisect
import itertools
from array import array
from typing import Any, Callable, Iterable, Sequence, Union

import numpy as np

from ._columns import OperationColumns, ResultColumns, encode_request_ids
from ._errors import Internal, error_for
from ._packed import (EACH, HASH, HASHES, ID, KINDS, VALUE, VALUES,
                      late_fields, layout, operation_message, result_message)
from ._step import DATACLASSES, RESULT_TYPES

__all__ = ["ColumnarStep", "ColumnarResults", "BatchResult", "Batch",
           "RequestIds", "Lists", "RecordLists"]

_I64 = np.dtype(np.int64)
_U32 = np.dtype(np.uint32)
_EMPTY = np.zeros(0, _I64)
# Batches of kinds whose results vary in size, up to this many operations,
# are read in Python rather than by numpy calls.
_SMALL = 64
_INT64_MAX = (1 << 63) - 1
_INT64_MIN = -(1 << 63)

# ------------------------------------------------------------------ inputs


class RequestIds:
    """Request ids encoded once as the id columns (their UTF-8 concatenated
    and each one's byte length), to pass to several columnar calls without
    encoding them again, e.g. a running batch's ids to ``consume_fork`` and
    ``checkpoint``. Indexing with a slice, an integer array or a boolean
    mask gives the ids selected, as a RequestIds.

    Raises (constructing one): TypeError for an id that is not a str,
    ValueError for one that is not valid Unicode.
    """

    __slots__ = ("data", "lengths", "_offsets")

    def __init__(self, ids: Iterable[str]) -> None:
        self.data, self.lengths = encode_request_ids(ids)
        self._offsets: np.ndarray | None = None

    @classmethod
    def from_utf8(cls, data: bytes, lengths: Any) -> RequestIds:
        """The ids already encoded: `data` their UTF-8 concatenated and
        `lengths` each one's byte length. Raises ValueError when the
        lengths do not add up to `data` or `data` is not UTF-8."""
        ids = cls.__new__(cls)
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError("RequestIds.from_utf8: data is bytes, not %s"
                            % type(data).__name__)
        lengths = _int_column("lengths", lengths, "RequestIds.from_utf8")
        if not isinstance(lengths, np.ndarray):
            raise TypeError("RequestIds.from_utf8: lengths is one length "
                            "per id (1-D)")
        if len(lengths) and (lengths.min() < 0 or lengths.max() > 0xFFFFFFFF):
            raise ValueError("RequestIds.from_utf8: a negative length")
        if int(lengths.sum()) != len(data):
            raise ValueError("RequestIds.from_utf8: lengths add up to %d "
                             "bytes, data holds %d"
                             % (int(lengths.sum()), len(data)))
        data = bytes(data)
        try:
            data.decode()
        except UnicodeDecodeError as e:
            raise ValueError("RequestIds.from_utf8: not UTF-8: %s" % e) \
                from None
        ids.data = data
        ids.lengths = lengths.astype(_U32)
        ids._offsets = None
        return ids

    def __len__(self) -> int:
        return len(self.lengths)

    def __repr__(self) -> str:
        return "<RequestIds of %d ids>" % len(self.lengths)

    def offsets(self) -> np.ndarray:
        """Where each id starts in `data`, and (last) where the data ends:
        len(self) + 1 int64 offsets."""
        if self._offsets is None:
            offsets = np.zeros(len(self.lengths) + 1, _I64)
            np.cumsum(self.lengths, out=offsets[1:])
            self._offsets = offsets
        return self._offsets

    def tolist(self) -> list[str]:
        """The ids as str."""
        offsets = self.offsets().tolist()
        data = self.data
        return [data[a:b].decode() for a, b in zip(offsets, offsets[1:])]

    def __getitem__(self, which: Any) -> RequestIds:
        offsets = self.offsets()
        out = RequestIds.__new__(RequestIds)
        out._offsets = None
        if isinstance(which, slice):
            start, stop, step = which.indices(len(self.lengths))
            if step == 1:
                stop = max(stop, start)
                out.data = self.data[int(offsets[start]):int(offsets[stop])]
                out.lengths = self.lengths[start:stop]
                return out
            which = np.arange(start, stop, step)
        index = np.asarray(which)
        if index.dtype == np.bool_:
            if index.shape != self.lengths.shape:
                raise IndexError("a mask of %s for %d ids"
                                 % (index.shape, len(self.lengths)))
            index = np.flatnonzero(index)
        elif index.dtype.kind not in "iu" or index.ndim != 1:
            raise TypeError("RequestIds index: a slice, a 1-D integer "
                            "array or a boolean mask")
        lengths = self.lengths[index]
        starts = offsets[:-1][index]
        out.lengths = lengths
        out.data = np.frombuffer(self.data, np.uint8)[
            _ranges(starts, lengths)].tobytes()
        return out


# What the methods take (see ColumnarStep).
Ints = Union[int, np.integer, Sequence[int], np.ndarray]
Ids = Union[str, Sequence[str], RequestIds, np.ndarray]
IntLists = Union[Sequence[Sequence[int]], Sequence[int], np.ndarray]
RecordLists_ = Union[Sequence[Sequence[Sequence[int]]], np.ndarray]


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The indexes starts[0] .. starts[0]+lengths[0]-1, then starts[1] ..,
    as one int64 array."""
    lengths = lengths.astype(_I64, copy=False)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, _I64)
    group_starts = np.zeros(len(lengths), _I64)
    np.cumsum(lengths[:-1], out=group_starts[1:])
    return (np.repeat(starts.astype(_I64, copy=False) - group_starts,
                      lengths) + np.arange(total, dtype=_I64))


def _int_column(name: str, value: Any, where: str) -> int | np.ndarray:
    """`value` as an int (a scalar, checked against int64) or a 1-D int64
    array. TypeError for anything not integral, ValueError for a value
    beyond int64 or an array of more dimensions."""
    if isinstance(value, (int, np.integer)):
        number = int(value)
        if not _INT64_MIN <= number <= _INT64_MAX:
            raise ValueError("%s: %s = %d is beyond int64"
                             % (where, name, number))
        return number
    if type(value) is list:  # the common case, checked element by element
        return _flat_ints(name, value, where)
    if isinstance(value, (str, bytes, float, np.floating)) or value is None:
        raise TypeError("%s: %s must be integers, not %s"
                        % (where, name, type(value).__name__))
    column = value if isinstance(value, np.ndarray) else np.asarray(value)
    if column.ndim == 0:
        return _int_column(name, column.item(), where)
    if column.ndim != 1:
        raise ValueError("%s: %s has shape %s: one value per operation "
                         "(1-D)" % (where, name, column.shape))
    kind = column.dtype.kind
    if kind == "i":
        return column.astype(_I64, copy=False)
    if len(column) == 0:  # [] is float64 to numpy
        return np.zeros(0, _I64)
    if kind == "b":
        return column.astype(_I64)
    if kind == "u":
        if column.dtype.itemsize == 8 and len(column) and \
                int(column.max()) > _INT64_MAX:
            raise ValueError("%s: %s holds %d, beyond int64"
                             % (where, name, int(column.max())))
        return column.astype(_I64)
    if kind == "O":
        try:
            return np.frombuffer(array("q", column.tolist()), _I64)
        except OverflowError:
            raise ValueError("%s: %s holds a value beyond int64"
                             % (where, name)) from None
        except TypeError:
            bad = next(x for x in column.tolist()
                       if not isinstance(x, (int, np.integer)))
            raise TypeError("%s: %s must be integers, not %s"
                            % (where, name, type(bad).__name__)) from None
    raise TypeError("%s: %s must be integers, not an array of %s"
                    % (where, name, column.dtype))


def _flat_ints(name: str, values: Iterable[Any], where: str,
               nested: bool = False) -> np.ndarray:
    """A flat iterable of ints (`nested`: an iterable of such iterables,
    one after another) as an int64 array, each element checked."""
    try:
        if not nested:
            return np.frombuffer(array("q", values), _I64)
        flat = array("q")
        for part in values:
            if type(part) is list:
                flat.fromlist(part)
            else:
                flat.extend(part.tolist() if isinstance(part, np.ndarray)
                            else part)
        return np.frombuffer(flat, _I64)
    except OverflowError:
        raise ValueError("%s: %s holds a value beyond int64"
                         % (where, name)) from None
    except TypeError as e:
        raise TypeError("%s: %s must be integers (%s)"
                        % (where, name, e)) from None


def _is_scalar_int(x: Any) -> bool:
    return isinstance(x, (int, np.integer))


class _Lists:
    """A repeated argument, normalised: `flat` (int64; (M, width) for a
    list of messages) and `lengths` (int64, one per operation), or `one`
    (a single list, for one operation), or empty for every operation."""

    __slots__ = ("flat", "lengths", "one")

    def __init__(self, flat: np.ndarray, lengths: np.ndarray | None,
                 one: bool) -> None:
        self.flat = flat
        self.lengths = lengths
        self.one = one


def _records(name: str, value: Any, width: int, where: str) -> np.ndarray:
    """Rows of `width` integers as an (M, width) int64 array."""
    if isinstance(value, np.ndarray) and value.ndim == 2:
        rows = value
    else:
        try:
            rows = [r if isinstance(r, tuple) else tuple(r) for r in value]
        except TypeError:
            raise TypeError("%s: %s holds rows of %d integers (the "
                            "message's fields)" % (where, name, width)) \
                from None
        for r in rows:
            if len(r) != width:
                raise ValueError("%s: %s: an element has %d fields, not %d"
                                 % (where, name, len(r), width))
        flat = _flat_ints(name, itertools.chain.from_iterable(rows), where)
        return flat.reshape(len(rows), width)
    if rows.shape[1] != width:
        raise ValueError("%s: %s: elements of %d fields, not %d"
                         % (where, name, rows.shape[1], width))
    column = _int_column(name, rows.reshape(-1), where)
    return column.reshape(rows.shape)


def _lists(name: str, value: Any, lengths: Any, width: int,
           where: str) -> _Lists:
    """A repeated argument (`width` 0: of integers; else of messages of
    `width` fields, as rows) with its `lengths`, normalised."""
    if lengths is not None:
        lengths = _int_column(name + "_lengths", lengths, where)
        if not isinstance(lengths, np.ndarray):
            raise TypeError("%s: %s_lengths is one length per operation "
                            "(1-D)" % (where, name))
        if len(lengths) and lengths.min() < 0:
            raise ValueError("%s: %s_lengths holds a negative length (%d)"
                             % (where, name, int(lengths.min())))
        if width:
            flat = _records(name, value, width, where)
        else:
            flat = _int_column(name, value, where)
            if not isinstance(flat, np.ndarray):
                raise TypeError("%s: %s with %s_lengths is a flat array"
                                % (where, name, name))
        total = int(lengths.sum())
        if total != len(flat):
            raise ValueError("%s: %s_lengths add up to %d, %s holds %d"
                             % (where, name, total, name, len(flat)))
        return _Lists(flat, lengths, False)
    if isinstance(value, (str, bytes)) or _is_scalar_int(value):
        raise TypeError("%s: %s is a list per operation (or a flat array "
                        "with %s_lengths), not %s"
                        % (where, name, name, type(value).__name__))
    if isinstance(value, np.ndarray):
        dims = value.ndim - (1 if width else 0)
        if dims == 1:  # one list
            flat = (_records(name, value, width, where) if width
                    else _int_column(name, value, where))
            return _Lists(flat, np.array([len(flat)], _I64), True)
        if dims == 2:  # a list per operation, all as long
            n, m = value.shape[:2]
            flat = (_records(name, value.reshape(n * m, width), width, where)
                    if width else _int_column(name, value.reshape(-1),
                                              where))
            return _Lists(flat, np.full(n, m, _I64), False)
        raise ValueError("%s: %s has shape %s" % (where, name, value.shape))
    if not isinstance(value, (list, tuple)):
        value = list(value)
    if not value:
        return _Lists(np.zeros((0, width) if width else 0, _I64), None,
                      False)
    first = value[0]
    if _is_scalar_int(first):
        nested = False  # integers: one list
    elif not isinstance(first, (list, tuple, np.ndarray)):
        raise TypeError("%s: %s must hold integers or lists, not %s"
                        % (where, name, type(first).__name__))
    elif width:  # a row (one list) or a list of rows (a list each)
        nested = len(first) == 0 or not _is_scalar_int(first[0])
    else:
        nested = True
    if not nested:
        flat = (_records(name, value, width, where) if width
                else _flat_ints(name, value, where))
        return _Lists(flat, np.array([len(flat)], _I64), True)
    try:
        counts = np.fromiter(map(len, value), _I64, len(value))
    except TypeError:
        raise TypeError("%s: %s is a list per operation: every element a "
                        "list" % (where, name)) from None
    if width:
        flat = _records(name, list(itertools.chain.from_iterable(value)),
                        width, where)
    else:
        flat = _flat_ints(name, value, where, nested=True)
    return _Lists(flat, counts, False)


def _ids(value: Any, where: str) -> str | RequestIds:
    if isinstance(value, (str, RequestIds)):
        return value
    if isinstance(value, (bytes, bytearray)) or _is_scalar_int(value):
        raise TypeError("%s: request_id is a str, a sequence of str or a "
                        "RequestIds, not %s" % (where, type(value).__name__))
    if isinstance(value, np.ndarray):
        if value.dtype.kind != "U" or value.ndim != 1:
            raise TypeError("%s: request_id as an array must be 1-D str "
                            "(dtype U), not %s %s"
                            % (where, value.dtype, value.shape))
        value = value.tolist()
    try:
        return RequestIds(value)
    except (TypeError, ValueError) as e:
        raise type(e)("%s: request_id: %s" % (where, e)) from None


# ------------------------------------------------------------------ plans


class _OperationPlan:
    """How one operation kind's fields go into the columns."""

    __slots__ = ("kind", "name", "entries", "widths", "fixed", "arg_width",
                 "where", "fields", "arg_sources", "hash_source")

    def __init__(self, kind: int) -> None:
        self.kind = kind
        self.name = operation_message(kind).name
        self.entries = layout(operation_message(kind))
        self.where = "ColumnarStep.%s()" % _NAME_OF[kind]
        # A list of messages' element fields (all scalars or hashes).
        self.widths: dict[str, int] = {}
        ids = hashes = 0
        fixed = True
        for e in self.entries:
            if e.place == EACH:
                element = layout(e.element)
                if any(f.place not in (VALUE, HASH) for f in element):
                    raise TypeError("%s: the columnar builder takes lists "
                                    "of messages of scalars only" % e.name)
                self.widths[e.name] = len(element)
                fixed = False
            elif e.place == VALUES:
                fixed = False
            elif e.place in (HASH, HASHES):
                hashes += 1
            elif e.place == ID:
                ids += 1
        if ids > 1:
            raise TypeError("%s: more than one request id" % self.name)
        self.fixed = fixed and hashes <= 1
        self.arg_width = sum(1 for e in self.entries
                             if e.place in (VALUE, HASHES))
        # (name, place, is_bool, element width) of each field, in order.
        self.fields = tuple((e.name, e.place, e.is_bool,
                             self.widths.get(e.name, 0))
                            for e in self.entries)
        # A fixed kind's args, column by column (name, is a list's length),
        # and its one hash field's (name, is a list), if any.
        self.arg_sources = tuple((e.name, e.place == HASHES)
                                 for e in self.entries
                                 if e.place in (VALUE, HASHES))
        self.hash_source = next(((e.name, e.place == HASHES)
                                 for e in self.entries
                                 if e.place in (HASH, HASHES)), None)


_NAME_OF = {number: name for name, number in KINDS.items()}


# ------------------------------------------------------------------ Batch


class Batch:
    """The operations one columnar call appended: `count` operations of
    `kind` (the kind's name), the pass's operations `start` to
    `start + count - 1`. Index the pass's :class:`ColumnarResults` with it
    for their results."""

    __slots__ = ("kind", "start", "count", "_pass")

    def __init__(self, kind: str, start: int, count: int,
                 pass_token: object) -> None:
        self.kind = kind
        self.start = start
        self.count = count
        self._pass = pass_token

    @property
    def stop(self) -> int:
        """One past its last operation's index."""
        return self.start + self.count

    def __len__(self) -> int:
        return self.count

    def __repr__(self) -> str:
        return "<Batch of %d %s, operations %d..%d>" % (
            self.count, self.kind, self.start, self.stop - 1)


# ------------------------------------------------------------------ builder


class ColumnarStep:
    """One pass's operations added by columns, sent as one Step.

    Get one from ``session.columns()`` (or ``stream.columns()``). Each
    method appends operations of one kind, one per element of its
    arguments, and returns the :class:`Batch` naming them; :meth:`send`
    runs the pass and returns a :class:`ColumnarResults`, which a batch
    indexes::

        step = session.columns()
        step.begin_pass()
        forks = step.consume_fork(running_ids)            # N operations
        cks = step.checkpoint(ready_ids, boundary_blocks=blocks,
                              hash=boundary_hashes)
        results = step.send()
        ck = results[cks]             # a BatchResult: numpy arrays
        ck.codes, ck.state_slot, ck.fork_src, ck.kept

    The arguments of a method are its operation message's fields in
    field-number order, with the names of statecache.proto (and of
    :class:`StepBuilder`'s keyword arguments), each one of:

    * a column: a 1-D array-like with one value per operation (numpy
      integer or bool arrays, sequences of int); or a scalar, the same for
      every operation. Integers must fit int64; bool fields take bools or
      integers (non-zero is true).
    * request ids (``request_id``): a sequence of str, a 1-D str array, or
      a :class:`RequestIds` (encoded once, for several calls); or one str
      for every operation.
    * a repeated field (``block_hashes``, ``hashes``, ``positions``): one
      list per operation, as a sequence of sequences or a 2-D array (a row
      each); or all of them flat, one array, with ``<name>_lengths=`` (a
      keyword) giving each operation's count; or a single list (1-D) when
      the call appends one operation. A list of messages (``positions``,
      MidstepPosition) takes rows of the message's fields in field-number
      order (``(position, hash)``). Left at its default, ``()``, every
      operation's list is empty.

    The number of operations is the common length of the arguments that
    are columns (1 when all are scalars); a kind without fields
    (``begin_pass``, ``clear_index``) appends one. Lengths that differ, a
    non-integer, a value beyond int64, a negative length, a non-str id or
    one that is not valid Unicode raise TypeError or ValueError at once,
    naming the argument, and the step is left as it was. What the daemon
    judges (a request id's length, a hash's range, ...) comes back as
    refusals in the results, as over the per-operation builder.

    Not thread-safe. After :meth:`send` the step is empty again; batches
    of an earlier pass do not index a later one's results.
    """

    __slots__ = ("_sender", "_count", "_kinds", "_counts", "_ids",
                 "_id_lengths", "_args", "_hashes", "_token")

    def __init__(self, sender: Callable[[OperationColumns], ResultColumns]
                 | None = None) -> None:
        """`sender(columns)` runs a pass and returns its result columns
        (``Session.send_columns``); None: a step that only builds."""
        self._sender = sender
        self.clear()

    def __len__(self) -> int:
        return self._count

    def __repr__(self) -> str:
        return "<ColumnarStep of %d operations>" % self._count

    def clear(self) -> None:
        """Drops the operations added so far (their batches index
        nothing)."""
        self._count = 0
        self._kinds: list[int] = []
        self._counts: list[int] = []
        self._ids: list[bytes] = []
        self._id_lengths: list[np.ndarray] = []
        self._args: list[np.ndarray] = []
        self._hashes: list[np.ndarray] = []
        self._token = object()

    def columns(self) -> OperationColumns:
        """The operations so far as the packed form's columns."""
        if not self._count:
            return OperationColumns.empty()
        kinds = np.repeat(np.array(self._kinds, _U32),
                          np.array(self._counts, _I64))
        return OperationColumns(
            kinds=kinds,
            request_ids=b"".join(self._ids),
            request_id_lengths=_concat(self._id_lengths, _U32),
            args=_concat(self._args, _I64),
            hashes=_concat(self._hashes, _I64))

    def send(self) -> ColumnarResults:
        """Runs the operations as one Step and returns their
        :class:`ColumnarResults`. Raises as :meth:`StepBuilder.send`
        (nothing applied): LeaseLost / EpochChanged, InvalidArgument,
        ResourceExhausted, Unavailable, DeadlineExceeded. The step is empty
        afterwards (also when it raised)."""
        if self._sender is None:
            raise ValueError("this ColumnarStep has no session to send to "
                             "(get one from session.columns())")
        columns = self.columns()
        token = self._token
        runs = []  # (kind, start, stop) of the calls, same kinds merged
        start = 0
        for kind, count in zip(self._kinds, self._counts):
            if runs and runs[-1][0] == kind:
                runs[-1] = (kind, runs[-1][1], start + count)
            else:
                runs.append((kind, start, start + count))
            start += count
        self.clear()
        return ColumnarResults(self._sender(columns), columns.kinds, token,
                               runs)

    # ---- the generic part: a kind's arguments into the columns

    def _add(self, kind: int, arguments: dict[str, Any],
             lengths: dict[str, Any]) -> Batch:
        plan = _PLANS[kind]
        where = plan.where
        ids: str | RequestIds | None = None
        # Field name -> an int (one value for all), an int64 array, or
        # _Lists (a repeated field).
        columns: dict[str, Any] = {}
        n = -1  # the operations, once an argument says
        said = ""  # which
        one_list = None
        for name, place, is_bool, width in plan.fields:
            value = arguments[name]
            if place == ID:
                ids = _ids(value, where)
                count = len(ids) if isinstance(ids, RequestIds) else -1
            elif place == VALUE or place == HASH:
                column = _int_column(name, value, where)
                if is_bool:
                    column = ((column != 0).astype(_I64)
                              if isinstance(column, np.ndarray)
                              else int(column != 0))
                columns[name] = column
                count = len(column) if isinstance(column, np.ndarray) else -1
            else:
                normal = _lists(name, value, lengths.get(name), width, where)
                columns[name] = normal
                count = -1
                if normal.one:
                    one_list = name
                elif normal.lengths is not None:
                    count = len(normal.lengths)
            if count >= 0:
                if n < 0:
                    n, said = count, name
                elif count != n:
                    raise ValueError(
                        "%s: the arguments disagree on the number of "
                        "operations (%s %d, %s %d)"
                        % (where, said, n, name, count))
        if one_list is not None:
            if n >= 0 and n != 1:
                raise ValueError(
                    "%s: %s is a single list (1-D) but there are %d "
                    "operations: give one list per operation, or a flat "
                    "array with %s_lengths" % (where, one_list, n, one_list))
            n = 1
        elif n < 0:
            n = 1  # every argument one value: one operation
        for value in columns.values():
            if isinstance(value, _Lists) and value.lengths is None:
                value.lengths = np.zeros(n, _I64)
        start = self._count
        if n == 0:
            return Batch(_NAME_OF[kind], start, 0, self._token)
        if plan.fixed:
            args, hashes = _fixed_columns(plan, n, columns)
        else:
            args, hashes = _general_columns(plan, n, columns)
        if ids is not None:
            if isinstance(ids, str):
                data = ids.encode()
                self._ids.append(data * n)
                self._id_lengths.append(np.full(n, len(data), _U32))
            else:
                self._ids.append(ids.data)
                self._id_lengths.append(ids.lengths)
        if len(args):
            self._args.append(args)
        if len(hashes):
            self._hashes.append(hashes)
        self._kinds.append(kind)
        self._counts.append(n)
        self._count = start + n
        return Batch(_NAME_OF[kind], start, n, self._token)

    # ---- the operations, in Operation's field-number order: each passes
    # its arguments by their proto names to _add, which places them by the
    # kind's layout.

    def begin_pass(self) -> Batch:
        """One begin_pass: ticks the session's pin clock (results: moves,
        pins_released)."""
        return self._add(KINDS["begin_pass"], {}, {})

    def admit(self, request_id: Ids, width: Ints, num_tokens: Ints,
              anchor_pos: Ints = 0, block_hashes: IntLists = (),
              kv_hit_blocks: Ints = 0, *,
              block_hashes_lengths: Ints | None = None) -> Batch:
        """Admits requests (results: slots, fork_src, blocks_resumed,
        adopted, and the late fields from_tier, branch_blocks,
        continuation_blocks, ladder_blocks)."""
        return self._add(KINDS["admit"], {
            "request_id": request_id, "width": width,
            "num_tokens": num_tokens, "anchor_pos": anchor_pos,
            "block_hashes": block_hashes, "kv_hit_blocks": kv_hit_blocks},
            {"block_hashes": block_hashes_lengths})

    def resumable_hit(self, num_tokens: Ints, block_hashes: IntLists = (),
                      kv_hit_blocks: Ints = 0,
                      assume_checkpointed: Ints = False, *,
                      block_hashes_lengths: Ints | None = None) -> Batch:
        """How many of kv_hit_blocks an admit would resume; changes
        nothing (results: blocks, tier_blocks)."""
        return self._add(KINDS["resumable_hit"], {
            "num_tokens": num_tokens, "block_hashes": block_hashes,
            "kv_hit_blocks": kv_hit_blocks,
            "assume_checkpointed": assume_checkpointed},
            {"block_hashes": block_hashes_lengths})

    def lookup(self, hash: Ints) -> Batch:  # noqa: A002 - the proto's name
        """The slots holding the checkpoints of these hashes (results:
        slot, -1 for none; in_tier)."""
        return self._add(KINDS["lookup"], {"hash": hash}, {})

    def reserve(self, request_id: Ids, positions: RecordLists_ = (), *,
                positions_lengths: Ints | None = None) -> Batch:
        """Destination slots for the midstep positions each request's
        forward will pass, rows of (position, hash) (results:
        reservations)."""
        return self._add(KINDS["reserve"], {
            "request_id": request_id, "positions": positions},
            {"positions": positions_lengths})

    def publish(self, request_id: Ids, keep_all: Ints = False) -> Batch:
        """Files the reserved slots the forwards wrote as checkpoints
        (results: published)."""
        return self._add(KINDS["publish"], {
            "request_id": request_id, "keep_all": keep_all}, {})

    def cancel(self, request_id: Ids) -> Batch:
        """The forwards never ran: the reservations go back (results:
        cancelled)."""
        return self._add(KINDS["cancel"], {"request_id": request_id}, {})

    def checkpoint(self, request_id: Ids, boundary_blocks: Ints,
                   hash: Ints, anchor_pos: Ints = 0  # noqa: A002
                   ) -> Batch:
        """Fork checkpoints of the requests' committed states, each exactly
        at its boundary_blocks blocks, filed under `hash` (results:
        state_slot, fork_src, kept)."""
        return self._add(KINDS["checkpoint"], {
            "request_id": request_id, "boundary_blocks": boundary_blocks,
            "hash": hash, "anchor_pos": anchor_pos}, {})

    def consume_fork(self, request_id: Ids) -> Batch:
        """The forwards reading these requests' fork sources were issued
        (results: fork_src)."""
        return self._add(KINDS["consume_fork"], {"request_id": request_id},
                         {})

    def adopt_fork_source(self, request_id: Ids) -> Batch:
        """Before forwards too short to fork: the requests take their fork
        sources over (results: state_slot)."""
        return self._add(KINDS["adopt_fork_source"],
                         {"request_id": request_id}, {})

    def release(self, request_id: Ids) -> Batch:
        """The requests finished or were preempted (results:
        slots_released)."""
        return self._add(KINDS["release"], {"request_id": request_id}, {})

    def unindex(self, hashes: IntLists = (), *,
                hashes_lengths: Ints | None = None) -> Batch:
        """These hashes' KV blocks were evicted: one operation per list
        (results: orphaned). ``unindex(evicted)`` with a 1-D array is one
        operation."""
        return self._add(KINDS["unindex"], {"hashes": hashes},
                         {"hashes": hashes_lengths})

    def clear_index(self) -> Batch:
        """One clear_index: drops every checkpoint hash."""
        return self._add(KINDS["clear_index"], {}, {})

    def copy(self, request_id: Ids, from_index: Ints,
             to_index: Ints) -> Batch:
        """Copies each request's slot from_index onto its slot to_index
        (results: bytes)."""
        return self._add(KINDS["copy"], {
            "request_id": request_id, "from_index": from_index,
            "to_index": to_index}, {})

    def snapshot(self, request_id: Ids, position: Ints,
                 hash: Ints) -> Batch:  # noqa: A002
        """Copy-mode checkpoints of the committed slots (results: slot,
        -1 when dropped; kept)."""
        return self._add(KINDS["snapshot"], {
            "request_id": request_id, "position": position, "hash": hash},
            {})


def _concat(parts: list[np.ndarray], dtype: np.dtype) -> np.ndarray:
    if not parts:
        return np.zeros(0, dtype)
    if len(parts) == 1:
        return parts[0]
    return np.concatenate(parts)


def _fixed_columns(plan: _OperationPlan, n: int, columns: dict[str, Any]
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Args and hashes of `n` operations of a kind with a fixed number of
    args each and at most one hash field."""
    hashes = _EMPTY
    if plan.hash_source is not None:
        name, is_list = plan.hash_source
        hashes = columns[name].flat if is_list else columns[name]
        if not isinstance(hashes, np.ndarray):
            hashes = np.full(n, hashes, _I64)
    sources = plan.arg_sources
    if len(sources) == 1:  # the column itself
        name, is_list = sources[0]
        args = columns[name].lengths if is_list else columns[name]
        if not isinstance(args, np.ndarray):
            args = np.full(n, args, _I64)
        return args, hashes
    if not sources:
        return _EMPTY, hashes
    args = np.empty((n, len(sources)), _I64)
    for j, (name, is_list) in enumerate(sources):
        args[:, j] = columns[name].lengths if is_list else columns[name]
    return args.reshape(-1), hashes


def _general_columns(plan: _OperationPlan, n: int, columns: dict[str, Any]
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Args and hashes of `n` operations of any kind: each operation's
    values placed at its own cursor into the columns, by the layout."""
    scalars = lists = columns
    arg_sizes = np.zeros(n, _I64)
    hash_sizes = np.zeros(n, _I64)
    for e in plan.entries:
        if e.place == VALUE:
            arg_sizes += 1
        elif e.place == HASH:
            hash_sizes += 1
        elif e.place == HASHES:
            arg_sizes += 1
            hash_sizes += lists[e.name].lengths
        elif e.place == VALUES:
            arg_sizes += 1 + lists[e.name].lengths
        elif e.place == EACH:
            element = layout(e.element)
            values_each = sum(1 for f in element if f.place == VALUE)
            arg_sizes += 1 + lists[e.name].lengths * values_each
            hash_sizes += lists[e.name].lengths * (len(element)
                                                   - values_each)
    arg_at = np.zeros(n, _I64)
    np.cumsum(arg_sizes[:-1], out=arg_at[1:])
    hash_at = np.zeros(n, _I64)
    np.cumsum(hash_sizes[:-1], out=hash_at[1:])
    args = np.empty(int(arg_sizes.sum()), _I64)
    hashes = np.empty(int(hash_sizes.sum()), _I64)
    for e in plan.entries:
        if e.place == VALUE:
            args[arg_at] = scalars[e.name]
            arg_at += 1
        elif e.place == HASH:
            hashes[hash_at] = scalars[e.name]
            hash_at += 1
        elif e.place in (HASHES, VALUES):
            normal = lists[e.name]
            args[arg_at] = normal.lengths
            arg_at += 1
            if e.place == HASHES:
                hashes[_ranges(hash_at, normal.lengths)] = normal.flat
                hash_at += normal.lengths
            else:
                args[_ranges(arg_at, normal.lengths)] = normal.flat
                arg_at += normal.lengths
        elif e.place == EACH:
            normal = lists[e.name]
            args[arg_at] = normal.lengths
            arg_at += 1
            element = layout(e.element)
            values_each = sum(1 for f in element if f.place == VALUE)
            hashes_each = len(element) - values_each
            # Element k of an operation: its values at arg_at +
            # k * values_each, its hashes at hash_at + k * hashes_each.
            index = _ranges(np.zeros(n, _I64), normal.lengths)
            arg_base = np.repeat(arg_at, normal.lengths) + index * values_each
            hash_base = (np.repeat(hash_at, normal.lengths)
                         + index * hashes_each)
            v = h = 0
            for j, f in enumerate(element):
                if f.place == VALUE:
                    args[arg_base + v] = normal.flat[:, j]
                    v += 1
                else:
                    hashes[hash_base + h] = normal.flat[:, j]
                    h += 1
            arg_at += normal.lengths * values_each
            hash_at += normal.lengths * hashes_each
    return args, hashes


_PLANS: dict[int, _OperationPlan] = {
    number: _OperationPlan(number) for number in KINDS.values()}


# ------------------------------------------------------------------ results


class Lists:
    """A repeated scalar result field over a batch (admit's ``slots``): the
    operations' lists one after another in `values`, operation i's being
    ``values[offsets[i]:offsets[i + 1]]`` (empty for a refused one)."""

    __slots__ = ("offsets", "values")

    def __init__(self, offsets: np.ndarray, values: np.ndarray) -> None:
        self.offsets = offsets
        self.values = values

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return self.values[self.offsets[i]:self.offsets[i + 1]]

    @property
    def lengths(self) -> np.ndarray:
        """Each operation's count."""
        return np.diff(self.offsets)

    def tolist(self) -> list[list[int]]:
        """The lists as lists of int."""
        values = self.values.tolist()
        offsets = self.offsets.tolist()
        return [values[a:b] for a, b in zip(offsets, offsets[1:])]

    def __repr__(self) -> str:
        return "<Lists of %d operations, %d values>" % (len(self),
                                                         len(self.values))


class RecordLists:
    """A repeated message result field over a batch (begin_pass's
    ``moves``, reserve's ``reservations``): the operations' elements one
    after another, a column per element field (``.slot``, ``.position``,
    ...: an array, or a list of str for a request id), operation i's being
    rows ``offsets[i]`` to ``offsets[i + 1] - 1``."""

    __slots__ = ("offsets", "fields", "_make")

    def __init__(self, offsets: np.ndarray, fields: dict[str, Any],
                 make: type) -> None:
        self.offsets = offsets
        self.fields = fields
        self._make = make

    def __getattr__(self, name: str) -> Any:
        try:
            return self.fields[name]
        except KeyError:
            raise AttributeError(name) from None

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        """Each operation's count."""
        return np.diff(self.offsets)

    def __getitem__(self, i: int) -> list:
        """Operation i's elements as dataclasses (SlotMove, Reservation)."""
        a, b = int(self.offsets[i]), int(self.offsets[i + 1])
        names = list(self.fields)
        columns = [self.fields[name][a:b] for name in names]
        columns = [c.tolist() if isinstance(c, np.ndarray) else c
                   for c in columns]
        return [self._make(**dict(zip(names, row))) for row in zip(*columns)]

    def __repr__(self) -> str:
        return "<RecordLists of %d operations, %d elements>" % (
            len(self), int(self.offsets[-1]))


class BatchResult:
    """The results of one :class:`Batch` as columns: ``codes`` (uint32, 0
    or the refusal's code), ``ok`` (bool), ``messages`` (the refusals'
    messages, "" for accepted operations), and an attribute per field of
    the kind's result message (statecache.proto's names, as the result
    dataclasses': ``state_slot``, ``fork_src``, ``kept``, ...): an int64
    array (a bool array for a bool field), a :class:`Lists` for a
    repeated scalar field, a :class:`RecordLists` for a repeated message
    field. A refused operation's fields are at their defaults (-1 for a
    slot, 0, False, an empty list), as in the dataclasses. ``fields`` names
    them in the message's order; :meth:`rows` gives the per-operation
    dataclasses.

    The arrays may be views of the reply's buffer: read-only, and valid
    as long as the result is referenced.
    """

    __slots__ = ("kind", "codes", "fields", "_values", "_refusals",
                 "_result_type")

    def __init__(self, kind: str, codes: np.ndarray, values: dict[str, Any],
                 refusals: Callable[[], list[str]], result_type: type
                 ) -> None:
        self.kind = kind
        self.codes = codes
        self.fields = tuple(values)
        self._values = values
        self._refusals = refusals
        self._result_type = result_type

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError("%s results have no field %r (they have "
                                 "%s)" % (self.kind, name,
                                          ", ".join(self.fields))) from None

    def __len__(self) -> int:
        return len(self.codes)

    def __repr__(self) -> str:
        return "<BatchResult of %d %s, %d refused>" % (
            len(self.codes), self.kind, int(np.count_nonzero(self.codes)))

    @property
    def ok(self) -> np.ndarray:
        """True where the operation applied."""
        return self.codes == 0

    @property
    def messages(self) -> list[str]:
        """Each operation's refusal message ("" where it applied)."""
        return self._refusals()

    def check(self) -> BatchResult:
        """Returns self if every operation applied, else raises the first
        refusal as its :class:`statecache.Error` subclass."""
        refused = np.flatnonzero(self.codes)
        if len(refused):
            i = int(refused[0])
            raise error_for(int(self.codes[i]), self.messages[i])
        return self

    def rows(self) -> list:
        """The results as the per-operation dataclasses (AdmitResult, ...),
        equal to what :class:`StepBuilder` gives for the same operations."""
        cls = self._result_type
        columns = []
        for name in self.fields:
            value = self._values[name]
            if isinstance(value, Lists):
                columns.append(value.tolist())
            elif isinstance(value, RecordLists):
                columns.append([value[i] for i in range(len(value))])
            elif isinstance(value, np.ndarray):
                columns.append(value.tolist())
            else:
                columns.append(value)
        codes = self.codes.tolist()
        messages = self.messages
        out = []
        for i, code in enumerate(codes):
            if code:
                out.append(cls(code=code, message=messages[i]))
            else:
                out.append(cls(**{name: column[i] for name, column
                                  in zip(self.fields, columns)}))
        return out


class _ResultPlan:
    """How one kind's result is read from the columns."""

    __slots__ = ("kind", "name", "entries", "late", "defaults", "cls",
                 "values", "hashes", "ids", "simple", "elements", "one_list",
                 "hashes_or_ids")

    def __init__(self, kind: int, result_type: type,
                 element_types: dict[str, type]) -> None:
        message = result_message(kind)
        self.kind = kind
        self.name = _NAME_OF[kind]
        self.entries = layout(message)
        self.late = late_fields(message)
        self.cls = result_type
        made = result_type()
        self.defaults = {e.name: getattr(made, e.name)
                         for e in self.entries + self.late}
        # Element message name -> (its layout, its dataclass).
        self.elements = {e.name: (layout(e.element),
                                  element_types[e.element.name])
                         for e in self.entries if e.place == EACH}
        variable = any(e.place in (VALUES, HASHES, EACH)
                       for e in self.entries)
        # Per accepted operation; -1: it varies.
        self.values = -1 if variable else sum(
            1 for e in self.entries if e.place == VALUE)
        self.hashes = -1 if variable else sum(
            1 for e in self.entries if e.place == HASH)
        self.ids = -1 if variable else sum(
            1 for e in self.entries if e.place == ID)
        self.simple = not variable and self.hashes == 0 and self.ids == 0
        self.hashes_or_ids = any(e.place in (HASH, HASHES, ID, EACH)
                                 for e in self.entries)
        # One list among fixed fields (every kind with lists so far): its
        # count's index among the values, and (values, hashes, ids) of the
        # fixed fields and of one element.
        self.one_list: tuple | None = None
        listed = [e for e in self.entries
                  if e.place in (VALUES, HASHES, EACH)]
        if len(listed) == 1:
            e = listed[0]
            count_at = sum(1 for f in self.entries[:self.entries.index(e)]
                           if f.place == VALUE)
            fixed = (sum(1 for f in self.entries if f.place == VALUE) + 1,
                     sum(1 for f in self.entries if f.place == HASH),
                     sum(1 for f in self.entries if f.place == ID))
            if e.place == VALUES:
                each = (1, 0, 0)
            elif e.place == HASHES:
                each = (0, 1, 0)
            else:
                element = self.elements[e.name][0]
                each = tuple(sum(1 for f in element if f.place == place)
                             for place in (VALUE, HASH, ID))
            self.one_list = (count_at, fixed, each)

    def measure(self, values: np.ndarray, at: int) -> tuple[int, int, int]:
        """An accepted operation's (values, hashes, ids) when its values
        start at `at`. IndexError when the column is short."""
        if self.one_list is not None:
            count_at, fixed, each = self.one_list
            count = int(values[at + count_at])
            if count < 0:
                raise IndexError("a negative length")
            size = fixed[0] + count * each[0]
            if at + size > len(values):
                raise IndexError("values")
            return (size, fixed[1] + count * each[1],
                    fixed[2] + count * each[2])
        start = at
        hashes = ids = 0
        for e in self.entries:
            if e.place == VALUE:
                at += 1
            elif e.place == HASH:
                hashes += 1
            elif e.place == ID:
                ids += 1
            else:
                count = int(values[at])
                if count < 0:
                    raise IndexError("a negative length")
                at += 1
                if e.place == VALUES:
                    at += count
                elif e.place == HASHES:
                    hashes += count
                else:
                    element, _ = self.elements[e.name]
                    for f in element:
                        if f.place == VALUE:
                            at += count
                        elif f.place == HASH:
                            hashes += count
                        else:
                            ids += count
        if at > len(values):
            raise IndexError("values")
        return at - start, hashes, ids


class _Run:
    """A run of consecutive operations of one kind in a pass, and where its
    results start in each column. A kind whose results vary in size keeps
    each accepted operation's starts (`value_ats`, ...: one per operation
    of the run, -1 for a refused one)."""

    __slots__ = ("kind", "start", "stop", "value_at", "late_at", "hash_at",
                 "id_at", "refusal_at", "value_ats", "hash_ats", "id_ats",
                 "value_end", "hash_end", "id_end")

    def __init__(self, kind: int, start: int, stop: int,
                 at: tuple[int, int, int, int, int]) -> None:
        self.kind = kind
        self.start = start
        self.stop = stop
        (self.value_at, self.late_at, self.hash_at, self.id_at,
         self.refusal_at) = at
        self.value_ats: list[int] | None = None
        self.hash_ats: list[int] | None = None
        self.id_ats: list[int] | None = None
        # Where the run's values, hashes and ids end.
        self.value_end = self.hash_end = self.id_end = 0


class ColumnarResults:
    """The results of a :class:`ColumnarStep`'s pass, over the reply's
    columns: ``results[batch]`` is that batch's :class:`BatchResult`.

    Attributes:
        columns: the :class:`ResultColumns` as the transport gave them.
        kinds: the pass's operation kinds (uint32).
        codes: every operation's code (uint32), in pass order.
        epoch: the daemon's epoch.
        refused: the refused operations' indexes (a list, usually empty).

    Where each run of operations of one kind starts in the columns is
    worked out once, here: a kind with a fixed number of values takes them
    in turn (refused operations none), so a run costs a count of its
    accepted operations; only the operations with lists among their
    results (begin_pass, admit, reserve) are walked one by one.

    Raises Internal (constructing one) when the columns do not follow the
    layout rule for these operations.
    """

    __slots__ = ("columns", "kinds", "codes", "epoch", "_token", "_refused",
                 "_runs", "_run_starts", "_id_offsets")

    def __init__(self, columns: ResultColumns, kinds: np.ndarray,
                 token: object = None,
                 runs: list[tuple[int, int, int]] | None = None) -> None:
        """`kinds`: the pass's operation kinds; `token`: what the pass's
        batches carry (see ColumnarStep); `runs`: the (kind, start, stop)
        of its runs of one kind, when the caller knows them (else found
        from `kinds`)."""
        self.columns = columns
        self.kinds = kinds
        self.codes = columns.codes
        self.epoch = columns.epoch
        self._token = token
        self._id_offsets: np.ndarray | None = None
        n = len(kinds)
        if len(columns.codes) != n:
            raise Internal("packed results carry %d codes for %d operations"
                           % (len(columns.codes), n))
        # The refused operations' indexes (few, usually none).
        refused_at = np.flatnonzero(columns.codes).tolist()
        self._refused = refused_at
        if runs is not None:
            run_kinds = [kind for kind, _, _ in runs]
            starts = [start for _, start, _ in runs]
            stops = [stop for _, _, stop in runs]
        elif n:
            cuts = (np.flatnonzero(kinds[1:] != kinds[:-1]) + 1).tolist()
            starts = [0] + cuts
            stops = cuts + [n]
            run_kinds = kinds[starts].tolist()
        else:
            starts = stops = run_kinds = []
        self._run_starts = starts
        self._runs: list[_Run] = []
        value = late = hashes = ids = refused = 0
        try:
            for kind, start, stop in zip(run_kinds, starts, stops):
                plan = _RESULT_PLANS[kind]
                run = _Run(kind, start, stop,
                           (value, late, hashes, ids, refused))
                self._runs.append(run)
                out = (bisect.bisect_left(refused_at, stop)
                       - bisect.bisect_left(refused_at, start)
                       if refused_at else 0)
                accepted = stop - start - out
                refused += out
                late += accepted * len(plan.late)
                if plan.values >= 0:
                    value += accepted * plan.values
                    hashes += accepted * plan.hashes
                    ids += accepted * plan.ids
                    continue
                value_ats, hash_ats, id_ats = [], [], []
                values = columns.values
                skip = set(refused_at) if out else ()
                measure = plan.measure
                for i in range(start, stop):
                    if i in skip:
                        value_ats.append(-1)
                        hash_ats.append(-1)
                        id_ats.append(-1)
                        continue
                    value_ats.append(value)
                    hash_ats.append(hashes)
                    id_ats.append(ids)
                    nv, nh, ni = measure(values, value)
                    value += nv
                    hashes += nh
                    ids += ni
                run.value_ats, run.hash_ats, run.id_ats = (value_ats,
                                                           hash_ats, id_ats)
                run.value_end, run.hash_end, run.id_end = value, hashes, ids
        except (IndexError, ValueError) as e:
            raise Internal("packed results too short for the operations "
                           "(%s)" % e) from None
        for name, used, column in (
                ("values", value, columns.values),
                ("late_values", late, columns.late_values),
                ("hashes", hashes, columns.hashes),
                ("request_id_lengths", ids, columns.request_id_lengths)):
            if used != len(column):
                raise Internal("packed results: %s holds %d, the operations "
                               "use %d" % (name, len(column), used))
        if refused != len(columns.messages):
            raise Internal("packed results: %d messages for %d refusals"
                           % (len(columns.messages), refused))

    def _refused_in(self, lo: int, hi: int) -> int:
        """How many of operations lo..hi-1 were refused."""
        refused = self._refused
        if not refused:
            return 0
        return bisect.bisect_left(refused, hi) - bisect.bisect_left(refused,
                                                                     lo)

    @property
    def refused(self) -> list[int]:
        """The indexes (in the pass) of the operations refused, in order:
        usually none."""
        return list(self._refused)

    def __len__(self) -> int:
        return len(self.kinds)

    def __repr__(self) -> str:
        return "<ColumnarResults of %d operations, %d refused>" % (
            len(self.kinds), int(np.count_nonzero(self.codes)))

    def check(self) -> ColumnarResults:
        """Returns self if every operation applied, else raises the first
        refusal as its :class:`statecache.Error` subclass."""
        refused = np.flatnonzero(self.codes)
        if len(refused):
            # The first refusal's message is the first message.
            raise error_for(int(self.codes[refused[0]]),
                            self.columns.messages[0])
        return self

    def __getitem__(self, batch: Batch) -> BatchResult:
        if not isinstance(batch, Batch):
            raise TypeError("ColumnarResults are indexed by a Batch, not %s"
                            % type(batch).__name__)
        if batch._pass is not self._token:
            raise ValueError("%r is not of this pass" % batch)
        return self._batch(KINDS[batch.kind], batch.start, batch.stop)

    def _run_of(self, lo: int, hi: int, kind: int) -> _Run:
        run = self._runs[bisect.bisect_right(self._run_starts, lo) - 1]
        if run.kind != kind or hi > run.stop:
            raise ValueError("operations %d..%d are not all %s"
                             % (lo, hi - 1, _NAME_OF[kind]))
        return run

    def _batch(self, kind: int, lo: int, hi: int) -> BatchResult:
        plan = _RESULT_PLANS[kind]
        columns = self.columns
        codes = self.codes[lo:hi]
        n = hi - lo
        out: dict[str, Any] = {}
        if n == 0:
            run = _Run(kind, lo, hi, (0, 0, 0, 0, 0))
        else:
            run = self._run_of(lo, hi, kind)
        # The run's operations before the batch: `refused_before` refused,
        # `earlier` accepted.
        refused_before = self._refused_in(run.start, lo)
        earlier = lo - run.start - refused_before
        accepted = n - self._refused_in(lo, hi)
        every = accepted == n
        ok = None if every else codes == 0

        def spread(name: str, column: np.ndarray, is_bool: bool
                   ) -> np.ndarray:
            if is_bool:
                column = column != 0
            if every:
                return column
            full = np.full(n, plan.defaults[name],
                           np.bool_ if is_bool else _I64)
            full[ok] = column
            return full

        if run.value_ats is not None and n <= _SMALL:
            self._small(plan, run, lo, hi, out)
        elif plan.simple:
            width = plan.values
            start = run.value_at + earlier * width
            block = columns.values[start:start + accepted * width]
            block = block.reshape(accepted, width)
            for j, e in enumerate(plan.entries):
                out[e.name] = spread(e.name, block[:, j], e.is_bool)
        else:
            self._general(plan, run, lo, hi, earlier, ok, every, spread,
                          out)
        if plan.late:
            width = len(plan.late)
            start = run.late_at + earlier * width
            block = columns.late_values[start:start + accepted * width]
            block = block.reshape(accepted, width)
            for j, e in enumerate(plan.late):
                out[e.name] = spread(e.name, block[:, j], e.is_bool)

        messages = columns.messages
        first_refusal = run.refusal_at + refused_before

        def refusals() -> list[str]:
            out, at = [], first_refusal
            for code in codes.tolist():
                if code:
                    out.append(messages[at])
                    at += 1
                else:
                    out.append("")
            return out

        return BatchResult(plan.name, codes, out, refusals, plan.cls)

    def _small(self, plan: _ResultPlan, run: _Run, lo: int, hi: int,
               out: dict[str, Any]) -> None:
        """The fields of a small batch of a kind whose results vary in
        size, read operation by operation from Python lists of the batch's
        part of the columns (cheaper than numpy's per-call cost for a few
        operations)."""
        columns = self.columns
        span = slice(lo - run.start, hi - run.start)
        value_ats = run.value_ats[span]
        accepted = [a for a in value_ats if a >= 0]
        # The batch's values: from its first accepted operation's to where
        # the next accepted one after the batch starts (or the run ends).
        later = [a for a in run.value_ats[hi - run.start:] if a >= 0]
        v0 = accepted[0] if accepted else 0
        v1 = later[0] if later else run.value_end
        values = columns.values[v0:v1].tolist()
        if plan.one_list is not None and plan.one_list[2] == (1, 0, 0) \
                and not plan.hashes_or_ids:
            self._small_values(plan, value_ats, values, v0, out)
            return
        hashes = columns.hashes.tolist() if run.hash_end > run.hash_at \
            else []
        hash_ats = run.hash_ats[span]
        id_ats = run.id_ats[span]
        id_starts = [a for a in id_ats if a >= 0]
        ids = (self._ids(np.arange(id_starts[0], run.id_end))
               if id_starts and run.id_end > id_starts[0] else [])
        id0 = id_starts[0] if id_starts else 0
        fields: dict[str, list] = {e.name: [] for e in plan.entries}
        elements: dict[str, dict[str, list]] = {}
        for name, (element, _) in plan.elements.items():
            elements[name] = {f.name: [] for f in element}
        counts: dict[str, list[int]] = {e.name: [] for e in plan.entries
                                        if e.place in (VALUES, HASHES,
                                                       EACH)}
        for a, h, i in zip(value_ats, hash_ats, id_ats):
            if a < 0:
                for e in plan.entries:
                    if e.name in counts:
                        counts[e.name].append(0)
                    else:
                        fields[e.name].append(plan.defaults[e.name])
                continue
            a -= v0
            i -= id0
            for e in plan.entries:
                column = fields[e.name]
                if e.place == VALUE:
                    column.append(values[a])
                    a += 1
                elif e.place == HASH:
                    column.append(hashes[h])
                    h += 1
                elif e.place == ID:
                    column.append(ids[i])
                    i += 1
                else:
                    count = values[a]
                    a += 1
                    counts[e.name].append(count)
                    if e.place == VALUES:
                        column.extend(values[a:a + count])
                        a += count
                    elif e.place == HASHES:
                        column.extend(hashes[h:h + count])
                        h += count
                    else:
                        element = plan.elements[e.name][0]
                        record = elements[e.name]
                        for _ in range(count):
                            for f in element:
                                if f.place == VALUE:
                                    record[f.name].append(values[a])
                                    a += 1
                                elif f.place == HASH:
                                    record[f.name].append(hashes[h])
                                    h += 1
                                else:
                                    record[f.name].append(ids[i])
                                    i += 1
        for e in plan.entries:
            column = fields[e.name]
            if e.place in (VALUE, HASH):
                out[e.name] = np.array(column, np.bool_ if e.is_bool
                                       else _I64)
            elif e.place == ID:
                out[e.name] = column
            elif e.place in (VALUES, HASHES):
                out[e.name] = Lists(_offsets(np.array(counts[e.name], _I64)),
                                    np.array(column, _I64))
            else:
                element, make = plan.elements[e.name]
                record = {}
                for f in element:
                    gathered = elements[e.name][f.name]
                    record[f.name] = (gathered if f.place == ID else np.array(
                        gathered, np.bool_ if f.is_bool else _I64))
                out[e.name] = RecordLists(
                    _offsets(np.array(counts[e.name], _I64)), record, make)

    @staticmethod
    def _small_values(plan: _ResultPlan, value_ats: list[int],
                      values: list[int], v0: int, out: dict[str, Any]
                      ) -> None:
        """_small for a kind whose results are values only, one of them a
        list of numbers (admit): each operation's values sliced whole."""
        count_at = plan.one_list[0]
        entries = plan.entries
        listed = entries[count_at]
        scalars = [e for e in entries if e is not listed]
        rows: list[list[int]] = []
        items: list[int] = []
        counts: list[int] = []
        width = len(scalars)
        for a in value_ats:
            if a < 0:
                rows.append([plan.defaults[e.name] for e in scalars])
                counts.append(0)
                continue
            a -= v0
            start = a + count_at + 1
            count = values[a + count_at]
            end = start + count
            counts.append(count)
            items += values[start:end]
            rows.append(values[a:a + count_at] + values[
                end:end + width - count_at])
        table = np.array(rows, _I64).reshape(len(rows), width)
        for j, e in enumerate(scalars):
            out[e.name] = table[:, j] != 0 if e.is_bool else table[:, j]
        out[listed.name] = Lists(_offsets(np.array(counts, _I64)),
                                 np.array(items, _I64))
        # In the message's order.
        for e in entries:
            out[e.name] = out.pop(e.name)

    def _ids(self, index: np.ndarray) -> list[str]:
        """The request ids numbered `index` in the results' id column."""
        if self._id_offsets is None:
            self._id_offsets = _offsets(
                self.columns.request_id_lengths.astype(_I64))
        data = bytes(self.columns.request_ids)
        offsets = self._id_offsets
        return [data[offsets[i]:offsets[i + 1]].decode()
                for i in index.tolist()]

    def _general(self, plan: _ResultPlan, run: _Run, lo: int, hi: int,
                 earlier: int, ok: np.ndarray | None, every: bool,
                 spread: Callable, out: dict[str, Any]) -> None:
        """A batch's fields by cursors, one per accepted operation (from
        the run's starts, or, for a kind of fixed size, counted from the
        run's: `earlier` accepted operations of the run come before; `ok`:
        which of the batch's operations were accepted, None for all)."""
        columns = self.columns
        values = columns.values
        n = hi - lo
        if run.value_ats is not None:
            span = slice(lo - run.start, hi - run.start)
            starts = [[a for a in ats[span] if a >= 0]
                      for ats in (run.value_ats, run.hash_ats, run.id_ats)]
            value_at, hash_at, id_at = (np.array(a, _I64) for a in starts)
        else:
            index = np.arange(earlier, earlier + (
                n if ok is None else int(np.count_nonzero(ok))),
                dtype=_I64)
            value_at = run.value_at + index * plan.values
            hash_at = run.hash_at + index * plan.hashes
            id_at = run.id_at + index * plan.ids

        def offsets_of(counts: np.ndarray) -> np.ndarray:
            if ok is None:
                return _offsets(counts)
            full = np.zeros(n, _I64)
            full[ok] = counts
            return _offsets(full)

        for e in plan.entries:
            if e.place == VALUE:
                out[e.name] = spread(e.name, values[value_at], e.is_bool)
                value_at += 1
            elif e.place == HASH:
                out[e.name] = spread(e.name, columns.hashes[hash_at], False)
                hash_at += 1
            elif e.place == ID:
                ids = self._ids(id_at)
                if not every:
                    it = iter(ids)
                    ids = [next(it) if a else plan.defaults[e.name]
                           for a in ok.tolist()]
                out[e.name] = ids
                id_at += 1
            else:
                counts = values[value_at]
                value_at += 1
                if e.place == VALUES:
                    out[e.name] = Lists(offsets_of(counts),
                                        values[_ranges(value_at, counts)])
                    value_at += counts
                elif e.place == HASHES:
                    out[e.name] = Lists(offsets_of(counts), columns.hashes[
                        _ranges(hash_at, counts)])
                    hash_at += counts
                else:
                    element, make = plan.elements[e.name]
                    each = {place: sum(1 for f in element
                                       if f.place == place)
                            for place in (VALUE, HASH, ID)}
                    index = _ranges(np.zeros(len(counts), _I64), counts)
                    bases = {VALUE: np.repeat(value_at, counts),
                             HASH: np.repeat(hash_at, counts),
                             ID: np.repeat(id_at, counts)}
                    seen = {VALUE: 0, HASH: 0, ID: 0}
                    fields: dict[str, Any] = {}
                    for f in element:
                        at = (bases[f.place] + index * each[f.place]
                              + seen[f.place])
                        seen[f.place] += 1
                        if f.place == VALUE:
                            column = values[at]
                            fields[f.name] = (column != 0 if f.is_bool
                                              else column)
                        elif f.place == HASH:
                            fields[f.name] = columns.hashes[at]
                        else:
                            fields[f.name] = self._ids(at)
                    out[e.name] = RecordLists(offsets_of(counts), fields,
                                              make)
                    value_at += counts * each[VALUE]
                    hash_at += counts * each[HASH]
                    id_at += counts * each[ID]


def _offsets(sizes: np.ndarray) -> np.ndarray:
    out = np.zeros(len(sizes) + 1, _I64)
    np.cumsum(sizes, out=out[1:])
    return out


def _tables() -> tuple[np.ndarray, ...]:
    size = max(KINDS.values()) + 1
    values = np.zeros(size, _I64)
    late = np.zeros(size, _I64)
    hashes = np.zeros(size, _I64)
    ids = np.zeros(size, _I64)
    for kind, plan in _RESULT_PLANS.items():
        values[kind] = plan.values
        late[kind] = len(plan.late)
        hashes[kind] = max(plan.hashes, 0)
        ids[kind] = max(plan.ids, 0)
    return values, late, hashes, ids


def _result_plans() -> dict[int, _ResultPlan]:
    return {number: _ResultPlan(number, RESULT_TYPES[number], DATACLASSES)
            for number in KINDS.values()}


_RESULT_PLANS = _result_plans()
_VALUES, _LATE, _HASHES, _IDS = _tables()
