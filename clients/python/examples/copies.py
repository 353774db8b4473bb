"""Copy-limited sessions: hold sandboxes while using them (Charon).

    python3 copies.py [HOST:PORT]
"""

import sys

import sluice

addr = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:15000"

with sluice.Client(addr) as client:  # closing ends the session: the server releases what is left
    # Up to 3 sandboxes for tenant acme, at least 1, retrying up to 5 s.
    with client.reserve_copies("sandboxes", "acme", copies=3, min_copies=1, max_wait=5) as hold:
        print(f"holding {hold.copies} sandboxes (acme's limit {hold.reservation.domain_limit})")
        assert hold.copies == 2
        try:
            client.reserve_copies("sandboxes", "acme")  # acme's limit is full: no wait
        except sluice.OverLimit as e:
            print(f"a third: {e.code_name}")
        hold.release(1)  # done with one early
        print(f"still holding {hold.copies}")
    # Leaving the block released the rest.
    with client.reserve_copies("sandboxes", "acme", copies=2) as again:
        print(f"holding {again.copies} again")
