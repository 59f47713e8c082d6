"""Call children routed where the children run (decision 37), against real processes.

Two endpoints: the first serves the `LashTurn` driver and the demo call targets; the second serves
lash's own services without them. Once the second is registered, the group, child and pump objects
run there, so the answer about a call target is the second endpoint's, whoever opened the group.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from lash_restate.engine import callee_replay_key
from lash_restate.inspection import quote, sql
from lash_restate.testing import LocalStack
from tests.conformance.builders import Scope, combine, echo, err, next_, ok, open_, use
from tests.engine.test_engine import _poll, _runs_of, _wait_run_completed
from tests.engine.test_operator import _missed, until
from tests.engine.test_restate_cli import _invocation, unanswered

REPO = Path(__file__).resolve().parents[2]


def demo_echo(value: str, delay_ms: int = 0) -> dict[str, object]:
    return {
        "type": "call",
        "service": "DemoCalls",
        "handler": "echo",
        "arg": {"value": value, "delay_ms": delay_ms},
    }


def two_endpoints(tmp: Path) -> LocalStack:
    stack = LocalStack(tmp)
    server = stack.add_server()
    stack.add_endpoint("callers")  # --with-turn: LashTurn, DemoCalls, DemoCounter and lash's services
    # lash's services and the demo tools only; it can ask the admin API who serves a call's target
    stack.add_endpoint("children", args=(), env={"LASH_ADMIN_URL": server.admin_url})
    stack.start(register=False)
    stack.register(stack.endpoints[0])
    return stack


def declared_elsewhere(tmp: Path) -> LocalStack:
    """lash's services on a second endpoint, which declares DemoCalls (served by the first) without an
    admin URL: the declaration is trusted (decision 47) until a redeploy drops it."""
    stack = LocalStack(tmp)
    stack.add_server()
    stack.add_endpoint("callers")  # serves DemoCalls and the turn driver
    stack.add_endpoint("children", env={"LASH_DEMO_CALLS_OFF": "1", "LASH_DEMO_EXTERNAL": "DemoCalls"})
    stack.start(register=False)
    stack.register(stack.endpoints[0])
    stack.register(stack.endpoints[1], take_over=True)  # lash's services now run here
    return stack


async def test_a_first_open_is_routed_by_the_endpoint_that_runs_the_children(tmp_path: Path) -> None:
    with two_endpoints(tmp_path) as stack:
        s = Scope()
        group = s.group([demo_echo("a")])
        [opened] = await stack.turn(open_(group))
        assert ok(opened)  # routed by the first endpoint, which binds DemoCalls
        # lash's services now run on the second; it serves none of the first's services, so it is
        # taken for another application: registered on purpose (decision 43).
        stack.register(stack.endpoints[1], take_over=True)
        other = Scope()
        [refused] = await stack.turn(open_(other.group([demo_echo("a")])))
        assert err(refused)["code"] == "child_unroutable"  # the second endpoint does not know DemoCalls
        assert err(refused)["replay_key"] == f"{other.key()}/c0"
        # The first deployment still serves DemoCalls: the refusal says what most likely happened.
        message = err(refused)["message"]
        assert "another deployment of this cluster serves DemoCalls/echo" in message, message
        assert "took them over" in message and "prefix=" in message, message
        assert "lash's services (LashGroup, ...) run on this one" in message, message  # named as served


async def test_a_call_whose_target_left_the_deployment_ends_with_a_terminal_404(tmp_path: Path) -> None:
    """ADR: a target that disappears later ends the child as a terminal 404, never a retry.

    A call lash makes itself (to a handler this endpoint binds) is made by the handler step that
    routed it (the open of a narrow group, the pump of a wide one checks each before calling it:
    decision 61), so it cannot meet a target that left in between. A call to a target the endpoint
    only declares external runs in a `LashChild/execute`, which checks the target when it runs: here
    it is queued behind a child waiting for an event under the same child key (a child object runs
    one invocation per key at a time), the endpoint is redeployed in place without the target, and
    only then is the event emitted, so the queued call meets the new code whatever the load.
    """
    with declared_elsewhere(tmp_path) as stack:
        children = stack.endpoints[1]
        s = Scope()
        shared, hold = await _key_held(stack, s)
        late = s.group(
            [demo_echo("late"), {"type": "tool_call", "tool": "echo", "args": {"value": "fine"}}],
            batch="late",
            replay_keys=[shared, f"{s.id}/fine"],
        )
        [opened] = await stack.turn(open_(late))  # routed: the target is declared at this open
        # Redeploying in place is safe only for invocations that are not running (Restate replays a
        # running one on the new code): wait until the group's open has finished, as an operator
        # would, so that only the queued child meets the new code.
        await _wait_open_completed(stack, s.key("late"))
        stack.restart_endpoint(children, LASH_DEMO_EXTERNAL="")  # redeployed in place, undeclared
        await stack.emit(hold, 1)  # the holder ends; the queued call runs on the new code
        rows = await _wait_run_completed(stack, shared)
        failures = [r.get("completion_failure") or "" for r in rows]
        assert any("404" in f or "no executor" in f for f in failures), rows
        # No outcome was invented for the call: only the tool holds a rank.
        [_, served, last] = await stack.turn(use(ok(opened)), next_(), next_(cancel_after_ms=300))
        assert ok(served)["position"] == 1
        assert err(last)["code"] == "await_cancelled"


async def test_a_call_whose_target_left_before_its_redispatch_stays_missed(tmp_path: Path) -> None:
    """A re-dispatched call child whose target left the endpoint between the reopen and its pump's
    turn is listed as missed again (for the operator's `groups redispatch`), like a first run's miss.

    The call runs in a `LashChild` queued behind a holder (the first miss, as in the test above); the
    reopen, made while the target is declared again, queues its re-dispatch behind the group's pump,
    which still awaits an event; the endpoint drops the declaration, and only then is the event
    emitted, so the re-dispatch plans its calls on the new code whatever the load. Once the endpoint
    binds the target itself, a third reopen's pump calls it straight, as a first run's pump would.
    """
    with declared_elsewhere(tmp_path) as stack:
        children = stack.endpoints[1]
        s = Scope()
        shared, hold = await _key_held(stack, s)
        later = s.event("later")
        group = s.group(
            [demo_echo("late"), {"type": "await_event", "name": later}],
            batch="late",
            replay_keys=[shared, f"{s.id}/later"],
        )
        [opened] = await stack.turn(open_(group))
        assert ok(opened)
        await _wait_open_completed(stack, s.key("late"))
        stack.restart_endpoint(children, LASH_DEMO_EXTERNAL="")  # undeclared: the queued call misses
        await stack.emit(hold, 1)
        assert [
            c.position for c in (await until(lambda: _missed(stack, s.key("late")))).children if c.missed
        ] == [0]
        stack.restart_endpoint(children, LASH_DEMO_EXTERNAL="DemoCalls")  # declared: the reopen routes it
        [reopened] = await stack.turn(open_(group))
        assert ok(reopened)
        # The reopen answers its caller first, then re-dispatches: once its open has ended, the
        # child was dispatched again, so no longer kept missed.
        await _wait_open_completed(stack, s.key("late"))
        assert await _missed(stack, s.key("late")) is None
        stack.restart_endpoint(children, LASH_DEMO_EXTERNAL="")  # gone again before the pump's turn
        await stack.emit(later, 1)  # the pump's run ends; the queued re-dispatch plans on the new code
        view = await until(lambda: _missed(stack, s.key("late")))
        assert [c.position for c in view.children if c.missed] == [0] and view.missed == 1
        # Now the endpoint binds DemoCalls itself: the next reopen's pump calls it straight, as a first
        # run's pump would, keyed by the child's replay key and the group's incarnation.
        stack.restart_endpoint(children, LASH_DEMO_CALLS_OFF="")
        [again] = await stack.turn(open_(group))
        [_, first, second] = await stack.turn(use(ok(again)), next_(), next_())
        assert [ok(r)["position"] for r in (first, second)] == [1, 0]  # the event, then the re-run call
        assert ok(second)["outcome"]["value"] == "late"
        rows = await _poll(
            stack,
            "SELECT c.idempotency_key AS key, p.target_service_name AS caller FROM sys_invocation c "
            "JOIN sys_invocation p ON c.invoked_by_id = p.id WHERE c.target_service_name = 'DemoCalls'",
            lambda rows: bool(rows),
        )
        assert [(callee_replay_key(r.get("key")), r["caller"]) for r in rows] == [(shared, "LashPump")], rows


async def _wait_open_completed(stack: LocalStack, group_key: str) -> None:
    """The group's `open` invocations have finished: redeploying in place is safe only for
    invocations that are not running (Restate replays a running one on the new code)."""
    await _poll(
        stack,
        "SELECT status FROM sys_invocation WHERE target_service_name = 'LashGroup' AND "
        f"target_handler_name = 'open' AND target_service_key = {quote(group_key)}",
        lambda rows: bool(rows) and all(r["status"] == "completed" for r in rows),
    )


async def _key_held(stack: LocalStack, s: Scope) -> tuple[str, str]:
    """A child key (``{scope}/shared``) held by a child waiting for the event ``hold``: a child given
    that replay key later is queued behind it (a child object runs one invocation per key at a time)
    until ``hold`` is emitted. The key and the event's name."""
    shared, hold = f"{s.id}/shared", s.event("hold")
    holding = s.group([{"type": "await_event", "name": hold}], batch="hold", replay_keys=[shared])
    [first] = await stack.turn(open_(holding))
    assert ok(first)
    await _wait_run_holding(stack, shared)
    return shared, hold


async def _wait_run_holding(stack: LocalStack, replay_key: str) -> None:
    """The child's `LashChild` invocation has started: it holds its key until its event comes."""
    await _poll(
        stack,
        f"SELECT status FROM sys_invocation WHERE {_runs_of(replay_key)}",
        lambda rows: bool(rows) and rows[0]["status"] in ("running", "suspended"),
    )


def ghost(handler: str = "hello") -> dict[str, object]:
    """A call to `Ghost`, which the endpoint declares external and no deployment registers."""
    return {"type": "call", "service": "Ghost", "handler": handler, "arg": {}}


def with_ghost_declared(tmp: Path, *, admin: bool = True) -> LocalStack:
    """One server and a `--with-turn` endpoint declaring `Ghost` external; with ``admin``, the endpoint
    knows the admin API's address (``LASH_ADMIN_URL``), so its children can ask who serves `Ghost`."""
    stack = LocalStack(tmp)
    server = stack.add_server()
    env = {"LASH_DEMO_EXTERNAL": "Ghost", **({"LASH_ADMIN_URL": server.admin_url} if admin else {})}
    stack.add_endpoint(env=env)
    return stack.start()


async def _child_ended_or_retried(stack: LocalStack, replay_key: str, handler: str) -> dict[str, object]:
    """The child's invocation once it completed, or once Restate retried it three times (no timing)."""
    [row] = await _poll(
        stack,
        "SELECT status, completion_failure, retry_count FROM sys_invocation WHERE target_service_name = "
        f"'LashChild' AND target_handler_name = '{handler}' AND target_service_key = {quote(replay_key)}",
        # A row read before the first attempt has no `retry_count` yet (the admin API leaves nulls out).
        lambda rows: (
            bool(rows) and (rows[0]["status"] == "completed" or (rows[0].get("retry_count") or 0) >= 3)
        ),
    )
    return row


@pytest.mark.parametrize("width", [2, 3], ids=["narrow", "pumped"])
async def test_a_first_open_calling_a_declared_target_nobody_registered_is_refused_recording_nothing(
    tmp_path: Path, width: int
) -> None:
    """ADR: a first open resolves all N children before it records the group, and a miss refuses the
    whole open with a typed error naming the child; nothing is journaled, so a second open is refused
    the same way. With the admin API's address the open can tell that no deployment of the cluster
    serves a target only declared external (decision 47): the caller gets the refusal, instead of a
    group whose child ends 404 and whose rank nothing will ever allocate."""
    with with_ghost_declared(tmp_path) as stack:
        s = Scope()
        echo = {"type": "tool_call", "tool": "echo", "args": {"value": "fine"}}
        children: list[dict[str, Any]] = [echo, ghost(), echo]
        group = s.group(children[:width])
        [a] = await stack.turn(combine("all", group))
        [b] = await stack.turn(combine("all", group))
        assert err(a) == err(b)
        assert (err(a)["code"], err(a)["position"], err(a)["replay_key"]) == (
            "child_unroutable",
            1,
            f"{s.key()}/c1",
        )
        assert "Ghost" in err(a)["message"], err(a)
        rows = await asyncio.to_thread(
            sql, stack.server.admin_url, f"SELECT * FROM state WHERE service_key = {quote(s.key())}"
        )
        assert rows == []  # nothing of the group was recorded, group row included
        children = await asyncio.to_thread(
            sql,
            stack.server.admin_url,
            "SELECT id FROM sys_invocation WHERE target_service_name IN ('LashChild', 'LashPump') AND "
            f"(starts_with(target_service_key, {quote(s.key() + '/')}) "
            f"OR ends_with(target_service_key, {quote(':' + s.key())}))",
        )
        assert children == []  # and no child was started


async def test_a_declared_target_served_by_another_deployment_is_called_and_a_missing_handler_refused(
    tmp_path: Path,
) -> None:
    """The admin API's answer is per handler: a handler another deployment serves is called; one of
    the same service that nobody serves refuses the first open that calls it."""
    stack = LocalStack(tmp_path)
    server = stack.add_server()
    stack.add_endpoint("callers")  # serves DemoCalls
    # lash's services and the driver, DemoCalls only declared: served by the other deployment.
    env = {"LASH_DEMO_CALLS_OFF": "1", "LASH_DEMO_EXTERNAL": "DemoCalls", "LASH_ADMIN_URL": server.admin_url}
    stack.add_endpoint("children", env=env)
    stack.start(register=False)
    with stack:
        stack.register(stack.endpoints[0])
        stack.register(stack.endpoints[1], take_over=True)  # lash's services now run here
        s = Scope()
        [opened, served] = await stack.turn(open_(s.group([demo_echo("served elsewhere")])), next_())
        assert ok(opened)
        assert ok(served)["position"] == 0 and ok(served)["outcome"] == {
            "type": "ok",
            "value": "served elsewhere",
        }
        missing = {"type": "call", "service": "DemoCalls", "handler": "nope", "arg": {}}
        [refused] = await stack.turn(open_(Scope().group([demo_echo("fine"), missing])))
        assert (err(refused)["code"], err(refused)["position"]) == ("child_unroutable", 1)
        assert "DemoCalls/nope" in err(refused)["message"], err(refused)


async def test_without_an_admin_url_a_declared_target_nobody_registered_is_retried(tmp_path: Path) -> None:
    """Without the admin API's address the declaration is trusted: Restate retries the child under
    lash's retry policy (it pauses when the attempts run out), as the README says."""
    with with_ghost_declared(tmp_path, admin=False) as stack:
        s = Scope()
        [opened] = await stack.turn(open_(s.group([ghost()])))
        assert ok(opened)
        row = await _child_ended_or_retried(stack, f"{s.key()}/c0", "execute2")
        assert row["status"] != "completed", row  # retried: in an attempt, between two, or about to


async def test_a_call_child_that_missed_a_declared_target_replays_its_report_of_the_miss(
    tmp_path: Path,
) -> None:
    """A call child to a declared target nobody registers reports its miss to its group and waits
    until the group has it (decision 86). Cut while it waits, it replays on the endpoint's next
    process: it reads the miss its first run journaled (a child of a group the baseline opened asks
    the admin API again) and replays the report (a replay that took the call instead would meet a
    journal mismatch and be retried for ever).

    The child is queued behind a holder under the same child key while the endpoint trusts the
    declaration (no admin URL), so the open routes it; the endpoint then learns the admin API's
    address, the group's handlers wait on a paused deployment of `LashGroup` alone, the holder's
    event comes, and the endpoint is cut once the child's report of its miss is queued there."""
    with with_ghost_declared(tmp_path, admin=False) as stack:
        s = Scope()
        shared, hold = await _key_held(stack, s)
        echo = {"type": "tool_call", "tool": "echo", "args": {"value": "fine"}}
        late = s.group([ghost(), echo], batch="late", replay_keys=[shared, f"{s.id}/fine"])
        [opened] = await stack.turn(open_(late))  # routed: the declaration is trusted
        assert ok(opened)
        await _wait_open_completed(stack, s.key("late"))
        stack.restart_endpoint(LASH_ADMIN_URL=stack.server.admin_url)
        reports = _invocation("LashGroup", f"target_service_key = {quote(s.key('late'))}", "missed")
        with unanswered(stack, "groups", service="LashGroup"):
            await stack.emit(hold, 1)  # the holder ends; the queued call child runs, and misses
            await _poll(stack, reports, lambda rows: len(rows) == 1)  # its report waits on the group
            # The child, cut while it waits, replays on the next process (which knows `LashGroup` moved).
            stack.restart_endpoint(LASH_TAKE_OVER="1")
        rows = await _wait_run_completed(stack, shared)
        failures = [r.get("completion_failure") or "" for r in rows]
        assert sum("Ghost" in f for f in failures) == 1, rows  # the call child ended with its miss
        view = await until(lambda: _missed(stack, s.key("late")))
        assert [c.position for c in view.children if c.missed] == [0]


async def test_a_resolver_that_raises_refuses_the_first_open_naming_what_it_raised(tmp_path: Path) -> None:
    """A resolver's own bug (it raises where a miss answers None) is a routing miss of the child it
    was resolving: the first open is refused `child_unroutable`, saying what the resolver raised,
    and records nothing. It escaped the group's open as a plain exception, which Restate retried
    for ever while the caller waited."""
    env = {"LASH_RESOLVER": "tests.engine.raising_resolver:resolver", "PYTHONPATH": str(REPO)}
    with LocalStack.single(tmp_path, endpoint_env=env).start() as stack:
        s = Scope()
        explodes = {"type": "tool_call", "tool": "explodes", "args": {}}
        [refused] = await stack.turn(open_(s.group([echo("fine"), explodes])), within=30)
        assert (err(refused)["code"], err(refused)["position"]) == ("child_unroutable", 1), refused
        assert "its resolver raised KeyError('explodes')" in err(refused)["message"], refused
        [opened] = await stack.turn(open_(s.group([echo("fine")], batch="fine")))
        assert ok(opened)  # the resolver still answers for the others
        # On a child's retry, its fault is transient, as the executor's was (and as the reference
        # host words it): retried, then given up.
        later = {"type": "tool_call", "tool": "explodes_on_retry", "args": {}}
        [settled] = await stack.turn(combine("all_settled", s.group([later], batch="later")), within=60)
        assert ok(settled)["value"] == [
            {
                "type": "err",
                "message": "gave up after 3 attempts: KeyError: 'explodes_on_retry'",
                "code": "retries_exhausted",
            }
        ], settled
