"""A pass's columns as a transport carries them: OperationColumns (the
operations, PackedOperations' columns) and ResultColumns (their results,
PackedResults' columns and the StepResponse's epoch).

These are what a transport takes and gives: ``Session.send_columns`` sends
an OperationColumns over gRPC (as PackedOperations' wire bytes) or over the
step channel (as fixed-width columns in shared memory) and returns a
ResultColumns either way. The columnar builder (:mod:`._columnar`) and the
per-operation builder (:class:`StepBuilder`) both fill an OperationColumns;
the columnar results and :class:`._packed.ResultDecoder` both read a
ResultColumns. The layout rule that says which column holds which field is
statecache.proto's (see :mod:`._packed`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["OperationColumns", "ResultColumns", "encode_request_ids"]

_UINT32 = np.dtype(np.uint32)
_INT64 = np.dtype(np.int64)


@dataclass(slots=True)
class OperationColumns:
    """A pass's operations as PackedOperations' columns.

    Attributes:
        kinds: uint32, one per operation: its kind (Operation's field
            number: 2 for admit, ...).
        request_ids: every request id's UTF-8, concatenated, in order.
        request_id_lengths: uint32, the byte length of each id in
            `request_ids`.
        args: int64, every operation's non-hash scalars in order (bools as
            0/1, a list's length before its elements).
        hashes: int64, every operation's hashes in order.
    """

    kinds: np.ndarray
    request_ids: bytes
    request_id_lengths: np.ndarray
    args: np.ndarray
    hashes: np.ndarray

    def __len__(self) -> int:
        """The number of operations."""
        return len(self.kinds)

    @classmethod
    def empty(cls) -> OperationColumns:
        """No operations (an empty pass: a round trip for nothing)."""
        return cls(np.zeros(0, _UINT32), b"", np.zeros(0, _UINT32),
                   np.zeros(0, _INT64), np.zeros(0, _INT64))

    def check(self) -> None:
        """Raises TypeError when a column is not what the transports write
        (a 1-D array of its dtype; `request_ids` bytes) and ValueError when
        `request_id_lengths` does not add up to `request_ids`."""
        for name, dtype in (("kinds", _UINT32),
                            ("request_id_lengths", _UINT32),
                            ("args", _INT64), ("hashes", _INT64)):
            column = getattr(self, name)
            if (not isinstance(column, np.ndarray) or column.ndim != 1
                    or column.dtype != dtype):
                raise TypeError(
                    "OperationColumns.%s: a 1-D numpy array of %s, not %r"
                    % (name, dtype, getattr(column, "dtype", type(column))))
        if not isinstance(self.request_ids, (bytes, bytearray, memoryview)):
            raise TypeError("OperationColumns.request_ids: bytes, not %s"
                            % type(self.request_ids).__name__)
        total = int(self.request_id_lengths.sum(dtype=np.int64))
        if total != len(self.request_ids):
            raise ValueError(
                "OperationColumns: request_id_lengths add up to %d bytes, "
                "request_ids holds %d" % (total, len(self.request_ids)))


@dataclass(slots=True)
class ResultColumns:
    """A pass's results as PackedResults' columns, and the epoch of the
    daemon that answered.

    Attributes:
        codes: uint32, one per operation: 0, or the refusal's code.
        messages: the refused operations' messages, in order.
        values: int64, every accepted operation's result scalars in order
            (bools as 0/1, a list's length before its elements).
        late_values: int64, the accepted operations' late fields (numbered
            100 and above), in order.
        hashes: int64, every accepted operation's result hashes in order.
        request_ids: the results' request ids' UTF-8, concatenated.
        request_id_lengths: uint32, each id's byte length.
        epoch: the daemon's epoch (StepResponse.epoch).

    Arrays may be read-only views over the transport's buffer; they stay
    valid as long as the ResultColumns does.
    """

    codes: np.ndarray
    messages: list[str]
    values: np.ndarray
    late_values: np.ndarray
    hashes: np.ndarray
    request_ids: bytes | memoryview
    request_id_lengths: np.ndarray
    epoch: int

    def __len__(self) -> int:
        """The number of operations answered."""
        return len(self.codes)


def encode_request_ids(ids: object) -> tuple[bytes, np.ndarray]:
    """Request ids as the id columns: their UTF-8 concatenated, and each
    one's byte length (uint32).

    Raises:
        TypeError: an id that is not a str.
        ValueError: an id that is not valid Unicode (a lone surrogate).
    """
    if not isinstance(ids, list):
        ids = list(ids)
    try:
        joined = "".join(ids)
    except TypeError:
        bad = next(i for i in ids if not isinstance(i, str))
        raise TypeError("a request id must be a str, not %s"
                        % type(bad).__name__) from None
    try:
        data = joined.encode()
    except UnicodeEncodeError as e:
        raise ValueError("a request id is not valid Unicode: %s" % e) \
            from None
    if len(data) == len(joined):  # ASCII: a character is a byte
        lengths = np.fromiter(map(len, ids), _UINT32, len(ids))
    else:
        lengths = np.fromiter((len(i.encode()) for i in ids), _UINT32,
                              len(ids))
    return data, lengths
