"""The `restate-v7` tier really runs lash on Restate's newest service protocol."""

from __future__ import annotations

import pytest

from lash_restate.inspection import sql
from lash_restate.testing import LocalStack
from tests.conformance.builders import Scope, close, echo, next_, open_

pytestmark = pytest.mark.restate


@pytest.mark.parametrize(("fixture", "protocol"), [("restate_v7_stack", 7), ("restate_stack", 6)])
async def test_each_restate_tier_runs_lash_on_its_service_protocol(
    request: pytest.FixtureRequest, fixture: str, protocol: int
) -> None:
    """The server negotiates the protocol per invocation: 7 only where the tier's server enables it,
    so a pass on `restate-v7` is a pass of lash on protocol v7 (server-side combinators, signals)."""
    stack: LocalStack = request.getfixturevalue(fixture)
    s = Scope()
    group = s.group([echo("a"), echo("b", delay_ms=50), echo("c")])
    await stack.turn(open_(group), next_(), next_(), next_(), close())
    rows = sql(
        stack.server.admin_url,
        "SELECT DISTINCT pinned_service_protocol_version AS v FROM sys_invocation "
        f"WHERE target_service_key LIKE '{s.id}%' AND pinned_service_protocol_version IS NOT NULL",
    )
    assert {row["v"] for row in rows} == {protocol}
