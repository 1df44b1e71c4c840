from proto import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ProposeRequest(_message.Message):
    __slots__ = ("run_id", "parameters", "parameters_digest", "directory", "run_timeout_seconds")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_DIGEST_FIELD_NUMBER: _ClassVar[int]
    DIRECTORY_FIELD_NUMBER: _ClassVar[int]
    RUN_TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    parameters: _common_pb2.LinkageParameters
    parameters_digest: str
    directory: _containers.RepeatedCompositeFieldContainer[_common_pb2.PartyAddress]
    run_timeout_seconds: float
    def __init__(self, run_id: _Optional[str] = ..., parameters: _Optional[_Union[_common_pb2.LinkageParameters, _Mapping]] = ..., parameters_digest: _Optional[str] = ..., directory: _Optional[_Iterable[_Union[_common_pb2.PartyAddress, _Mapping]]] = ..., run_timeout_seconds: _Optional[float] = ...) -> None: ...

class ProposeResponse(_message.Message):
    __slots__ = ("parameters_digest", "key_confirmation")
    PARAMETERS_DIGEST_FIELD_NUMBER: _ClassVar[int]
    KEY_CONFIRMATION_FIELD_NUMBER: _ClassVar[int]
    parameters_digest: str
    key_confirmation: bytes
    def __init__(self, parameters_digest: _Optional[str] = ..., key_confirmation: _Optional[bytes] = ...) -> None: ...

class PrepareRequest(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: _common_pb2.RunRef
    def __init__(self, run: _Optional[_Union[_common_pb2.RunRef, _Mapping]] = ...) -> None: ...

class PrepareResponse(_message.Message):
    __slots__ = ("allowed", "reasons", "records")
    ALLOWED_FIELD_NUMBER: _ClassVar[int]
    REASONS_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    allowed: bool
    reasons: _containers.RepeatedScalarFieldContainer[str]
    records: int
    def __init__(self, allowed: _Optional[bool] = ..., reasons: _Optional[_Iterable[str]] = ..., records: _Optional[int] = ...) -> None: ...

class ExecuteRequest(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: _common_pb2.RunRef
    def __init__(self, run: _Optional[_Union[_common_pb2.RunRef, _Mapping]] = ...) -> None: ...

class ExecuteResponse(_message.Message):
    __slots__ = ("progress", "heartbeat", "summary", "reason")
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    progress: _common_pb2.Progress
    heartbeat: bool
    summary: _common_pb2.PartySummary
    reason: str
    def __init__(self, progress: _Optional[_Union[_common_pb2.Progress, _Mapping]] = ..., heartbeat: _Optional[bool] = ..., summary: _Optional[_Union[_common_pb2.PartySummary, _Mapping]] = ..., reason: _Optional[str] = ...) -> None: ...

class AbortRequest(_message.Message):
    __slots__ = ("run_id", "reason")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    reason: str
    def __init__(self, run_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class AbortResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PushBlocksRequest(_message.Message):
    __slots__ = ("run", "source", "total", "digests", "key_confirmation")
    RUN_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    DIGESTS_FIELD_NUMBER: _ClassVar[int]
    KEY_CONFIRMATION_FIELD_NUMBER: _ClassVar[int]
    run: _common_pb2.RunRef
    source: int
    total: int
    digests: bytes
    key_confirmation: bytes
    def __init__(self, run: _Optional[_Union[_common_pb2.RunRef, _Mapping]] = ..., source: _Optional[int] = ..., total: _Optional[int] = ..., digests: _Optional[bytes] = ..., key_confirmation: _Optional[bytes] = ...) -> None: ...

class PushBlocksResponse(_message.Message):
    __slots__ = ("received",)
    RECEIVED_FIELD_NUMBER: _ClassVar[int]
    received: int
    def __init__(self, received: _Optional[int] = ...) -> None: ...

class PushShareRequest(_message.Message):
    __slots__ = ("run", "source", "target", "segment_bits", "total_rows", "block_columns", "rows", "pseudonyms", "segments", "block_positions")
    RUN_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_BITS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_ROWS_FIELD_NUMBER: _ClassVar[int]
    BLOCK_COLUMNS_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    PSEUDONYMS_FIELD_NUMBER: _ClassVar[int]
    SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    BLOCK_POSITIONS_FIELD_NUMBER: _ClassVar[int]
    run: _common_pb2.RunRef
    source: int
    target: int
    segment_bits: int
    total_rows: int
    block_columns: int
    rows: int
    pseudonyms: bytes
    segments: bytes
    block_positions: bytes
    def __init__(self, run: _Optional[_Union[_common_pb2.RunRef, _Mapping]] = ..., source: _Optional[int] = ..., target: _Optional[int] = ..., segment_bits: _Optional[int] = ..., total_rows: _Optional[int] = ..., block_columns: _Optional[int] = ..., rows: _Optional[int] = ..., pseudonyms: _Optional[bytes] = ..., segments: _Optional[bytes] = ..., block_positions: _Optional[bytes] = ...) -> None: ...

class PushShareResponse(_message.Message):
    __slots__ = ("received",)
    RECEIVED_FIELD_NUMBER: _ClassVar[int]
    received: int
    def __init__(self, received: _Optional[int] = ...) -> None: ...

class PassRingRequest(_message.Message):
    __slots__ = ("run", "source", "hop", "total_rows", "parties", "rows", "candidates", "c_masked", "x_masked", "bounded", "last")
    RUN_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    HOP_FIELD_NUMBER: _ClassVar[int]
    TOTAL_ROWS_FIELD_NUMBER: _ClassVar[int]
    PARTIES_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    C_MASKED_FIELD_NUMBER: _ClassVar[int]
    X_MASKED_FIELD_NUMBER: _ClassVar[int]
    BOUNDED_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    run: _common_pb2.RunRef
    source: int
    hop: int
    total_rows: int
    parties: int
    rows: int
    candidates: bytes
    c_masked: bytes
    x_masked: bytes
    bounded: bool
    last: bool
    def __init__(self, run: _Optional[_Union[_common_pb2.RunRef, _Mapping]] = ..., source: _Optional[int] = ..., hop: _Optional[int] = ..., total_rows: _Optional[int] = ..., parties: _Optional[int] = ..., rows: _Optional[int] = ..., candidates: _Optional[bytes] = ..., c_masked: _Optional[bytes] = ..., x_masked: _Optional[bytes] = ..., bounded: _Optional[bool] = ..., last: _Optional[bool] = ...) -> None: ...

class PassRingResponse(_message.Message):
    __slots__ = ("received",)
    RECEIVED_FIELD_NUMBER: _ClassVar[int]
    received: int
    def __init__(self, received: _Optional[int] = ...) -> None: ...

class DeliverResultsRequest(_message.Message):
    __slots__ = ("run", "source", "target", "total_rows", "rows", "linkage_ids", "similarities", "pseudonyms", "groups", "group_sizes", "group_parties")
    RUN_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    TOTAL_ROWS_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    LINKAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    SIMILARITIES_FIELD_NUMBER: _ClassVar[int]
    PSEUDONYMS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    GROUP_SIZES_FIELD_NUMBER: _ClassVar[int]
    GROUP_PARTIES_FIELD_NUMBER: _ClassVar[int]
    run: _common_pb2.RunRef
    source: int
    target: int
    total_rows: int
    rows: int
    linkage_ids: bytes
    similarities: bytes
    pseudonyms: bytes
    groups: bool
    group_sizes: bytes
    group_parties: bytes
    def __init__(self, run: _Optional[_Union[_common_pb2.RunRef, _Mapping]] = ..., source: _Optional[int] = ..., target: _Optional[int] = ..., total_rows: _Optional[int] = ..., rows: _Optional[int] = ..., linkage_ids: _Optional[bytes] = ..., similarities: _Optional[bytes] = ..., pseudonyms: _Optional[bytes] = ..., groups: _Optional[bool] = ..., group_sizes: _Optional[bytes] = ..., group_parties: _Optional[bytes] = ...) -> None: ...

class DeliverResultsResponse(_message.Message):
    __slots__ = ("received",)
    RECEIVED_FIELD_NUMBER: _ClassVar[int]
    received: int
    def __init__(self, received: _Optional[int] = ...) -> None: ...

class PushInputShareRequest(_message.Message):
    __slots__ = ("run", "source", "target", "filter_bits", "total_rows", "block_columns", "rows", "pseudonyms", "block_digests", "filters_first", "filters_second", "counts_first", "counts_second")
    RUN_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    FILTER_BITS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_ROWS_FIELD_NUMBER: _ClassVar[int]
    BLOCK_COLUMNS_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    PSEUDONYMS_FIELD_NUMBER: _ClassVar[int]
    BLOCK_DIGESTS_FIELD_NUMBER: _ClassVar[int]
    FILTERS_FIRST_FIELD_NUMBER: _ClassVar[int]
    FILTERS_SECOND_FIELD_NUMBER: _ClassVar[int]
    COUNTS_FIRST_FIELD_NUMBER: _ClassVar[int]
    COUNTS_SECOND_FIELD_NUMBER: _ClassVar[int]
    run: _common_pb2.RunRef
    source: int
    target: int
    filter_bits: int
    total_rows: int
    block_columns: int
    rows: int
    pseudonyms: bytes
    block_digests: bytes
    filters_first: bytes
    filters_second: bytes
    counts_first: bytes
    counts_second: bytes
    def __init__(self, run: _Optional[_Union[_common_pb2.RunRef, _Mapping]] = ..., source: _Optional[int] = ..., target: _Optional[int] = ..., filter_bits: _Optional[int] = ..., total_rows: _Optional[int] = ..., block_columns: _Optional[int] = ..., rows: _Optional[int] = ..., pseudonyms: _Optional[bytes] = ..., block_digests: _Optional[bytes] = ..., filters_first: _Optional[bytes] = ..., filters_second: _Optional[bytes] = ..., counts_first: _Optional[bytes] = ..., counts_second: _Optional[bytes] = ...) -> None: ...

class PushInputShareResponse(_message.Message):
    __slots__ = ("received",)
    RECEIVED_FIELD_NUMBER: _ClassVar[int]
    received: int
    def __init__(self, received: _Optional[int] = ...) -> None: ...

class PushComputeKeyRequest(_message.Message):
    __slots__ = ("run", "source", "key")
    RUN_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    run: _common_pb2.RunRef
    source: int
    key: bytes
    def __init__(self, run: _Optional[_Union[_common_pb2.RunRef, _Mapping]] = ..., source: _Optional[int] = ..., key: _Optional[bytes] = ...) -> None: ...

class PushComputeKeyResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ExchangeRoundsRequest(_message.Message):
    __slots__ = ("run", "source", "sequence", "batch", "number", "total_bytes", "offset", "payload")
    RUN_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    NUMBER_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    run: _common_pb2.RunRef
    source: int
    sequence: int
    batch: int
    number: int
    total_bytes: int
    offset: int
    payload: bytes
    def __init__(self, run: _Optional[_Union[_common_pb2.RunRef, _Mapping]] = ..., source: _Optional[int] = ..., sequence: _Optional[int] = ..., batch: _Optional[int] = ..., number: _Optional[int] = ..., total_bytes: _Optional[int] = ..., offset: _Optional[int] = ..., payload: _Optional[bytes] = ...) -> None: ...

class ExchangeRoundsResponse(_message.Message):
    __slots__ = ("rounds",)
    ROUNDS_FIELD_NUMBER: _ClassVar[int]
    rounds: int
    def __init__(self, rounds: _Optional[int] = ...) -> None: ...
