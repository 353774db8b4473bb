"""The library against a real `sluice server` on loopback: leases, Allow,
the quota service's Allow, copies in sessions, errors."""

from __future__ import annotations

import time

import pytest

import sluice


def eventually(cond, seconds: float = 30.0) -> None:
    end = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"not within {seconds} s")
        time.sleep(0.02)


def test_a_lease_and_its_limiter(server):
    with sluice.Client(server) as c:
        r = c.resource("fair/py-lease", 40)
        lim = r.rate_limiter(max_burst_seconds=0.1)
        eventually(lambda: r.capacity == 40)
        assert lim.rate == 40
        lease = r.lease()
        assert lease is not None and lease.refresh_interval == 5 and lease.expiry > time.time()
        n, start = 0, time.monotonic()
        while time.monotonic() - start < 0.5:
            lim.acquire(timeout=1)
            n += 1
        # At most the rate over the time taken, the burst (0.1 s of it) and the first permit.
        assert n <= 40 * (time.monotonic() - start) + 4 + 1
    assert r.capacity == 0  # closed: released


def test_fair_shares_and_a_release(server):
    with sluice.Client(server, "py-a") as a, sluice.Client(server, "py-b") as b:
        ra = a.resource("fair/py-shares", 80)
        eventually(lambda: ra.capacity == 80)
        rb = b.resource("fair/py-shares", 80)
        eventually(lambda: rb.capacity > 0)
        assert ra.capacity + rb.capacity <= 100
        eventually(lambda: ra.capacity == 50 and rb.capacity == 50, 60)
        ra.release()
        eventually(lambda: rb.capacity == 80)  # pushed at once, or at b's next refresh


def test_safe_capacity_is_sent(server):
    with sluice.Client(server) as c:
        r = c.resource("safe/x", 5)
        eventually(lambda: r.safe_capacity == 2)


def test_allow(server):
    with sluice.Client(server) as c:
        got = [c.allow("api", "small", max_wait=0) for _ in range(4)]
        assert [a.status for a in got] == ["OK", "OK", "OK", "REJECTED_TIMEOUT"]
        assert [a.granted for a in got] == [1, 1, 1, 0]
        assert got[0].ok and not got[3].ok and got[3].retry_after is not None
        assert got[0].limit == 3 and got[0].bucket == "named"
        assert c.allow("nosuch", "x").status == "REJECTED_NO_BUCKET"
        with pytest.raises(sluice.InvalidArgument) as e:
            c.allow("api", "no spaces")
        assert "domain" in e.value.message


def test_a_zero_timeout_is_zero(server):
    """timeout=0 is no time at all, not "the default": the call fails at
    once (a deadline already passed), in every call that takes one."""
    with sluice.Client(server, call_timeout=30) as c:
        assert c.allow("api", "zero", timeout=None).status == "REJECTED_NO_BUCKET"  # the call timeout
        with pytest.raises(sluice.DeadlineExceeded):
            c.allow("api", "zero", timeout=0)
        with pytest.raises(sluice.DeadlineExceeded):
            c.quota_allow("api", "zero", timeout=0)
        with pytest.raises(sluice.DeadlineExceeded):
            c.reserve_copies("sandboxes", "zero", timeout=0)  # no session yet: none opened
        with pytest.raises(sluice.DeadlineExceeded):
            c.seize("no-such-transfer", timeout=0)
        with c.reserve_copies("sandboxes", "zero") as h:
            with pytest.raises(sluice.DeadlineExceeded):
                c.reserve_copies("sandboxes", "zero", timeout=0)  # a live session: still no time
            with pytest.raises(sluice.DeadlineExceeded):
                h.release(timeout=0)
            assert h.copies == 1  # nothing released
            with pytest.raises(sluice.DeadlineExceeded):
                h.transfer(1, timeout=-1)
            assert h.copies == 1
        lim = sluice.RateLimiter(0)
        with pytest.raises(sluice.DeadlineExceeded):
            lim.acquire(timeout=0)
        assert not lim.try_acquire(timeout=0)
        with pytest.raises(sluice.DeadlineExceeded):
            sluice.Gauge(0).acquire(timeout=0)
        r = c.resource("fair/py-zero", 1)
        with pytest.raises(sluice.DeadlineExceeded):
            r.release(timeout=0)  # nothing sent; released here all the same
        assert r.capacity == 0


def test_a_resource_is_a_context_manager(server):
    with sluice.Client(server) as c:
        with c.resource("fair/py-with", 10) as r:
            eventually(lambda: r.capacity == 10)
        assert r.capacity == 0  # released when the block ended
        r.release()  # twice: nothing


def test_quota_service_allow(server):
    with sluice.Client(server) as c:
        q = c.quota_allow("api", "quota", tokens=1)
        assert q.status == "REJECTED_NO_BUCKET" and not q.ok
        assert c.quota_allow("api", "bad name").status == "REJECTED_INVALID_REQUEST"


def test_copies_in_a_session(server):
    with sluice.Client(server) as a, sluice.Client(server) as b:
        with a.reserve_copies("sandboxes", "d1", copies=2) as h:
            assert h.copies == 2 and not h.degraded and h.session_id
            assert h.reservation.domain_limit == 2 and h.reservation.global_limit == 3
            with pytest.raises(sluice.OverLimit) as e:
                b.reserve_copies("sandboxes", "d1")
            assert e.value.code_name == "RESOURCE_EXHAUSTED" and e.value.attempts == 1
            h.release(1)
            assert h.copies == 1
            with pytest.raises(sluice.FailedPrecondition):
                h.release(2)
            with b.reserve_copies("sandboxes", "d1") as h2:
                assert h2.copies == 1
        assert h.copies == 0  # the with block released the rest
        with b.reserve_copies("sandboxes", "d2", copies=3, min_copies=1) as h3:
            assert h3.copies == 2  # the domain's limit


def test_reserve_waits_for_copies(server):
    with sluice.Client(server, backoff_unit=0.05) as a, sluice.Client(server) as b:
        h = a.reserve_copies("sandboxes", "wait", copies=2)
        start = time.monotonic()
        import threading

        threading.Timer(0.2, h.release).start()
        with b.reserve_copies("sandboxes", "wait", copies=1, max_wait=10) as h2:
            assert h2.copies == 1
        assert time.monotonic() - start >= 0.15


def test_transfer_and_seize(server):
    with sluice.Client(server) as a, sluice.Client(server) as b:
        h = a.reserve_copies("sandboxes", "t", copies=2)
        tid = h.transfer(1)
        assert h.copies == 1
        a.close()  # closing a's session does not release staged copies
        with b.seize(tid) as got:
            assert got.resource == "sandboxes" and got.domain == "t" and got.copies == 1
            with pytest.raises(sluice.NotFound):
                b.seize(tid)  # once


def test_close_releases_the_session(server):
    a = sluice.Client(server)
    h = a.reserve_copies("sandboxes", "closing", copies=2)
    a.close()
    assert h.copies == 0 and isinstance(h.err(), sluice.Closed)
    with sluice.Client(server) as b, b.reserve_copies("sandboxes", "closing", copies=2) as h2:
        assert h2.copies == 2
    with pytest.raises(sluice.Closed):
        a.reserve_copies("sandboxes", "closing")


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda c: c.reserve_copies("sandboxes", "d", copies=0), sluice.InvalidArgument),
        (lambda c: c.reserve_copies("sandboxes", "d", copies=2, min_copies=3), sluice.InvalidArgument),
        (lambda c: c.reserve_copies("nosuch", "d"), sluice.NotFound),
        (lambda c: c.reserve_copies("api", "small"), sluice.FailedPrecondition),
        (lambda c: c.seize(""), sluice.InvalidArgument),
    ],
)
def test_copy_errors(server, call, error):
    with sluice.Client(server) as c:
        with pytest.raises(error) as e:
            call(c)
        assert isinstance(e.value, sluice.SluiceError)


def test_unreachable_server(sluice_bin):
    with sluice.Client("127.0.0.1:1", call_timeout=0.5) as c:
        with pytest.raises(sluice.Unavailable) as e:
            c.allow("api", "x")
        assert e.value.code_name == "UNAVAILABLE"
        h = c.reserve_copies("sandboxes", "d", copies=3, min_copies=1)  # fail-open: the minimum, by the client alone
        assert h.degraded and h.copies == 1
        h.release()
    with sluice.Client("127.0.0.1:1", call_timeout=0.5, fail_open=False) as c:
        with pytest.raises(sluice.Unavailable):
            c.reserve_copies("sandboxes", "d")
