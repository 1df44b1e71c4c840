"""Benchmark of the self-audit: the whole audit of 100,000 records and uniqueness on 1,000,000 x 13.

Prints wall times and ratios against references measured in the same run (the machine is shared, so
absolute times are noisy): the audit against encoding the same records, and the vectorised uniqueness
against a plain-Python Counter over the same table.

    .venv/bin/python scripts/bench_audit.py [--records 100000] [--parties 4] [--uniq-rows 1000000]
    .venv/bin/python scripts/bench_audit.py --policy-rates   # evidence for the default policy
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from party.audit.gate import check_before_join  # noqa: E402
from party.audit.run import AuditOptions  # noqa: E402
from party.audit.uniqueness import uniqueness  # noqa: E402
from party.encoding.encoder import Encoder  # noqa: E402
from party.encoding.schema import parse_schema  # noqa: E402
from party.synthetic import generate  # noqa: E402


def bench_audit(
    records: int, parties: int, max_targets: int, cvpl: bool, suggestions: bool
) -> None:
    t = time.perf_counter()
    ds = generate(2, records, corruption=0.2, seed=1)
    rows = list(ds.tables[0].rows())
    print(f"generated {len(rows)} records in {time.perf_counter() - t:.1f} s")
    schema_obj = json.loads((ROOT / "examples" / "schema.json").read_text())
    bits = schema_obj["l"] - schema_obj["l"] % parties
    schema_obj["l"] = bits
    schema = parse_schema(schema_obj)
    enc = Encoder(schema, b"bench-audit-secret-0123456789abcdef")
    t = time.perf_counter()
    encoded = enc.encode_rows(rows, id_column="rec_id")
    encode_s = time.perf_counter() - t
    by_id = {r["rec_id"]: r for r in rows}
    rows = [by_id[i] for i in encoded.record_ids]
    print(f"encoded {len(rows)} records (l={bits}) in {encode_s:.2f} s  [reference]")
    opts = AuditOptions(cvpl=cvpl, suggestions=suggestions)
    policy = {"max_insider_reidentification": 0.05, "insider_max_targets": max_targets}
    t = time.perf_counter()
    cpu = time.process_time()
    decision = check_before_join(
        encoded, enc, schema, parties, policy, rows=rows, self_index=0, options=opts
    )
    audit_s = time.perf_counter() - t
    cpu_s = time.process_time() - cpu
    report = decision.report
    assert report is not None
    print(
        f"audit of {len(rows)} records, P={parties}: {audit_s:.2f} s wall, {cpu_s:.2f} s CPU "
        f"({audit_s / encode_s:.1f}x the encoding time)"
    )
    for name, s in report.meta["seconds"].items():
        print(f"  {name:20s} {s:8.2f} s")
    ins = report.insider
    if ins is not None:
        print(
            f"  insider attack: {ins.targets} of {ins.records} records attacked "
            f"({'sample' if ins.sampled else 'all'})"
        )
    for k, v in report.summary_rows():
        print(f"  {k}: {v}")


def published(records: int, targets: int) -> None:
    """The insider attack against published results: name filters of 1000 bits, shrinking segments."""
    from party.audit.hardening_map import probe_hardening
    from party.audit.insider import insider_attack

    rows = list(generate(2, records, corruption=0.0, seed=1).tables[0].rows())

    def run(
        fields: list[str], parties: int, hardening: Mapping[str, object], aware: float | None = None
    ) -> str:
        hd = {"xorFold": False, "balance": False, "blip": None, **hardening}
        schema = parse_schema(
            {
                "version": 1,
                "l": 1000,
                "hashing": {"k": 20},
                "hardening": hd,
                "features": [{"identifier": f} for f in fields],
            }
        )
        enc = Encoder(
            schema, b"bench-audit-secret-0123456789abcdef", blip_rng=np.random.default_rng(0)
        )
        filters = enc.encode_rows(rows).filters
        hmap = probe_hardening(enc.harden, 1000, schema.output_bits)
        res = insider_attack(
            rows,
            filters,
            enc,
            fields,
            hmap,
            parties,
            max_targets=targets,
            include_full=False,
            only_segments=(0,),
            flip_probability=aware,
        )
        seg = res.segments[0]
        return "  ".join(
            f"{f}: 1-1 {seg.fields[f].one_to_one.value:.3f} top-1 {seg.fields[f].top1.value:.3f}"
            for f in fields
        )

    print(f"insider attack, {len(rows)} people, {targets} attacked, l=1000, k=20, segment 0:")
    for parties in (2, 4, 10, 50):
        for f in ("given_name", "surname"):
            print(f"  single-field {f:10s} segment {100 // parties:2d}%: {run([f], parties, {})}")
    names = ["given_name", "surname"]
    for label, hd, aware in (
        ("balanced", {"balance": True}, None),
        ("BLIP f=0.05 strict", {"blip": {"flipProbability": 0.05}}, None),
        ("BLIP f=0.05 aware", {"blip": {"flipProbability": 0.05}}, 0.05),
        ("BLIP f=0.1 strict", {"blip": {"flipProbability": 0.1}}, None),
        ("BLIP f=0.1 aware", {"blip": {"flipProbability": 0.1}}, 0.1),
        ("XOR-folded", {"xorFold": True}, None),
    ):
        print(f"  CLK names, {label:18s} segment 25%: {run(names, 4, hd, aware)}")


def policy_rates(records: int, party_counts: Sequence[int]) -> None:
    """Whole-record insider re-identification and CVPL per hardening and P; the default's verdict.

    The evidence for DEFAULT_POLICY (docs/audit.md "Default policy"): every record of a generated
    party is attacked (no sample), with the example schema and the hardening varied; CVPL-LR at
    tau = 0.9 on every revealed record, worst receiving segment and blocking key.
    """
    from party.audit.policy import DEFAULT_POLICY

    rows = list(generate(2, records, corruption=0.2, seed=1).tables[0].rows())
    base = json.loads((ROOT / "examples" / "schema.json").read_text())
    settings: list[tuple[str, dict[str, object]]] = [
        ("none", {}),
        ("balance", {"balance": True}),
        ("BLIP f=0.02", {"blip": {"flipProbability": 0.02}}),
        ("BLIP f=0.05", {"blip": {"flipProbability": 0.05}}),
        ("BLIP f=0.1", {"blip": {"flipProbability": 0.1}}),
        ("XOR-fold", {"xorFold": True}),
    ]
    print(
        f"insider attack on all of {len(rows)} generated records, example schema, worst segment a "
        f"co-party receives; default policy: {dict(DEFAULT_POLICY)}"
    )
    print(
        f"{'hardening':12s} {'P':>2s} {'record 1-1':>10s} {'worst field 1-1':>16s} "
        f"{'CVPL-LR@0.9':>11s}  segments  mpc3"
    )
    policy = {**DEFAULT_POLICY, "insider_max_targets": 0}
    opts = AuditOptions(cvpl=True, cvpl_max_sources=records, suggestions=False)
    by_id = {r["rec_id"]: r for r in rows}
    for label, hd in settings:
        for parties in party_counts:
            obj = {
                **base,
                "l": 1024 - 1024 % (2 * parties),
                "hardening": {"xorFold": False, "balance": False, "blip": None, **hd},
            }
            schema = parse_schema(obj)
            enc = Encoder(
                schema, b"bench-audit-secret-0123456789abcdef", blip_rng=np.random.default_rng(0)
            )
            encoded = enc.encode_rows(rows, id_column="rec_id")
            aligned = [by_id[i] for i in encoded.record_ids]
            verdicts = []
            for mode in ("segments", "mpc3"):
                decision = check_before_join(
                    encoded,
                    enc,
                    schema,
                    parties,
                    policy,
                    rows=aligned,
                    self_index=0,
                    options=opts,
                    mode=mode,
                )
                verdicts.append("allowed" if decision.allowed else "DECLINED")
                if mode == "segments":
                    report = decision.report
            assert report is not None and report.insider is not None
            recv = [s for s in report.insider.segments if s.segment != 0]
            record = max(s.record.one_to_one.value for s in recv)
            field = max(o.one_to_one.value for s in recv for o in s.fields.values())
            lr = max(
                (r.value for c in report.cvpl or [] if (r := c.rate_at(0.9)) is not None),
                default=float("nan"),
            )
            print(
                f"{label:12s} {parties:2d} {record:10.3f} {field:16.3f} {lr:11.3f}  "
                f"{verdicts[0]:8s}  {verdicts[1]}"
            )


def bench_uniqueness(n: int, columns: int) -> None:
    rng = np.random.default_rng(0)
    cards = [2, 100, 12, 31, 50, 1000, 5, 8, 3000, 20, 7, 400, 60][:columns]
    table = {f"c{i}": [f"v{x}" for x in rng.integers(0, c, n)] for i, c in enumerate(cards)}
    cols = list(table)
    t = time.perf_counter()
    res = uniqueness(table, cols)
    fast = time.perf_counter() - t
    t = time.perf_counter()
    res_g = uniqueness(table, cols, greedy=True)
    greedy = time.perf_counter() - t
    # reference: plain Python, final combination only (no climb)
    t = time.perf_counter()
    keys = list(zip(*(table[c] for c in cols), strict=True))
    counts = Counter(keys)
    alone_ref = sum(1 for k in keys if counts[k] == 1)
    ref = time.perf_counter() - t
    assert alone_ref == res.alone.count == res_g.alone.count
    print(
        f"uniqueness {n} x {columns}: climb in given order {fast:.2f} s, greedy {greedy:.2f} s; "
        f"plain-Python Counter (final combination only) {ref:.2f} s  [reference] "
        f"-> ratio {ref / fast:.2f}x"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--parties", type=int, default=4)
    ap.add_argument("--max-targets", type=int, default=2000, help="insider attack sample (0 = all)")
    ap.add_argument("--uniq-rows", type=int, default=1_000_000)
    ap.add_argument("--uniq-columns", type=int, default=13)
    ap.add_argument("--no-cvpl", action="store_true")
    ap.add_argument("--no-suggestions", action="store_true")
    ap.add_argument("--skip-uniqueness", action="store_true")
    ap.add_argument(
        "--published", action="store_true", help="only reproduce the published insider results"
    )
    ap.add_argument(
        "--policy-rates",
        action="store_true",
        help="only the whole-record insider rates behind the default policy (2,000 records)",
    )
    args = ap.parse_args()
    if args.policy_rates:
        policy_rates(2000, (3, 4, 7))
        return 0
    if args.published:
        published(5000, 2000)
        return 0
    bench_audit(
        args.records, args.parties, args.max_targets, not args.no_cvpl, not args.no_suggestions
    )
    if not args.skip_uniqueness:
        bench_uniqueness(args.uniq_rows, args.uniq_columns)
    return 0


if __name__ == "__main__":
    sys.exit(main())
