"""Sluice's exceptions: one small hierarchy carrying gRPC status codes.

Every error the library raises is a :class:`SluiceError`, whose ``code`` is
a :class:`grpc.StatusCode` and ``message`` the server's (or the client's)
explanation. Catch the subclass of the code you care about::

    try:
        client.allow("api", "user-1")
    except sluice.InvalidArgument as e:   # a malformed request
        ...
    except sluice.Unavailable:            # the server could not be reached
        ...

Errors found by the client before anything is sent (wants of -1, say) carry
the code the server would have answered (``INVALID_ARGUMENT``). A rejection
over a limit is not an error on the wire; :meth:`sluice.Client.allow`
returns it as a status, and :meth:`sluice.Client.reserve_copies` raises
:class:`OverLimit` (a :class:`ResourceExhausted`) because a ``with`` block
cannot run without its copies.
"""

from __future__ import annotations

from typing import Dict, Optional, Type

import grpc

__all__ = [
    "SluiceError",
    "Cancelled",
    "InvalidArgument",
    "DeadlineExceeded",
    "NotFound",
    "AlreadyExists",
    "PermissionDenied",
    "ResourceExhausted",
    "FailedPrecondition",
    "Aborted",
    "OutOfRange",
    "Unimplemented",
    "Internal",
    "Unavailable",
    "Unauthenticated",
    "Closed",
    "SessionLost",
    "OverLimit",
    "from_rpc_error",
]


class SluiceError(Exception):
    """An error of Sluice's client: ``code`` (a :class:`grpc.StatusCode`)
    and ``message``. ``code_name`` is the code's name ("INVALID_ARGUMENT")."""

    default_code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(self, message: str, code: Optional[grpc.StatusCode] = None) -> None:
        super().__init__(message)
        self.message = message
        self.code: grpc.StatusCode = code if code is not None else self.default_code

    @property
    def code_name(self) -> str:
        """The gRPC code's name, as in ``INVALID_ARGUMENT``."""
        return self.code.name

    def __str__(self) -> str:
        return f"{self.code.name}: {self.message}"


class Cancelled(SluiceError):
    """The call was cancelled (``CANCELLED``)."""

    default_code = grpc.StatusCode.CANCELLED


class InvalidArgument(SluiceError):
    """A malformed request: an empty id, wants that are negative or not
    finite, a bad name (``INVALID_ARGUMENT``)."""

    default_code = grpc.StatusCode.INVALID_ARGUMENT


class DeadlineExceeded(SluiceError):
    """No answer, or no permit, within the timeout (``DEADLINE_EXCEEDED``)."""

    default_code = grpc.StatusCode.DEADLINE_EXCEEDED


class NotFound(SluiceError):
    """An unknown resource, session or transfer (``NOT_FOUND``)."""

    default_code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(SluiceError):
    """``ALREADY_EXISTS``."""

    default_code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDenied(SluiceError):
    """``PERMISSION_DENIED``."""

    default_code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhausted(SluiceError):
    """The server refused for lack of room: too many sessions, or (as
    :class:`OverLimit`) too few copies free (``RESOURCE_EXHAUSTED``)."""

    default_code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPrecondition(SluiceError):
    """The request does not fit the state: the wrong kind of resource,
    releasing more than is held, a closed client (``FAILED_PRECONDITION``)."""

    default_code = grpc.StatusCode.FAILED_PRECONDITION


class Aborted(SluiceError):
    """``ABORTED``."""

    default_code = grpc.StatusCode.ABORTED


class OutOfRange(SluiceError):
    """``OUT_OF_RANGE``."""

    default_code = grpc.StatusCode.OUT_OF_RANGE


class Unimplemented(SluiceError):
    """The server does not offer the call (``UNIMPLEMENTED``)."""

    default_code = grpc.StatusCode.UNIMPLEMENTED


class Internal(SluiceError):
    """``INTERNAL``."""

    default_code = grpc.StatusCode.INTERNAL


class Unavailable(SluiceError):
    """The server could not be reached, or could not decide
    (``UNAVAILABLE``)."""

    default_code = grpc.StatusCode.UNAVAILABLE


class Unauthenticated(SluiceError):
    """``UNAUTHENTICATED``."""

    default_code = grpc.StatusCode.UNAUTHENTICATED


class Closed(FailedPrecondition):
    """The client (or the resource handle, or the hold) was closed."""


class SessionLost(Aborted):
    """The session holding a hold's copies ended without the client
    closing it (its keep-alive stream broke for good, or its ttl passed):
    the server has released those copies."""


class OverLimit(ResourceExhausted):
    """Fewer copies than the minimum asked were free under the domain,
    group and global limits, until the maximum wait passed. Nothing is held.

    ``reservation`` is the context of the last answer
    (:class:`sluice.Reservation`); ``attempts`` how many reserves were sent
    and ``waited`` how long it took, in seconds."""

    def __init__(self, message: str, reservation: object = None, attempts: int = 0, waited: float = 0.0) -> None:
        super().__init__(message)
        self.reservation = reservation
        self.attempts = attempts
        self.waited = waited


_BY_CODE: Dict[grpc.StatusCode, Type[SluiceError]] = {
    cls.default_code: cls
    for cls in (
        Cancelled,
        InvalidArgument,
        DeadlineExceeded,
        NotFound,
        AlreadyExists,
        PermissionDenied,
        ResourceExhausted,
        FailedPrecondition,
        Aborted,
        OutOfRange,
        Unimplemented,
        Internal,
        Unavailable,
        Unauthenticated,
    )
}


def error_for(code: grpc.StatusCode, message: str) -> SluiceError:
    """Returns the :class:`SluiceError` subclass instance for ``code``."""
    return _BY_CODE.get(code, SluiceError)(message, code)


def from_rpc_error(err: grpc.RpcError, what: str = "") -> SluiceError:
    """Converts a failed gRPC call into the :class:`SluiceError` of its code;
    ``what`` (the call, say "Allow") prefixes the server's message."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN  # type: ignore[attr-defined]
    details = err.details() if hasattr(err, "details") else str(err)  # type: ignore[attr-defined]
    if code is None:
        code = grpc.StatusCode.UNKNOWN
    msg = details or code.name
    if what:
        msg = f"{what}: {msg}"
    e = error_for(code, msg)
    e.__cause__ = err
    return e
