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

Source: guava-ratelimiter.md ("SmoothRateLimiter", "SmoothBursty",
"setRate"); doorman-design.md, "Client library" (GaugeResource).
"""

from __future__ import annotations

import collections
import math
import threading
import time
from types import TracebackType
from typing import Callable, Deque, Optional, Tuple, Type

from .errors import DeadlineExceeded

__all__ = ["RateLimiter", "Gauge"]

Clock = Callable[[], float]

_NEVER, _LATE, _FREE, _TAKEN = range(4)

# How many rate changes a waiter can follow while it sleeps; waiters wake
# at every change, so more are never needed.
_KEEP_CHANGES = 64


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
        if not max_burst_seconds > 0:
            max_burst_seconds = 0.0
        self._clock: Clock = clock or time.monotonic
        self._cond = threading.Condition(threading.Lock())
        self._burst = float(max_burst_seconds)
        self._rate = 0.0
        self._interval = 0.0
        self._max_stored = 0.0
        self._stored = 0.0
        self._next_free = 0.0
        self._started = False
        self._gen = 0
        # (generation after the change, when, factor), oldest first.
        self._changes: Deque[Tuple[int, float, float]] = collections.deque(maxlen=_KEEP_CHANGES)
        self._set_params(_sanitize(rate))

    # --- state -----------------------------------------------------------

    def _set_params(self, rate: float) -> None:
        self._rate = rate
        if math.isinf(rate):
            self._interval, self._max_stored = 0.0, math.inf
        elif rate > 0:
            self._interval, self._max_stored = 1.0 / rate, self._burst * rate
        else:
            self._interval, self._max_stored = 0.0, 0.0

    def _resync(self, now: float) -> None:
        """Stores the permits accrued since the next free time, at most the
        burst (Guava's resync)."""
        if now > self._next_free:
            if self._interval > 0:
                self._stored = min(self._max_stored, self._stored + (now - self._next_free) / self._interval)
            self._next_free = now

    def _reserve(self, now: float, permits: int, limit: float) -> Tuple[int, float, Tuple[float, float, float, int]]:
        """Takes permits at now unless the caller could act only after
        limit. Returns the outcome, when the caller may act, and what a
        refund needs (the next free time and stored permits found, the new
        next free time, the generation)."""
        if self._rate == 0:
            return _NEVER, 0.0, (0.0, 0.0, 0.0, 0)
        if math.isinf(self._rate):
            return _FREE, now, (0.0, 0.0, 0.0, 0)
        if not self._started:
            self._started, self._stored, self._next_free = True, 0.0, now
        found_next, found_stored = self._next_free, self._stored
        self._resync(now)
        at = max(self._next_free, now)
        if at > limit:
            self._next_free, self._stored = found_next, found_stored
            return _LATE, at, (0.0, 0.0, 0.0, 0)
        spend = min(float(permits), self._stored)
        self._stored -= spend
        self._next_free = at + (permits - spend) * self._interval
        return _TAKEN, at, (found_next, found_stored, self._next_free, self._gen)

    def _refund(self, claim: Tuple[float, float, float, int]) -> None:
        """Gives back a claim if nothing was taken and the rate did not
        change since."""
        found_next, found_stored, end, gen = claim
        if gen == self._gen and self._next_free == end:
            self._next_free, self._stored = found_next, found_stored

    # --- rate ------------------------------------------------------------

    @property
    def rate(self) -> float:
        """The rate, in permits per second."""
        with self._cond:
            return self._rate

    @property
    def max_burst_seconds(self) -> float:
        """How many seconds of unused permits may be stored."""
        return self._burst

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
        rate = _sanitize(rate)
        with self._cond:
            old = self._rate
            if rate == old:
                return
            if math.isinf(old):
                self._set_params(rate)
                self._stored, self._next_free = self._max_stored, now
            elif not self._started or old == 0:
                self._set_params(rate)
                self._stored, self._next_free = 0.0, now
            else:
                self._resync(now)
                seconds_stored = self._stored * self._interval
                self._set_params(rate)
                if rate > 0 and not math.isinf(rate):
                    self._stored = min(self._max_stored, seconds_stored / self._interval)
                    if self._next_free > now:
                        self._next_free = now + (self._next_free - now) * old / rate
                else:
                    self._stored = 0.0 if rate == 0 else self._stored
            self._started = True
            self._gen += 1
            self._changes.append((self._gen, now, _retime_factor(old, rate)))
            self._cond.notify_all()

    # --- taking permits --------------------------------------------------

    def try_acquire(self, permits: int = 1, timeout: float = 0.0) -> bool:
        """Takes ``permits`` if they are free within ``timeout`` seconds
        (0: now), waiting for them if need be; returns False at once,
        taking nothing, if they are not. ``permits`` ≤ 0 is always True."""
        if permits <= 0:
            return True
        if timeout <= 0:
            with self._cond:
                now = self._clock()
                outcome, _, _ = self._reserve(now, permits, now)
                return outcome == _FREE or outcome == _TAKEN
        return self._wait(permits, timeout) is not None

    def try_acquire_at(self, now: float, permits: int = 1) -> bool:
        """:meth:`try_acquire` with no wait, at time ``now``."""
        if permits <= 0:
            return True
        with self._cond:
            outcome, _, _ = self._reserve(now, permits, now)
            return outcome == _FREE or outcome == _TAKEN

    def reserve_at(self, now: float, permits: int = 1) -> float:
        """Takes ``permits`` at ``now``, paying ahead, and returns how many
        seconds after now the caller may act (``math.inf`` at rate 0, when
        nothing is taken). Does not block."""
        if permits <= 0:
            return 0.0
        with self._cond:
            outcome, at, _ = self._reserve(now, permits, math.inf)
        if outcome == _NEVER:
            return math.inf
        return max(0.0, at - now)

    def acquire(self, permits: int = 1, timeout: Optional[float] = None) -> float:
        """Blocks until ``permits`` are free and takes them; returns the
        seconds waited. If the wait would pass ``timeout`` seconds (None:
        no bound) it raises :class:`sluice.DeadlineExceeded` at once,
        taking nothing; at rate 0 it waits for a rate change, at most
        ``timeout``. If the rate changes while it waits, it waits again at
        the new rate. ``permits`` ≤ 0 returns 0 at once."""
        if permits <= 0:
            return 0.0
        waited = self._wait(permits, timeout)
        if waited is None:
            raise DeadlineExceeded(f"no {permits} permit(s) within {timeout} s at {self.rate} permits/s")
        return waited

    def _wait(self, permits: int, timeout: Optional[float]) -> Optional[float]:
        start = self._clock()
        deadline = math.inf if timeout is None else start + max(0.0, timeout)
        with self._cond:
            while True:
                now = self._clock()
                outcome, at, claim = self._reserve(now, permits, deadline)
                if outcome == _FREE:
                    return now - start
                if outcome == _LATE:
                    return None
                if outcome == _NEVER:
                    if now >= deadline:
                        return None
                    gen = self._gen
                    while self._gen == gen and now < deadline:
                        self._cond.wait(None if math.isinf(deadline) else deadline - now)
                        now = self._clock()
                    continue
                gen = self._gen
                while True:
                    now = self._clock()
                    if at <= now:
                        return now - start
                    if now >= deadline:
                        self._refund(claim)
                        return None
                    wait = at - now if math.isinf(deadline) else min(at, deadline) - now
                    self._cond.wait(None if math.isinf(wait) else wait)
                    if self._gen != gen:
                        # The rate changed: the turn moves as the schedule did.
                        for g, t, factor in self._changes:
                            if g > gen and at > t:
                                if factor == 0:
                                    at = t
                                elif math.isinf(factor):
                                    at = math.inf
                                else:
                                    at = t + (at - t) * factor
                        gen = self._gen

    # --- reading ---------------------------------------------------------

    def tokens(self) -> float:
        """The permits available now: stored permits, or minus the permits
        paid ahead (negative when callers are queued)."""
        return self.tokens_at(self._clock())

    def tokens_at(self, now: float) -> float:
        """:meth:`tokens` at time ``now``; it changes nothing."""
        with self._cond:
            if math.isinf(self._rate):
                return math.inf
            if self._rate == 0 or not self._started:
                return 0.0
            if now >= self._next_free:
                return min(self._max_stored, self._stored + (now - self._next_free) * self._rate)
            return self._stored - (self._next_free - now) * self._rate


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
        self._capacity = 0.0
        self._slots = 0.0
        self._in_use = 0
        self._waiters: Deque[threading.Event] = collections.deque()
        self._set_locked(capacity)

    def _set_locked(self, c: float) -> None:
        if not c > 0:
            c = 0.0
        self._capacity = float(c)
        self._slots = math.inf if math.isinf(c) else float(math.floor(c))

    @property
    def capacity(self) -> float:
        """The capacity, in slots (fractional capacities round down)."""
        with self._lock:
            return self._capacity

    @property
    def in_use(self) -> int:
        """The slots held now."""
        with self._lock:
            return self._in_use

    def set_capacity(self, capacity: float) -> None:
        """Changes the capacity at once and wakes the waiters that now fit."""
        with self._lock:
            self._set_locked(capacity)
            self._wake_locked()

    def _wake_locked(self) -> None:
        while self._waiters and self._in_use < self._slots:
            ev = self._waiters.popleft()
            self._in_use += 1
            ev.set()

    def try_acquire(self) -> bool:
        """Takes a slot if one is free now (and nobody is waiting)."""
        with self._lock:
            if self._in_use < self._slots and not self._waiters:
                self._in_use += 1
                return True
            return False

    def acquire(self, timeout: Optional[float] = None) -> None:
        """Blocks until a slot is free and takes it; raises
        :class:`sluice.DeadlineExceeded` after ``timeout`` seconds (None: no
        bound) without one. Release it with :meth:`release`."""
        with self._lock:
            if self._in_use < self._slots and not self._waiters:
                self._in_use += 1
                return
            ev = threading.Event()
            self._waiters.append(ev)
        if ev.wait(timeout):
            return
        with self._lock:
            if ev.is_set():  # granted meanwhile: keep it
                return
            self._waiters.remove(ev)
        raise DeadlineExceeded(f"no slot of the gauge within {timeout} s")

    def release(self) -> None:
        """Gives a slot back. Releasing more than is held does nothing."""
        with self._lock:
            if self._in_use > 0:
                self._in_use -= 1
            self._wake_locked()

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
