from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PushedLease(_message.Message):
    __slots__ = ["capacity", "expiry_time", "refresh_interval", "resource_id", "sequence"]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    EXPIRY_TIME_FIELD_NUMBER: _ClassVar[int]
    REFRESH_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    capacity: float
    expiry_time: int
    refresh_interval: int
    resource_id: str
    sequence: int
    def __init__(self, resource_id: _Optional[str] = ..., capacity: _Optional[float] = ..., expiry_time: _Optional[int] = ..., refresh_interval: _Optional[int] = ..., sequence: _Optional[int] = ...) -> None: ...

class WatchRequest(_message.Message):
    __slots__ = ["holder_id"]
    HOLDER_ID_FIELD_NUMBER: _ClassVar[int]
    holder_id: str
    def __init__(self, holder_id: _Optional[str] = ...) -> None: ...

class WatchResponse(_message.Message):
    __slots__ = ["leases"]
    LEASES_FIELD_NUMBER: _ClassVar[int]
    leases: _containers.RepeatedCompositeFieldContainer[PushedLease]
    def __init__(self, leases: _Optional[_Iterable[_Union[PushedLease, _Mapping]]] = ...) -> None: ...
