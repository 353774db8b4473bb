"""The asyncio client: :class:`Client`, Sluice's three jobs on grpc.aio."""

from __future__ import annotations

from types import TracebackType
from typing import Callable, Optional, Sequence, Type, Union

from .._transport import TLS
from ..client import Allowance, QuotaAllowance, _Settings, allow_proc, quota_allow_proc
from ..errors import Closed, SluiceError
from ..leases import Mode
from ._runtime import AioChannels, drive
from .copies import Hold, HoldCall, _AioSessions
from .leases import Resource, _AioLeases

__all__ = ["Client"]


class Client:
    """A client of Sluice servers for asyncio: leases, server-side limits
    and copy-limited sessions, with :class:`sluice.Client`'s behaviour — the
    same refresh planning, error mapping and retry schedule (one code path:
    both run ``sluice._ops`` procedures) — on grpc.aio, never blocking the
    event loop. An async context manager::

        async with sluice.aio.Client("127.0.0.1:15000") as client:
            async with client.resource("db/replica", wants=20) as replica:
                limiter = replica.rate_limiter(max_burst_seconds=0.1)
                await limiter.acquire(timeout=1)
            a = await client.allow("logins", "user-42")
            async with client.reserve_copies("sandboxes", "acme", copies=2) as hold:
                ...

    The arguments are :class:`sluice.Client`'s: ``addresses`` ("host:port",
    several comma-separated, or a list), ``client_id`` (default
    host:pid:n), ``tls``, ``mode``, ``push``, ``call_timeout`` (seconds, >
    0), ``session_ttl`` (seconds, > 0), ``fail_open``, ``backoff_unit``
    (seconds, > 0) and ``on_session_lost(session_id, error)`` (called on
    the event loop; it should return promptly). Raises
    :class:`sluice.InvalidArgument` for bad settings.

    It may be made outside a coroutine, but it belongs to the event loop it
    is first used on: its channels, the refresh and watch tasks (started by
    the first :meth:`resource`) and the session's keep-alive task (started
    by the first :meth:`reserve_copies`) live there. Use it from that loop
    only; :meth:`close` (or leaving ``async with``) cancels the tasks and
    waits for them to end.
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
        """The constructor's work; the test hooks come only through
        ``sluice._testing.aio_client``."""
        cfg = _Settings(addresses, client_id, mode, call_timeout, session_ttl, backoff_unit)
        self._id = cfg.id
        self._channels = AioChannels(tls)
        self._call_timeout = call_timeout
        self._closed = False
        self._leases = _AioLeases(self._id, cfg.addrs, self._channels, mode=mode, push=push, clock=clock, manual=manual)
        self._sessions = _AioSessions(
            self._leases.server, self._channels, call_timeout, session_ttl, fail_open, backoff_unit, on_session_lost
        )

    @property
    def id(self) -> str:
        """The client id."""
        return self._id

    @property
    def server(self) -> str:
        """The address the client talks to now."""
        return self._leases.server()

    def _check_open(self) -> None:
        if self._closed:
            raise Closed("client closed")

    # --- leases ------------------------------------------------------------------

    def resource(self, resource_id: str, wants: float, priority: int = 0) -> Resource:
        """A handle on resource ``resource_id`` asking for ``wants`` (the
        resource's unit) in priority band ``priority``, as
        :meth:`sluice.Client.resource`; it sends nothing itself (the
        refresh task does, at once for a new resource), so it is not a
        coroutine, but it must be called on the client's event loop (the
        first call starts the refresh task there: RuntimeError outside a
        running loop). Use ``async with client.resource(...) as r:`` to
        release it when the block ends. Raises
        :class:`sluice.InvalidArgument` for an empty id or wants that are
        negative or not finite, :class:`sluice.Closed` once closed."""
        self._check_open()
        return self._leases.resource(resource_id, wants, priority)

    def set_kill_switch(self, on: bool) -> None:
        """Turns the kill switch on or off, as
        :meth:`sluice.Client.set_kill_switch`: while on, every capacity is
        ``math.inf``."""
        self._leases.set_kill_switch(on)

    # --- server-side limits ------------------------------------------------------

    async def allow(
        self,
        resource: str,
        domain: str,
        tokens: int = 1,
        min_tokens: int = 0,
        max_wait: Optional[float] = None,
        timeout: Optional[float] = None,
    ) -> Allowance:
        """Asks ``sluice.v1.Limits/Allow`` for ``tokens`` of the bucket of
        (``resource``, ``domain``), as :meth:`sluice.Client.allow`: an
        over-limit answer is a status; RPC failures raise
        :class:`sluice.SluiceError` within ``timeout`` seconds (None: the
        call timeout; 0 or less: :class:`sluice.DeadlineExceeded` at once,
        nothing sent)."""
        self._check_open()
        proc = allow_proc(self.server, resource, domain, tokens, min_tokens, max_wait, timeout, self._call_timeout)
        return await drive(proc, self._channels.call)

    async def quota_allow(
        self,
        namespace: str,
        bucket: str,
        tokens: int = 1,
        max_wait: Optional[float] = None,
        timeout: Optional[float] = None,
    ) -> QuotaAllowance:
        """Asks the quota service's ``quotaservice.QuotaService/Allow``, as
        :meth:`sluice.Client.quota_allow` (``timeout``: None the call
        timeout, 0 or less :class:`sluice.DeadlineExceeded` at once)."""
        self._check_open()
        proc = quota_allow_proc(self.server, namespace, bucket, tokens, max_wait, timeout, self._call_timeout)
        return await drive(proc, self._channels.call)

    # --- copies --------------------------------------------------------------------

    def reserve_copies(
        self,
        resource: str,
        domain: str,
        copies: int = 1,
        min_copies: int = 0,
        max_wait: float = 0.0,
        timeout: Optional[float] = None,
    ) -> HoldCall:
        """Holds copies of the copy-limited ``resource`` for ``domain`` in
        the client's session, as :meth:`sluice.Client.reserve_copies` (the
        most in [``min_copies``, ``copies``]; Charon's retry policy until
        ``max_wait`` seconds, then :class:`sluice.OverLimit`; ``timeout``
        seconds for the whole call, None: none, 0 or less:
        :class:`sluice.DeadlineExceeded` at once; fail-open). Returns an
        awaitable: ``hold = await client.reserve_copies(...)``, or ``async
        with client.reserve_copies(...) as hold:`` to release what is still
        held when the block ends."""

        async def make() -> Hold:
            self._check_open()
            return await self._sessions.reserve(resource, domain, copies, min_copies, max_wait, timeout)

        return HoldCall(make)

    def seize(self, transfer_id: str, timeout: Optional[float] = None) -> HoldCall:
        """Takes the copies of a transfer staged by
        :meth:`sluice.aio.Hold.transfer` (or :meth:`sluice.Hold.transfer`)
        into the client's session, once, as :meth:`sluice.Client.seize`.
        Returns an awaitable, also usable with ``async with``."""

        async def make() -> Hold:
            self._check_open()
            return await self._sessions.seize(transfer_id, timeout)

        return HoldCall(make)

    # --- closing -------------------------------------------------------------------

    async def close(self, timeout: float = 2.0) -> None:
        """Closes the client, as :meth:`sluice.Client.close`: gives every
        lease back (one ``ReleaseCapacity``, best effort, within ``timeout``
        seconds; 0 or less sends none), closes the session (the server
        releases every copy it held), cancels the background tasks and
        awaits their end, and closes the channels. Closing twice does
        nothing. Never raises for what the servers answer."""
        if self._closed:
            return
        self._closed = True
        try:
            await self._leases.close(timeout)
            await self._sessions.close()
        finally:
            await self._channels.close()

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"sluice.aio.Client(id={self._id!r}, server={self.server!r})"
