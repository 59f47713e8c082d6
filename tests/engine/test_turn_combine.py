"""`LashTurn/combine` as the README documents it: one combinator over bare commands, stop and resume."""

from __future__ import annotations

from typing import Any

from lash_restate.testing import LocalStack
from tests.conformance.builders import fresh_scope


async def combine(stack: LocalStack, body: Any, raw: bytes | None = None) -> dict[str, Any]:
    answer: dict[str, Any] = await stack.call("LashTurn/combine", body, content=raw)
    return answer


async def test_the_readme_combine_request_races_and_reports_the_group_key(
    restate_stack: LocalStack,
) -> None:
    stack = restate_stack
    scope = fresh_scope()
    body = {
        "kind": "race",
        "children": [
            {"type": "tool_call", "tool": "echo", "args": {"value": "fast"}},
            {"type": "sleep", "duration_ms": 600_000},  # loses however slow the machine: cancelled
        ],
        "scope": scope,
        "batch": "b1",
        "occurrence": 0,
        "losers": "cancel",
    }
    assert await combine(stack, body) == {
        "status": "fulfilled",
        "group_key": f"{scope}:group:b1:0",
        "order": [0],
        "value": "fast",
    }


async def test_combine_stops_after_k_and_resumes_from_the_saved_handle(
    restate_stack: LocalStack,
) -> None:
    stack = restate_stack
    scope = fresh_scope()
    body: dict[str, Any] = {
        "kind": "all_settled",
        "children": [{"type": "tool_call", "tool": "echo", "args": {"value": i}} for i in range(3)],
        "scope": scope,
        "stop_after": 1,
    }
    first = await combine(stack, body)
    assert first["status"] == "suspended"
    resumed = await combine(stack, {**body, "stop_after": None, "handle": first["handle"]})
    assert resumed["status"] == "fulfilled"
    assert resumed["order"][:1] == first["order"]
    assert resumed["value"] == [{"type": "ok", "value": i} for i in range(3)]


async def test_combine_refuses_bad_requests_typed(restate_stack: LocalStack) -> None:
    stack = restate_stack
    assert (await combine(stack, None, raw=b"{nope"))["error"]["code"] == "invalid_input"
    assert (await combine(stack, {"kind": "sometimes", "children": []}))["error"]["code"] == "invalid_input"
    # Decided locally, as ECMA-262 decides them: nothing is opened (ADR; decision 8 for race).
    for kind, expected in [
        ("all", {"status": "fulfilled", "value": []}),
        ("all_settled", {"status": "fulfilled", "value": []}),
        ("any", {"status": "rejected", "reason": []}),
    ]:
        answer = await combine(stack, {"kind": kind, "children": [], "scope": fresh_scope()})
        assert {k: answer[k] for k in expected} == expected, (kind, answer)
    empty = await combine(stack, {"kind": "race", "children": [], "scope": fresh_scope()})
    assert empty["error"]["code"] == "empty_group"
