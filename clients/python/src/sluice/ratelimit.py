"""Local enforcement of a lease: a smooth rate limiter and a gauge.

:class:`RateLimiter` has the semantics of Guava's ``SmoothBursty`` (the Go
``ratelimit`` package is the model): permits are issued at a steady rate, in
permits per second; up to ``max_burst_seconds`` of unused permits are stored
and handed out at once; a request for more permits than are available is
granted as soon as the previous request's permits are paid for and makes the
*next* request wait ("pays ahead"). Rate 0 admits nothing; ``math.inf``
admits everything.

:class:`Gauge` is a counting semaphore for in-flight limits: at most
``floor(capacity)`` holders at once.

Both are safe for concurrent use from many threads. Time is an input: the
clock is injectable, and the non-blocking methods have ``..._at(now)`` twins.

The arithmetic is :class:`BurstyCore` and :class:`GaugeCore`: no locks, no
clock, no waiting, ``now`` passed in. These classes add a lock and blocking
waits; ``sluice.aio.RateLimiter`` and ``sluice.aio.Gauge`` add awaiting
instead, over the same cores.

Source: guava-ratelimiter.md ("SmoothRateLimiter", "SmoothBursty",
"setRate"); doorman-design.md, "Client library" (GaugeResource).
"""

from __future__ import annotations

import collections
import math
import threading
import time
from types import TracebackType
from typing import Callable, Deque, Generic, Optional, Tuple, Type, TypeVar

from .errors import DeadlineExceeded

__all__ = ["RateLimiter", "Gauge", "BurstyCore", "GaugeCore"]

Clock = Callable[[], float]

#: The outcomes of :meth:`BurstyCore.reserve`.
NEVER, LATE, FREE, TAKEN = range(4)

# How many rate changes a waiter can follow while it sleeps; waiters wake
# at every change, so more are never needed.
_KEEP_CHANGES = 64

#: What a refund needs: the next free time and stored permits found, the
#: new next free time, the generation.
Claim = Tuple[float, float, float, int]
_NO_CLAIM: Claim = (0.0, 0.0, 0.0, 0)


def _sanitize(rate: float) -> float:
    if not rate > 0:  # negative, zero or NaN
        return 0.0
    return float(rate)


def _retime_factor(old: float, new: float) -> float:
    """How the time still to wait stretches when the rate goes from old to
    new: old / new; inf (wait for the next change) when it becomes 0; 0 (at
    once) when it leaves 0 or inf, or becomes inf."""
    if old == 0:
        return 0.0
    if new == 0:
        return math.inf
    if math.isinf(new) or math.isinf(old):
        return 0.0
    return old / new


class BurstyCore:
    """SmoothBursty's arithmetic (Guava's semantics), with ``now`` (seconds
    on any monotonic scale) passed to every method: no clock, no lock, no
    waiting. Not thread-safe: its owner serialises the calls
    (:class:`RateLimiter` under its lock; ``sluice.aio.RateLimiter`` on its
    event loop).

    ``rate`` is in permits per second (0, negative or NaN: 0, admitting
    nothing; ``math.inf``: everything); ``max_burst_seconds`` how many
    seconds of unused permits may be stored (0 or less: none). It starts
    with nothing stored, at its first use.

    Source: guava-ratelimiter.md ("SmoothRateLimiter", "SmoothBursty",
    "setRate")."""

    __slots__ = ("burst", "rate", "interval", "max_stored", "stored", "next_free", "started", "gen", "changes")

    def __init__(self, rate: float = 0.0, max_burst_seconds: float = 1.0) -> None:
        self.burst = float(max_burst_seconds) if max_burst_seconds > 0 else 0.0
        self.rate = 0.0
        self.interval = 0.0
        self.max_stored = 0.0
        self.stored = 0.0
        self.next_free = 0.0
        self.started = False
        #: Bumped by every rate change.
        self.gen = 0
        #: (generation after the change, when, factor), oldest first.
        self.changes: Deque[Tuple[int, float, float]] = collections.deque(maxlen=_KEEP_CHANGES)
        self._params(_sanitize(rate))

    def _params(self, rate: float) -> None:
        self.rate = rate
        if math.isinf(rate):
            self.interval, self.max_stored = 0.0, math.inf
        elif rate > 0:
            self.interval, self.max_stored = 1.0 / rate, self.burst * rate
        else:
            self.interval, self.max_stored = 0.0, 0.0

    def _resync(self, now: float) -> None:
        """Stores the permits accrued since the next free time, at most the
        burst (Guava's resync)."""
        if now > self.next_free:
            if self.interval > 0:
                self.stored = min(self.max_stored, self.stored + (now - self.next_free) / self.interval)
            self.next_free = now

    def reserve(self, now: float, permits: int, limit: float) -> Tuple[int, float, Claim]:
        """Takes ``permits`` (≥ 1) at ``now`` unless the caller could act
        only after ``limit``. Returns the outcome — :data:`NEVER` (rate 0:
        nothing taken), :data:`LATE` (not before limit: nothing taken),
        :data:`FREE` (rate inf) or :data:`TAKEN` —, when the caller may act,
        and the claim :meth:`refund` gives back."""
        if self.rate == 0:
            return NEVER, 0.0, _NO_CLAIM
        if math.isinf(self.rate):
            return FREE, now, _NO_CLAIM
        if not self.started:
            self.started, self.stored, self.next_free = True, 0.0, now
        found_next, found_stored = self.next_free, self.stored
        self._resync(now)
        at = max(self.next_free, now)
        if at > limit:
            self.next_free, self.stored = found_next, found_stored
            return LATE, at, _NO_CLAIM
        spend = min(float(permits), self.stored)
        self.stored -= spend
        self.next_free = at + (permits - spend) * self.interval
        return TAKEN, at, (found_next, found_stored, self.next_free, self.gen)

    def admit(self, now: float, permits: int) -> bool:
        """Takes ``permits`` if they are free at ``now``; False (nothing
        taken) if not."""
        outcome, _, _ = self.reserve(now, permits, now)
        return outcome == FREE or outcome == TAKEN

    def refund(self, claim: Claim) -> None:
        """Gives back a claim if nothing was taken and the rate did not
        change since."""
        found_next, found_stored, end, gen = claim
        if gen == self.gen and self.next_free == end:
            self.next_free, self.stored = found_next, found_stored

    def set_rate(self, now: float, rate: float) -> bool:
        """Sets the rate from ``now`` on (see :meth:`RateLimiter.set_rate_at`);
        returns whether it changed (then waiters must re-time their turns
        with :meth:`retime`)."""
        rate = _sanitize(rate)
        old = self.rate
        if rate == old:
            return False
        if math.isinf(old):
            self._params(rate)
            self.stored, self.next_free = self.max_stored, now
        elif not self.started or old == 0:
            self._params(rate)
            self.stored, self.next_free = 0.0, now
        else:
            self._resync(now)
            seconds_stored = self.stored * self.interval
            self._params(rate)
            if rate > 0 and not math.isinf(rate):
                self.stored = min(self.max_stored, seconds_stored / self.interval)
                if self.next_free > now:
                    self.next_free = now + (self.next_free - now) * old / rate
            else:
                self.stored = 0.0 if rate == 0 else self.stored
        self.started = True
        self.gen += 1
        self.changes.append((self.gen, now, _retime_factor(old, rate)))
        return True

    def retime(self, at: float, gen: int) -> float:
        """Where a turn at ``at``, taken at generation ``gen``, moved with
        the rate changes since: as the schedule did (``math.inf``: wait
        for the next change)."""
        for g, t, factor in self.changes:
            if g > gen and at > t:
                if factor == 0:
                    at = t
                elif math.isinf(factor):
                    at = math.inf
                else:
                    at = t + (at - t) * factor
        return at

    def tokens(self, now: float) -> float:
        """The permits available at ``now``: stored permits, or minus the
        permits paid ahead. Changes nothing."""
        if math.isinf(self.rate):
            return math.inf
        if self.rate == 0 or not self.started:
            return 0.0
        if now >= self.next_free:
            return min(self.max_stored, self.stored + (now - self.next_free) * self.rate)
        return self.stored - (self.next_free - now) * self.rate


class RateLimiter:
    """A SmoothBursty rate limiter (Guava's semantics).

    ``rate`` is in permits per second (0 admits nothing until
    :meth:`set_rate`; ``math.inf`` admits everything); ``max_burst_seconds``
    is how many seconds of unused permits may be stored (Guava's default is
    1; 0 stores nothing). The limiter starts with nothing stored, at its
    first use. ``clock`` returns seconds on a monotonic scale (default
    :func:`time.monotonic`).

    :meth:`acquire` blocks until the permits are free (raising
    :class:`sluice.DeadlineExceeded` at once, taking nothing, when that
    would pass its timeout); :meth:`try_acquire` takes them only if they are
    free within its timeout (0: now). A rate change re-times the permits
    already paid ahead, and the blocked callers' turns, at the new rate.
    Thread-safe.
    """

    def __init__(self, rate: float = 0.0, max_burst_seconds: float = 1.0, clock: Optional[Clock] = None) -> None:
        self._clock: Clock = clock or time.monotonic
        self._cond = threading.Condition(threading.Lock())
        self._core = BurstyCore(rate, max_burst_seconds)

    # --- rate ------------------------------------------------------------

    @property
    def rate(self) -> float:
        """The rate, in permits per second."""
        with self._cond:
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
        """Sets the rate from ``now`` on: permits accrued until now count at
        the old rate, stored permits keep the time they stand for (their
        number scales with the rate), permits paid ahead and blocked
        callers' turns are re-timed at the new rate. Leaving rate 0 starts
        with nothing stored; leaving ``inf`` with a full store. Setting the
        same rate does nothing. Negative or NaN rates count as 0.

        Source: guava-ratelimiter.md, "setRate" (doSetRate)."""
        with self._cond:
            if self._core.set_rate(now, rate):
                self._cond.notify_all()

    # --- taking permits --------------------------------------------------

    def try_acquire(self, permits: int = 1, timeout: float = 0.0) -> bool:
        """Takes ``permits`` if they are free within ``timeout`` seconds
        (0 or less: now), waiting for them if need be; returns False at
        once, taking nothing, if they are not. ``permits`` ≤ 0 is always
        True."""
        if permits <= 0:
            return True
        if timeout <= 0:
            with self._cond:
                return self._core.admit(self._clock(), permits)
        return self._wait(permits, timeout) is not None

    def try_acquire_at(self, now: float, permits: int = 1) -> bool:
        """:meth:`try_acquire` with no wait, at time ``now``."""
        if permits <= 0:
            return True
        with self._cond:
            return self._core.admit(now, permits)

    def reserve_at(self, now: float, permits: int = 1) -> float:
        """Takes ``permits`` at ``now``, paying ahead, and returns how many
        seconds after now the caller may act (``math.inf`` at rate 0, when
        nothing is taken). Does not block."""
        if permits <= 0:
            return 0.0
        with self._cond:
            outcome, at, _ = self._core.reserve(now, permits, math.inf)
        if outcome == NEVER:
            return math.inf
        return max(0.0, at - now)

    def acquire(self, permits: int = 1, timeout: Optional[float] = None) -> float:
        """Blocks until ``permits`` are free and takes them; returns the
        seconds waited. If the wait would pass ``timeout`` seconds (None:
        no bound; 0: take them only if free now) it raises
        :class:`sluice.DeadlineExceeded` at once, taking nothing; at rate 0
        it waits for a rate change, at most ``timeout``. If the rate
        changes while it waits, it waits again at the new rate. ``permits``
        ≤ 0 returns 0 at once."""
        if permits <= 0:
            return 0.0
        waited = self._wait(permits, timeout)
        if waited is None:
            raise DeadlineExceeded(f"no {permits} permit(s) within {timeout} s at {self.rate} permits/s")
        return waited

    def _wait(self, permits: int, timeout: Optional[float]) -> Optional[float]:
        start = self._clock()
        deadline = math.inf if timeout is None else start + max(0.0, timeout)
        core = self._core
        with self._cond:
            while True:
                now = self._clock()
                outcome, at, claim = core.reserve(now, permits, deadline)
                if outcome == FREE:
                    return now - start
                if outcome == LATE:
                    return None
                if outcome == NEVER:
                    if now >= deadline:
                        return None
                    gen = core.gen
                    while core.gen == gen and now < deadline:
                        self._cond.wait(None if math.isinf(deadline) else deadline - now)
                        now = self._clock()
                    continue
                gen = core.gen
                while True:
                    now = self._clock()
                    if at <= now:
                        return now - start
                    if now >= deadline:
                        core.refund(claim)
                        return None
                    wait = min(at, deadline) - now
                    self._cond.wait(None if math.isinf(wait) else wait)
                    if core.gen != gen:
                        # The rate changed: the turn moves as the schedule did.
                        at = core.retime(at, gen)
                        gen = core.gen

    # --- reading ---------------------------------------------------------

    def tokens(self) -> float:
        """The permits available now: stored permits, or minus the permits
        paid ahead (negative when callers are queued)."""
        return self.tokens_at(self._clock())

    def tokens_at(self, now: float) -> float:
        """:meth:`tokens` at time ``now``; it changes nothing."""
        with self._cond:
            return self._core.tokens(now)


W = TypeVar("W")


class GaugeCore(Generic[W]):
    """A gauge's bookkeeping: the capacity in slots, the slots held and the
    waiters in arrival order (of any type ``W``: an event, a future). No
    lock and no waiting: its owner serialises the calls (:class:`Gauge`
    under its lock, ``sluice.aio.Gauge`` on its event loop) and wakes the
    waiters it is handed.

    Source: doorman-design.md, "Client library" (GaugeResource)."""

    __slots__ = ("capacity", "slots", "in_use", "waiters")

    def __init__(self, capacity: float = 0.0) -> None:
        self.capacity = 0.0
        self.slots = 0.0
        self.in_use = 0
        self.waiters: Deque[W] = collections.deque()
        self._set(capacity)

    def _set(self, c: float) -> None:
        if not c > 0:  # negative, zero or NaN
            c = 0.0
        self.capacity = float(c)
        self.slots = math.inf if math.isinf(c) else float(math.floor(c))

    def set_capacity(self, capacity: float, grant: Callable[[W], bool]) -> None:
        """Changes the capacity (fractions round down; ``math.inf``:
        unlimited; negative or NaN: 0) and grants the waiters that now fit
        (:meth:`wake`). Never revokes a held slot."""
        self._set(capacity)
        self.wake(grant)

    def wake(self, grant: Callable[[W], bool]) -> None:
        """Hands free slots to the waiters, first come first served:
        ``grant(w)`` wakes one and returns True, or False for a waiter that
        has gone (it gets no slot)."""
        while self.waiters and self.in_use < self.slots:
            w = self.waiters.popleft()
            if grant(w):
                self.in_use += 1

    def try_take(self) -> bool:
        """Takes a slot if one is free now and nobody is waiting."""
        if self.in_use < self.slots and not self.waiters:
            self.in_use += 1
            return True
        return False

    def release(self, grant: Callable[[W], bool]) -> None:
        """Gives a slot back (more than are held: nothing) and wakes the
        next waiter."""
        if self.in_use > 0:
            self.in_use -= 1
        self.wake(grant)

    def withdraw(self, w: W) -> bool:
        """Takes waiter ``w`` out of the queue; False when it is not there
        (it was granted a slot)."""
        try:
            self.waiters.remove(w)
            return True
        except ValueError:
            return False


def _set_event(ev: threading.Event) -> bool:
    ev.set()
    return True


class Gauge:
    """A counting semaphore for in-flight limits: at most
    ``floor(capacity)`` holders at once (``math.inf``: unlimited; negative
    or NaN: 0). Lowering the capacity never revokes a held slot; it only
    stops new acquisitions until enough holders release. Waiters are served
    first come, first served. Thread-safe.

    Use it as a context manager (``with gauge:`` holds one slot for the
    block, waiting as long as it takes) or with :meth:`hold` for a
    timeout::

        with gauge.hold(timeout=0.5):
            run_transaction()

    Source: doorman-design.md, "Client library" (GaugeResource).
    """

    def __init__(self, capacity: float = 0.0) -> None:
        self._lock = threading.Lock()
        self._core: GaugeCore[threading.Event] = GaugeCore(capacity)

    @property
    def _waiters(self) -> Deque[threading.Event]:
        return self._core.waiters

    @property
    def capacity(self) -> float:
        """The capacity, in slots (fractional capacities round down)."""
        with self._lock:
            return self._core.capacity

    @property
    def in_use(self) -> int:
        """The slots held now."""
        with self._lock:
            return self._core.in_use

    def set_capacity(self, capacity: float) -> None:
        """Changes the capacity at once and wakes the waiters that now fit."""
        with self._lock:
            self._core.set_capacity(capacity, _set_event)

    def try_acquire(self) -> bool:
        """Takes a slot if one is free now (and nobody is waiting)."""
        with self._lock:
            return self._core.try_take()

    def acquire(self, timeout: Optional[float] = None) -> None:
        """Blocks until a slot is free and takes it; raises
        :class:`sluice.DeadlineExceeded` after ``timeout`` seconds (None: no
        bound; 0 or less: at once unless one is free now) without one.
        Release it with :meth:`release`."""
        with self._lock:
            if self._core.try_take():
                return
            ev = threading.Event()
            self._core.waiters.append(ev)
        if ev.wait(None if timeout is None else max(0.0, timeout)):
            return
        with self._lock:
            if not self._core.withdraw(ev):  # granted meanwhile: keep it
                return
        raise DeadlineExceeded(f"no slot of the gauge within {timeout} s")

    def release(self) -> None:
        """Gives a slot back. Releasing more than is held does nothing."""
        with self._lock:
            self._core.release(_set_event)

    def hold(self, timeout: Optional[float] = None) -> "_GaugeHold":
        """A context manager holding one slot for its block: it acquires on
        entry (raising :class:`sluice.DeadlineExceeded` after ``timeout``
        seconds) and releases on exit, whatever happens in the block."""
        return _GaugeHold(self, timeout)

    def __enter__(self) -> "Gauge":
        self.acquire()
        return self

    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.release()


class _GaugeHold:
    def __init__(self, gauge: Gauge, timeout: Optional[float]) -> None:
        self._gauge, self._timeout = gauge, timeout

    def __enter__(self) -> Gauge:
        self._gauge.acquire(self._timeout)
        return self._gauge

    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self._gauge.release()
