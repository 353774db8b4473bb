"""sluice.aio's rate limiter and gauge: awaiting, cancellation, many tasks.
(Their arithmetic is the threaded ones'; test_ratelimit.py runs the
time-as-input tests on both.)"""

from __future__ import annotations

import asyncio
import time

import pytest

import sluice
import sluice.aio


def run(coro):
    return asyncio.run(coro)


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_acquire_is_free_without_suspending():
    async def main():
        lim = sluice.aio.RateLimiter(float("inf"))
        ran = []
        asyncio.get_running_loop().call_soon(ran.append, 1)
        for _ in range(100):
            await lim.acquire()
        assert ran == []  # never yielded to the loop

    run(main())


def test_acquire_fails_at_once_past_its_timeout():
    async def main():
        lim = sluice.aio.RateLimiter(0.01, 0)
        await lim.acquire()
        with pytest.raises(sluice.DeadlineExceeded):
            await lim.acquire(timeout=0.1)  # the next permit is 100 s away
        assert lim.tokens() > -1.01  # nothing taken

    run(main())


def test_acquire_waits_its_turn():
    async def main():
        lim = sluice.aio.RateLimiter(50, 0)
        start = time.monotonic()
        for _ in range(6):
            await lim.acquire(timeout=10)
        assert time.monotonic() - start >= 5 / 50 * 0.9

    run(main())


def test_a_waiter_at_rate_0_wakes_on_a_rate_change():
    async def main():
        lim = sluice.aio.RateLimiter(0)
        t = asyncio.create_task(lim.acquire(timeout=30))
        await asyncio.sleep(0.05)
        assert not t.done()
        lim.set_rate(100)
        assert await asyncio.wait_for(t, 30) < 30

    run(main())


def test_acquire_at_rate_0_times_out():
    async def main():
        with pytest.raises(sluice.DeadlineExceeded):
            await sluice.aio.RateLimiter(0).acquire(timeout=0.05)

    run(main())


def test_a_rate_change_retimes_a_waiter():
    """A waiter's turn moves with the schedule: 1.5 s still owed at 0.5/s
    is 0.1875 s at 4/s."""

    async def main():
        clock = Clock()
        lim = sluice.aio.RateLimiter(0.5, 0, clock=clock)
        await lim.acquire()  # free; the next is at 102
        t = asyncio.create_task(lim.acquire(timeout=600))
        await asyncio.sleep(0)
        clock.t = 100.5
        lim.set_rate(4)  # at = 100.5 + 1.5 * 0.125 = 100.6875
        await asyncio.sleep(0)
        clock.t = 100.7
        assert await asyncio.wait_for(t, 30) == pytest.approx(0.7)

    run(main())


def test_cancelling_a_waiter_gives_its_permits_back():
    async def main():
        clock = Clock()
        lim = sluice.aio.RateLimiter(1, 0, clock=clock)
        await lim.acquire()  # free: the next is at 101
        t = asyncio.create_task(lim.acquire(2))
        await asyncio.sleep(0)
        assert lim.tokens() == pytest.approx(-3)  # 101 + 2 permits paid ahead
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
        assert lim.tokens() == pytest.approx(-1)  # only the first's interval
        clock.t = 101
        assert lim.try_acquire()

    run(main())


def test_a_thousand_tasks_on_one_limiter():
    """1 000 concurrent tasks on one limiter at 2 000 permits/s: every one
    is admitted once, in turn, and no faster than the rate."""

    async def main():
        lim = sluice.aio.RateLimiter(2000, 0)
        start = time.monotonic()
        waits = await asyncio.gather(*(lim.acquire(timeout=60) for _ in range(1000)))
        elapsed = time.monotonic() - start
        assert len(waits) == 1000
        assert elapsed >= 999 / 2000 * 0.9
        assert not lim.try_acquire_at(start, 1)  # the schedule ran ahead of start

    run(main())


def test_gauge_first_come_first_served():
    async def main():
        g = sluice.aio.Gauge(1)
        await g.acquire()
        order = []

        async def waiter(i):
            async with g.hold(timeout=30):
                order.append(i)

        ts = [asyncio.create_task(waiter(i)) for i in range(3)]
        await asyncio.sleep(0)
        assert not g.try_acquire()  # others are waiting
        g.release()
        await asyncio.wait_for(asyncio.gather(*ts), 30)
        assert order == [0, 1, 2] and g.in_use == 0

    run(main())


def test_gauge_timeout_cancel_and_capacity():
    async def main():
        g = sluice.aio.Gauge(1)
        async with g:
            with pytest.raises(sluice.DeadlineExceeded):
                await g.acquire(timeout=0.02)
            t = asyncio.create_task(g.acquire())
            await asyncio.sleep(0)
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t
            assert g.in_use == 1 and not g._core.waiters  # the cancelled waiter took nothing
            t2 = asyncio.create_task(g.acquire(timeout=30))
            await asyncio.sleep(0)
            g.set_capacity(2.5)  # wakes it: floor(2.5) slots
            await asyncio.wait_for(t2, 30)
            assert g.in_use == 2
            g.release()
        assert g.in_use == 0
        with pytest.raises(RuntimeError):
            async with g:
                raise RuntimeError("boom")
        assert g.in_use == 0  # released on the way out

    run(main())


def test_gauge_slot_granted_to_a_cancelled_task_is_given_back():
    async def main():
        g = sluice.aio.Gauge(0)
        t = asyncio.create_task(g.acquire())
        await asyncio.sleep(0)
        g.set_capacity(1)  # granted, but the task has not run yet
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
        assert g.in_use == 0 and g.try_acquire()

    run(main())
