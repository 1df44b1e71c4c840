"""Benchmark CVPL: the whole risk surface for 10,000 records and blocked CVPL for 1,000,000 records.

Small case. It times the full pipeline (all blocking levels including 'none', 51 thresholds,
calibration, DCR/NNDR, attribution; Fellegi-Sunter timed separately), which has no like-for-like
reference and so gets no ratio. The ratio it prints compares one well-defined piece of work, the
existence surface (for every blocking level and threshold, how many records have a released record
in their block at similarity >= tau), computed over all records of the same run two ways:

- the library: ``blockwise_top`` per level (the fast path's kernel), then all taus at once;
- a plain vectorised numpy baseline written here: per level, blocks grouped by sorting, one float32
  matrix product of L2-normalised rows per block (row chunks of at most 2^24 similarities), each
  record's best similarity, then all taus at once by sorting.

Both use the same projected vectors, dtype (float32), data and cores; it reports how many surface
cells differ (a float32 rounding may flip a record sitting exactly at a threshold).
The paper reports about 229 s for 10,000 records on 8 cores for its whole pipeline.

Large case: the time of blocked CVPL (no 'none' level) with sub-blocking of oversized blocks.

    .venv/bin/python scripts/bench_cvpl.py [--small 10000] [--large 1000000] [--skip-large]
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from rich.console import Console
from rich.table import Table as RichTable

from party.audit.cvpl import synth
from party.audit.cvpl.assess import CvplConfig, assess_tables
from party.audit.cvpl.blocking import block_keys, parse_levels
from party.audit.cvpl.engine import CosineKernel, blockwise_top
from party.audit.cvpl.table import Table, typed_columns
from party.audit.cvpl.vectorize import project_pair, vectorize

SMALL_LEVELS = (
    "age+sex+region+marital ; age:band5+sex+region:prefix2+marital ; "
    "age:band10+sex+region:prefix2 ; age:band20+sex+region:prefix1 ; sex+region:prefix1 ; none"
)
LARGE_LEVELS = (
    "age+sex+region+marital ; age:band5+sex+region:prefix2+marital ; "
    "age:band10+sex+region:prefix2 ; age:band20+sex+region:prefix1"
)


def config(levels: str, **kw: object) -> CvplConfig:
    return CvplConfig(
        qi=synth.QI,
        attrs=synth.ATTRS,
        sensitive=synth.SENSITIVE,
        id_column=synth.ID,
        levels=tuple(parse_levels(levels)),
        **kw,  # type: ignore[arg-type]
    )


def baseline_surface(
    source: np.ndarray,
    target: np.ndarray,
    keys: list[tuple[np.ndarray, np.ndarray]],
    taus: np.ndarray,
) -> tuple[np.ndarray, float]:
    """(levels, taus) counts of records whose best in-block similarity is >= tau, and the seconds.

    Written plainly with numpy (no library kernel): cosine = product of L2-normalised float32 rows."""

    def unit(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        norms = np.linalg.norm(x, axis=1, keepdims=True)
        return np.divide(x, norms, out=np.zeros_like(x), where=norms > 0).astype(np.float32)

    t0 = time.perf_counter()
    s, t = unit(source), unit(target)
    counts = np.zeros((len(keys), len(taus)), dtype=np.int64)
    for li, (sk, tk) in enumerate(keys):
        best = np.full(len(sk), -np.inf, dtype=np.float32)
        s_order = np.argsort(sk, kind="stable")
        t_order = np.argsort(tk, kind="stable")
        t_sorted = tk[t_order]
        s_keys, s_start = np.unique(sk[s_order], return_index=True)
        s_end = np.append(s_start[1:], len(sk))
        t_lo = np.searchsorted(t_sorted, s_keys, side="left")
        t_hi = np.searchsorted(t_sorted, s_keys, side="right")
        for a in range(len(s_keys)):
            if t_hi[a] == t_lo[a]:
                continue
            src = s_order[s_start[a] : s_end[a]]
            tgt_t = np.ascontiguousarray(t[t_order[t_lo[a] : t_hi[a]]].T)
            rows = max(1, 2**24 // tgt_t.shape[1])
            for lo in range(0, len(src), rows):
                part = src[lo : lo + rows]
                best[part] = (s[part] @ tgt_t).max(axis=1)
        counts[li] = exceeding(best, taus)
    return counts, time.perf_counter() - t0


def exceeding(best: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """For every tau, how many finite values of ``best`` are >= tau."""
    values = np.sort(best[np.isfinite(best)])
    return values.size - np.searchsorted(values, taus, side="left")


def library_surface(
    kern: CosineKernel, keys: list[tuple[np.ndarray, np.ndarray]], taus: np.ndarray
) -> tuple[np.ndarray, float]:
    """The same counts from the library's blockwise_top (the fast path's kernel), and the seconds."""
    t0 = time.perf_counter()
    counts = np.zeros((len(keys), len(taus)), dtype=np.int64)
    for li, (sk, tk) in enumerate(keys):
        counts[li] = exceeding(blockwise_top(kern, sk, tk).best, taus)
    return counts, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", type=int, default=10_000)
    ap.add_argument("--large", type=int, default=1_000_000)
    ap.add_argument("--skip-large", action="store_true")
    ap.add_argument("--repeat", type=int, default=3, help="timed repetitions of the surface pair")
    ap.add_argument("--protection", default="noise 0.1", choices=list(synth.PROTECTIONS))
    args = ap.parse_args(argv)
    console = Console(width=150)
    out = RichTable(title="CVPL benchmark")
    for col in ("case", "records", "levels x taus", "pairs", "seconds", "note"):
        out.add_column(col)

    # --- small: whole surface ---
    data = synth.generate_customers(args.small, seed=11)
    d = Table.from_arrays("original", data)
    r = Table.from_arrays("released", synth.release(data, args.protection, seed=12))
    cfg = config(SMALL_LEVELS, fs=False)
    t = time.perf_counter()
    res = assess_tables(d, r, cfg)
    fast = time.perf_counter() - t
    pairs = sum(lv.pairs for lv in res.levels)
    out.add_row(
        "surface (fast)",
        str(args.small),
        f"{len(res.levels)} x {len(res.taus)}",
        f"{pairs:,}",
        f"{fast:.2f}",
        "incl. calibration, DCR/NNDR, attribution",
    )
    t = time.perf_counter()
    res_fs = assess_tables(d, r, config(SMALL_LEVELS, attribution=False))
    fs_s = res_fs.seconds.get("fellegi_sunter", float("nan"))
    out.add_row(
        "FS baseline",
        str(args.small),
        "1 level",
        f"{res_fs.fs.candidate_pairs:,}" if res_fs.fs else "-",
        f"{fs_s:.2f}",
        "EM + best-weight pass (separate run)",
    )

    # the existence surface, like for like: same vectors, dtype, data and cores
    cols = typed_columns(d, r, list(cfg.qi) + list(cfg.attrs))
    space = vectorize(cols)
    ps, pt, _ = project_pair(space, "joint", None, cfg.variance)
    qcols = [c for c in cols if c.name in cfg.qi]
    assert cfg.levels is not None
    keys = [block_keys(level, qcols, d.n) for level in cfg.levels]
    taus = np.asarray(cfg.taus, dtype=np.float64)
    lib_times, base_times = [], []
    for _ in range(args.repeat):  # interleaved, best of --repeat each (the machine is shared)
        lib_counts, secs = library_surface(CosineKernel(ps, pt), keys, taus)
        lib_times.append(secs)
        base_counts, secs = baseline_surface(ps, pt, keys, taus)
        base_times.append(secs)
    lib_s, base_s = min(lib_times), min(base_times)
    differing = int(np.count_nonzero(lib_counts != base_counts))
    for name, secs, note in (
        ("existence surface (library)", lib_s, "blockwise_top per level, all taus at once"),
        ("existence surface (numpy baseline)", base_s, "dense float32 product per block"),
    ):
        out.add_row(name, str(args.small), f"{len(keys)} x {len(taus)}", "-", f"{secs:.2f}", note)
    console.print(out)
    console.print(
        f"existence surface, all {args.small} records, same run, best of {args.repeat}: library "
        f"{lib_s:.2f} s, plain numpy "
        f"baseline {base_s:.2f} s, ratio {base_s / lib_s:.2f}x; cells differing: {differing} of "
        f"{lib_counts.size}"
    )
    console.print(f"paper: ~229 s for 10,000 records on 8 cores; here {fast:.2f} s on 2 cores")

    if args.skip_large:
        return 0
    # --- large: blocked CVPL at scale ---
    t = time.perf_counter()
    big = synth.generate_customers(args.large, seed=21)
    d_big = Table.from_arrays("original", big)
    r_big = Table.from_arrays("released", synth.release(big, args.protection, seed=22))
    gen_s = time.perf_counter() - t
    cfg_big = config(
        LARGE_LEVELS, fs=False, subblock=True, attribution=True, calibration_samples=200_000
    )
    t = time.perf_counter()
    res_big = assess_tables(d_big, r_big, cfg_big)
    big_s = time.perf_counter() - t
    tab = RichTable(
        title=f"blocked CVPL, {args.large:,} records (generation {gen_s:.1f} s excluded)"
    )
    for col in (
        "level",
        "blocks",
        "largest",
        "split",
        "pairs",
        "recall",
        "recall unsplit",
        "LR(tau*)",
        "prec.",
        "s",
    ):
        tab.add_column(col)
    for lv in res_big.levels:
        tab.add_row(
            lv.name,
            str(lv.blocks),
            str(lv.largest_block),
            str(lv.subblocked),
            f"{lv.pairs:,}",
            f"{lv.structural_recall.value:.3f}" if lv.structural_recall else "-",
            f"{lv.structural_recall_unsplit.value:.3f}" if lv.structural_recall_unsplit else "-",
            f"{lv.at_tau.value:.3f}" if lv.at_tau else "-",
            f"{lv.precision_at_tau.value:.3f}" if lv.precision_at_tau else "-",
            f"{lv.seconds:.1f}",
        )
    console.print(tab)
    console.print({k: round(v, 1) for k, v in res_big.seconds.items()})
    console.print(
        f"1M-record blocked CVPL: {big_s:.1f} s total (goal < 600 s); "
        f"per-record cost vs the 10k surface: {(big_s / args.large) / (fast / args.small):.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
