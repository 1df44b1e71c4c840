"""LinkageParameters helpers shared by coordinator and party: JSON file format and canonical digest.

Parameters file (``examples/parameters.json``), a JSON object::

    {"version": 1,
     "parties": ["party-a", "party-b", "party-c"],      # ring order; parties[0] initiates the ring
     "schema": {... linkage schema object ...} | "schema.json",  # inline, or a path relative to the file
     "match_threshold": 0.8,                             # s_t
     "segment_threshold": 0.7,                           # s_m (0 disables pruning)
     "one_to_one": true,                                 # optional, default true
     "max_block_size": null,                             # optional, null/0 = no cap
     "mode": "segments",                                 # optional: "segments" (default) | "mpc3"
     "compute_parties": ["party-a", "party-b", "helper"],  # optional, mpc3 only: CP 0, 1, 2
     "target": "any",                                    # optional: "any" (default) | "all"
     "min_parties": 2,                                   # optional, target any: 2..P (default 2)
     "solver": "guarded"}                                # optional, target any: see TARGET_SOLVERS

Canonical digest: SHA-256 (lower-case hex) of the canonical JSON of the object above with
"schema" as the parsed schema object, keys sorted, separators "," and ":", ensure_ascii off, UTF-8,
floats written by Python's repr, max_block_size 0 written as null. In mode "mpc3" the object holds
"mode": "mpc3" and "compute_parties" as the three *resolved* names (default: the first three
parties), so naming the default explicitly does not change the digest; in mode "segments" both keys
are left out, so a segments digest is the same as before modes existed (and the known-answer
vectors of tests/data/kat_protocol.json stay valid). Likewise "target", "min_parties" and "solver"
(resolved: m default 2, solver default "guarded") are in the object only for target "any". A file
without "target" means target "any" (DEFAULT_TARGET); in the message an empty target field still
means "all" (the wire meaning and the digests of target-all runs are unchanged), so a file's default
is written into the message explicitly. The same digest is computed by
the coordinator (which treats the schema as opaque JSON) and by every party (which also validates the
schema with party.encoding). This module is plain Python (no grpc) so both sides can use it.
"""

from __future__ import annotations

import hashlib
import json
import math
import pathlib
import re
from collections.abc import Mapping
from typing import Any

from proto import common_pb2

PARAMETERS_VERSION = 1
_KNOWN_KEYS = {
    "version",
    "parties",
    "schema",
    "match_threshold",
    "segment_threshold",
    "one_to_one",
    "max_block_size",
    "mode",
    "compute_parties",
    "target",
    "min_parties",
    "solver",
}
TARGETS = ("all", "any")
#: The target of a parameters file without "target" (party.protocol.params.DEFAULT_TARGET).
DEFAULT_TARGET = "any"
#: Target any names a group's parties in a 64-bit mask (party.protocol.params.MAX_ANY_PARTIES).
MAX_ANY_PARTIES = 64
#: Group solvers of target "any" (party/protocol/solver.py); the first is the default.
TARGET_SOLVERS = ("guarded", "weakest-link", "majority", "greedy")
MODES = ("segments", "mpc3")
COMPUTE_PARTIES = 3


NODE_NAME_RE = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
MAX_JSON_DEPTH = 32


class _NonFinite(ValueError):
    pass


def _refuse_constant(name: str) -> Any:
    raise _NonFinite(name)


def _depth_exceeds(obj: Any, limit: int) -> bool:
    """True when ``obj`` (parsed JSON) nests lists/objects deeper than ``limit`` (iterative)."""
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        item, depth = stack.pop()
        children = (
            item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        )
        for child in children:
            if isinstance(child, dict | list):
                if depth + 1 > limit:
                    return True
                stack.append((child, depth + 1))
    return False


class ParametersFormatError(ValueError):
    """The parameters object is malformed; ``problems`` lists every problem found."""

    def __init__(self, source: str, problems: list[str]):
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: invalid linkage parameters: " + "; ".join(problems))


def canonical_json(obj: Any) -> bytes:
    """The canonical JSON bytes used for digests."""
    return json.dumps(
        obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def parameters_from_mapping(
    obj: Mapping[str, Any], source: str = "<parameters>", base_dir: pathlib.Path | None = None
) -> common_pb2.LinkageParameters:
    """Validate the shape of a parameters object and build the message (schema kept opaque)."""
    problems: list[str] = []
    if not isinstance(obj, Mapping):
        raise ParametersFormatError(source, ["top level must be a JSON object"])
    unknown = sorted(set(obj) - _KNOWN_KEYS)
    if unknown:
        problems.append(f"unknown keys {unknown}")
    version = obj.get("version", PARAMETERS_VERSION)
    if version != PARAMETERS_VERSION:
        problems.append(f"version must be {PARAMETERS_VERSION}, got {version!r}")
    parties = obj.get("parties")
    if not isinstance(parties, list) or not all(
        isinstance(p, str) and NODE_NAME_RE.fullmatch(p) for p in parties
    ):
        problems.append("parties must be a list of node names (a-z, 0-9 and '-', at most 63)")
        parties = []
    elif len(parties) < 2:
        problems.append("parties must name at least 2 parties")
    elif len(set(parties)) != len(parties):
        problems.append("parties must be distinct")
    schema = obj.get("schema")
    schema_obj: Any = None
    if isinstance(schema, str):
        path = pathlib.Path(schema)
        if base_dir is not None and not path.is_absolute():
            path = base_dir / path
        try:
            schema_obj = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            problems.append(f"schema file {path} cannot be read ({exc.strerror})")
        except json.JSONDecodeError as exc:
            problems.append(f"schema file {path} is not JSON (line {exc.lineno})")
    elif isinstance(schema, Mapping):
        schema_obj = schema
    else:
        problems.append("schema must be an object or a path to a schema file")
    if schema_obj is not None and not isinstance(schema_obj, Mapping):
        problems.append("schema must be a JSON object")
        schema_obj = None
    thresholds = {}
    for key in ("match_threshold", "segment_threshold"):
        value = obj.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            problems.append(f"{key} must be a number")
            value = 0.0
        elif not (math.isfinite(value) and 0.0 <= value <= 1.0):
            problems.append(f"{key} must be within [0, 1]")
        thresholds[key] = float(value)
    one_to_one = obj.get("one_to_one", True)
    if not isinstance(one_to_one, bool):
        problems.append("one_to_one must be true or false")
        one_to_one = False
    cap = obj.get("max_block_size")
    if cap is None:
        cap = 0
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 0 or cap >= 2**32:
        problems.append("max_block_size must be null or a positive integer")
        cap = 0
    mode = obj.get("mode", "segments")
    if mode not in MODES:
        problems.append(f"mode must be one of {list(MODES)}, got {mode!r}")
        mode = "segments"
    compute = obj.get("compute_parties", [])
    if compute is None:
        compute = []
    if not isinstance(compute, list) or not all(isinstance(p, str) and p for p in compute):
        problems.append("compute_parties must be a list of non-empty names")
        compute = []
    problems.extend(compute_party_problems(mode, list(parties), compute))
    target, min_parties, solver = _target_fields(obj, len(parties), problems)
    if problems:
        raise ParametersFormatError(source, problems)
    return common_pb2.LinkageParameters(
        version=PARAMETERS_VERSION,
        parties=list(parties),
        schema_json=canonical_json(schema_obj).decode("utf-8"),
        match_threshold=thresholds["match_threshold"],
        segment_threshold=thresholds["segment_threshold"],
        one_to_one=one_to_one,
        max_block_size=cap,
        mode="" if mode == "segments" else mode,
        compute_parties=list(compute),
        target="" if target == "all" else target,
        min_parties=min_parties,
        solver=solver,
    )


def _target_fields(
    obj: Mapping[str, Any], parties: int, problems: list[str]
) -> tuple[str, int, str]:
    """(target, min_parties, solver) of a parameters object; appends problems naming each key."""
    target = obj.get("target", DEFAULT_TARGET)
    if target not in TARGETS:
        problems.append(f"target must be one of {list(TARGETS)}, got {target!r}")
        return "all", 0, ""
    m = obj.get("min_parties")
    solver = obj.get("solver")
    if target == "all":
        if m is not None or solver is not None:
            problems.append("min_parties and solver are only used with target 'any'")
        return "all", 0, ""
    if parties > MAX_ANY_PARTIES:
        problems.append(
            f"target 'any' supports at most {MAX_ANY_PARTIES} parties, got {parties} "
            '(set "target": "all")'
        )
    m = 2 if m is None else m
    if isinstance(m, bool) or not isinstance(m, int) or not 2 <= m <= max(parties, 2):
        problems.append(f"min_parties must be an integer in 2..P={parties}")
        m = 2
    solver = TARGET_SOLVERS[0] if solver is None else solver
    if solver not in TARGET_SOLVERS:
        problems.append(f"solver must be one of {list(TARGET_SOLVERS)}, got {solver!r}")
        solver = TARGET_SOLVERS[0]
    return "any", m, solver


def target_of(params: common_pb2.LinkageParameters) -> str:
    """The run's linkage target ("all" for an empty field)."""
    return params.target or "all"


def compute_party_problems(mode: str, parties: list[str], compute: list[str]) -> list[str]:
    """Problems with the (mode, compute_parties) pair of a parameters object, each naming the key."""
    if mode != "mpc3":
        return ["compute_parties must be empty unless mode is mpc3"] if compute else []
    if not compute:
        if parties and len(parties) < COMPUTE_PARTIES:
            return [
                f"compute_parties must name {COMPUTE_PARTIES} compute parties when there are only "
                f"{len(parties)} parties (mode mpc3; the third may be a helper node)"
            ]
        return []
    if len(compute) != COMPUTE_PARTIES or len(set(compute)) != COMPUTE_PARTIES:
        return [f"compute_parties must name exactly {COMPUTE_PARTIES} distinct nodes"]
    return []


def mode_of(params: common_pb2.LinkageParameters) -> str:
    """The run's protocol mode ("segments" for an empty field)."""
    return params.mode or "segments"


def compute_party_names(params: common_pb2.LinkageParameters) -> tuple[str, ...]:
    """mpc3: the three compute parties (CP 0, 1, 2), defaulting to the first three parties; () in
    mode segments."""
    if mode_of(params) != "mpc3":
        return ()
    if params.compute_parties:
        return tuple(params.compute_parties)
    return tuple(params.parties[:COMPUTE_PARTIES])


def participants(params: common_pb2.LinkageParameters) -> tuple[str, ...]:
    """Every node of the run: the parties in ring order, then helper compute nodes (not parties)."""
    helpers = [c for c in compute_party_names(params) if c not in params.parties]
    return (*params.parties, *helpers)


def load_parameters(path: str | pathlib.Path) -> common_pb2.LinkageParameters:
    """Read a parameters JSON file (schema inline or a path relative to the file)."""
    p = pathlib.Path(path)
    try:
        obj = json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ParametersFormatError(str(p), [f"cannot be read ({exc.strerror})"]) from None
    except json.JSONDecodeError as exc:
        raise ParametersFormatError(str(p), [f"not JSON (line {exc.lineno})"]) from None
    return parameters_from_mapping(obj, str(p), p.parent)


def parameters_to_mapping(params: common_pb2.LinkageParameters) -> dict[str, Any]:
    """The canonical object of a parameters message (schema parsed). Raises ParametersFormatError.

    Refuses, with messages that never echo the input, what has no canonical form or could exhaust
    the receiver: NaN or infinite thresholds, NaN/Infinity in the schema JSON, JSON nested deeper
    than MAX_JSON_DEPTH, and party names that are not node names.
    """
    source = "<parameters>"
    try:
        schema = json.loads(params.schema_json, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise ParametersFormatError(source, [f"schema_json is not JSON: {exc.msg}"]) from None
    except (RecursionError, _NonFinite):
        raise ParametersFormatError(
            source, ["schema_json is nested too deeply or holds NaN/Infinity"]
        ) from None
    if _depth_exceeds(schema, MAX_JSON_DEPTH):
        raise ParametersFormatError(
            source, [f"schema_json is nested deeper than {MAX_JSON_DEPTH} levels"]
        )
    problems = [
        f"{key} must be a finite number"
        for key in ("match_threshold", "segment_threshold")
        if not math.isfinite(getattr(params, key))
    ]
    if not all(NODE_NAME_RE.fullmatch(p) for p in params.parties):
        problems.append("parties must be node names (a-z, 0-9 and '-', at most 63)")
    if problems:
        raise ParametersFormatError(source, problems)
    out: dict[str, Any] = {
        "version": params.version,
        "parties": list(params.parties),
        "schema": schema,
        "match_threshold": params.match_threshold,
        "segment_threshold": params.segment_threshold,
        "one_to_one": params.one_to_one,
        "max_block_size": params.max_block_size or None,
    }
    mode = mode_of(params)
    if mode != "segments" or params.compute_parties:
        out["mode"] = mode
        out["compute_parties"] = list(compute_party_names(params) or params.compute_parties)
    if target_of(params) != "all" or params.min_parties or params.solver:
        out["target"] = target_of(params)
        out["min_parties"] = params.min_parties or 2
        out["solver"] = params.solver or TARGET_SOLVERS[0]
    return out


def parameters_file_object(params: common_pb2.LinkageParameters) -> dict[str, Any]:
    """The parameters-file object of a message: its canonical object with the target written out
    (the canonical object leaves target all out, and a file without "target" means any)."""
    obj = parameters_to_mapping(params)
    obj.setdefault("target", target_of(params))
    return obj


def parameters_digest(params: common_pb2.LinkageParameters) -> str:
    """SHA-256 hex of the canonical JSON of ``params``."""
    return hashlib.sha256(canonical_json(parameters_to_mapping(params))).hexdigest()
