"""A real party node applies the default audit policy and its PPRL_AUDIT_* overrides at the gate."""

from __future__ import annotations

from party.synthetic.cluster import Cluster
from tests.integration.conftest import declined_run, parameters


def test_node_declines_a_segments_run_under_the_default_policy(cluster3: Cluster) -> None:
    # the harness's generated configs opt out of the default policy ([audit] default_policy =
    # false); the environment turns it back on, as for a config without [audit.policy]
    cluster3.restart_party("party-c", {"PPRL_AUDIT_DEFAULT_POLICY": "true"})
    try:
        out, _ = declined_run(cluster3, "p-default-policy.json", "party-c", timeout=120)
        assert "insider one-to-one re-identification of whole records" in out
        assert "CVPL-LR at tau=0.9" in out
        # per-key overrides reach the node: with both limits relaxed the same run goes through
        cluster3.restart_party(
            "party-c",
            {
                "PPRL_AUDIT_DEFAULT_POLICY": "true",
                "PPRL_AUDIT_MAX_INSIDER_RECORD_ONE_TO_ONE": "1",
                "PPRL_AUDIT_MAX_CVPL_LR": "1",
            },
        )
        proc = cluster3.run(parameters(cluster3, name="p-relaxed-policy.json"), timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    finally:
        cluster3.restart_party("party-c")
