"""CVPL demonstration: assess every protected release of the customer scenario and check the paper's
qualitative findings (Khvatov & Neyman, arXiv 2602.11015) on our data.

Reads the directory written by scripts/cvpl_generate.py (or generates the scenario in memory with
--records), runs the full CVPL pipeline per configuration, prints one table (CVPL-LR at the
calibrated tau, LR at a fixed tau, top-1 precision, Fellegi-Sunter linkage rate and precision,
share of risk from non-QI attributes) and then states, with the numbers, whether (1) k-anonymity
compliance coexists with substantial linkability and (2) Fellegi-Sunter over-links (high linkage
rate, low precision) compared with CVPL - or where our results differ.

    .venv/bin/python scripts/cvpl_generate.py --out /tmp/cvpl
    .venv/bin/python scripts/cvpl_demo.py --data /tmp/cvpl [--out /tmp/cvpl/reports]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import Progress
from rich.table import Table as RichTable

from party.audit.cvpl import synth
from party.audit.cvpl.assess import CvplConfig, CvplResult, assess_tables
from party.audit.cvpl.blocking import parse_levels
from party.audit.cvpl.report import json_safe, write_outputs
from party.audit.cvpl.table import Table, read_csv

LEVELS = (
    "age+sex+region+marital ; age:band5+sex+region:prefix2+marital ; "
    "age:band10+sex+region:prefix2 ; age:band20+sex+region:prefix1 ; sex+region:prefix1 ; none"
)
FIXED_TAU = 0.9
SUBSTANTIAL = 0.2  # a linkage rate at or above this, with precision >= 0.9, is "substantial"


def k_anonymity_of(table: Table, qi: tuple[str, ...]) -> int:
    """Smallest equivalence class on Q among records whose Q is not fully suppressed."""
    stack = np.stack([table.columns[q] for q in qi], axis=1)
    full = ~np.all(stack == "*", axis=1)
    if not full.any():
        return table.n
    _, inv, counts = np.unique(stack[full], axis=0, return_inverse=True, return_counts=True)
    return int(counts.min())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--data", help="directory written by cvpl_generate.py")
    src.add_argument("--records", type=int, help="generate the scenario in memory instead")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", help="also write cvpl.json/cvpl.html per configuration here")
    ap.add_argument("--fpr", type=float, default=0.01)
    ap.add_argument("--summary", help="write the demo table as JSON to this file")
    args = ap.parse_args(argv)
    console = Console(width=170)

    releases: dict[str, Table] = {}
    if args.data:
        meta = json.loads((Path(args.data) / "configs.json").read_text())
        original = read_csv(Path(args.data) / "original.csv")
        for name, info in meta["configs"].items():
            releases[name] = read_csv(Path(args.data) / info["file"])
    else:
        data = synth.generate_customers(args.records, args.seed)
        original = Table.from_arrays("original", data)
        for i, name in enumerate(synth.PROTECTIONS):
            released = synth.release(data, name, seed=args.seed * 1000 + i)
            releases[name] = Table.from_arrays(name, released)

    config = CvplConfig(
        qi=synth.QI,
        attrs=synth.ATTRS,
        sensitive=synth.SENSITIVE,
        id_column=synth.ID,
        levels=tuple(parse_levels(LEVELS)),
        fpr=args.fpr,
    )
    results: dict[str, CvplResult] = {}
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("assessing releases", total=len(releases))
        for name, rel in releases.items():
            results[name] = assess_tables(original, rel, config)
            if args.out:
                write_outputs(results[name], Path(args.out) / synth.slug(name))
            progress.advance(task)

    rows: list[dict[str, Any]] = []
    table = RichTable(
        title=f"CVPL on {original.n} customers, {len(results)} protection configurations"
    )
    for col in (
        "configuration",
        "k on Q",
        "level",
        "tau*",
        "CVPL-LR(tau*)",
        f"LR@{FIXED_TAU}",
        "top-1 prec.",
        "FS LR",
        "FS prec.",
        "non-QI share",
        "s",
    ):
        table.add_column(col, justify="left" if col == "configuration" else "right")
    for name, res in results.items():
        head = res.levels[res.headline_level]
        fixed = head.linkage_rate[int(np.argmin(np.abs(res.taus - FIXED_TAU)))]
        k = k_anonymity_of(releases[name], synth.QI)
        fs = res.fs
        row = {
            "configuration": name,
            "k_on_qi": k,
            "level": head.name,
            "tau": res.tau,
            "cvpl_lr": res.linkage_rate.value,
            "cvpl_lr_fixed_tau": fixed.value,
            "top1_precision": res.top1_precision.value if res.top1_precision else None,
            "fs_lr": fs.linkage_rate.value if fs else None,
            "fs_precision": fs.precision.value if fs and fs.precision else None,
            "non_qi_share": res.attribution.non_qi_share if res.attribution else None,
            "seconds": res.seconds["total"],
        }
        rows.append(row)

        def f(v: Any) -> str:
            return "-" if v is None else f"{v:.3f}"

        table.add_row(
            name,
            str(k),
            str(head.name).replace("+", " "),
            f(row["tau"]),
            f(row["cvpl_lr"]),
            f(row["cvpl_lr_fixed_tau"]),
            f(row["top1_precision"]),
            f(row["fs_lr"]),
            f(row["fs_precision"]),
            f(row["non_qi_share"]),
            f"{row['seconds']:.1f}",
        )
    console.print(table)
    console.print(
        "tau* = record-level calibration (a share fpr of records has its best NON-match "
        f"similarity >= tau*), fpr={args.fpr}; CI and counts per rate are in the JSON outputs."
    )

    console.print("\n[bold]Finding 1: k-anonymity compliance coexisting with linkability[/bold]")
    kanon = [r for r in rows if r["configuration"].startswith("k-anon")]
    holds = []
    for r in kanon:
        k_req = int(r["configuration"].split("k=")[1].split()[0])
        compliant = r["k_on_qi"] >= k_req
        linkable = r["cvpl_lr_fixed_tau"] >= SUBSTANTIAL and (r["top1_precision"] or 0) >= 0.9
        holds.append(compliant and linkable)
        console.print(
            f"  {r['configuration']}: k-anonymous on Q = {compliant} (min class {r['k_on_qi']}); "
            f"CVPL-LR@{FIXED_TAU} = {r['cvpl_lr_fixed_tau']:.3f}, at tau* {r['cvpl_lr']:.3f}, "
            f"top-1 precision {r['top1_precision'] or 0:.3f}"
        )
    verdict = "reproduced" if holds and all(holds) else "NOT reproduced for every k"
    console.print(
        f"  -> {verdict}: {sum(holds)} of {len(holds)} k-anonymous releases stay substantially "
        f"linkable (LR@{FIXED_TAU} >= {SUBSTANTIAL} with precision >= 0.9) through the "
        "untouched behavioural attributes."
    )

    console.print("\n[bold]Finding 2: Fellegi-Sunter over-links compared with CVPL[/bold]")
    console.print(
        "  false-link rate = linkage rate x (1 - precision): the share of records given a WRONG link"
    )
    over: list[dict[str, Any]] = []
    differ: list[dict[str, Any]] = []
    for r in rows:
        if r["fs_lr"] is None:
            continue
        fs_false = r["fs_lr"] * (1 - (r["fs_precision"] or 0))
        cv_false = r["cvpl_lr"] * (1 - (r["top1_precision"] or 0))
        r["fs_false_link_rate"], r["cvpl_false_link_rate"] = fs_false, cv_false
        overlinks = r["fs_lr"] >= r["cvpl_lr"] and fs_false > cv_false + 0.01
        (over if overlinks else differ).append(r)
        console.print(
            f"  {r['configuration']}: FS LR {r['fs_lr']:.3f}, precision "
            f"{r['fs_precision'] or 0:.3f}, false links {fs_false:.3f}  |  CVPL LR "
            f"{r['cvpl_lr']:.3f}, precision {r['top1_precision'] or 0:.3f}, false links "
            f"{cv_false:.3f}" + ("  <- FS over-links" if overlinks else "")
        )
    console.print(
        f"  -> reproduced in {len(over)} of {len(over) + len(differ)} configurations: FS links at "
        "least as many records as CVPL and gives more than 1% of records an extra wrong link."
    )
    if differ:
        console.print(
            "  Where ours differs (FS does not over-link): "
            + "; ".join(
                f"{r['configuration']} (FS precision {r['fs_precision'] or 0:.3f}, "
                f"LR {r['fs_lr']:.3f} vs CVPL {r['cvpl_lr']:.3f})"
                for r in differ
            )
            + ". With exact or lightly perturbed values, agreement patterns separate matches "
            "well and FS behaves like a good linker."
        )
    if args.summary:
        Path(args.summary).write_text(json.dumps(json_safe(rows), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
