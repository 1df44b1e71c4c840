"""Generate the committed Python stubs of proto/*.proto (messages, type stubs, gRPC services).

Run from anywhere: ``python scripts/gen_protos.py [--out DIR]``. It runs
``python -m grpc_tools.protoc -I . --python_out=OUT --pyi_out=OUT --grpc_python_out=OUT proto/*.proto``
from the repository root, so generated imports read ``from proto import common_pb2``. With ``--out``
the stubs go to ``DIR/proto/`` (the test regenerates into a temporary folder and byte-compares with
the committed files); the default writes them next to the .proto files.
"""

from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def generate(out: pathlib.Path) -> list[pathlib.Path]:
    """Run protoc over proto/*.proto into ``out``; return the .proto files compiled."""
    protos = sorted((ROOT / "proto").glob("*.proto"))
    if not protos:
        raise SystemExit("no proto/*.proto files found")
    out.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        "-I",
        ".",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *[str(p.relative_to(ROOT)) for p in protos],
    ]
    subprocess.run(cmd, cwd=ROOT, check=True)
    return protos


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=pathlib.Path, default=ROOT, help="output root (default: repo)"
    )
    args = parser.parse_args()
    protos = generate(args.out.resolve())
    print(f"generated stubs for {len(protos)} proto files under {args.out / 'proto'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
