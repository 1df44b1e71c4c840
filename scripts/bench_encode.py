#!/usr/bin/env python
"""Benchmark: encode generated person records with party.encoding (and optionally clkhash).

Usage (from the repository root):

    .venv/bin/python scripts/bench_encode.py                 # 100,000 records, default scheme
    .venv/bin/python scripts/bench_encode.py --vs-clkhash    # also clkhash, prints the ratios
    .venv/bin/python scripts/bench_encode.py --records 20000 --scheme mmh3-double
    .venv/bin/python scripts/bench_encode.py --data simple   # only the old small-lists data set

Two data sets (``--data both`` is the default):

- ``generated``: one party's table from ``party.synthetic.generate`` (thousands of distinct given
  names, surnames, streets and suburbs, 20% corruption) encoded with the shipped schema
  (``party/synthetic/data/schema.json``: seven features with per-feature bit budgets, and every
  blocking pass it defines: eleven phonetic/exact keys and 16 LSH bands). clkhash gets the same
  seven features, q, positional flags, l and ``bitsPerFeature`` budgets with ``blakeHash`` (it has
  no blocking keys, so it does less work). Our encoder is timed
  with one process (records per CPU-second, the like-for-like figure against clkhash's one
  process) and with ``--workers`` processes (wall-clock against clkhash's default process pool,
  which uses every core). CPU seconds of our worker processes are counted in the workers.
  Every timed run, ours and clkhash's, is one encode in a fresh Python process (imports not
  timed), so no run profits from an earlier one in the same process.
- ``simple``: the old data set, kept as a second case. The records are simple ones generated here from small name lists (with random typos so the q-gram
vocabulary is not tiny): given_name, surname, dob (YYYY-MM-DD), postcode (4 digits), city. Both
encoders read the same CSV and use equivalent schemas: the same five fields, bigrams, l = 1024 and
the same bits per token per field (clkhash ``blakeHash`` = random hashing, like our default;
``doubleHash`` when ``--scheme`` is a double-hashing one). clkhash runs in its own virtual
environment under ``.bench/clkhash-venv`` (it pins old cryptography and bitarray), which this script
creates and fills with ``pip install clkhash`` on first use; it is timed inside that environment
with its default process pool and ``validate=False`` (its fastest setting). Times are wall-clock
for CSV -> filters (ours includes CSV parsing, normalisation, hashing, popcounts and blocking
digests); CPU seconds (including worker processes) are printed too, because on a shared machine the
wall-clock ratio depends on how much CPU other jobs leave (clkhash's process pool gets a bigger
share of a busy machine than one process). Prints records/s and both ratios.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from party.encoding.encoder import Encoder  # noqa: E402
from party.encoding.schema import parse_schema  # noqa: E402
from party.synthetic.generator import COLUMNS  # noqa: E402

GIVEN = [
    "james",
    "john",
    "robert",
    "michael",
    "william",
    "david",
    "richard",
    "joseph",
    "thomas",
    "charles",
    "mary",
    "patricia",
    "jennifer",
    "linda",
    "elizabeth",
    "barbara",
    "susan",
    "jessica",
    "sarah",
    "karen",
    "anna",
    "sophie",
    "emma",
    "olivia",
    "noah",
    "liam",
    "lucas",
    "mia",
    "ella",
    "grace",
    "oliver",
    "jack",
    "harry",
    "george",
    "oscar",
    "leo",
    "amelia",
    "isla",
    "ava",
    "lily",
    "freya",
    "chloe",
    "daniel",
    "matthew",
    "andrew",
    "peter",
    "paul",
    "mark",
    "steven",
    "kevin",
    "brian",
    "zoe",
]
SURNAMES = [
    "smith",
    "jones",
    "williams",
    "taylor",
    "brown",
    "davies",
    "evans",
    "wilson",
    "thomas",
    "johnson",
    "roberts",
    "robinson",
    "thompson",
    "wright",
    "walker",
    "white",
    "edwards",
    "hughes",
    "green",
    "hall",
    "lewis",
    "harris",
    "clarke",
    "patel",
    "jackson",
    "wood",
    "turner",
    "martin",
    "cooper",
    "hill",
    "ward",
    "morris",
    "moore",
    "clark",
    "lee",
    "king",
    "baker",
    "harrison",
    "morgan",
    "allen",
    "james",
    "scott",
    "phillips",
    "watson",
    "davis",
    "parker",
    "price",
    "bennett",
    "young",
    "griffiths",
    "mitchell",
]
CITIES = [
    "london",
    "manchester",
    "birmingham",
    "leeds",
    "glasgow",
    "sheffield",
    "bradford",
    "liverpool",
    "edinburgh",
    "bristol",
    "cardiff",
    "belfast",
    "leicester",
    "coventry",
    "nottingham",
    "newcastle",
    "brighton",
    "hull",
    "plymouth",
    "derby",
]
LETTERS = "abcdefghijklmnopqrstuvwxyz"
FIELDS = [("given_name", 20), ("surname", 20), ("dob", 10), ("postcode", 10), ("city", 8)]


def typo(rng: random.Random, word: str, rate: float = 0.15) -> str:
    if rng.random() >= rate or len(word) < 2:
        return word
    i = rng.randrange(len(word))
    op = rng.randrange(3)
    if op == 0:
        return word[:i] + rng.choice(LETTERS) + word[i + 1 :]
    if op == 1:
        return word[:i] + word[i + 1 :]
    return word[:i] + rng.choice(LETTERS) + word[i:]


def write_records(path: Path, n: int, seed: int) -> None:
    rng = random.Random(seed)
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["rec_id"] + [f for f, _ in FIELDS])
        for i in range(n):
            w.writerow(
                [
                    f"r{i}",
                    typo(rng, rng.choice(GIVEN)).title(),
                    typo(rng, rng.choice(SURNAMES)).title(),
                    f"{rng.randint(1930, 2010)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
                    f"{rng.randint(1000, 9999)}",
                    typo(rng, rng.choice(CITIES), 0.05).title(),
                ]
            )


def our_schema(scheme: str) -> dict:
    return {
        "version": 1,
        "l": 1024,
        "hashing": {"scheme": scheme},
        "features": [
            {
                "identifier": name,
                "comparison": {"type": "ngram", "n": 2},
                "strategy": {"bitsPerToken": k},
            }
            for name, k in FIELDS
        ],
        "blocking": [{"name": "sdx", "parts": [{"field": "surname", "function": "soundex"}]}],
    }


def clkhash_schema(scheme: str) -> dict:
    hash_type = "blakeHash" if scheme == "hmac-sha256-random" else "doubleHash"
    return {
        "version": 3,
        "clkConfig": {
            "l": 1024,
            "kdf": {
                "type": "HKDF",
                "hash": "SHA256",
                "salt": "SCbL2zHNnmsckfzchsNkZY9XoHk96P/G5nUBrM7ybymlEFsMV6PAeDZCNp3rfNUPCtLDMOGQHG4pCQpfhiHCyA==",
                "info": "c2NoZW1hX2V4YW1wbGU=",
                "keySize": 64,
            },
        },
        "features": [{"identifier": "rec_id", "ignored": True}]
        + [
            {
                "identifier": name,
                "format": {"type": "string", "encoding": "utf-8", "case": "mixed"},
                "hashing": {
                    "comparison": {"type": "ngram", "n": 2},
                    "strategy": {"bitsPerToken": k},
                    "hash": {"type": hash_type},
                },
            }
            for name, k in FIELDS
        ],
    }


CLKHASH_RUNNER = r"""
import json, resource, sys, time
from clkhash import clk
from clkhash.schema import from_json_dict

def cpu():
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime

schema = from_json_dict(json.load(open(sys.argv[2])))
workers = None if sys.argv[3] == "pool" else 1
with open(sys.argv[1], newline="", encoding="utf-8") as fh:
    c0, t0 = cpu(), time.perf_counter()
    filters = clk.generate_clk_from_csv(fh, "benchmark-secret-0123456789", schema,
                                        validate=False, progress_bar=False, max_workers=workers)
    t1, c1 = time.perf_counter(), cpu()
print(json.dumps({"records": len(filters), "seconds": t1 - t0, "cpu": c1 - c0}))
"""


def cpu_seconds() -> float:
    """CPU time of this process and its reaped children (worker processes)."""
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def ensure_clkhash_venv() -> Path:
    venv = ROOT / ".bench" / "clkhash-venv"
    py = venv / "bin" / "python"
    if not py.exists():
        print(f"creating {venv} ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    probe = subprocess.run([str(py), "-c", "import clkhash"], capture_output=True)
    if probe.returncode:
        print("installing clkhash into it (pip) ...", flush=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "clkhash"], check=True)
    return py


def clkhash_generated_schema(scheme: str) -> dict:
    """clkhash's schema for the generator's columns, like for like with the shipped schema: the
    same features, q, padding (clkhash pads with n - 1 spaces), positional flags, l and per-feature
    bit budgets (clkhash's ``bitsPerFeature`` strategy, which ours copies), ``blakeHash`` (random
    hashing) for our default scheme; the other columns ignored. clkhash has no blocking keys."""
    base = clkhash_schema(scheme)
    hash_type = base["features"][1]["hashing"]["hash"]["type"]
    ours = generated_schema(scheme)
    base["clkConfig"]["l"] = ours["l"]
    by_column = {f.get("column", f["identifier"]): f for f in ours["features"]}
    features: list[dict] = []
    for col in COLUMNS:
        f = by_column.get(col)
        if f is None:
            features.append({"identifier": col, "ignored": True})
            continue
        comparison = f.get("comparison", {})
        features.append(
            {
                "identifier": col,
                "format": {"type": "string", "encoding": "utf-8", "case": "mixed"},
                "hashing": {
                    "comparison": {
                        "type": "ngram",
                        "n": comparison.get("n", 2),
                        "positional": comparison.get("positional", False),
                    },
                    "strategy": dict(f["strategy"]),
                    "hash": {"type": hash_type},
                },
            }
        )
    base["features"] = features
    return base


def write_generated(path: Path, n: int, seed: int) -> None:
    from party.synthetic.generator import generate

    table = generate(2, n, seed=seed).tables[0]
    assert tuple(table.columns) == COLUMNS, tuple(table.columns)
    table.write_csv(path)


def generated_schema(scheme: str) -> dict:
    raw = json.loads((ROOT / "party" / "synthetic" / "data" / "schema.json").read_text())
    raw["hashing"] = {**raw.get("hashing", {}), "scheme": scheme}
    return raw


def run_clkhash(
    csv_path: Path, scheme: str, tmp: Path, mode: str, schema: dict | None = None
) -> tuple[int, float, float]:
    """clkhash on the CSV: mode "pool" (its default process pool) or "single" (max_workers=1,
    where the CPU time is exact). Returns (records, wall seconds, CPU seconds)."""
    py = ensure_clkhash_venv()
    schema_path = tmp / "clkhash-schema.json"
    schema_path.write_text(json.dumps(schema or clkhash_schema(scheme)))
    out = subprocess.run(
        [str(py), "-c", CLKHASH_RUNNER, str(csv_path), str(schema_path), mode],
        check=True,
        capture_output=True,
        text=True,
    )
    res = json.loads(out.stdout.strip().splitlines()[-1])
    return int(res["records"]), float(res["seconds"]), float(res["cpu"])


def encode_once(csv_path: Path, schema_raw: dict, workers: int) -> dict:
    """One encode of the CSV by our encoder in this process: records, wall and CPU seconds
    (including worker processes), fill."""
    from party.encoding.parallel import ParallelStats, encode_csv_parallel

    enc = Encoder(parse_schema(schema_raw), os.urandom(32))
    stats = ParallelStats()
    c0, t0 = cpu_seconds(), time.perf_counter()
    records, report = encode_csv_parallel(
        enc, csv_path, workers=workers, id_column="rec_id", stats=stats
    )
    seconds = time.perf_counter() - t0
    cpu = cpu_seconds() - c0 + stats.cpu_seconds
    return {"records": len(records), "seconds": seconds, "cpu": cpu, "fill": report.fill_mean}


def encode_ours(
    csv_path: Path, schema_raw: dict, repeat: int, workers: int, tmp: Path
) -> tuple[int, float, float, float]:
    """(records, best wall seconds, best CPU seconds incl. workers, fill) of our encoder over
    ``repeat`` runs, each in a fresh Python process (as clkhash's runs): a run in a process that
    has encoded before would start with warm allocator arenas and caches. Imports are not
    timed, for either encoder."""
    schema_path = tmp / "ours-schema.json"
    schema_path.write_text(json.dumps(schema_raw))
    runs = []
    for _ in range(repeat):
        out = subprocess.run(
            [sys.executable, __file__, "--child", str(csv_path), str(schema_path), str(workers)],
            check=True,
            capture_output=True,
            text=True,
        )
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    best = min(r["seconds"] for r in runs)
    best_cpu = min(r["cpu"] for r in runs)
    return int(runs[0]["records"]), best, best_cpu, float(runs[0]["fill"])


def bench_case(
    title: str,
    csv_path: Path,
    ours_schema: dict,
    theirs_schema: dict,
    args: argparse.Namespace,
    tmp: Path,
) -> None:
    from party.encoding.parallel import resolve_workers

    w = resolve_workers(args.workers)
    print(f"== {title}: {args.records} records, scheme {args.scheme}")
    n, t1, c1, fill = encode_ours(csv_path, ours_schema, args.repeat, 1, tmp)
    print(
        f"pprl encoder, 1 process: {t1:.2f} s = {n / t1:,.0f} records/s; {c1:.2f} CPU-s = "
        f"{n / c1:,.0f} records/CPU-s (fill {fill:.3f}); load {os.getloadavg()[0]:.1f}"
    )
    nw, tw, cw, _ = encode_ours(csv_path, ours_schema, args.repeat, w, tmp)
    print(
        f"pprl encoder, {w} processes: {tw:.2f} s = {nw / tw:,.0f} records/s; {cw:.2f} CPU-s; "
        f"speedup {t1 / tw:.2f}x over 1 process; load {os.getloadavg()[0]:.1f}"
    )
    if not args.vs_clkhash:
        return
    cn, cs, _ = run_clkhash(csv_path, args.scheme, tmp, "pool", theirs_schema)
    print(
        f"clkhash (validate=False, default process pool): {cn} records in {cs:.2f} s "
        f"= {cn / cs:,.0f} records/s"
    )
    runs = [
        run_clkhash(csv_path, args.scheme, tmp, "single", theirs_schema) for _ in range(args.repeat)
    ]
    sn, ss, sc = min(runs, key=lambda r: r[2])  # best of --repeat, as for ours
    print(
        f"clkhash (validate=False, max_workers=1): {sn} records in {ss:.2f} s "
        f"= {sn / ss:,.0f} records/s; {sc:.2f} CPU-s = {sn / sc:,.0f} records/CPU-s"
    )
    print(
        f"ratio ours/clkhash: {(n / c1) / (sn / sc):.2f}x per CPU-second (one process each), "
        f"{(nw / tw) / (cn / cs):.2f}x wall-clock ({w} processes vs clkhash's pool); "
        f"load {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)"
    )


def main() -> int:
    if sys.argv[1:2] == ["--child"]:  # one run of ours in a fresh process (encode_ours)
        csv_path, schema_path, workers = sys.argv[2:5]
        raw = json.loads(Path(schema_path).read_text())
        print(json.dumps(encode_once(Path(csv_path), raw, int(workers))))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--scheme", default="hmac-sha256-random")
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="encode N times, each in a fresh process (ours and clkhash's single process), "
        "report the best",
    )
    ap.add_argument("--workers", type=int, default=0, help="processes (0: every core)")
    ap.add_argument("--data", choices=["generated", "simple", "both"], default="both")
    ap.add_argument("--vs-clkhash", action="store_true")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-encode-") as d:
        tmp = Path(d)
        cases = []
        if args.data in ("generated", "both"):
            write_generated(tmp / "generated.csv", args.records, args.seed)
            cases.append(
                (
                    "generated people, shipped schema (all its blocking passes)",
                    tmp / "generated.csv",
                    generated_schema(args.scheme),
                    clkhash_generated_schema(args.scheme),
                )
            )
        if args.data in ("simple", "both"):
            write_records(tmp / "people.csv", args.records, args.seed)
            cases.append(
                (
                    "simple records (small name lists, 1 blocking key)",
                    tmp / "people.csv",
                    our_schema(args.scheme),
                    clkhash_schema(args.scheme),
                )
            )
        for title, path, ours, theirs in cases:
            bench_case(title, path, ours, theirs, args, tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
