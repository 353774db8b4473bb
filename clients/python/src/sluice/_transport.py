"""gRPC channels to Sluice servers: one per address, plaintext (h2c) or TLS,
and the calls on them through grpcio's generic API (no generated stubs:
``channel.unary_unary(path, request_serializer=…, response_deserializer=…)``
with the classes of ``sluice._proto``)."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import grpc

from ._ops import Call
from ._proto import Method
from .errors import InvalidArgument

__all__ = ["TLS", "Channels", "parse_addresses", "channel_options", "strip_scheme"]

PathOrBytes = Union[str, bytes, None]


def _read(v: PathOrBytes) -> Optional[bytes]:
    if v is None:
        return None
    if isinstance(v, bytes):
        return v
    with open(v, "rb") as f:
        return f.read()


@dataclass(frozen=True)
class TLS:
    """TLS (and mTLS) settings of a :class:`sluice.Client`.

    Each field is a PEM file's path or its bytes. ``root_certificates``
    verify the servers (None: the system's roots); ``certificate_chain``
    and ``private_key``, when given, are presented to a server that asks
    for a client certificate (``sluice server --tls-client-ca``: mTLS).
    ``server_name`` overrides the name the server's certificate must carry
    (for servers reached by an address their certificate does not name).
    """

    root_certificates: PathOrBytes = None
    certificate_chain: PathOrBytes = None
    private_key: PathOrBytes = None
    server_name: Optional[str] = None

    def credentials(self) -> grpc.ChannelCredentials:
        """The channel credentials of these settings."""
        chain, key = _read(self.certificate_chain), _read(self.private_key)
        if (chain is None) != (key is None):
            raise InvalidArgument("TLS: certificate_chain and private_key go together")
        return grpc.ssl_channel_credentials(
            root_certificates=_read(self.root_certificates), private_key=key, certificate_chain=chain
        )


def parse_addresses(addresses: Union[str, Sequence[str]]) -> List[str]:
    """Splits "host:port,host:port" (or a list of them) into addresses."""
    if isinstance(addresses, str):
        addresses = addresses.split(",")
    out = [a.strip() for a in addresses if a and a.strip()]
    if not out:
        raise InvalidArgument("no server address")
    return out


def channel_options(tls: Optional[TLS]) -> List[Tuple[str, Any]]:
    """The options of every channel: grpcio's own retries off (the client
    retries by its own policy), and the TLS name override."""
    options: List[Tuple[str, Any]] = [("grpc.enable_retries", 0)]
    if tls is not None and tls.server_name:
        options.append(("grpc.ssl_target_name_override", tls.server_name))
    return options


def strip_scheme(addr: str) -> str:
    """host:port of an address, without a scheme such as http://."""
    return addr.split("://", 1)[1] if "://" in addr else addr


class Channels:
    """The client's channels, one per server address, made on first use
    and closed together, and the methods' callables on them. Thread-safe."""

    def __init__(self, tls: Optional[TLS]) -> None:
        self._lock = threading.Lock()
        self._channels: Dict[str, grpc.Channel] = {}
        self._callables: Dict[Tuple[str, str], Any] = {}
        self._creds = tls.credentials() if tls is not None else None
        self._options = channel_options(tls)
        self._closed = False

    def get(self, addr: str) -> grpc.Channel:
        """The channel to ``addr`` (host:port; a scheme such as http:// is
        dropped)."""
        addr = strip_scheme(addr)
        with self._lock:
            ch = self._channels.get(addr)
            if ch is None:
                if self._creds is not None:
                    ch = grpc.secure_channel(addr, self._creds, options=self._options)
                else:
                    ch = grpc.insecure_channel(addr, options=self._options)
                self._channels[addr] = ch
            return ch

    def method(self, addr: str, m: Method) -> Any:
        """The callable of method ``m`` on the channel to ``addr``
        (``unary_unary``, ``unary_stream`` or ``stream_stream`` as the
        method streams), made once per channel."""
        key = (strip_scheme(addr), m.path)
        f = self._callables.get(key)
        if f is None:
            ch = self.get(addr)
            if m.client_streaming:
                make = ch.stream_stream if m.server_streaming else ch.stream_unary
            else:
                make = ch.unary_stream if m.server_streaming else ch.unary_unary
            f = make(m.path, request_serializer=m.serializer, response_deserializer=m.deserializer)
            with self._lock:
                self._callables[key] = f
        return f

    def call(self, op: Call) -> Any:
        """Performs a unary call (:class:`sluice._ops.Call`), blocking:
        returns the response or raises the :class:`grpc.RpcError`."""
        return self.method(op.addr, op.method)(op.request, timeout=op.timeout)

    def stream(self, addr: str, m: Method) -> Any:
        """The callable of the streaming method ``m`` on ``addr``'s channel."""
        return self.method(addr, m)

    def close(self) -> None:
        """Closes every channel."""
        with self._lock:
            self._callables = {}
            chans, self._channels = list(self._channels.values()), {}
            self._closed = True
        for ch in chans:
            ch.close()
