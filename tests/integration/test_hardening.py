"""Trust boundaries and operations of live nodes (issue 15): messages attributed to the stream's
certificate identity, registration that a second process cannot hijack, start-up checks."""

from __future__ import annotations

from party.synthetic.cluster import Cluster
from proto import common_pb2
from tests.integration.conftest import parameters, run_and_wait

S = common_pb2.Stage


def test_execute_messages_are_filed_under_the_streams_identity(cluster3: Cluster) -> None:
    """party-c claims to be party-a in its progress and summary: the run fails naming party-c and
    nothing is filed under party-a's name on party-c's word."""
    cluster3.restart_party("party-c", {"PPRL_TEST_FORGE_PARTY": "party-a"})
    try:
        status = run_and_wait(cluster3, parameters(cluster3, name="p-forge.json"))
        assert status.stage == S.STAGE_FAILED
        assert "party-c sent a message attributed to another party" in status.reason
        assert all(s.matches != 424242 for s in status.summaries)
        assert all(p.party in cluster3.parties for p in status.parties)
    finally:
        cluster3.restart_party("party-c")
    again = run_and_wait(cluster3, parameters(cluster3, name="p-after-forge.json"))
    assert again.stage == S.STAGE_DONE, again.reason
