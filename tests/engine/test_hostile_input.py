"""Hostile input: every bad input gets its typed error and stable code, and nothing is recorded or lost.

The table below is the source of `docs/hostile-inputs.md`; a test checks the document lists
every case, so the two cannot drift.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from lash_restate._http import tls
from lash_restate.contract import OUTCOME_LIMIT
from lash_restate.inspection import list_open_groups, quote, show_group, sql
from lash_restate.testing import TURN, LocalStack
from tests.conformance.builders import Scope, close, combine, echo, event, next_, open_, tool, use


@dataclass(frozen=True)
class Case:
    id: str
    what: str
    code: str
    steps: Callable[[Scope], list[Any]]  # turns sent in order; the last turn's last result is checked


def raw(body: bytes) -> dict[str, Any]:
    return {"__raw__": body.decode()}


def member(s: Scope, **changes: Any) -> dict[str, Any]:
    return {"group_key": s.key(), "position": 0, "wake": "all", "disposition": "run_to_completion", **changes}


def child(command: dict[str, Any], replay_key: str) -> dict[str, Any]:
    return {"command": command, "replay_key": replay_key}


def group_with(s: Scope, children: list[Any], **overrides: Any) -> dict[str, Any]:
    return {
        "key": s.key(),
        "wake": "all",
        "disposition": "run_to_completion",
        "children": children,
        **overrides,
    }


def handle(s: Scope, count: int, consumed: int) -> str:
    return json.dumps({"group_key": s.key(), "child_count": count, "consumed": consumed})


CASES = [
    Case("malformed-json", "turn body is not JSON", "invalid_input", lambda s: [[raw(b"{not json")]]),
    Case("steps-not-list", '`"steps"` is not a list', "invalid_input", lambda s: [[raw(b'{"steps": 7}')]]),
    Case(
        "unknown-step",
        "a step type that does not exist",
        "invalid_input",
        lambda s: [[raw(b'{"steps": [{"type": "teleport"}]}')]],
    ),
    Case(
        "unknown-field",
        "an extra field in a step",
        "invalid_input",
        lambda s: [[raw(b'{"steps": [{"type": "next", "hurry": true}]}')]],
    ),
    Case(
        "negative-cancel",
        "`cancel_after_ms` below zero",
        "invalid_input",
        lambda s: [[raw(b'{"steps": [{"type": "next", "cancel_after_ms": -5}]}')]],
    ),
    Case(
        "unknown-command",
        "a child command that does not exist",
        "invalid_envelope",
        lambda s: [[open_(group_with(s, [child({"type": "launch"}, "r0")]))]],
    ),
    Case(
        "negative-sleep",
        "a sleep with a negative duration",
        "invalid_envelope",
        lambda s: [[open_(group_with(s, [child({"type": "sleep", "duration_ms": -1}, "r0")]))]],
    ),
    Case(
        "fractional-sleep",
        "a sleep with a fractional duration",
        "invalid_envelope",
        lambda s: [[open_(group_with(s, [child({"type": "sleep", "duration_ms": 1.5}, "r0")]))]],
    ),
    Case(
        "empty-tool-name",
        "a tool call without a tool name",
        "invalid_envelope",
        lambda s: [[open_(group_with(s, [child({"type": "tool_call", "tool": ""}, "r0")]))]],
    ),
    Case(
        "empty-replay-key",
        "an empty replay key",
        "invalid_envelope",
        lambda s: [[open_(group_with(s, [child(echo(1), "")]))]],
    ),
    Case(
        "control-char-key",
        "a replay key with a control character",
        "invalid_envelope",
        lambda s: [[open_(group_with(s, [child(echo(1), "a\u0000b")]))]],
    ),
    Case(
        "unknown-wake",
        "a fourth wake rule",
        "invalid_envelope",
        lambda s: [[open_(group_with(s, [child(echo(1), "r0")], wake="sometimes"))]],
    ),
    Case(
        "unknown-disposition",
        "an unknown loser disposition",
        "invalid_envelope",
        lambda s: [[open_(group_with(s, [child(echo(1), "r0")], disposition="maybe"))]],
    ),
    Case(
        "bad-group-key",
        "a group key without `:group:`",
        "invalid_group_key",
        lambda s: [[open_(group_with(s, [child(echo(1), "r0")], key="scope-batch-0"))]],
    ),
    Case(
        "leading-zero-occurrence",
        "occurrence `007`",
        "invalid_group_key",
        lambda s: [[open_(group_with(s, [child(echo(1), "r0")], key=f"{s.id}:group:b:007"))]],
    ),
    Case(
        "huge-group-key",
        "a 600-character group key",
        "invalid_group_key",
        lambda s: [[open_(group_with(s, [child(echo(1), "r0")], key=f"{'k' * 600}:group:b:0"))]],
    ),
    Case(
        "foreign-key",
        "a child claiming another group",
        "foreign_group_key",
        lambda s: [
            [open_(group_with(s, [{**child(echo(1), "r0"), "membership": member(s, group_key=s.key("x"))}]))]
        ],
    ),
    Case(
        "permuted-position",
        "a child claiming another position",
        "permuted_position",
        lambda s: [
            [open_(group_with(s, [child(echo(1), "r0"), {**child(echo(2), "r1"), "membership": member(s)}]))]
        ],
    ),
    Case(
        "drifted-wake",
        "a child claiming another wake rule",
        "wake_rule_drift",
        lambda s: [[open_(group_with(s, [{**child(echo(1), "r0"), "membership": member(s, wake="first")}]))]],
    ),
    Case(
        "drifted-disposition",
        "a child claiming another disposition",
        "disposition_drift",
        lambda s: [
            [open_(group_with(s, [{**child(echo(1), "r0"), "membership": member(s, disposition="cancel")}]))]
        ],
    ),
    Case("empty-group", "a group with no child", "empty_group", lambda s: [[open_(group_with(s, []))]]),
    Case(
        "duplicate-replay-key",
        "two children with one replay key",
        "duplicate_replay_key",
        lambda s: [[open_(group_with(s, [child(echo(1), "same"), child(echo(2), "same")]))]],
    ),
    Case(
        "unroutable-tool",
        "a tool no executor is registered for",
        "child_unroutable",
        lambda s: [[open_(s.group([echo(1), tool("rm-rf")]))]],
    ),
    Case(
        "reshaped-reopen",
        "a reopen with fewer children",
        "shape_mismatch",
        lambda s: [
            [open_(s.group([event(s.event("a")), event(s.event("b"))]))],
            [open_(s.group([event(s.event("a"))]))],
        ],
    ),
    Case(
        "rewoken-reopen",
        "a reopen under another wake rule",
        "shape_mismatch",
        lambda s: [
            [open_(s.group([event(s.event("a"))]))],
            [open_(s.group([event(s.event("a"))], wake="first"))],
        ],
    ),
    Case(
        "changed-child-reopen",
        "a reopen whose child command changed",
        "replay_mismatch",
        lambda s: [[open_(s.group([event(s.event("a"))]))], [open_(s.group([event(s.event("z"))]))]],
    ),
    Case(
        "cursor-overrun",
        "awaiting past the last child",
        "cursor_overrun",
        lambda s: [[open_(s.group([echo(1)])), next_(), next_()]],
    ),
    Case(
        "handle-count-mismatch",
        "a handle with another child count",
        "handle_mismatch",
        lambda s: [[open_(s.group([event(s.event("a"))]))], [use(handle(s, 5, 0)), next_()]],
    ),
    Case("malformed-handle", "a handle that is not JSON", "invalid_handle", lambda s: [[use("{{{")]]),
    Case(
        "handle-consumed-past-count",
        "a handle with consumed > child_count",
        "invalid_handle",
        lambda s: [[use(handle(s, 1, 3))]],
    ),
    Case("next-without-handle", "awaiting before any open", "invalid_input", lambda s: [[next_()]]),
    Case(
        "widening-close",
        "closing a Cancel group with RunToCompletion",
        "disposition_widening",
        lambda s: [[open_(s.group([event(s.event("a"))], disposition="cancel")), close("run_to_completion")]],
    ),
    Case(
        "close-bad-disposition",
        "closing with an unknown disposition",
        "invalid_input",
        lambda s: [[open_(s.group([event(s.event("a"))])), {"type": "close", "disposition": "explode"}]],
    ),
    Case(
        "ghost-group",
        "awaiting a group that was never opened",
        "group_not_open",
        lambda s: [[use(handle(s, 1, 0)), next_()]],
    ),
    Case(
        "closed-group",
        "awaiting a group after its close",
        "group_not_open",
        lambda s: [[open_(s.group([echo(1)])), close(), next_()]],
    ),
    Case(
        "combine-wake-drift",
        "`race` over a group declared `all`",
        "wake_rule_drift",
        lambda s: [[combine("race", s.group([echo(1)]))]],
    ),
    Case(
        "combine-negative-stop",
        "`stop_after` below zero",
        "invalid_input",
        lambda s: [[raw(b'{"steps": [{"type": "combine", "kind": "all", "group": {}, "stop_after": -1}]}')]],
    ),
    Case(
        "call-unknown-service",
        "a call to a service nobody binds or declared",
        "child_unroutable",
        lambda s: [[open_(group_with(s, [child(call("Nowhere", "echo"), "r0")]))]],
    ),
    Case(
        "call-unknown-handler",
        "a call to a handler its service does not have",
        "child_unroutable",
        lambda s: [[open_(group_with(s, [child(call("DemoCalls", "launch"), "r0")]))]],
    ),
    Case(
        "call-object-without-key",
        "a call to a virtual object without a key",
        "child_unroutable",
        lambda s: [[open_(group_with(s, [child(call("DemoCounter", "add", 1), "r0")]))]],
    ),
    Case(
        "call-service-with-key",
        "a call to a plain service with a key",
        "child_unroutable",
        lambda s: [[open_(group_with(s, [child(call("DemoCalls", "echo", key="k"), "r0")]))]],
    ),
    Case(
        "call-malformed",
        "a call whose handler is not a string",
        "invalid_envelope",
        lambda s: [
            [open_(group_with(s, [child({"type": "call", "service": "DemoCalls", "handler": 7}, "r0")]))]
        ],
    ),
]


def call(service: str, handler: str, arg: Any = None, key: str | None = None) -> dict[str, Any]:
    command: dict[str, Any] = {"type": "call", "service": service, "handler": handler, "arg": arg}
    return command if key is None else {**command, "key": key}


async def send_turn(stack: LocalStack, turn: list[Any]) -> list[dict[str, Any]]:
    if len(turn) == 1 and isinstance(turn[0], dict) and "__raw__" in turn[0]:
        results: list[dict[str, Any]] = await stack.call(f"{TURN}/run", content=turn[0]["__raw__"].encode())
        return results
    return await stack.turn(*turn)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
async def test_hostile_input_gets_its_typed_error(restate_stack: LocalStack, case: Case) -> None:
    stack = restate_stack
    s = Scope()
    before = {g.group_key for g in await asyncio.to_thread(list_open_groups, stack.admin_url)}
    turns = case.steps(s)
    last: list[dict[str, Any]] = []
    for turn in turns:
        last = await send_turn(stack, turn)
    assert "error" in last[-1], last
    assert last[-1]["error"]["code"] == case.code
    # Nothing recorded by the refused step: only a group opened by an earlier, valid step may exist.
    opened_before = len(turns) > 1 or any(
        isinstance(step, dict) and step.get("type") == "open" and "ok" in result
        for step, result in zip(turns[0], last, strict=False)
    )
    after = {g.group_key for g in await asyncio.to_thread(list_open_groups, stack.admin_url)}
    if not opened_before:
        assert after - before == set()


async def test_sql_metacharacters_in_a_group_key_reach_inspection_as_data(
    restate_stack: LocalStack,
) -> None:
    stack = restate_stack
    s = Scope()
    key = f"{s.id}-x' OR '1'='1; DROP TABLE state; --\":group:b:0"
    group = {
        "key": key,
        "wake": "all",
        "disposition": "run_to_completion",
        "children": [{"command": event(s.event("e")), "replay_key": f"{s.id}/r0"}],
    }
    [opened] = await send_turn(stack, [open_(group)])
    assert "ok" in opened
    shown = await asyncio.to_thread(show_group, stack.admin_url, key)
    assert shown is not None
    assert shown.group_key == key
    assert await asyncio.to_thread(show_group, stack.admin_url, "x' OR '1'='1") is None
    rows = await asyncio.to_thread(sql, stack.admin_url, f"SELECT {quote(key)} AS k")
    assert rows == [{"k": key}]


async def test_payloads_near_the_message_limit_pass_and_over_it_settle_as_too_large(
    restate_stack: LocalStack,
) -> None:
    stack = restate_stack
    s = Scope()
    near = 4 * 1024 * 1024
    [_, fits] = await send_turn(stack, [open_(s.group([tool("blob", {"size": near})])), next_()])
    assert len(fits["ok"]["outcome"]["value"]) == near
    s2 = Scope()
    over = 33 * 1024 * 1024  # past Restate's own limit: a run journaling it would be retried for ever
    [_, refused] = await send_turn(stack, [open_(s2.group([tool("blob", {"size": over})])), next_()])
    assert refused["ok"]["outcome"]["type"] == "err"
    assert refused["ok"]["outcome"]["code"] == "too_large"
    assert f"limit of {OUTCOME_LIMIT} bytes" in refused["ok"]["outcome"]["message"]


async def test_a_request_over_the_ingress_limit_is_refused_and_records_nothing(
    restate_stack: LocalStack,
) -> None:
    stack = restate_stack
    s = Scope()
    body = json.dumps({"steps": [open_(s.group([echo("x" * (33 * 1024 * 1024))]))]}).encode()
    async with httpx.AsyncClient(verify=tls(), timeout=120) as client:
        try:
            response = await client.post(
                f"{stack.ingress_url}/{TURN}/run",
                content=body,
                headers={"content-type": "application/json"},
            )
            assert response.status_code == 413
        except (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError):
            pass  # the ingress refused the body and closed the connection before it was all sent
    assert s.key() not in {g.group_key for g in await asyncio.to_thread(list_open_groups, stack.admin_url)}


def test_the_hostile_input_document_lists_every_case() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "hostile-inputs.md").read_text()
    for case in CASES:
        assert f"`{case.id}`" in doc, case.id
        assert f"`{case.code}`" in doc
    numbers = [int(n) for n in re.findall(r"^\| (\d+) \|", doc, flags=re.MULTILINE)]
    assert numbers == list(range(1, len(numbers) + 1)), "the page's cases are numbered 1, 2, … in order"
    assert f"{len(numbers)} distinct bad inputs in all." in doc
