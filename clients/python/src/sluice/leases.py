"""Leases (Doorman's job): shares of a resource's capacity, kept fresh in the
background and enforced locally.

A :class:`sluice.Client` keeps all of its resources in one bulk
``doorman.Capacity/GetCapacity`` request, sent at the smallest refresh
interval among its leases (stretched to at least 5 s) and at once when a
resource is added. It keeps Doorman's 5-second rule: it never sends a
resource's request more often than once every :data:`MIN_REQUEST_INTERVAL`,
counted from the arrival of the master's answer to the last request carrying
it. A request is due when a resource is new (sent at once), when its wants
changed or it holds no valid lease (as soon as its 5 s end), when its
refresh interval has passed, or :data:`EXPIRY_MARGIN` before its lease
expires. A request carries every resource outside its 5 s window; one due
only for refreshes waits (less than 5 s, never past those leases' margin)
for the resources inside their windows, so that a resource sent alone
rejoins the others in one bulk request. It follows mastership redirects,
retries failures with capped exponential backoff and jitter (moving to the
master named by ``Discovery``, or the next address), and when a lease
expires without renewal falls back to its mode: safe (the server's safe
capacity, the default), pessimistic (0) or optimistic (what it wants).

When the server offers it, the client also keeps one ``sluice.v1.Leases/Watch``
stream open and applies the leases pushed on it when they are newer than the
one it holds (by the decision's sequence), so capacity another client gives
back reaches it at once; against a server without the stream (Doorman,
``--push-leases=false``) it polls only, trying the stream again every 5
minutes.

This is the Go client's behaviour (``client`` package; docs/client.md).
The refresh step and releases are procedures (``sluice._ops``) of
:class:`_Book`, run on threads by :class:`sluice.Client` and as asyncio
tasks by :class:`sluice.aio.Client`: one behaviour, one code path.

Source: doorman-design.md, "Client operation", "Client library",
"Optimistic, pessimistic and safe mode operation".
"""

from __future__ import annotations

import enum
import logging
import math
import random
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

import grpc

from . import _proto
from ._ops import Call, Proc, call_timeout, drive
from ._proto import doorman as pb
from ._proto import leases as v1
from ._transport import Channels
from .errors import Closed, InvalidArgument, SluiceError, Unavailable, from_rpc_error
from .ratelimit import Gauge, RateLimiter

__all__ = [
    "Mode",
    "Lease",
    "Resource",
    "MIN_REQUEST_INTERVAL",
    "EXPIRY_MARGIN",
    "DEFAULT_REFRESH_INTERVAL",
]

log = logging.getLogger("sluice")

#: Doorman's 5-second rule: a resource is never requested more often than
#: this, in seconds. Source: doorman-design.md, "Client operation".
MIN_REQUEST_INTERVAL = 5.0
#: How long before a lease's expiry the client refreshes it at the latest,
#: in seconds.
EXPIRY_MARGIN = 0.5
#: The refresh interval of a lease whose answer gave none, and how long the
#: refresh loop waits with no resources, in seconds.
DEFAULT_REFRESH_INTERVAL = 5.0
#: Backoff of failed requests: from MIN_BACKOFF, doubling per failure up to
#: MAX_BACKOFF, with jitter; seconds.
MIN_BACKOFF = 0.1
MAX_BACKOFF = 10.0
#: How long a GetCapacity may take, in seconds.
REQUEST_TIMEOUT = 5.0
#: How long the client waits before trying again a Watch stream the server
#: does not offer, in seconds.
WATCH_UNSUPPORTED = 300.0
#: The most mastership redirects one request follows.
MAX_REDIRECTS = 3


class Mode(enum.Enum):
    """What a resource does when its lease has expired without renewal.

    Source: doorman-design.md, "Optimistic, pessimistic and safe mode
    operation"."""

    #: The safe capacity the server last sent (0 before any answer; a
    #: negative one means no limit). The default.
    SAFE = "safe"
    #: As if capacity 0 was granted.
    PESSIMISTIC = "pessimistic"
    #: As if what the resource wants was granted.
    OPTIMISTIC = "optimistic"


@dataclass(frozen=True)
class Lease:
    """A lease held: ``capacity`` (the resource's unit, e.g. requests per
    second) valid until ``expiry`` (Unix seconds), to be refreshed every
    ``refresh_interval`` seconds."""

    capacity: float
    expiry: float
    refresh_interval: float


def check_wants(wants: float) -> float:
    """Returns wants as a float, or raises InvalidArgument unless it is
    finite and ≥ 0."""
    try:
        w = float(wants)
    except (TypeError, ValueError):
        raise InvalidArgument(f"wants {wants!r} is not a number") from None
    if math.isnan(w) or math.isinf(w) or w < 0:
        raise InvalidArgument(f"wants {wants!r} must be finite and >= 0")
    return w


class _Retry:
    """Capped exponential backoff with jitter, never longer than the last
    refresh interval."""

    def __init__(self, lo: float = MIN_BACKOFF, hi: float = MAX_BACKOFF) -> None:
        self.lo, self.hi = lo, hi
        self.failures = 0
        self.interval = 0.0

    def failed(self) -> float:
        self.failures += 1
        d = min(self.lo * (2 ** min(self.failures - 1, 20)), self.hi)
        d = d / 2 + random.uniform(0, d / 2)
        if self.interval > 0:
            d = min(d, self.interval)
        return d

    def succeeded(self, interval: float) -> None:
        self.failures = 0
        self.interval = max(min(interval, self.hi), self.lo)


class _State:
    """One resource's lease, shared by its handles. Its fields are guarded
    by ``mu``."""

    def __init__(self, leases: "_Book", rid: str, wants: float, priority: int, now: float) -> None:
        self.leases = leases
        self.id = rid
        self.priority = priority
        self.mode = leases.mode
        self.mu = threading.Lock()
        self.wants = wants
        self.has_lease = False
        self.capacity = 0.0
        self.expiry = 0.0
        self.refresh = 0.0
        self.lease_seq = 0
        self.safe = 0.0
        self.safe_known = False
        self.released = False
        self.handles: Set["_Handle"] = set()
        self.ask_mu = threading.Lock()
        # Notifications.
        self.current = 0.0
        self.seq = 1
        self.listeners: List[List[object]] = []  # [f, seq seen]
        self.delivering = False
        # Doorman's 5-second rule.
        self.requested = False
        self.sent_at = 0.0
        self.wants_gen = 0
        self.sent_gen = 0

    # The effective capacity (mu held).
    def effective(self, now: float) -> float:
        if self.released:
            return 0.0
        if self.leases.killed:
            return math.inf
        if self.has_lease and self.expiry > now:
            return self.capacity
        if self.mode is Mode.OPTIMISTIC:
            return self.wants
        if self.mode is Mode.PESSIMISTIC:
            return 0.0
        if self.safe_known:
            return math.inf if self.safe < 0 else self.safe
        return 0.0

    def change_locked(self, now: float) -> None:
        cur = self.effective(now)
        if cur != self.current:
            self.current = cur
            self.seq += 1

    def deliver(self) -> None:
        """Tells the listeners the newest capacity, holding no lock while
        they run; one thread delivers at a time, newest value last."""
        with self.mu:
            if self.delivering:
                return
            self.delivering = True
        try:
            while True:
                with self.mu:
                    seq, cur = self.seq, self.current
                    due = []
                    for entry in self.listeners:
                        if entry[1] < seq:  # type: ignore[operator]
                            entry[1] = seq
                            due.append(entry[0])
                    if not due:
                        self.delivering = False
                        return
                for f in due:
                    try:
                        f(cur)  # type: ignore[operator]
                    except Exception:  # a listener's failure is its own
                        log.exception("sluice: a listener of %s failed", self.id)
        except BaseException:
            with self.mu:
                self.delivering = False
            raise

    def request(self, now: float) -> Tuple[pb.ResourceRequest, int]:
        with self.mu:
            r = pb.ResourceRequest(resource_id=self.id, priority=self.priority, wants=self.wants)
            if self.has_lease and self.expiry > now:
                r.has.expiry_time = int(self.expiry)
                r.has.refresh_interval = int(self.refresh)
                r.has.capacity = self.capacity
            return r, self.wants_gen

    def sent(self, at: float, gen: int) -> None:
        with self.mu:
            self.requested, self.sent_at, self.sent_gen = True, at, gen

    def schedule(self, now: float) -> Tuple[float, float, Optional[float]]:
        """When the resource may next be sent (ready), when it should be
        (due), and how long a request due only for its refresh may wait to
        travel with others (latest; None: it must go when due)."""
        with self.mu:
            if not self.requested:
                return now, now, None
            ready = self.sent_at + MIN_REQUEST_INTERVAL
            if self.wants_gen != self.sent_gen or not self.has_lease or not self.expiry > now:
                return ready, ready, None
            interval = max(self.refresh, MIN_REQUEST_INTERVAL)
            due = self.sent_at + interval
            latest = self.expiry - EXPIRY_MARGIN
            if latest < due:
                return ready, max(latest, ready), None
            return ready, due, latest

    def grant(
        self, capacity: float, expiry: float, refresh: float, safe: Optional[float], seq: int, pushed: bool, now: float
    ) -> None:
        with self.mu:
            if self.released or ((pushed or seq != 0) and seq <= self.lease_seq):
                return  # released, or older than the lease held
            self.lease_seq = max(self.lease_seq, seq)
            self.has_lease, self.capacity, self.expiry, self.refresh = True, capacity, expiry, refresh
            if safe is not None:
                self.safe, self.safe_known = safe, True
            self.change_locked(now)
        self.deliver()

    def expire(self, now: float) -> None:
        with self.mu:
            if self.has_lease and not self.expiry > now:
                self.has_lease = False
            self.change_locked(now)
        self.deliver()

    def set_wants(self, wants: float) -> None:
        with self.mu:
            if self.released:
                raise Closed(f"resource {self.id} was released")
            changed = self.wants != wants
            self.wants = wants
            if changed:
                self.wants_gen += 1
            self.change_locked(self.leases.clock())
        if changed:
            self.leases.poke()

    def ask_total(self) -> None:
        with self.ask_mu:
            self.set_wants(self.leases.sum_wants(self))
        self.deliver()

    def mark_released(self) -> bool:
        with self.mu:
            if self.released:
                return False
            self.released = True
            self.change_locked(self.leases.clock())
        self.deliver()
        return True


def plan(states: Sequence[_State], now: float) -> Tuple[List[_State], float]:
    """Decides at now, by the 5-second rule, whether a bulk request is due
    and what it carries (every resource outside its window). Returns the
    resources to send and how long until one is due (0: now)."""
    nxt: Optional[float] = None
    join: Optional[float] = None
    limit: Optional[float] = None
    due = must_go = False
    send: List[_State] = []
    for r in states:
        ready, at, latest = r.schedule(now)
        if ready > now:
            join = ready if join is None else max(join, ready)
            nxt = at if nxt is None else min(nxt, at)
            continue
        send.append(r)
        if at > now:
            nxt = at if nxt is None else min(nxt, at)
            continue
        due = True
        if latest is None:
            must_go = True
        else:
            limit = latest if limit is None else min(limit, latest)
    if not due:
        if nxt is None:
            return [], DEFAULT_REFRESH_INTERVAL
        return [], nxt - now
    if not must_go and join is not None and limit is not None and join <= limit:
        return [], join - now  # wait for the others' windows to end
    return send, 0.0


class _Handle:
    """What the lease handles of both APIs share: the resource's state,
    this handle's wants, and reading them. Thread-safe."""

    def __init__(self, state: _State, wants: float) -> None:
        self._state = state
        self._lock = threading.Lock()
        self._wants = wants
        self._closed = False

    @property
    def id(self) -> str:
        """The resource id."""
        return self._state.id

    @property
    def priority(self) -> int:
        """The priority the resource is held at (its priority band)."""
        return self._state.priority

    @property
    def wants(self) -> float:
        """What this handle asks for (the resource's unit)."""
        with self._lock:
            return self._wants

    @property
    def total_wants(self) -> float:
        """What all of the resource's handles in this process ask for
        together: what the client asks the server for."""
        with self._state.mu:
            return self._state.wants

    @property
    def capacity(self) -> float:
        """The capacity the resource may use now: its lease's capacity
        while the lease is valid, else the fallback of its mode (0 once
        released; ``math.inf`` with the kill switch on)."""
        s = self._state
        with s.mu:
            return s.effective(s.leases.clock())

    def lease(self) -> Optional[Lease]:
        """The lease held, or None when none is held or it has expired."""
        s = self._state
        with s.mu:
            if not s.has_lease or not s.expiry > s.leases.clock():
                return None
            return Lease(s.capacity, s.expiry, s.refresh)

    @property
    def safe_capacity(self) -> Optional[float]:
        """The last safe capacity the server sent (None: none yet)."""
        with self._state.mu:
            return self._state.safe if self._state.safe_known else None

    def set_wants(self, wants: float) -> None:
        """Changes what this handle wants; the client asks the server for
        the sum over the resource's handles at once, or, inside the 5 s
        window of the last request, when the window ends. Raises
        :class:`sluice.InvalidArgument` unless wants is finite and ≥ 0, and
        :class:`sluice.Closed` once released."""
        w = check_wants(wants)
        with self._lock:
            if self._closed:
                raise Closed(f"resource {self.id} was released")
            self._wants = w
        self._state.ask_total()

    def on_change(self, listener: Callable[[float], None]) -> None:
        """Calls ``listener(capacity)`` now and whenever the capacity
        changes (a new lease, an expiry and its fallback, a release). It
        runs on the thread that made the change (the client's refresh
        thread, or its event loop, for leases), never under the client's
        locks, one call at a time per resource, newest value last; it
        should return promptly."""
        s = self._state
        with s.mu:
            s.change_locked(s.leases.clock())
            s.listeners.append([listener, 0])
        s.deliver()

    def _close_handle(self) -> bool:
        """Marks this handle released; False if it was already."""
        with self._lock:
            if self._closed:
                return False
            self._closed = True
            return True


class Resource(_Handle):
    """A handle on one resource of a client: what this handle wants, the
    lease the client holds for the resource, and the capacity it may use
    now. Handles of one id in one process share one lease: their wants add
    up, and the lease is given back when the last handle is released.
    Thread-safe; a context manager (leaving ``with client.resource(...) as
    r:`` releases it).

    Get one with :meth:`sluice.Client.resource`; enforce it with
    :meth:`rate_limiter` (a rate resource, permits per second) or
    :meth:`gauge` (an in-flight limit).

    Source: doorman-design.md, "Client library".
    """

    def rate_limiter(self, max_burst_seconds: float = 1.0) -> RateLimiter:
        """A SmoothBursty :class:`sluice.RateLimiter` whose rate, in
        permits per second, follows this resource's capacity from the
        moment it changes. ``max_burst_seconds`` (0 to 1) is how many
        seconds of unused permits it may store: 1 is Guava's default;
        smaller values keep every one-second window closer to the lease."""
        lim = RateLimiter(0.0, max_burst_seconds)
        self.on_change(lim.set_rate)
        return lim

    def gauge(self) -> Gauge:
        """A :class:`sluice.Gauge` (a counting semaphore) whose capacity
        follows this resource's: at most floor(capacity) in flight."""
        g = Gauge(0.0)
        self.on_change(g.set_capacity)
        return g

    def release(self, timeout: float = 2.0) -> None:
        """Releases this handle. When it is the resource's last, the lease
        is given back to the server (``ReleaseCapacity``, within ``timeout``
        seconds) and the capacity becomes 0; otherwise the client asks for
        the remaining handles' wants. Releasing twice does nothing. Raises
        the :class:`sluice.SluiceError` of a failed ``ReleaseCapacity`` (the
        lease is dropped here all the same; the server lets it expire);
        a ``timeout`` of 0 or less sends nothing and raises
        :class:`sluice.DeadlineExceeded`."""
        if not self._close_handle():
            return
        leases = self._state.leases
        s = leases.unregister(self)
        if s is not None:
            drive(leases.release_proc([s.id], timeout), leases.perform)  # type: ignore[attr-defined]

    def __enter__(self) -> "Resource":
        return self

    def __exit__(self, *exc: object) -> None:
        """Releases the handle (:meth:`release`) when the ``with`` block
        ends, as Java's try-with-resources and C++'s destructor do."""
        self.release()


def watch_wait(retry: _Retry, opened: bool, code: Optional[grpc.StatusCode]) -> float:
    """How long to wait before opening the Watch stream again, after one
    that ended (``opened``: it delivered at least one answer) with ``code``:
    the backoff, or :data:`WATCH_UNSUPPORTED` when the server does not offer
    it."""
    if opened:
        retry.succeeded(MIN_BACKOFF)
    wait = retry.failed()
    if code == grpc.StatusCode.UNIMPLEMENTED:
        wait = WATCH_UNSUPPORTED
    return wait


class _Book:
    """The lease side of a client, without its I/O: the resources, the
    server in use, the backoff, and the procedures (``sluice._ops``) of the
    refresh step and of releases. :class:`_Leases` runs them on threads,
    ``sluice.aio``'s leases on an event loop. Its state is guarded by
    ``mu``."""

    def __init__(
        self,
        client_id: str,
        addresses: List[str],
        mode: Mode = Mode.SAFE,
        push: bool = True,
        clock: Optional[Callable[[], float]] = None,
        manual: bool = False,
    ) -> None:
        self.id = client_id
        self.addrs = addresses
        self.mode = mode
        self.push = push
        self.clock: Callable[[], float] = clock or time.time
        self.manual = manual
        self.killed = False
        self.retry = _Retry()
        self.mu = threading.Lock()
        self.addr = addresses[0]
        self.resources: Dict[str, _State] = {}
        self.closed = False
        self.requests = 0  # GetCapacity requests answered (for tests and measurements)

    # --- what the runners provide -----------------------------------------

    def poke(self) -> None:
        """Wakes the refresh loop (a resource is new, or its wants changed)."""
        raise NotImplementedError

    def _start(self) -> None:
        """Starts the background refresh (and watch) once; mu held."""
        raise NotImplementedError

    # --- resources --------------------------------------------------------

    def server(self) -> str:
        with self.mu:
            return self.addr

    def _use(self, addr: str) -> None:
        with self.mu:
            self.addr = addr

    def register(self, rid: str, wants: float, priority: int, make: Callable[[_State, float], _Handle]) -> _Handle:
        """A new handle (made by ``make``) on resource ``rid``: the first
        registers the resource and wakes the refresh loop; others add their
        wants to the resource's."""
        if not isinstance(rid, str) or rid == "":
            raise InvalidArgument("empty resource id")
        w = check_wants(wants)
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise InvalidArgument(f"priority {priority!r} is not an integer")
        with self.mu:
            if self.closed:
                raise Closed("client closed")
            s = self.resources.get(rid)
            if s is not None:
                if s.priority != priority:
                    raise InvalidArgument(f"resource {rid!r} is held at priority {s.priority}, not {priority}")
                new = False
            else:
                s = _State(self, rid, w, priority, self.clock())
                self.resources[rid] = s
                new = True
            h = make(s, w)
            s.handles.add(h)
            if new and not self.manual:
                self._start()
        if new:
            self.poke()
        else:
            s.ask_total()
        return h

    def sum_wants(self, s: _State) -> float:
        with self.mu:
            hs = list(s.handles)
        return sum(h.wants for h in hs)

    def unregister(self, h: _Handle) -> Optional[_State]:
        """Drops handle h. Returns its resource when h was the last handle
        (the resource is then released here: capacity 0), for the caller to
        give its lease back (:meth:`release_proc`); else None, after asking
        for the remaining handles' wants."""
        s = h._state
        with self.mu:
            s.handles.discard(h)
            last = not s.handles
            if last and self.resources.get(s.id) is s:
                del self.resources[s.id]
        if not last:
            s.ask_total()
            return None
        if not s.mark_released():
            return None
        return s

    def release_proc(self, ids: List[str], timeout: float) -> Proc[None]:
        """Gives the leases of ``ids`` back in one ``ReleaseCapacity``
        within ``timeout`` seconds (0 or less: sends nothing,
        :class:`sluice.DeadlineExceeded`)."""
        t = call_timeout(timeout, timeout)
        req = pb.ReleaseCapacityRequest(client_id=self.id, resource_id=ids)
        try:
            yield Call(self.server(), _proto.RELEASE_CAPACITY, req, t)
        except grpc.RpcError as e:
            raise from_rpc_error(e, "ReleaseCapacity") from None

    def set_kill_switch(self, on: bool) -> None:
        with self.mu:
            if self.killed == on:
                return
            self.killed = on
            states = list(self.resources.values())
        now = self.clock()
        for s in states:
            with s.mu:
                s.change_locked(now)
            s.deliver()

    def begin_close(self) -> Optional[List[_State]]:
        """Marks the book closed and every resource released (capacity 0).
        Returns the resources whose leases to give back, or None if it was
        closed already."""
        with self.mu:
            if self.closed:
                return None
            self.closed = True
            states = list(self.resources.values())
            self.resources = {}
        for s in states:
            s.mark_released()
        return states

    # --- the refresh step ---------------------------------------------------

    def states(self) -> List[_State]:
        with self.mu:
            return list(self.resources.values())

    def step(self) -> Proc[float]:
        """One turn of the refresh loop: applies the fallback to expired
        leases, sends one bulk GetCapacity if one is due, and returns how
        many seconds until the next turn (never past the earliest expiry)."""
        nxt, interval, sent, err = yield from self._refresh()
        if self.closed:
            return 0.0
        if err is not None:
            nxt = self.retry.failed()
            log.debug("sluice: refresh failed (%s); retrying in %.2f s", err, nxt)
            yield from self._rotate()
        elif sent:
            self.retry.succeeded(interval)
        exp = self._next_expiry()
        if exp is not None:
            nxt = max(min(nxt, exp - self.clock()), 0.0)
        return nxt

    def _refresh(self) -> Proc[Tuple[float, float, bool, Optional[SluiceError]]]:
        now = self.clock()
        states = self.states()
        for s in states:
            s.expire(now)
        send, wait = plan(states, now)
        if wait > 0:
            return wait, 0.0, False, None
        req = pb.GetCapacityRequest(client_id=self.id)
        gens = []
        for s in send:
            rr, gen = s.request(now)
            req.resource.append(rr)
            gens.append(gen)
        try:
            resp = yield from self._follow(req)
        except SluiceError as e:
            return 0.0, 0.0, False, e
        now = self.clock()
        for s, gen in zip(send, gens):
            s.sent(now, gen)
        interval = self._apply(resp, send, now)
        _, nxt = plan(self.states(), now)
        return nxt, interval, True, None

    def _follow(self, req: pb.GetCapacityRequest) -> Proc[pb.GetCapacityResponse]:
        """Sends req to the current server, following mastership redirects
        (at most MAX_REDIRECTS)."""
        addr = self.server()
        redirects = 0
        while True:
            self._use(addr)
            try:
                resp = yield Call(addr, _proto.GET_CAPACITY, req, REQUEST_TIMEOUT)
            except grpc.RpcError as e:
                raise from_rpc_error(e, f"GetCapacity to {addr}") from None
            if not resp.HasField("mastership"):
                with self.mu:
                    self.requests += 1
                return resp
            master = resp.mastership.master_address
            if not master or master == addr or redirects >= MAX_REDIRECTS:
                raise Unavailable(f"GetCapacity to {addr}: not the master (master {master!r})")
            log.debug("sluice: following mastership redirect from %s to %s", addr, master)
            addr = master
            redirects += 1

    def _apply(self, resp: pb.GetCapacityResponse, sent: List[_State], now: float) -> float:
        by_id = {s.id: s for s in sent}
        nxt = 0.0
        for rr in resp.response:
            s = by_id.get(rr.resource_id)
            if s is None:
                continue
            g = rr.gets
            ri = float(g.refresh_interval) if g.refresh_interval > 0 else DEFAULT_REFRESH_INTERVAL
            safe = rr.safe_capacity if rr.HasField("safe_capacity") else None
            s.grant(g.capacity, float(g.expiry_time), ri, safe, g.sequence, False, now)
            ri = max(ri, MIN_REQUEST_INTERVAL)
            if nxt == 0 or ri < nxt:
                nxt = ri
        return nxt or DEFAULT_REFRESH_INTERVAL

    def apply_pushed(self, leases: Sequence[v1.PushedLease]) -> None:
        """Applies leases the server pushed, each if newer than the one held."""
        now = self.clock()
        for pl in leases:
            with self.mu:
                s = self.resources.get(pl.resource_id)
            if s is None:
                continue
            ri = float(pl.refresh_interval) if pl.refresh_interval > 0 else DEFAULT_REFRESH_INTERVAL
            s.grant(pl.capacity, float(pl.expiry_time), ri, None, pl.sequence, True, now)

    def _rotate(self) -> Proc[None]:
        """After a failure: moves to the master named by Discovery on the
        configured addresses, or else to the next address."""
        if len(self.addrs) < 2:
            return
        cur = self.server()
        start = 0
        for i, a in enumerate(self.addrs):
            if a == cur:
                start = i + 1
        for k in range(len(self.addrs)):
            a = self.addrs[(start + k) % len(self.addrs)]
            try:
                d = yield Call(a, _proto.DISCOVERY, pb.DiscoveryRequest(), 1.0)
            except grpc.RpcError:
                continue
            if d.mastership.master_address:
                self._use(d.mastership.master_address)
                return
            if self.closed:
                break
        self._use(self.addrs[start % len(self.addrs)])

    def _next_expiry(self) -> Optional[float]:
        now = self.clock()
        exp: Optional[float] = None
        for s in self.states():
            with s.mu:
                if s.has_lease and s.expiry > now and (exp is None or s.expiry < exp):
                    exp = s.expiry
        return exp


class _Leases(_Book):
    """The lease side of a :class:`sluice.Client`: its book run on the
    refresh thread and the watch thread, with blocking gRPC."""

    def __init__(
        self,
        client_id: str,
        addresses: List[str],
        channels: Channels,
        mode: Mode = Mode.SAFE,
        push: bool = True,
        clock: Optional[Callable[[], float]] = None,
        manual: bool = False,
    ) -> None:
        super().__init__(client_id, addresses, mode, push, clock, manual)
        self.channels = channels
        self.wake = threading.Event()
        self.stop = threading.Event()
        self.threads: List[threading.Thread] = []
        self.watch_call: Optional[grpc.Future] = None

    def perform(self, op: Call) -> object:
        return self.channels.call(op)

    def step_now(self) -> float:
        """Runs one refresh step (:meth:`_Book.step`) on this thread."""
        return drive(self.step(), self.perform)

    # --- threads ----------------------------------------------------------

    def _start(self) -> None:
        if self.threads:
            return
        self.threads.append(threading.Thread(target=self._refresh_loop, name="sluice-refresh", daemon=True))
        if self.push:
            self.threads.append(threading.Thread(target=self._watch_loop, name="sluice-watch", daemon=True))
        for t in self.threads:
            t.start()

    def poke(self) -> None:
        self.wake.set()

    def _refresh_loop(self) -> None:
        wait = 0.0
        while not self.stop.is_set():
            if wait > 0:
                self.wake.wait(wait)
            self.wake.clear()
            if self.stop.is_set():
                return
            try:
                wait = self.step_now()
            except Exception:  # never let the thread die
                log.exception("sluice: refresh step failed")
                wait = MAX_BACKOFF

    def _watch_loop(self) -> None:
        retry = _Retry()
        while not self.stop.is_set():
            opened = False
            code: Optional[grpc.StatusCode] = None
            try:
                call = self.channels.stream(self.server(), _proto.WATCH)(v1.WatchRequest(holder_id=self.id))
                with self.mu:
                    if self.closed:
                        call.cancel()
                        return
                    self.watch_call = call
                for resp in call:
                    opened = True
                    if resp.leases:
                        self.apply_pushed(resp.leases)
            except grpc.RpcError as e:
                code = e.code() if hasattr(e, "code") else None
            except Exception:
                log.exception("sluice: watch stream failed")
            if self.stop.is_set():
                return
            self.stop.wait(watch_wait(retry, opened, code))

    # --- resources --------------------------------------------------------

    def resource(self, rid: str, wants: float, priority: int) -> Resource:
        return self.register(rid, wants, priority, Resource)  # type: ignore[return-value]

    def close(self, timeout: float = 2.0) -> None:
        """Releases every lease (one ReleaseCapacity, best effort, within
        timeout seconds) and stops the threads."""
        states = self.begin_close()
        if states is None:
            return
        with self.mu:
            call = self.watch_call
        self.stop.set()
        self.wake.set()
        if call is not None:
            call.cancel()
        for t in self.threads:
            if t is not threading.current_thread():
                t.join(REQUEST_TIMEOUT + 1)
        if states and not self.manual:
            try:
                drive(self.release_proc([s.id for s in states], timeout), self.perform)
            except SluiceError as e:
                log.debug("sluice: releasing on close: %s", e)
