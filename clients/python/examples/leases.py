"""Leases: a share of db/replica's 100 queries per second, enforced locally.

    python3 leases.py [HOST:PORT]
"""

import sys
import time

import sluice

addr = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:15000"

with sluice.Client(addr) as client:  # one per process; close() releases every lease
    replica = client.resource("db/replica", wants=20)  # 20 queries per second
    limiter = replica.rate_limiter(max_burst_seconds=0.1)  # follows the lease

    deadline = time.monotonic() + 10
    while replica.lease() is None:  # the first lease comes within a round trip
        if time.monotonic() > deadline:
            sys.exit("no lease")
        time.sleep(0.01)
    print(f"lease: {replica.capacity:g} queries/s (safe capacity {replica.safe_capacity:g})")

    sent = 0
    start = time.monotonic()
    while time.monotonic() - start < 1:
        limiter.acquire(timeout=1)  # blocks for its turn; never waits on the network
        sent += 1  # ... run one query here
    print(f"sent {sent} queries in 1 s")
    assert sent <= 20 * 1.1 + 1, sent

    # An in-flight limit: at most floor(capacity) at once.
    slots = client.resource("db/tx-slots", wants=3).gauge()
    deadline = time.monotonic() + 10
    while slots.capacity < 3:
        if time.monotonic() > deadline:
            sys.exit("no lease for db/tx-slots")
        time.sleep(0.01)
    with slots.hold(timeout=1):
        print(f"in a transaction: {slots.in_use} of {slots.capacity:g} slots held")
