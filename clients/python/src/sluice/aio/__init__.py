"""Sluice's Python client for asyncio: the three jobs of :mod:`sluice` on
``grpc.aio``, awaitable, never blocking the event loop.

* **Leases**: ``client.resource(id, wants)`` (a :class:`Resource`, ``async
  with`` releases it); the refresh and the Watch stream run as asyncio
  tasks; ``await resource.rate_limiter().acquire()`` (:class:`RateLimiter`)
  and ``async with resource.gauge():`` (:class:`Gauge`).
* **Server-side limits**: ``await client.allow(resource, domain)`` and
  ``await client.quota_allow(namespace, bucket)``.
* **Copy-limited sessions**: ``async with client.reserve_copies(resource,
  domain, copies) as hold:`` (a :class:`Hold`); the session is kept alive
  by an asyncio task.

Example::

    import asyncio
    import sluice.aio

    async def main() -> None:
        async with sluice.aio.Client("127.0.0.1:15000") as client:
            async with client.resource("db/replica", wants=20) as replica:
                limiter = replica.rate_limiter(max_burst_seconds=0.1)
                for _ in range(10):
                    await limiter.acquire(timeout=1)
                    ...  # one query

    asyncio.run(main())

The behaviour is :class:`sluice.Client`'s — refresh plan, Doorman's 5-second
rule, redirects, failover, backoff, fallbacks, Charon's retry policy,
fail-open, error mapping — from the same code (the procedures of
``sluice._ops``), and the limiter's and gauge's arithmetic is the threaded
ones' (``sluice.ratelimit.BurstyCore``, ``GaugeCore``). Errors are
:mod:`sluice`'s (:class:`sluice.SluiceError` and its subclasses). The guide
is docs/python.md, "asyncio".
"""

from ..client import Allowance, QuotaAllowance
from ..copies import GroupHolds, Reservation
from ..leases import Lease, Mode
from .._transport import TLS
from .client import Client
from .copies import Hold, HoldCall
from .leases import Resource
from .ratelimit import Gauge, RateLimiter

__all__ = [
    "Client",
    "Resource",
    "RateLimiter",
    "Gauge",
    "Hold",
    "HoldCall",
    "Allowance",
    "QuotaAllowance",
    "Reservation",
    "GroupHolds",
    "Lease",
    "Mode",
    "TLS",
]
