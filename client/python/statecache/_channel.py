"""The step channel from Python: Steps through shared memory with a daemon
on the same host, instead of gRPC (proto/step_channel.h is the contract,
followed here byte for byte).

After Attach, ``OpenStepChannel`` names a POSIX shared-memory object the
daemon made for the session; :class:`StepChannel` maps it
(``/dev/shm/<name>``) and runs one request at a time through it: the
request's columns written into the request area, ``request_seq`` bumped and
the daemon woken, then the reply awaited on ``reply_seq`` (a short spin,
then FUTEX_WAIT with the heartbeat period as timeout, so a daemon that died
is noticed), and read from the reply area as numpy arrays.

The reply is copied out of the mapping once (one memcpy of the bytes the
reply uses) and the result arrays are views of that copy: a pass's results
stay valid after the next step, at the cost of one copy of a few
kilobytes.

Memory order: the daemon's side uses sequentially consistent atomics;
Python stores and loads words through memoryviews, plain aligned accesses.
On x86-64 (TSO) stores are seen in program order, so the request's bytes
are visible before ``request_seq`` is, and the reply's before
``reply_seq``. The one order TSO does not keep, a store before a later
load, is why the client always calls FUTEX_WAKE after bumping
``request_seq`` instead of reading ``daemon_waiting`` first. Elsewhere
(aarch64) the client puts a full barrier (a FUTEX_WAKE on a private word:
the kernel's futex_wake runs smp_mb) between writing a request and
publishing it, and between seeing a reply and reading it.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import platform
import struct
import time
from typing import Any

import numpy as np

from ._columns import OperationColumns, ResultColumns
from ._errors import (DeadlineExceeded, Error, Internal, Unavailable,
                      error_for)

__all__ = ["StepChannel", "ChannelRefusal", "supported", "VERSION"]

MAGIC = 0x3143504554534353  # "SCSTEPC1"
VERSION = 1
CONTROL_BYTES = 256
HEADER_BYTES = 64

# Commands (RequestHeader.command).
STEP, PING, CONTINUE, CLOSE = 1, 2, 3, 4

# The control block's 32-bit words, by index (byte offset / 4).
_HEARTBEAT_MS = 56 // 4
_CLOSED = 60 // 4
_REQUEST_SEQ = 64 // 4
_DAEMON_WAITING = 68 // 4
_EXPECT_SEQ = 72 // 4
_REPLY_SEQ = 128 // 4
_CLIENT_WAITING = 132 // 4
# Its 64-bit words.
_HEARTBEAT = 48 // 8

_FUTEX_WAIT = 0
_FUTEX_WAKE = 1
_FUTEX_PRIVATE = 128
_SYS_FUTEX = {"x86_64": 202, "amd64": 202, "aarch64": 98,
              "arm64": 98}.get(platform.machine().lower())
# Stores become visible in program order (x86-64's TSO): no barriers.
_ORDERED = platform.machine().lower() in ("x86_64", "amd64")

# How long a client polls for a reply before it sleeps on the futex: a
# pass the daemon serves in tens of microseconds is cheaper to wait for
# awake than to be woken from.
SPIN_SECONDS = 200e-6
# Heartbeats the daemon may miss while a reply is awaited before the client
# calls it gone (generous: a loaded machine can hold a thread off the CPU
# for a while), and the least silence that counts.
MISSED_HEARTBEATS = 10
MIN_SILENCE_SECONDS = 1.0

_REQUEST_HEADER = struct.Struct("<16I")
_REPLY_HEADER = struct.Struct("<10IQQ")
# Replies past this are not believed (a corrupt header).
_MAX_REPLY_BYTES = 1 << 40

_I64 = np.dtype("<i8")
_U32 = np.dtype("<u4")


def supported() -> str | None:
    """None when this machine can run a step channel; else why not."""
    if _SYS_FUTEX is None:
        return ("the step channel's futex calls are not known on %s"
                % platform.machine())
    if os.name != "posix" or not os.path.isdir("/dev/shm"):
        return "no /dev/shm to map the step channel from"
    return None


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


_syscall: Any = None
if _SYS_FUTEX is not None:
    _syscall = ctypes.CDLL(None, use_errno=True).syscall
    _syscall.restype = ctypes.c_long
    _syscall.argtypes = (ctypes.c_long, ctypes.c_void_p, ctypes.c_int,
                         ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p,
                         ctypes.c_uint)
_FENCE_WORD = ctypes.c_uint32(0)


def _fence() -> None:
    """A full memory barrier (see the module's docstring)."""
    _syscall(_SYS_FUTEX, ctypes.addressof(_FENCE_WORD),
             _FUTEX_WAKE | _FUTEX_PRIVATE, 1, None, None, 0)


def _align8(n: int) -> int:
    return (n + 7) & ~7


class ChannelRefusal(Exception):
    """The daemon refused a whole Step over the channel (what Step would
    have returned over gRPC): `error` the exception for its code, `epoch`
    the daemon's."""

    def __init__(self, error: Error, epoch: int) -> None:
        super().__init__(str(error))
        self.error = error
        self.epoch = epoch


class StepChannel:
    """One session's step channel, mapped (from :meth:`open`).

    :meth:`step` runs a pass of :class:`OperationColumns` and returns its
    :class:`ResultColumns`, or None when the pass was not sent (the
    channel is closed, or the pass does not fit the request area: send it
    over gRPC). Not thread-safe: one request at a time (the Session holds a
    lock around it).

    Attributes:
        name: the shared-memory object's name.
        request_bytes, reply_bytes: the areas' capacities.
        heartbeat: the daemon's heartbeat period, in seconds.
        dead: why the channel can no longer be used ("" while it can).
    """

    def __init__(self, name: str, path: str, object_bytes: int) -> None:
        """Maps `path` (the object `name`, `object_bytes` long) and checks
        its control block. Raises OSError when it cannot be mapped and
        ValueError when it is no step channel this client knows."""
        self.name = name
        self.dead = ""
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        try:
            size = os.fstat(fd).st_size
            if object_bytes < CONTROL_BYTES or size < object_bytes:
                raise ValueError("%s: %d bytes, the daemon said %d"
                                 % (path, size, object_bytes))
            self._mmap = mmap.mmap(fd, object_bytes, mmap.MAP_SHARED,
                                   mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        self._views: list[memoryview] = []
        try:
            self._check(object_bytes)
        except BaseException:
            self._unmap()
            raise

    def _check(self, object_bytes: int) -> None:
        m = self._mmap
        (magic, version, control, request_at, request_bytes, reply_at,
         reply_bytes) = struct.unpack_from("<QIIQQQQ", m, 0)
        heartbeat_ms = struct.unpack_from("<I", m, 56)[0]
        if magic != MAGIC or version != VERSION or control != CONTROL_BYTES:
            raise ValueError("%s is not a version %d step channel (magic "
                             "%#x, version %d)" % (self.name, VERSION, magic,
                                                   version))
        if (request_at != CONTROL_BYTES or request_bytes < HEADER_BYTES
                or reply_bytes < HEADER_BYTES or request_bytes % 8
                or reply_bytes % 8 or reply_at != request_at + request_bytes
                or reply_at + reply_bytes != object_bytes
                or heartbeat_ms == 0):
            raise ValueError("%s: a control block this client cannot use "
                             "(areas %d+%d at %d, %d; heartbeat %d ms; %d "
                             "bytes)" % (self.name, request_bytes,
                                         reply_bytes, request_at, reply_at,
                                         heartbeat_ms, object_bytes))
        self.request_bytes = request_bytes
        self.reply_bytes = reply_bytes
        self._request_at = request_at
        self._reply_at = reply_at
        self.heartbeat = heartbeat_ms / 1000.0
        self._silence = max(MIN_SILENCE_SECONDS,
                            self.heartbeat * MISSED_HEARTBEATS)
        control = memoryview(m)[:CONTROL_BYTES]
        self._words = control.cast("I")
        self._words64 = control.cast("Q")
        self._request = memoryview(m)[request_at:request_at + request_bytes]
        self._views = [control, self._words, self._words64, self._request]
        # The futex words' addresses (the mapping's, pinned while the
        # ctypes view lives).
        self._anchor = ctypes.c_char.from_buffer(m)
        base = ctypes.addressof(self._anchor)
        self._request_seq_at = base + _REQUEST_SEQ * 4
        self._reply_seq_at = base + _REPLY_SEQ * 4
        self._timeout = _Timespec(int(self.heartbeat),
                                  int(self.heartbeat % 1 * 1e9))

    @classmethod
    def open(cls, stub: Any, pb: Any, session_id: str,
             timeout: float) -> StepChannel:
        """OpenStepChannel for the session, then maps it and makes one
        bare round trip (the daemon unlinks the object's name at the first
        request, and drops a channel whose client never came).

        Raises: grpc.RpcError from the RPC (the daemon refused: TCP, no
        channels, ...); OSError / ValueError when the object cannot be
        mapped or is no step channel this client knows; Unavailable when
        the first round trip gets no answer."""
        response = stub.OpenStepChannel(
            pb.OpenStepChannelRequest(session_id=session_id),
            timeout=timeout)
        if response.version != VERSION:
            raise ValueError("the daemon's step channel is version %d; this "
                             "client speaks %d" % (response.version, VERSION))
        name = response.shm_name
        path = os.path.join("/dev/shm", name.lstrip("/"))
        channel = cls(name, path, response.object_bytes)
        try:
            # The first round trip: the daemon unlinks the object's name
            # once it sees it, and a channel that cannot answer is found now.
            channel.ping(timeout)
        except BaseException:
            channel.close()
            raise
        return channel

    # ---- state

    @property
    def closed(self) -> bool:
        """True once the channel is done: closed by the daemon (the
        session ended, the daemon stops), by :meth:`close`, or found
        dead."""
        return bool(self.dead) or self._words[_CLOSED] != 0

    def _die(self, why: str) -> None:
        if not self.dead:
            self.dead = why

    # ---- requests

    def fits(self, columns: OperationColumns) -> bool:
        """Whether the pass's columns fit the request area."""
        return self._layout(columns)[-1] <= self.request_bytes

    @staticmethod
    def _layout(columns: OperationColumns) -> tuple[int, ...]:
        """The offsets of the request's columns from the area's start
        (args, hashes, kinds, request_id_lengths, request_ids) and its
        end."""
        args = HEADER_BYTES
        hashes = _align8(args + 8 * len(columns.args))
        kinds = _align8(hashes + 8 * len(columns.hashes))
        lengths = _align8(kinds + 4 * len(columns.kinds))
        ids = _align8(lengths + 4 * len(columns.request_id_lengths))
        return args, hashes, kinds, lengths, ids, ids + len(
            columns.request_ids)

    def step(self, columns: OperationColumns,
             timeout: float) -> ResultColumns | None:
        """Runs the pass `columns` (checked by the caller:
        OperationColumns.check) and returns its results, or None when it
        was not run: the channel is closed (also when the daemon closed it
        while the request waited: the daemon runs no request after it
        closes), or the pass does not fit the request area.

        Raises:
            ChannelRefusal: the daemon refused the whole Step.
            Unavailable: the daemon stopped answering (its heartbeat stood
                still while the reply was awaited): the pass may or may
                not have run, as when a gRPC call fails UNAVAILABLE. The
                channel is dead.
            DeadlineExceeded: no reply within `timeout` seconds while the
                daemon's heartbeat went on (the channel is dead).
            Internal: a reply that does not follow the layout.
        """
        if self.closed:
            return None
        at = self._layout(columns)
        if at[-1] > self.request_bytes:
            return None
        request = self._request
        _REQUEST_HEADER.pack_into(
            request, 0, STEP, len(columns.kinds),
            len(columns.request_id_lengths), len(columns.request_ids),
            len(columns.args), len(columns.hashes), *(0,) * 10)
        for start, column in zip(at, (columns.args, columns.hashes,
                                      columns.kinds,
                                      columns.request_id_lengths)):
            if len(column):
                data = memoryview(np.ascontiguousarray(column)).cast("B")
                request[start:start + len(data)] = data
        if len(columns.request_ids):
            ids = at[4]
            request[ids:ids + len(columns.request_ids)] = columns.request_ids
        reply = self._round_trip(timeout)
        if reply is None:
            return None
        return self._parse(reply)

    def announce(self) -> None:
        """Tells the daemon a pass is being built (expect_seq): its thread,
        woken now, polls for that pass instead of sleeping, so the pass
        does not wait on a wake-up when it is sent. A hint; a closed
        channel ignores it."""
        if self.closed:
            return
        words = self._words
        words[_EXPECT_SEQ] = (words[_REQUEST_SEQ] + 1) & 0xFFFFFFFF
        # Awake (still polling after the last reply, which announced this
        # pass already): nothing to wake. A stale reading only costs the
        # wake-up the publish makes anyway.
        if words[_DAEMON_WAITING]:
            _syscall(_SYS_FUTEX, self._request_seq_at, _FUTEX_WAKE,
                     0x7FFFFFFF, None, None, 0)

    def ping(self, timeout: float = 5.0) -> None:
        """A bare round trip (kPing): the daemon answers an empty reply.
        Raises as :meth:`step`; ValueError when the channel is closed."""
        if self.closed:
            raise ValueError("the step channel is closed (%s)"
                             % (self.dead or "by the daemon"))
        _REQUEST_HEADER.pack_into(self._request, 0, PING, *(0,) * 15)
        if self._round_trip(timeout) is None:
            raise ValueError("the daemon closed the step channel")

    def close(self) -> None:
        """Tells the daemon the channel is done (kClose, unless it is
        closed already) and unmaps it. Idempotent."""
        if getattr(self, "_mmap", None) is None:
            return
        try:
            if not self.closed:
                _REQUEST_HEADER.pack_into(self._request, 0, CLOSE,
                                          *(0,) * 15)
                self._publish()
        finally:
            self._die("closed by the client")
            self._unmap()

    def _unmap(self) -> None:
        self._anchor = None
        for view in self._views:
            view.release()
        self._views = []
        m, self._mmap = self._mmap, None
        m.close()

    def _publish(self) -> int:
        """Publishes the request written in the area: bumps request_seq and
        wakes the daemon. Returns the new sequence number."""
        words = self._words
        seq = (words[_REQUEST_SEQ] + 1) & 0xFFFFFFFF
        if not _ORDERED:
            _fence()
        words[_REQUEST_SEQ] = seq
        _syscall(_SYS_FUTEX, self._request_seq_at, _FUTEX_WAKE, 0x7FFFFFFF,
                 None, None, 0)
        return seq

    def _round_trip(self, timeout: float) -> bytes | None:
        """Publishes the request in the area and returns the whole reply
        (its parts fetched with kContinue), or None when the daemon closed
        the channel before it ran the request."""
        parts: list[bytes] = []
        total = got = 0
        while True:
            seq = self._publish()
            if not self._wait(seq, timeout):
                if not parts:
                    return None
                self._die("closed in the middle of a reply")
                raise Unavailable("the daemon closed the step channel in "
                                  "the middle of a reply")
            if not _ORDERED:
                _fence()
            start = self._reply_at
            if not parts:
                total = _REPLY_HEADER.unpack_from(self._mmap, start)[10]
                if not HEADER_BYTES <= total <= _MAX_REPLY_BYTES:
                    self._die("a reply of a bad length")
                    raise Internal("step channel: a reply of %d bytes"
                                   % total)
            part = min(total - got, self.reply_bytes)
            parts.append(self._mmap[start:start + part])
            got += part
            if got == total:
                # Keep the daemon's thread polling for the next pass (one
                # expect window), which a scheduler builds right away.
                self._words[_EXPECT_SEQ] = (seq + 1) & 0xFFFFFFFF
                return parts[0] if len(parts) == 1 else b"".join(parts)
            _REQUEST_HEADER.pack_into(self._request, 0, CONTINUE,
                                      *(0,) * 15)

    def _wait(self, seq: int, timeout: float) -> bool:
        """Waits for reply_seq to reach `seq`: True when it did, False when
        the daemon closed the channel first."""
        words = self._words
        if words[_REPLY_SEQ] == seq:
            return True
        clock = time.perf_counter
        now = clock()
        spin_until = now + SPIN_SECONDS
        while now < spin_until:
            for _ in range(16):
                if words[_REPLY_SEQ] == seq:
                    return True
            now = clock()
        deadline = now + timeout
        beat = self._words64[_HEARTBEAT]
        beat_seen = now
        while True:
            if words[_REPLY_SEQ] == seq:
                return True
            if words[_CLOSED]:
                # The daemon publishes a reply before it can close.
                return words[_REPLY_SEQ] == seq
            now = clock()
            heartbeat = self._words64[_HEARTBEAT]
            if heartbeat != beat:
                beat, beat_seen = heartbeat, now
            elif now - beat_seen > self._silence:
                self._die("the daemon's heartbeat stopped")
                raise Unavailable(
                    "the daemon stopped answering its step channel (no "
                    "heartbeat for %.1f s); the pass may or may not have "
                    "run" % (now - beat_seen))
            if now > deadline:
                self._die("a reply overdue")
                raise DeadlineExceeded(
                    "no reply on the step channel within %g s" % timeout)
            words[_CLIENT_WAITING] = 1
            at = words[_REPLY_SEQ]
            if at != seq:
                _syscall(_SYS_FUTEX, self._reply_seq_at, _FUTEX_WAIT, at,
                         ctypes.byref(self._timeout), None, 0)
            words[_CLIENT_WAITING] = 0

    def _parse(self, reply: bytes) -> ResultColumns:
        """A whole reply as ResultColumns, its arrays views of `reply`.
        Raises ChannelRefusal for a refused Step, Internal for a reply that
        does not follow the layout."""
        (status, status_bytes, codes, values, late_values, hashes, lengths,
         ids, messages, message_bytes, total, epoch) = \
            _REPLY_HEADER.unpack_from(reply, 0)
        if total != len(reply):
            raise Internal("step channel: a reply of the wrong length")
        if status:
            end = HEADER_BYTES + status_bytes
            if end > total:
                raise Internal("step channel: a refusal's message overruns "
                               "the reply")
            message = reply[HEADER_BYTES:end].decode(errors="replace")
            raise ChannelRefusal(error_for(status, message), epoch)
        at = HEADER_BYTES
        out = []
        for count, dtype in ((values, _I64), (late_values, _I64),
                             (hashes, _I64), (codes, _U32), (lengths, _U32),
                             (messages, _U32)):
            at = _align8(at)
            end = at + count * dtype.itemsize
            if end > total:
                raise Internal("step channel: a reply's columns overrun it")
            out.append(np.frombuffer(reply, dtype, count, at))
            at = end
        at = _align8(at)
        request_ids = reply[at:at + ids]
        at = _align8(at + ids)
        if at + message_bytes > total or len(request_ids) != ids:
            raise Internal("step channel: a reply's columns overrun it")
        values_, late_, hashes_, codes_, lengths_, message_lengths = out
        text = []
        start = at
        for n in message_lengths.tolist():
            text.append(reply[start:start + n].decode(errors="replace"))
            start += n
        if start != at + message_bytes:
            raise Internal("step channel: a reply's messages do not add up")
        return ResultColumns(codes=codes_, messages=text, values=values_,
                             late_values=late_, hashes=hashes_,
                             request_ids=request_ids,
                             request_id_lengths=lengths_, epoch=epoch)
