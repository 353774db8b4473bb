"""Acquire overhead of a lease's limiter: a timed loop, µs per call.

    /usr/bin/python3 clients/python/benchmarks/acquire.py

The limiter is bound to a resource whose lease (from an in-process
doorman.Capacity test server) is 10⁹ permits per second, so every call is
admitted and the loop measures the library alone: acquire() (blocking,
admitted at once), try_acquire() admitted, and try_acquire() refused (on a
limiter at 1 permit per second).
"""

from __future__ import annotations

import pathlib
import sys
import time

here = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(here.parent / "src"))
sys.path.insert(0, str(here.parent / "tests"))

import sluice  # noqa: E402
from conftest import CapacityServer, FakeClock  # noqa: E402


def per_call(f, n: int) -> float:
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            f()
        best = min(best, (time.perf_counter() - start) / n)
    return best * 1e6


def main() -> None:
    clock = FakeClock(time.time())
    srv = CapacityServer(clock, capacity=1e9, lease_length=600)
    with sluice.Client(srv.addr, push=False) as c:
        res = c.resource("bench", 1e9)
        lim = res.rate_limiter()
        while lim.rate < 1e9:
            time.sleep(0.01)
        n = 200_000
        print(f"acquire() admitted:       {per_call(lim.acquire, n):.2f} µs")
        print(f"try_acquire() admitted:   {per_call(lim.try_acquire, n):.2f} µs")
        slow = sluice.RateLimiter(1, 0)
        slow.try_acquire()
        print(f"try_acquire() refused:    {per_call(slow.try_acquire, n):.2f} µs")
    srv.stop()


if __name__ == "__main__":
    main()
