"""Sluice's wire messages and RPC methods, built at import from a
serialized FileDescriptorSet: no code generated for one protobuf release.

``descriptors.binpb`` (written by clients/python/generate.sh with
``protoc --include_imports --descriptor_set_out``) holds the descriptors of
api/doorman/doorman.proto, api/quotaservice/quota_service.proto,
api/sluice/v1/leases.proto, api/sluice/v1/limits.proto and the
google/protobuf/duration.proto they import. They are added to a private
:class:`google.protobuf.descriptor_pool.DescriptorPool` (not the default
pool, so another copy of the same protos elsewhere in the process does not
clash), and each message class is made from its descriptor by the installed
runtime: ``google.protobuf.message_factory.GetMessageClass`` (protobuf 4.22
and later, 5.x, 6.x) or ``MessageFactory(pool).GetPrototype`` (4.21, which
has only that). The classes behave as generated ones: constructors with
keyword arguments, ``SerializeToString``/``FromString``, nested enums, and
the well-known type methods of ``google.protobuf.Duration``
(``FromNanoseconds``, ``ToNanoseconds``) — on this pool's Duration class,
which is not ``duration_pb2.Duration``: build Durations with
:func:`duration`, never from ``duration_pb2``.

The modules ``doorman``, ``quota_service``, ``leases`` and ``limits`` beside
this one expose each file's messages under their names; their ``.pyi``
stubs (protoc's) give type checkers the fields. The RPC methods are
:class:`Method` values (:data:`GET_CAPACITY`, …), called through grpcio's
generic API (``channel.unary_unary(path, request_serializer=…,
response_deserializer=…)``), the same in ``grpc`` and ``grpc.aio``.

Importing is thread-safe (Python's import lock); the classes are immutable
and shared.
"""

from __future__ import annotations

import pkgutil
from typing import Any, Callable, Dict, NamedTuple, Type

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message

__all__ = ["pool", "message_class", "file_messages", "duration", "enum_name", "Method"]

pool = descriptor_pool.DescriptorPool()
"""The private descriptor pool holding Sluice's protos."""


def _load() -> None:
    data = pkgutil.get_data(__name__, "descriptors.binpb")
    if data is None:  # pragma: no cover - a broken install
        raise ImportError("sluice._proto: descriptors.binpb is missing from the package")
    for f in descriptor_pb2.FileDescriptorSet.FromString(data).file:
        pool.Add(f)  # --include_imports lists each file after its imports


_load()


def _class_maker() -> Callable[[Any], Type[Message]]:
    """The runtime's way to make a message class of a descriptor:
    ``GetMessageClass`` where it exists (protobuf ≥ 4.22), else a
    ``MessageFactory`` on the pool (4.21). Looked up at call time, so that a
    test can hide either."""
    get = getattr(message_factory, "GetMessageClass", None)
    if get is not None:
        return get  # type: ignore[no-any-return]
    factory = message_factory.MessageFactory(pool)
    return factory.GetPrototype  # type: ignore[no-any-return]


_make = _class_maker()


def message_class(full_name: str) -> Type[Message]:
    """The message class of ``full_name`` ("doorman.GetCapacityRequest").
    Raises KeyError for a name the pool does not hold. The same class is
    returned for the same name every time (the runtime caches it)."""
    return _make(pool.FindMessageTypeByName(full_name))


def file_messages(file_name: str) -> Dict[str, Type[Message]]:
    """The top-level message classes of one proto file
    ("doorman/doorman.proto"), by their short names (nested messages and
    enums are attributes of their classes), and ``DESCRIPTOR``, the file's
    descriptor."""
    fd = pool.FindFileByName(file_name)
    out: Dict[str, Any] = {"DESCRIPTOR": fd}
    for name, d in fd.message_types_by_name.items():
        out[name] = _make(d)
    return out


_Duration = message_class("google.protobuf.Duration")


def duration(seconds: float) -> Any:
    """A ``google.protobuf.Duration`` of this pool, ``seconds`` long
    (rounded to the nanosecond; negative ones are negative durations)."""
    d = _Duration()
    d.FromNanoseconds(int(round(seconds * 1e9)))
    return d


def enum_name(message: Message, field: str) -> str:
    """The name of the enum value in ``message``'s ``field`` ("OK"); the
    number as a string for a value the descriptor does not know (a newer
    server's)."""
    v = getattr(message, field)
    ev = message.DESCRIPTOR.fields_by_name[field].enum_type.values_by_number.get(v)
    return ev.name if ev is not None else str(v)


class Method(NamedTuple):
    """One RPC method: its gRPC path ("/doorman.Capacity/GetCapacity"), its
    request and response classes, and whether the client and the server
    stream."""

    path: str
    request: Type[Message]
    response: Type[Message]
    client_streaming: bool
    server_streaming: bool

    @property
    def serializer(self) -> Callable[[Message], bytes]:
        """The request serializer grpcio takes."""
        return self.request.SerializeToString  # type: ignore[return-value]

    @property
    def deserializer(self) -> Callable[[bytes], Message]:
        """The response deserializer grpcio takes."""
        return self.response.FromString


def _method(service: str, name: str) -> Method:
    m = pool.FindServiceByName(service).methods_by_name[name]
    return Method(
        f"/{service}/{name}",
        _make(m.input_type),
        _make(m.output_type),
        bool(m.client_streaming),
        bool(m.server_streaming),
    )


#: doorman.Capacity.
DISCOVERY = _method("doorman.Capacity", "Discovery")
GET_CAPACITY = _method("doorman.Capacity", "GetCapacity")
RELEASE_CAPACITY = _method("doorman.Capacity", "ReleaseCapacity")
#: quotaservice.QuotaService.
QUOTA_ALLOW = _method("quotaservice.QuotaService", "Allow")
#: sluice.v1.Leases.
WATCH = _method("sluice.v1.Leases", "Watch")
#: sluice.v1.Limits.
ALLOW = _method("sluice.v1.Limits", "Allow")
OPEN_SESSION = _method("sluice.v1.Limits", "OpenSession")
KEEP_ALIVE = _method("sluice.v1.Limits", "KeepAlive")
CLOSE_SESSION = _method("sluice.v1.Limits", "CloseSession")
RESERVE = _method("sluice.v1.Limits", "Reserve")
RELEASE = _method("sluice.v1.Limits", "Release")
TRANSFER = _method("sluice.v1.Limits", "Transfer")
SEIZE = _method("sluice.v1.Limits", "Seize")
