"""The `pprl-party encode` and `pprl-party suggest-k` subcommands."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

# Registering the subcommands must stay cheap (every `pprl-party` command builds the whole parser):
# the encoder (pyarrow, numba) and rich are imported when a command runs.
if TYPE_CHECKING:
    from rich.table import Table

    from party.encoding.encoder import EncodeReport


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "encode",
        help="encode a CSV file into Bloom-filter encodings under a linkage schema",
        description="Encode a CSV (with header) into CLK Bloom filters and blocking-key digests. "
        "The output file holds the party's own record ids: keep it inside the party.",
    )
    p.add_argument("--schema", required=True, type=Path, help="linkage schema (JSON)")
    p.add_argument("--secret", required=True, type=Path, help="file with the shared secret")
    p.add_argument("--input", required=True, type=Path, help="CSV file with a header row")
    p.add_argument("--output", required=True, type=Path, help="encodings file to write")
    p.add_argument(
        "--id-column", default=None, help="column with record ids (default: 1-based row number)"
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_encode)

    s = subparsers.add_parser(
        "suggest-k",
        help="suggest per-field hash counts k for about 50%% filter fill from a data sample",
        description="Count the average q-grams per field in a CSV sample and print the k per "
        "field (keeping the ratios of the schema's k) for the target fill. Prints counts only.",
    )
    s.add_argument("--schema", required=True, type=Path)
    s.add_argument("--input", required=True, type=Path)
    s.add_argument("--target-fill", type=float, default=0.5)
    s.add_argument("--sample", type=int, default=10_000, help="rows to read (default 10000)")
    s.set_defaults(func=_suggest)


def _count_rows(path: Path) -> int | None:
    """Approximate number of data rows (newlines minus the header), for the progress bar."""
    try:
        with path.open("rb") as fh:
            lines = sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 20), b""))
    except OSError:
        return None
    return max(lines - 1, 0)


def _encode(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from party.encoding.encoder import Encoder
    from party.encoding.hashing import load_secret
    from party.encoding.schema import load_schema
    from party.encoding.store import save_encodings

    schema = load_schema(args.schema)
    secret = load_secret(args.secret)
    encoder = Encoder(schema, secret)
    err = Console(stderr=True)
    total = None if args.quiet else _count_rows(args.input)
    with Progress(
        TextColumn("encoding"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        disable=args.quiet,
        transient=True,
    ) as progress:
        task = progress.add_task("encode", total=total)
        records, report = encoder.encode_csv(
            args.input,
            id_column=args.id_column,
            progress=lambda n: progress.advance(task, n),
        )
    save_encodings(args.output, records, schema.digest())
    Console().print(summary_table(report, schema.output_bits, str(args.output), schema.digest()))
    return 0


def summary_table(report: EncodeReport, output_bits: int, output: str, digest: str) -> Table:
    """The end-of-run summary: counts, fill statistics, k per field, time (no record data)."""
    from rich.table import Table

    t = Table(title="pprl-party encode", show_header=False)
    t.add_column("item")
    t.add_column("value")
    t.add_row("input", report.source)
    t.add_row("output", output)
    t.add_row("schema digest", digest[:16] + "...")
    t.add_row("rows read", str(report.rows_read))
    t.add_row("records encoded", str(report.encoded))
    t.add_row("rows skipped", str(report.skipped_total))
    for reason, count in sorted(report.skipped.items()):
        t.add_row(f"  skipped: {reason}", str(count))
    t.add_row("filter bits", str(output_bits))
    t.add_row(
        "fill (mean / min / max)",
        f"{report.fill_mean:.3f} / {report.fill_min:.3f} / {report.fill_max:.3f}",
    )
    t.add_row("k per field", ", ".join(f"{k}={v}" for k, v in report.k_per_field.items()))
    if report.blip_epsilon is not None:
        t.add_row("BLIP epsilon (per q-gram)", f"{report.blip_epsilon:.2f}")
    rate = report.encoded / report.seconds if report.seconds > 0 else float("nan")
    t.add_row("time", f"{report.seconds:.2f} s ({rate:,.0f} records/s)")
    return t


def _suggest(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from party.encoding.schema import load_schema
    from party.encoding.tuning import suggest_k

    schema = load_schema(args.schema)
    result = suggest_k(schema, args.input, target_fill=args.target_fill, sample=args.sample)
    t = Table(title=f"suggested k for {args.target_fill:.0%} fill (l={schema.filter_bits})")
    for col in ("field", "mean q-grams", "schema k", "suggested k"):
        t.add_column(col)
    for name, (mean_q, k_new) in result.items():
        t.add_row(name, f"{mean_q:.1f}", str(schema.field_spec(name).k), str(k_new))
    Console().print(t)
    return 0
