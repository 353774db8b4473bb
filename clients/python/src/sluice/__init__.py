"""Sluice's Python client: leases, server-side limits and copy-limited
sessions, with the Go client's behaviour.

* **Leases** (Doorman's job): ``client.resource(id, wants)`` leases a share
  of a resource's capacity, refreshed in the background (one bulk
  ``GetCapacity`` per refresh for all resources); enforce it locally with
  ``resource.rate_limiter()`` (Guava's SmoothBursty) or ``resource.gauge()``.
* **Server-side limits** (the quota service's job): ``client.allow(resource,
  domain, tokens)`` and ``client.quota_allow(namespace, bucket)``.
* **Copy-limited sessions** (Charon's job): ``with
  client.reserve_copies(resource, domain, copies) as hold:`` holds copies in
  a session kept alive in the background, released when the block ends.

Errors are :class:`SluiceError` subclasses carrying the gRPC code. For
asyncio, ``import sluice.aio``: the same client on grpc.aio, awaitable
(:class:`sluice.aio.Client`). The guide is docs/python.md.
"""

from .client import Allowance, Client, QuotaAllowance, new_client_id
from .copies import GroupHolds, Hold, Reservation
from .errors import (
    Aborted,
    AlreadyExists,
    Cancelled,
    Closed,
    DeadlineExceeded,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    NotFound,
    OutOfRange,
    OverLimit,
    PermissionDenied,
    ResourceExhausted,
    SessionLost,
    SluiceError,
    Unauthenticated,
    Unavailable,
    Unimplemented,
)
from .leases import DEFAULT_REFRESH_INTERVAL, EXPIRY_MARGIN, MIN_REQUEST_INTERVAL, Lease, Mode, Resource
from .ratelimit import Gauge, RateLimiter
from ._transport import TLS

__version__ = "0.1.0"

__all__ = [
    "Client",
    "Resource",
    "Lease",
    "Mode",
    "RateLimiter",
    "Gauge",
    "Allowance",
    "QuotaAllowance",
    "Hold",
    "Reservation",
    "GroupHolds",
    "TLS",
    "new_client_id",
    "MIN_REQUEST_INTERVAL",
    "EXPIRY_MARGIN",
    "DEFAULT_REFRESH_INTERVAL",
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
]
