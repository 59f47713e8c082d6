"""Restate-only behaviour: deployment validation, ingress privacy, crashes of the endpoint, 404 children."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
import urllib.parse
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
import restate

from lash_restate._http import tls
from lash_restate.engine import DeploymentError, build_app, lash_services, validate_deployment
from lash_restate.engine.wire._routes import ROUTES
from lash_restate.inspection import InspectionError, list_open_groups, quote, show_group, sql
from lash_restate.testing import StackError, demo_tools
from tests.conformance.builders import (
    Scope,
    close,
    combine,
    echo,
    err,
    event,
    iterate,
    next_,
    ok,
    open_,
    save,
    sleep,
    tool,
    use,
)
from tests.engine.conftest import Stack


def test_endpoint_without_a_resolver_refuses_to_start() -> None:
    with pytest.raises(DeploymentError, match="no GroupExecutors resolver"):
        build_app(None)


def test_endpoint_missing_the_group_object_names_what_to_bind() -> None:
    services = [s for s in lash_services(demo_tools()) if s.name != "LashGroup"]
    with pytest.raises(DeploymentError, match=r"LashGroup \(the group object\)"):
        validate_deployment(demo_tools(), services)
    services = [s for s in lash_services(demo_tools()) if s.name != "LashSignal"]
    with pytest.raises(DeploymentError, match="LashSignal"):
        build_app(demo_tools(), services=services)


def test_serve_refuses_a_resolver_that_is_not_one() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "lash_restate", "serve", "--port", "1", "--resolver", "json:dumps"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode != 0
    assert "is not a GroupExecutors" in run.stderr


def test_a_correctly_assembled_app_validates() -> None:
    services = [*lash_services(demo_tools()), restate.Service("Mine")]
    validate_deployment(demo_tools(), services)
    assert callable(build_app(demo_tools(), extra_services=[restate.Service("Extra")]))


async def test_internal_handlers_cannot_be_called_through_the_ingress(restate_stack: Stack) -> None:
    s = Scope()
    [opened] = await restate_stack.turn(open_(s.group([event(s.event("e")), echo(1)])))

    def ours() -> list[Any]:
        return [g for g in list_open_groups(restate_stack.server.admin_url) if g.group_key == s.key()]

    async with asyncio.timeout(30):  # the echo has settled: the snapshot below is the group at rest
        while True:
            before = await asyncio.to_thread(ours)
            if before[0].settled == 1:
                break
            await asyncio.sleep(0.05)
    forged = {  # what a forger would send; the ingress must refuse every routed handler regardless
        "settle": {
            "incarnation": "x",
            "mode": "direct",
            "refs": [{"position": 0, "replay_key": f"{s.key()}/c0"}],
        },
        "open": {"shape": {}, "children": []},
        "close": {"child_count": 2},
        "wait": {"consumed": 0, "child_count": 2},
    }
    async with httpx.AsyncClient(verify=tls(), timeout=30) as client:
        for route in ROUTES:  # every hop between our own services is private
            key = s.key() if route.service == "LashGroup" else "x"
            response = await client.post(
                f"{restate_stack.server.ingress_url}/{route.service}/{key}/{route.handler}",
                json=forged.get(route.handler) if route.service == "LashGroup" else None,
            )
            assert response.status_code == 400, (route, response.text)
            assert "not public" in response.text.lower() or "private" in response.text.lower()
    # The group is exactly as it was; only its age moved on (a busy machine takes seconds here).
    assert [replace(g, age_s=0) for g in await asyncio.to_thread(ours)] == [
        replace(g, age_s=0) for g in before
    ]
    [_, first] = await restate_stack.turn(use(ok(opened)), next_())
    assert ok(first)["position"] == 1  # the forged settlement of child 0 never took rank 1


async def test_an_events_operator_resend_sends_again_a_subscription_and_nothing_else(
    restate_stack: Stack,
) -> None:
    """`LashSignal/operator_resend` is public (`lash-restate groups stranded --resend` calls it through
    the ingress), so what it is handed is checked there: another handler than `subscribe`, a body
    that is no subscribe request, and an id that is no awakeable's (an emit would fail to complete
    it, retried for ever, the event's queue held behind it) are refused with `invalid_input`, and
    nothing is subscribed. A subscription of an awakeable is sent, and the event keeps it."""
    name = f"{Scope().id}-ev"

    async def resend(handler: str, request: bytes) -> httpx.Response:
        body = {"handler": handler, "request": base64.b64encode(request).decode()}
        async with httpx.AsyncClient(verify=tls(), timeout=30) as client:
            return await client.post(
                f"{restate_stack.server.ingress_url}/LashSignal/{name}/operator_resend", json=body
            )

    def awakeable(signal: int) -> str:
        return "sign_1" + base64.urlsafe_b64encode(bytes(24) + signal.to_bytes(4, "big")).decode().rstrip("=")

    for handler, request, says in [
        ("emit", b'"x"', "only a subscription"),
        ("subscribe", b"[1]", "not a subscribe request"),
        ("subscribe", b'"sign_1nowhere"', "not an awakeable"),
        # Signal 1 is an invocation's cancel, which an emit answering it would complete.
        ("subscribe", json.dumps(awakeable(1)).encode(), "not an awakeable"),
    ]:
        refused = await resend(handler, request)
        assert refused.status_code == 400 and says in refused.text, refused.text
    assert restate_stack.waiters(name) == 0
    sent = await resend("subscribe", json.dumps(awakeable(23)).encode())
    assert sent.status_code == 200 and sent.json()["invocation"].startswith("inv_"), sent.text
    waiters = (
        "SELECT key FROM state WHERE service_name = 'LashSignal' "
        f"AND service_key = {quote(name)} AND starts_with(key, 'waiter:')"
    )
    assert await _poll(
        restate_stack, waiters, lambda rows: [r["key"] for r in rows] == [f"waiter:{awakeable(23)}"]
    )
    await restate_stack.emit(name, "done")  # it answers the awakeable (nobody's) and forgets it
    await _poll(restate_stack, waiters, lambda rows: not rows)
    emits = (
        "SELECT status FROM sys_invocation WHERE target_service_name = 'LashSignal' "
        f"AND target_service_key = {quote(name)} AND target_handler_name = 'emit'"
    )
    await _poll(restate_stack, emits, lambda rows: [r["status"] for r in rows] == ["completed"])


async def test_an_operators_resend_refuses_an_open_no_opener_sends_and_keeps_the_groups_own_pumps(
    restate_batched_stack: Stack,
) -> None:
    """`LashGroup/operator_resend` is public (`lash-restate groups stranded --resend` calls it
    through the ingress), so what it is handed is checked there. An open in parts whose shape names
    fewer hashes than children, or more parts than the group has slices, or an answer to no
    awakeable, or an opener that is no invocation, and an `open` carrying other children than its
    shape names, is refused with
    `invalid_input` and sends nothing (the open failed with a plain error, built a list of a billion
    keys, or was refused by Restate at its answer: each retried for ever, the group's queue held
    behind it). And the group's own first open in parts sent again (its stage is the group's
    incarnation) releases none of the group's pumps (it used to send them a `forget`, which a pump
    that had finished would run at once, its outcomes gone before the close): the caller reads
    every rank, and only the close releases the pump. A guard's look at wakes, sent again, is checked
    as well. Every group on this tier opens in parts."""
    stack = restate_batched_stack
    s = Scope()
    gate = s.event("e")
    group = s.group([echo(1), event(gate)])
    [_, first] = await stack.turn(open_(group), next_())
    assert ok(first)["outcome"] == {"type": "ok", "value": 1}
    records = await _poll(
        stack,
        "SELECT key, value_utf8 FROM state WHERE service_name = 'LashGroup' "
        f"AND service_key = {quote(s.key())} AND key IN ('meta', 'fence')",
        lambda rows: len(rows) == 2,
    )
    record = {row["key"]: json.loads(row["value_utf8"]) for row in records}
    incarnation, shape = record["meta"]["incarnation"], record["fence"]
    wake = record["meta"]["waiters"][0]["awakeable"]  # an opener's: the answer of an open sent again
    own = {"reply_to": wake, "shape": shape, "stage": incarnation, "parts": 1}
    # Signal 1 of an invocation is its cancel: an id naming it is no awakeable's.
    cancel = "sign_1" + base64.urlsafe_b64encode(bytes(24) + (1).to_bytes(4, "big")).decode().rstrip("=")

    async def resend(request: dict[str, Any], handler: str = "open_parts") -> httpx.Response:
        body = {"handler": handler, "request": base64.b64encode(json.dumps(request).encode()).decode()}
        async with httpx.AsyncClient(verify=tls(), timeout=30) as client:
            url = f"{stack.server.ingress_url}/LashGroup/{s.key()}/operator_resend"
            return await client.post(url, json=body)

    short = {**own, "shape": {**shape, "hashes": shape["hashes"][:1]}}
    nowhere = {**own, "reply_to": "sign_1nowhere", "parts": 0}  # Restate would refuse to complete it
    childless = {"reply_to": wake, "shape": shape, "children": []}  # an `open` carrying none of them
    for forged, handler, says in [
        (short, "open_parts", "one hash per child"),
        ({**own, "parts": 10**9}, "open_parts", "names no staged parts"),
        (nowhere, "open_parts", "not an awakeable"),
        (childless, "open", "names 2 children and carries 0"),
        # An opener that is no invocation: the group's watch of it would attach to it, which Restate
        # fails as a bad command, retried for ever.
        ({**own, "caller": "forged"}, "open_parts", "not an invocation's id"),
        ({**childless, "caller": "inv_1short"}, "open", "not an invocation's id"),
        # A guard's look (at a caller's wakes): Restate would refuse to complete a waiter that is no
        # awakeable, a look with no pause would look again at once, for ever, and one of more than a
        # day's pause would overflow (a plain error, retried for ever).
        (
            {"incarnation": incarnation, "waiters": ["sign_1nowhere"], "after_ms": 1000},
            "guard",
            "not an awake",
        ),
        ({"incarnation": "", "waiters": [cancel], "after_ms": 1000}, "guard", "not an awake"),  # a cancel
        ({"incarnation": incarnation, "waiters": [wake], "after_ms": 0}, "guard", "1000 ms to a day"),
        ({"incarnation": "", "waiters": [wake], "after_ms": 10**17}, "guard", "1000 ms to a day"),
        # And one at wakes of the group recorded now: they are its to serve.
        ({"incarnation": incarnation, "waiters": [wake], "after_ms": 1000}, "guard", "is recorded"),
        ({"incarnation": incarnation, "waiters": wake}, "guard", "not a 'guard' request"),
    ]:
        refused = await resend(forged, handler)
        assert refused.status_code == 400 and says in refused.text, refused.text
    resent = await resend(own)
    assert resent.status_code == 200, resent.text
    reopens = (
        "SELECT status FROM sys_invocation WHERE target_service_name = 'LashGroup' "
        f"AND target_handler_name = 'open_parts' AND target_service_key = {quote(s.key())}"
    )
    # The first open and the one sent again: nothing was sent for those refused.
    await _poll(stack, reopens, lambda rows: [r["status"] for r in rows] == ["completed"] * 2)
    await stack.emit(gate, "late")
    [_, again, second, closed] = await stack.turn(use(_handle(s.key(), 2, 0)), next_(), next_(), close())
    assert ok(again) == ok(first)
    assert ok(second)["outcome"] == {"type": "ok", "value": "late"}
    assert "error" not in closed
    pumps = (
        "SELECT invoked_by_id AS sender, status FROM sys_invocation WHERE target_service_name = "
        f"'LashPump' AND ends_with(target_service_key, {quote(':' + s.key())})"
    )
    ended = await _poll(stack, pumps, lambda rows: rows and all(r["status"] == "completed" for r in rows))
    assert resent.json()["invocation"] not in [r["sender"] for r in ended]  # sent the pumps nothing


def _subscribed(event_name: str) -> str:
    """The state entries of the children waiting on event ``event_name``, one each."""
    return (
        "SELECT key, value_utf8 FROM state WHERE service_name = 'LashSignal' "
        f"AND service_key = {quote(event_name)} AND starts_with(key, 'waiter:')"
    )


async def test_each_child_waiting_on_an_event_is_an_entry_of_its_own_and_an_emit_settles_them_all(
    restate_stack: Stack,
) -> None:
    """A subscribe writes one empty entry, ``waiter:{awakeable}``, however many children wait on the
    event (it rewrote one list of them all, whose cost grew with the square of the waiters); an
    emit settles every one and leaves the event its payload alone."""
    stack = restate_stack
    s = Scope()
    gate = s.event("g")
    [opened] = await stack.turn(open_(s.group([event(gate) for _ in range(3)])))
    rows = await _poll(stack, _subscribed(gate), lambda rows: len(rows) == 3)
    assert [r["value_utf8"] for r in rows] == ["", "", ""]
    await stack.emit(gate, "go")
    [_, *ranks, closed] = await stack.turn(use(ok(opened)), next_(), next_(), next_(), close())
    assert [ok(r)["outcome"] for r in ranks] == [{"type": "ok", "value": "go"}] * 3
    assert "error" not in closed
    kept = f"SELECT key FROM state WHERE service_name = 'LashSignal' AND service_key = {quote(gate)}"
    assert [r["key"] for r in await asyncio.to_thread(sql, stack.server.admin_url, kept)] == ["payload"]


async def test_an_event_child_resolved_outside_lash_with_bytes_that_are_no_json_settles_as_a_bad_value(
    restate_stack: Stack,
) -> None:
    """An operator (or another application) resolves an event child's awakeable through Restate's
    own API, with a body that is no JSON: the child settles `bad_value` and its caller reads it,
    where its `json.loads` raised a plain exception, retried until the child paused and its caller
    waited on it."""
    stack = restate_stack
    s = Scope()
    gate = s.event("g")
    [opened] = await stack.turn(open_(s.group([event(gate)])))
    [row] = await _poll(stack, _subscribed(gate), lambda rows: len(rows) == 1)
    awakeable = row["key"].removeprefix("waiter:")
    async with httpx.AsyncClient(verify=tls(), timeout=30) as client:
        resolved = await client.post(
            f"{stack.server.ingress_url}/restate/awakeables/{awakeable}/resolve",
            content=b"\xff not json",
            headers={"content-type": "application/octet-stream"},
        )
    assert resolved.status_code in (200, 202), resolved.text
    [_, rank, closed] = await stack.turn(use(ok(opened)), next_(), close())
    outcome = ok(rank)["outcome"]
    assert (outcome["type"], outcome["code"]) == ("err", "bad_value"), outcome
    assert outcome["message"].startswith(f"event {gate}'s payload is not JSON"), outcome
    assert "error" not in closed


async def test_clearing_an_event_keeps_the_children_waiting_on_it_waiting_for_its_next_emit(
    restate_stack: Stack,
) -> None:
    """`LashSignal/{name}/clear` forgets an event's payload, so later waiters wait again; a child
    already waiting on it goes on waiting, and settles with the next emit (clear used to drop the
    waiting children with the payload, and their callers waited for ever)."""
    stack = restate_stack
    s = Scope()
    gate = s.event("g")
    [opened] = await stack.turn(open_(s.group([event(gate), echo(1)])))
    waiting = _subscribed(gate)
    await _poll(stack, waiting, lambda rows: len(rows) == 1)  # the child has subscribed
    await stack.call(f"LashSignal/{urllib.parse.quote(gate, safe='')}/clear", None)
    await stack.emit(gate, "after")
    [_, *ranks, closed] = await stack.turn(use(ok(opened)), next_(), next_(), close())
    assert sorted(json.dumps(ok(r)["outcome"]) for r in ranks) == sorted(
        json.dumps({"type": "ok", "value": v}) for v in ("after", 1)
    )
    assert "error" not in closed


async def test_an_emit_or_reject_lash_cannot_record_is_refused_and_the_waiting_child_settles_later(
    restate_stack: Stack,
) -> None:
    """A payload or a rejection message lash cannot record (a lone surrogate, a non-finite number, a
    message that is no string) is refused at `LashSignal/{name}/emit` or `reject` with 400, and
    nothing is kept: the child already waiting goes on waiting and settles with the next good emit.
    (Kept, such a payload failed every child waiting on the event, each retried for ever, and a
    reject's message made its reject retried for ever.)"""
    stack = restate_stack
    s = Scope()
    gate = s.event("g")
    path = f"LashSignal/{urllib.parse.quote(gate, safe='')}"
    [opened] = await stack.turn(open_(s.group([event(gate), echo(1)])))
    waiting = _subscribed(gate)
    await _poll(stack, waiting, lambda rows: len(rows) == 1)  # the child has subscribed
    refused = {
        "emit": [b'{"text": "\\ud800"}', b"[NaN]", b"Infinity"],
        "reject": [b'"\\udfff"', b'{"why": "no"}', b"7"],
    }
    for handler, bodies in refused.items():
        for body in bodies:
            with pytest.raises(StackError, match=f"/{handler} answered 400: .*"):
                await stack.call(f"{path}/{handler}", content=body)
    kept = f"SELECT key FROM state WHERE service_name = 'LashSignal' AND service_key = {quote(gate)}"
    [entry] = [r["key"] for r in await asyncio.to_thread(sql, stack.server.admin_url, kept)]
    assert entry.startswith("waiter:")  # the waiting child's, and nothing else
    await stack.emit(gate, "ä ☃")
    [_, *ranks, closed] = await stack.turn(use(ok(opened)), next_(), next_(), close())
    assert sorted(json.dumps(ok(r)["outcome"]) for r in ranks) == sorted(
        json.dumps({"type": "ok", "value": v}) for v in ("ä ☃", 1)
    )
    assert "error" not in closed


@pytest.mark.parametrize("earlier", [False, True], ids=["entry", "earlier-list"])
async def test_a_cancelled_event_child_leaves_its_event_no_waiter(
    restate_stack: Stack, tmp_path: Path, earlier: bool
) -> None:
    """Under `Cancel`, a race's losing event child is cancelled at the close: the event forgets the
    waiter it had subscribed (the event's state kept it until the event was emitted, for ever for
    one never emitted). ``earlier``: the event kept its waiters as an earlier release did, in one
    `waiters` list (decision 112; its state rewritten so through Restate's admin API while the child
    waits), which the unsubscribe takes the child out of, and which goes with its last waiter."""
    stack = restate_stack
    s = Scope()
    never, gate = s.event("never"), tmp_path / "gate"
    group = s.group(
        [event(never), tool("blob", {"size": 3, "after": str(gate)})], wake="first", disposition="cancel"
    )
    racing = asyncio.create_task(stack.turn(combine("race", group)))
    [row] = await _poll(stack, _subscribed(never), lambda rows: len(rows) == 1)  # it has subscribed
    everything = f"SELECT key FROM state WHERE service_name = 'LashSignal' AND service_key = {quote(never)}"
    if earlier:
        listed = {"waiters": list(msgspec.json.encode([row["key"].removeprefix("waiter:")]))}
        async with httpx.AsyncClient(verify=tls()) as client:
            answer = await client.post(
                f"{stack.server.admin_url}/services/LashSignal/state",
                json={"object_key": never, "new_state": listed},
            )
        assert answer.status_code in (200, 202), answer.text
        await _poll(stack, everything, lambda rows: [r["key"] for r in rows] == ["waiters"])
    gate.touch()  # the tool wins
    [raced] = await racing
    assert ok(raced)["value"] == "xxx"
    await _poll(stack, everything, lambda rows: not rows)


async def test_killed_endpoint_mid_group_serves_identical_ranks_to_a_fresh_invocation(stack: Stack) -> None:
    """Kill the endpoint mid-group, restart it, resume from the saved handle: same settlement per rank."""
    s = Scope()
    gates = [s.event(f"g{i}") for i in range(3)]
    names = [f"{s.id}-n{i}" for i in range(3)]
    children = [tool("count", {"name": n, "value": n}) for n in names] + [event(g) for g in gates]
    group = s.group(children)
    [_, r1, r2, saved] = await stack.turn(open_(group), next_(), next_(), save())
    for i in range(3):  # every side-effecting child has finished before the kill
        await _wait_run_completed(stack, f"{s.key()}/c{i}")
    async with asyncio.TaskGroup() as tasks:
        parked = tasks.create_task(stack.turn(use(ok(saved)), *[next_() for _ in range(4)], within=120))
        await _wait_waiter_registered(stack, s.key())
        stack.restart_endpoint()  # SIGKILL while the parked turn waits on its awakeable
        for g in reversed(gates):
            await stack.emit(g, g)
    resumed_old = parked.result()  # the original invocation, retried by Restate, finished
    [_, *fresh] = await stack.turn(use(ok(saved)), *[next_() for _ in range(4)])
    [_, *from_zero] = await stack.turn(use(_handle(s.key(), 6, 0)), *[next_() for _ in range(6)])
    assert [ok(r) for r in resumed_old[1:]] == [ok(r) for r in fresh]
    assert [ok(r) for r in from_zero] == [ok(r1), ok(r2), *[ok(r) for r in fresh]]
    assert [ok(r)["rank"] for r in from_zero] == [1, 2, 3, 4, 5, 6]
    assert sorted(ok(r)["position"] for r in from_zero) == [0, 1, 2, 3, 4, 5]
    assert sorted(stack.counts()) == sorted(names)  # each side effect ran exactly once


@pytest.mark.parametrize("routable", [1, 2], ids=["direct", "batched"])
async def test_a_child_whose_tool_left_the_deployment_ends_with_a_terminal_404(
    stack: Stack, routable: int
) -> None:
    """ADR: the Restate host's form (the ADR's "engine tier") of a routing miss is a terminal 404,
    never a retry; on both settlement paths (a group of three is batched through the pump, decision 20)."""
    s = Scope()
    fine = [echo(f"fine{i}") for i in range(routable)]
    group = s.group([tool("count", {"name": f"{s.id}-slow", "delay_ms": 60_000}), *fine])
    [opened] = await stack.turn(open_(group))
    assert "ok" in opened
    await _wait_run_started(stack, f"{s.key()}/c0")
    # Kill the endpoint mid-tool and bring it back without that tool: the retried child cannot route.
    stack.restart_endpoint(LASH_DEMO_TOOLS_OFF="count")
    rows = await _wait_run_completed(stack, f"{s.key()}/c0")
    assert rows[0]["completion_failure"] is not None
    assert "404" in rows[0]["completion_failure"] or "no executor" in rows[0]["completion_failure"]
    # No outcome was invented for it: only the routable children hold ranks.
    steps = [next_() for _ in fine]
    [_, *served, last] = await stack.turn(use(ok(opened)), *steps, next_(cancel_after_ms=300))
    assert sorted(ok(r)["position"] for r in served) == list(range(1, routable + 1))
    assert err(last)["code"] == "await_cancelled"


@pytest.mark.parametrize("routable", [1, 2], ids=["direct", "batched"])
async def test_a_reopen_whose_resolver_lost_a_child_refuses_nothing_and_leaves_it_visible(
    stack: Stack, routable: int
) -> None:
    """ADR: a reopen resolves only what it dispatches and refuses nothing. A recorded group is reopened
    on an endpoint restarted without the tool one of its children needs: the reopen is not refused,
    every recorded rank is served again, and the child nobody can run stays visible, unsettled, in an
    open group (a routing miss is never an outcome). On both settlement paths."""
    s = Scope()
    fine = [echo(f"fine{i}") for i in range(routable)]
    group = s.group([tool("count", {"name": f"{s.id}-slow", "delay_ms": 60_000}), *fine])
    [opened, *served] = await stack.turn(open_(group), *[next_() for _ in fine])
    assert sorted(ok(r)["position"] for r in served) == list(range(1, routable + 1))
    await _wait_run_started(stack, f"{s.key()}/c0")
    stack.restart_endpoint(LASH_DEMO_TOOLS_OFF="count")  # the resolver can no longer route child 0
    await _wait_run_completed(stack, f"{s.key()}/c0")
    steps = [next_() for _ in fine]
    [reopened, *again, last] = await stack.turn(open_(group), *steps, next_(cancel_after_ms=300))
    assert json.loads(ok(reopened))["consumed"] == 0  # a reopen, refused nothing
    assert [ok(r) for r in again] == [ok(r) for r in served]
    assert err(last)["code"] == "await_cancelled"  # child 0 holds no rank: nothing was invented
    view = await asyncio.to_thread(show_group, stack.server.admin_url, s.key())
    assert view is not None and view.settled == routable  # still listed, child 0 unsettled
    [lost] = [c for c in view.children if c.position == 0]
    assert lost.rank is None and lost.outcome is None
    assert s.key() in {g.group_key for g in await asyncio.to_thread(list_open_groups, stack.server.admin_url)}
    assert "ok" in opened


@pytest.mark.parametrize(
    "layout", ["restate_stack", "restate_batched_stack"], ids=["one-message", "in-parts"]
)
async def test_a_resume_of_a_cursor_whose_group_was_closed_leaves_the_group_opened_since_untouched(
    request: pytest.FixtureRequest, layout: str
) -> None:
    """Decision 124, what the conformance scenario cannot see: a resume (a combinator's, a block's)
    of a cursor whose group was closed is refused at its reopen, before the group opened under the
    key since counts the resumer among its openers (a failing one would sever it) or watches it.
    Opened in one message, and opened in parts (whose reopen is `open_parts`)."""
    stack: Stack = request.getfixturevalue(layout)
    s = Scope()
    group = s.group([echo("a"), event(s.event("gate"))], wake="first")
    [_, _, saved, _] = await stack.turn(open_(group), next_(), save(), close())
    [opened, first] = await stack.turn(open_(group), next_())
    assert ok(first)["rank"] == 1
    stale = ok(saved)
    [_, raced] = await stack.turn(use(stale), combine("race", group, handle=stale))
    [_, block] = await stack.turn(use(stale), iterate(group, resume=True))
    assert err(raced)["code"] == err(block)["code"] == "group_not_open"
    view = await asyncio.to_thread(show_group, stack.server.admin_url, s.key())
    assert view is not None and len(view.openers) == 1  # the second open's caller alone
    [_, closed] = await stack.turn(use(ok(opened)), close())
    assert closed == {"ok": None}


async def test_unroutable_first_open_is_refused_through_the_engine(restate_stack: Stack) -> None:
    s = Scope()
    bad = s.group([echo(1), tool("gone")])
    [a] = await restate_stack.turn(combine("all", bad))
    [b] = await restate_stack.turn(combine("all", bad))
    assert err(a) == err(b)
    assert err(a)["code"] == "child_unroutable"
    rows = await asyncio.to_thread(
        sql, restate_stack.server.admin_url, f"SELECT * FROM state WHERE service_key = {quote(s.key())}"
    )
    assert rows == []  # nothing of the group was recorded, group row included


def _handle(key: str, count: int, consumed: int) -> str:
    return json.dumps({"group_key": key, "child_count": count, "consumed": consumed})


async def _poll(stack: Stack, query: str, done: Any, within: float = 60) -> list[dict[str, Any]]:
    """``query``'s rows once ``done`` says so. An admin API that cannot answer yet (a server a test
    restarted, still coming up: "node … was shut down or removed") is asked again; if it still cannot
    when time is up, that is the failure."""
    refused: InspectionError | None = None
    try:
        async with asyncio.timeout(within):
            while True:
                try:
                    rows = await asyncio.to_thread(sql, stack.server.admin_url, query)
                except InspectionError as error:
                    refused = error
                else:
                    refused = None
                    if done(rows):
                        return rows
                await asyncio.sleep(0.05)
    except TimeoutError:
        if refused is not None:
            raise refused from None
        raise


def group_value(group_key: str, key: str) -> str:
    """The query of one state value of group ``group_key``, as the server keeps it."""
    return (
        "SELECT value_utf8 FROM state WHERE service_name = 'LashGroup' "
        f"AND service_key = {quote(group_key)} AND key = {quote(key)}"
    )


async def recorded_meta(stack: Stack, group_key: str) -> dict[str, Any]:
    """The group's `meta` record as the server keeps it, read through the admin API."""
    [row] = await asyncio.to_thread(sql, stack.server.admin_url, group_value(group_key, "meta"))
    meta: dict[str, Any] = json.loads(row["value_utf8"])
    return meta


def _runs_of(replay_key: str) -> str:
    """The invocations that run the child ``replay_key``: its `LashChild` run or execute, or, for a
    call lash makes itself, the callee, keyed by the child's replay key (decision 61)."""
    return (
        f"(target_service_name = 'LashChild' AND target_handler_name IN ('run', 'execute', 'execute2') "
        f"AND target_service_key = {quote(replay_key)}) "
        f"OR starts_with(idempotency_key, {quote(replay_key + '@')})"
    )


async def _wait_run_completed(stack: Stack, replay_key: str) -> list[dict[str, Any]]:
    return await _poll(
        stack,
        f"SELECT status, completion_failure FROM sys_invocation WHERE {_runs_of(replay_key)}",
        lambda rows: bool(rows) and all(r["status"] == "completed" for r in rows),
    )


async def wait_tool_started(stack: Stack, name: str) -> None:
    """A `count` child under ``name`` declared ``slow_once`` has begun its first run (its tool waits)."""
    async with asyncio.timeout(60):
        while True:  # a line the endpoint writes: nothing to await
            if f"started:{name}" in await asyncio.to_thread(stack.counts):
                return
            await asyncio.sleep(0.02)


async def _wait_run_started(stack: Stack, replay_key: str) -> list[dict[str, Any]]:
    return await _poll(
        stack,
        f"SELECT status FROM sys_invocation WHERE {_runs_of(replay_key)}",
        lambda rows: bool(rows) and rows[0]["status"] in ("running", "backing-off"),
    )


def waiters_query(group_key: str) -> str:
    return (
        "SELECT value_utf8 FROM state WHERE service_name = 'LashGroup' "
        f"AND service_key = {quote(group_key)} AND key = 'meta'"
    )


def has_waiter(rows: list[dict[str, Any]]) -> bool:
    """The group's meta record lists a registered waiter (a caller parked on its awakeable)."""
    return bool(rows) and bool(json.loads(rows[0]["value_utf8"]).get("waiters"))


async def _wait_waiter_registered(stack: Stack, group_key: str) -> list[dict[str, Any]]:
    return await _poll(stack, waiters_query(group_key), has_waiter)


def test_the_endpoint_keeps_one_http2_connection_past_a_thousand_requests(restate_stack: Stack) -> None:
    """Restate multiplexes every invocation over a few long-lived HTTP/2 connections. Hypercorn closes
    a connection after 1000 requests by default, and the invoker then stalled the next invocation on
    it until its keep-alive noticed (40 s; a 1000-child group took 45 s instead of 10 s). The endpoint
    lifts the cap: 1100 requests over one HTTP/2 connection all travel on that one connection."""
    with httpx.Client(verify=tls(), http1=False, http2=True, timeout=30) as client:
        first = client.get(f"{restate_stack.endpoint.url}/health").extensions["network_stream"]
        for _ in range(1100):
            response = client.get(f"{restate_stack.endpoint.url}/health")
            assert response.status_code == 200
            assert response.http_version == "HTTP/2"
            assert response.extensions["network_stream"] is first


async def test_the_restate_server_killed_mid_group_restarts_on_its_base_dir_and_loses_nothing(
    stack: Stack,
) -> None:
    s = Scope()
    gates = [s.event(f"g{i}") for i in range(2)]
    group = s.group([echo("before"), *[event(g) for g in gates]])
    [_, first, saved] = await stack.turn(open_(group), next_(), save())
    await asyncio.to_thread(stack.restart_server)  # SIGKILL restate-server mid-group; same base directory
    for g in gates:
        await stack.emit(g, g)
    [_, *rest] = await stack.turn(use(ok(saved)), next_(), next_())
    [_, *again] = await stack.turn(use(_handle(s.key(), 3, 0)), next_(), next_(), next_())
    assert [ok(r) for r in again] == [ok(first), *[ok(r) for r in rest]]
    assert sorted(ok(r)["position"] for r in again) == [0, 1, 2]


async def _assert_group_state_is_references_only(stack: Stack, group_key: str, payload: str) -> None:
    """ADR: the group object's state is a counter, a shape fence and references; never the payload."""
    rows = await asyncio.to_thread(
        sql,
        stack.server.admin_url,
        "SELECT key, value_utf8 FROM state "
        f"WHERE service_name = 'LashGroup' AND service_key = {quote(group_key)}",
    )
    # `opener_ends`: how the callers that saved its handle ended (decision 45), and `savers`, who saved
    # it (decision 78), invocation ids only; `pump`: the awakeable its pump listens on for the close
    # (decision 61); `guarded`: the pending guards of its callers' wakes, by invocation id (decision 83).
    keys = {"meta", "fence", "invocations", "opener_ends", "savers", "pump", "watches", "guarded"}
    assert {r["key"] for r in rows} <= keys
    assert not any(payload in (r["value_utf8"] or "") for r in rows)


async def test_group_state_holds_references_never_payload_bytes(restate_stack: Stack) -> None:
    """ADR: object state stays a counter, a shape fence and a rank -> reference map."""
    s = Scope()
    payload = f"payload-{s.id}-" + "x" * 64
    [opened, settled] = await restate_stack.turn(
        open_(s.group([echo(payload), event(s.event("e"))])), next_()
    )
    assert ok(settled)["outcome"] == {"type": "ok", "value": payload}
    await _assert_group_state_is_references_only(restate_stack, s.key(), payload)
    child_rows = await asyncio.to_thread(
        sql,
        restate_stack.server.admin_url,
        "SELECT value_utf8 FROM state "
        f"WHERE service_name = 'LashChild' AND service_key = {quote(s.key() + '/c0')}",
    )
    assert any(payload in (r["value_utf8"] or "") for r in child_rows)  # it lives with the child
    assert ok(opened)


@pytest.mark.parametrize("width", [2, 3], ids=["direct", "batched"])
async def test_each_child_is_an_invocation_of_its_own_sent_by_the_group_or_its_pump(
    restate_stack: Stack, width: int
) -> None:
    """ADR, tier split: a Restate child is a full invocation, dispatched from outside any recorded body.

    Each tool child is its own `LashChild` invocation, sent by a lash handler as a Restate call (never
    from a side effect's body through the ingress): by the group's `open` on the direct path, by the
    group's pump (itself an invocation the group's `open` sent) on the batched one (decision 20)."""
    s = Scope()
    group = s.group([echo(i) for i in range(width)])
    [_, *served, _] = await restate_stack.turn(open_(group), *[next_() for _ in range(width)], close())
    assert sorted(ok(r)["position"] for r in served) == list(range(width))
    keys = ", ".join(quote(f"{s.key()}/c{i}") for i in range(width))
    rows = await asyncio.to_thread(
        sql,
        restate_stack.server.admin_url,
        "SELECT c.target_service_key AS key, c.target_handler_name AS handler, c.invoked_by AS kind, "
        "p.target_service_name AS by_service, p.target_handler_name AS by_handler, "
        "p.invoked_by AS by_kind, p.invoked_by_service_name AS by_by "
        "FROM sys_invocation c LEFT JOIN sys_invocation p ON c.invoked_by_id = p.id "
        f"WHERE c.target_service_name = 'LashChild' AND c.target_service_key IN ({keys}) "
        "AND c.target_handler_name IN ('run', 'execute', 'execute2')",  # not the close's `forget` of a store
    )
    assert sorted(r["key"] for r in rows) == sorted(f"{s.key()}/c{i}" for i in range(width)), rows  # one each
    for row in rows:
        assert row["kind"] == "service", row  # a call from a handler, not a request at the ingress
        if width == 2:
            assert (row["handler"], row["by_service"], row["by_handler"]) == (
                "run",
                "LashGroup",
                "open",
            ), row
        else:
            assert (row["handler"], row["by_service"], row["by_by"]) == (
                "execute2",
                "LashPump",
                "LashGroup",
            ), row


@pytest.mark.parametrize("width", [2, 3], ids=["narrow", "batched"])
async def test_a_call_child_is_the_invocation_of_the_handler_it_calls_and_nothing_else(
    restate_stack: Stack, width: int
) -> None:
    """Decision 61: a call child costs the user's handler invocation and no `LashChild` in front of it.

    The callee is called by the group's pump, its only caller, from a lash handler (never from a side
    effect's body), under the idempotency key that names the child's replay key and the group's
    incarnation, and it runs once."""
    s = Scope()
    group = s.group([_demo_echo(i) for i in range(width)])
    [_, *served, _] = await restate_stack.turn(open_(group), *[next_() for _ in range(width)], close())
    assert sorted(ok(r)["outcome"]["value"] for r in served) == list(range(width))
    rows = await asyncio.to_thread(
        sql,
        restate_stack.server.admin_url,
        "SELECT c.idempotency_key AS key, c.invoked_by AS kind, p.target_service_name AS by_service, "
        "p.target_handler_name AS by_handler FROM sys_invocation c "
        "LEFT JOIN sys_invocation p ON c.invoked_by_id = p.id "
        f"WHERE c.target = 'DemoCalls/echo' AND starts_with(c.idempotency_key, {quote(s.key() + '/')})",
    )
    keys = sorted(r["key"].rpartition("@")[0] for r in rows)
    assert keys == sorted(f"{s.key()}/c{i}" for i in range(width)), rows  # one each
    for row in rows:
        assert row["kind"] == "service" and (row["by_service"], row["by_handler"]) == ("LashPump", "run2"), (
            row
        )
    children = await asyncio.to_thread(
        sql,
        restate_stack.server.admin_url,
        f"SELECT id FROM sys_invocation WHERE target_service_name = 'LashChild' "
        f"AND starts_with(target_service_key, {quote(s.key() + '/')})",
    )
    assert children == []  # no wrapper invocation, no release per child


@pytest.mark.parametrize("width", [2, 3], ids=["narrow", "batched"])
async def test_a_call_to_a_workflows_main_handler_settles_with_its_output(
    restate_stack: Stack, width: int
) -> None:
    """A workflow's `run` is called once and settles `Ok` with what it returned.

    Restate runs a workflow's main handler once per workflow key and ignores an idempotency key on
    it: a second request for it is refused ("the workflow method was already invoked"), never joined.
    So a child may have one caller only, the group's pump."""
    s = Scope()
    flow = {"type": "call", "service": "DemoFlow", "handler": "run", "arg": {"value": "w"}, "key": s.id}
    group = s.group([flow, *[_demo_echo(i) for i in range(width - 1)]])
    [_, *served, _] = await restate_stack.turn(open_(group), *[next_() for _ in range(width)], close())
    outcomes = {ok(r)["position"]: ok(r)["outcome"] for r in served}
    assert outcomes[0] == {"type": "ok", "value": "w"}, outcomes


def _demo_echo(value: Any) -> dict[str, Any]:
    return {"type": "call", "service": "DemoCalls", "handler": "echo", "arg": {"value": value}}


async def test_a_batched_group_keeps_payloads_in_its_pump_and_releases_them_at_close(
    restate_stack: Stack,
) -> None:
    """Decision 20: a group of BATCH_FROM children or more settles through one pump, which holds the
    outcomes (never the group object); close releases that store in one step."""
    s = Scope()
    payload = f"payload-{s.id}-" + "x" * 64
    group = s.group([echo(payload), echo("b"), event(s.event("e"))])
    [_, first, _] = await restate_stack.turn(open_(group), next_(), save())
    assert ok(first)["rank"] == 1
    await _assert_group_state_is_references_only(restate_stack, s.key(), payload)
    pump = (
        f"SELECT service_key, value_utf8 FROM state WHERE service_name = 'LashPump' "
        f"AND ends_with(service_key, {quote(':' + s.key())})"
    )
    pump_rows = await _poll(
        restate_stack, pump, lambda rows: any(payload in (r["value_utf8"] or "") for r in rows)
    )
    assert len({r["service_key"] for r in pump_rows}) == 1  # one pump, keyed by incarnation and group
    # Children ran as calls of that pump, not as self-settling `run` invocations.
    runs = await asyncio.to_thread(
        sql,
        restate_stack.server.admin_url,
        "SELECT target_handler_name AS h FROM sys_invocation WHERE target_service_name = 'LashChild' "
        f"AND target_service_key = {quote(s.key() + '/c0')}",
    )
    assert [r["h"] for r in runs] == ["execute2"]
    # A fresh invocation reads rank 1 back from the pump's store, then the close releases it.
    [_, again, _] = await restate_stack.turn(use(_handle(s.key(), 3, 0)), next_(), close("cancel"))
    assert ok(again) == ok(first)
    await _poll(restate_stack, pump, lambda rows: not rows)


async def test_a_cancel_group_whose_opener_is_killed_has_its_losers_cancelled(stack: Stack) -> None:
    """ADR: the declared disposition applies on the failure path too, with no close (decision 13).

    The opener is killed through the admin API while parked on rank 2; a resumer then finds both
    losers settled as Cancelled, not parked for ten minutes, and no child is left running.
    """
    s = Scope()
    group = s.group(
        [echo("won"), sleep(600_000), event(s.event("never"))], wake="first", disposition="cancel"
    )
    body = {"steps": [open_(group), next_(), next_()]}
    async with httpx.AsyncClient(verify=tls(), timeout=60) as client:
        opener = asyncio.create_task(
            client.post(
                f"{stack.server.ingress_url}/LashTurn/run", json=body, headers={"idempotency-key": s.id}
            )
        )
        [row] = await _poll(
            stack,
            "SELECT id FROM sys_invocation WHERE target_service_name = 'LashTurn' "
            f"AND idempotency_key = {quote(s.id)}",
            lambda rows: len(rows) == 1,
        )
        await _poll(  # rank 1 is recorded, so the opener is past it and parked on rank 2
            stack,
            "SELECT value_utf8 FROM state WHERE service_name = 'LashGroup' "
            f"AND service_key = {quote(s.key())} AND key = 'meta'",
            lambda rows: bool(rows) and json.loads(rows[0]["value_utf8"]).get("order"),
        )
        killed = await client.patch(f"{stack.server.admin_url}/invocations/{row['id']}/kill")
        assert killed.status_code in (200, 202), killed.text
        assert (await opener).status_code != 200  # the opener ended in failure
    [_, first, second, third] = await stack.turn(use(_handle(s.key(), 3, 0)), next_(), next_(), next_())
    assert ok(first)["outcome"] == {"type": "ok", "value": "won"}
    assert {ok(second)["position"], ok(third)["position"]} == {1, 2}
    assert ok(second)["outcome"] == ok(third)["outcome"] == {"type": "cancelled"}
    for position in (1, 2):
        await _wait_run_completed(stack, f"{s.key()}/c{position}")


async def test_a_cancel_group_whose_opener_returned_normally_keeps_its_losers(restate_stack: Stack) -> None:
    """An opener that returns with the group open has parked a continuation (decision 13): its losers
    run on, the group stays listed, and a resumer that reopens it gets their real outcomes."""
    s = Scope()
    gate = s.event("gate")
    group = s.group([echo("won"), event(gate)], wake="first", disposition="cancel")
    [_, won, saved] = await restate_stack.turn(open_(group), next_(), save())  # ends normally, no close
    assert ok(won)["position"] == 0
    assert s.key() in {
        g.group_key for g in await asyncio.to_thread(list_open_groups, restate_stack.server.admin_url)
    }
    await restate_stack.emit(gate, "late")
    [_, _, loser, _] = await restate_stack.turn(open_(group), use(ok(saved)), next_(), close())
    assert ok(loser)["outcome"] == {"type": "ok", "value": "late"}


async def test_a_run_to_completion_group_keeps_its_losers_after_the_caller_ended(
    restate_stack: Stack,
) -> None:
    s = Scope()
    gate = s.event("gate")
    [_, won, saved] = await restate_stack.turn(
        open_(s.group([echo("won"), event(gate)], wake="first")), next_(), save()
    )
    await restate_stack.emit(gate, "late")
    [_, loser] = await restate_stack.turn(use(ok(saved)), next_())
    assert ok(loser)["outcome"] == {"type": "ok", "value": "late"}
    assert ok(won)["position"] == 0


async def test_closing_a_cancel_group_ends_its_caller_watch(restate_stack: Stack) -> None:
    """A closed group has nothing to apply when its caller ends: the watch must not outlive the close
    (a long-lived caller doing many selects would otherwise keep one watch per select)."""
    s, other = Scope(), Scope()
    group = s.group([echo("won"), sleep(600_000)], wake="first", disposition="cancel")
    blocker = other.group([event(other.event("never"))])
    async with asyncio.TaskGroup() as tasks:
        # The same invocation races (opens, consumes rank 1, closes), then stays alive awaiting.
        caller = tasks.create_task(
            restate_stack.turn(combine("race", group), open_(blocker), next_(cancel_after_ms=600_000))
        )
        await _poll(
            restate_stack,
            "SELECT status FROM sys_invocation WHERE target_service_name = 'LashGroup' "
            f"AND target_service_key = {quote(s.key())} AND target_handler_name = 'watch'",
            lambda rows: bool(rows) and all(r["status"] == "completed" for r in rows),
        )
        # The watch ended while its caller was still running: the close ended it, not the caller's end.
        assert not caller.done()
        await restate_stack.emit(other.event("never"), "now")  # the caller may end now
    [raced, _, woken] = caller.result()
    assert ok(raced)["value"] == "won"
    assert ok(woken)["outcome"] == {"type": "ok", "value": "now"}


async def _opened_and_lost_its_first_childs_tool(stack: Stack, s: Scope, group: dict[str, Any]) -> None:
    """Open ``group``; its first child's `count` tool is lost while it runs (the endpoint restarted
    without it, so the run ends as a miss), then the tool is back: a reopen runs the child again."""
    [opened] = await stack.turn(open_(group))
    assert "ok" in opened
    await _wait_run_started(stack, f"{s.key()}/c0")
    stack.restart_endpoint(LASH_DEMO_TOOLS_OFF="count")  # the deployment lost the tool while it ran
    await _wait_run_completed(stack, f"{s.key()}/c0")
    stack.restart_endpoint(LASH_DEMO_TOOLS_OFF="")  # the tool is back


async def test_a_killed_rerun_settles_only_the_child_it_ran(stack: Stack) -> None:
    """Decision 74 on a reopen's re-dispatch: a child run again by a reopen, then killed by an
    operator, settles as killed and takes its rank; the group's other child, which still waits in a
    run of its own, is not settled with it (the re-dispatched run is watched for its own children)."""
    s = Scope()
    name = f"{s.id}-again"
    later = s.event("later")
    group = s.group([tool("count", {"name": name, "delay_ms": 60_000}), event(later)])  # two: direct
    await _opened_and_lost_its_first_childs_tool(stack, s, group)
    [reopened] = await stack.turn(open_(group))
    runs = f"SELECT id, status FROM sys_invocation WHERE {_runs_of(f'{s.key()}/c0')}"
    rows = await _poll(
        stack, runs, lambda rows: len(rows) == 2 and any(r["status"] == "running" for r in rows)
    )
    [rerun] = [r for r in rows if r["status"] == "running"]
    async with httpx.AsyncClient(verify=tls(), timeout=30) as client:
        killed = await client.patch(f"{stack.admin_url}/invocations/{rerun['id']}/kill")
    assert killed.status_code in (200, 202), killed.text
    [_, first] = await stack.turn(use(ok(reopened)), next_())
    assert (ok(first)["position"], ok(first)["outcome"]) == (
        0,
        {"type": "err", "code": "409", "message": "killed"},
    )
    await stack.emit(later, "later")  # not settled with the killed run: its own event settles it
    [_, second, closed] = await stack.turn(use(_handle(s.key(), 2, 1)), next_(), close())
    assert (ok(second)["position"], ok(second)["outcome"]) == (1, {"type": "ok", "value": "later"})
    assert "error" not in closed
    # Nor was a repair sent for it (one would wait behind its run, and find its outcome stored).
    repairs = stack.sql(
        "SELECT id FROM sys_invocation WHERE target_service_name = 'LashChild' AND "
        f"target_handler_name = 'fail' AND target_service_key = '{s.key()}/c1'"
    )
    assert repairs == []


@pytest.mark.parametrize("width", [2, 3], ids=["direct", "batched"])
async def test_a_cancel_close_cancels_a_child_a_reopen_ran_again(stack: Stack, width: int) -> None:
    """Decisions 48 and 69 under a declared `Cancel`: a child whose tool went missing mid-run is run
    again by a reopen once the tool is back; the close then cancels that run too, as it cancels every
    unsettled child, so its side effect never happens. On both settlement paths (the re-run is a
    `LashChild/run` of its own, or a pump's `redispatch`, each kept in what a `Cancel` cancels)."""
    s = Scope()
    name = f"{s.id}-again"
    fast = [echo(f"fast{i}") for i in range(width - 1)]
    group = s.group(
        [tool("count", {"name": name, "delay_ms": 60_000}), *fast], wake="first", disposition="cancel"
    )
    await _opened_and_lost_its_first_childs_tool(stack, s, group)
    [reopened, first] = await stack.turn(open_(group), next_())
    assert "ok" in reopened and ok(first)["position"] != 0
    await _poll(  # the re-run is under way
        stack,
        f"SELECT status FROM sys_invocation WHERE {_runs_of(f'{s.key()}/c0')}",
        lambda rows: len(rows) == 2 and any(r["status"] == "running" for r in rows),
    )
    [_, closed] = await stack.turn(use(ok(reopened)), close())
    assert "error" not in closed
    await _wait_run_completed(stack, f"{s.key()}/c0")  # the re-run too: cancelled, not waited out
    assert name not in stack.counts()
