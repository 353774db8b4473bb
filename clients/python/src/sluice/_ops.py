"""The client's protocol logic, written once for both APIs.

The threaded client (:mod:`sluice`) and the asyncio client
(:mod:`sluice.aio`) do the same things in the same order: the lease
refresh step with its redirects, failover and backoff, the reserve loop of
copies with Charon's retry policy, releases and transfers. Each is written
here once as a *procedure*: a generator that yields the I/O it needs — an
:class:`Call` (one unary RPC), a :class:`Sleep`, a :class:`GetSession` —
and receives its result (or has its exception thrown in, a
:class:`grpc.RpcError` as grpcio raises it). :func:`drive` runs a
procedure on blocking I/O; ``sluice.aio`` has the awaiting twin
(``sluice.aio._runtime.drive``). Neither adds behaviour: what is sent,
how answers and errors map, and how long to wait are the procedure's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Generator, Optional, TypeVar

from google.protobuf.message import Message

from ._proto import Method
from .errors import DeadlineExceeded

__all__ = ["Call", "Sleep", "GetSession", "Proc", "drive", "call_timeout"]

T = TypeVar("T")


@dataclass(frozen=True)
class Call:
    """One unary RPC: ``method`` with ``request`` to the server at ``addr``
    (host:port), within ``timeout`` seconds. Its result is the response; a
    failed call throws the :class:`grpc.RpcError` into the procedure."""

    addr: str
    method: Method
    request: Message
    timeout: float


@dataclass(frozen=True)
class Sleep:
    """Waits ``seconds``; its result is True when the client was closed
    meanwhile (the wait ends then)."""

    seconds: float


@dataclass(frozen=True)
class GetSession:
    """The client's live copy session, opened if there is none, by
    ``deadline`` (``time.monotonic()`` seconds; None: none)."""

    deadline: Optional[float]


Op = Any  # Call | Sleep | GetSession
Proc = Generator[Op, Any, T]


def drive(proc: "Proc[T]", perform: Callable[[Op], Any]) -> T:
    """Runs ``proc`` to its end, performing each operation it yields with
    ``perform`` (which blocks) and sending back the result, or throwing in
    what it raised. Returns the procedure's value; raises what it raises."""
    send: Any = None
    throw: Optional[BaseException] = None
    while True:
        try:
            op = proc.send(send) if throw is None else proc.throw(throw)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        send, throw = None, None
        try:
            send = perform(op)
        except BaseException as e:  # thrown in: the procedure decides
            throw = e


def call_timeout(timeout: Optional[float], default: float) -> float:
    """A call's timeout in seconds: ``default`` (the client's call timeout)
    for None; 0 or less is no time at all: :class:`sluice.DeadlineExceeded`
    at once, nothing sent, as the Go client's context whose deadline has
    passed."""
    if timeout is None:
        return default
    if not timeout > 0:
        raise DeadlineExceeded(f"timeout {timeout} s: no time to ask")
    return timeout
