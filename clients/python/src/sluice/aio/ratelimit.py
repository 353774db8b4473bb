"""The asyncio rate limiter and gauge: :class:`RateLimiter` and
:class:`Gauge`, awaitable, over the same arithmetic as the threaded ones
(``sluice.ratelimit.BurstyCore`` and ``GaugeCore``). Waiting never blocks
the event loop: a waiter sleeps on a future woken by a timer or a rate
change.

Source: guava-ratelimiter.md ("SmoothRateLimiter", "SmoothBursty",
"setRate"); doorman-design.md, "Client library" (GaugeResource).
"""

from __future__ import annotations

import asyncio
import math
import time
from types import TracebackType
from typing import Callable, Optional, Set, Type

from ..errors import DeadlineExceeded
from ..ratelimit import FREE, LATE, NEVER, BurstyCore, GaugeCore

__all__ = ["RateLimiter", "Gauge"]

Clock = Callable[[], float]


def _wake(fut: "asyncio.Future[None]") -> None:
    if not fut.done():
        fut.set_result(None)


class RateLimiter:
    """A SmoothBursty rate limiter for asyncio: :class:`sluice.RateLimiter`'s
    semantics (Guava's), with :meth:`acquire` awaitable.

    ``rate`` is in permits per second (0 admits nothing until
    :meth:`set_rate`; ``math.inf`` admits everything; negative or NaN: 0);
    ``max_burst_seconds`` how many seconds of unused permits may be stored
    (1 is Guava's default; 0 stores none). ``clock`` returns seconds on the
    event loop's monotonic scale (default :func:`time.monotonic`, which the
    default event loop's timers use too).

    Not thread-safe: use it (``set_rate`` included) on one event loop, as
    asyncio's own primitives. A :class:`sluice.aio.Resource`'s limiter has
    its rate set by the client's refresh task, on that loop.
    """

    def __init__(self, rate: float = 0.0, max_burst_seconds: float = 1.0, clock: Optional[Clock] = None) -> None:
        self._clock: Clock = clock or time.monotonic
        self._core = BurstyCore(rate, max_burst_seconds)
        self._sleepers: Set["asyncio.Future[None]"] = set()

    @property
    def rate(self) -> float:
        """The rate, in permits per second."""
        return self._core.rate

    @property
    def max_burst_seconds(self) -> float:
        """How many seconds of unused permits may be stored."""
        return self._core.burst

    def set_rate(self, rate: float) -> None:
        """Sets the rate (permits per second) from now on; see
        :meth:`set_rate_at`."""
        self.set_rate_at(self._clock(), rate)

    def set_rate_at(self, now: float, rate: float) -> None:
        """Sets the rate from ``now`` on, as :meth:`sluice.RateLimiter.set_rate_at`:
        stored permits keep the time they stand for, permits paid ahead and
        the waiting callers' turns are re-timed at the new rate (the
        waiters wake to re-time them). Setting the same rate does nothing."""
        if self._core.set_rate(now, rate):
            for fut in list(self._sleepers):
                _wake(fut)

    def try_acquire(self, permits: int = 1) -> bool:
        """Takes ``permits`` if they are free now; returns False at once,
        taking nothing, if they are not (to wait for them, ``await``
        :meth:`acquire` with a timeout). ``permits`` ≤ 0 is always True.
        Never suspends."""
        if permits <= 0:
            return True
        return self._core.admit(self._clock(), permits)

    def try_acquire_at(self, now: float, permits: int = 1) -> bool:
        """:meth:`try_acquire` at time ``now``."""
        if permits <= 0:
            return True
        return self._core.admit(now, permits)

    def reserve_at(self, now: float, permits: int = 1) -> float:
        """Takes ``permits`` at ``now``, paying ahead, and returns how many
        seconds after now the caller may act (``math.inf`` at rate 0, when
        nothing is taken). Never suspends."""
        if permits <= 0:
            return 0.0
        outcome, at, _ = self._core.reserve(now, permits, math.inf)
        if outcome == NEVER:
            return math.inf
        return max(0.0, at - now)

    async def acquire(self, permits: int = 1, timeout: Optional[float] = None) -> float:
        """Waits until ``permits`` are free and takes them; returns the
        seconds waited. When they are free now it returns without
        suspending. If the wait would pass ``timeout`` seconds (None: no
        bound; 0 or less: take them only if free now) it raises
        :class:`sluice.DeadlineExceeded` at once, taking nothing; at rate 0
        it waits for a rate change, at most ``timeout``. If the rate
        changes while it waits, it waits again at the new rate. Cancelling
        the waiting task gives its permits back (unless the rate changed
        meanwhile: then the schedule already moved on). ``permits`` ≤ 0
        returns 0 at once."""
        if permits <= 0:
            return 0.0
        core = self._core
        start = self._clock()
        deadline = math.inf if timeout is None else start + max(0.0, timeout)
        while True:
            now = self._clock()
            outcome, at, claim = core.reserve(now, permits, deadline)
            if outcome == FREE:
                return now - start
            if outcome == LATE:
                break
            if outcome == NEVER:
                if now >= deadline:
                    break
                gen = core.gen
                while core.gen == gen and now < deadline:
                    await self._nap(deadline - now)
                    now = self._clock()
                continue
            gen = core.gen
            try:
                while True:
                    now = self._clock()
                    if at <= now:
                        return now - start
                    if now >= deadline:
                        core.refund(claim)
                        break
                    await self._nap(min(at, deadline) - now)
                    if core.gen != gen:
                        at = core.retime(at, gen)
                        gen = core.gen
            except asyncio.CancelledError:
                core.refund(claim)
                raise
            break
        raise DeadlineExceeded(f"no {permits} permit(s) within {timeout} s at {self.rate} permits/s")

    async def _nap(self, seconds: float) -> None:
        """Sleeps ``seconds`` (inf: until woken), or until a rate change."""
        loop = asyncio.get_running_loop()
        fut: "asyncio.Future[None]" = loop.create_future()
        self._sleepers.add(fut)
        timer = None if math.isinf(seconds) else loop.call_later(seconds, _wake, fut)
        try:
            await fut
        finally:
            self._sleepers.discard(fut)
            if timer is not None:
                timer.cancel()

    def tokens(self) -> float:
        """The permits available now: stored permits, or minus the permits
        paid ahead (negative when callers are queued)."""
        return self._core.tokens(self._clock())

    def tokens_at(self, now: float) -> float:
        """:meth:`tokens` at time ``now``; it changes nothing."""
        return self._core.tokens(now)


def _grant(fut: "asyncio.Future[None]") -> bool:
    if fut.done():  # its waiter has gone
        return False
    fut.set_result(None)
    return True


class Gauge:
    """A counting semaphore for in-flight limits, for asyncio: at most
    ``floor(capacity)`` holders at once (``math.inf``: unlimited; negative
    or NaN: 0), as :class:`sluice.Gauge`. Lowering the capacity never
    revokes a held slot. Waiters are served first come, first served.

    Use it with ``async with gauge:`` (one slot for the block, waiting as
    long as it takes) or ``async with gauge.hold(timeout=0.5):``. Not
    thread-safe: use it on one event loop.

    Source: doorman-design.md, "Client library" (GaugeResource).
    """

    def __init__(self, capacity: float = 0.0) -> None:
        self._core: GaugeCore["asyncio.Future[None]"] = GaugeCore(capacity)

    @property
    def capacity(self) -> float:
        """The capacity, in slots (fractional capacities round down)."""
        return self._core.capacity

    @property
    def in_use(self) -> int:
        """The slots held now."""
        return self._core.in_use

    def set_capacity(self, capacity: float) -> None:
        """Changes the capacity at once and wakes the waiters that now fit."""
        self._core.set_capacity(capacity, _grant)

    def try_acquire(self) -> bool:
        """Takes a slot if one is free now (and nobody is waiting). Never
        suspends."""
        return self._core.try_take()

    async def acquire(self, timeout: Optional[float] = None) -> None:
        """Waits until a slot is free and takes it; raises
        :class:`sluice.DeadlineExceeded` after ``timeout`` seconds (None: no
        bound; 0 or less: at once unless one is free now) without one.
        Cancelling the waiting task takes nothing (a slot granted at that
        moment is given back). Release it with :meth:`release`."""
        if self._core.try_take():
            return
        if timeout is not None and timeout <= 0:
            raise DeadlineExceeded(f"no slot of the gauge within {timeout} s")
        fut: "asyncio.Future[None]" = asyncio.get_running_loop().create_future()
        self._core.waiters.append(fut)
        try:
            await asyncio.wait({fut}, timeout=timeout)
        except asyncio.CancelledError:
            if not self._core.withdraw(fut) and fut.done() and not fut.cancelled():
                self.release()  # granted as the task was cancelled
            fut.cancel()
            raise
        if fut.done():
            return
        self._core.withdraw(fut)
        fut.cancel()
        raise DeadlineExceeded(f"no slot of the gauge within {timeout} s")

    def release(self) -> None:
        """Gives a slot back. Releasing more than is held does nothing."""
        self._core.release(_grant)

    def hold(self, timeout: Optional[float] = None) -> "_GaugeHold":
        """An async context manager holding one slot for its block: it
        acquires on entry (raising :class:`sluice.DeadlineExceeded` after
        ``timeout`` seconds) and releases on exit, whatever happens in the
        block."""
        return _GaugeHold(self, timeout)

    async def __aenter__(self) -> "Gauge":
        await self.acquire()
        return self

    async def __aexit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.release()


class _GaugeHold:
    def __init__(self, gauge: Gauge, timeout: Optional[float]) -> None:
        self._gauge, self._timeout = gauge, timeout

    async def __aenter__(self) -> Gauge:
        await self._gauge.acquire(self._timeout)
        return self._gauge

    async def __aexit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self._gauge.release()
