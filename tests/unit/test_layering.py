"""Architecture guard: pure layers import no transport, and party/coordinator stay independent."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PURE = ["party/encoding", "party/protocol", "party/audit", "party/mpc"]


def _imports(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
            if node.module.startswith("party.node"):
                names.add("party.node")
    return names


@pytest.mark.parametrize("package", PURE)
def test_pure_layers_import_no_transport(package):
    for path in (ROOT / package).rglob("*.py"):
        bad = _imports(path) & {"grpc", "proto", "coordinator", "party.node"}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_party_and_coordinator_do_not_import_each_other():
    for path in (ROOT / "party").rglob("*.py"):
        assert "coordinator" not in _imports(path), path
    for path in (ROOT / "coordinator").rglob("*.py"):
        assert "party" not in _imports(path), path


def test_proto_package_is_this_repository():
    import proto

    assert pathlib.Path(proto.__file__).resolve().is_relative_to(ROOT)
