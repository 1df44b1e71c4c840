#!/usr/bin/env python
"""Benchmark: encode generated person records with party.encoding (and optionally clkhash).

Usage (from the repository root):

    .venv/bin/python scripts/bench_encode.py                 # 100,000 records, default scheme
    .venv/bin/python scripts/bench_encode.py --vs-clkhash    # also clkhash, prints the ratio
    .venv/bin/python scripts/bench_encode.py --records 20000 --scheme mmh3-double

The records are simple ones generated here from small name lists (with random typos so the q-gram
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


def run_clkhash(csv_path: Path, scheme: str, tmp: Path, mode: str) -> tuple[int, float, float]:
    """clkhash on the CSV: mode "pool" (its default process pool) or "single" (max_workers=1,
    where the CPU time is exact). Returns (records, wall seconds, CPU seconds)."""
    py = ensure_clkhash_venv()
    schema_path = tmp / "clkhash-schema.json"
    schema_path.write_text(json.dumps(clkhash_schema(scheme)))
    out = subprocess.run(
        [str(py), "-c", CLKHASH_RUNNER, str(csv_path), str(schema_path), mode],
        check=True,
        capture_output=True,
        text=True,
    )
    res = json.loads(out.stdout.strip().splitlines()[-1])
    return int(res["records"]), float(res["seconds"]), float(res["cpu"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--scheme", default="hmac-sha256-random")
    ap.add_argument("--repeat", type=int, default=1, help="encode ours N times, report the best")
    ap.add_argument("--vs-clkhash", action="store_true")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-encode-") as d:
        tmp = Path(d)
        csv_path = tmp / "people.csv"
        write_records(csv_path, args.records, args.seed)
        schema = parse_schema(our_schema(args.scheme))
        secret = os.urandom(32)
        best = float("inf")
        best_cpu = float("inf")
        n = 0
        fill = 0.0
        for _ in range(args.repeat):
            enc = Encoder(schema, secret)  # fresh memo tables each run
            c0, t0 = cpu_seconds(), time.perf_counter()
            records, report = enc.encode_csv(csv_path, id_column="rec_id")
            best = min(best, time.perf_counter() - t0)
            best_cpu = min(best_cpu, cpu_seconds() - c0)
            n, fill = len(records), report.fill_mean
        ours = n / best
        print(
            f"pprl encoder ({args.scheme}): {n} records in {best:.2f} s "
            f"= {ours:,.0f} records/s; {best_cpu:.2f} CPU-s = {n / best_cpu:,.0f} records/CPU-s "
            f"(fill {fill:.3f})"
        )
        if args.vs_clkhash:
            cn, cs, _ = run_clkhash(csv_path, args.scheme, tmp, "pool")
            theirs = cn / cs
            print(
                f"clkhash (validate=False, default process pool): {cn} records in {cs:.2f} s "
                f"= {theirs:,.0f} records/s"
            )
            sn, ss, sc = run_clkhash(csv_path, args.scheme, tmp, "single")
            print(
                f"clkhash (validate=False, max_workers=1): {sn} records in {ss:.2f} s "
                f"= {sn / ss:,.0f} records/s; {sc:.2f} CPU-s = {sn / sc:,.0f} records/CPU-s"
            )
            print(
                f"ratio ours/clkhash: {ours / theirs:.1f}x wall-clock (vs its pool), "
                f"{(n / best_cpu) / (sn / sc):.1f}x per CPU-second (vs one process)"
            )
            print(f"load average during the run: {os.getloadavg()[0]:.1f} (2 cores)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
