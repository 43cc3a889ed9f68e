"""The exceptions the package raises, one class per gRPC status code it meets.

Every exception is a :class:`Error` carrying the daemon's status code
(``.code``, a :class:`grpc.StatusCode`) and message (``.message``). An RPC
refused as a whole raises; an operation refused inside a step does not (its
result carries a non-zero ``.code``; ``result.check()`` raises the same
classes).

Losing the session is :class:`LeaseLost` (the daemon no longer knows the
session: it expired, or an operator evicted it) or its subclass
:class:`EpochChanged` (the daemon restarted). Both are :class:`NotFound`, so
``except statecache.NotFound`` also catches them; a scheduler catches
``LeaseLost`` to re-attach and re-admit.
"""

from __future__ import annotations

import grpc

__all__ = [
    "Error",
    "InvalidArgument",
    "NotFound",
    "AlreadyExists",
    "ResourceExhausted",
    "FailedPrecondition",
    "Aborted",
    "DeadlineExceeded",
    "Unavailable",
    "Internal",
    "LeaseLost",
    "EpochChanged",
]


class Error(Exception):
    """A call the daemon refused, or that could not reach it.

    Attributes:
        code: the :class:`grpc.StatusCode`.
        message: the daemon's message (or the client's, for an error found
            on this side, e.g. an unreachable address).
    """

    code = grpc.StatusCode.UNKNOWN

    def __init__(self, message: str,
                 code: grpc.StatusCode | None = None) -> None:
        if code is None:
            super().__init__(message)
        else:
            super().__init__(message, code)
            self.code = code
        self.message = message

    def __str__(self) -> str:
        return "%s: %s" % (self.code.name, self.message)


class InvalidArgument(Error):
    """INVALID_ARGUMENT: a malformed call (too many operations, a bad
    packed column, a client_name over 256 bytes, ...)."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(Error):
    """NOT_FOUND: an unknown session (or, inside a step, request)."""

    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(Error):
    """ALREADY_EXISTS (inside a step: a request id already admitted)."""

    code = grpc.StatusCode.ALREADY_EXISTS


class ResourceExhausted(Error):
    """RESOURCE_EXHAUSTED: a message over the daemon's --max_message_bytes
    (inside a step: too few free slots to admit)."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class PermissionDenied(Error):
    """PERMISSION_DENIED: this peer may not make the call: an operator call
    from a peer --admin_allow does not name, an Attach --attach_allow
    refuses, or a session another principal attached (a session serves only
    the credentials that attached it)."""

    code = grpc.StatusCode.PERMISSION_DENIED


class FailedPrecondition(Error):
    """FAILED_PRECONDITION: the identity differs from the daemon's (the
    message names the field)."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class Aborted(Error):
    """ABORTED: another resize is in progress."""

    code = grpc.StatusCode.ABORTED


class DeadlineExceeded(Error):
    """DEADLINE_EXCEEDED: no answer within the call's timeout (or a resize
    past its deadline: the message says how far it got)."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED


class Unavailable(Error):
    """UNAVAILABLE: nothing answers at the address, or the daemon drains
    (Attach refused: attach elsewhere)."""

    code = grpc.StatusCode.UNAVAILABLE


class Internal(Error):
    """INTERNAL: the daemon's answer does not follow the protocol (e.g.
    packed results that do not match the step's operations)."""

    code = grpc.StatusCode.INTERNAL


class LeaseLost(NotFound):
    """The daemon no longer knows this session: its lease lapsed, or an
    operator evicted it. Its requests have been released. Attach again and
    re-admit."""


class EpochChanged(LeaseLost):
    """The daemon restarted (a new epoch): every session and checkpoint of
    the old daemon is gone. Attach again and re-admit.

    Attributes:
        old_epoch: the epoch the session was attached under.
        new_epoch: the daemon's epoch now.
    """

    def __init__(self, message: str, old_epoch: int = 0,
                 new_epoch: int = 0) -> None:
        super().__init__(message)
        self.args = (message, old_epoch, new_epoch)
        self.old_epoch = old_epoch
        self.new_epoch = new_epoch


_BY_CODE = {
    cls.code: cls
    for cls in (InvalidArgument, NotFound, AlreadyExists, ResourceExhausted,
                PermissionDenied, FailedPrecondition, Aborted,
                DeadlineExceeded, Unavailable, Internal)
}
# google.rpc.Code numbers (OperationResult.code, StepResponse.error_code).
_STATUS_BY_NUMBER = {status.value[0]: status for status in grpc.StatusCode}


def status_code(number: int) -> grpc.StatusCode:
    """The grpc.StatusCode of a google.rpc.Code number (UNKNOWN if none)."""
    return _STATUS_BY_NUMBER.get(number, grpc.StatusCode.UNKNOWN)


def error_for(code: grpc.StatusCode | int, message: str) -> Error:
    """The Error subclass instance for `code` (a grpc.StatusCode or its
    number)."""
    if isinstance(code, int):
        code = status_code(code)
    cls = _BY_CODE.get(code)
    if cls is None:
        return Error(message, code)
    return cls(message)


def from_rpc_error(error: grpc.RpcError, what: str) -> Error:
    """The Error for a grpc.RpcError raised by the call named `what`."""
    try:
        code, details = error.code(), error.details()
    except Exception:  # noqa: BLE001 - not a call error: report as is
        return Error("%s: %s" % (what, error))
    return error_for(code, details or "%s failed" % what)
