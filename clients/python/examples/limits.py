"""Server-side limits: ask before each login (a token bucket per user).

    python3 limits.py [HOST:PORT]
"""

import sys

import sluice

addr = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:15000"

with sluice.Client(addr) as client:
    statuses = []
    for attempt in range(6):
        a = client.allow("logins", "user-42", tokens=1, max_wait=0)
        statuses.append(a.status)
        if a.ok:
            print(f"login {attempt + 1}: allowed ({a.remaining:.0f} left of {a.limit})")
        else:
            print(f"login {attempt + 1}: {a.status}, retry after {a.retry_after:.2f} s")
    assert statuses == ["OK"] * 5 + ["REJECTED_TIMEOUT"], statuses

    try:
        client.allow("logins", "not a user")
    except sluice.InvalidArgument as e:  # the server names the field
        print(f"refused: {e.code_name}: {e.message}")
