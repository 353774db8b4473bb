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

from ._proto.doorman import doorman_pb2 as pb
from ._proto.doorman import doorman_pb2_grpc as pb_grpc
from ._proto.sluice.v1 import leases_pb2 as v1
from ._proto.sluice.v1 import leases_pb2_grpc as v1_grpc
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

    def __init__(self, leases: "_Leases", rid: str, wants: float, priority: int, now: float) -> None:
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
        self.handles: Set["Resource"] = set()
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


class Resource:
    """A handle on one resource of a client: what this handle wants, the
    lease the client holds for the resource, and the capacity it may use
    now. Handles of one id in one process share one lease: their wants add
    up, and the lease is given back when the last handle is released.
    Thread-safe.

    Get one with :meth:`sluice.Client.resource`; enforce it with
    :meth:`rate_limiter` (a rate resource, permits per second) or
    :meth:`gauge` (an in-flight limit).

    Source: doorman-design.md, "Client library".
    """

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
        """What this handle asks for."""
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
        thread for leases), never under the client's locks, one call at a
        time per resource, newest value last; it should return promptly."""
        s = self._state
        with s.mu:
            s.change_locked(s.leases.clock())
            s.listeners.append([listener, 0])
        s.deliver()

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
        lease is dropped here all the same; the server lets it expire)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._state.leases.release_handle(self, timeout)

    def __enter__(self) -> "Resource":
        return self

    def __exit__(self, *exc: object) -> None:
        """Releases the handle (:meth:`release`) when the ``with`` block
        ends, as Java's try-with-resources and C++'s destructor do."""
        self.release()


class _Leases:
    """The lease side of a :class:`sluice.Client`: its resources, the
    refresh thread and the watch thread."""

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
        self.id = client_id
        self.addrs = addresses
        self.channels = channels
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
        self.wake = threading.Event()
        self.stop = threading.Event()
        self.threads: List[threading.Thread] = []
        self.watch_call: Optional[grpc.Future] = None
        self.requests = 0  # GetCapacity requests answered (for tests and measurements)

    # --- threads ----------------------------------------------------------

    def _start(self) -> None:
        """Starts the refresh (and watch) threads once (mu held)."""
        if self.threads or self.manual:
            return
        t = threading.Thread(target=self._refresh_loop, name="sluice-refresh", daemon=True)
        self.threads.append(t)
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
                wait = self.step()
            except Exception:  # never let the thread die
                log.exception("sluice: refresh step failed")
                wait = MAX_BACKOFF

    def _watch_loop(self) -> None:
        retry = _Retry()
        while not self.stop.is_set():
            opened = False
            code: Optional[grpc.StatusCode] = None
            try:
                stub = v1_grpc.LeasesStub(self.channels.get(self.server()))
                call = stub.Watch(v1.WatchRequest(holder_id=self.id))
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
            if opened:
                retry.succeeded(MIN_BACKOFF)
            wait = retry.failed()
            if code == grpc.StatusCode.UNIMPLEMENTED:
                wait = WATCH_UNSUPPORTED
            self.stop.wait(wait)

    # --- resources --------------------------------------------------------

    def server(self) -> str:
        with self.mu:
            return self.addr

    def resource(self, rid: str, wants: float, priority: int) -> Resource:
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
                h = Resource(s, w)
                s.handles.add(h)
                new = False
            else:
                s = _State(self, rid, w, priority, self.clock())
                h = Resource(s, w)
                s.handles.add(h)
                self.resources[rid] = s
                new = True
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

    def release_handle(self, h: Resource, timeout: float) -> None:
        s = h._state
        with self.mu:
            s.handles.discard(h)
            last = not s.handles
            if last and self.resources.get(s.id) is s:
                del self.resources[s.id]
        if not last:
            s.ask_total()
            return
        if not s.mark_released():
            return
        self._release([s.id], timeout)

    def _release(self, ids: List[str], timeout: float) -> None:
        stub = pb_grpc.CapacityStub(self.channels.get(self.server()))
        try:
            stub.ReleaseCapacity(pb.ReleaseCapacityRequest(client_id=self.id, resource_id=ids), timeout=timeout)
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

    def close(self, timeout: float = 2.0) -> None:
        """Releases every lease (one ReleaseCapacity, best effort, within
        timeout seconds) and stops the threads."""
        with self.mu:
            if self.closed:
                return
            self.closed = True
            states = list(self.resources.values())
            self.resources = {}
            call = self.watch_call
        for s in states:
            s.mark_released()
        self.stop.set()
        self.wake.set()
        if call is not None:
            call.cancel()
        for t in self.threads:
            if t is not threading.current_thread():
                t.join(REQUEST_TIMEOUT + 1)
        if states and not self.manual:
            try:
                self._release([s.id for s in states], timeout)
            except SluiceError as e:
                log.debug("sluice: releasing on close: %s", e)

    # --- the refresh step ---------------------------------------------------

    def states(self) -> List[_State]:
        with self.mu:
            return list(self.resources.values())

    def step(self) -> float:
        """One turn of the refresh loop: applies the fallback to expired
        leases, sends one bulk GetCapacity if one is due, and returns how
        many seconds until the next turn (never past the earliest expiry)."""
        nxt, interval, sent, err = self._refresh()
        if self.stop.is_set():
            return 0.0
        if err is not None:
            nxt = self.retry.failed()
            log.debug("sluice: refresh failed (%s); retrying in %.2f s", err, nxt)
            self._rotate()
        elif sent:
            self.retry.succeeded(interval)
        exp = self._next_expiry()
        if exp is not None:
            nxt = max(min(nxt, exp - self.clock()), 0.0)
        return nxt

    def _refresh(self) -> Tuple[float, float, bool, Optional[SluiceError]]:
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
            resp = self._follow(req)
        except SluiceError as e:
            return 0.0, 0.0, False, e
        now = self.clock()
        for s, gen in zip(send, gens):
            s.sent(now, gen)
        interval = self._apply(resp, send, now)
        _, nxt = plan(self.states(), now)
        return nxt, interval, True, None

    def _use(self, addr: str) -> None:
        with self.mu:
            self.addr = addr

    def _follow(self, req: pb.GetCapacityRequest) -> pb.GetCapacityResponse:
        """Sends req to the current server, following mastership redirects
        (at most MAX_REDIRECTS)."""
        addr = self.server()
        redirects = 0
        while True:
            self._use(addr)
            try:
                resp = pb_grpc.CapacityStub(self.channels.get(addr)).GetCapacity(req, timeout=REQUEST_TIMEOUT)
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

    def _rotate(self) -> None:
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
                d = pb_grpc.CapacityStub(self.channels.get(a)).Discovery(pb.DiscoveryRequest(), timeout=1.0)
            except grpc.RpcError:
                continue
            if d.mastership.master_address:
                self._use(d.mastership.master_address)
                return
            if self.stop.is_set():
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

