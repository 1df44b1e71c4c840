#!/usr/bin/env python3
"""List the numba loops a fresh checkout's first networked runs compile after the node's warm-up.

In an empty numba cache of its own (a temporary NUMBA_CACHE_DIR: the checkout's own cache is not
touched) this runs the warm-up as ``scripts/setup.sh`` does (``python -m party.node.warmup``), then
one small networked ``scripts/simulate.py`` run per --run (mode:target:parties, by default the
defaults, target all and mode mpc3 at P = 3, then both targets at P = 5, a party count the warm-up
never runs: a loop whose types depend on P compiles there), and prints the loops each run compiled: the cache
files that appeared during it (a ``.nbc`` file per compiled variant). Every node and the simulate
process inherit the cache folder. Exit status 1 when any run compiled a loop, 2 when a run failed.

Example: python scripts/first_run_compiles.py --records 5000
         python scripts/first_run_compiles.py --run mpc3:all:2 --run segments:all:4
"""

from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_RUNS = (
    "segments:any:3",
    "segments:all:3",
    "mpc3:any:3",
    "mpc3:all:3",
    "segments:all:5",
    "segments:any:5",
)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--run",
        action="append",
        default=None,
        metavar="MODE:TARGET:PARTIES",
        help=f"a networked run after the warm-up (repeatable; default {' '.join(DEFAULT_RUNS)})",
    )
    ap.add_argument("--records", type=int, default=5000, help="records per party (default 5000)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--reference",
        action="store_true",
        help="keep simulate.py's in-process reference run and oracle (they compile in its own "
        "process; default: --no-reference, only the nodes run)",
    )
    ap.add_argument(
        "--cache-dir",
        type=pathlib.Path,
        default=None,
        help="numba cache folder to use (default: a new empty temporary one, removed after)",
    )
    ap.add_argument(
        "--no-warm-up", action="store_true", help="skip the warm-up (what a run compiles cold)"
    )
    return ap


def parse_run(spec: str) -> tuple[str, str, int]:
    mode, target, parties = spec.split(":")
    return mode, target, int(parties)


def cached_variants(cache: pathlib.Path) -> set[str]:
    """The compiled variants in the cache, as paths of their .nbc files relative to it."""
    return {str(p.relative_to(cache)) for p in cache.rglob("*.nbc")}


def loop_name(nbc: str) -> str:
    """``folder/module.function-LINE.py311.N.nbc`` -> ``module.function`` (variant N)."""
    name = pathlib.PurePath(nbc).name
    stem, _, rest = name.partition(".py3")
    variant = rest.split(".")[1] if rest.count(".") >= 2 else "?"
    return f"{stem.rsplit('-', 1)[0]} (variant {variant})"


def run_step(label: str, argv: list[str], env: dict[str, str], cache: pathlib.Path) -> list[str]:
    """Run one step; return the variants it added to the cache (exit 2 when it fails)."""
    before = cached_variants(cache)
    t0, c0 = time.perf_counter(), os.times()
    done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True)
    c1 = os.times()
    cpu = c1.children_user + c1.children_system - c0.children_user - c0.children_system
    if done.returncode != 0:
        print(done.stdout[-4000:], done.stderr[-4000:], sep="\n", file=sys.stderr)
        print(f"{label}: exit status {done.returncode}", file=sys.stderr)
        sys.exit(2)
    added = sorted(cached_variants(cache) - before)
    print(
        f"{label}: {time.perf_counter() - t0:.1f} s wall, {cpu:.1f} CPU-s, "
        f"{len(added)} variants compiled",
        flush=True,
    )
    for nbc in added:
        print(f"    {loop_name(nbc)}    {nbc}")
    return added


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    runs = [parse_run(s) for s in (args.run or DEFAULT_RUNS)]
    with tempfile.TemporaryDirectory(prefix="pprl-first-run-") as tmp:
        cache = args.cache_dir or pathlib.Path(tmp) / "numba-cache"
        cache.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
        print(f"numba cache: {cache} ({len(cached_variants(cache))} variants at start)")
        if not args.no_warm_up:
            run_step("warm-up", [sys.executable, "-m", "party.node.warmup"], env, cache)
        compiled = 0
        for i, (mode, target, parties) in enumerate(runs):
            cmd = [
                sys.executable,
                "scripts/simulate.py",
                f"--parties={parties}",
                f"--records={args.records}",
                f"--seed={args.seed}",
                f"--mode={mode}",
                f"--target={target}",
                f"--out={pathlib.Path(tmp) / f'run-{i}'}",
                "--timeout=900",
            ]
            if not args.reference:
                cmd.append("--no-reference")
            label = f"first run {mode} target {target} P={parties} x {args.records}"
            compiled += len(run_step(label, cmd, env, cache))
    print(f"compiled after the warm-up: {compiled} variants")
    return 1 if compiled else 0


if __name__ == "__main__":
    sys.exit(main())
