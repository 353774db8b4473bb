"""The lease client's refresh: one bulk request, Doorman's 5-second rule,
fallbacks, redirects, failover, pushes and release — stepped by hand on a
fake clock against a doorman.Capacity test server on loopback."""

from __future__ import annotations

import math

import pytest

import sluice
from sluice import _testing
from sluice._proto import leases as v1
from conftest import CapacityServer, FakeClock, counts


def manual(addrs, clock, **kw) -> sluice.Client:
    return _testing.client(addrs, "test-client", clock=clock, manual=True, push=False, **kw)


def run(c: sluice.Client, clock: FakeClock, seconds: float) -> None:
    """Runs the refresh loop for seconds of the fake clock, as the refresh
    thread would: a step, then the clock moved to the next one."""
    end = clock() + seconds
    while True:
        wait = c._leases.step_now()
        if clock() + wait > end:
            clock.advance(end - clock())
            return
        clock.advance(max(wait, 0.001))


def test_one_bulk_request_per_refresh_interval_for_1000_resources(capacity_server, clock):
    c = manual(capacity_server.addr, clock)
    rs = [c.resource(f"bulk/{i}", 1) for i in range(1000)]
    c._leases.step_now()
    assert counts(capacity_server) == [1000]  # added before the first step: one request
    assert all(r.capacity == 1 for r in rs)
    run(c, clock, 50)  # ten refresh intervals of 5 s
    got = counts(capacity_server)[1:]
    assert got == [1000] * 10, got
    c.close()


def test_a_resource_added_later_rejoins_the_bulk_request(capacity_server, clock):
    c = manual(capacity_server.addr, clock)
    c.resource("a", 1)
    c.resource("b", 1)
    c._leases.step_now()
    clock.advance(2)
    c.resource("c", 1)  # new: sent at once, alone (a and b are in their window)
    c._leases.step_now()
    assert counts(capacity_server) == [2, 1]
    run(c, clock, 30)
    assert counts(capacity_server)[2:] and all(n == 3 for n in counts(capacity_server)[2:])
    c.close()


def test_the_5_second_rule_holds_back_a_change_of_wants(capacity_server, clock):
    c = manual(capacity_server.addr, clock)
    r = c.resource("a", 10)
    c._leases.step_now()
    clock.advance(1)
    r.set_wants(20)
    wait = c._leases.step_now()
    assert counts(capacity_server) == [1]  # not within 5 s of the last
    assert wait == pytest.approx(4)
    clock.advance(wait)
    c._leases.step_now()
    assert len(capacity_server.requests) == 2 and capacity_server.requests[1].resource[0].wants == 20
    assert capacity_server.requests[1].resource[0].HasField("has")
    assert r.capacity == 20
    c.close()


def test_safe_capacity_after_the_lease_expires(clock):
    s = CapacityServer(clock, lease_length=10)
    c = manual(s.addr, clock)
    r = c.resource("a", 5)
    c._leases.step_now()
    assert r.capacity == 5 and r.lease() is not None and r.safe_capacity == 1.5
    s.stop()  # unreachable from now on
    run(c, clock, 12)
    assert r.lease() is None
    assert r.capacity == 1.5  # the safe capacity the server sent
    c.close()


@pytest.mark.parametrize("mode, want", [(sluice.Mode.PESSIMISTIC, 0), (sluice.Mode.OPTIMISTIC, 5)])
def test_fallback_modes(clock, mode, want):
    s = CapacityServer(clock, lease_length=10)
    c = manual(s.addr, clock, mode=mode)
    r = c.resource("a", 5)
    c._leases.step_now()
    s.stop()
    run(c, clock, 12)
    assert r.capacity == want
    c.close()


def test_mastership_redirect_is_followed(clock):
    master = CapacityServer(clock)
    other = CapacityServer(clock)
    other.master = master.addr
    c = manual(other.addr, clock)
    r = c.resource("a", 3)
    c._leases.step_now()
    assert r.capacity == 3
    assert c.server == master.addr
    assert len(other.requests) == 1 and len(master.requests) == 1
    c.close()
    master.stop()
    other.stop()


def test_failover_to_the_next_address(clock):
    dead = CapacityServer(clock)
    dead.stop()
    alive = CapacityServer(clock)
    c = manual([dead.addr, alive.addr], clock)
    r = c.resource("a", 3)
    run(c, clock, 5)
    assert r.capacity == 3 and c.server == alive.addr
    c.close()
    alive.stop()


def test_pushed_leases_apply_when_newer(capacity_server, clock):
    c = manual(capacity_server.addr, clock)
    r = c.resource("a", 50)
    c._leases.step_now()
    exp = int(clock()) + 30
    c._leases.apply_pushed([v1.PushedLease(resource_id="a", capacity=40, expiry_time=exp, refresh_interval=5, sequence=7)])
    assert r.capacity == 40
    c._leases.apply_pushed([v1.PushedLease(resource_id="a", capacity=10, expiry_time=exp, refresh_interval=5, sequence=6)])
    assert r.capacity == 40  # older than the lease held
    c.close()


def test_handles_share_a_lease_and_release_it_with_the_last(capacity_server, clock):
    c = manual(capacity_server.addr, clock)
    a = c.resource("x", 2)
    b = c.resource("x", 3)
    assert a.total_wants == 5
    seen = []
    a.on_change(seen.append)
    c._leases.step_now()
    assert a.capacity == b.capacity == 5
    b.release()
    assert a.total_wants == 2 and capacity_server.released == []
    a.release()
    assert capacity_server.released == [["x"]]
    assert a.capacity == 0
    assert seen == [0, 5, 0]
    with pytest.raises(sluice.Closed):
        a.set_wants(1)
    c.close()


def test_close_releases_every_lease(capacity_server, clock):
    # A real (threaded) client: close gives back every lease in one request.
    c = sluice.Client(capacity_server.addr, "closing", push=False)
    rs = [c.resource(f"r{i}", 1) for i in range(3)]
    limiter = rs[0].rate_limiter()
    c.close()
    assert sorted(capacity_server.released[-1]) == ["r0", "r1", "r2"]
    assert all(r.capacity == 0 for r in rs)
    assert limiter.rate == 0
    with pytest.raises(sluice.Closed):
        c.resource("r9", 1)


def test_kill_switch(capacity_server, clock):
    c = manual(capacity_server.addr, clock)
    r = c.resource("a", 1)
    lim = r.rate_limiter()
    c.set_kill_switch(True)
    assert r.capacity == math.inf and lim.rate == math.inf
    c.set_kill_switch(False)
    assert r.capacity == 0
    c.close()


@pytest.mark.parametrize("wants", [-1, float("nan"), float("inf"), "x"])
def test_bad_wants(capacity_server, clock, wants):
    c = manual(capacity_server.addr, clock)
    with pytest.raises(sluice.InvalidArgument) as e:
        c.resource("a", wants)
    assert e.value.code_name == "INVALID_ARGUMENT"
    with pytest.raises(sluice.InvalidArgument):
        c.resource("", 1)
    c.close()
