from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Algorithm(_message.Message):
    __slots__ = ["kind", "learning_mode_duration", "lease_length", "parameters", "refresh_interval"]
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = []
    FAIR_SHARE: Algorithm.Kind
    KIND_FIELD_NUMBER: _ClassVar[int]
    LEARNING_MODE_DURATION_FIELD_NUMBER: _ClassVar[int]
    LEASE_LENGTH_FIELD_NUMBER: _ClassVar[int]
    NO_ALGORITHM: Algorithm.Kind
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    PROPORTIONAL_SHARE: Algorithm.Kind
    REFRESH_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    STATIC: Algorithm.Kind
    kind: Algorithm.Kind
    learning_mode_duration: int
    lease_length: int
    parameters: _containers.RepeatedCompositeFieldContainer[NamedParameter]
    refresh_interval: int
    def __init__(self, kind: _Optional[_Union[Algorithm.Kind, str]] = ..., lease_length: _Optional[int] = ..., refresh_interval: _Optional[int] = ..., parameters: _Optional[_Iterable[_Union[NamedParameter, _Mapping]]] = ..., learning_mode_duration: _Optional[int] = ...) -> None: ...

class DiscoveryRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class DiscoveryResponse(_message.Message):
    __slots__ = ["is_master", "mastership"]
    IS_MASTER_FIELD_NUMBER: _ClassVar[int]
    MASTERSHIP_FIELD_NUMBER: _ClassVar[int]
    is_master: bool
    mastership: Mastership
    def __init__(self, mastership: _Optional[_Union[Mastership, _Mapping]] = ..., is_master: bool = ...) -> None: ...

class GetCapacityRequest(_message.Message):
    __slots__ = ["client_id", "resource"]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    resource: _containers.RepeatedCompositeFieldContainer[ResourceRequest]
    def __init__(self, client_id: _Optional[str] = ..., resource: _Optional[_Iterable[_Union[ResourceRequest, _Mapping]]] = ...) -> None: ...

class GetCapacityResponse(_message.Message):
    __slots__ = ["mastership", "response"]
    MASTERSHIP_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    mastership: Mastership
    response: _containers.RepeatedCompositeFieldContainer[ResourceResponse]
    def __init__(self, response: _Optional[_Iterable[_Union[ResourceResponse, _Mapping]]] = ..., mastership: _Optional[_Union[Mastership, _Mapping]] = ...) -> None: ...

class GetServerCapacityRequest(_message.Message):
    __slots__ = ["resource", "server_id"]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    SERVER_ID_FIELD_NUMBER: _ClassVar[int]
    resource: _containers.RepeatedCompositeFieldContainer[ServerCapacityResourceRequest]
    server_id: str
    def __init__(self, server_id: _Optional[str] = ..., resource: _Optional[_Iterable[_Union[ServerCapacityResourceRequest, _Mapping]]] = ...) -> None: ...

class GetServerCapacityResponse(_message.Message):
    __slots__ = ["mastership", "response"]
    MASTERSHIP_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    mastership: Mastership
    response: _containers.RepeatedCompositeFieldContainer[ServerCapacityResourceResponse]
    def __init__(self, response: _Optional[_Iterable[_Union[ServerCapacityResourceResponse, _Mapping]]] = ..., mastership: _Optional[_Union[Mastership, _Mapping]] = ...) -> None: ...

class Lease(_message.Message):
    __slots__ = ["capacity", "expiry_time", "refresh_interval", "sequence"]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    EXPIRY_TIME_FIELD_NUMBER: _ClassVar[int]
    REFRESH_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    capacity: float
    expiry_time: int
    refresh_interval: int
    sequence: int
    def __init__(self, expiry_time: _Optional[int] = ..., refresh_interval: _Optional[int] = ..., capacity: _Optional[float] = ..., sequence: _Optional[int] = ...) -> None: ...

class Mastership(_message.Message):
    __slots__ = ["master_address"]
    MASTER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    master_address: str
    def __init__(self, master_address: _Optional[str] = ...) -> None: ...

class NamedParameter(_message.Message):
    __slots__ = ["name", "value"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: str
    def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class PriorityBandAggregate(_message.Message):
    __slots__ = ["num_clients", "priority", "wants"]
    NUM_CLIENTS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    WANTS_FIELD_NUMBER: _ClassVar[int]
    num_clients: int
    priority: int
    wants: float
    def __init__(self, priority: _Optional[int] = ..., num_clients: _Optional[int] = ..., wants: _Optional[float] = ...) -> None: ...

class ReleaseCapacityRequest(_message.Message):
    __slots__ = ["client_id", "resource_id"]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    resource_id: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, client_id: _Optional[str] = ..., resource_id: _Optional[_Iterable[str]] = ...) -> None: ...

class ReleaseCapacityResponse(_message.Message):
    __slots__ = ["mastership"]
    MASTERSHIP_FIELD_NUMBER: _ClassVar[int]
    mastership: Mastership
    def __init__(self, mastership: _Optional[_Union[Mastership, _Mapping]] = ...) -> None: ...

class ResourceRepository(_message.Message):
    __slots__ = ["resources"]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    resources: _containers.RepeatedCompositeFieldContainer[ResourceTemplate]
    def __init__(self, resources: _Optional[_Iterable[_Union[ResourceTemplate, _Mapping]]] = ...) -> None: ...

class ResourceRequest(_message.Message):
    __slots__ = ["has", "priority", "resource_id", "wants"]
    HAS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    WANTS_FIELD_NUMBER: _ClassVar[int]
    has: Lease
    priority: int
    resource_id: str
    wants: float
    def __init__(self, resource_id: _Optional[str] = ..., priority: _Optional[int] = ..., has: _Optional[_Union[Lease, _Mapping]] = ..., wants: _Optional[float] = ...) -> None: ...

class ResourceResponse(_message.Message):
    __slots__ = ["gets", "resource_id", "safe_capacity"]
    GETS_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    SAFE_CAPACITY_FIELD_NUMBER: _ClassVar[int]
    gets: Lease
    resource_id: str
    safe_capacity: float
    def __init__(self, resource_id: _Optional[str] = ..., gets: _Optional[_Union[Lease, _Mapping]] = ..., safe_capacity: _Optional[float] = ...) -> None: ...

class ResourceTemplate(_message.Message):
    __slots__ = ["algorithm", "capacity", "description", "identifier_glob", "safe_capacity"]
    ALGORITHM_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    IDENTIFIER_GLOB_FIELD_NUMBER: _ClassVar[int]
    SAFE_CAPACITY_FIELD_NUMBER: _ClassVar[int]
    algorithm: Algorithm
    capacity: float
    description: str
    identifier_glob: str
    safe_capacity: float
    def __init__(self, identifier_glob: _Optional[str] = ..., capacity: _Optional[float] = ..., algorithm: _Optional[_Union[Algorithm, _Mapping]] = ..., safe_capacity: _Optional[float] = ..., description: _Optional[str] = ...) -> None: ...

class ServerCapacityResourceRequest(_message.Message):
    __slots__ = ["has", "resource_id", "wants"]
    HAS_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    WANTS_FIELD_NUMBER: _ClassVar[int]
    has: Lease
    resource_id: str
    wants: _containers.RepeatedCompositeFieldContainer[PriorityBandAggregate]
    def __init__(self, resource_id: _Optional[str] = ..., has: _Optional[_Union[Lease, _Mapping]] = ..., wants: _Optional[_Iterable[_Union[PriorityBandAggregate, _Mapping]]] = ...) -> None: ...

class ServerCapacityResourceResponse(_message.Message):
    __slots__ = ["algorithm", "gets", "previous_expiry_time", "resource_id", "safe_capacity"]
    ALGORITHM_FIELD_NUMBER: _ClassVar[int]
    GETS_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_EXPIRY_TIME_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    SAFE_CAPACITY_FIELD_NUMBER: _ClassVar[int]
    algorithm: Algorithm
    gets: Lease
    previous_expiry_time: int
    resource_id: str
    safe_capacity: float
    def __init__(self, resource_id: _Optional[str] = ..., gets: _Optional[_Union[Lease, _Mapping]] = ..., algorithm: _Optional[_Union[Algorithm, _Mapping]] = ..., safe_capacity: _Optional[float] = ..., previous_expiry_time: _Optional[int] = ...) -> None: ...
