"""Filter fill against Dice separation: a schema's per-feature bit budgets scaled by several factors.

For each factor s, every ``bitsPerFeature`` of the schema is multiplied by s
(``party.synthetic.fill.scale_bits_per_feature``: ratios between fields kept), the data set is
encoded with it (the party encoder, the simulation secret of ``--seed``) and the script prints one
JSON line of ``party.synthetic.fill.separation``: fill, true-pair Dice quantiles and counts below
each threshold, unrelated-pair Dice quantiles, and the share of unrelated pairs that pass the
segment filter at each s_m (with no blocking at P = 2: that share of all n_0 * n_1 pairs survives).

Data: ``--data DIR`` (party CSVs + truth.csv, e.g. the FEBRL4 export quality.py writes into
OUT/data/febrl4) or ``--generate P N`` (``party.synthetic.generate`` with quality.py's settings:
overlap 0.5, 40% corruption, households 0.3).

Example: python scripts/fill_sweep.py --data results/quality/data/febrl4 \
             --schema party/synthetic/data/schema_febrl4.json --scales 1 0.6 0.45 0.3
         python scripts/fill_sweep.py --generate 3 4000 --schema party/synthetic/data/schema.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from party.errors import PprlError  # noqa: E402
from party.synthetic.fill import scale_bits_per_feature, separation  # noqa: E402
from party.synthetic.generator import generate, write_dataset  # noqa: E402
from party.synthetic.simulation import SimulationConfig, prepare_encoded  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--data", type=Path, help="a folder of party CSVs + truth.csv")
    src.add_argument("--generate", type=int, nargs=2, metavar=("P", "N"))
    ap.add_argument("--schema", type=Path, required=True)
    ap.add_argument("--scales", type=float, nargs="+", default=[1.0, 0.6, 0.45, 0.3])
    ap.add_argument("--l", type=int, default=None, help="filter length (default: the schema's)")
    ap.add_argument("--sample", type=int, default=200_000, help="unrelated pairs sampled")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args(argv)
    if any(not scale > 0 for scale in args.scales):
        ap.error("--scales: every factor must be positive")
    if args.data is not None and not args.data.is_dir():
        ap.error(f"--data: {args.data} is not a folder")
    try:
        return sweep(args)
    except (PprlError, OSError, ValueError) as exc:  # JSONDecodeError is a ValueError
        print(f"fill_sweep: error: {exc}", file=sys.stderr)
        return 2


def sweep(args: argparse.Namespace) -> int:
    """Encode the data once per scale factor and print (and with --json write) the figures."""
    base = json.loads(args.schema.read_text())
    if args.l:
        base["l"] = args.l
    report: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="fill-sweep-") as tmp:
        work = Path(tmp)
        if args.generate:
            parties, n = args.generate
            ds = generate(parties, n, overlap=0.5, corruption=0.4, seed=args.seed, households=0.3)
            data_dir = work / "data"
            write_dataset(ds, data_dir)
        else:
            data_dir = args.data
            parties = len([p for p in data_dir.glob("*.csv") if p.name != "truth.csv"])
            if parties < 2:
                raise ValueError(f"--data: {data_dir} holds fewer than two party CSVs")
        for scale in args.scales:
            path = work / f"schema-{scale}.json"
            path.write_text(json.dumps(scale_bits_per_feature(base, scale)))
            cfg = SimulationConfig(
                parties=parties,
                data_dir=data_dir,
                schema_path=path,
                out_dir=work / f"out-{scale}",
                seed=args.seed,
            )
            enc = prepare_encoded(cfg)
            figures = separation(enc.tables, enc.data.truth, args.sample, args.seed)
            report[repr(scale)] = figures
            print(f"scale {scale}: " + json.dumps(figures), flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
