"""Each Restate tier really runs what it is named for: the `restate-v7` tier lash on Restate's newest
service protocol, the `restate-batched` tier every group in the widest rank layout."""

from __future__ import annotations

import json

import pytest

from lash_restate.inspection import sql
from lash_restate.testing import LocalStack
from tests.conformance.builders import Scope, close, echo, next_, ok, open_, use

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


@pytest.mark.parametrize(
    ("fixture", "layout"),
    [("restate_stack", ("direct", False, False)), ("restate_batched_stack", ("pumped", True, True))],
)
async def test_each_restate_tier_settles_a_narrow_group_in_its_layout(
    request: pytest.FixtureRequest, fixture: str, layout: tuple[str, bool, bool]
) -> None:
    """A pass on a tier is a pass on its rank layout: a two-child group of tools settles directly on
    `restate`, and on `restate-batched` through a pump, its ranks in pages, opened in parts (every
    scenario of the suite runs there on the layout of a group too wide for one open message)."""
    stack: LocalStack = request.getfixturevalue(fixture)
    s = Scope()
    [opened] = await stack.turn(open_(s.group([echo("a"), echo("b")])))
    meta = sql(
        stack.server.admin_url,
        "SELECT value_utf8 FROM state WHERE service_name = 'LashGroup' "
        f"AND service_key = '{s.key()}' AND key = 'meta'",
    )
    recorded = json.loads(meta[0]["value_utf8"])
    staged = sql(
        stack.server.admin_url,
        "SELECT id FROM sys_invocation WHERE target_service_name = 'LashPump' "
        f"AND target_handler_name = 'stage' AND ends_with(target_service_key, ':{s.key()}')",
    )
    assert (recorded["mode"], recorded["incarnation"].startswith("p-"), bool(staged)) == layout
    await stack.turn(use(ok(opened)), close())
