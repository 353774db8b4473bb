"""Test hooks, kept out of the public constructors: clients on a fake clock
whose lease refresh is stepped by hand. For the library's own tests and
benchmarks; not a public API (it may change without notice)."""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Sequence, Union

from .client import Client
from .leases import Mode

__all__ = ["client", "aio_client"]


def _args(kw: Dict[str, Any]) -> Dict[str, Any]:
    """The constructor's keyword arguments with their defaults."""
    args = dict(
        tls=kw.pop("tls", None),
        mode=kw.pop("mode", Mode.SAFE),
        push=kw.pop("push", True),
        call_timeout=kw.pop("call_timeout", 1.0),
        session_ttl=kw.pop("session_ttl", 10.0),
        fail_open=kw.pop("fail_open", True),
        backoff_unit=kw.pop("backoff_unit", 1.0),
        on_session_lost=kw.pop("on_session_lost", None),
    )
    if kw:
        raise TypeError(f"unknown arguments {sorted(kw)}")
    return args


def client(
    addresses: Union[str, Sequence[str]],
    client_id: Optional[str] = None,
    *,
    clock: Optional[Callable[[], float]] = None,
    manual: bool = False,
    **kw: Any,
) -> Client:
    """A :class:`sluice.Client` with the constructor's keyword arguments
    (``kw``), on ``clock`` (Unix seconds; None: :func:`time.time`), and with
    ``manual`` no refresh or watch thread: the test steps the refresh with
    ``client._leases.step_now()``."""
    c = Client.__new__(Client)
    c._setup(addresses, client_id, clock=clock, manual=manual, **_args(kw))
    return c


def aio_client(
    addresses: Union[str, Sequence[str]],
    client_id: Optional[str] = None,
    *,
    clock: Optional[Callable[[], float]] = None,
    manual: bool = False,
    **kw: Any,
) -> Any:
    """A :class:`sluice.aio.Client`, as :func:`client`; with ``manual`` the
    test steps the refresh with ``await client._leases.step_now()``."""
    from .aio import Client as AioClient

    c = AioClient.__new__(AioClient)
    c._setup(addresses, client_id, clock=clock, manual=manual, **_args(kw))
    return c
