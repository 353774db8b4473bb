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

This is the Go client's behaviour (``client/quota``: ReserveCopies, Hold,
Seize; docs/charon.md), including the paper's retry policy and fail-open.

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
from typing import TYPE_CHECKING, Callable, Iterator, List, Optional, Tuple, Type

import grpc
from google.protobuf import duration_pb2

from ._proto.sluice.v1 import limits_pb2 as v1
from ._proto.sluice.v1 import limits_pb2_grpc as v1_grpc
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


def call_timeout(timeout: Optional[float], default: float) -> float:
    """A call's timeout in seconds: ``default`` (the client's call timeout)
    for None; 0 or less is no time at all: :class:`sluice.DeadlineExceeded`
    at once, as the Go client's context whose deadline has passed."""
    if timeout is None:
        return default
    if not timeout > 0:
        raise DeadlineExceeded(f"timeout {timeout} s: no time to ask")
    return timeout


def duration(seconds: float) -> duration_pb2.Duration:
    """A protobuf Duration of ``seconds``."""
    d = duration_pb2.Duration()
    d.FromNanoseconds(int(round(seconds * 1e9)))
    return d


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


class _Session:
    """A session the client opened."""

    def __init__(self, sid: str, ttl: float, now: float) -> None:
        self.id = sid
        self.ttl = ttl
        self.acked = now
        self.ended = threading.Event()
        self.error: Optional[SluiceError] = None  # why it ended
        self.lock = threading.Lock()
        self.call: Optional[grpc.Future] = None

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
        return max(self.ttl / 3, 0.001)


class _Sessions:
    """The copy side of a :class:`sluice.Client`: its session, kept alive
    in the background, and the calls on copies."""

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
        self.server = server
        self.channels = channels
        self.call_timeout = call_timeout
        self.session_ttl = session_ttl
        self.fail_open = fail_open
        self.backoff_unit = backoff_unit
        self.on_session_lost = on_session_lost
        self.mu = threading.Lock()
        self.cur: Optional[_Session] = None
        self.opening: Optional[threading.Event] = None
        self.closed = threading.Event()
        self.threads: List[threading.Thread] = []

    def stub(self) -> v1_grpc.LimitsStub:
        return v1_grpc.LimitsStub(self.channels.get(self.server()))

    def timeout(self, deadline: Optional[float]) -> float:
        """The timeout of one request: the call timeout, within deadline."""
        if deadline is None:
            return self.call_timeout
        left = deadline - time.monotonic()
        if left <= 0:
            raise _deadline()
        return min(self.call_timeout, left)

    # --- the session ------------------------------------------------------

    def session(self, deadline: Optional[float]) -> _Session:
        """The live session, opening one if there is none (one OpenSession
        at a time; concurrent callers wait for it)."""
        while True:
            with self.mu:
                if self.closed.is_set():
                    raise Closed("client closed")
                s = self.cur
                if s is not None and s.err() is None:
                    return s
                w = self.opening
                if w is None:
                    w = threading.Event()
                    self.opening = w
                    mine = True
                else:
                    mine = False
            if not mine:
                left = None if deadline is None else deadline - time.monotonic()
                if not w.wait(left) and deadline is not None:
                    raise _deadline()
                continue
            try:
                s = self._open(deadline)
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
                self._end(s)
                raise Closed("client closed")
            return s

    def _open(self, deadline: Optional[float]) -> _Session:
        try:
            r = self.stub().OpenSession(
                v1.OpenSessionRequest(ttl=duration(self.session_ttl)), timeout=self.timeout(deadline)
            )
        except grpc.RpcError as e:
            raise from_rpc_error(e, "OpenSession") from None
        if not r.session_id:
            raise Unavailable("OpenSession: an answer without a session_id")
        ttl = r.ttl.ToNanoseconds() / 1e9 if r.HasField("ttl") else 0.0
        s = _Session(r.session_id, ttl if ttl > 0 else self.session_ttl, time.monotonic())
        log.debug("sluice: session %s… opened, ttl %.1f s", s.id[:8], s.ttl)
        return s

    def lose(self, s: _Session, cause: str) -> None:
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

    def _end(self, s: _Session) -> None:
        """Ends s (closed) and asks the server to release its holds (best
        effort, within 2 s)."""
        if not s.finish(Closed("client closed: the session's copies were released"), cancel=False):
            return
        try:
            self.stub().CloseSession(v1.CloseSessionRequest(session_id=s.id), timeout=2.0)
        except grpc.RpcError as e:
            log.debug("sluice: closing the session: %s", e)
        finally:
            s.cancel()

    def close(self) -> None:
        with self.mu:
            self.closed.set()
            s, self.cur = self.cur, None
            threads = list(self.threads)
        if s is not None:
            self._end(s)
        for t in threads:
            if t is not threading.current_thread():
                t.join(5.0)

    def retry_delay(self, i: int) -> float:
        """The paper's jitter(2^i) in backoff units: uniform in
        [v - v/4, v + v/4) for v = 2^i units."""
        v = self.backoff_unit * (2.0 ** min(max(i, 0), 100))
        return v * 0.75 + random.random() * v * 0.5

    def _keepalive(self, s: _Session) -> None:
        """Keeps s alive until it ends or the client closes: one stream at a
        time, renewing every third of the ttl; a broken stream is reopened
        at once, then after backoff sleeps within what is left of the ttl.
        s is lost when the server answers NOT_FOUND, or when its ttl passes
        without a renewal the server confirmed."""
        i = 0
        while True:
            acked, code = self._stream(s)
            if s.ended.is_set() or self.closed.is_set():
                return
            if acked:
                i = 0
            if code == grpc.StatusCode.NOT_FOUND or code is _EXPIRED:
                self.lose(s, "the server no longer knows it" if code == grpc.StatusCode.NOT_FOUND else "not renewed within its ttl")
                return
            left = s.acked + s.ttl - time.monotonic()
            if left <= 0:
                self.lose(s, f"not renewed within its ttl ({s.ttl} s)")
                return
            if i > 0:
                if s.ended.wait(min(self.retry_delay(i), left)):
                    return
            i += 1

    def _stream(self, s: _Session) -> Tuple[bool, object]:
        """Runs one keep-alive stream for s until it breaks; returns whether
        a renewal was confirmed on it, and the code that ended it (or
        _EXPIRED)."""
        stop = threading.Event()
        expired = threading.Event()
        req = v1.KeepAliveRequest(session_id=s.id)
        holder: List[grpc.Future] = []

        def requests() -> Iterator[v1.KeepAliveRequest]:
            yield req
            while not stop.wait(s.interval()):
                if s.ended.is_set():
                    return
                if time.monotonic() - s.acked >= s.ttl:
                    expired.set()
                    if holder:
                        holder[0].cancel()
                    return
                yield req

        acked = False
        code: object = None
        try:
            call = self.stub().KeepAlive(requests())
            holder.append(call)
            with s.lock:
                if s.ended.is_set():
                    call.cancel()
                s.call = call
            for r in call:
                if r.HasField("ttl") and r.ttl.ToNanoseconds() > 0:
                    s.ttl = r.ttl.ToNanoseconds() / 1e9
                s.acked = time.monotonic()
                acked = True
        except grpc.RpcError as e:
            code = e.code()  # type: ignore[attr-defined]
        finally:
            stop.set()
        if expired.is_set():
            code = _EXPIRED
        return acked, code

    # --- calls --------------------------------------------------------------

    def reserve(
        self, resource: str, domain: str, copies: int, min_copies: int, max_wait: float, timeout: Optional[float]
    ) -> "Hold":
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
                s = self.session(deadline)
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
                m = self.stub().Reserve(req, timeout=self.timeout(deadline))
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
            if ok:
                res = Reservation.of(m)
                return Hold(self, s, resource, domain, [g.name for g in res.groups], m.granted, res, waited, i)
            res = Reservation.of(m)
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
            if self.closed.wait(d):
                raise Closed("client closed")
            i += 1

    def _fail_open(self, resource: str, domain: str, least: int, start: float, i: int, cause: Exception) -> "Hold":
        if not self.fail_open:
            if isinstance(cause, SluiceError):
                raise cause
            raise Unavailable(str(cause))
        log.warning("sluice: limits service unreachable or failing (%s); granting %d copies of %s/%s by itself", cause, least, resource, domain)
        return Hold(self, None, resource, domain, [], least, Reservation(), time.monotonic() - start, i)

    def seize(self, transfer_id: str, timeout: Optional[float]) -> "Hold":
        if not transfer_id:
            raise InvalidArgument("empty transfer id")
        deadline = None if timeout is None else time.monotonic() + timeout
        reopened = False
        while True:
            s = self.session(deadline)
            try:
                m = self.stub().Seize(v1.SeizeRequest(session_id=s.id, transfer_id=transfer_id), timeout=self.timeout(deadline))
            except grpc.RpcError as e:
                if _session_gone(e) and not reopened:
                    self.lose(s, "the server no longer knows it")
                    reopened = True
                    continue
                raise from_rpc_error(e, "Seize") from None
            if m.copies < 1:
                raise Unavailable(f"Seize: an answer seizing {m.copies} copies")
            return Hold(self, s, m.resource, m.domain, list(m.groups), m.copies, Reservation(), 0.0, 1)


class _Timeout(DeadlineExceeded):
    """The caller's timeout passed (not the server's slowness)."""


def _deadline() -> SluiceError:
    return _Timeout("the call's timeout passed")


_EXPIRED = object()


class Hold:
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

    def __init__(
        self,
        sessions: _Sessions,
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
        self.resource = resource
        self.domain = domain
        self.groups: Tuple[str, ...] = tuple(groups)
        self.reservation = reservation
        self.waited = waited
        self.attempts = attempts
        self._copies = copies
        self._lock = threading.Lock()

    @property
    def copies(self) -> int:
        """The copies held now: granted or seized, less those released or
        transferred; 0 once the session has ended."""
        if self.err() is not None:
            return 0
        with self._lock:
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

    def release(self, copies: Optional[int] = None, timeout: Optional[float] = None) -> None:
        """Gives back ``copies`` of those held (None: all of them; partial
        releases allowed), within ``timeout`` seconds (default: the client's
        call timeout). Raises :class:`sluice.InvalidArgument` for fewer than
        1, :class:`sluice.FailedPrecondition` for more than held (nothing
        sent), the session's error once it has ended, or the server's
        error — when it did not answer (:class:`sluice.Unavailable`) the
        copies stay counted here and the server releases them at the
        latest when the session ends."""
        with self._lock:
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
            try:
                self._sessions.stub().Release(req, timeout=call_timeout(timeout, self._sessions.call_timeout))
            except grpc.RpcError as e:
                raise self._failed("release", e) from None
            self._copies -= n

    def transfer(self, copies: int, ttl: Optional[float] = None, timeout: Optional[float] = None) -> str:
        """Stages ``copies`` of those held for another session to seize
        (:meth:`sluice.Client.seize`, usually in another process: send it the
        id), and returns the transfer id. The copies leave this hold; the
        server releases them if nobody seizes them within ``ttl`` seconds
        (None: the server's default, 30 s). Raises as :meth:`release`, and
        :class:`sluice.FailedPrecondition` for a degraded hold."""
        with self._lock:
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
            try:
                r = self._sessions.stub().Transfer(req, timeout=call_timeout(timeout, self._sessions.call_timeout))
            except grpc.RpcError as e:
                raise self._failed("transfer", e) from None
            if not r.transfer_id:
                raise Unavailable("Transfer: an answer without a transfer_id")
            self._copies -= copies
            return r.transfer_id

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
            if exc_type is None:
                raise
            log.warning("sluice: releasing %s/%s after an exception: %s", self.resource, self.domain, e)

    def __repr__(self) -> str:
        return f"Hold({self.resource!r}, {self.domain!r}, copies={self.copies}, degraded={self.degraded})"
