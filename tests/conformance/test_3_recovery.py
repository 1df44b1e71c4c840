"""After every negative check: the deployment still serves and still holds its data (the
known-answer linkage gives the same answer again)."""

from __future__ import annotations

from tests.conformance import live
from tests.conformance.conftest import Deployment
from tests.conformance.test_1_service import check_known_answer
from tests.conformance.test_2_negative import assert_serving


async def test_still_serving_with_its_data(deployment: Deployment) -> None:
    await assert_serving(deployment)
    run_id, digest, statuses = await live.linkage(deployment)
    check_known_answer(deployment, run_id, digest, statuses)
