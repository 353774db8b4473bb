"""Copy-limited resources in sessions (Charon's job).

A copy-limited resource is a counting semaphore per (resource, domain):
copies are held in a *session* that the client opens on first use
(``sluice.v1.Limits/OpenSession``) and keeps alive in the background over
the ``KeepAlive`` stream, renewing it every third of its ttl. When the
session ends — closed, its stream broken, its ttl passed without a
keep-alive — the server releases everything it held, so the copies of a
process that dies come back by themselves.

:meth:`sluice.Client.reserve_copies` returns a :class:`Hold`; as in
Charon's Python client, a ``with`` block releases whatever is still held
when it ends::

    with client.reserve_copies("cookbook/sandboxes", "acme", copies=5, min_copies=2, max_wait=10) as hold:
        run(hold.copies)

This is the Go client's behaviour (``client/limits``: ReserveCopies, Hold,
Seize; docs/charon.md), including the paper's retry policy and fail-open.
Reserving, seizing, releasing, transferring and the keep-alive's give-up
rule are procedures (``sluice._ops``) of :class:`_SessionBook` and
:class:`_HoldBase`, run with blocking gRPC here and awaited by
``sluice.aio``.

Source: charon-paper.md, sections 3.1 (reserve, release, transfer, seize),
3.2 (implicit release, the retry policy) and 4.3 (degraded modes, session
cleanup).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, Iterator, List, Optional, Tuple, Type

import grpc

from . import _proto
from ._ops import Call, GetSession, Proc, Sleep, call_timeout, drive
from ._proto import duration
from ._proto import limits as v1
from .errors import (
    Closed,
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    OverLimit,
    SessionLost,
    SluiceError,
    Unavailable,
    from_rpc_error,
)

if TYPE_CHECKING:
    from ._transport import Channels

__all__ = ["Hold", "Reservation", "GroupHolds", "MAX_COPIES"]

log = logging.getLogger("sluice")

#: The most copies (or tokens) one request may ask for: 2**53.
MAX_COPIES = 1 << 53

# Codes that are the caller's to fix: never failed open.
_CLIENT_CODES = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.UNIMPLEMENTED,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.OUT_OF_RANGE,
}

#: How long closing a session may take, in seconds.
CLOSE_TIMEOUT = 2.0


def check_range(what: str, n: int, least: int) -> int:
    """Validates n in [1, 2**53] and least in [0, n]; returns the effective
    minimum (0 means n)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1 or n > MAX_COPIES:
        raise InvalidArgument(f"{what} {n!r} outside [1, 2^53]")
    if isinstance(least, bool) or not isinstance(least, int) or least < 0 or least > n:
        raise InvalidArgument(f"min {what} {least!r} outside [0, {n}]")
    return least or n


@dataclass(frozen=True)
class GroupHolds:
    """One domain group's pool of a copy-limited resource: its name, limit,
    and the copies held across the group's domains."""

    name: str
    limit: int
    holds: int


@dataclass(frozen=True)
class Reservation:
    """The context of the server's answer to a reserve: the domain's limit
    and the global limit (None: unbounded), the copies held by the domain
    and by every domain after the answer, and the domain's groups."""

    domain_limit: int = 0
    global_limit: Optional[int] = None
    domain_holds: int = 0
    global_holds: int = 0
    groups: Tuple[GroupHolds, ...] = field(default_factory=tuple)
    unlimited: bool = False

    @staticmethod
    def of(r: v1.ReserveResponse) -> "Reservation":
        """The reservation of a ``sluice.v1.ReserveResponse``."""
        return Reservation(
            domain_limit=r.domain_limit,
            global_limit=r.global_limit if r.HasField("global_limit") else None,
            domain_holds=r.domain_holds,
            global_holds=r.global_holds,
            groups=tuple(GroupHolds(g.name, g.limit, g.holds) for g in r.groups),
            unlimited=r.unlimited,
        )


def _session_gone(err: grpc.RpcError) -> bool:
    """Whether a NOT_FOUND answer is about the session (the server no
    longer knows it) rather than the resource or the transfer."""
    if err.code() != grpc.StatusCode.NOT_FOUND:  # type: ignore[attr-defined]
        return False
    msg = err.details() or ""  # type: ignore[attr-defined]
    return msg.startswith("session_id:") or "unknown session" in msg


class _Timeout(DeadlineExceeded):
    """The caller's timeout passed (not the server's slowness)."""


def _deadline() -> SluiceError:
    return _Timeout("the call's timeout passed")


#: The end of a keep-alive stream because the session's ttl passed.
EXPIRED = object()


class _Session:
    """A session the client opened. ``ended`` is a flag (a
    :class:`threading.Event`, set once); ``on_end`` callbacks run when it
    is set."""

    def __init__(self, sid: str, ttl: float, now: float) -> None:
        self.id = sid
        self.ttl = ttl
        self.acked = now
        self.ended = threading.Event()
        self.error: Optional[SluiceError] = None  # why it ended
        self.lock = threading.Lock()
        self.call: Any = None  # the keep-alive stream's call (cancel())
        self.on_end: List[Callable[[], None]] = []

    def err(self) -> Optional[SluiceError]:
        return self.error if self.ended.is_set() else None

    def finish(self, cause: SluiceError, cancel: bool = True) -> bool:
        """Ends the session with cause (False if it had ended already);
        cancels its keep-alive stream unless cancel is False."""
        with self.lock:
            if self.ended.is_set():
                return False
            self.error = cause
            self.ended.set()
            hooks, self.on_end = self.on_end, []
        for f in hooks:
            f()
        if cancel:
            self.cancel()
        return True

    def cancel(self) -> None:
        """Cancels the keep-alive stream."""
        with self.lock:
            call = self.call
        if call is not None:
            call.cancel()

    def interval(self) -> float:
        """How often to renew, in seconds: a third of the ttl."""
        return max(self.ttl / 3, 0.001)

    def expired(self, now: float) -> bool:
        """Whether the ttl passed since the last confirmed renewal."""
        return now - self.acked >= self.ttl

    def renewed(self, r: v1.KeepAliveResponse, now: float) -> None:
        """Notes a renewal the server confirmed (and the ttl it names)."""
        if r.HasField("ttl") and r.ttl.ToNanoseconds() > 0:
            self.ttl = r.ttl.ToNanoseconds() / 1e9
        self.acked = now


class _SessionBook:
    """The copy side of a client, without its I/O: the session, the
    settings, and the procedures (``sluice._ops``) of opening and closing
    sessions, reserving (with Charon's retry policy and fail-open), seizing,
    and when to renew or give a session up. :class:`_Sessions` runs them
    with blocking gRPC, ``sluice.aio`` on an event loop."""

    #: The hold class the procedures make.
    hold_class: Type["_HoldBase"]

    def __init__(
        self,
        server: Callable[[], str],
        call_timeout: float,
        session_ttl: float,
        fail_open: bool,
        backoff_unit: float,
        on_session_lost: Optional[Callable[[str, SluiceError], None]] = None,
    ) -> None:
        self.server = server
        self.call_timeout = call_timeout
        self.session_ttl = session_ttl
        self.fail_open = fail_open
        self.backoff_unit = backoff_unit
        self.on_session_lost = on_session_lost
        self.mu = threading.Lock()
        self.cur: Optional[_Session] = None
        self.closed = threading.Event()

    def timeout(self, deadline: Optional[float]) -> float:
        """The timeout of one request: the call timeout, within deadline."""
        if deadline is None:
            return self.call_timeout
        left = deadline - time.monotonic()
        if left <= 0:
            raise _deadline()
        return min(self.call_timeout, left)

    def live(self) -> Optional[_Session]:
        """The current session if it is live (mu held)."""
        s = self.cur
        return s if s is not None and s.err() is None else None

    # --- the session ------------------------------------------------------

    def open_proc(self, deadline: Optional[float]) -> Proc[_Session]:
        """Opens a session (``OpenSession``) by deadline."""
        req = v1.OpenSessionRequest(ttl=duration(self.session_ttl))
        try:
            r = yield Call(self.server(), _proto.OPEN_SESSION, req, self.timeout(deadline))
        except grpc.RpcError as e:
            raise from_rpc_error(e, "OpenSession") from None
        if not r.session_id:
            raise Unavailable("OpenSession: an answer without a session_id")
        ttl = r.ttl.ToNanoseconds() / 1e9 if r.HasField("ttl") else 0.0
        s = _Session(r.session_id, ttl if ttl > 0 else self.session_ttl, time.monotonic())
        log.debug("sluice: session %s… opened, ttl %.1f s", s.id[:8], s.ttl)
        return s

    def end_proc(self, s: _Session) -> Proc[None]:
        """Ends s (closed) and asks the server to release its holds (best
        effort, within :data:`CLOSE_TIMEOUT`)."""
        if not s.finish(Closed("client closed: the session's copies were released"), cancel=False):
            return
        try:
            yield Call(self.server(), _proto.CLOSE_SESSION, v1.CloseSessionRequest(session_id=s.id), CLOSE_TIMEOUT)
        except grpc.RpcError as e:
            log.debug("sluice: closing the session: %s", e)
        finally:
            s.cancel()

    def lose(self, s: _Session, cause: str) -> None:
        """Ends s as lost (:class:`sluice.SessionLost`) and tells
        ``on_session_lost``."""
        err = SessionLost(f"session {s.id[:8]}… lost: {cause}")
        if not s.finish(err):
            return
        with self.mu:
            if self.cur is s:
                self.cur = None
        log.warning("sluice: session lost, its holds are gone: %s", cause)
        if self.on_session_lost is not None:
            try:
                self.on_session_lost(s.id, err)
            except Exception:
                log.exception("sluice: on_session_lost failed")

    def retry_delay(self, i: int) -> float:
        """The paper's jitter(2^i) in backoff units: uniform in
        [v - v/4, v + v/4) for v = 2^i units."""
        v = self.backoff_unit * (2.0 ** min(max(i, 0), 100))
        return v * 0.75 + random.random() * v * 0.5

    def after_stream(self, s: _Session, acked: bool, code: object, i: int) -> Tuple[Optional[float], int]:
        """What follows a keep-alive stream of s that ended (``acked``: a
        renewal was confirmed on it; ``code``: the gRPC code that ended it,
        or :data:`EXPIRED`), the ``i``-th in a row without one: None to stop
        (s ended, the client closed, or s is lost — given up here), else
        the seconds to wait before the next stream (0 for the first retry,
        then backoff sleeps within what is left of the ttl), and the next
        i. s is lost when the server answers NOT_FOUND, or when its ttl
        passes without a renewal the server confirmed."""
        if s.ended.is_set() or self.closed.is_set():
            return None, i
        if acked:
            i = 0
        if code == grpc.StatusCode.NOT_FOUND or code is EXPIRED:
            self.lose(s, "the server no longer knows it" if code == grpc.StatusCode.NOT_FOUND else "not renewed within its ttl")
            return None, i
        left = s.acked + s.ttl - time.monotonic()
        if left <= 0:
            self.lose(s, f"not renewed within its ttl ({s.ttl} s)")
            return None, i
        wait = min(self.retry_delay(i), left) if i > 0 else 0.0
        return wait, i + 1

    # --- calls --------------------------------------------------------------

    def reserve_proc(
        self, resource: str, domain: str, copies: int, min_copies: int, max_wait: float, timeout: Optional[float]
    ) -> Proc["_HoldBase"]:
        """:meth:`sluice.Client.reserve_copies`."""
        least = check_range("copies", copies, min_copies)
        if not isinstance(resource, str) or not isinstance(domain, str):
            raise InvalidArgument("resource and domain must be strings")
        start = time.monotonic()
        deadline = None if timeout is None else start + timeout
        reopened = False
        i = 1
        while True:
            if self.closed.is_set():
                raise Closed("client closed")
            try:
                s = yield GetSession(deadline)
            except _Timeout:
                raise
            except SluiceError as e:
                if isinstance(e, Closed) or e.code in _CLIENT_CODES:
                    raise
                return self._fail_open(resource, domain, least, start, i, e)
            req = v1.ReserveRequest(
                session_id=s.id,
                resource=resource,
                domain=domain,
                copies=copies,
                min_copies=least,
                max_wait=duration(0),
            )
            try:
                m = yield Call(self.server(), _proto.RESERVE, req, self.timeout(deadline))
            except grpc.RpcError as e:
                if e.code() in _CLIENT_CODES:  # type: ignore[attr-defined]
                    if _session_gone(e) and not reopened:
                        self.lose(s, "the server no longer knows it")
                        reopened = True
                        continue
                    raise from_rpc_error(e, f"Reserve {resource}/{domain}") from None
                return self._fail_open(resource, domain, least, start, i, from_rpc_error(e, "Reserve"))
            ok = m.status == v1.ReserveResponse.OK
            if ok and not least <= m.granted <= copies or m.status == v1.ReserveResponse.STATUS_UNSPECIFIED:
                cause = Unavailable(f"Reserve: an answer with status {m.status} granting {m.granted} of [{least}, {copies}]")
                return self._fail_open(resource, domain, least, start, i, cause)
            waited = time.monotonic() - start
            res = Reservation.of(m)
            if ok:
                return self.hold_class(self, s, resource, domain, [g.name for g in res.groups], m.granted, res, waited, i)
            msg = f"{resource}/{domain} over limit: not even {least} copies fit (domain holds {res.domain_holds} of {res.domain_limit}"
            if res.global_limit is not None:
                msg += f", all domains {res.global_holds} of {res.global_limit}"
            for g in res.groups:
                msg += f", group {g.name} {g.holds} of {g.limit}"
            rej = OverLimit(msg + f"); {i} attempts in {waited:.3f} s", res, i, waited)
            d = min(max_wait - waited, self.retry_delay(i))
            if d <= 0:
                raise rej
            if deadline is not None and time.monotonic() + d > deadline:
                raise rej
            if (yield Sleep(d)):
                raise Closed("client closed")
            i += 1

    def _fail_open(self, resource: str, domain: str, least: int, start: float, i: int, cause: Exception) -> "_HoldBase":
        if not self.fail_open:
            if isinstance(cause, SluiceError):
                raise cause
            raise Unavailable(str(cause))
        log.warning("sluice: limits service unreachable or failing (%s); granting %d copies of %s/%s by itself", cause, least, resource, domain)
        return self.hold_class(self, None, resource, domain, [], least, Reservation(), time.monotonic() - start, i)

    def seize_proc(self, transfer_id: str, timeout: Optional[float]) -> Proc["_HoldBase"]:
        """:meth:`sluice.Client.seize`."""
        if not transfer_id:
            raise InvalidArgument("empty transfer id")
        deadline = None if timeout is None else time.monotonic() + timeout
        reopened = False
        while True:
            s = yield GetSession(deadline)
            req = v1.SeizeRequest(session_id=s.id, transfer_id=transfer_id)
            try:
                m = yield Call(self.server(), _proto.SEIZE, req, self.timeout(deadline))
            except grpc.RpcError as e:
                if _session_gone(e) and not reopened:
                    self.lose(s, "the server no longer knows it")
                    reopened = True
                    continue
                raise from_rpc_error(e, "Seize") from None
            if m.copies < 1:
                raise Unavailable(f"Seize: an answer seizing {m.copies} copies")
            return self.hold_class(self, s, m.resource, m.domain, list(m.groups), m.copies, Reservation(), 0.0, 1)


class _Sessions(_SessionBook):
    """The copy side of a :class:`sluice.Client`: its book run with
    blocking gRPC, the session kept alive on a background thread."""

    def __init__(
        self,
        server: Callable[[], str],
        channels: "Channels",
        call_timeout: float,
        session_ttl: float,
        fail_open: bool,
        backoff_unit: float,
        on_session_lost: Optional[Callable[[str, SluiceError], None]] = None,
    ) -> None:
        super().__init__(server, call_timeout, session_ttl, fail_open, backoff_unit, on_session_lost)
        self.hold_class = Hold
        self.channels = channels
        self.opening: Optional[threading.Event] = None
        self.threads: List[threading.Thread] = []

    def perform(self, op: object) -> Any:
        if isinstance(op, Call):
            return self.channels.call(op)
        if isinstance(op, GetSession):
            return self.session(op.deadline)
        if isinstance(op, Sleep):
            return self.closed.wait(op.seconds)
        raise TypeError(f"unknown operation {op!r}")

    def session(self, deadline: Optional[float]) -> _Session:
        """The live session, opening one if there is none (one OpenSession
        at a time; concurrent callers wait for it)."""
        while True:
            with self.mu:
                if self.closed.is_set():
                    raise Closed("client closed")
                s = self.live()
                if s is not None:
                    return s
                w = self.opening
                mine = w is None
                if w is None:
                    w = self.opening = threading.Event()
            if not mine:
                left = None if deadline is None else deadline - time.monotonic()
                if not w.wait(left) and deadline is not None:
                    raise _deadline()
                continue
            try:
                s = drive(self.open_proc(deadline), self.perform)
            finally:
                with self.mu:
                    self.opening = None
                    w.set()
            with self.mu:
                closed = self.closed.is_set()
                if not closed:
                    self.cur = s
                    t = threading.Thread(target=self._keepalive, args=(s,), name="sluice-keepalive", daemon=True)
                    self.threads = [x for x in self.threads if x.is_alive()] + [t]
                    t.start()
            if closed:
                drive(self.end_proc(s), self.perform)
                raise Closed("client closed")
            return s

    def close(self) -> None:
        with self.mu:
            self.closed.set()
            s, self.cur = self.cur, None
            threads = list(self.threads)
        if s is not None:
            drive(self.end_proc(s), self.perform)
        for t in threads:
            if t is not threading.current_thread():
                t.join(5.0)

    def _keepalive(self, s: _Session) -> None:
        """Keeps s alive until it ends or the client closes: one stream at a
        time, renewing every third of the ttl (:meth:`after_stream` says
        what follows a broken one)."""
        i = 0
        while True:
            acked, code = self._stream(s)
            wait, i = self.after_stream(s, acked, code, i)
            if wait is None:
                return
            if wait > 0 and s.ended.wait(wait):
                return

    def _stream(self, s: _Session) -> Tuple[bool, object]:
        """Runs one keep-alive stream for s until it breaks; returns whether
        a renewal was confirmed on it, and the code that ended it (or
        EXPIRED)."""
        stop = threading.Event()
        expired = threading.Event()
        req = v1.KeepAliveRequest(session_id=s.id)
        holder: List[Any] = []

        def requests() -> Iterator[v1.KeepAliveRequest]:
            yield req
            while not stop.wait(s.interval()):
                if s.ended.is_set():
                    return
                if s.expired(time.monotonic()):
                    expired.set()
                    if holder:
                        holder[0].cancel()
                    return
                yield req

        acked = False
        code: object = None
        try:
            call = self.channels.stream(self.server(), _proto.KEEP_ALIVE)(requests())
            holder.append(call)
            with s.lock:
                if s.ended.is_set():
                    call.cancel()
                s.call = call
            for r in call:
                s.renewed(r, time.monotonic())
                acked = True
        except grpc.RpcError as e:
            code = e.code()  # type: ignore[attr-defined]
        finally:
            stop.set()
        if expired.is_set():
            code = EXPIRED
        return acked, code

    def reserve(
        self, resource: str, domain: str, copies: int, min_copies: int, max_wait: float, timeout: Optional[float]
    ) -> "Hold":
        return drive(self.reserve_proc(resource, domain, copies, min_copies, max_wait, timeout), self.perform)  # type: ignore[return-value]

    def seize(self, transfer_id: str, timeout: Optional[float]) -> "Hold":
        return drive(self.seize_proc(transfer_id, timeout), self.perform)  # type: ignore[return-value]


class _HoldBase:
    """What the holds of both APIs share: their state and the procedures
    of release and transfer."""

    def __init__(
        self,
        sessions: _SessionBook,
        session: Optional[_Session],
        resource: str,
        domain: str,
        groups: List[str],
        copies: int,
        reservation: Reservation,
        waited: float,
        attempts: int,
    ) -> None:
        self._sessions = sessions
        self._session = session
        #: The copy-limited resource.
        self.resource = resource
        #: The domain the copies count against.
        self.domain = domain
        #: The domain's groups (their pools count the copies too).
        self.groups: Tuple[str, ...] = tuple(groups)
        #: The context of the server's answer (empty when degraded or seized).
        self.reservation = reservation
        #: How long the reserve took, in seconds.
        self.waited = waited
        #: How many reserves were sent.
        self.attempts = attempts
        self._copies = copies

    @property
    def copies(self) -> int:
        """The copies held now: granted or seized, less those released or
        transferred; 0 once the session has ended."""
        if self.err() is not None:
            return 0
        return self._copies

    @property
    def degraded(self) -> bool:
        """True for a hold the client granted by itself (failing open): the
        server holds nothing for it."""
        return self._session is None

    @property
    def session_id(self) -> str:
        """The id of the session holding the copies ("" when degraded).
        Whoever knows it may release them: keep it private."""
        return "" if self._session is None else self._session.id

    def err(self) -> Optional[SluiceError]:
        """None while the hold's session is live; once it has ended,
        :class:`sluice.SessionLost` (the copies are gone) or
        :class:`sluice.Closed` (the client released them)."""
        return None if self._session is None else self._session.err()

    def _check(self, op: str, n: int) -> None:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise InvalidArgument(f"{op} of {n!r} copies of {self.resource}/{self.domain}; at least 1")
        e = self.err()
        if e is not None:
            raise type(e)(f"{op} of {self.resource}/{self.domain}: {e.message}")
        if n > self._copies:
            raise FailedPrecondition(f"{op} of {n} copies of {self.resource}/{self.domain}; the hold has {self._copies}")

    def _failed(self, op: str, e: grpc.RpcError) -> SluiceError:
        if _session_gone(e) and self._session is not None:
            self._sessions.lose(self._session, "the server no longer knows it")
            err = self.err()
            if err is not None:
                return type(err)(f"{op} of {self.resource}/{self.domain}: {err.message}")
        return from_rpc_error(e, f"{op} of {self.resource}/{self.domain}")

    def _release_proc(self, copies: Optional[int], timeout: Optional[float]) -> Proc[None]:
        n = self._copies if copies is None else copies
        if copies is None and n == 0:
            return
        self._check("release", n)
        if self._session is None:
            self._copies -= n
            return
        req = v1.ReleaseRequest(
            session_id=self._session.id, resource=self.resource, domain=self.domain, copies=n, groups=self.groups
        )
        t = call_timeout(timeout, self._sessions.call_timeout)
        try:
            yield Call(self._sessions.server(), _proto.RELEASE, req, t)
        except grpc.RpcError as e:
            raise self._failed("release", e) from None
        self._copies -= n

    def _transfer_proc(self, copies: int, ttl: Optional[float], timeout: Optional[float]) -> Proc[str]:
        if ttl is not None and ttl < 0:
            raise InvalidArgument(f"transfer ttl {ttl} is negative")
        if self._session is None:
            raise FailedPrecondition(f"transfer of {self.resource}/{self.domain}: a degraded hold; the server holds nothing")
        self._check("transfer", copies)
        req = v1.TransferRequest(
            session_id=self._session.id, resource=self.resource, domain=self.domain, copies=copies, groups=self.groups
        )
        if ttl:
            req.ttl.CopyFrom(duration(ttl))
        t = call_timeout(timeout, self._sessions.call_timeout)
        try:
            r = yield Call(self._sessions.server(), _proto.TRANSFER, req, t)
        except grpc.RpcError as e:
            raise self._failed("transfer", e) from None
        if not r.transfer_id:
            raise Unavailable("Transfer: an answer without a transfer_id")
        self._copies -= copies
        return r.transfer_id  # type: ignore[no-any-return]

    def _exit_failed(self, e: SluiceError, exc_type: Optional[Type[BaseException]]) -> None:
        if exc_type is None:
            raise e
        log.warning("sluice: releasing %s/%s after an exception: %s", self.resource, self.domain, e)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.resource!r}, {self.domain!r}, copies={self.copies}, degraded={self.degraded})"


class Hold(_HoldBase):
    """Copies of a copy-limited resource held for a domain in the client's
    session (:meth:`sluice.Client.reserve_copies`, :meth:`sluice.Client.seize`),
    or granted by the client alone while the server could not be reached
    (``degraded``: the server holds nothing for it).

    Release what you no longer use; leaving a ``with`` block releases what is
    still held; whatever is not released, the server releases when the
    session ends (the client closes, or the process dies). Thread-safe;
    release and transfer are serialised.

    Source: charon-paper.md, sections 3.1 and 3.2 (implicit release).
    """

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._lock = threading.Lock()

    @property
    def copies(self) -> int:
        """The copies held now: granted or seized, less those released or
        transferred; 0 once the session has ended."""
        if self.err() is not None:
            return 0
        with self._lock:
            return self._copies

    def release(self, copies: Optional[int] = None, timeout: Optional[float] = None) -> None:
        """Gives back ``copies`` of those held (None: all of them; partial
        releases allowed), within ``timeout`` seconds (None: the client's
        call timeout; 0 or less: :class:`sluice.DeadlineExceeded`, nothing
        sent). Raises :class:`sluice.InvalidArgument` for fewer than 1,
        :class:`sluice.FailedPrecondition` for more than held (nothing
        sent), the session's error once it has ended, or the server's
        error — when it did not answer (:class:`sluice.Unavailable`) the
        copies stay counted here and the server releases them at the
        latest when the session ends."""
        sessions: _Sessions = self._sessions  # type: ignore[assignment]
        with self._lock:
            drive(self._release_proc(copies, timeout), sessions.perform)

    def transfer(self, copies: int, ttl: Optional[float] = None, timeout: Optional[float] = None) -> str:
        """Stages ``copies`` of those held for another session to seize
        (:meth:`sluice.Client.seize`, usually in another process: send it the
        id), and returns the transfer id. The copies leave this hold; the
        server releases them if nobody seizes them within ``ttl`` seconds
        (None or 0: the server's default, 30 s). Raises as :meth:`release`,
        and :class:`sluice.FailedPrecondition` for a degraded hold."""
        sessions: _Sessions = self._sessions  # type: ignore[assignment]
        with self._lock:
            return drive(self._transfer_proc(copies, ttl, timeout), sessions.perform)

    def __enter__(self) -> "Hold":
        return self

    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        """Releases every copy still held. If the block raised, a failure to
        release is logged and the block's exception goes on; otherwise it is
        raised (the session's error when the copies were lost meanwhile)."""
        try:
            self.release()
        except SluiceError as e:
            self._exit_failed(e, exc_type)
