"""The `pprl-party audit` and `pprl-party uniqueness` commands.

``pprl-party audit --config party.toml [--parameters run.json | --schema schema.json --parties N]
[--mode segments|mpc3] [--out DIR] [--no-cvpl] [--no-suggestions] [--dictionary FIELD=PATH]`` audits
the party's data (``[data]`` of the config) with the run's parameters, writes ``DIR/audit.json`` and
``DIR/audit.html``, prints a summary table, what the run reveals in its mode and the gate's decision
under the config's policy (its ``[audit.policy]``, else the shipped default policy). Exit status: 0
allowed (or no policy: ``[audit] default_policy = false``), 1 declined by the policy, 2 on bad input.

The parameters file is the run's parameters JSON (``examples/parameters.json``): ``parties`` (a list
of names in ring order, or a number), ``schema`` (inline object, or a path relative to the file),
``mode`` (``segments``, the default, or ``mpc3``; ``--mode`` overrides it); other keys (thresholds)
are ignored here. When the node name is in ``parties`` its own segment is left out.

``pprl-party uniqueness --csv FILE --columns a,b,c [--k 5] [--greedy] [--out FILE.json]
[--crowds FILE.csv]`` measures any CSV: share alone, share in groups smaller than k, the climb curve,
and optionally each record's crowd size (``row`` = 1-based data row among non-blank rows, ``crowd``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from party.audit.modes import DEFAULT_MODE, MODES
from party.errors import PprlError

log = logging.getLogger(__name__)


class AuditCliError(PprlError, ValueError):
    """Bad command-line input to the audit commands."""


def register(subparsers: Any) -> None:
    a = subparsers.add_parser(
        "audit",
        help="self-audit: what the agreed parameters would reveal about this party's records",
        description="Measure, on this party's own data, how much what it will reveal identifies its "
        "people (uniqueness, blocking, segments, bit sensitivity, frequency and insider attacks, "
        "CVPL), write JSON + HTML reports and apply the [audit.policy] of the config.",
    )
    a.add_argument("--config", required=True, help="party config TOML ([data] and [audit.policy])")
    a.add_argument("--parameters", help="the run's parameters JSON (schema + parties)")
    a.add_argument("--schema", help="linkage schema JSON (fallback when no --parameters)")
    a.add_argument(
        "--parties", type=int, help="number of parties P (fallback when no --parameters)"
    )
    a.add_argument(
        "--mode",
        choices=MODES,
        help="protocol mode to audit (default: the parameters file's 'mode', else segments); "
        "mpc3 reveals no segments, so the segment measures do not run",
    )
    a.add_argument("--out", default="audit-report", help="output folder (default: audit-report)")
    a.add_argument("--no-cvpl", action="store_true", help="skip the CVPL measures")
    a.add_argument(
        "--no-suggestions", action="store_true", help="skip the 'what would pass' search"
    )
    a.add_argument(
        "--cvpl-agreed-only",
        action="store_true",
        help="run CVPL only on the agreed hardening (default: also simulated BLIP f=0.05 and "
        "XOR-folding when the schema has no hardening)",
    )
    a.add_argument(
        "--dictionary",
        action="append",
        default=[],
        metavar="FIELD=PATH",
        help="external value list for the insider attack's dictionary (one value per line; "
        "repeatable)",
    )
    a.add_argument("--full-filter", action="store_true", help="also attack the full filter")
    a.add_argument(
        "--max-targets",
        type=int,
        help="records attacked by the insider attack (default: the policy's, else 2000; 0 = all)",
    )
    a.set_defaults(func=run_audit_command)

    u = subparsers.add_parser(
        "uniqueness",
        help="share of records singled out by a combination of CSV columns",
        description="Exact uniqueness (share alone, share in groups smaller than k, climb curve) of a "
        "CSV file over the given columns.",
    )
    u.add_argument("--csv", required=True, help="CSV file with a header")
    u.add_argument("--columns", required=True, help="comma-separated column names, in climb order")
    u.add_argument("--k", type=int, default=5, help="group-size threshold (default 5)")
    u.add_argument("--greedy", action="store_true", help="climb most-identifying column first")
    u.add_argument("--out", help="write the result as JSON to this file")
    u.add_argument(
        "--crowds", help="write each record's crowd size as CSV (row, crowd) to this file"
    )
    u.set_defaults(func=run_uniqueness_command)


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def run_uniqueness_command(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from party.audit.uniqueness import read_csv_columns, uniqueness

    columns = [c.strip() for c in args.columns.split(",") if c.strip()]
    if not columns:
        raise AuditCliError("--columns: give at least one column name")
    table = read_csv_columns(args.csv, columns)
    t0 = time.perf_counter()
    res = uniqueness(table, columns, k=args.k, greedy=args.greedy)
    seconds = time.perf_counter() - t0
    console = Console()
    t = Table(title=f"Uniqueness of {Path(args.csv).name} ({res.records} records)")
    for h in ("+ column", "groups", "alone", f"crowd < {res.k}"):
        t.add_column(h, justify="right" if h != "+ column" else "left")
    for s in res.climb:
        t.add_row(s.column, str(s.groups), str(s.alone), str(s.below_k))
    console.print(t)
    console.print(
        f"alone: [bold]{res.alone}[/]; crowd < {res.k}: [bold]{res.below_k}[/] ({seconds:.2f} s)"
    )
    if args.out:
        out = res.to_dict()
        out["source"] = str(args.csv)
        out["seconds"] = round(seconds, 3)
        _write_atomic(Path(args.out), json.dumps(out, indent=2))
        console.print(f"written: {args.out}")
    if args.crowds:
        lines = ["row,crowd"] + [f"{i},{c}" for i, c in enumerate(res.crowd.tolist(), start=1)]
        _write_atomic(Path(args.crowds), "\n".join(lines) + "\n")
        console.print(f"written: {args.crowds}")
    return 0


@dataclass(frozen=True)
class RunParameters:
    """What the audit needs from a run parameters file."""

    schema: Any
    parties: int
    names: list[str]
    mode: str  # protocol mode: "segments" (default) or "mpc3"


def load_run_parameters(path: str | Path) -> RunParameters:
    """Schema, P, party names and protocol mode of a run parameters JSON.

    Errors name the file and key.
    """
    from party.audit.modes import DEFAULT_MODE, ModeError, check_mode
    from party.encoding.schema import load_schema, parse_schema

    p = Path(path)
    try:
        obj = json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise AuditCliError(f"{p}: cannot read the parameters file ({exc.strerror})") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise AuditCliError(f"{p}: the parameters file is not valid JSON") from None
    if not isinstance(obj, dict):
        raise AuditCliError(f"{p}: expected a JSON object")
    parties = obj.get("parties")
    names: list[str] = []
    if isinstance(parties, list) and all(isinstance(x, str) for x in parties):
        names = list(parties)
        count = len(names)
    elif isinstance(parties, int) and not isinstance(parties, bool):
        count = parties
    else:
        raise AuditCliError(f"{p}: key 'parties': expected a list of party names or a number")
    if count < 2:
        raise AuditCliError(f"{p}: key 'parties': need at least 2 parties, got {count}")
    raw = obj.get("schema")
    if isinstance(raw, dict):
        schema = parse_schema(raw, f"{p}:schema")
    elif isinstance(raw, str):
        sp = Path(raw)
        schema = load_schema(sp if sp.is_absolute() else p.parent / sp)
    else:
        raise AuditCliError(f"{p}: key 'schema': expected an object or a path")
    try:
        mode = check_mode(obj.get("mode", DEFAULT_MODE), f"{p}: key 'mode'")
    except ModeError as exc:
        raise AuditCliError(str(exc)) from None
    return RunParameters(schema, count, names, mode)


def run_audit_command(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from party.audit.gate import aligned_rows, check_before_join
    from party.audit.policy import AuditPolicy
    from party.audit.run import AuditOptions
    from party.config import load_party_config
    from party.encoding.encoder import Encoder
    from party.encoding.schema import load_schema

    console = Console(stderr=False)
    cfg = load_party_config(args.config, require_tls=False)
    mode = DEFAULT_MODE
    if args.parameters:
        rp = load_run_parameters(args.parameters)
        schema, parties, names, mode = rp.schema, rp.parties, rp.names, rp.mode
    else:
        schema_path = args.schema or cfg.schema
        if schema_path is None or not args.parties:
            raise AuditCliError(
                "give --parameters FILE, or --schema FILE (or [data] schema) with --parties N"
            )
        schema = load_schema(schema_path)
        parties, names = args.parties, []
        if parties < 2:
            raise AuditCliError(f"--parties: need at least 2, got {parties}")
    if args.mode is not None:
        mode = args.mode
    self_index = names.index(cfg.name) if cfg.name in names else None
    policy_map = cfg.audit_policy
    policy = AuditPolicy.from_mapping(
        dict(policy_map) if policy_map is not None else None, base=Path(args.config).parent
    )
    if args.max_targets is not None:
        if args.max_targets < 0:
            raise AuditCliError("--max-targets: must be >= 0")
        policy = AuditPolicy(
            **{
                **policy.__dict__,
                "insider_max_targets": None if args.max_targets == 0 else args.max_targets,
            }
        )
    extra: dict[str, Path] = {}
    for item in args.dictionary:
        fname, sep, path = item.partition("=")
        if not sep or not fname or not path:
            raise AuditCliError(f"--dictionary: expected FIELD=PATH, got {item!r}")
        if fname not in [f.name for f in schema.fields]:
            raise AuditCliError(f"--dictionary: field {fname!r} is not in the schema")
        extra[fname] = Path(path)
    if extra:
        policy = AuditPolicy(
            **{
                **policy.__dict__,
                "external_dictionaries": {**dict(policy.external_dictionaries), **extra},
            }
        )
    encoder = Encoder(schema, cfg.read_secret())
    t0 = time.perf_counter()
    with console.status("encoding the party's data with the agreed schema"):
        records, enc_report = encoder.encode_csv(cfg.data_csv, id_column=cfg.id_column)
        rows = aligned_rows(cfg.data_csv, cfg.id_column, list(records.record_ids))
    encode_s = time.perf_counter() - t0
    opts = AuditOptions(
        cvpl=not args.no_cvpl,
        cvpl_settings=not args.cvpl_agreed_only,
        suggestions=not args.no_suggestions,
        include_full_filter=args.full_filter,
    )
    with console.status("auditing") as status:
        decision = check_before_join(
            records,
            encoder,
            schema,
            parties,
            policy,
            rows=rows,
            self_index=self_index,
            options=opts,
            progress=lambda msg: status.update(f"auditing: {msg}"),
            mode=mode,
        )
    report = decision.report
    assert report is not None
    report.meta["seconds"]["encoding"] = round(encode_s, 3)
    report.meta["seconds"]["total"] = round(time.perf_counter() - t0, 3)
    report.meta["encoding"] = {
        "rows_read": enc_report.rows_read,
        "encoded": enc_report.encoded,
        "skipped": dict(enc_report.skipped),
    }
    has_policy = policy_map is not None
    if not has_policy:
        report.decision = None
    out = Path(args.out)
    _write_atomic(out / "audit.json", report.to_json())
    _write_atomic(out / "audit.html", report.to_html())
    table = Table(
        title=f"Self-audit of {cfg.name}: {report.meta['records']} records, P={parties}, "
        f"mode {mode}"
    )
    table.add_column("measure")
    table.add_column("value", justify="right")
    for k, v in report.summary_rows():
        table.add_row(k, v)
    console.print(table)
    console.print(f"[bold]what this run reveals (mode {mode}):[/]")
    for line in report.meta["revealed"]:
        console.print(f"  - {line}")
    for line in report.meta["not_run"].values():
        console.print(f"  [dim]{line}[/]")
    for s in report.suggestions:
        console.print(f"[cyan]suggestion:[/] {s}")
    if has_policy:
        origin = cfg.audit_policy_origin
        if decision.allowed:
            console.print(f"[green bold]policy ({origin}): ALLOWED[/]")
        else:
            console.print(f"[red bold]policy ({origin}): DECLINED[/]")
            for r in decision.reasons:
                console.print(f"  - {r}")
    console.print(
        f"reports: {out / 'audit.json'}, {out / 'audit.html'} "
        f"({report.meta['seconds']['total']:.1f} s)"
    )
    return 0 if (decision.allowed or not has_policy) else 1
