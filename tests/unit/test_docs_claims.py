"""The documents' statements about what the coordinator sees and admits follow the code."""

from __future__ import annotations

import pathlib
import re

from coordinator.config import CoordinatorConfig
from proto import party_pb2

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _coordinator_sees(doc: str) -> str:
    text = (ROOT / "docs" / doc).read_text(encoding="utf-8")
    match = re.search(r"\*\*What the coordinator sees:\*\*(.*?)(?:\n- |\n\n)", text, re.DOTALL)
    assert match, f"docs/{doc} has no 'What the coordinator sees' item"
    return " ".join(match.group(1).split())


def test_network_md_lists_the_record_count_the_coordinator_receives() -> None:
    # PrepareResponse goes to the coordinator: every number in it is something the coordinator sees
    numbers = [
        f.name
        for f in party_pb2.PrepareResponse.DESCRIPTOR.fields
        if f.type in (f.TYPE_UINT64, f.TYPE_INT64, f.TYPE_UINT32, f.TYPE_INT32)
    ]
    assert numbers == ["records"]
    assert "number of records" in _coordinator_sees("network.md")


def test_protocol_md_documents_the_allowed_party_list() -> None:
    assert "allowed_parties" in CoordinatorConfig.__dataclass_fields__
    text = " ".join((ROOT / "docs" / "protocol.md").read_text(encoding="utf-8").split())
    assert "no list of admissible party names" not in text
    assert "coordinator.allowed_parties" in text
