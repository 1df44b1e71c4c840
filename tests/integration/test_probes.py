"""Health probes run as their own processes against live nodes and import only what they use.

A container health check runs `pprl-party health` every few seconds: importing the encoder (pyarrow),
the comparison kernels (numba) or the report figures (matplotlib) cost about 1.2 s of CPU per probe.
``python -X importtime`` lists every module the probe process imported.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from party.synthetic.cluster import Cluster

HEAVY = ("numba", "matplotlib", "pyarrow", "scipy", "sklearn", "llvmlite")
# The servers' own code: a probe needs the config, TLS and the health stub, not the servicers.
SERVER_CODE = {
    "party-a": ("party.node.node", "party.node.server", "party.protocol.engine"),
    "coordinator": ("coordinator.server", "coordinator.service", "coordinator.store"),
}


def imported_modules(importtime_stderr: str) -> set[str]:
    """Module names from ``-X importtime`` lines ("import time: self | cumulative | name")."""
    names = set()
    for line in importtime_stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":
                names.add(name)
    return names


@pytest.mark.parametrize(
    ("module", "node"), [("party.cli", "party-a"), ("coordinator.cli", "coordinator")]
)
def test_health_probe_of_a_live_node_imports_no_heavy_package(
    cluster3: Cluster, module: str, node: str
) -> None:
    config = cluster3.coordinator.config if node == "coordinator" else cluster3.nodes[node].config
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", module, "health", "--config", str(config)],
        capture_output=True,
        text=True,
        cwd=cluster3.root,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"{node}: SERVING" in proc.stderr
    modules = imported_modules(proc.stderr)
    packages = {m.split(".")[0] for m in modules}
    assert "grpc" in packages  # the parse sees the probe's real imports
    assert not packages & set(HEAVY), sorted(packages & set(HEAVY))
    assert not modules & set(SERVER_CODE[node]), sorted(modules & set(SERVER_CODE[node]))
    # Certificate parsing is the servers' (caller identity); a probe only opens a TLS channel.
    assert "cryptography.x509" not in modules
