"""The `pprl-party cvpl` subcommand: CVPL linkage-risk assessment of a release D' against D (CSV)."""

from __future__ import annotations

import argparse
import json
import logging
from typing import TYPE_CHECKING, Any

# Registering the subcommand must stay cheap (every `pprl-party` command builds the whole parser):
# numpy, the CVPL package and matplotlib are imported when the command runs.
if TYPE_CHECKING:
    from party.audit.cvpl.vectorize import PcaModel

log = logging.getLogger(__name__)


def _cols(text: str, name: str, required: bool = True) -> tuple[str, ...]:
    from party.audit.cvpl.errors import CvplError

    cols = tuple(c.strip() for c in text.split(",") if c.strip())
    if required and not cols:
        raise CvplError(f"parameter {name}: give at least one column name")
    if len(set(cols)) != len(cols):
        raise CvplError(f"parameter {name}: a column is listed twice")
    return cols


def _taus(text: str) -> tuple[float, ...]:
    """``a:b:step`` (inclusive grid) or a comma-separated list."""
    import numpy as np

    from party.audit.cvpl.errors import CvplError

    try:
        if ":" in text:
            a, b, step = (float(x) for x in text.split(":"))
            if step <= 0 or b < a:
                raise ValueError
            grid = np.round(np.arange(a, b + step / 2, step), 6)
            return tuple(float(t) for t in grid)
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise CvplError("parameter --taus: expected 'start:stop:step' or 'a,b,c'") from None


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "cvpl",
        help="CVPL geometric linkage-risk assessment of a released table against the original",
        description=(
            "Measure how many records of the original D an attacker can link to the release D' "
            "(CVPL-LR over blocking levels and thresholds), with top-1 precision, Fellegi-Sunter, "
            "DCR/NNDR baselines and attribution. Writes cvpl.json and cvpl.html."
        ),
    )
    p.add_argument("--original", required=True, help="CSV of the original table D")
    p.add_argument("--released", required=True, help="CSV of the protected release D'")
    p.add_argument("--qi", required=True, help="quasi-identifier columns Q (comma-separated)")
    p.add_argument("--attrs", default="", help="other observable attribute columns A")
    p.add_argument("--sensitive", default="", help="sensitive columns S (never vectorised)")
    p.add_argument("--id", dest="id_column", help="id column giving the true correspondence")
    p.add_argument("--out", default="cvpl-out", help="output directory (default: cvpl-out)")
    p.add_argument("--levels", help="blocking levels, e.g. 'age+sex;age:band10+sex;none'")
    p.add_argument("--categorical", default="", help="columns to treat as categorical")
    p.add_argument("--taus", help="threshold grid: 'start:stop:step' or 'a,b,c'")
    p.add_argument("--tau", type=float, help="headline threshold (default: calibrated)")
    p.add_argument("--fpr", type=float, default=0.01, help="false-positive level to calibrate tau")
    p.add_argument(
        "--fit", default="joint", choices=["joint", "source", "target"], help="PCA fit data"
    )
    p.add_argument("--pca-model", help="JSON PCA model to reuse (pre-fitted; overrides --fit)")
    p.add_argument("--save-pca", help="write the fitted PCA model as JSON to this file")
    p.add_argument("--components", type=int, help="PCA components k (default: by variance)")
    p.add_argument("--variance", type=float, default=0.95, help="explained variance for k")
    p.add_argument("--headline-level", type=int, help="index of the headline blocking level")
    p.add_argument("--subblock", action="store_true", help="split blocks above the p95 size")
    p.add_argument("--chunk", type=int, default=2048, help="source rows per similarity chunk")
    p.add_argument("--no-fs", action="store_true", help="skip the Fellegi-Sunter baseline")
    p.add_argument("--ablation", action="store_true", help="recompute risk per attribute subset")
    p.set_defaults(func=run)


def _load_model(path: str) -> PcaModel:
    from party.audit.cvpl.errors import CvplError
    from party.audit.cvpl.vectorize import PcaModel

    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except OSError as exc:
        raise CvplError(f"{path}: cannot read PCA model ({exc.strerror})") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise CvplError(f"{path}: PCA model is not valid JSON") from None
    return PcaModel.from_json(doc, path)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table as RichTable

    from party.audit.cvpl.assess import DEFAULT_TAUS, CvplConfig, assess_tables
    from party.audit.cvpl.blocking import parse_levels
    from party.audit.cvpl.errors import CvplError
    from party.audit.cvpl.report import write_outputs
    from party.audit.cvpl.table import read_csv

    model = _load_model(args.pca_model) if args.pca_model else None
    config = CvplConfig(
        qi=_cols(args.qi, "--qi"),
        attrs=_cols(args.attrs, "--attrs", required=False),
        sensitive=_cols(args.sensitive, "--sensitive", required=False),
        id_column=args.id_column,
        levels=tuple(parse_levels(args.levels)) if args.levels else None,
        categorical=_cols(args.categorical, "--categorical", required=False),
        taus=_taus(args.taus) if args.taus else DEFAULT_TAUS,
        tau=args.tau,
        fpr=args.fpr,
        fit="prefitted" if model is not None else args.fit,
        pca_model=model,
        n_components=args.components,
        variance=args.variance,
        headline_level=args.headline_level,
        subblock=args.subblock,
        chunk=args.chunk,
        fs=not args.no_fs,
        ablation=args.ablation,
    )
    console = Console(stderr=True)
    with console.status("reading tables"):
        original = read_csv(args.original)
        released = read_csv(args.released)
    with console.status("assessing linkage risk"):
        result = assess_tables(original, released, config)
    json_path, html_path = write_outputs(result, args.out)
    if args.save_pca:
        try:
            with open(args.save_pca, "w", encoding="utf-8") as fh:
                json.dump(result.pca_model.to_json(), fh)
        except OSError as exc:
            raise CvplError(f"{args.save_pca}: cannot write PCA model ({exc.strerror})") from None
    table = RichTable(title="CVPL linkage risk")
    table.add_column("measure")
    table.add_column("value")
    table.add_row("headline level", result.levels[result.headline_level].name)
    table.add_row("tau", f"{result.tau:.4f} ({result.tau_source})")
    table.add_row("CVPL-LR", str(result.linkage_rate))
    table.add_row("top-1 precision", str(result.top1_precision or "n/a"))
    if result.fs is not None:
        table.add_row("FS linkage rate", str(result.fs.linkage_rate))
        table.add_row("FS precision", str(result.fs.precision or "n/a"))
    if result.attribution is not None:
        table.add_row("non-QI share", f"{result.attribution.non_qi_share:.3f}")
    table.add_row("written", f"{json_path}, {html_path}")
    Console().print(table)
    return 0
