"""Peak memory of a protocol run against the number of candidate sets: flat when the engine spills.

For each data size it generates P parties of people (``party.synthetic.generate``: many distinct
names and addresses, overlap 0.8, corruption 0.4), encodes them with the coarse schema
(``party/synthetic/data/schema_coarse.json``: one blocking key, year of birth + state, so
candidate sets grow with the cube of the records at P = 3) and runs the whole in-process protocol
(``run_in_process``: compare, ring and results stream chunk by chunk exactly as over the network)
at s_m = 0, where every candidate set survives the segment filter and travels the ring: the
worst case for memory. Each run happens in a fresh child process, which samples its own resident
set size (``/proc/self/statm``) every 10 ms; the figure reported is the peak RSS during the run
above the RSS just before it (inputs already encoded and loaded).

Two configurations per size, same data, same process layout, one after the other:
- ``spill``: memory_budget_mib = --budget-mib (default 64): survivors, masks, ring and matches
  beyond a quarter of it go to a private temporary folder and are merged back by streaming;
- ``reference``: memory_budget_mib = 64 GiB, so nothing spills: what the run needs in memory.
It prints, per size, candidate sets, peak RSS growth of both, their ratio, spilled bytes and
seconds; and checks that both configurations found the same matches.

Usage: ``.venv/bin/python scripts/bench_memory.py [--sizes 4000,6000,8600] [--budget-mib 64]``
(``--schema``, ``--s-t``, ``--s-m``, ``--one-to-one``, ``--overlap``, ``--corruption`` change the
setting, e.g. the compose demo's: ``--sizes 20000 --schema docker/config/schema.json --s-t 0.85
--s-m 0.7 --one-to-one --overlap 0.5 --corruption 0.2 --budget-mib 256``)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / ".bench" / "memory"
SECRET = b"bench-memory-linkage-secret-0123456789abcdef-0123456789"


def _rss_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def encodings(
    parties: int,
    records: int,
    seed: int,
    schema_path: Path | None = None,
    overlap: float = 0.8,
    corruption: float = 0.4,
) -> list[Path]:
    """Generate and encode the parties' data once per setting (cached under .bench/memory)."""
    from party.encoding.encoder import Encoder
    from party.encoding.store import save_encodings
    from party.synthetic.generator import generate, write_dataset
    from party.synthetic.simulation import coarse_schema_path, load_schema_for

    schema_path = schema_path or coarse_schema_path()
    tag = f"{schema_path.stem}-o{overlap}-c{corruption}"
    folder = BENCH / f"p{parties}-n{records}-s{seed}-{tag}"
    paths = [folder / f"party-{j}.enc" for j in range(parties)]
    if all(p.exists() for p in paths):
        return paths
    folder.mkdir(parents=True, exist_ok=True)
    ds = generate(parties, records, overlap=overlap, corruption=corruption, seed=seed)
    csvs = write_dataset(ds, folder / "data")
    schema, _, _ = load_schema_for(schema_path, parties)  # l divisible by P
    for csv_path, enc_path in zip(csvs, paths, strict=True):
        records_enc, _ = Encoder(schema, SECRET).encode_csv(csv_path, id_column="rec_id")
        save_encodings(enc_path, records_enc, schema.digest())
    return paths


def child(
    paths: list[str],
    budget_mib: int,
    spill_dir: str,
    s_t: float = 0.8,
    s_m: float = 0.0,
    one_to_one: bool = False,
) -> dict[str, Any]:
    """One run in this process; returns its figures (printed as JSON by main)."""
    from party.encoding.store import load_encodings
    from party.protocol.driver import run_in_process
    from party.protocol.kernel import warm_up
    from party.protocol.params import ProtocolParameters

    tables = [load_encodings(p)[0] for p in paths]
    warm_up()
    params = ProtocolParameters(
        parties=tuple(f"party-{j}" for j in range(len(tables))),
        filter_bits=tables[0].filter_bits,
        match_threshold=s_t,
        segment_threshold=s_m,
        one_to_one=one_to_one,
        memory_budget_bytes=budget_mib * 2**20,
        target="all",
    )
    before = _rss_bytes()
    peak = [before]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], _rss_bytes())
            stop.wait(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.perf_counter()
    run = run_in_process(tables, params, spill_dir=spill_dir)
    seconds = time.perf_counter() - t0
    stop.set()
    sampler.join()
    peak[0] = max(peak[0], _rss_bytes())
    cs = run.metrics.comparison
    # linkage ids follow the run's random pseudonyms: compare (record id, similarity) pairs
    matches = sorted((r.record_id, repr(r.similarity)) for r in run.matches[0])
    return {
        "candidate_sets": cs[0].candidate_sets,
        "survivors": cs[0].survivors,
        "sets_summed": run.metrics.sets_summed,
        "matches": len(matches),
        "matches_digest": hash(tuple(matches)),
        "spilled_bytes": sum(c.spilled_bytes for c in cs),
        "rss_before": before,
        "peak_growth": peak[0] - before,
        "seconds": seconds,
    }


def run_child(paths: list[Path], budget_mib: int, args: argparse.Namespace) -> dict[str, Any]:
    spill = BENCH / "spill"
    spill.mkdir(parents=True, exist_ok=True)
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            json.dumps(
                {
                    "paths": [str(p) for p in paths],
                    "budget": budget_mib,
                    "s_t": args.s_t,
                    "s_m": args.s_m,
                    "one_to_one": args.one_to_one,
                }
            ),
            "--spill-dir",
            str(spill),
        ],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    if out.returncode != 0:
        raise SystemExit(f"child run failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", default="4000,6000,8600", help="records per party, comma separated")
    ap.add_argument("--parties", type=int, default=3)
    ap.add_argument("--budget-mib", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--schema", type=Path, help="schema JSON (default: the coarse schema)")
    ap.add_argument("--s-t", type=float, default=0.8, help="match threshold")
    ap.add_argument("--s-m", type=float, default=0.0, help="segment threshold (0: no filter)")
    ap.add_argument("--one-to-one", action="store_true")
    ap.add_argument("--overlap", type=float, default=0.8)
    ap.add_argument("--corruption", type=float, default=0.4)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--spill-dir", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        spec = json.loads(args.child)
        extra = {k: spec[k] for k in ("s_t", "s_m", "one_to_one") if k in spec}
        print(json.dumps(child(spec["paths"], spec["budget"], args.spill_dir, **extra)))
        return 0

    from rich.console import Console
    from rich.table import Table

    console = Console(width=160)
    load = os.getloadavg()
    table = Table(
        title=f"P = {args.parties}, {(args.schema or Path('schema_coarse')).stem}, "
        f"s_t = {args.s_t}, s_m = {args.s_m}{', one-to-one' if args.one_to_one else ''}, "
        f"spill budget {args.budget_mib} MiB "
        f"(load {load[0]:.1f} {load[1]:.1f} {load[2]:.1f})"
    )
    for col in (
        "records/party",
        "candidate sets",
        "survivors (party 0)",
        "peak RSS growth, spill",
        "peak RSS growth, reference",
        "reference / spill",
        "survivors spilled (all parties)",
        "seconds spill / ref",
        "same matches",
    ):
        table.add_column(col, justify="right")
    for n in [int(x) for x in args.sizes.split(",")]:
        paths = encodings(args.parties, n, args.seed, args.schema, args.overlap, args.corruption)
        spill = run_child(paths, args.budget_mib, args)
        ref = run_child(paths, 64 * 1024, args)
        same = (spill["matches"], spill["matches_digest"]) == (
            ref["matches"],
            ref["matches_digest"],
        )
        table.add_row(
            f"{n:,}",
            f"{spill['candidate_sets']:,}",
            f"{spill['survivors']:,}",
            f"{spill['peak_growth'] / 2**20:,.0f} MiB",
            f"{ref['peak_growth'] / 2**20:,.0f} MiB",
            f"{ref['peak_growth'] / max(1, spill['peak_growth']):.1f}",
            f"{spill['spilled_bytes'] / 2**20:,.0f} MiB",
            f"{spill['seconds']:.1f} / {ref['seconds']:.1f}",
            "yes" if same else "NO",
        )
        console.print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
