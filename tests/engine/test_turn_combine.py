"""`LashTurn/combine` as the README documents it: one combinator over bare commands, stop and resume."""

from __future__ import annotations

from typing import Any

import httpx

from lash_restate.devstack import Endpoint, RestateServer
from tests.conformance.builders import fresh_scope


async def combine(server: RestateServer, body: Any, raw: bytes | None = None) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=60) as client:
        if raw is not None:
            response = await client.post(
                f"{server.ingress_url}/LashTurn/combine",
                content=raw,
                headers={"content-type": "application/json"},
            )
        else:
            response = await client.post(f"{server.ingress_url}/LashTurn/combine", json=body)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


async def test_the_readme_combine_request_races_and_reports_the_group_key(
    restate_stack: tuple[RestateServer, Endpoint],
) -> None:
    server, _ = restate_stack
    scope = fresh_scope()
    body = {
        "kind": "race",
        "children": [
            {"type": "tool_call", "tool": "echo", "args": {"value": "fast"}},
            {"type": "sleep", "duration_ms": 5000},
        ],
        "scope": scope,
        "batch": "b1",
        "occurrence": 0,
        "losers": "cancel",
    }
    assert await combine(server, body) == {
        "status": "fulfilled",
        "group_key": f"{scope}:group:b1:0",
        "order": [0],
        "value": "fast",
    }


async def test_combine_stops_after_k_and_resumes_from_the_saved_handle(
    restate_stack: tuple[RestateServer, Endpoint],
) -> None:
    server, _ = restate_stack
    scope = fresh_scope()
    body: dict[str, Any] = {
        "kind": "all_settled",
        "children": [{"type": "tool_call", "tool": "echo", "args": {"value": i}} for i in range(3)],
        "scope": scope,
        "stop_after": 1,
    }
    first = await combine(server, body)
    assert first["status"] == "suspended"
    resumed = await combine(server, {**body, "stop_after": None, "handle": first["handle"]})
    assert resumed["status"] == "fulfilled"
    assert resumed["order"][:1] == first["order"]
    assert resumed["value"] == [{"type": "ok", "value": i} for i in range(3)]


async def test_combine_refuses_bad_requests_typed(restate_stack: tuple[RestateServer, Endpoint]) -> None:
    server, _ = restate_stack
    assert (await combine(server, None, raw=b"{nope"))["error"]["code"] == "invalid_input"
    assert (await combine(server, {"kind": "sometimes", "children": []}))["error"]["code"] == "invalid_input"
    empty = await combine(server, {"kind": "all", "children": [], "scope": fresh_scope()})
    assert empty["error"]["code"] == "empty_group"
