"""Generate the CVPL demonstration scenario: an original customer table and protected releases.

Writes DIR/original.csv and DIR/released_<config>.csv for every protection configuration in
``party.audit.cvpl.synth.PROTECTIONS`` (17 by default), plus DIR/configs.json describing them
(column roles, the k-anonymity lattice node and suppression per k-anonymous release).

    .venv/bin/python scripts/cvpl_generate.py --out /tmp/cvpl --records 10000 --seed 1
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import numpy as np

from party.audit.cvpl import synth


def write_csv(path: Path, data: dict[str, np.ndarray]) -> None:
    cols = list(data)
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(cols)
        w.writerows(zip(*(np.asarray(data[c]).astype(str).tolist() for c in cols), strict=True))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    if args.records < 100:
        print("cvpl_generate: --records must be at least 100", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = synth.generate_customers(args.records, args.seed)
    write_csv(out / "original.csv", data)
    configs = {}
    for i, name in enumerate(synth.PROTECTIONS):
        rel = synth.release(data, name, seed=args.seed * 1000 + i)
        fname = f"released_{synth.slug(name)}.csv"
        write_csv(out / fname, rel)
        info: dict[str, object] = {"file": fname}
        if name.startswith("k-anon"):
            k = int(name.split("k=")[1].split()[0])
            ka = synth.k_anonymise(data, k)[1]
            info["k_anonymity"] = {
                "k": ka.k,
                "node_age_region_sex_marital": list(ka.node),
                "suppressed": ka.suppressed,
                "min_class": ka.min_class,
            }
        configs[name] = info
    meta = {
        "records": args.records,
        "seed": args.seed,
        "qi": list(synth.QI),
        "attrs": list(synth.ATTRS),
        "sensitive": list(synth.SENSITIVE),
        "id": synth.ID,
        "configs": configs,
    }
    (out / "configs.json").write_text(json.dumps(meta, indent=2))
    print(f"wrote original.csv and {len(configs)} releases to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
