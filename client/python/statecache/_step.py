"""A pass's operations (StepBuilder) and their results (one dataclass each).

The builder appends every operation's fields to the columns of the packed
form (PackedOperations: kinds, request ids, integer arguments, hashes) by
the layout rule in statecache.proto, a few list appends per operation, and
send() writes the columns' wire bytes itself (see "encoding" below); the
results are read back from PackedResults by the same rule. Nothing here
builds a protobuf message per operation.
"""

import struct
from dataclasses import dataclass, field
from typing import List

from ._errors import Internal, error_for

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

# Operation's `kind` field numbers (the packed form's kinds).
BEGIN_PASS = 1
ADMIT = 2
RESUMABLE_HIT = 3
LOOKUP = 4
RESERVE = 5
PUBLISH = 6
CANCEL = 7
CHECKPOINT = 8
CONSUME_FORK = 9
ADOPT_FORK_SOURCE = 10
RELEASE = 11
UNINDEX = 12
CLEAR_INDEX = 13
COPY = 14
SNAPSHOT = 15


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


def _result(cls):
    return dataclass(slots=True)(cls)


@dataclass(slots=True)
class MidstepPosition:
    """A position a forward will pass (reserve's argument); a
    ``(position, hash)`` tuple or a dict with those keys does as well."""

    position: int = 0
    hash: int = 0


@dataclass(slots=True)
class SlotMove:
    """A live request's slot the pool moved (a shrink): re-point its slot
    ``index`` from ``from_slot`` to ``to_slot`` before the next forward."""

    request_id: str = ""
    index: int = 0
    from_slot: int = -1
    to_slot: int = -1


@dataclass(slots=True)
class Reservation:
    """A midstep checkpoint's destination slot."""

    slot: int = -1
    position: int = 0
    hash: int = 0


# Every result: the proto result's fields, then `code` (0 OK, else the
# refusal's google.rpc.Code number) and `message`. A refused operation's
# result has its fields at their defaults (-1 for slots: "none").


@_result
class BeginPassResult(_Result):
    moves: List[SlotMove] = field(default_factory=list)
    pins_released: int = 0
    code: int = 0
    message: str = ""


@_result
class AdmitResult(_Result):
    slots: List[int] = field(default_factory=list)
    fork_src: int = -1
    blocks_resumed: int = 0
    adopted: bool = False
    code: int = 0
    message: str = ""


@_result
class ResumableHitResult(_Result):
    blocks: int = 0
    code: int = 0
    message: str = ""


@_result
class LookupResult(_Result):
    slot: int = -1
    code: int = 0
    message: str = ""


@_result
class ReserveResult(_Result):
    reservations: List[Reservation] = field(default_factory=list)
    code: int = 0
    message: str = ""


@_result
class PublishResult(_Result):
    published: int = 0
    code: int = 0
    message: str = ""


@_result
class CancelResult(_Result):
    cancelled: int = 0
    code: int = 0
    message: str = ""


@_result
class CheckpointResult(_Result):
    state_slot: int = -1
    fork_src: int = -1
    kept: bool = False
    code: int = 0
    message: str = ""


@_result
class ConsumeForkResult(_Result):
    fork_src: int = -1
    code: int = 0
    message: str = ""


@_result
class AdoptForkSourceResult(_Result):
    state_slot: int = -1
    code: int = 0
    message: str = ""


@_result
class ReleaseResult(_Result):
    slots_released: int = 0
    code: int = 0
    message: str = ""


@_result
class UnindexResult(_Result):
    orphaned: int = 0
    code: int = 0
    message: str = ""


@_result
class ClearIndexResult(_Result):
    code: int = 0
    message: str = ""


@_result
class CopyResult(_Result):
    bytes: int = 0
    code: int = 0
    message: str = ""


@_result
class SnapshotResult(_Result):
    slot: int = -1
    kept: bool = False
    code: int = 0
    message: str = ""


# The result class of each kind, by kind number.
RESULT_TYPES = {
    BEGIN_PASS: BeginPassResult,
    ADMIT: AdmitResult,
    RESUMABLE_HIT: ResumableHitResult,
    LOOKUP: LookupResult,
    RESERVE: ReserveResult,
    PUBLISH: PublishResult,
    CANCEL: CancelResult,
    CHECKPOINT: CheckpointResult,
    CONSUME_FORK: ConsumeForkResult,
    ADOPT_FORK_SOURCE: AdoptForkSourceResult,
    RELEASE: ReleaseResult,
    UNINDEX: UnindexResult,
    CLEAR_INDEX: ClearIndexResult,
    COPY: CopyResult,
    SNAPSHOT: SnapshotResult,
}


# ------------------------------------------------------------------ decoding
#
# PackedResults' `values` column is read as one list, and each result is
# built straight from it by the kind's field order (the layout rule applied
# to the result message). The kinds a pass carries most are decoded inline
# in decode_results; the others by a reader of their own:
# reader(values, at, columns) -> (result, next at), where `columns` reads
# the request id and hash columns (only begin_pass's moves and reserve's
# reservations use them).


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


def _read_begin_pass(v, at, c):
    n = v[at]
    at += 1
    moves = []
    for _ in range(n):
        moves.append(SlotMove(c.next_id(), v[at], v[at + 1], v[at + 2]))
        at += 3
    return BeginPassResult(moves, v[at], 0, ""), at + 1


def _read_admit(v, at, _):
    end = at + 1 + v[at]
    if end + 2 >= len(v):
        raise IndexError("admit result")
    return (AdmitResult(v[at + 1:end], v[end], v[end + 1], v[end + 2] != 0,
                        0, ""), end + 3)


def _read_reserve(v, at, c):
    n = v[at]
    at += 1
    reservations = []
    for _ in range(n):
        reservations.append(Reservation(v[at], v[at + 1], c.next_hash()))
        at += 2
    return ReserveResult(reservations, 0, ""), at


def _read_checkpoint(v, at, _):
    return CheckpointResult(v[at], v[at + 1], v[at + 2] != 0, 0, ""), at + 3


def _read_snapshot(v, at, _):
    return SnapshotResult(v[at], v[at + 1] != 0, 0, ""), at + 2


def _reader_of_one(cls):
    def read(v, at, _):
        return cls(v[at], 0, ""), at + 1
    return read


def _read_clear_index(v, at, _):
    return ClearIndexResult(0, ""), at


_READERS = {
    BEGIN_PASS: _read_begin_pass,
    ADMIT: _read_admit,
    RESUMABLE_HIT: _reader_of_one(ResumableHitResult),
    LOOKUP: _reader_of_one(LookupResult),
    RESERVE: _read_reserve,
    PUBLISH: _reader_of_one(PublishResult),
    CANCEL: _reader_of_one(CancelResult),
    CHECKPOINT: _read_checkpoint,
    CONSUME_FORK: _reader_of_one(ConsumeForkResult),
    ADOPT_FORK_SOURCE: _reader_of_one(AdoptForkSourceResult),
    RELEASE: _reader_of_one(ReleaseResult),
    UNINDEX: _reader_of_one(UnindexResult),
    CLEAR_INDEX: _read_clear_index,
    COPY: _reader_of_one(CopyResult),
    SNAPSHOT: _read_snapshot,
}


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
    readers = _READERS
    out = []
    append = out.append
    at = 0
    messages = packed.messages if any(codes) else ()
    refused = 0
    try:
        for kind, code in zip(kinds, codes):
            if code:
                append(RESULT_TYPES[kind](code=code,
                                          message=messages[refused]))
                refused += 1
            # The kinds of a steady pass, inline (a call less each).
            elif kind == CHECKPOINT:
                append(CheckpointResult(v[at], v[at + 1], v[at + 2] != 0,
                                        0, ""))
                at += 3
            elif kind == CONSUME_FORK:
                append(ConsumeForkResult(v[at], 0, ""))
                at += 1
            elif kind == RELEASE:
                append(ReleaseResult(v[at], 0, ""))
                at += 1
            elif kind == RESUMABLE_HIT:
                append(ResumableHitResult(v[at], 0, ""))
                at += 1
            else:
                result, at = readers[kind](v, at, columns)
                append(result)
        if refused != len(messages):
            raise IndexError("more messages than refusals")
    except IndexError as e:
        raise Internal("packed results too short for the operations (%s)"
                       % e) from None
    if at != len(v) or not columns.used_up():
        raise Internal("packed results longer than the operations use")
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


def _position(p):
    if isinstance(p, tuple):
        position, h = p
        return position, h
    if isinstance(p, dict):
        unknown = set(p) - {"position", "hash"}
        if unknown:
            raise TypeError("reserve(): position has unknown field %r"
                            % sorted(unknown)[0])
        return p.get("position", 0), p.get("hash", 0)
    return p.position, p.hash


class StepBuilder:
    """The ordered operations of one pass, sent as one Step.

    Get one from ``session.step()`` (unary ``Step``) or ``stream.step()``
    (over ``StepStream``). Each method appends one operation, whose keyword
    arguments are the proto message's fields, and returns the builder, so
    calls chain; :meth:`send` runs them and returns one result per
    operation, in order::

        results = (session.step()
                   .begin_pass()
                   .admit("r1", width=1, num_tokens=300, anchor_pos=300,
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

    # ---- the operations, in Operation's field-number order. Each writes
    # its message's fields in field-number order: request ids to the id
    # column, `hash` fields and hash lists to `hashes`, every other scalar
    # (bools as 0/1, a list's length first) to `args`.

    def begin_pass(self):
        """Ticks the session's pin clock (BeginPassResult: moves,
        pins_released)."""
        self._kinds.append(BEGIN_PASS)
        return self

    def admit(self, request_id, width, num_tokens, anchor_pos=0,
              block_hashes=(), kv_hit_blocks=0):
        """Admits a request with `width` slots, resuming up to
        `kv_hit_blocks` blocks of `block_hashes` from a checkpoint
        (AdmitResult: slots, fork_src, blocks_resumed, adopted)."""
        n = len(block_hashes)
        self._kinds.append(ADMIT)
        self._ids.append(request_id)
        args = self._args
        args += (width, num_tokens, anchor_pos, n)
        self._hashes += block_hashes
        args.append(kv_hit_blocks)
        return self

    def resumable_hit(self, num_tokens, block_hashes=(), kv_hit_blocks=0,
                      assume_checkpointed=False):
        """How many of `kv_hit_blocks` admit would resume; changes nothing
        (ResumableHitResult: blocks)."""
        n = len(block_hashes)
        self._kinds.append(RESUMABLE_HIT)
        args = self._args
        args += (num_tokens, n)
        self._hashes += block_hashes
        args += (kv_hit_blocks, 1 if assume_checkpointed else 0)
        return self

    def lookup(self, hash):  # noqa: A002 - the proto's field name
        """The slot holding the checkpoint for `hash`, or -1
        (LookupResult: slot)."""
        self._kinds.append(LOOKUP)
        self._hashes.append(hash)
        return self

    def reserve(self, request_id, positions=()):
        """Takes a destination slot for each midstep position the forward
        will pass: ``(position, hash)`` tuples, dicts with those keys, or
        MidstepPosition (ReserveResult: reservations)."""
        pairs = [_position(p) for p in positions]
        self._kinds.append(RESERVE)
        self._ids.append(request_id)
        args = self._args
        hashes = self._hashes
        args.append(len(pairs))
        for position, h in pairs:
            args.append(position)
            hashes.append(h)
        return self

    def publish(self, request_id, keep_all=False):
        """Files the reserved slots the forward wrote as checkpoints
        (PublishResult: published)."""
        self._kinds.append(PUBLISH)
        self._ids.append(request_id)
        self._args.append(1 if keep_all else 0)
        return self

    def cancel(self, request_id):
        """The forward never ran: the reservations go back
        (CancelResult: cancelled)."""
        self._kinds.append(CANCEL)
        self._ids.append(request_id)
        return self

    def checkpoint(self, request_id, boundary_blocks, hash,  # noqa: A002
                   anchor_pos=0):
        """Fork checkpoint at `boundary_blocks`, filed under `hash`
        (CheckpointResult: state_slot, fork_src, kept)."""
        self._kinds.append(CHECKPOINT)
        self._ids.append(request_id)
        self._args.append(boundary_blocks)
        self._hashes.append(hash)
        self._args.append(anchor_pos)
        return self

    def consume_fork(self, request_id):
        """The forward reading the request's fork source was issued
        (ConsumeForkResult: fork_src)."""
        self._kinds.append(CONSUME_FORK)
        self._ids.append(request_id)
        return self

    def adopt_fork_source(self, request_id):
        """The request takes its fork source over as its committed slot
        (AdoptForkSourceResult: state_slot)."""
        self._kinds.append(ADOPT_FORK_SOURCE)
        self._ids.append(request_id)
        return self

    def release(self, request_id):
        """The request finished or was preempted
        (ReleaseResult: slots_released)."""
        self._kinds.append(RELEASE)
        self._ids.append(request_id)
        return self

    def unindex(self, hashes=()):
        """These hashes' KV blocks were evicted (UnindexResult:
        orphaned)."""
        n = len(hashes)
        self._kinds.append(UNINDEX)
        self._args.append(n)
        self._hashes += hashes
        return self

    def clear_index(self):
        """Drops every checkpoint hash (ClearIndexResult)."""
        self._kinds.append(CLEAR_INDEX)
        return self

    def copy(self, request_id, from_index, to_index):
        """Copies the request's slot `from_index` onto its slot `to_index`
        with the daemon's copy engine (CopyResult: bytes)."""
        self._kinds.append(COPY)
        self._ids.append(request_id)
        self._args += (from_index, to_index)
        return self

    def snapshot(self, request_id, position, hash):  # noqa: A002
        """Copy-mode checkpoint of the committed slot at `position`, filed
        under `hash` (SnapshotResult: slot, kept)."""
        self._kinds.append(SNAPSHOT)
        self._ids.append(request_id)
        self._args.append(position)
        self._hashes.append(hash)
        return self
