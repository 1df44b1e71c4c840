"""Building the command-line parsers imports no heavy package: small commands stay cheap.

Every `pprl-party` command builds the whole argparse tree, so a subcommand module that imports the
encoder, kernels or report figures at its top makes `health` and `--help` pay for them.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("numba", "matplotlib", "pyarrow", "scipy", "sklearn", "llvmlite", "numpy")


@pytest.mark.parametrize("module", ["party.cli", "coordinator.cli"])
def test_building_the_parser_imports_no_heavy_package(module: str) -> None:
    code = (
        f"import json, sys; from {module} import build_parser; build_parser(); "
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    loaded = set(json.loads(proc.stdout))
    assert "argparse" in loaded
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))
