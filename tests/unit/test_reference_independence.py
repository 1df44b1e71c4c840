"""The references that check the protocol do not import the code they check.

The plaintext oracle (party/protocol/oracle.py) may use the parameter and table types and their
validation, but not the engine's blocking, kernels, popcounts, Dice or one-to-one code; the
known-answer generator (scripts/gen_kat_protocol.py) imports nothing from the project at all.
"""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROJECT = ("party", "proto", "coordinator", "tests")
ORACLE_MAY_IMPORT = {"party.protocol.errors", "party.protocol.params", "party.protocol.records"}


def imported_modules(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def project_modules(names: set[str]) -> set[str]:
    return {n for n in names if n.split(".")[0] in PROJECT}


def test_oracle_imports_only_types_and_validation() -> None:
    modules = {
        n
        for n in project_modules(imported_modules(ROOT / "party" / "protocol" / "oracle.py"))
        if n.rsplit(".", 1)[0] not in ORACLE_MAY_IMPORT
    }
    assert modules <= ORACLE_MAY_IMPORT, sorted(modules - ORACLE_MAY_IMPORT)


def test_protocol_kat_generator_imports_nothing_from_the_project() -> None:
    modules = project_modules(imported_modules(ROOT / "scripts" / "gen_kat_protocol.py"))
    assert not modules, sorted(modules)
