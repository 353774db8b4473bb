"""The smooth rate limiter (Guava's SmoothBursty) and the gauge."""

from __future__ import annotations

import math
import threading
import time

import pytest

import sluice
import sluice.aio

# The arithmetic is one (sluice.ratelimit.BurstyCore): the time-as-input
# tests run on both APIs' limiters.
both = pytest.mark.parametrize("cls", [sluice.RateLimiter, sluice.aio.RateLimiter], ids=["threaded", "aio"])


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


@pytest.mark.parametrize(
    "name, rate, burst, steps, want",
    [
        # (advance by, permits) -> admitted
        ("the first permit is free, then one per interval", 10, 1.0, [(0, 1), (0, 1), (0.1, 1), (0.05, 1)], [True, False, True, False]),
        # 10 stored permits, then one more paid ahead (as Guava), then none.
        ("a burst stores at most max_burst_seconds", 10, 1.0, [(0, 1), (5, 10), (0, 1), (0, 1)], [True, True, True, False]),
        ("no burst stores nothing", 10, 0.0, [(0, 1), (5, 1), (0, 1)], [True, True, False]),
        ("rate 0 admits nothing", 0, 1.0, [(0, 1), (10, 1)], [False, False]),
        ("inf admits everything", math.inf, 1.0, [(0, 10**6), (0, 10**6)], [True, True]),
        ("paying ahead makes the next caller wait", 10, 1.0, [(0, 5), (0.1, 1), (0.4, 1)], [True, False, True]),
    ],
)
@both
def test_try_acquire_at(cls, name, rate, burst, steps, want):
    lim = cls(rate, burst)
    now = 0.0
    got = []
    for advance, permits in steps:
        now += advance
        got.append(lim.try_acquire_at(now, permits))
    assert got == want, name


@both
def test_reserve_at_pays_ahead(cls):
    lim = cls(2, 1.0)
    assert lim.reserve_at(0, 1) == 0  # free
    assert lim.reserve_at(0, 4) == pytest.approx(0.5)  # after the first's interval
    assert lim.reserve_at(0, 1) == pytest.approx(2.5)  # after the four
    assert lim.tokens_at(0) == pytest.approx(-6.0)  # 6 permits at 2/s: 3 s paid ahead


@both
def test_set_rate_retimes_the_time_paid_ahead(cls):
    lim = cls(10, 1.0)
    lim.reserve_at(0, 1)
    lim.reserve_at(0, 10)  # paid ahead until 1.1
    lim.set_rate_at(0.1, 20)  # 1.0 s still owed at 10/s is 0.5 s at 20/s
    assert lim.reserve_at(0.1, 1) == pytest.approx(0.5)


@both
def test_set_rate_keeps_the_time_stored(cls):
    lim = cls(10, 1.0)
    lim.try_acquire_at(0, 1)
    assert lim.tokens_at(10) == pytest.approx(10)  # a full store: 1 s
    lim.set_rate_at(10, 20)
    assert lim.tokens_at(10) == pytest.approx(20)  # still 1 s, at 20/s


@both
def test_leaving_rate_0_stores_nothing(cls):
    lim = cls(0, 1.0)
    lim.set_rate_at(50, 10)
    assert lim.try_acquire_at(50, 1)
    assert not lim.try_acquire_at(50, 1)


@both
def test_invalid_rates_count_as_0(cls):
    for r in (-1, float("nan")):
        lim = cls(r)
        assert lim.rate == 0
        assert not lim.try_acquire()


def test_acquire_fails_at_once_past_its_timeout():
    lim = sluice.RateLimiter(0.01, 0)
    lim.acquire()
    start = time.monotonic()
    with pytest.raises(sluice.DeadlineExceeded):
        lim.acquire(timeout=0.1)  # the next permit is 100 s away
    assert time.monotonic() - start < 30  # did not wait for it
    assert lim.tokens() > -1.01  # nothing taken


def test_acquire_waits_its_turn():
    lim = sluice.RateLimiter(50, 0)
    start = time.monotonic()
    for _ in range(6):
        lim.acquire(timeout=10)
    assert time.monotonic() - start >= 5 / 50 * 0.9


def test_try_acquire_with_a_timeout():
    lim = sluice.RateLimiter(20, 0)
    assert lim.try_acquire()
    assert not lim.try_acquire(timeout=0.01)
    assert lim.try_acquire(timeout=5)


def test_a_waiter_at_rate_0_wakes_on_a_rate_change():
    lim = sluice.RateLimiter(0)
    got = []
    t = threading.Thread(target=lambda: got.append(lim.acquire(timeout=30)))
    t.start()
    time.sleep(0.05)
    lim.set_rate(100)
    t.join(30)
    assert got and got[0] < 30


def test_acquire_at_rate_0_times_out():
    with pytest.raises(sluice.DeadlineExceeded):
        sluice.RateLimiter(0).acquire(timeout=0.05)


def test_a_limiter_is_thread_safe():
    lim = sluice.RateLimiter(1000, 0.0)
    admitted = []
    stop = time.monotonic() + 0.5

    def worker() -> None:
        n = 0
        while time.monotonic() < stop:
            if lim.try_acquire():
                n += 1
        admitted.append(n)

    start = time.monotonic()
    ts = [threading.Thread(target=worker) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    elapsed = time.monotonic() - start
    assert sum(admitted) <= 1000 * elapsed + 1


def test_gauge_admits_floor_capacity():
    g = sluice.Gauge(2.7)
    assert g.try_acquire() and g.try_acquire()
    assert not g.try_acquire()
    assert g.in_use == 2
    g.set_capacity(1)  # never revokes a held slot
    g.release()
    assert not g.try_acquire()
    g.release()
    assert g.try_acquire()


def test_gauge_waiters_first_come_first_served():
    g = sluice.Gauge(1)
    g.acquire()
    order = []

    def waiter(i: int) -> None:
        g.acquire(timeout=30)
        order.append(i)
        g.release()

    ts = []
    for i in range(3):
        t = threading.Thread(target=waiter, args=(i,))
        t.start()
        ts.append(t)
        while len(g._waiters) < i + 1:
            time.sleep(0.001)
    g.release()
    for t in ts:
        t.join(30)
    assert order == [0, 1, 2]


def test_gauge_timeout_and_context_manager():
    g = sluice.Gauge(1)
    with g.hold(timeout=1):
        with pytest.raises(sluice.DeadlineExceeded):
            g.acquire(timeout=0.02)
    assert g.in_use == 0
    with pytest.raises(RuntimeError):
        with g:
            raise RuntimeError("boom")
    assert g.in_use == 0  # released on the way out


def test_gauge_capacity_rises_wake_waiters():
    g = sluice.Gauge(0)
    t = threading.Thread(target=g.acquire, kwargs={"timeout": 30})
    t.start()
    time.sleep(0.02)
    g.set_capacity(1)
    t.join(30)
    assert g.in_use == 1
