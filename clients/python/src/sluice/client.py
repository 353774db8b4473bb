"""The client: one per process, for Sluice's three client-side jobs."""

from __future__ import annotations

import itertools
import os
import socket
import threading
from dataclasses import dataclass
from types import TracebackType
from typing import Callable, List, Optional, Sequence, Type, Union

import grpc

from . import _proto
from ._ops import Call, Proc, call_timeout, drive
from ._proto import duration, enum_name
from ._proto import limits as v1
from ._proto import quota_service as qs
from ._transport import TLS, Channels, parse_addresses
from .copies import Hold, _Sessions
from .errors import Closed, InvalidArgument, SluiceError, from_rpc_error
from .leases import Mode, Resource, _Leases

__all__ = ["Client", "Allowance", "QuotaAllowance", "new_client_id"]

_seq = itertools.count(1)


def new_client_id() -> str:
    """A client id unique in this process and across hosts and processes:
    host:pid:n. Source: doorman-design.md, "Client identifier"."""
    return f"{socket.gethostname() or 'unknown'}:{os.getpid()}:{next(_seq)}"


@dataclass(frozen=True)
class Allowance:
    """The answer of ``sluice.v1.Limits/Allow``.

    ``status`` is the server's status name: ``OK``, ``REJECTED_TIMEOUT``
    (not enough tokens within the maximum wait), ``REJECTED_NO_BUCKET``,
    ``REJECTED_TOO_MANY_BUCKETS``, ``REJECTED_TOO_MANY_TOKENS_REQUESTED``.
    With OK, ``granted`` tokens are usable after ``wait`` seconds. A
    rejection's ``retry_after`` is in seconds (None: waiting cannot make it
    succeed). ``remaining`` is the tokens left in the bucket, ``limit`` its
    size, ``bucket`` which configuration answered; ``response`` is the whole
    answer (burst-tier context and all)."""

    status: str
    granted: int
    wait: float
    retry_after: Optional[float]
    remaining: float
    limit: int
    bucket: str
    response: v1.AllowResponse

    @property
    def ok(self) -> bool:
        """Whether tokens were granted."""
        return self.status == "OK"


@dataclass(frozen=True)
class QuotaAllowance:
    """The answer of the quota service's ``quotaservice.QuotaService/Allow``:
    ``status`` (``OK``, ``REJECTED_TIMEOUT``, ``REJECTED_NO_BUCKET``, …),
    ``granted`` tokens, usable after ``wait`` seconds."""

    status: str
    granted: int
    wait: float

    @property
    def ok(self) -> bool:
        """Whether tokens were granted."""
        return self.status == "OK"


class _Settings:
    """A client's settings, checked: what both APIs' clients take."""

    def __init__(
        self,
        addresses: Union[str, Sequence[str]],
        client_id: Optional[str],
        mode: Mode,
        call_timeout: float,
        session_ttl: float,
        backoff_unit: float,
    ) -> None:
        self.addrs: List[str] = parse_addresses(addresses)
        if client_id is not None and not client_id:
            raise InvalidArgument("empty client id")
        if not isinstance(mode, Mode):
            raise InvalidArgument(f"mode {mode!r} is not a sluice.Mode")
        if not call_timeout > 0 or not session_ttl > 0 or not backoff_unit > 0:
            raise InvalidArgument("call_timeout, session_ttl and backoff_unit must be > 0")
        self.id = client_id or new_client_id()


def allow_proc(
    server: str,
    resource: str,
    domain: str,
    tokens: int,
    min_tokens: int,
    max_wait: Optional[float],
    timeout: Optional[float],
    default_timeout: float,
) -> Proc[Allowance]:
    """:meth:`Client.allow`, as a procedure of ``sluice._ops``."""
    req = v1.AllowRequest(resource=resource, domain=domain, tokens=tokens, min_tokens=min_tokens)
    if max_wait is not None:
        if max_wait < 0:
            raise InvalidArgument(f"max_wait {max_wait} is negative")
        req.max_wait.CopyFrom(duration(max_wait))
    t = call_timeout(timeout, default_timeout)
    try:
        r = yield Call(server, _proto.ALLOW, req, t)
    except grpc.RpcError as e:
        raise from_rpc_error(e, f"Allow {resource}/{domain}") from None
    return Allowance(
        status=enum_name(r, "status"),
        granted=r.granted,
        wait=r.wait.ToNanoseconds() / 1e9,
        retry_after=r.retry_after.ToNanoseconds() / 1e9 if r.HasField("retry_after") else None,
        remaining=r.remaining,
        limit=r.limit,
        bucket=r.bucket,
        response=r,
    )


def quota_allow_proc(
    server: str,
    namespace: str,
    bucket: str,
    tokens: int,
    max_wait: Optional[float],
    timeout: Optional[float],
    default_timeout: float,
) -> Proc[QuotaAllowance]:
    """:meth:`Client.quota_allow`, as a procedure of ``sluice._ops``."""
    req = qs.AllowRequest(namespace=namespace, bucket_name=bucket, tokens_requested=tokens)
    if max_wait is not None:
        if max_wait < 0:
            raise InvalidArgument(f"max_wait {max_wait} is negative")
        req.max_wait_time_override = True
        req.max_wait_millis_override = int(max_wait * 1000)
    t = call_timeout(timeout, default_timeout)
    try:
        r = yield Call(server, _proto.QUOTA_ALLOW, req, t)
    except grpc.RpcError as e:
        raise from_rpc_error(e, f"QuotaService.Allow {namespace}/{bucket}") from None
    return QuotaAllowance(status=enum_name(r, "status"), granted=r.tokens_granted, wait=r.wait_millis / 1000)


class Client:
    """A client of Sluice servers: leases, server-side limits and
    copy-limited sessions. One per process; thread-safe; a context manager
    (``with sluice.Client("127.0.0.1:15000") as client:``). For asyncio,
    :class:`sluice.aio.Client` is the same client with awaitable calls.

    ``addresses`` is "host:port" or several ("a:15000,b:15000", or a list):
    the client talks to the first and moves on (to the master that
    ``Discovery`` names, or the next address) when one fails or redirects
    it. ``client_id`` names this client to the servers (default
    host:pid:n). ``tls`` turns on TLS (:class:`sluice.TLS`: root
    certificates, and a client certificate for mTLS).

    Leases: ``mode`` is what a resource falls back to while its lease has
    expired (:class:`sluice.Mode`, default SAFE: the server's safe
    capacity); ``push`` keeps a ``sluice.v1.Leases/Watch`` stream open for
    leases pushed by the server (False: poll only, as Doorman's clients).

    Limits and copies: ``call_timeout`` bounds each request, in seconds;
    ``session_ttl`` is the ttl asked for the session holding copies (the
    server ends it, releasing its copies, that long after the last
    keep-alive); with ``fail_open`` (the default, as Charon's client) a
    reserve the server cannot answer is granted its minimum by the client
    alone (a degraded :class:`sluice.Hold`); ``backoff_unit`` is the unit of
    the retry policy's sleeps, in seconds; ``on_session_lost(session_id,
    error)`` is called when a session ends without the client closing it.
    ``call_timeout``, ``session_ttl`` and ``backoff_unit`` must be > 0
    (:class:`sluice.InvalidArgument`).

    Nothing is sent until used: the refresh thread starts with the first
    :meth:`resource`, the session with the first :meth:`reserve_copies`.
    """

    def __init__(
        self,
        addresses: Union[str, Sequence[str]],
        client_id: Optional[str] = None,
        *,
        tls: Optional[TLS] = None,
        mode: Mode = Mode.SAFE,
        push: bool = True,
        call_timeout: float = 1.0,
        session_ttl: float = 10.0,
        fail_open: bool = True,
        backoff_unit: float = 1.0,
        on_session_lost: Optional[Callable[[str, SluiceError], None]] = None,
    ) -> None:
        self._setup(
            addresses, client_id, tls, mode, push, call_timeout, session_ttl, fail_open, backoff_unit, on_session_lost
        )

    def _setup(
        self,
        addresses: Union[str, Sequence[str]],
        client_id: Optional[str],
        tls: Optional[TLS],
        mode: Mode,
        push: bool,
        call_timeout: float,
        session_ttl: float,
        fail_open: bool,
        backoff_unit: float,
        on_session_lost: Optional[Callable[[str, SluiceError], None]],
        clock: Optional[Callable[[], float]] = None,
        manual: bool = False,
    ) -> None:
        """The constructor's work; the test hooks (a fake Unix-seconds
        ``clock``, ``manual``: no background threads, the refresh stepped by
        hand) come only through ``sluice._testing``."""
        cfg = _Settings(addresses, client_id, mode, call_timeout, session_ttl, backoff_unit)
        self._id = cfg.id
        self._channels = Channels(tls)
        self._call_timeout = call_timeout
        self._closed = threading.Event()
        self._leases = _Leases(self._id, cfg.addrs, self._channels, mode=mode, push=push, clock=clock, manual=manual)
        self._sessions = _Sessions(
            self._leases.server, self._channels, call_timeout, session_ttl, fail_open, backoff_unit, on_session_lost
        )

    # --- identity -------------------------------------------------------------

    @property
    def id(self) -> str:
        """The client id."""
        return self._id

    @property
    def server(self) -> str:
        """The address the client talks to now."""
        return self._leases.server()

    def _check_open(self) -> None:
        if self._closed.is_set():
            raise Closed("client closed")

    # --- leases ------------------------------------------------------------------

    def resource(self, resource_id: str, wants: float, priority: int = 0) -> Resource:
        """A handle on resource ``resource_id`` asking for ``wants`` (the
        resource's unit: permits per second for a rate, slots for a gauge)
        in priority band ``priority`` (higher is more important).

        The first handle of an id registers it and sends it at once; until
        the first lease arrives its capacity is the fallback of the mode
        (0 in SAFE mode before the server named a safe capacity). Further
        handles of the id share its lease and add their wants. Raises
        :class:`sluice.InvalidArgument` for an empty id or wants that are
        negative or not finite, :class:`sluice.Closed` once closed."""
        self._check_open()
        return self._leases.resource(resource_id, wants, priority)

    def set_kill_switch(self, on: bool) -> None:
        """Turns the kill switch on or off: while on, every resource's
        capacity is ``math.inf`` (limiters and gauges admit everything)
        whatever the leases say; the leases are still refreshed, so turning
        it off restores them at once. Source: charon-paper.md, section 4.3."""
        self._leases.set_kill_switch(on)

    # --- server-side limits ------------------------------------------------------

    def allow(
        self,
        resource: str,
        domain: str,
        tokens: int = 1,
        min_tokens: int = 0,
        max_wait: Optional[float] = None,
        timeout: Optional[float] = None,
    ) -> Allowance:
        """Asks ``sluice.v1.Limits/Allow`` for ``tokens`` of the bucket of
        (``resource``, ``domain``): the most in [``min_tokens``, ``tokens``]
        (0: all or nothing), waiting at most ``max_wait`` seconds for them
        (None: the bucket's own wait timeout; it may lower it, never raise
        it). An over-limit answer is a status, not an exception; use granted
        tokens after :attr:`Allowance.wait`. Raises the server's
        :class:`sluice.SluiceError` (``InvalidArgument`` naming the field for
        a malformed request, ``Unavailable`` when it cannot decide or be
        reached) within ``timeout`` seconds (None: the call timeout; 0 or
        less: :class:`sluice.DeadlineExceeded` at once, nothing sent)."""
        self._check_open()
        proc = allow_proc(self.server, resource, domain, tokens, min_tokens, max_wait, timeout, self._call_timeout)
        return drive(proc, self._channels.call)

    def quota_allow(
        self,
        namespace: str,
        bucket: str,
        tokens: int = 1,
        max_wait: Optional[float] = None,
        timeout: Optional[float] = None,
    ) -> QuotaAllowance:
        """Asks the quota service's ``quotaservice.QuotaService/Allow`` for
        ``tokens`` of bucket ``bucket`` in ``namespace`` (Square's wire
        protocol), waiting at most ``max_wait`` seconds (None: the bucket's
        own maximum wait; it may lower it, never raise it). Every answer is
        a status (``REJECTED_INVALID_REQUEST`` for a malformed request);
        RPC failures raise :class:`sluice.SluiceError`, within ``timeout``
        seconds (None: the call timeout; 0 or less:
        :class:`sluice.DeadlineExceeded` at once, nothing sent)."""
        self._check_open()
        proc = quota_allow_proc(self.server, namespace, bucket, tokens, max_wait, timeout, self._call_timeout)
        return drive(proc, self._channels.call)

    # --- copies --------------------------------------------------------------------

    def reserve_copies(
        self,
        resource: str,
        domain: str,
        copies: int = 1,
        min_copies: int = 0,
        max_wait: float = 0.0,
        timeout: Optional[float] = None,
    ) -> Hold:
        """Holds copies of the copy-limited ``resource`` for ``domain`` in
        the client's session (opened on first use, kept alive in the
        background): the most in [``min_copies``, ``copies``] (0: all of
        them) that the domain's limit, its groups' limits and the global
        limit allow. On a rejection it asks again with Charon's retry
        policy — after the i-th, sleep min(max_wait − elapsed, jitter(2^i))
        backoff units — until ``max_wait`` seconds have passed (0: ask
        once), then raises :class:`sluice.OverLimit`. ``timeout`` (seconds,
        None: none) bounds the whole call (:class:`sluice.DeadlineExceeded`;
        0 or less: at once, nothing sent).

        Use the hold as a context manager: leaving the block releases what
        is still held. With ``fail_open``, a server that cannot be reached
        yields a degraded hold of ``min_copies`` granted by the client
        alone. Raises :class:`sluice.InvalidArgument` for counts outside
        [1, 2^53], the server's :class:`sluice.NotFound` for an unknown
        resource and :class:`sluice.FailedPrecondition` for a rate-limited
        one, :class:`sluice.Closed` once closed."""
        self._check_open()
        return self._sessions.reserve(resource, domain, copies, min_copies, max_wait, timeout)

    def seize(self, transfer_id: str, timeout: Optional[float] = None) -> Hold:
        """Takes the copies of a transfer staged by :meth:`sluice.Hold.transfer`
        (usually in another process) into the client's session, once, within
        ``timeout`` seconds (None: no bound but each request's call timeout;
        0 or less: :class:`sluice.DeadlineExceeded` at once, nothing sent).
        Raises :class:`sluice.NotFound` for a transfer that does not exist,
        was seized already or expired."""
        self._check_open()
        return self._sessions.seize(transfer_id, timeout)

    # --- closing -------------------------------------------------------------------

    def close(self, timeout: float = 2.0) -> None:
        """Closes the client: releases every lease (one ``ReleaseCapacity``,
        best effort, within ``timeout`` seconds — 0 or less sends none, and
        the server lets the leases expire; every resource's capacity becomes
        0), closes the session (the server releases every copy it held),
        stops the background threads and closes the channels. Closing twice
        does nothing. Never raises for what the servers answer."""
        if self._closed.is_set():
            return
        self._closed.set()
        try:
            self._leases.close(timeout)
            self._sessions.close()
        finally:
            self._channels.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client(id={self._id!r}, server={self.server!r})"
