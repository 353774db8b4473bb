"""Leases for asyncio: :class:`Resource` handles and the client's lease
book run as asyncio tasks (the refresh loop, the Watch stream) on grpc.aio.
The refresh step, its plan, redirects, failover, backoff and fallbacks are
``sluice.leases``' own procedures, the threaded client's (docs/python.md).

Source: doorman-design.md, "Client operation", "Client library".
"""

from __future__ import annotations

import asyncio
import logging
from types import TracebackType
from typing import Callable, List, Optional, Type

import grpc

from .. import _proto
from .._ops import Call
from .._proto import leases as v1
from ..errors import SluiceError
from ..leases import MAX_BACKOFF, Mode, _Book, _Handle, _Retry, watch_wait
from ._runtime import AioChannels, drive, wait_event
from .ratelimit import Gauge, RateLimiter

__all__ = ["Resource"]

log = logging.getLogger("sluice")


class Resource(_Handle):
    """A handle on one resource of a :class:`sluice.aio.Client`: what this
    handle wants, the lease the client holds for the resource, and the
    capacity it may use now — :class:`sluice.Resource`'s properties, with
    :meth:`release` awaitable and ``async with`` releasing it::

        async with client.resource("db/replica", wants=20) as replica:
            limiter = replica.rate_limiter()
            await limiter.acquire()

    Handles of one id in one client share one lease: their wants add up,
    and the lease is given back when the last handle is released. Reading
    is thread-safe; the limiter and gauge it makes belong to the client's
    event loop.

    Source: doorman-design.md, "Client library".
    """

    def rate_limiter(self, max_burst_seconds: float = 1.0) -> RateLimiter:
        """A SmoothBursty :class:`sluice.aio.RateLimiter` whose rate, in
        permits per second, follows this resource's capacity from the
        moment it changes (set by the client's refresh task).
        ``max_burst_seconds`` (0 to 1) is how many seconds of unused permits
        it may store."""
        lim = RateLimiter(0.0, max_burst_seconds)
        self.on_change(lim.set_rate)
        return lim

    def gauge(self) -> Gauge:
        """A :class:`sluice.aio.Gauge` whose capacity follows this
        resource's: at most floor(capacity) in flight."""
        g = Gauge(0.0)
        self.on_change(g.set_capacity)
        return g

    async def release(self, timeout: float = 2.0) -> None:
        """Releases this handle. When it is the resource's last, the lease
        is given back to the server (``ReleaseCapacity``, within ``timeout``
        seconds) and the capacity becomes 0; otherwise the client asks for
        the remaining handles' wants. Releasing twice does nothing. Raises
        the :class:`sluice.SluiceError` of a failed ``ReleaseCapacity`` (the
        lease is dropped here all the same; the server lets it expire); a
        ``timeout`` of 0 or less sends nothing and raises
        :class:`sluice.DeadlineExceeded`."""
        if not self._close_handle():
            return
        leases: _AioLeases = self._state.leases  # type: ignore[assignment]
        s = leases.unregister(self)
        if s is not None:
            await drive(leases.release_proc([s.id], timeout), leases.perform)

    async def __aenter__(self) -> "Resource":
        return self

    async def __aexit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        """Releases the handle (:meth:`release`) when the block ends."""
        await self.release()


class _AioLeases(_Book):
    """The lease side of a :class:`sluice.aio.Client`: its book run by a
    refresh task and a watch task on the event loop of the first
    :meth:`sluice.aio.Client.resource`."""

    def __init__(
        self,
        client_id: str,
        addresses: List[str],
        channels: AioChannels,
        mode: Mode = Mode.SAFE,
        push: bool = True,
        clock: Optional[Callable[[], float]] = None,
        manual: bool = False,
    ) -> None:
        super().__init__(client_id, addresses, mode, push, clock, manual)
        self.channels = channels
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self.wake: Optional[asyncio.Event] = None
        self.tasks: List["asyncio.Task[None]"] = []
        self.watch_call: Optional[grpc.aio.Call] = None

    async def perform(self, op: Call) -> object:
        return await self.channels.call(op)

    async def step_now(self) -> float:
        """Runs one refresh step (:meth:`sluice.leases._Book.step`)."""
        return await drive(self.step(), self.perform)

    # --- tasks ------------------------------------------------------------

    def _start(self) -> None:
        if self.tasks:
            return
        loop = asyncio.get_running_loop()
        self.loop = loop
        self.wake = asyncio.Event()
        self.tasks.append(loop.create_task(self._refresh_loop(), name="sluice-refresh"))
        if self.push:
            self.tasks.append(loop.create_task(self._watch_loop(), name="sluice-watch"))

    def poke(self) -> None:
        ev, loop = self.wake, self.loop
        if ev is None or loop is None:
            return
        try:
            running: Optional[asyncio.AbstractEventLoop] = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            ev.set()
        elif not loop.is_closed():
            loop.call_soon_threadsafe(ev.set)

    async def _refresh_loop(self) -> None:
        assert self.wake is not None
        wait = 0.0
        while not self.closed:
            if wait > 0:
                await wait_event(self.wake, wait)
            self.wake.clear()
            if self.closed:
                return
            try:
                wait = await self.step_now()
            except Exception:  # never let the task die
                log.exception("sluice: refresh step failed")
                wait = MAX_BACKOFF

    async def _watch_loop(self) -> None:
        retry = _Retry()
        while not self.closed:
            opened = False
            code: Optional[grpc.StatusCode] = None
            try:
                call = self.channels.method(self.server(), _proto.WATCH)(v1.WatchRequest(holder_id=self.id))
                self.watch_call = call
                async for resp in call:
                    opened = True
                    if resp.leases:
                        self.apply_pushed(resp.leases)
            except grpc.RpcError as e:
                code = e.code() if hasattr(e, "code") else None
            except asyncio.CancelledError:
                if self.closed:
                    return
                raise
            except Exception:
                log.exception("sluice: watch stream failed")
            if self.closed:
                return
            await asyncio.sleep(watch_wait(retry, opened, code))

    # --- resources --------------------------------------------------------

    def resource(self, rid: str, wants: float, priority: int) -> Resource:
        asyncio.get_running_loop()  # RuntimeError outside a coroutine
        return self.register(rid, wants, priority, Resource)  # type: ignore[return-value]

    async def close(self, timeout: float = 2.0) -> None:
        """Releases every lease (one ReleaseCapacity, best effort, within
        timeout seconds), cancels the tasks and waits for them to end."""
        states = self.begin_close()
        if states is None:
            return
        if self.wake is not None:
            self.wake.set()
        if self.watch_call is not None:
            self.watch_call.cancel()
        me = asyncio.current_task()
        tasks = [t for t in self.tasks if t is not me]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if states and not self.manual:
            try:
                await drive(self.release_proc([s.id for s in states], timeout), self.perform)
            except SluiceError as e:
                log.debug("sluice: releasing on close: %s", e)
