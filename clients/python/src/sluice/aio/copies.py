"""Copy-limited sessions for asyncio: :class:`Hold` and the client's
session, kept alive by an asyncio task over the grpc.aio ``KeepAlive``
stream. Reserving (Charon's retry policy, fail-open), seizing, releasing,
transferring and when to give a session up are ``sluice.copies``' own
procedures, the threaded client's.

Source: charon-paper.md, sections 3.1, 3.2 and 4.3.
"""

from __future__ import annotations

import asyncio
import time
from types import TracebackType
from typing import Any, AsyncIterator, Awaitable, Callable, Generator, Optional, Set, Tuple, Type

import grpc

from .. import _proto
from .._ops import Call, GetSession, Sleep
from .._proto import limits as v1
from ..copies import EXPIRED, _deadline, _HoldBase, _Session, _SessionBook
from ..errors import Closed, SluiceError
from ._runtime import AioChannels, drive, wait_event

__all__ = ["Hold"]


class Hold(_HoldBase):
    """Copies of a copy-limited resource held for a domain in a
    :class:`sluice.aio.Client`'s session, or granted by the client alone
    while the server could not be reached (``degraded``) — as
    :class:`sluice.Hold`, with :meth:`release` and :meth:`transfer`
    awaitable and ``async with`` releasing what is still held::

        async with client.reserve_copies("sandboxes", "acme", copies=2) as hold:
            use(hold.copies)

    Release what you no longer use; whatever is not released, the server
    releases when the session ends. Release and transfer are serialised
    (an :class:`asyncio.Lock`); use a hold on its client's event loop.

    Source: charon-paper.md, sections 3.1 and 3.2 (implicit release).
    """

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._lock = asyncio.Lock()

    async def release(self, copies: Optional[int] = None, timeout: Optional[float] = None) -> None:
        """Gives back ``copies`` of those held (None: all of them), within
        ``timeout`` seconds (None: the client's call timeout; 0 or less:
        :class:`sluice.DeadlineExceeded`, nothing sent). Raises as
        :meth:`sluice.Hold.release`."""
        sessions: _AioSessions = self._sessions  # type: ignore[assignment]
        async with self._lock:
            await drive(self._release_proc(copies, timeout), sessions.perform)

    async def transfer(self, copies: int, ttl: Optional[float] = None, timeout: Optional[float] = None) -> str:
        """Stages ``copies`` of those held for another session to seize and
        returns the transfer id; the server releases them if nobody seizes
        them within ``ttl`` seconds (None or 0: its default, 30 s). Raises
        as :meth:`sluice.Hold.transfer`."""
        sessions: _AioSessions = self._sessions  # type: ignore[assignment]
        async with self._lock:
            return await drive(self._transfer_proc(copies, ttl, timeout), sessions.perform)

    async def __aenter__(self) -> "Hold":
        return self

    async def __aexit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        """Releases every copy still held. If the block raised, a failure to
        release is logged and the block's exception goes on; otherwise it is
        raised."""
        try:
            await self.release()
        except SluiceError as e:
            self._exit_failed(e, exc_type)


class HoldCall:
    """What :meth:`sluice.aio.Client.reserve_copies` and
    :meth:`sluice.aio.Client.seize` return: ``await`` it for the
    :class:`Hold`, or use it in ``async with`` to hold the copies for the
    block (released when it ends). Nothing is sent until then; each
    ``await`` sends anew."""

    def __init__(self, make: Callable[[], Awaitable[Hold]]) -> None:
        self._make = make
        self._hold: Optional[Hold] = None

    def __await__(self) -> Generator[Any, None, Hold]:
        return self._make().__await__()

    async def __aenter__(self) -> Hold:
        self._hold = await self._make()
        return self._hold

    async def __aexit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        assert self._hold is not None
        await self._hold.__aexit__(exc_type, exc, tb)


class _AioSessions(_SessionBook):
    """The copy side of a :class:`sluice.aio.Client`: its book run on
    grpc.aio, the session kept alive by an asyncio task."""

    def __init__(
        self,
        server: Callable[[], str],
        channels: AioChannels,
        call_timeout: float,
        session_ttl: float,
        fail_open: bool,
        backoff_unit: float,
        on_session_lost: Optional[Callable[[str, SluiceError], None]] = None,
    ) -> None:
        super().__init__(server, call_timeout, session_ttl, fail_open, backoff_unit, on_session_lost)
        self.hold_class = Hold
        self.channels = channels
        self.opening: Optional["asyncio.Future[None]"] = None
        self.tasks: Set["asyncio.Task[None]"] = set()
        self._closed_ev: Optional[asyncio.Event] = None

    def _closed_event(self) -> asyncio.Event:
        if self._closed_ev is None:
            self._closed_ev = asyncio.Event()
            if self.closed.is_set():
                self._closed_ev.set()
        return self._closed_ev

    async def perform(self, op: object) -> Any:
        if isinstance(op, Call):
            return await self.channels.call(op)
        if isinstance(op, GetSession):
            return await self.session(op.deadline)
        if isinstance(op, Sleep):
            return await wait_event(self._closed_event(), op.seconds)
        raise TypeError(f"unknown operation {op!r}")

    async def session(self, deadline: Optional[float]) -> _Session:
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
                    w = self.opening = asyncio.get_running_loop().create_future()
            if not mine:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise _deadline()
                done, _ = await asyncio.wait({w}, timeout=left)
                if not done:
                    raise _deadline()
                continue
            try:
                s = await drive(self.open_proc(deadline), self.perform)
            finally:
                with self.mu:
                    self.opening = None
                if not w.done():
                    w.set_result(None)
            with self.mu:
                closed = self.closed.is_set()
                if not closed:
                    self.cur = s
            if closed:
                await drive(self.end_proc(s), self.perform)
                raise Closed("client closed")
            t = asyncio.get_running_loop().create_task(self._keepalive(s), name="sluice-keepalive")
            self.tasks.add(t)
            t.add_done_callback(self.tasks.discard)
            return s

    async def close(self) -> None:
        with self.mu:
            self.closed.set()
            s, self.cur = self.cur, None
        if self._closed_ev is not None:
            self._closed_ev.set()
        if s is not None:
            await drive(self.end_proc(s), self.perform)
        me = asyncio.current_task()
        tasks = [t for t in self.tasks if t is not me]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _keepalive(self, s: _Session) -> None:
        """Keeps s alive until it ends or the client closes: one stream at a
        time, renewing every third of the ttl (``after_stream`` says what
        follows a broken one)."""
        ended = asyncio.Event()
        s.on_end.append(ended.set)
        if s.ended.is_set():
            return
        i = 0
        while True:
            acked, code = await self._stream(s, ended)
            wait, i = self.after_stream(s, acked, code, i)
            if wait is None:
                return
            if wait > 0 and await wait_event(ended, wait):
                return

    async def _stream(self, s: _Session, ended: asyncio.Event) -> Tuple[bool, object]:
        """Runs one keep-alive stream for s until it breaks; returns whether
        a renewal was confirmed on it, and the code that ended it (or
        EXPIRED)."""
        req = v1.KeepAliveRequest(session_id=s.id)
        expired = False
        call: Any = None

        async def requests() -> AsyncIterator[v1.KeepAliveRequest]:
            nonlocal expired
            yield req
            while not await wait_event(ended, s.interval()):
                if s.expired(time.monotonic()):
                    expired = True
                    if call is not None:
                        call.cancel()
                    return
                yield req

        acked = False
        code: object = None
        try:
            call = self.channels.method(self.server(), _proto.KEEP_ALIVE)(requests())
            with s.lock:
                if s.ended.is_set():
                    call.cancel()
                s.call = call
            async for r in call:
                s.renewed(r, time.monotonic())
                acked = True
        except grpc.RpcError as e:
            code = e.code()  # type: ignore[attr-defined]
        except asyncio.CancelledError:
            # grpc.aio raises CancelledError from a call cancelled by
            # cancel(): ours (the ttl passed, the session ended) goes on
            # below; the task's own cancellation propagates.
            if not (expired or s.ended.is_set() or self.closed.is_set()):
                raise
        if expired:
            code = EXPIRED
        return acked, code

    async def reserve(
        self, resource: str, domain: str, copies: int, min_copies: int, max_wait: float, timeout: Optional[float]
    ) -> Hold:
        hold = await drive(self.reserve_proc(resource, domain, copies, min_copies, max_wait, timeout), self.perform)
        return hold  # type: ignore[return-value]

    async def seize(self, transfer_id: str, timeout: Optional[float]) -> Hold:
        hold = await drive(self.seize_proc(transfer_id, timeout), self.perform)
        return hold  # type: ignore[return-value]
