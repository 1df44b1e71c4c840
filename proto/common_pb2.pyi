from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Stage(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STAGE_UNSPECIFIED: _ClassVar[Stage]
    STAGE_CREATED: _ClassVar[Stage]
    STAGE_AGREED: _ClassVar[Stage]
    STAGE_AUDITED: _ClassVar[Stage]
    STAGE_EXCHANGING: _ClassVar[Stage]
    STAGE_COMPARING: _ClassVar[Stage]
    STAGE_SUMMING: _ClassVar[Stage]
    STAGE_DONE: _ClassVar[Stage]
    STAGE_FAILED: _ClassVar[Stage]
STAGE_UNSPECIFIED: Stage
STAGE_CREATED: Stage
STAGE_AGREED: Stage
STAGE_AUDITED: Stage
STAGE_EXCHANGING: Stage
STAGE_COMPARING: Stage
STAGE_SUMMING: Stage
STAGE_DONE: Stage
STAGE_FAILED: Stage

class LinkageParameters(_message.Message):
    __slots__ = ("version", "parties", "schema_json", "match_threshold", "segment_threshold", "one_to_one", "max_block_size", "mode", "compute_parties", "target", "min_parties", "solver")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PARTIES_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_JSON_FIELD_NUMBER: _ClassVar[int]
    MATCH_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    ONE_TO_ONE_FIELD_NUMBER: _ClassVar[int]
    MAX_BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_PARTIES_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    MIN_PARTIES_FIELD_NUMBER: _ClassVar[int]
    SOLVER_FIELD_NUMBER: _ClassVar[int]
    version: int
    parties: _containers.RepeatedScalarFieldContainer[str]
    schema_json: str
    match_threshold: float
    segment_threshold: float
    one_to_one: bool
    max_block_size: int
    mode: str
    compute_parties: _containers.RepeatedScalarFieldContainer[str]
    target: str
    min_parties: int
    solver: str
    def __init__(self, version: _Optional[int] = ..., parties: _Optional[_Iterable[str]] = ..., schema_json: _Optional[str] = ..., match_threshold: _Optional[float] = ..., segment_threshold: _Optional[float] = ..., one_to_one: _Optional[bool] = ..., max_block_size: _Optional[int] = ..., mode: _Optional[str] = ..., compute_parties: _Optional[_Iterable[str]] = ..., target: _Optional[str] = ..., min_parties: _Optional[int] = ..., solver: _Optional[str] = ...) -> None: ...

class RunRef(_message.Message):
    __slots__ = ("run_id", "parameters_digest")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_DIGEST_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    parameters_digest: str
    def __init__(self, run_id: _Optional[str] = ..., parameters_digest: _Optional[str] = ...) -> None: ...

class PartyAddress(_message.Message):
    __slots__ = ("name", "address")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    name: str
    address: str
    def __init__(self, name: _Optional[str] = ..., address: _Optional[str] = ...) -> None: ...

class Progress(_message.Message):
    __slots__ = ("party", "stage", "done", "total")
    PARTY_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    party: str
    stage: Stage
    done: int
    total: int
    def __init__(self, party: _Optional[str] = ..., stage: _Optional[_Union[Stage, str]] = ..., done: _Optional[int] = ..., total: _Optional[int] = ...) -> None: ...

class PartySummary(_message.Message):
    __slots__ = ("party", "matches", "bytes_sent", "peak_rss_bytes", "stage_seconds", "result_path", "candidate_sets", "join_order", "evaluated_per_stage", "kept_per_stage", "survivors", "reduction_ratio", "mpc_batches", "mpc_rounds", "mpc_and_gates", "mpc_round_bytes")
    class StageSecondsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    PARTY_FIELD_NUMBER: _ClassVar[int]
    MATCHES_FIELD_NUMBER: _ClassVar[int]
    BYTES_SENT_FIELD_NUMBER: _ClassVar[int]
    PEAK_RSS_BYTES_FIELD_NUMBER: _ClassVar[int]
    STAGE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    RESULT_PATH_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_SETS_FIELD_NUMBER: _ClassVar[int]
    JOIN_ORDER_FIELD_NUMBER: _ClassVar[int]
    EVALUATED_PER_STAGE_FIELD_NUMBER: _ClassVar[int]
    KEPT_PER_STAGE_FIELD_NUMBER: _ClassVar[int]
    SURVIVORS_FIELD_NUMBER: _ClassVar[int]
    REDUCTION_RATIO_FIELD_NUMBER: _ClassVar[int]
    MPC_BATCHES_FIELD_NUMBER: _ClassVar[int]
    MPC_ROUNDS_FIELD_NUMBER: _ClassVar[int]
    MPC_AND_GATES_FIELD_NUMBER: _ClassVar[int]
    MPC_ROUND_BYTES_FIELD_NUMBER: _ClassVar[int]
    party: str
    matches: int
    bytes_sent: int
    peak_rss_bytes: int
    stage_seconds: _containers.ScalarMap[str, float]
    result_path: str
    candidate_sets: int
    join_order: _containers.RepeatedScalarFieldContainer[int]
    evaluated_per_stage: _containers.RepeatedScalarFieldContainer[int]
    kept_per_stage: _containers.RepeatedScalarFieldContainer[int]
    survivors: int
    reduction_ratio: float
    mpc_batches: int
    mpc_rounds: int
    mpc_and_gates: int
    mpc_round_bytes: int
    def __init__(self, party: _Optional[str] = ..., matches: _Optional[int] = ..., bytes_sent: _Optional[int] = ..., peak_rss_bytes: _Optional[int] = ..., stage_seconds: _Optional[_Mapping[str, float]] = ..., result_path: _Optional[str] = ..., candidate_sets: _Optional[int] = ..., join_order: _Optional[_Iterable[int]] = ..., evaluated_per_stage: _Optional[_Iterable[int]] = ..., kept_per_stage: _Optional[_Iterable[int]] = ..., survivors: _Optional[int] = ..., reduction_ratio: _Optional[float] = ..., mpc_batches: _Optional[int] = ..., mpc_rounds: _Optional[int] = ..., mpc_and_gates: _Optional[int] = ..., mpc_round_bytes: _Optional[int] = ...) -> None: ...
