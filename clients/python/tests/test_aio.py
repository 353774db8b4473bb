"""sluice.aio against a real `sluice server` on loopback, and its lease
refresh stepped on a fake clock against a doorman.Capacity test server —
beside the threaded client, which it must match request for request.

Each test runs its coroutine with asyncio.run inside a plain pytest test
(no pytest-asyncio)."""

from __future__ import annotations

import asyncio
import math
import threading
import time

import grpc
import pytest

import sluice
import sluice.aio
from sluice import _testing
from conftest import CapacityServer, FakeClock, counts


def run(coro):
    return asyncio.run(coro)


async def eventually(cond, seconds: float = 30.0) -> None:
    end = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"not within {seconds} s")
        await asyncio.sleep(0.02)


# --- against a real server -------------------------------------------------------


def test_a_lease_and_its_limiter(server):
    async def main():
        async with sluice.aio.Client(server) as c:
            async with c.resource("fair/aio-lease", 40) as r:
                lim = r.rate_limiter(max_burst_seconds=0.1)
                await eventually(lambda: r.capacity == 40)
                assert lim.rate == 40 and r.lease() is not None and r.lease().refresh_interval == 5
                n, start = 0, time.monotonic()
                while time.monotonic() - start < 0.5:
                    await lim.acquire(timeout=1)
                    n += 1
                # At most the rate over the time taken, the burst (0.1 s of it) and the first permit.
                assert n <= 40 * (time.monotonic() - start) + 4 + 1
            assert r.capacity == 0 and lim.rate == 0  # released when the block ended
            await r.release()  # twice: nothing

    run(main())


def test_fair_shares_across_aio_and_threaded_clients(server):
    async def main():
        with sluice.Client(server, "py-threaded") as a:
            async with sluice.aio.Client(server, "py-aio") as b:
                ra = a.resource("fair/aio-shares", 80)
                await eventually(lambda: ra.capacity == 80)
                rb = b.resource("fair/aio-shares", 80)
                await eventually(lambda: rb.capacity > 0)
                assert ra.capacity + rb.capacity <= 100
                await eventually(lambda: ra.capacity == 50 and rb.capacity == 50, 60)
                ra.release()
                await eventually(lambda: rb.capacity == 80)

    run(main())


def test_allow_and_quota_allow(server):
    async def main():
        async with sluice.aio.Client(server) as c:
            got = [await c.allow("api", "small-aio", max_wait=0) for _ in range(1)]
            assert got[0].status == "REJECTED_NO_BUCKET"
            q = await c.quota_allow("api", "quota")
            assert q.status == "REJECTED_NO_BUCKET" and not q.ok
            assert (await c.quota_allow("api", "bad name")).status == "REJECTED_INVALID_REQUEST"
            with pytest.raises(sluice.InvalidArgument) as e:
                await c.allow("api", "no spaces")
            assert "domain" in e.value.message

    run(main())


def test_a_zero_timeout_is_zero(server):
    """timeout=0 is no time at all in every awaitable that takes one:
    DeadlineExceeded at once, nothing sent or taken."""

    async def main():
        async with sluice.aio.Client(server, call_timeout=30) as c:
            assert (await c.allow("api", "zero", timeout=None)).status == "REJECTED_NO_BUCKET"
            for call in (
                lambda: c.allow("api", "zero", timeout=0),
                lambda: c.quota_allow("api", "zero", timeout=0),
                lambda: c.reserve_copies("sandboxes", "zero", timeout=0),
                lambda: c.seize("no-such-transfer", timeout=0),
            ):
                with pytest.raises(sluice.DeadlineExceeded):
                    await call()
            async with c.reserve_copies("sandboxes", "zero") as h:
                with pytest.raises(sluice.DeadlineExceeded):
                    await h.release(timeout=0)
                assert h.copies == 1  # nothing released
                with pytest.raises(sluice.DeadlineExceeded):
                    await h.transfer(1, timeout=-1)
                assert h.copies == 1
                with pytest.raises(sluice.DeadlineExceeded):  # the session is open now: still no time
                    await c.reserve_copies("sandboxes", "zero", timeout=0)
            lim = sluice.aio.RateLimiter(0)
            with pytest.raises(sluice.DeadlineExceeded):
                await lim.acquire(timeout=0)
            g = sluice.aio.Gauge(0)
            with pytest.raises(sluice.DeadlineExceeded):
                await g.acquire(timeout=0)
            r = c.resource("fair/aio-zero", 1)
            with pytest.raises(sluice.DeadlineExceeded):
                await r.release(timeout=0)  # nothing sent; released here all the same
            assert r.capacity == 0

    run(main())


def test_copies_in_a_session(server):
    async def main():
        async with sluice.aio.Client(server) as a, sluice.aio.Client(server) as b:
            async with a.reserve_copies("sandboxes", "aio-d1", copies=2) as h:
                assert h.copies == 2 and not h.degraded and h.session_id
                assert h.reservation.domain_limit == 2 and h.reservation.global_limit == 3
                with pytest.raises(sluice.OverLimit) as e:
                    await b.reserve_copies("sandboxes", "aio-d1")
                assert e.value.code_name == "RESOURCE_EXHAUSTED" and e.value.attempts == 1
                await h.release(1)
                assert h.copies == 1
                with pytest.raises(sluice.FailedPrecondition):
                    await h.release(2)
                async with b.reserve_copies("sandboxes", "aio-d1") as h2:
                    assert h2.copies == 1
            assert h.copies == 0  # the block released the rest
            h3 = await b.reserve_copies("sandboxes", "aio-d2", copies=3, min_copies=1)
            assert h3.copies == 2  # the domain's limit
            await h3.release()

    run(main())


def test_reserve_waits_for_copies_without_blocking_the_loop(server):
    async def main():
        async with sluice.aio.Client(server, backoff_unit=0.05) as a, sluice.aio.Client(server) as b:
            h = await a.reserve_copies("sandboxes", "aio-wait", copies=2)

            async def release_later():
                await asyncio.sleep(0.2)
                await h.release()

            t = asyncio.create_task(release_later())  # runs while b's reserve waits
            async with b.reserve_copies("sandboxes", "aio-wait", copies=1, max_wait=30) as h2:
                assert h2.copies == 1 and h2.attempts > 1
            await t
            assert h.copies == 0

    run(main())


def test_transfer_between_the_apis(server):
    async def main():
        with sluice.Client(server) as threaded:
            async with sluice.aio.Client(server) as a:
                h = await a.reserve_copies("sandboxes", "aio-t", copies=2)
                tid = await h.transfer(1)
                assert h.copies == 1
                got = threaded.seize(tid)
                assert got.copies == 1 and got.domain == "aio-t"
                tid2 = got.transfer(1)
                async with a.seize(tid2) as back:
                    assert back.copies == 1 and back.resource == "sandboxes"
                    with pytest.raises(sluice.NotFound):
                        await a.seize(tid2)  # once
                await h.release()

    run(main())


def test_close_releases_the_session(server):
    async def main():
        a = sluice.aio.Client(server)
        h = await a.reserve_copies("sandboxes", "aio-closing", copies=2)
        await a.close()
        assert h.copies == 0 and isinstance(h.err(), sluice.Closed)
        async with sluice.aio.Client(server) as b, b.reserve_copies("sandboxes", "aio-closing", copies=2) as h2:
            assert h2.copies == 2
        with pytest.raises(sluice.Closed):
            await a.reserve_copies("sandboxes", "aio-closing")
        with pytest.raises(sluice.Closed):
            a.resource("fair/x", 1)
        await a.close()  # twice: nothing

    run(main())


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
    async def main():
        async with sluice.aio.Client(server) as c:
            with pytest.raises(error):
                await call(c)

    run(main())


def test_unreachable_server():
    async def main():
        async with sluice.aio.Client("127.0.0.1:1", call_timeout=0.5) as c:
            with pytest.raises(sluice.Unavailable):
                await c.allow("api", "x")
            h = await c.reserve_copies("sandboxes", "d", copies=3, min_copies=1)  # fail-open
            assert h.degraded and h.copies == 1
            await h.release()
        async with sluice.aio.Client("127.0.0.1:1", call_timeout=0.5, fail_open=False) as c:
            with pytest.raises(sluice.Unavailable):
                await c.reserve_copies("sandboxes", "d")

    run(main())


def test_the_event_loop_is_never_blocked(server, monkeypatch):
    """The asyncio client makes no blocking gRPC channel, never calls
    time.sleep and starts no thread of its own, through leases, limiter
    waits, Allow, a reserve that retries, a keep-alive and close."""

    def forbidden(*a, **k):
        raise AssertionError("blocking call from sluice.aio")

    monkeypatch.setattr(grpc, "insecure_channel", forbidden)
    monkeypatch.setattr(grpc, "secure_channel", forbidden)
    monkeypatch.setattr(time, "sleep", forbidden)

    async def main():
        async with sluice.aio.Client(server, backoff_unit=0.02, session_ttl=0.6) as c, sluice.aio.Client(server) as other:
            r = c.resource("fair/aio-loop", 20)
            lim = r.rate_limiter(0)
            await eventually(lambda: r.capacity == 20)
            for _ in range(3):
                await lim.acquire(timeout=30)
            assert (await c.allow("api", "aio-loop")).status == "REJECTED_NO_BUCKET"  # api/small belongs to test_server
            h = await other.reserve_copies("sandboxes", "aio-loop", copies=2)
            asyncio.get_running_loop().call_later(0.1, lambda: asyncio.ensure_future(h.release()))
            h2 = await c.reserve_copies("sandboxes", "aio-loop", max_wait=30)
            await asyncio.sleep(0.5)  # keep-alives at a third of 0.6 s
            assert h2.err() is None and h2.copies == 1
            assert not [t.name for t in threading.enumerate() if t.name.startswith("sluice")]

    run(main())


def test_a_session_lost_is_reported(server):
    """A session the server no longer knows (closed behind the client's
    back) is lost: on_session_lost is called, the hold's copies are 0."""

    async def main():
        lost = []
        async with sluice.aio.Client(server, session_ttl=0.9, on_session_lost=lambda sid, e: lost.append((sid, e))) as c:
            h = await c.reserve_copies("sandboxes", "aio-lost")
            with sluice.Client(server) as killer:
                from sluice import _proto
                from sluice._proto import limits as v1

                killer._channels.method(server, _proto.CLOSE_SESSION)(v1.CloseSessionRequest(session_id=h.session_id), timeout=5)
            await eventually(lambda: lost)
            assert lost[0][0] == h.session_id and isinstance(lost[0][1], sluice.SessionLost)
            assert h.copies == 0 and isinstance(h.err(), sluice.SessionLost)
            async with c.reserve_copies("sandboxes", "aio-lost") as again:  # a new session
                assert again.copies == 1 and again.session_id != h.session_id

    run(main())


# --- the lease refresh on a fake clock --------------------------------------------


async def arun(c, clock: FakeClock, seconds: float) -> None:
    """Runs the refresh loop for seconds of the fake clock, as the refresh
    task would: a step, then the clock moved to the next one."""
    end = clock() + seconds
    while True:
        wait = await c._leases.step_now()
        if clock() + wait > end:
            clock.advance(end - clock())
            return
        clock.advance(max(wait, 0.001))


def srun(c, clock: FakeClock, seconds: float) -> None:
    end = clock() + seconds
    while True:
        wait = c._leases.step_now()
        if clock() + wait > end:
            clock.advance(end - clock())
            return
        clock.advance(max(wait, 0.001))


def test_one_bulk_request_per_refresh_interval_for_1000_resources(capacity_server, clock):
    async def main():
        c = _testing.aio_client(capacity_server.addr, "aio", clock=clock, manual=True, push=False)
        rs = [c.resource(f"bulk/{i}", 1) for i in range(1000)]
        await c._leases.step_now()
        assert counts(capacity_server) == [1000]
        assert all(r.capacity == 1 for r in rs)
        await arun(c, clock, 50)
        assert counts(capacity_server)[1:] == [1000] * 10
        await c.close()

    run(main())


def test_redirects_and_failover(clock):
    async def main():
        master = CapacityServer(clock)
        other = CapacityServer(clock)
        other.master = master.addr
        dead = CapacityServer(clock)
        dead.stop()
        c = _testing.aio_client([dead.addr, other.addr], "aio", clock=clock, manual=True, push=False)
        r = c.resource("a", 3)
        await arun(c, clock, 5)  # the dead one fails; Discovery on the next names the master
        assert r.capacity == 3 and c.server == master.addr
        await c.close()
        master.stop()
        other.stop()

    run(main())


def test_fallback_after_expiry(clock):
    async def main():
        s = CapacityServer(clock, lease_length=10)
        c = _testing.aio_client(s.addr, "aio", clock=clock, manual=True, push=False, mode=sluice.Mode.OPTIMISTIC)
        r = c.resource("a", 5)
        seen = []
        r.on_change(seen.append)
        await c._leases.step_now()
        assert r.capacity == 5 and r.safe_capacity == 1.5
        s.stop()
        await arun(c, clock, 12)
        assert r.lease() is None and r.capacity == 5  # what it wants
        c.set_kill_switch(True)
        assert r.capacity == math.inf
        await c.close()
        assert seen == [5, math.inf, 0]  # optimistic: what it wants from the start

    run(main())


# Resources added, re-wanted and released at times of the fake clock.
SCRIPT = [
    (0.0, "add", "a", 1.0),
    (0.0, "add", "b", 2.0),
    (2.0, "add", "c", 3.0),
    (3.0, "wants", "a", 5.0),
    (4.0, "add2", "b", 1.0),  # a second handle of b
    (9.5, "release", "c", None),
    (12.0, "wants", "b", 7.0),
    (21.0, "release2", "b", None),
    (26.0, "add", "d", 4.0),
]
END = 60.0


def _log(s: CapacityServer):
    with s.lock:
        return [
            (round(t - 1_800_000_000.0, 3), sorted((r.resource_id, r.wants, r.HasField("has")) for r in req.resource))
            for t, req in zip(s.times, s.requests)
        ] + [("released", sorted(ids)) for ids in s.released]


def test_the_refresh_is_the_threaded_clients():
    """The same script of resources on the same fake clock makes the same
    GetCapacity requests, at the same times, carrying the same wants, from
    the threaded client and the asyncio one: one refresh planner."""
    ca, cb = FakeClock(), FakeClock()
    sa, sb = CapacityServer(ca, lease_length=12, refresh=4), CapacityServer(cb, lease_length=12, refresh=4)
    try:
        c = _testing.client(sa.addr, "same", clock=ca, manual=True, push=False)
        hs = {}
        for at, op, rid, arg in SCRIPT:
            srun(c, ca, at - (ca() - 1_800_000_000.0))
            if op == "add":
                hs[rid] = c.resource(rid, arg)
            elif op == "add2":
                hs[rid + "2"] = c.resource(rid, arg)
            elif op == "wants":
                hs[rid].set_wants(arg)
            else:
                hs[rid + ("2" if op == "release2" else "")].release()
        srun(c, ca, END - (ca() - 1_800_000_000.0))
        c.close()

        async def main():
            c = _testing.aio_client(sb.addr, "same", clock=cb, manual=True, push=False)
            hs = {}
            for at, op, rid, arg in SCRIPT:
                await arun(c, cb, at - (cb() - 1_800_000_000.0))
                if op == "add":
                    hs[rid] = c.resource(rid, arg)
                elif op == "add2":
                    hs[rid + "2"] = c.resource(rid, arg)
                elif op == "wants":
                    hs[rid].set_wants(arg)
                else:
                    await hs[rid + ("2" if op == "release2" else "")].release()
            await arun(c, cb, END - (cb() - 1_800_000_000.0))
            await c.close()

        run(main())
        threaded, aio = _log(sa), _log(sb)
        assert len(threaded) > 12
        assert aio == threaded
    finally:
        sa.stop()
        sb.stop()
