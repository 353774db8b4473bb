"""asyncio: the three jobs with sluice.aio, on one event loop.

    python3 aio.py [HOST:PORT]
"""

import asyncio
import sys
import time

import sluice
import sluice.aio

addr = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:15000"


async def query(limiter: sluice.aio.RateLimiter) -> None:
    await limiter.acquire(timeout=5)  # waits for its turn without blocking the loop
    ...  # run one query here


async def main() -> None:
    async with sluice.aio.Client(addr) as client:  # close() releases every lease and the session
        # Leases: 20 queries per second of db/replica's 100, enforced here.
        async with client.resource("db/replica", wants=20) as replica:
            limiter = replica.rate_limiter(max_burst_seconds=0.1)
            deadline = time.monotonic() + 10
            while replica.lease() is None:  # the first lease comes within a round trip
                if time.monotonic() > deadline:
                    sys.exit("no lease")
                await asyncio.sleep(0.01)
            start = time.monotonic()
            await asyncio.gather(*(query(limiter) for _ in range(30)))  # 30 concurrent queries
            took = time.monotonic() - start
            print(f"30 queries at {replica.capacity:g}/s took {took:.2f} s")
            assert took >= 29 / 20 * 0.9 - 0.1, took  # no faster than the lease (less the 0.1 s burst)

        # Server-side limits: a token bucket per user.
        statuses = [(await client.allow("logins", "user-7", max_wait=0)).status for _ in range(6)]
        print("logins:", statuses)
        assert statuses == ["OK"] * 5 + ["REJECTED_TIMEOUT"], statuses

        # Copy-limited sessions: hold sandboxes for the block.
        async with client.reserve_copies("sandboxes", "acme", copies=3, min_copies=1, max_wait=5) as hold:
            print(f"holding {hold.copies} sandboxes")
            assert hold.copies == 2
            try:
                await client.reserve_copies("sandboxes", "acme")  # acme's limit is full: no wait
            except sluice.OverLimit as e:
                print(f"a third: {e.code_name}")
        # Leaving the block released them.


asyncio.run(main())
