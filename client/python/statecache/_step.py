"""A pass's operations (StepBuilder) and their results (one dataclass each).

Every operation and result mirrors its message in statecache.proto: a
builder method per Operation kind, whose parameters are the operation
message's fields in field-number order, and a dataclass per result message
with exactly its fields (in declaration order), then ``code`` and
``message``. A refused operation's result has its fields at their defaults
(-1 for a slot: none). client/python/tests/test_step_mirror.py checks all of
it against the proto's descriptors.

The builder appends each operation's fields to the columns of the packed
form (PackedOperations: kinds, request ids, args, hashes) by the layout rule
in statecache.proto, a few list appends per operation, and sends them as an
:class:`OperationColumns` through the session's transport (gRPC or the step
channel); :mod:`._packed` decodes the :class:`ResultColumns` that come back
into one dataclass per result. Nothing here builds a protobuf message per
operation. The columnar builder (:mod:`._columnar`) fills the same columns
many operations at a time.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import (Any, Collection, Iterable, Mapping, Sequence,
                    TypeVar, Union)

import numpy as np

from ._columns import OperationColumns, encode_request_ids
from ._errors import error_for
from ._packed import KINDS, ResultDecoder, encode_operations
from ._packed import step_request, step_request_prefix

__all__ = [
    "StepBuilder",
    "StepSender",
    "operation_columns",
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
    # A StepRequest's bytes from a builder's encode(), for tools that send
    # them themselves (bench/python_step_bench.py, bench/e2e/replay.py).
    "step_request",
    "step_request_prefix",
]

# Operation's `kind` field numbers: the packed form's kinds.
BEGIN_PASS = KINDS["begin_pass"]
ADMIT = KINDS["admit"]
RESUMABLE_HIT = KINDS["resumable_hit"]
LOOKUP = KINDS["lookup"]
RESERVE = KINDS["reserve"]
PUBLISH = KINDS["publish"]
CANCEL = KINDS["cancel"]
CHECKPOINT = KINDS["checkpoint"]
CONSUME_FORK = KINDS["consume_fork"]
ADOPT_FORK_SOURCE = KINDS["adopt_fork_source"]
RELEASE = KINDS["release"]
UNINDEX = KINDS["unindex"]
CLEAR_INDEX = KINDS["clear_index"]
COPY = KINDS["copy"]
SNAPSHOT = KINDS["snapshot"]


# ------------------------------------------------------------------ values


@dataclass(slots=True)
class MidstepPosition:
    """A position a forward will pass (reserve's argument); a ``(position,
    hash)`` tuple or a dict with those keys does as well."""

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
    """A midstep checkpoint's slot."""

    slot: int = -1
    position: int = 0
    hash: int = 0


# ------------------------------------------------------------------ results

_R = TypeVar("_R", bound="_Result")


class _Result:
    """What every operation result has besides its own fields: ``code`` (0
    OK, else the refusal's google.rpc.Code number) and ``message``."""

    __slots__ = ()
    code: int
    message: str

    @property
    def ok(self) -> bool:
        """True when the operation applied (code 0)."""
        return self.code == 0

    def check(self: _R) -> _R:
        """Returns self if the operation applied, else raises its refusal
        as the matching :class:`statecache.Error` subclass."""
        if self.code != 0:
            raise error_for(self.code, self.message)
        return self


@dataclass(slots=True)
class BeginPassResult(_Result):
    """The result of begin_pass: the slot ``moves`` this pass made (a
    shrink in progress) and the fork-source pins it returned
    (``pins_released``); then ``code`` and ``message``."""

    moves: list[SlotMove] = field(default_factory=list)
    pins_released: int = 0
    code: int = 0
    message: str = ""


@dataclass(slots=True)
class AdmitResult(_Result):
    """The result of admit: the request's ``slots`` (0 committed, 1..
    rollback), ``fork_src``, ``blocks_resumed``, ``adopted`` and
    ``from_tier``; in an advised session (``attach(advise_placement=
    True)``) where its checkpoints go: ``branch_blocks`` (a branch point),
    ``continuation_blocks`` (the prompt's end, then every block boundary
    the decode reaches, each replacing the last) and ``ladder_blocks``
    (guesses every that many blocks of the prefill); then ``code`` and
    ``message``.

    The first forward reads ``fork_src`` when it is set, else slot 0 when
    ``blocks_resumed`` > 0 (``adopted``), else nothing: a cold start
    (``blocks_resumed`` == 0) gets slots holding whatever their last holder
    left (another request's state), so its forward starts from the zero
    state at token 0 and never reads them."""

    slots: list[int] = field(default_factory=list)
    fork_src: int = -1
    blocks_resumed: int = 0
    adopted: bool = False
    from_tier: bool = False
    branch_blocks: int = 0
    continuation_blocks: int = 0
    ladder_blocks: int = 0
    code: int = 0
    message: str = ""


@dataclass(slots=True)
class ResumableHitResult(_Result):
    """The result of resumable_hit: the ``blocks`` admit would resume from
    the device, ``tier_blocks`` from the host tier; then ``code`` and
    ``message``."""

    blocks: int = 0
    tier_blocks: int = 0
    code: int = 0
    message: str = ""


@dataclass(slots=True)
class LookupResult(_Result):
    """The result of lookup: the checkpoint's ``slot`` (-1: none on the
    device) and whether the host tier holds it (``in_tier``); then ``code``
    and ``message``."""

    slot: int = -1
    in_tier: bool = False
    code: int = 0
    message: str = ""


@dataclass(slots=True)
class ReserveResult(_Result):
    """The result of reserve: the ``reservations`` made; then ``code`` and
    ``message``."""

    reservations: list[Reservation] = field(default_factory=list)
    code: int = 0
    message: str = ""


@dataclass(slots=True)
class PublishResult(_Result):
    """The result of publish: checkpoints ``published``; then ``code`` and
    ``message``."""

    published: int = 0
    code: int = 0
    message: str = ""


@dataclass(slots=True)
class CancelResult(_Result):
    """The result of cancel: reservations ``cancelled``; then ``code`` and
    ``message``."""

    cancelled: int = 0
    code: int = 0
    message: str = ""


@dataclass(slots=True)
class CheckpointResult(_Result):
    """The result of checkpoint: the request's new committed slot
    (``state_slot``), the slot its next forward reads (``fork_src``, -1:
    none) and whether the checkpoint was ``kept``; then ``code`` and
    ``message``."""

    state_slot: int = -1
    fork_src: int = -1
    kept: bool = False
    code: int = 0
    message: str = ""


@dataclass(slots=True)
class ConsumeForkResult(_Result):
    """The result of consume_fork: the fork source forgotten (``fork_src``,
    -1: none); then ``code`` and ``message``."""

    fork_src: int = -1
    code: int = 0
    message: str = ""


@dataclass(slots=True)
class AdoptForkSourceResult(_Result):
    """The result of adopt_fork_source: the request's committed slot now
    (``state_slot``); then ``code`` and ``message``."""

    state_slot: int = -1
    code: int = 0
    message: str = ""


@dataclass(slots=True)
class ReleaseResult(_Result):
    """The result of release: ``slots_released``; then ``code`` and
    ``message``."""

    slots_released: int = 0
    code: int = 0
    message: str = ""


@dataclass(slots=True)
class UnindexResult(_Result):
    """The result of unindex: checkpoints ``orphaned``; then ``code`` and
    ``message``."""

    orphaned: int = 0
    code: int = 0
    message: str = ""


@dataclass(slots=True)
class ClearIndexResult(_Result):
    """The result of clear_index: ``code`` and ``message`` only."""

    code: int = 0
    message: str = ""


@dataclass(slots=True)
class CopyResult(_Result):
    """The result of copy: the ``bytes`` copied; then ``code`` and
    ``message``."""

    bytes: int = 0
    code: int = 0
    message: str = ""


@dataclass(slots=True)
class SnapshotResult(_Result):
    """The result of snapshot: the checkpoint's ``slot`` (-1: dropped) and
    whether it was ``kept``; then ``code`` and ``message``."""

    slot: int = -1
    kept: bool = False
    code: int = 0
    message: str = ""


# Any operation's result.
Result = Union[BeginPassResult, AdmitResult, ResumableHitResult, LookupResult,
               ReserveResult, PublishResult, CancelResult, CheckpointResult,
               ConsumeForkResult, AdoptForkSourceResult, ReleaseResult,
               UnindexResult, ClearIndexResult, CopyResult, SnapshotResult]

_DECODER = ResultDecoder([
    SlotMove, Reservation, BeginPassResult, AdmitResult, ResumableHitResult,
    LookupResult, ReserveResult, PublishResult, CancelResult,
    CheckpointResult, ConsumeForkResult, AdoptForkSourceResult,
    ReleaseResult, UnindexResult, ClearIndexResult, CopyResult,
    SnapshotResult])

# The result class of each kind, by kind number.
RESULT_TYPES: dict[int, type] = _DECODER.result_types
# Every result dataclass and list element dataclass, by message name.
DATACLASSES: dict[str, type] = _DECODER.classes


def decode_results(kinds: Sequence[int], packed: Any) -> list[Result]:
    """The results of a packed step (a :class:`ResultColumns`, or a parsed
    PackedResults) for the operations `kinds`, one dataclass each. Raises
    Internal when `packed` does not follow the layout rule for these
    kinds."""
    return _DECODER.decode(kinds, packed)


def _int64_column(values: list[Any], what: str) -> np.ndarray:
    """A builder's list of arguments as an int64 column. TypeError for an
    element that is not an integer; `what` beyond int64: ValueError for
    args, TypeError for hashes (as :func:`encode_operations`)."""
    try:
        return np.frombuffer(array("q", values), np.int64)
    except OverflowError:
        if what == "hashes":
            raise TypeError("hashes must be integers in [-2**63, 2**63)") \
                from None
        raise ValueError("an operation argument is beyond int64") from None
    except TypeError as e:
        raise TypeError("an operation %s must be an integer: %s"
                        % ("argument" if what == "args" else "hash", e)) \
            from None


def operation_columns(kinds: list[int], ids: list[str], args: list[int],
                      hashes: list[int]) -> OperationColumns:
    """A builder's lists (kinds, str request ids, args, hashes) as an
    :class:`OperationColumns`. Raises TypeError (ValueError: an argument
    beyond int64) for an element of the wrong type."""
    data, lengths = encode_request_ids(ids)
    return OperationColumns(
        kinds=np.frombuffer(bytes(kinds), np.uint8).astype(np.uint32),
        request_ids=data, request_id_lengths=lengths,
        args=_int64_column(args, "args"),
        hashes=_int64_column(hashes, "hashes"))


class StepSender:
    """Where a :class:`StepBuilder` sends its pass: a Session or a
    StepStream, over its transport. Two halves, so that a builder whose
    arguments do not encode is left as it was, and one whose request was
    sent is empty whatever the answer."""

    def encode_step(self, kinds: list[int], ids: list[str],
                    args: list[int], hashes: list[int]) -> Any:
        """The request for a builder's lists, in the form the transport
        sends (PackedOperations' bytes for gRPC, an
        :class:`OperationColumns` for the step channel). Raises TypeError /
        ValueError for an argument of the wrong type or beyond int64."""
        raise NotImplementedError

    def send_step(self, request: Any, kinds: list[int]) -> list[Result]:
        """Runs `request` (from :meth:`encode_step`) as one Step and
        returns its results, one dataclass per operation of `kinds`."""
        raise NotImplementedError


# ------------------------------------------------------------------ builder

# reserve's positions: MidstepPosition, (position, hash) or a dict.
Position = Union[MidstepPosition, tuple[int, int], Mapping[str, int]]


def _position(p: Position) -> tuple[int, int]:
    """A midstep position as (position, hash): from a tuple, a dict of some
    of the fields (the others 0) or an object with them as attributes."""
    if isinstance(p, tuple):
        if len(p) != 2:
            raise TypeError("reserve(): an element is a tuple of 2, not %d "
                            "(position, hash)" % len(p))
        return p
    if isinstance(p, dict):
        unknown = set(p) - {"position", "hash"}
        if unknown:
            raise TypeError("reserve(): an element has unknown field %r"
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

    def __init__(self, sender: StepSender | None = None) -> None:
        """`sender` (a :class:`StepSender`: the Session or StepStream)
        runs a pass; None: a builder that only encodes."""
        self._sender = sender
        self._kinds: list[int] = []
        self._ids: list[str] = []
        self._args: list[int] = []
        self._hashes: list[int] = []

    def __len__(self) -> int:
        return len(self._kinds)

    def __repr__(self) -> str:
        return "<StepBuilder of %d operations>" % len(self._kinds)

    def clear(self) -> None:
        """Drops the operations added so far."""
        self._kinds = []
        self._ids = []
        self._args = []
        self._hashes = []

    def columns(self) -> OperationColumns:
        """The operations so far as the packed form's columns (what the
        step channel carries). Raises TypeError (ValueError: an argument
        beyond int64) for an argument of the wrong type."""
        return operation_columns(self._kinds, self._ids, self._args,
                                 self._hashes)

    def encode(self) -> bytes:
        """The operations so far as PackedOperations' serialized bytes
        (what :meth:`send` sends)."""
        return encode_operations(self._kinds, self._ids, self._args,
                                 self._hashes)

    def send(self) -> list[Result]:
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
        request = self._sender.encode_step(kinds, self._ids, self._args,
                                           self._hashes)
        self.clear()
        return self._sender.send_step(request, kinds)

    # ---- the operations, in Operation's field-number order. Each appends
    # its kind, then its message's fields in field-number order by the
    # layout rule: request ids to the id column, `hash` fields and hash
    # lists to `hashes`, every other scalar (bools as 0/1, a list's length
    # first) to `args`. A list's length is taken before anything is
    # appended, so an argument that has none leaves the builder as it was.

    def begin_pass(self) -> StepBuilder:
        """Ticks the session's pin clock (BeginPassResult: moves,
        pins_released)."""
        self._kinds.append(BEGIN_PASS)
        return self

    def admit(self, request_id: str, width: int, num_tokens: int,
              anchor_pos: int = 0, block_hashes: Collection[int] = (),
              kv_hit_blocks: int = 0) -> StepBuilder:
        """Admits a request with `width` slots, resuming up to
        `kv_hit_blocks` blocks of `block_hashes` from a checkpoint
        (AdmitResult: slots, fork_src, blocks_resumed, adopted).
        `anchor_pos` is the prompt's end rounded down to a full block (0
        when it has none): only a checkpoint there is kept as known, every
        other is a guess, spent first."""
        count = len(block_hashes)
        self._kinds.append(ADMIT)
        self._ids.append(request_id)
        args = self._args
        args += (width, num_tokens, anchor_pos, count)
        self._hashes += block_hashes
        args.append(kv_hit_blocks)
        return self

    def resumable_hit(self, num_tokens: int,
                      block_hashes: Collection[int] = (),
                      kv_hit_blocks: int = 0,
                      assume_checkpointed: bool = False) -> StepBuilder:
        """How many of `kv_hit_blocks` admit would resume; changes nothing
        (ResumableHitResult: blocks)."""
        count = len(block_hashes)
        self._kinds.append(RESUMABLE_HIT)
        args = self._args
        args += (num_tokens, count)
        self._hashes += block_hashes
        args += (kv_hit_blocks, 1 if assume_checkpointed else 0)
        return self

    def lookup(self, hash: int) -> StepBuilder:  # noqa: A002 - the proto's
        """The slot holding the checkpoint for `hash`, or -1
        (LookupResult: slot)."""
        self._kinds.append(LOOKUP)
        self._hashes.append(hash)
        return self

    def reserve(self, request_id: str,
                positions: Iterable[Position] = ()) -> StepBuilder:
        """Takes a destination slot for each midstep position the forward
        will pass: ``(position, hash)`` tuples, dicts with those keys, or
        MidstepPosition (ReserveResult: reservations). For a request
        admitted in this pass, send it in a Step after the admit's: the
        forward's start is the admit's blocks_resumed."""
        points = [_position(p) for p in positions]
        self._kinds.append(RESERVE)
        self._ids.append(request_id)
        args, hashes = self._args, self._hashes
        args.append(len(points))
        for position, hash in points:  # noqa: A001 - the proto's name
            args.append(position)
            hashes.append(hash)
        return self

    def publish(self, request_id: str, keep_all: bool = False) -> StepBuilder:
        """Files the reserved slots the forward wrote as checkpoints
        (PublishResult: published)."""
        self._kinds.append(PUBLISH)
        self._ids.append(request_id)
        self._args.append(1 if keep_all else 0)
        return self

    def cancel(self, request_id: str) -> StepBuilder:
        """The forward never ran: the reservations go back
        (CancelResult: cancelled)."""
        self._kinds.append(CANCEL)
        self._ids.append(request_id)
        return self

    def checkpoint(self, request_id: str, boundary_blocks: int,
                   hash: int, anchor_pos: int = 0  # noqa: A002
                   ) -> StepBuilder:
        """Fork checkpoint of the committed state, which must be exactly at
        `boundary_blocks` blocks, filed under `hash`, the hash of the block
        ending there (block_hashes[boundary_blocks - 1])
        (CheckpointResult: state_slot, fork_src, kept)."""
        self._kinds.append(CHECKPOINT)
        self._ids.append(request_id)
        args = self._args
        args.append(boundary_blocks)
        self._hashes.append(hash)
        args.append(anchor_pos)
        return self

    def consume_fork(self, request_id: str) -> StepBuilder:
        """The forward reading the request's fork source was issued
        (ConsumeForkResult: fork_src)."""
        self._kinds.append(CONSUME_FORK)
        self._ids.append(request_id)
        return self

    def adopt_fork_source(self, request_id: str) -> StepBuilder:
        """Before a forward whose chunk is too short to fork: the request
        takes its fork source over as its committed slot, which that
        forward reads and writes in place (AdoptForkSourceResult:
        state_slot)."""
        self._kinds.append(ADOPT_FORK_SOURCE)
        self._ids.append(request_id)
        return self

    def release(self, request_id: str) -> StepBuilder:
        """The request finished or was preempted
        (ReleaseResult: slots_released)."""
        self._kinds.append(RELEASE)
        self._ids.append(request_id)
        return self

    def unindex(self, hashes: Collection[int] = ()) -> StepBuilder:
        """These hashes' KV blocks were evicted (UnindexResult:
        orphaned)."""
        count = len(hashes)
        self._kinds.append(UNINDEX)
        self._args.append(count)
        self._hashes += hashes
        return self

    def clear_index(self) -> StepBuilder:
        """Drops every checkpoint hash (ClearIndexResult)."""
        self._kinds.append(CLEAR_INDEX)
        return self

    def copy(self, request_id: str, from_index: int,
             to_index: int) -> StepBuilder:
        """Copies the request's slot `from_index` onto its slot `to_index`
        with the daemon's copy engine (CopyResult: bytes)."""
        self._kinds.append(COPY)
        self._ids.append(request_id)
        self._args += (from_index, to_index)
        return self

    def snapshot(self, request_id: str, position: int,
                 hash: int) -> StepBuilder:  # noqa: A002
        """Copy-mode checkpoint of the committed slot at `position`, filed
        under `hash` (SnapshotResult: slot, kept)."""
        self._kinds.append(SNAPSHOT)
        self._ids.append(request_id)
        self._args.append(position)
        self._hashes.append(hash)
        return self
