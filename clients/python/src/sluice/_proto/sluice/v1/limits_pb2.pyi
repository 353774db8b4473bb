from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AllowRequest(_message.Message):
    __slots__ = ["domain", "max_wait", "min_tokens", "resource", "tokens"]
    DOMAIN_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_FIELD_NUMBER: _ClassVar[int]
    MIN_TOKENS_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    domain: str
    max_wait: _duration_pb2.Duration
    min_tokens: int
    resource: str
    tokens: int
    def __init__(self, resource: _Optional[str] = ..., domain: _Optional[str] = ..., tokens: _Optional[int] = ..., min_tokens: _Optional[int] = ..., max_wait: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class AllowResponse(_message.Message):
    __slots__ = ["bucket", "burst", "degraded", "domain_hits_last_second", "global_hits_last_second", "global_limit", "global_limited", "granted", "hard_limit", "hard_limited", "limit", "remaining", "retry_after", "status", "tier", "tier_hits", "tier_limit", "unlimited", "wait"]
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = []
    BUCKET_FIELD_NUMBER: _ClassVar[int]
    BURST_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    DOMAIN_HITS_LAST_SECOND_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_HITS_LAST_SECOND_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_LIMITED_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_LIMIT_FIELD_NUMBER: _ClassVar[int]
    GRANTED_FIELD_NUMBER: _ClassVar[int]
    HARD_LIMITED_FIELD_NUMBER: _ClassVar[int]
    HARD_LIMIT_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    OK: AllowResponse.Status
    REJECTED_NO_BUCKET: AllowResponse.Status
    REJECTED_TIMEOUT: AllowResponse.Status
    REJECTED_TOO_MANY_BUCKETS: AllowResponse.Status
    REJECTED_TOO_MANY_TOKENS_REQUESTED: AllowResponse.Status
    REMAINING_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    STATUS_UNSPECIFIED: AllowResponse.Status
    TIER_FIELD_NUMBER: _ClassVar[int]
    TIER_HITS_FIELD_NUMBER: _ClassVar[int]
    TIER_LIMIT_FIELD_NUMBER: _ClassVar[int]
    UNLIMITED_FIELD_NUMBER: _ClassVar[int]
    WAIT_FIELD_NUMBER: _ClassVar[int]
    bucket: str
    burst: bool
    degraded: bool
    domain_hits_last_second: int
    global_hits_last_second: int
    global_limit: int
    global_limited: bool
    granted: int
    hard_limit: int
    hard_limited: bool
    limit: int
    remaining: float
    retry_after: _duration_pb2.Duration
    status: AllowResponse.Status
    tier: int
    tier_hits: int
    tier_limit: int
    unlimited: bool
    wait: _duration_pb2.Duration
    def __init__(self, status: _Optional[_Union[AllowResponse.Status, str]] = ..., granted: _Optional[int] = ..., wait: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., retry_after: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., remaining: _Optional[float] = ..., limit: _Optional[int] = ..., bucket: _Optional[str] = ..., hard_limit: _Optional[int] = ..., global_limit: _Optional[int] = ..., tier_limit: _Optional[int] = ..., domain_hits_last_second: _Optional[int] = ..., global_hits_last_second: _Optional[int] = ..., tier_hits: _Optional[int] = ..., tier: _Optional[int] = ..., burst: bool = ..., hard_limited: bool = ..., global_limited: bool = ..., unlimited: bool = ..., degraded: bool = ...) -> None: ...

class CloseSessionRequest(_message.Message):
    __slots__ = ["session_id"]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class CloseSessionResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class GroupHolds(_message.Message):
    __slots__ = ["holds", "limit", "name"]
    HOLDS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    holds: int
    limit: int
    name: str
    def __init__(self, name: _Optional[str] = ..., limit: _Optional[int] = ..., holds: _Optional[int] = ...) -> None: ...

class KeepAliveRequest(_message.Message):
    __slots__ = ["session_id"]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class KeepAliveResponse(_message.Message):
    __slots__ = ["session_id", "ttl"]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    ttl: _duration_pb2.Duration
    def __init__(self, session_id: _Optional[str] = ..., ttl: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class OpenSessionRequest(_message.Message):
    __slots__ = ["ttl"]
    TTL_FIELD_NUMBER: _ClassVar[int]
    ttl: _duration_pb2.Duration
    def __init__(self, ttl: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class OpenSessionResponse(_message.Message):
    __slots__ = ["session_id", "ttl"]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    ttl: _duration_pb2.Duration
    def __init__(self, session_id: _Optional[str] = ..., ttl: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ["copies", "domain", "groups", "resource", "session_id"]
    COPIES_FIELD_NUMBER: _ClassVar[int]
    DOMAIN_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    copies: int
    domain: str
    groups: _containers.RepeatedScalarFieldContainer[str]
    resource: str
    session_id: str
    def __init__(self, session_id: _Optional[str] = ..., resource: _Optional[str] = ..., domain: _Optional[str] = ..., copies: _Optional[int] = ..., groups: _Optional[_Iterable[str]] = ...) -> None: ...

class ReleaseResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class ReserveRequest(_message.Message):
    __slots__ = ["copies", "domain", "max_wait", "min_copies", "resource", "session_id"]
    COPIES_FIELD_NUMBER: _ClassVar[int]
    DOMAIN_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_FIELD_NUMBER: _ClassVar[int]
    MIN_COPIES_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    copies: int
    domain: str
    max_wait: _duration_pb2.Duration
    min_copies: int
    resource: str
    session_id: str
    def __init__(self, session_id: _Optional[str] = ..., resource: _Optional[str] = ..., domain: _Optional[str] = ..., copies: _Optional[int] = ..., min_copies: _Optional[int] = ..., max_wait: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ReserveResponse(_message.Message):
    __slots__ = ["degraded", "domain_holds", "domain_limit", "global_holds", "global_limit", "granted", "groups", "status", "unlimited"]
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = []
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    DOMAIN_HOLDS_FIELD_NUMBER: _ClassVar[int]
    DOMAIN_LIMIT_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_HOLDS_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_LIMIT_FIELD_NUMBER: _ClassVar[int]
    GRANTED_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    OK: ReserveResponse.Status
    REJECTED_OVER_LIMIT: ReserveResponse.Status
    STATUS_FIELD_NUMBER: _ClassVar[int]
    STATUS_UNSPECIFIED: ReserveResponse.Status
    UNLIMITED_FIELD_NUMBER: _ClassVar[int]
    degraded: bool
    domain_holds: int
    domain_limit: int
    global_holds: int
    global_limit: int
    granted: int
    groups: _containers.RepeatedCompositeFieldContainer[GroupHolds]
    status: ReserveResponse.Status
    unlimited: bool
    def __init__(self, status: _Optional[_Union[ReserveResponse.Status, str]] = ..., granted: _Optional[int] = ..., domain_limit: _Optional[int] = ..., global_limit: _Optional[int] = ..., domain_holds: _Optional[int] = ..., global_holds: _Optional[int] = ..., groups: _Optional[_Iterable[_Union[GroupHolds, _Mapping]]] = ..., unlimited: bool = ..., degraded: bool = ...) -> None: ...

class SeizeRequest(_message.Message):
    __slots__ = ["session_id", "transfer_id"]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TRANSFER_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    transfer_id: str
    def __init__(self, session_id: _Optional[str] = ..., transfer_id: _Optional[str] = ...) -> None: ...

class SeizeResponse(_message.Message):
    __slots__ = ["copies", "domain", "groups", "resource"]
    COPIES_FIELD_NUMBER: _ClassVar[int]
    DOMAIN_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    copies: int
    domain: str
    groups: _containers.RepeatedScalarFieldContainer[str]
    resource: str
    def __init__(self, resource: _Optional[str] = ..., domain: _Optional[str] = ..., groups: _Optional[_Iterable[str]] = ..., copies: _Optional[int] = ...) -> None: ...

class TransferRequest(_message.Message):
    __slots__ = ["copies", "domain", "groups", "resource", "session_id", "ttl"]
    COPIES_FIELD_NUMBER: _ClassVar[int]
    DOMAIN_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    copies: int
    domain: str
    groups: _containers.RepeatedScalarFieldContainer[str]
    resource: str
    session_id: str
    ttl: _duration_pb2.Duration
    def __init__(self, session_id: _Optional[str] = ..., resource: _Optional[str] = ..., domain: _Optional[str] = ..., copies: _Optional[int] = ..., groups: _Optional[_Iterable[str]] = ..., ttl: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class TransferResponse(_message.Message):
    __slots__ = ["transfer_id"]
    TRANSFER_ID_FIELD_NUMBER: _ClassVar[int]
    transfer_id: str
    def __init__(self, transfer_id: _Optional[str] = ...) -> None: ...
