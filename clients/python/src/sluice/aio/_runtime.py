"""The asyncio runtime of sluice.aio: grpc.aio channels, the awaiting twin
of ``sluice._ops.drive``, and waiting on an event with a timeout."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Dict, Optional, Tuple, TypeVar

import grpc
import grpc.aio

from .._ops import Call, Proc
from .._proto import Method
from .._transport import TLS, channel_options, strip_scheme

__all__ = ["AioChannels", "drive", "wait_event"]

T = TypeVar("T")


async def drive(proc: "Proc[T]", perform: Callable[[Any], Awaitable[Any]]) -> T:
    """Runs ``proc`` (a procedure of ``sluice._ops``) to its end, awaiting
    ``perform`` for each operation it yields and sending back the result,
    or throwing in what it raised (cancellation included: the procedure's
    ``finally`` blocks run, and the cancellation goes on). Returns the
    procedure's value; raises what it raises."""
    send: Any = None
    throw: Optional[BaseException] = None
    while True:
        try:
            op = proc.send(send) if throw is None else proc.throw(throw)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        send, throw = None, None
        try:
            send = await perform(op)
        except BaseException as e:  # thrown in: the procedure decides
            throw = e


async def wait_event(ev: asyncio.Event, timeout: Optional[float]) -> bool:
    """Waits until ``ev`` is set or ``timeout`` seconds pass (None: no
    bound); returns whether it is set."""
    if ev.is_set():
        return True
    if timeout is not None and timeout <= 0:
        return False
    try:
        await asyncio.wait_for(ev.wait(), timeout)
        return True
    except asyncio.TimeoutError:
        return ev.is_set()


class AioChannels:
    """The asyncio client's grpc.aio channels, one per server address,
    made on first use (on the running event loop) and closed together, and
    the methods' callables on them. Use it on one event loop."""

    def __init__(self, tls: Optional[TLS]) -> None:
        self._channels: Dict[str, grpc.aio.Channel] = {}
        self._callables: Dict[Tuple[str, str], Any] = {}
        self._creds = tls.credentials() if tls is not None else None
        self._options = channel_options(tls)

    def get(self, addr: str) -> grpc.aio.Channel:
        """The channel to ``addr`` (host:port; a scheme such as http:// is
        dropped)."""
        addr = strip_scheme(addr)
        ch = self._channels.get(addr)
        if ch is None:
            if self._creds is not None:
                ch = grpc.aio.secure_channel(addr, self._creds, options=self._options)
            else:
                ch = grpc.aio.insecure_channel(addr, options=self._options)
            self._channels[addr] = ch
        return ch

    def method(self, addr: str, m: Method) -> Any:
        """The callable of method ``m`` on the channel to ``addr``, made
        once per channel."""
        key = (strip_scheme(addr), m.path)
        f = self._callables.get(key)
        if f is None:
            ch = self.get(addr)
            if m.client_streaming:
                make = ch.stream_stream if m.server_streaming else ch.stream_unary
            else:
                make = ch.unary_stream if m.server_streaming else ch.unary_unary
            f = make(m.path, request_serializer=m.serializer, response_deserializer=m.deserializer)
            self._callables[key] = f
        return f

    async def call(self, op: Call) -> Any:
        """Performs a unary call: returns the response or raises the
        :class:`grpc.RpcError` (a :class:`grpc.aio.AioRpcError`)."""
        return await self.method(op.addr, op.method)(op.request, timeout=op.timeout)

    async def close(self) -> None:
        """Closes every channel (cancelling the calls still on them)."""
        chans, self._channels, self._callables = list(self._channels.values()), {}, {}
        for ch in chans:
            await ch.close()
