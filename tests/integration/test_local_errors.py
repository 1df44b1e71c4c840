"""A party's own data errors reach the coordinator without the party's file paths.

Encoder errors name the file (its absolute path), row and field, which is what the party's operator
needs; the coordinator (another organisation, possibly) gets only which party and which step failed.
"""

from __future__ import annotations

import time

from party.synthetic.cluster import Cluster
from proto import common_pb2
from tests.integration.conftest import parameters, run_and_wait


def test_unreadable_party_data_fails_the_run_without_giving_the_coordinator_its_path(
    cluster3: Cluster,
) -> None:
    victim = "party-b"
    csv_path = cluster3.csvs[cluster3.parties.index(victim)]
    original = csv_path.read_bytes()
    # a header without the id column: the encoder refuses the file, naming it
    csv_path.write_text("given_name,surname\nkeepthisprivate,x\n", encoding="utf-8")
    try:
        status = run_and_wait(cluster3, parameters(cluster3, name="p-local-error.json"), 60.0)
    finally:
        csv_path.write_bytes(original)
    assert status.stage == common_pb2.Stage.STAGE_FAILED
    reason = status.reason
    assert victim in reason and "encoding its data CSV" in reason, reason
    assert str(csv_path.parent) not in reason and csv_path.name not in reason, reason
    assert "keepthisprivate" not in reason
    coordinator_log = cluster3.log_text("coordinator")
    assert str(csv_path.parent) not in coordinator_log
    # the party's own log has the full message: the file it could not encode
    deadline = time.monotonic() + 30
    while str(csv_path) not in cluster3.log_text(victim):
        assert time.monotonic() < deadline, cluster3.tail(cluster3.nodes[victim])
        time.sleep(0.05)
    assert "keepthisprivate" not in cluster3.log_text(victim)
    # and the deployment still works once the file is fixed
    again = run_and_wait(cluster3, parameters(cluster3, name="p-local-fixed.json"), 90.0)
    assert again.stage == common_pb2.Stage.STAGE_DONE, again.reason
