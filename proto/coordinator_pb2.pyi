from proto import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RegisterPartyRequest(_message.Message):
    __slots__ = ("name", "address")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    name: str
    address: str
    def __init__(self, name: _Optional[str] = ..., address: _Optional[str] = ...) -> None: ...

class RegisterPartyResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListPartiesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PartyInfo(_message.Message):
    __slots__ = ("name", "address", "identity", "registered_at")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_AT_FIELD_NUMBER: _ClassVar[int]
    name: str
    address: str
    identity: str
    registered_at: float
    def __init__(self, name: _Optional[str] = ..., address: _Optional[str] = ..., identity: _Optional[str] = ..., registered_at: _Optional[float] = ...) -> None: ...

class ListPartiesResponse(_message.Message):
    __slots__ = ("parties",)
    PARTIES_FIELD_NUMBER: _ClassVar[int]
    parties: _containers.RepeatedCompositeFieldContainer[PartyInfo]
    def __init__(self, parties: _Optional[_Iterable[_Union[PartyInfo, _Mapping]]] = ...) -> None: ...

class StartRunRequest(_message.Message):
    __slots__ = ("parameters", "timeout_seconds")
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    parameters: _common_pb2.LinkageParameters
    timeout_seconds: float
    def __init__(self, parameters: _Optional[_Union[_common_pb2.LinkageParameters, _Mapping]] = ..., timeout_seconds: _Optional[float] = ...) -> None: ...

class StartRunResponse(_message.Message):
    __slots__ = ("run_id", "parameters_digest")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_DIGEST_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    parameters_digest: str
    def __init__(self, run_id: _Optional[str] = ..., parameters_digest: _Optional[str] = ...) -> None: ...

class RunStatus(_message.Message):
    __slots__ = ("run_id", "stage", "reason", "parties", "summaries", "parameters_digest", "created_at", "updated_at")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    PARTIES_FIELD_NUMBER: _ClassVar[int]
    SUMMARIES_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_DIGEST_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    stage: _common_pb2.Stage
    reason: str
    parties: _containers.RepeatedCompositeFieldContainer[_common_pb2.Progress]
    summaries: _containers.RepeatedCompositeFieldContainer[_common_pb2.PartySummary]
    parameters_digest: str
    created_at: float
    updated_at: float
    def __init__(self, run_id: _Optional[str] = ..., stage: _Optional[_Union[_common_pb2.Stage, str]] = ..., reason: _Optional[str] = ..., parties: _Optional[_Iterable[_Union[_common_pb2.Progress, _Mapping]]] = ..., summaries: _Optional[_Iterable[_Union[_common_pb2.PartySummary, _Mapping]]] = ..., parameters_digest: _Optional[str] = ..., created_at: _Optional[float] = ..., updated_at: _Optional[float] = ...) -> None: ...

class GetRunRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class GetRunResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: RunStatus
    def __init__(self, status: _Optional[_Union[RunStatus, _Mapping]] = ...) -> None: ...

class WatchRunRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class WatchRunResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: RunStatus
    def __init__(self, status: _Optional[_Union[RunStatus, _Mapping]] = ...) -> None: ...
