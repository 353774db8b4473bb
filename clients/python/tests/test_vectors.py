"""The shared vectors (clients/vectors/*.json, docs/clients.md "The
vectors") run on the Python client: the behaviour all four clients share,
pinned as data. Each file's "schema" says how to run it; the Go tests that
run them are ratelimit/vectors_test.go, client/vectors_test.go,
client/limits/vectors_test.go and vectors_internal_test.go.

Where both APIs run the behaviour through their own code, both are run
here: the refresh planner on the threaded client and on ``sluice.aio``
(each stepped by hand on a fake clock against a scripted server), Charon's
schedules and the gRPC codes through both clients' ``reserve_copies``, the
lease backoff through both clients' refresh steps, the limiter through both
``RateLimiter`` classes. The pure rules both APIs share — ``BurstyCore``,
``_Retry`` (the lease backoff), ``_SessionBook.retry_delay`` (Charon's
jitter), ``errors.error_for`` — are also run once on their own.

Jitter draws are fixed by replacing the ``random`` module a client module
uses with a :class:`random.Random` whose ``random()`` answers the draw
``u`` (retry.json: "Python: random.random"), or a seeded one.

Where Python differs from what the data pins for other languages, the
test reads the documented difference (docs/clients.md) and checks that it
still holds, rather than skipping: Charon's request of hits (retry.json's
"call": "request") is Go's alone.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import math
import pathlib
import random
import re
import threading
import time
import types
from concurrent import futures
from typing import Any, Callable, Dict, List, Optional

import grpc
import pytest

import sluice
import sluice.aio
import sluice.aio.copies
from sluice import _proto, _testing, copies, errors, leases
from sluice._ops import Sleep
from sluice._proto import doorman as pb
from sluice._proto import limits as v1
from sluice.ratelimit import NEVER, BurstyCore
from conftest import FakeClock

#: clients/vectors, from clients/python/tests.
VECTORS = pathlib.Path(__file__).resolve().parents[2] / "vectors"


def read(name: str) -> Dict[str, Any]:
    with open(VECTORS / name, encoding="utf-8") as f:
        return json.load(f)


def num(x: Any) -> float:
    """A number of the vectors: the only string number is "inf"."""
    if x == "inf":
        return math.inf
    assert not isinstance(x, str), f"{x!r} is no number of the vectors"
    return float(x)


def near(got: float, want: float, tol: float = 1e-9) -> bool:
    if math.isinf(want):
        return got == want
    return abs(got - want) <= tol


LIMITER = read("limiter.json")
REFRESH = read("refresh.json")
RETRY = read("retry.json")
ERRORS = read("errors.json")
CONSTANTS = read("constants.json")


def test_every_vector_file_is_run_here():
    """A new vector file must be run here too (or its absence explained)."""
    files = sorted(p.name for p in VECTORS.glob("*.json"))
    assert files == ["constants.json", "errors.json", "limiter.json", "refresh.json", "retry.json"]
    for name in files:
        v = read(name)
        assert v["about"] and v["schema"], name


class Fixed(random.Random):
    """A random source whose every draw is u."""

    def __init__(self, u: float) -> None:
        super().__init__(0)
        self.u = u

    def random(self) -> float:
        return self.u


# --- limiter.json: SmoothBursty --------------------------------------------------


class _Core:
    """BurstyCore, the arithmetic both APIs' limiters run, called as the
    schema's Python methods (``reserve_at``, ``try_acquire_at``,
    ``set_rate_at``, ``tokens_at``)."""

    def __init__(self, rate: float, max_burst_seconds: float) -> None:
        self.core = BurstyCore(rate, max_burst_seconds)

    def reserve_at(self, now: float, permits: int) -> float:
        outcome, at, _ = self.core.reserve(now, permits, math.inf)
        return math.inf if outcome == NEVER else max(0.0, at - now)

    def try_acquire_at(self, now: float, permits: int) -> bool:
        return self.core.admit(now, permits)

    def set_rate_at(self, now: float, rate: float) -> None:
        self.core.set_rate(now, rate)

    def tokens_at(self, now: float) -> float:
        return self.core.tokens(now)


LIMITERS = {"BurstyCore": _Core, "sluice.RateLimiter": sluice.RateLimiter, "sluice.aio.RateLimiter": sluice.aio.RateLimiter}


@pytest.mark.parametrize("kind", list(LIMITERS))
@pytest.mark.parametrize("case", LIMITER["cases"], ids=[c["name"] for c in LIMITER["cases"]])
def test_limiter_vectors(case, kind):
    tol = LIMITER["tolerance"]
    lim = LIMITERS[kind](num(case["rate"]), num(case["max_burst_seconds"]))
    last = -math.inf
    for i, s in enumerate(case["steps"]):
        at, op = num(s["at"]), s["op"]
        assert at >= last, f"step {i}: time goes back"
        last = at
        where = f"step {i} ({op} at {at} s)"
        permits = s.get("permits", 1)
        if op == "acquire":
            got = lim.reserve_at(at, permits)
            assert near(got, num(s["wait"]), tol), f"{where}: wait {got}, want {s['wait']}"
        elif op == "try_acquire":
            got = lim.try_acquire_at(at, permits)
            assert got is s["ok"], f"{where}: {got}, want {s['ok']}"
        elif op == "set_rate":
            lim.set_rate_at(at, num(s["rate"]))
        elif op == "tokens":
            got = lim.tokens_at(at)
            assert near(got, num(s["tokens"]), tol), f"{where}: tokens {got}, want {s['tokens']}"
        else:
            pytest.fail(f"unknown op {op!r}")


# --- scripted servers ----------------------------------------------------------------


def _unary(m: _proto.Method, f: Callable) -> grpc.RpcMethodHandler:
    return grpc.unary_unary_rpc_method_handler(f, request_deserializer=m.request.FromString, response_serializer=m.response.SerializeToString)


def _serve(service: str, methods: Dict[str, grpc.RpcMethodHandler]) -> "tuple[grpc.Server, str]":
    srv = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    srv.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, methods),))
    port = srv.add_insecure_port("127.0.0.1:0")
    srv.start()
    return srv, f"127.0.0.1:{port}"


class ScriptedCapacity:
    """refresh.json's server: it answers every resource of a GetCapacity
    with the case's lease for it (expiry_time = floor(epoch + t) +
    lease_length), and records when (t) each request came and the wants
    it carried. ``fail`` makes every request fail (UNAVAILABLE) instead, as
    client/vectors_test.go's ``scripted``."""

    def __init__(self, clock: FakeClock, epoch: float, leases: Dict[str, Dict[str, Any]], fail: bool = False) -> None:
        self.clock, self.epoch, self.leases, self.fail = clock, epoch, leases, fail
        self.lock = threading.Lock()
        self.requests: List[Dict[str, Any]] = []
        self.srv, self.addr = _serve(
            "doorman.Capacity",
            {
                "GetCapacity": _unary(_proto.GET_CAPACITY, self.get_capacity),
                "ReleaseCapacity": _unary(_proto.RELEASE_CAPACITY, lambda req, ctx: pb.ReleaseCapacityResponse()),
            },
        )

    def get_capacity(self, req: pb.GetCapacityRequest, ctx: grpc.ServicerContext) -> pb.GetCapacityResponse:
        now = self.clock()
        if self.fail:
            ctx.abort(grpc.StatusCode.UNAVAILABLE, "down")
        rec: Dict[str, Any] = {"at": now - self.epoch, "wants": {}}
        resp = pb.GetCapacityResponse()
        for r in req.resource:
            lease = self.leases.get(r.resource_id)
            if lease is None:
                ctx.abort(grpc.StatusCode.NOT_FOUND, f"no lease scripted for {r.resource_id}")
            rec["wants"][r.resource_id] = r.wants
            rr = resp.response.add(resource_id=r.resource_id)
            rr.gets.capacity = lease["capacity"]
            rr.gets.expiry_time = math.floor(now) + lease["lease_length"]
            rr.gets.refresh_interval = lease["refresh_interval"]
            if "safe_capacity" in lease:
                rr.safe_capacity = lease["safe_capacity"]
        with self.lock:
            self.requests.append(rec)
        return resp

    def stop(self) -> None:
        self.srv.stop(0)


class MonoClock:
    """A hand-moved ``time.monotonic``: the real one when made, then moved
    only by the test (so a session's ttl, counted on it, never passes)."""

    def __init__(self) -> None:
        self.t = time.monotonic()
        self.lock = threading.Lock()

    def monotonic(self) -> float:
        with self.lock:
            return self.t

    def advance(self, seconds: float) -> None:
        with self.lock:
            self.t += seconds


class ScriptedLimits:
    """A sluice.v1.Limits server for the copies calls: sessions that live
    (KeepAlive answers every request), ``reserve`` the status of every
    Reserve (granting all copies when OK), ``fail`` a gRPC code for a
    method ("OpenSession", "Reserve") to fail with, ``lose`` a KeepAlive
    answered NOT_FOUND (the session is gone). Records the time (on
    ``clock``) of each Reserve."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.clock: Callable[[], float] = time.monotonic
        self.reserve = v1.ReserveResponse.OK
        self.fail: Dict[str, grpc.StatusCode] = {}
        self.lose = False
        self.sessions = 0
        self.reserves: List[float] = []
        self.srv, self.addr = _serve(
            "sluice.v1.Limits",
            {
                "OpenSession": _unary(_proto.OPEN_SESSION, self.open_session),
                "KeepAlive": grpc.stream_stream_rpc_method_handler(
                    self.keep_alive,
                    request_deserializer=_proto.KEEP_ALIVE.request.FromString,
                    response_serializer=_proto.KEEP_ALIVE.response.SerializeToString,
                ),
                "CloseSession": _unary(_proto.CLOSE_SESSION, lambda req, ctx: v1.CloseSessionResponse()),
                "Reserve": _unary(_proto.RESERVE, self.do_reserve),
                "Release": _unary(_proto.RELEASE, lambda req, ctx: v1.ReleaseResponse()),
            },
        )

    def _failing(self, method: str, ctx: grpc.ServicerContext) -> None:
        code = self.fail.get(method)
        if code is not None:
            ctx.abort(code, f"scripted {code.name}")

    def open_session(self, req: v1.OpenSessionRequest, ctx: grpc.ServicerContext) -> v1.OpenSessionResponse:
        self._failing("OpenSession", ctx)
        with self.lock:
            self.sessions += 1
            sid = f"session-{self.sessions}"
        return v1.OpenSessionResponse(session_id=sid, ttl=req.ttl)

    def keep_alive(self, it: Any, ctx: grpc.ServicerContext) -> Any:
        if self.lose:
            ctx.abort(grpc.StatusCode.NOT_FOUND, "unknown session")
        for r in it:
            yield v1.KeepAliveResponse(session_id=r.session_id)

    def do_reserve(self, req: v1.ReserveRequest, ctx: grpc.ServicerContext) -> v1.ReserveResponse:
        with self.lock:
            self.reserves.append(self.clock())
        self._failing("Reserve", ctx)
        if self.reserve == v1.ReserveResponse.OK:
            return v1.ReserveResponse(status=self.reserve, granted=req.copies, domain_limit=req.copies, domain_holds=req.copies)
        return v1.ReserveResponse(status=self.reserve, domain_limit=1, domain_holds=1)

    def stop(self) -> None:
        self.srv.stop(0)


@pytest.fixture
def limits_server():
    s = ScriptedLimits()
    yield s
    s.stop()


# --- refresh.json: the lease refresh planner ---------------------------------------------


class ThreadedRunner:
    """The threaded client, stepped by hand (sluice._testing.client, manual)."""

    def __init__(self, addr: str, clock: FakeClock, mode: str) -> None:
        self.c = _testing.client(addr, "vectors", clock=clock, manual=True, push=False, mode=sluice.Mode(mode))

    async def add(self, rid: str, wants: float) -> Any:
        return self.c.resource(rid, wants)

    async def release(self, h: Any) -> None:
        h.release()

    async def step(self) -> float:
        return self.c._leases.step_now()

    async def close(self) -> None:
        self.c.close(0)


class AioRunner(ThreadedRunner):
    """sluice.aio's client, stepped by hand (sluice._testing.aio_client)."""

    def __init__(self, addr: str, clock: FakeClock, mode: str) -> None:
        self.c = _testing.aio_client(addr, "vectors", clock=clock, manual=True, push=False, mode=sluice.Mode(mode))

    async def release(self, h: Any) -> None:
        await h.release()

    async def step(self) -> float:
        return await self.c._leases.step_now()

    async def close(self) -> None:
        await self.c.close(0)


RUNNERS = {"threaded": ThreadedRunner, "aio": AioRunner}


async def drive_refresh(case: Dict[str, Any], runner: ThreadedRunner, clock: FakeClock) -> None:
    """refresh.json's drive: at each t visited, the events with 'at' == t,
    one refresh step, then the capacity checks; the next t is the earliest
    of t + the step's wait, the next event and the next check; stop once
    it would pass 'until'."""
    handles: Dict[str, Any] = {}
    events, checks = list(case["events"]), list(case.get("capacity", []))
    at = 0.0
    for steps in range(10_001):
        assert steps < 10_000, f"still stepping at {at} s"
        while events and num(events[0]["at"]) == at:
            e = events.pop(0)
            if e["op"] == "add":
                handles[e["resource"]] = await runner.add(e["resource"], e["wants"])
            elif e["op"] == "set_wants":
                handles[e["resource"]].set_wants(e["wants"])
            elif e["op"] == "release":
                await runner.release(handles[e["resource"]])
            else:
                pytest.fail(f"unknown op {e['op']!r}")
        wait = await runner.step()
        while checks and num(checks[0]["at"]) == at:
            k = checks.pop(0)
            got = handles[k["resource"]].capacity
            assert got == num(k["capacity"]), f"capacity of {k['resource']} at {at} s = {got}, want {k['capacity']}"
        nxt = at + wait
        if events:
            nxt = min(nxt, num(events[0]["at"]))
        if checks:
            nxt = min(nxt, num(checks[0]["at"]))
        if nxt > case["until"]:
            break
        clock.advance(nxt - at)
        at = nxt
    assert not events and not checks, f"events {events} and checks {checks} never came"


@pytest.mark.parametrize("api", list(RUNNERS))
@pytest.mark.parametrize("case", REFRESH["cases"], ids=[c["name"] for c in REFRESH["cases"]])
def test_refresh_vectors(case, api):
    epoch = float(REFRESH["epoch"])
    clock = FakeClock(epoch)
    srv = ScriptedCapacity(clock, epoch, case["server"])

    async def main() -> None:
        runner = RUNNERS[api](srv.addr, clock, case["mode"])
        try:
            await drive_refresh(case, runner, clock)
        finally:
            await runner.close()

    try:
        asyncio.run(main())
    finally:
        srv.stop()
    want = [{"at": num(r["at"]), "wants": {k: num(w) for k, w in r["wants"].items()}} for r in case["requests"]]
    assert srv.requests == want


# --- retry.json, leases: the lease client's backoff ------------------------------------------


LEASE_RETRY = RETRY["leases"]


def test_lease_backoff_bounds_are_the_clients():
    r = leases._Retry()
    assert (r.lo, r.hi) == (LEASE_RETRY["min_backoff"], LEASE_RETRY["max_backoff"])
    assert (leases.MIN_BACKOFF, leases.MAX_BACKOFF) == (LEASE_RETRY["min_backoff"], LEASE_RETRY["max_backoff"])


def _backoff(failures: int, interval: float) -> float:
    """The delay after ``failures`` failed requests of a fresh _Retry, once
    an answer recorded ``interval`` (0: none yet)."""
    r = leases._Retry()
    if interval > 0:
        r.succeeded(interval)
    d = 0.0
    for _ in range(failures):
        d = r.failed()
    return d


@pytest.mark.parametrize("k", LEASE_RETRY["cases"], ids=lambda k: f"{k['failures']}-failures-interval-{k['interval']}")
def test_lease_backoff_vectors(k, monkeypatch):
    """The rule both APIs' refresh steps (``_Retry``) and push streams
    (``watch_wait``) use: each end of the jitter exactly, then draws of a
    seeded source within it, reaching both ends' tenths."""
    for u, want in ((0.0, k["min"]), (1.0, k["max"])):
        monkeypatch.setattr(leases, "random", Fixed(u))
        got = _backoff(k["failures"], k["interval"])
        assert near(got, want), f"draw {u}: {got} s, want {want} s"
    monkeypatch.setattr(leases, "random", random.Random(k["failures"] * 1000 + int(k["interval"] * 100)))
    ds = [_backoff(k["failures"], k["interval"]) for _ in range(200)]
    assert all(k["min"] - 1e-9 <= d <= k["max"] + 1e-9 for d in ds), ds
    tenth = (k["max"] - k["min"]) / 10
    assert min(ds) <= k["min"] + tenth and max(ds) >= k["max"] - tenth


@pytest.mark.parametrize("k", [k for k in LEASE_RETRY["cases"] if k["interval"] == 0], ids=lambda k: f"{k['failures']}-failures")
def test_watch_backoff_vectors(k, monkeypatch):
    """The push stream's backoff (``watch_wait``, both APIs' watch loops)
    after streams that never opened: the same rule, uncapped."""
    for u, want in ((0.0, k["min"]), (1.0, k["max"])):
        monkeypatch.setattr(leases, "random", Fixed(u))
        r = leases._Retry()
        d = 0.0
        for _ in range(k["failures"]):
            d = leases.watch_wait(r, False, grpc.StatusCode.UNAVAILABLE)
        assert near(d, want), f"draw {u}: {d} s, want {want} s"
    assert leases.watch_wait(leases._Retry(), False, grpc.StatusCode.UNIMPLEMENTED) == leases.WATCH_UNSUPPORTED


@pytest.mark.parametrize("api", list(RUNNERS))
@pytest.mark.parametrize("k", [k for k in LEASE_RETRY["cases"] if k["interval"] == 0], ids=lambda k: f"{k['failures']}-failures")
def test_lease_backoff_vectors_through_the_client(k, api, monkeypatch):
    """A client whose server fails steps again after the delays of the
    uncapped cases (no answer yet), as Go's
    TestBackoffVectorsThroughTheClient: the client does use the rule."""
    for u, want in ((0.0, k["min"]), (1.0, k["max"])):
        monkeypatch.setattr(leases, "random", Fixed(u))
        clock = FakeClock()
        srv = ScriptedCapacity(clock, clock(), {}, fail=True)

        async def main() -> float:
            runner = RUNNERS[api](srv.addr, clock, "safe")
            try:
                await runner.add("a", 1)
                d = 0.0
                for _ in range(k["failures"]):
                    d = await runner.step()
                    clock.advance(d)
                return d
            finally:
                await runner.close()

        try:
            d = asyncio.run(main())
        finally:
            srv.stop()
        assert near(d, want), f"draw {u}: after {k['failures']} failed requests the client steps again in {d} s, want {want} s"


# --- retry.json, charon: Charon's retry policy -------------------------------------------------


CHARON = RETRY["charon"]

#: What docs/clients.md ("The vectors") documents as Go's alone: Charon's
#: request of hits, retry.json's "call": "request". Python runs the
#: reserve_copies schedules.
GO_ONLY_CALLS = {"request"}


def _book(unit: float) -> copies._SessionBook:
    """The copy side both APIs' clients share (their _sessions are
    subclasses of it), with backoff unit ``unit``."""
    return copies._SessionBook(lambda: "unused:1", 1.0, 10.0, True, unit)


@pytest.mark.parametrize("d", CHARON["delays"], ids=lambda d: f"attempt-{d['attempt']}-u-{d['u']}")
def test_charon_delay_vectors(d, monkeypatch):
    monkeypatch.setattr(copies, "random", Fixed(d["u"]))
    got = _book(CHARON["unit"]).retry_delay(d["attempt"])
    assert near(got, d["delay"]), f"{got} s, want {d['delay']} s"


def test_charon_delay_exponent_is_capped(monkeypatch):
    monkeypatch.setattr(copies, "random", Fixed(0.5))
    b, top = _book(CHARON["unit"]), CHARON["max_exponent"]
    assert b.retry_delay(top + 1) == b.retry_delay(top) == b.retry_delay(10 * top) == 2.0**top


@pytest.mark.parametrize("b", CHARON["bounds"], ids=lambda b: f"attempt-{b['attempt']}")
def test_charon_bound_vectors(b, monkeypatch):
    book = _book(1.0)
    monkeypatch.setattr(copies, "random", random.Random(b["attempt"]))
    ds = [book.retry_delay(b["attempt"]) for _ in range(2000)]
    # The range is [min, max); a draw just under 1 may round up to max.
    assert all(b["min"] <= d <= b["max"] for d in ds), (min(ds), max(ds))
    tenth = (b["max"] - b["min"]) / 10
    assert min(ds) <= b["min"] + tenth and max(ds) >= b["max"] - tenth
    for u, want in ((0.0, b["min"]), (1 - 2**-53, b["max"])):
        monkeypatch.setattr(copies, "random", Fixed(u))
        assert near(book.retry_delay(b["attempt"]), want)


def test_charon_calls_are_pythons_or_documented_as_gos():
    """Every schedule's call is reserve_copies, which both APIs run here,
    or one docs/clients.md documents as Go's alone — which Python still
    lacks (if it gains it, run those schedules too)."""
    calls = {s["call"] for s in CHARON["schedules"]} | set(CHARON["retried_statuses"]) | set(CHARON["final_statuses"])
    assert calls <= {"reserve_copies"} | GO_ONLY_CALLS
    assert any(s["call"] == "reserve_copies" for s in CHARON["schedules"])
    for cls in (sluice.Client, sluice.aio.Client):
        for call in GO_ONLY_CALLS:
            assert not hasattr(cls, call), f"{cls.__module__}.{cls.__name__} has {call}: run retry.json's {call!r} vectors"


def test_charon_status_vectors():
    """reserve_copies retries REJECTED_OVER_LIMIT (the schedules show it)
    and ends at once on none: every rejection status of ReserveResponse
    is one or the other."""
    retried, final = CHARON["retried_statuses"]["reserve_copies"], CHARON["final_statuses"]["reserve_copies"]
    statuses = v1.ReserveResponse.Status
    rejections = {name for name, n in statuses.items() if n > statuses.Value("OK")}
    assert set(retried) | set(final) == rejections and not set(retried) & set(final)
    assert retried == ["REJECTED_OVER_LIMIT"] and final == []


SCHEDULES = [s for s in CHARON["schedules"] if s["call"] == "reserve_copies"]


def _fake_sleeps(c: Any, mono: MonoClock, aio: bool) -> None:
    """Makes the copy side of client c sleep on ``mono`` (at once) instead
    of waiting: every other operation is the client's own."""
    orig = c._sessions.perform

    if aio:

        async def perform(op: Any) -> Any:
            if isinstance(op, Sleep):
                mono.advance(op.seconds)
                return False
            return await orig(op)

    else:

        def perform(op: Any) -> Any:  # type: ignore[misc]
            if isinstance(op, Sleep):
                mono.advance(op.seconds)
                return False
            return orig(op)

    c._sessions.perform = perform


@pytest.mark.parametrize("api", ["threaded", "aio"])
@pytest.mark.parametrize("s", SCHEDULES, ids=[s["name"] for s in SCHEDULES])
def test_charon_schedule_vectors(s, api, limits_server, monkeypatch):
    """reserve_copies against a server that rejects every Reserve
    (REJECTED_OVER_LIMIT) asks at the times of attempts_at, on a clock
    moved only by the client's sleeps, then raises the last rejection."""
    mono = MonoClock()
    fake_time = types.SimpleNamespace(monotonic=mono.monotonic)
    monkeypatch.setattr(copies, "time", fake_time)
    monkeypatch.setattr(sluice.aio.copies, "time", fake_time)
    monkeypatch.setattr(copies, "random", Fixed(s["u"]))
    limits_server.clock = mono.monotonic
    limits_server.reserve = v1.ReserveResponse.REJECTED_OVER_LIMIT
    # A call timeout of 30 s (real time): the schedule is on fake time, and a
    # slow loopback call on a loaded machine must not fail open.
    kw = dict(backoff_unit=s["unit"], session_ttl=3600.0, call_timeout=30.0)

    async def main() -> "tuple[float, Optional[BaseException]]":
        if api == "aio":
            c: Any = sluice.aio.Client(limits_server.addr, **kw)
        else:
            c = sluice.Client(limits_server.addr, **kw)
        _fake_sleeps(c, mono, api == "aio")
        start = mono.monotonic()
        try:
            if api == "aio":
                await c.reserve_copies("gpus", "initech", copies=1, max_wait=s["max_wait"])
            else:
                c.reserve_copies("gpus", "initech", copies=1, max_wait=s["max_wait"])
        except sluice.SluiceError as e:
            return start, e
        finally:
            if api == "aio":
                await c.close()
            else:
                c.close()
        return start, None

    start, err = asyncio.run(main())
    got = [t - start for t in limits_server.reserves]
    assert len(got) == len(s["attempts_at"]) and all(near(g, w) for g, w in zip(got, s["attempts_at"])), (got, s["attempts_at"])
    last = s["attempts_at"][-1]
    assert type(err) is sluice.OverLimit, err
    assert err.attempts == len(s["attempts_at"]) and near(err.waited, last), (err.attempts, err.waited)
    assert near(mono.monotonic() - start, last), "the call slept after its last request"


# --- errors.json: gRPC codes and conditions -------------------------------------------------


CODES = ERRORS["codes"]


def _class(name: str) -> type:
    """A class errors.json names for Python, in the namespace it names."""
    assert ERRORS["namespaces"]["python"] == "sluice"
    cls = getattr(sluice, name)
    assert isinstance(cls, type) and issubclass(cls, sluice.SluiceError), name
    assert getattr(sluice.aio, name, cls) is cls  # one hierarchy for both APIs
    return cls


def test_error_codes_are_grpcs():
    names = [c["code"] for c in CODES]
    assert sorted(names) == sorted(c.name for c in grpc.StatusCode if c is not grpc.StatusCode.OK)
    for c in CODES:
        assert grpc.StatusCode[c["code"]].value[0] == c["number"], c["code"]


@pytest.mark.parametrize("e", CODES, ids=[c["code"] for c in CODES])
def test_error_class_vectors(e):
    """The class a failed call raises for each code (errors.error_for and
    from_rpc_error, which both APIs use), carrying the code."""
    cls, code = _class(e["python"]), grpc.StatusCode[e["code"]]
    err = errors.error_for(code, "m")
    assert type(err) is cls and err.code is code and err.code_name == e["code"]

    class Failed(grpc.RpcError):
        def code(self) -> grpc.StatusCode:
            return code

        def details(self) -> str:
            return "d"

    err = errors.from_rpc_error(Failed(), "Call")
    assert type(err) is cls and err.code is code
    if cls is not sluice.SluiceError:  # a class of its own: its default code is this one
        assert cls("m").code is code


def test_charon_caller_codes_are_the_clients():
    """The codes errors.json calls the caller's are those the copies
    calls raise at once (copies._CLIENT_CODES); the rest fail open."""
    caller = {grpc.StatusCode[c["code"]] for c in CODES if c["charon"] == "caller"}
    assert {c["charon"] for c in CODES} == {"caller", "fail_open"}
    assert copies._CLIENT_CODES == caller


async def _reserve(api: str, addr: str, fail_open: bool) -> Any:
    """reserve_copies of 2 copies, at least 1, on a new client of ``api``:
    the hold, or the exception raised."""
    if api == "aio":
        c: Any = sluice.aio.Client(addr, fail_open=fail_open, call_timeout=30.0)
    else:
        c = sluice.Client(addr, fail_open=fail_open, call_timeout=30.0)
    try:
        if api == "aio":
            return await c.reserve_copies("sandboxes", "acme", copies=2, min_copies=1, timeout=10)
        return c.reserve_copies("sandboxes", "acme", copies=2, min_copies=1, timeout=10)
    except sluice.SluiceError as err:
        return err
    finally:
        if api == "aio":
            await c.close()
        else:
            c.close()


@pytest.mark.parametrize("api", ["threaded", "aio"])
@pytest.mark.parametrize("method", ["OpenSession", "Reserve"])
@pytest.mark.parametrize("e", CODES, ids=[c["code"] for c in CODES])
def test_charon_error_vectors(e, method, api, limits_server):
    """Both clients' reserve_copies, against a server failing ``method``
    with each code: a caller's code raises its class at once (fail-open or
    not); another fails open — min_copies granted by the client, degraded
    — or with fail-open off raises its class."""
    cls, code = _class(e["python"]), grpc.StatusCode[e["code"]]
    limits_server.fail = {method: code}
    for fail_open in (True, False):
        before = len(limits_server.reserves)
        got = asyncio.run(_reserve(api, limits_server.addr, fail_open))
        if e["charon"] == "caller" or not fail_open:
            assert type(got) is cls and got.code is code, f"fail_open={fail_open}: {got!r}"
        else:
            assert isinstance(got, sluice.Hold if api == "threaded" else sluice.aio.Hold), got
            assert got.degraded and got.copies == 1 and got.session_id == "", got
        asked = len(limits_server.reserves) - before
        assert asked == (1 if method == "Reserve" else 0), f"{asked} Reserve requests: no code is retried"


def test_error_condition_classes():
    for c in ERRORS["conditions"]:
        cls, code = _class(c["python"]), grpc.StatusCode[c["code"]]
        assert cls("m").code is code, c["condition"]
        assert issubclass(cls, errors._BY_CODE[code]), f"{c['python']} is no {errors._BY_CODE[code].__name__}"
    assert {c["condition"] for c in ERRORS["conditions"]} == {"closed", "session_lost", "over_limit"}


CONDITIONS = {c["condition"]: _class(c["python"]) for c in ERRORS["conditions"]}


@pytest.mark.parametrize("api", ["threaded", "aio"])
def test_error_conditions_through_the_client(api, limits_server):
    """Each condition raised by both clients: closed (a call on a closed
    client, a released handle), over_limit (a reserve that found too few
    copies; the schedules run it at length), session_lost (a hold whose
    session the server no longer knows)."""

    async def main() -> None:
        aio = api == "aio"
        c: Any = sluice.aio.Client(limits_server.addr) if aio else sluice.Client(limits_server.addr)
        try:
            limits_server.lose = True  # every session is gone at once
            hold = (await c.reserve_copies("r", "d", copies=1)) if aio else c.reserve_copies("r", "d", copies=1)
            end = time.monotonic() + 20
            while hold.err() is None and time.monotonic() < end:
                await asyncio.sleep(0.01)
            assert type(hold.err()) is CONDITIONS["session_lost"], hold.err()
            assert hold.copies == 0
            limits_server.reserve = v1.ReserveResponse.REJECTED_OVER_LIMIT
            with pytest.raises(CONDITIONS["over_limit"]) as over:
                if aio:
                    await c.reserve_copies("r", "d", copies=1)
                else:
                    c.reserve_copies("r", "d", copies=1)
            assert over.value.attempts == 1
        finally:
            if aio:
                await c.close()
            else:
                c.close()
        with pytest.raises(CONDITIONS["closed"]):
            c.resource("a", 1)
        with pytest.raises(CONDITIONS["closed"]):
            if aio:
                await c.reserve_copies("r", "d", copies=1)
            else:
                c.reserve_copies("r", "d", copies=1)

    asyncio.run(main())


# --- constants.json: the shared defaults ----------------------------------------------------


#: "(Class(param=...) default)": a default written in a signature, read
#: from an object the test makes, of both APIs.
_DEFAULT = re.compile(r"^\((\w+)\((\w+)=\.\.\.\) default\)$")


def _module_constant(path: str) -> float:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


async def _defaults(cls_name: str, param: str) -> List[float]:
    """The default of ``param`` of both APIs' ``cls_name``: as written in
    each signature, and as in effect in an object made without it (for a
    client, by its constructor and by its test hook)."""
    got = []
    for ns in (sluice, sluice.aio):
        cls = getattr(ns, cls_name)
        got.append(inspect.signature(cls).parameters[param].default)
        if cls_name == "Client":
            hook = _testing.aio_client if ns is sluice.aio else _testing.client  # its own copy of the defaults
            for c in (cls("127.0.0.1:1"), hook("127.0.0.1:1")):
                got.append(getattr(c._sessions, param))
                await c.close() if ns is sluice.aio else c.close()
        elif cls_name == "RateLimiter":
            got.append(getattr(cls(1.0), param))
        else:
            pytest.fail(f"no object of {cls_name} known to this test")
    return got


@pytest.mark.parametrize("k", CONSTANTS["constants"], ids=[k["name"] for k in CONSTANTS["constants"]])
def test_constant_vectors(k):
    where = k["python"]
    assert where, f"{k['name']}: Python has no such setting; say why in docs/clients.md and here"
    m = _DEFAULT.match(where)
    if m:
        got = asyncio.run(_defaults(m.group(1), m.group(2)))
        assert all(g == k["value"] for g in got), f"{k['name']}: {where} is {got}, constants.json {k['value']}"
    else:
        assert where.startswith("sluice."), where
        got = _module_constant(where)
        assert got == k["value"], f"{k['name']}: {where} is {got}, constants.json {k['value']}"


def test_constants_exported_are_the_files():
    """The constants sluice exports at its top are the ones the file
    names, and every constant a test above reads from sluice.leases or
    sluice.copies is in the file."""
    names = {k["python"] for k in CONSTANTS["constants"]}
    for top in ("MIN_REQUEST_INTERVAL", "EXPIRY_MARGIN", "DEFAULT_REFRESH_INTERVAL"):
        assert f"sluice.leases.{top}" in names and getattr(sluice, top) == getattr(leases, top)
    timing = {"MIN_REQUEST_INTERVAL", "EXPIRY_MARGIN", "DEFAULT_REFRESH_INTERVAL", "MIN_BACKOFF", "MAX_BACKOFF", "WATCH_UNSUPPORTED", "MAX_REDIRECTS", "REQUEST_TIMEOUT"}
    assert {f"sluice.leases.{n}" for n in timing} <= names
    assert "sluice.copies.MAX_COPIES" in names
