"""The operator's view and lever: `groups list/show` tell open, parked and orphaned groups apart and
show what Restate paused; `groups close` is the caller's close, through the group object (decision 45).

Every case runs against a real restate-server whose default retry policy pauses an invocation after
two attempts, so a call child whose target keeps failing is paused within a second or so (but one, on the
suite's shared server, whose default policy backs off between attempts).
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import datetime
import functools
import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote as url_quote

import httpx
import pytest

import lash_restate.inspection._operator as operator
import lash_restate.inspection._paused as inspection_paused
import lash_restate.inspection._sql as inspection_sql
from lash_restate._http import tls
from lash_restate.engine.wire._messages import OperatorRedispatch, awakeable_invocation, is_invocation_id
from lash_restate.engine.wire._routes import GROUP_OPERATOR_REDISPATCH
from lash_restate.inspection import (
    GroupView,
    InspectionError,
    OpenGroup,
    list_open_groups,
    quote,
    rollback_blockers,
    show_group,
    sql,
)
from lash_restate.inspection._groups import read_groups
from lash_restate.inspection._operator import operator_call
from lash_restate.inspection._paused import callee_of
from lash_restate.inspection._sql import admin_api
from lash_restate.inspection._staged import state_version
from lash_restate.testing import CallFailed, LocalStack, StackError
from tests.conformance.builders import (
    Scope,
    close,
    combine,
    count,
    echo,
    event,
    front,
    iterate,
    next_,
    ok,
    open_,
    save,
    tool,
    use,
)
from tests.conftest import check_group_events
from tests.engine.cli_main import run_main
from tests.engine.test_engine import _poll, recorded_meta, wait_tool_started

PAUSE_FAST = {
    "RESTATE_DEFAULT_RETRY_POLICY__MAX_ATTEMPTS": "2",
    "RESTATE_DEFAULT_RETRY_POLICY__INITIAL_INTERVAL": "50ms",
    "RESTATE_DEFAULT_RETRY_POLICY__ON_MAX_ATTEMPTS": "pause",
}

T = TypeVar("T")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    base = tmp_path_factory.mktemp("operator")
    # Verbose: every group event logged, the operator's among them, each checked at the end.
    with LocalStack.single(base, server_env=PAUSE_FAST, endpoint_env={"LASH_VERBOSE": "1"}).start() as s:
        yield s
    check_group_events(base / "endpoint.log")


def lash(stack: LocalStack, *args: str) -> subprocess.CompletedProcess[str]:
    """`lash-restate ARGS` against the stack, through the CLI's `main` in this process (what the
    console script calls; tests/engine/test_cli.py runs the command itself): its output and exit
    code, without an interpreter's start-up per call."""
    urls = ["--admin-url", stack.server.admin_url]
    if args[:2] in (("groups", "close"), ("groups", "redispatch"), ("groups", "stranded")):
        urls += ["--ingress-url", stack.server.ingress_url]
    return run_main([*args, *urls])


async def until(probe: Callable[[], Awaitable[T | None]], within: float = 60) -> T:
    """``probe``'s first answer that is not None (or falsy), polled until ``within`` seconds pass."""
    async with asyncio.timeout(within):
        while True:
            found = await probe()
            if found:
                return found
            await asyncio.sleep(0.05)


def group_events(base: Path, name: str, key: str) -> list[dict[str, Any]]:
    """The endpoint's events ``name`` of group ``key``, from its log in the stack's ``base``."""
    lines = (base / "endpoint.log").read_text().splitlines()
    found = [json.loads(line) for line in lines if f'"{name}"' in line and key in line]
    return [event for event in found if event.get("event") == name and event.get("group_key") == key]


async def listed(stack: LocalStack, key: str, state: str | None = None) -> OpenGroup | None:
    """The listing's row for ``key`` once it is in ``state`` (None until then)."""
    groups = await asyncio.to_thread(list_open_groups, stack.server.admin_url)
    row = next((g for g in groups if g.group_key == key), None)
    return row if row is not None and (state is None or row.state == state) else None


def turn_in_background(stack: LocalStack, scope: Scope, *steps: dict[str, Any]) -> asyncio.Task[Any]:
    """A `LashTurn/run` left running (its steps wait on an event nobody emits), keyed to find it."""
    body = {"steps": list(steps)}
    headers = {"idempotency-key": scope.id}

    async def post() -> httpx.Response:
        async with httpx.AsyncClient(verify=tls(), timeout=120) as client:
            return await client.post(f"{stack.server.ingress_url}/LashTurn/run", json=body, headers=headers)

    return asyncio.create_task(post())


async def turn_id(stack: LocalStack, scope: Scope) -> str:
    query = (
        "SELECT id FROM sys_invocation WHERE target_service_name = 'LashTurn' "
        f"AND idempotency_key = {quote(scope.id)}"
    )
    return await invocation_id(stack, query)


async def invocation_id(stack: LocalStack, query: str) -> str:
    """The id of the first invocation ``query`` finds, once it finds one."""

    async def found() -> str | None:
        rows = await asyncio.to_thread(sql, stack.server.admin_url, query)
        return str(rows[0]["id"]) if rows else None

    return await until(found)


async def state_rows(stack: LocalStack, key: str) -> list[dict[str, Any]]:
    query = f"SELECT key FROM state WHERE service_name = 'LashGroup' AND service_key = {quote(key)}"
    return await asyncio.to_thread(sql, stack.server.admin_url, query)


async def unfinished(stack: LocalStack, key: str) -> list[dict[str, Any]]:
    """Invocations of the group, its pump, its children and the calls they made that have not ended."""
    children = (
        "SELECT id FROM sys_invocation WHERE target_service_name = 'LashChild' "
        f"AND starts_with(target_service_key, {quote(key + '/')})"
    )
    query = (
        "SELECT id, target, status FROM sys_invocation WHERE status != 'completed' AND ("
        f"(target_service_name = 'LashChild' AND starts_with(target_service_key, {quote(key + '/')})) "
        f"OR invoked_by_id IN ({children}) "
        # A call child lash calls itself is the callee, keyed by the child's replay key (decision 61).
        f"OR starts_with(idempotency_key, {quote(key + '/')}) "
        f"OR (target_service_name = 'LashPump' AND ends_with(target_service_key, {quote(':' + key)})) "
        f"OR (target_service_name = 'LashGroup' AND target_service_key = {quote(key)}))"
    )
    return await asyncio.to_thread(sql, stack.server.admin_url, query)


def stall(message: str) -> dict[str, Any]:
    return {"type": "call", "service": "DemoCalls", "handler": "stall", "arg": {"message": message}}


async def parked_group(
    stack: LocalStack, *children: dict[str, Any], disposition: str = "run_to_completion"
) -> Scope:
    """A group whose opener read rank 1, saved its handle and returned normally, as the group recorded."""
    s = Scope()
    group = s.group([echo("won"), *children], wake="first", disposition=disposition)
    [_, won, saved] = await stack.turn(open_(group), next_(), save())
    assert ok(won)["position"] == 0 and ok(saved)
    await until(lambda: recorded_parked(stack, s.key()))
    return s


async def test_a_save_after_a_resume_is_not_taken_by_a_namesake_opened_since(stack: LocalStack) -> None:
    """A caller that resumed (reopened) a group saves it after the group was closed and opened again
    under its key (an explicit key reused): the save names the incarnation it resumed, which is
    gone, and the namesake records no save of it. (After a resume the save named no incarnation, and
    the namesake took it for its own: kept as parked, never reclaimed.)"""
    s, resumer = Scope(), Scope()
    gate = resumer.event("gate")
    group = s.group([event(s.event("never"))])
    [opened, _] = await stack.turn(open_(group), save())
    saves = (
        "SELECT key FROM state WHERE service_name = 'LashGroup' "
        f"AND service_key = {quote(s.key())} AND key = 'savers'"
    )
    # The resumer reopens the group (reading none of its ranks), waits on a gate, then saves its cursor.
    resuming = turn_in_background(
        stack, resumer, open_(group), front("race", resumer.key(), [event(gate)]), save()
    )

    async def reopened() -> GroupView | None:
        view = await asyncio.to_thread(show_group, stack.server.admin_url, s.key())
        return view if view is not None and len(view.openers) == 2 else None

    await until(reopened)
    [_, closed] = await stack.turn(use(ok(opened)), close("cancel"))  # closed while the resumer waits
    assert "error" not in closed
    [namesake] = await stack.turn(open_(group))  # the key opened again: another incarnation
    assert ok(namesake)
    assert await asyncio.to_thread(sql, stack.server.admin_url, saves) == []
    await stack.emit(gate, "go")
    answers = (await resuming).json()
    assert "ok" in answers[0] and "ok" in answers[2]  # reopened, and saved as far as the resumer knows
    [again] = await stack.turn(open_(group))  # queued behind the resumer's save on the group's key
    assert ok(again)
    assert await asyncio.to_thread(sql, stack.server.admin_url, saves) == []


async def recorded_parked(stack: LocalStack, key: str) -> GroupView | None:
    """The group's view once it is parked by its own record, not by what Restate still remembers."""
    view = await asyncio.to_thread(show_group, stack.server.admin_url, key)
    if view is None or view.state != "parked" or "Restate still remembers" in view.reason:
        return None
    return view


async def kill(stack: LocalStack, invocation: str) -> None:
    async with httpx.AsyncClient(verify=tls(), timeout=30) as client:
        killed = await client.patch(f"{stack.server.admin_url}/invocations/{invocation}/kill")
    assert killed.status_code in (200, 202), killed.text


async def purge(stack: LocalStack, invocation: str) -> None:
    """Make Restate forget a completed invocation, as its completion retention (24 h) would."""
    async with httpx.AsyncClient(verify=tls(), timeout=30) as client:
        purged = await client.patch(f"{stack.server.admin_url}/invocations/{invocation}/purge")
    assert purged.status_code in (200, 202), purged.text


async def orphaned_group(stack: LocalStack, disposition: str = "run_to_completion") -> Scope:
    """A group whose opener was killed through the admin API while it waited for rank 2."""
    s = Scope()
    group = s.group([echo("won"), event(s.event("never"))], wake="first", disposition=disposition)
    opener = turn_in_background(stack, s, open_(group), next_(), next_())
    invocation = await turn_id(stack, s)
    await until(lambda: listed(stack, s.key(), "open"))
    # Killed once its loser runs: a group may be listed as soon as its open records it, before the
    # open has sent its children, and a close lists only the children Restate shows running.
    loser = f"{s.key()}/c1"
    await invocation_id(stack, f"SELECT id FROM sys_invocation WHERE target_service_key = {quote(loser)}")
    # And once its winner ranked: its settle and the loser's start are two invocations, either first.
    await until(lambda: settled(stack, s.key(), 1))
    async with httpx.AsyncClient(verify=tls(), timeout=30) as client:
        killed = await client.patch(f"{stack.server.admin_url}/invocations/{invocation}/kill")
    assert killed.status_code in (200, 202), killed.text
    assert (await opener).status_code != 200
    return s


async def open_group(stack: LocalStack) -> tuple[Scope, asyncio.Task[Any]]:
    """A group whose opener still runs, waiting for rank 2."""
    s = Scope()
    group = s.group([echo("won"), event(s.event("never"))], wake="first")
    opener = turn_in_background(stack, s, open_(group), next_(), next_())
    await until(lambda: listed(stack, s.key(), "open"))
    return s, opener


async def test_list_and_show_tell_open_parked_and_orphaned_apart(stack: LocalStack) -> None:
    started = time.time()  # each group is opened by this test: none is older than it
    parked = await parked_group(stack, event(Scope().event("later")))
    orphaned = await orphaned_group(stack)
    running, opener = await open_group(stack)

    # Each is classified as the turn left it, the orphan after its kill, whatever came first.
    await until(lambda: listed(stack, orphaned.key(), "orphaned"))
    out = lash(stack, "groups", "list", "--json")
    assert out.returncode == 0, out.stderr
    rows = {row["group_key"]: row for row in json.loads(out.stdout)}
    assert rows[parked.key()]["state"] == "parked" and not rows[parked.key()]["orphaned"]
    assert rows[orphaned.key()]["state"] == "orphaned" and rows[orphaned.key()]["orphaned"]
    assert rows[running.key()]["state"] == "open"
    for key in (parked.key(), orphaned.key(), running.key()):
        assert isinstance(rows[key]["age_s"], int) and 0 <= rows[key]["age_s"] <= time.time() - started + 1
        assert rows[key]["paused"] == 0

    only = lash(stack, "groups", "list", "--orphaned", "--json")
    assert orphaned.key() in {row["group_key"] for row in json.loads(only.stdout)}
    assert parked.key() not in {row["group_key"] for row in json.loads(only.stdout)}
    table = lash(stack, "groups", "list")
    assert table.stdout.splitlines()[0].split()[-6:] == [
        "STATE",
        "AGE",
        "PAUSED",
        "RETRYING",
        "MISSED",
        "RECLAIM",
    ]

    shown = json.loads(lash(stack, "groups", "show", parked.key(), "--json").stdout)
    assert shown["state"] == "parked" and "saved its handle and returned normally" in shown["reason"]
    assert [o["ended"] for o in shown["openers"]] == ["returned"]
    assert shown["opened_at"] and 0 <= shown["age_s"] <= time.time() - started + 1
    opened = datetime.datetime.fromisoformat(shown["opened_at"]).timestamp()
    assert started - 1 <= opened <= time.time() + 1, shown["opened_at"]
    # This release's opening, by which a rollback tells its groups from the baseline's.
    assert shown["incarnation"].endswith("-s") and shown["incarnation"] == rows[parked.key()]["incarnation"]
    assert f"incarnation:  {shown['incarnation']}" in lash(stack, "groups", "show", parked.key()).stdout
    # Weeks later Restate has forgotten the opener; the group's own record still says it is parked.
    await purge(stack, shown["openers"][0]["invocation_id"])
    assert await recorded_parked(stack, parked.key())
    gone = json.loads(lash(stack, "groups", "show", orphaned.key(), "--json").stdout)
    assert gone["state"] == "orphaned" and "killed" in gone["reason"]
    human = lash(stack, "groups", "show", running.key()).stdout
    assert "state:        open" in human and "(running)" in human

    opener.cancel()


async def test_a_paused_child_is_shown_with_its_last_failure(stack: LocalStack) -> None:
    s = await parked_group(stack, stall("the warehouse is down"))
    row = await until(lambda: _with_paused(stack, s.key()))
    assert row.paused == 1 and row.state == "parked"

    view = await asyncio.to_thread(show_group, stack.server.admin_url, s.key())
    assert view is not None
    [child] = [c for c in view.children if c.paused is not None]
    assert child.position == 1 and child.rank is None
    assert child.paused is not None
    assert child.paused.target.startswith("DemoCalls/stall")
    assert "the warehouse is down" in (child.paused.last_failure or "")
    assert child.paused.last_failure_error_code == "500"
    human = lash(stack, "groups", "show", s.key())
    assert "which is paused (its retries ran out" in human.stdout and "the warehouse is down" in human.stdout
    assert "restate invocations resume" in human.stdout

    assert any(r["target"].startswith("DemoCalls/stall") for r in await unfinished(stack, s.key()))
    # What the README says to do: kill the paused call; the child then settles, and the group closes.
    await _kill_and_close(stack, s.key(), child.paused.invocation_id)


async def _kill_and_close(stack: LocalStack, key: str, invocation_id: str) -> None:
    """Kill ``invocation_id``, the call a parked group's second child waits on: the child settles,
    the operator's forced close closes the group, and nothing of it is left."""
    async with httpx.AsyncClient(verify=tls(), timeout=30) as client:
        killed = await client.patch(f"{stack.server.admin_url}/invocations/{invocation_id}/kill")
    assert killed.status_code in (200, 202), killed.text
    await until(lambda: settled(stack, key, 2))
    # `show` tells a killed child's rejection by its code (an operator's trial could not tell 409s
    # from a handler's own rejections): a rejection's code, and none for a fulfilled child.
    view = await asyncio.to_thread(show_group, stack.server.admin_url, key)
    assert view is not None
    assert [(c.outcome, c.code) for c in view.children] == [("ok", None), ("err", "409")]
    assert re.search(r"\n1 +\S+ +2 +err +409 ", lash(stack, "groups", "show", key).stdout)
    closed = lash(stack, "groups", "close", key, "--force", "--json")
    assert closed.returncode == 0, closed.stderr
    assert json.loads(closed.stdout)["closed"] is True
    await until(lambda: _nothing_left(stack, key))


async def test_a_child_restate_is_retrying_is_shown_with_its_last_failure_and_next_attempt(
    restate_stack: LocalStack,
) -> None:
    """Under Restate's default retry policy a call that keeps failing backs off between attempts, for
    longer each time: `groups show` says which child waits on it, what failed and when Restate tries
    again, where it showed only the child's status. (On the suite's shared server: this module's
    pauses after two attempts 50 ms apart.)"""
    stack = restate_stack
    s = await parked_group(stack, stall("the ledger is locked"))

    async def retrying() -> str | None:
        human = lash(stack, "groups", "show", s.key()).stdout
        return human if "which Restate is retrying" in human else None

    human = await until(retrying)
    assert "child 1 is waiting on DemoCalls/stall" in human and "the ledger is locked" in human
    # The listing counts it, as it counts a paused one: a group held up while Restate retries.
    row = await until(lambda: _listed_retrying(stack, s.key()))
    assert (row.retrying, row.paused) == (1, 0)
    assert "Traceback" not in human and "restate invocations kill" in human
    view = await until(lambda: _retrying(stack, s.key()))
    assert view.retrying == 1
    [child] = [c for c in view.children if c.retrying is not None]
    assert child.position == 1 and child.rank is None and child.status == "backing-off"
    assert child.paused is None and child.retrying is not None
    failing = child.retrying
    assert failing.target.startswith("DemoCalls/stall") and failing.invocation_id == child.invocation_id
    assert "the ledger is locked" in (failing.last_failure or "") and (failing.retry_count or 0) >= 1
    assert failing.next_retry_at and failing.last_failure_error_code
    shown = json.loads(lash(stack, "groups", "show", s.key(), "--json").stdout)
    assert [c["position"] for c in shown["children"] if c["retrying"]] in ([], [1])  # it may be running now

    await _kill_and_close(stack, s.key(), failing.invocation_id)


async def _listed_retrying(stack: LocalStack, key: str) -> OpenGroup | None:
    row = await listed(stack, key)
    return row if row is not None and row.retrying else None


async def _retrying(stack: LocalStack, key: str) -> GroupView | None:
    view = await asyncio.to_thread(show_group, stack.server.admin_url, key)
    return view if view is not None and any(c.retrying for c in view.children) else None


async def _with_paused(stack: LocalStack, key: str) -> OpenGroup | None:
    row = await listed(stack, key)
    return row if row is not None and row.paused else None


async def settled(stack: LocalStack, key: str, count: int) -> OpenGroup | None:
    """The listing's row for ``key`` once exactly ``count`` of its children hold a rank."""
    row = await listed(stack, key)
    return row if row is not None and row.settled == count else None


async def _nothing_left(stack: LocalStack, key: str) -> bool:
    return (
        not await state_rows(stack, key)
        and not await stores_left(stack, key)
        and not await unfinished(stack, key)
    )


def staged_query(key: str) -> str:
    """The parts an open in parts of group ``key`` staged with its pumps and has not released."""
    return (
        "SELECT service_key FROM state WHERE service_name = 'LashPump' AND key = 'staged' "
        f"AND ends_with(service_key, {quote(':' + key)})"
    )


async def stores_left(stack: LocalStack, key: str) -> list[dict[str, Any]]:
    """What the group's pumps and children still keep: a close releases all of it."""
    query = (
        "SELECT service_name, service_key, key FROM state WHERE "
        f"(service_name = 'LashPump' AND ends_with(service_key, {quote(':' + key)})) "
        f"OR (service_name = 'LashChild' AND starts_with(service_key, {quote(key + '/')}))"
    )
    return await asyncio.to_thread(sql, stack.server.admin_url, query)


async def test_close_refuses_a_parked_group_unless_forced_and_is_idempotent(stack: LocalStack) -> None:
    s = await parked_group(stack, event(Scope().event("later")))
    refused = lash(stack, "groups", "close", s.key())
    assert refused.returncode == 4
    assert "parked" in refused.stderr and "--force" in refused.stderr and "continuation" in refused.stderr
    said = lash(stack, "groups", "close", s.key(), "--json")  # on stdout too, for a script
    assert said.returncode == 4 and json.loads(said.stdout)["closed"] is False, said.stdout
    assert "parked" in json.loads(said.stdout)["refused"]
    assert await listed(stack, s.key(), "parked")  # nothing was closed

    forced = lash(stack, "groups", "close", s.key(), "--force", "--cancel", "--json")
    logged = (stack.base_dir / "endpoint.log").read_text().splitlines()
    assert any('"group.operator_closed"' in line and s.key() in line for line in logged)
    assert forced.returncode == 0, forced.stderr
    answer = json.loads(forced.stdout)
    assert answer == {
        "group_key": s.key(),
        "closed": True,
        "was": "parked",
        "disposition": "cancel",
        "cancelled": 1,  # the event child still waiting
        "pumped": False,
        "running": [],  # cancelled with the close: none left running
        "pumps": [],
    }
    await until(lambda: _nothing_left(stack, s.key()))

    again = lash(stack, "groups", "close", s.key())
    assert again.returncode == 0, again.stderr
    assert "not open" in again.stdout
    assert json.loads(lash(stack, "groups", "close", s.key(), "--json").stdout)["closed"] is False


async def test_an_orphan_an_earlier_opener_saved_is_shown_saved_and_closed_only_when_forced(
    stack: LocalStack,
) -> None:
    """A group parked with its handle saved, then resumed by a caller that saved nothing and was
    killed: orphaned by its latest opener, but whoever holds the earlier save can still resume it.
    `groups show` says so, the group is never due for reclaim (as the group's reclaim reads a save),
    and `groups close` refuses it without `--force` (it used to close it: only a save by the latest
    opener held it)."""
    s = Scope()
    group = s.group([echo("won"), event(s.event("later"))], wake="first")
    [_, won, saved] = await stack.turn(open_(group), next_(), save())
    assert ok(won)["position"] == 0 and ok(saved)
    await until(lambda: recorded_parked(stack, s.key()))
    resumer = Scope()
    reading = turn_in_background(stack, resumer, open_(group), next_(), next_())  # reopens; waits for rank 2
    invocation = await turn_id(stack, resumer)

    async def openers(*, ended: bool = False) -> bool:
        [group] = await asyncio.to_thread(
            read_groups, stack.server.admin_url, f" AND service_key = {quote(s.key())}"
        )
        return len(group.meta.openers) == 2 and (not ended or all(o.ended for o in group.meta.openers))

    await until(openers)  # the resumer reopened it
    await kill(stack, invocation)
    assert (await reading).status_code != 200
    await until(lambda: openers(ended=True))  # the group's watch heard it end: where a reclaim is set
    row = await until(lambda: listed(stack, s.key(), "orphaned"))
    assert row.reclaim_at is None
    view = await asyncio.to_thread(show_group, stack.server.admin_url, s.key())
    assert view is not None and view.reason.startswith("its latest opener failed or was killed"), view
    assert view.reason.endswith(
        "; an earlier opener saved its handle, which a continuation may still hold and resume"
    )
    refused = lash(stack, "groups", "close", s.key())
    assert refused.returncode == 4, refused.stdout
    assert "an opener saved its handle" in refused.stderr and "--force" in refused.stderr
    assert await listed(stack, s.key(), "orphaned")  # nothing was closed
    forced = lash(stack, "groups", "close", s.key(), "--force", "--cancel")
    assert forced.returncode == 0, forced.stderr
    await until(lambda: _nothing_left(stack, s.key()))


async def test_close_of_an_orphaned_group_cancels_its_loser_only_when_asked(stack: LocalStack) -> None:
    kept = await orphaned_group(stack)
    await until(lambda: listed(stack, kept.key(), "orphaned"))
    closed = lash(stack, "groups", "close", kept.key(), "--json")
    assert closed.returncode == 0, closed.stderr
    answer = json.loads(closed.stdout)
    running = answer.pop("running")
    assert answer | {"group_key": ""} == {
        "group_key": "",
        "closed": True,
        "was": "orphaned",
        "disposition": "run_to_completion",
        "cancelled": 0,
        "pumped": False,
        "pumps": [],  # a narrow group: its children run by themselves
    }
    # The close names the child it leaves running, with the invocation an operator can cancel.
    assert [(c["position"], c["replay_key"]) for c in running] == [(1, f"{kept.key()}/c1")]
    assert running[0]["invocation_id"].startswith("inv_") and running[0]["status"] != "completed"
    assert not await state_rows(stack, kept.key())
    # RunToCompletion: the loser runs on (it waits for its event), released of its group; the
    # group's watch of it ends with the close, which cancels it.

    async def only_the_loser() -> list[dict[str, Any]] | None:
        rows = await unfinished(stack, kept.key())
        return rows if len(rows) == 1 else None

    [loser] = await until(only_the_loser)
    assert "LashChild" in loser["target"]

    cancelled = await orphaned_group(stack)
    await until(lambda: listed(stack, cancelled.key(), "orphaned"))
    human = lash(stack, "groups", "close", cancelled.key(), "--cancel")
    assert human.returncode == 0, human.stderr
    assert "it was orphaned" in human.stdout and "1 cancel(s) sent, one per child" in human.stdout
    assert "still run" not in human.stdout  # cancelled with the close: none is left running
    await until(lambda: _nothing_left(stack, cancelled.key()))
    await stack.emit(kept.event("never"), "late")  # lets the first group's loser end too
    await until(lambda: _nothing_left(stack, kept.key()))


async def test_a_bounded_groups_children_yet_to_start_are_shown_waiting_and_run_after_a_close(
    stack: LocalStack,
) -> None:
    s = Scope()
    first, second = s.event("first"), s.event("second")
    group = s.group([echo("won"), event(first), event(second)], wake="first", max_in_flight=1)
    [_, won, saved] = await stack.turn(open_(group), next_(), save())
    assert ok(won)["position"] == 0 and ok(saved)

    async def started() -> GroupView | None:  # the first event took the slot the echo freed
        view = await asyncio.to_thread(show_group, stack.server.admin_url, s.key())
        return view if view is not None and view.children[1].invocation_id is not None else None

    view = await until(started)
    assert (view.children[2].invocation_id, view.children[2].status) == (None, "waiting")
    closed = lash(stack, "groups", "close", s.key(), "--force", "--json")
    assert closed.returncode == 0, closed.stderr
    running = json.loads(closed.stdout)["running"]
    assert [(c["position"], c["status"] == "waiting") for c in running] == [(1, False), (2, True)]
    # The pump that starts the child still waiting, by its id: the lever a waiting child has.
    assert json.loads(closed.stdout)["pumps"] == [p.invocation_id for p in view.pumps], closed.stdout
    assert [p.handler for p in view.pumps] == ["run2"], view.pumps
    await stack.emit(first, 1)  # its slot frees: the child still waiting starts, though closed
    child = (
        "SELECT id FROM sys_invocation WHERE target_service_name = 'LashChild' "
        f"AND target_service_key = {quote(s.key() + '/c2')}"
    )
    await invocation_id(stack, child)
    await stack.emit(second, 2)
    await until(lambda: _nothing_left(stack, s.key()))


async def test_close_told_the_admin_api_alone_reaches_the_ingress_it_advertises(
    stack: LocalStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`groups close` given no ingress (no flag, neither variable) sends its close to the ingress the
    admin API advertises (`/version`'s `ingress_endpoint`, as `restate whoami` shows it), where it
    tried `http://127.0.0.1:8080` and could not reach it: an operator given the admin API alone."""
    for name in ("RESTATE_INGRESS_URL", "LASH_INGRESS_URL"):
        monkeypatch.delenv(name, raising=False)
    s, opener = await open_group(stack)
    admin = ["--admin-url", stack.server.admin_url]
    closed = run_main(["groups", "close", s.key(), "--force", "--cancel", *admin])
    assert closed.returncode == 0 and "closed" in closed.stdout, closed
    await opener  # its read ends: the group it waited on was closed under it
    await until(lambda: _nothing_left(stack, s.key()))


async def test_close_of_an_open_group_needs_force_and_ends_its_openers_read(stack: LocalStack) -> None:
    s, opener = await open_group(stack)
    refused = lash(stack, "groups", "close", s.key())
    assert refused.returncode == 4 and "open" in refused.stderr
    forced = lash(stack, "groups", "close", s.key(), "--force", "--cancel")
    assert forced.returncode == 0, forced.stderr
    answer = await opener
    assert answer.status_code == 200
    [_, _, waited] = answer.json()
    assert waited["error"]["code"] == "group_not_open"  # its read was ended by the close
    await until(lambda: _nothing_left(stack, s.key()))


async def test_a_group_whose_record_names_no_invocation_as_an_opener_is_listed_shown_and_closed(
    stack: LocalStack,
) -> None:
    """Restate refuses a whole query naming a text it cannot parse as an invocation id (a 500): a
    group whose record names such an opener (written by hand, or by a forged open) is still listed,
    shown and closed, the opener read as one Restate no longer knows."""
    s, opener = await open_group(stack)
    # Not an id at all, and one shaped as an id whose partition key does not fit a u64.
    await _add_openers(
        stack, s.key(), [{"caller": "forged", "ended": True}, {"caller": "inv_1" + "Z" * 33, "ended": True}]
    )
    shown = lash(stack, "groups", "show", s.key())
    assert shown.returncode == 0, shown.stderr
    assert "forged" in shown.stdout
    listing = lash(stack, "groups", "list", "--json")
    assert listing.returncode == 0, listing.stderr
    assert s.key() in listing.stdout
    closed = lash(stack, "groups", "close", s.key(), "--force", "--cancel")
    assert closed.returncode == 0, closed.stderr
    assert (await opener).status_code == 200
    await until(lambda: _nothing_left(stack, s.key()))


def _id(partition_key: int, uuid: int) -> str:
    """An invocation id as Restate writes one: fixed-width base62 of ``[0-9a-zA-Z]``."""
    alphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

    def digits(n: int, width: int) -> str:
        out = ""
        while n:
            n, d = divmod(n, 62)
            out = alphabet[d] + out
        return out.rjust(width, "0")

    return "inv_1" + digits(partition_key, 11) + digits(uuid, 22)


@pytest.mark.parametrize(
    ("text", "parses"),
    [
        ("inv_1a2BOrwcjgcg6dbAJ72zc5qRGGw69ktrXY", True),  # one Restate made
        (_id(0, 0), True),
        (_id(2**64 - 1, 2**128 - 1), True),  # the widest Restate's query took (restate-server 1.7.12)
        (_id(2**64, 0), False),  # a partition key past a u64: Restate's query refused it
        (_id(0, 2**128), False),  # a UUID past a u128: refused as well
        ("inv_2a2BOrwcjgcg6dbAJ72zc5qRGGw69ktrXY", False),  # another id scheme
        ("inv_1a2BOrwcjgcg6dbAJ72zc5qRGGw69ktrX", False),  # short
        ("inv_1a2BOrwcjgcg6dbAJ72zc5qRGGw69ktr-Y", False),
        ("forged", False),
    ],
)
def test_an_invocation_id_is_told_as_restates_query_parses_it(text: str, parses: bool) -> None:
    assert is_invocation_id(text) is parses


def test_an_awakeable_names_the_invocation_that_made_it() -> None:
    """An awakeable's id carries its invocation's: the pair a restate-server 1.7.12 gave (a handler
    returned its own id and an awakeable it made); none for what is no awakeable's id."""
    made = "sign_1aN91QMQ34ETjEseFdAjQXO3la30A9F5tAAAAEQ"
    assert awakeable_invocation(made) == "inv_15UCIIYfDZtS3knyyqLHhsbAhjR8OeXkhJ"
    assert is_invocation_id(awakeable_invocation(made) or "")
    cancel = "sign_1" + base64.urlsafe_b64encode(bytes(24) + (1).to_bytes(4, "big")).decode().rstrip("=")
    assert [awakeable_invocation(text) for text in ("sign_1nowhere", cancel, "inv_1x")] == [None] * 3


async def test_rollback_check_leaves_out_the_waiter_of_an_event_child_that_ended(stack: LocalStack) -> None:
    """An event child killed while it waits leaves its subscription (its `waiter:` entry: nothing of
    it runs to take it back). Nobody waits on it, so a rollback is not held up by it, and
    `rollback-check` does not list it (it said a child waits, and that clearing the event, which
    keeps its waiters, would help); a child still waiting is listed."""
    s = Scope()
    killed_on, kept_on = s.event("killed"), s.event("kept")
    group = s.group([event(killed_on), event(kept_on)], wake="first")
    opener = turn_in_background(stack, s, open_(group), next_())
    subscribed = (
        "SELECT service_key FROM state WHERE service_name = 'LashSignal' AND starts_with(key, 'waiter:') "
        f"AND service_key IN ({quote(killed_on)}, {quote(kept_on)})"
    )

    async def both_wait() -> bool:
        return len(await asyncio.to_thread(sql, stack.server.admin_url, subscribed)) == 2

    await until(both_wait)
    child = (
        "SELECT id FROM sys_invocation WHERE target_service_name = 'LashChild' "
        f"AND target_service_key = {quote(s.key() + '/c0')}"
    )
    await kill(stack, await invocation_id(stack, child))
    [_, ranked] = json.loads((await opener).text)  # the killed child settles first, as killed
    assert ok(ranked)["outcome"]["code"] == "409", ranked

    async def waiters_listed() -> set[str] | None:
        blockers = await asyncio.to_thread(rollback_blockers, stack.server.admin_url)
        found = {b.where for b in blockers if b.kind == "waiter"} & {killed_on, kept_on}
        return found if killed_on not in found else None

    assert await until(waiters_listed) == {kept_on}
    left = await asyncio.to_thread(sql, stack.server.admin_url, subscribed)
    assert {row["service_key"] for row in left} == {killed_on, kept_on}  # the killed one's entry is left
    closed = lash(stack, "groups", "close", s.key(), "--force", "--cancel")  # the kept child cancelled
    assert closed.returncode == 0, closed.stderr
    await until(lambda: _nothing_left(stack, s.key()))
    await stack.emit(killed_on, 1)  # answers nobody: the entry left goes

    async def gone() -> bool:
        return not await asyncio.to_thread(sql, stack.server.admin_url, subscribed)

    await until(gone)


async def _add_openers(stack: LocalStack, key: str, openers: list[dict[str, Any]]) -> None:
    """Add ``openers`` to the group's record through the admin API, as an operator could write it:
    each replacement names the version of the state it read, and one Restate dropped because the
    group wrote meanwhile is made again from what it holds now."""
    query = "SELECT key, value_utf8 FROM state WHERE service_name = 'LashGroup' "
    query += f"AND service_key = {quote(key)}"
    for _ in range(20):
        rows = await asyncio.to_thread(sql, stack.server.admin_url, query)
        state = {row["key"]: row["value_utf8"] for row in rows}
        version = state_version({k.encode(): v.encode() for k, v in state.items()})
        meta = json.loads(state["meta"])
        wanted = len(meta["openers"]) + len(openers)
        meta["openers"] += openers
        state["meta"] = json.dumps(meta)
        body = {
            "object_key": key,
            "version": version,
            "new_state": {k: list(v.encode()) for k, v in state.items()},
        }
        async with httpx.AsyncClient(verify=tls(), timeout=30) as client:
            written = await client.post(f"{stack.server.admin_url}/services/LashGroup/state", json=body)
        assert written.status_code == 202, written.text
        try:
            await until(functools.partial(_has_openers, stack, key, wanted), within=3)
            return
        except TimeoutError:
            continue  # the group wrote between the read and the replacement: read it again
    raise AssertionError(f"{key}'s record never took the openers")


async def _has_openers(stack: LocalStack, key: str, count: int) -> bool:
    return len((await recorded_meta(stack, key))["openers"]) == count


async def _returns_without_saving(
    stack: LocalStack, s: Scope, with_watch: Callable[[str], Awaitable[None]]
) -> None:
    """A turn that opens ``s``'s group (rank 1 read, a child still waiting on `later`), then waits on
    another group's `go` while ``with_watch`` is given the id of the group's watch of it, then returns
    normally without saving a handle."""
    group = s.group([echo("won"), event(s.event("later"))], wake="first")
    go = s.group([event(s.event("go"))], batch="go")
    turn = turn_in_background(stack, s, open_(group), next_(), open_(go), next_())
    watch = (
        "SELECT id FROM sys_invocation WHERE target_service_name = 'LashGroup' "
        f"AND target_service_key = {quote(s.key())} AND target_handler_name = 'watch_runs'"
    )
    await with_watch(await invocation_id(stack, watch))
    await stack.emit(s.event("go"), "go")
    answered = await turn
    assert answered.status_code == 200 and ok(answered.json()[1])["position"] == 0


async def test_a_group_with_no_saved_handle_is_classified_by_what_restate_remembers(
    stack: LocalStack,
) -> None:
    """A group opened without a save, whose own record of how its opener ended is missing (as for a
    group an earlier release opened, or one whose watch an operator killed): parked while Restate
    remembers that its opener returned normally; once that is purged, orphaned, its end not known."""
    s = Scope()

    async def kill_the_watch(found: str) -> None:  # the opener still waits on `go`: nothing reported
        await kill(stack, found)

    await _returns_without_saving(stack, s, kill_the_watch)
    row = await until(lambda: listed(stack, s.key(), "parked"))
    assert row.state == "parked"
    view = await asyncio.to_thread(show_group, stack.server.admin_url, s.key())
    assert view is not None and "Restate still remembers" in view.reason
    [opener] = view.openers
    await purge(stack, opener.invocation_id)
    row = await until(lambda: listed(stack, s.key(), "orphaned"))
    view = await asyncio.to_thread(show_group, stack.server.admin_url, s.key())
    assert view is not None and "not known" in view.reason
    await stack.emit(s.event("later"), "late")
    assert lash(stack, "groups", "close", s.key()).returncode == 0
    await until(lambda: _nothing_left(stack, s.key()))


async def test_a_group_with_no_saved_handle_is_parked_by_its_record_of_a_normal_return(
    stack: LocalStack,
) -> None:
    """The counterpart of the test above: the group's own watch of its opener reports a normal return,
    so the group is parked by its record of it, and stays parked once Restate has forgotten the opener."""
    s = Scope()

    async def leave_it(found: str) -> None:  # the watch of the opener has started
        return None

    await _returns_without_saving(stack, s, leave_it)
    recorded = (
        "its latest opener returned normally, saving no handle with the group: close it if nothing holds one"
    )

    async def reason() -> str | None:
        view = await asyncio.to_thread(show_group, stack.server.admin_url, s.key())
        return view.reason if view is not None and view.reason == recorded else None

    await until(reason)
    view = await asyncio.to_thread(show_group, stack.server.admin_url, s.key())
    assert view is not None
    [opener] = view.openers
    await purge(stack, opener.invocation_id)
    assert await reason() == recorded  # its own record, whatever Restate has forgotten
    await stack.emit(s.event("later"), "late")
    assert lash(stack, "groups", "close", s.key(), "--force").returncode == 0  # parked: forced
    await until(lambda: _nothing_left(stack, s.key()))


async def test_a_cancel_group_is_parked_or_orphaned_by_its_own_watch(stack: LocalStack) -> None:
    """A `Cancel` group watches its openers anyway: no second watch on save, and the same answers."""
    parked = await parked_group(stack, event(Scope().event("later")), disposition="cancel")
    view = await recorded_parked(stack, parked.key())
    assert view is not None
    holds = (
        "SELECT id FROM sys_invocation WHERE target_service_name = 'LashGroup' "
        f"AND target_service_key = {quote(parked.key())} AND target_handler_name = 'hold'"
    )
    assert await asyncio.to_thread(sql, stack.server.admin_url, holds) == []
    await purge(stack, view.openers[0].invocation_id)
    assert await recorded_parked(stack, parked.key())

    orphaned = await orphaned_group(stack, disposition="cancel")
    await until(lambda: listed(stack, orphaned.key(), "orphaned"))

    async def watched() -> GroupView | None:
        # Orphaned at once by what Restate remembers of the killed opener; by the group's own record
        # once its watch has reported (and the declared Cancel applied).
        view = await asyncio.to_thread(show_group, stack.server.admin_url, orphaned.key())
        return view if view is not None and "cancelled" in view.reason else None

    gone = await until(watched)
    await purge(stack, gone.openers[0].invocation_id)
    assert await listed(stack, orphaned.key(), "orphaned")
    for s in (parked, orphaned):
        assert lash(stack, "groups", "close", s.key(), "--force").returncode == 0
        await until(functools.partial(_nothing_left, stack, s.key()))


@pytest.mark.parametrize("entry", ["race", "block"])
@pytest.mark.parametrize("disposition", ["cancel", "run_to_completion"])
async def test_a_caller_cancelled_inside_a_combinator_or_a_block_closes_its_group(
    stack: LocalStack, entry: str, disposition: str
) -> None:
    """`restate invocations cancel` of a caller waiting inside `lash.race` (or an `async with` block):
    Restate raises the cancel in the handler, and the race closes its group as it ends, as the block
    does: nothing is listed, and a `Cancel` group's children are cancelled with the close."""
    s = Scope()
    children = [event(s.event("never")), event(s.event("nor this"))]
    step = (
        front("race", s.key(), children, losers=disposition)
        if entry == "race"
        else iterate(s.group(children, wake="all", disposition=disposition))
    )
    caller = turn_in_background(stack, s, step)
    invocation = await turn_id(stack, s)
    await until(lambda: listed(stack, s.key(), "open"))
    async with httpx.AsyncClient(verify=tls(), timeout=30) as client:
        cancelled = await client.patch(f"{stack.server.admin_url}/invocations/{invocation}/cancel")
    assert cancelled.status_code in (200, 202), cancelled.text
    assert (await caller).status_code == 409  # the cancel, not something the close raised

    async def closed() -> bool:
        return not await state_rows(stack, s.key())  # an orphan keeps its record until reclaimed

    await until(closed)
    if disposition == "cancel":
        await until(functools.partial(_nothing_left, stack, s.key()))


@pytest.mark.parametrize("entry", ["combinator", "block"])
async def test_a_resumer_cancelled_inside_a_combinator_or_a_block_leaves_the_saved_group(
    stack: LocalStack, entry: str
) -> None:
    """A resumer cancelled while it waits inside `combine(..., handle=saved)` (or a block resumed
    from the cursor) does not close the group: the cursor it resumed was saved, and whoever else
    holds it resumes the group and reads every rank."""
    s = Scope()
    group = s.group([echo("first"), event(s.event("later"))])
    [_, _, saved] = await stack.turn(open_(group), next_(), save())
    handle = ok(saved)
    resuming = (
        [combine("all_settled", group, handle=handle)]
        if entry == "combinator"
        else [use(handle), iterate(group, resume=True)]
    )
    r = Scope()
    resumer = turn_in_background(stack, r, *resuming)
    invocation = await turn_id(stack, r)

    async def reopened() -> GroupView | None:
        view = await asyncio.to_thread(show_group, stack.server.admin_url, s.key())
        return view if view is not None and len(view.openers) == 2 else None

    await until(reopened)
    async with httpx.AsyncClient(verify=tls(), timeout=30) as client:
        cancelled = await client.patch(f"{stack.server.admin_url}/invocations/{invocation}/cancel")
    assert cancelled.status_code in (200, 202), cancelled.text
    assert (await resumer).status_code == 409
    assert await state_rows(stack, s.key())  # the group is kept for the saved cursor
    await stack.emit(s.event("later"), "now")
    [read] = await stack.turn(combine("all_settled", group, handle=handle))
    assert [o["value"] for o in ok(read)["value"]] == ["first", "now"], read


async def test_a_forged_close_without_the_incarnation_is_refused(stack: LocalStack) -> None:
    """The public handler closes only for someone who read the group's incarnation via the admin API."""
    s, opener = await open_group(stack)
    forged = {"incarnation": "00000000-0000-0000-0000-000000000000", "openers": 1, "cancel": True}
    answer = await stack.call(f"LashGroup/{s.key()}/operator_close", forged)
    assert answer["closed"] is False and "closed and opened again" in answer["refused"]
    with pytest.raises(StackError):  # ends at once (a terminal failure), never retried on the group
        await stack.call(f"LashGroup/{s.key()}/operator_close", {"settle": [0]})
    assert await listed(stack, s.key(), "open")
    assert lash(stack, "groups", "close", s.key(), "--force", "--cancel").returncode == 0
    await opener
    await until(lambda: _nothing_left(stack, s.key()))


async def test_an_operator_close_decided_before_a_reopen_is_refused(stack: LocalStack) -> None:
    """The operator's close names the incarnation and how many openers they saw: a group reopened
    since they looked is refused, to be looked at again, and stays open."""
    s, opener = await open_group(stack)
    meta = await recorded_meta(stack, s.key())
    seen = {"incarnation": meta["incarnation"], "openers": len(meta["openers"]) - 1, "cancel": True}
    answer = await stack.call(f"LashGroup/{s.key()}/operator_close", seen)
    assert answer["closed"] is False and "reopened since" in answer["refused"]
    assert await listed(stack, s.key(), "open")
    assert lash(stack, "groups", "close", s.key(), "--force", "--cancel").returncode == 0
    await opener
    await until(lambda: _nothing_left(stack, s.key()))
    # Closed since it was read: the group is not open, which is said as such, not refused.
    gone = await stack.call(f"LashGroup/{s.key()}/operator_close", seen)
    assert gone["closed"] is False and gone.get("refused") is None, gone


async def test_parts_an_opener_left_staged_are_listed_and_released_and_a_groups_own_are_not(
    stack: LocalStack,
) -> None:
    """An open in parts whose opener is killed after staging and before its open leaves its parts
    staged with no group to read them; a pump killed as its group's close overtook the group's
    report of the kill keeps the outcomes it stored, and nothing releases them; so does a completed
    pump whose group's record an operator deleted (`restate state clear`). `groups staged` lists
    each (here written through the admin API as the kill or the clear leaves it) and `--release`
    frees them; what a pump holds under the incarnation of a recorded group is that group's own (its
    pump runs the part, and its reads serve the outcomes) and is never listed."""
    s, pumped, gone = Scope(), Scope(), Scope()
    [opened] = await stack.turn(open_(s.group([echo("a"), event(s.event("never"))])))
    incarnation = (await recorded_meta(stack, s.key()))["incarnation"]
    own, further = f"{incarnation}:{s.key()}", f"{incarnation}.1:{s.key()}"
    left = f"p-{uuid.uuid4()}:{s.key()}"
    # A pumped group whose pump was killed, then closed: what that pump kept is released by the close
    # when the group heard of the kill first, and left, as written below, when the close overtook it.
    await stack.turn(open_(pumped.group([echo("a"), event(pumped.event("never")), echo("b")])), next_())
    kept = f"{(await recorded_meta(stack, pumped.key()))['incarnation']}:{pumped.key()}"
    runs = f"SELECT id FROM sys_invocation WHERE target_service_key = {quote(kept)}"
    await kill(stack, await invocation_id(stack, runs))
    closed = lash(stack, "groups", "close", pumped.key(), "--force", "--cancel")
    assert closed.returncode == 0, closed.stderr
    assert "1 cancel(s) sent to its pump and re-dispatched runs, which cancel every child" in closed.stdout
    await until(lambda: _nothing_left(stack, pumped.key()))
    for key in (own, left):
        await _write_state(stack, key, {"staged": list(b"[]")})
    await _write_state(stack, kept, {"o0": list(b'{"type":"ok","value":"a"}'), "o1": list(b"{}")})
    await _write_state(stack, further, {"o256": list(b"{}")})  # the open group's further slice
    # A completed pump of a parked group (its note that it ran, its outcomes) whose record was cleared.
    cleared = f"{uuid.uuid4()}-s:{gone.key()}"
    await _write_state(stack, cleared, {"ran": list(b"1"), "o0": list(b'{"type":"ok","value":"a"}')})
    pumps = (
        "SELECT DISTINCT service_key FROM state WHERE service_name = 'LashPump' "
        f"AND (ends_with(service_key, {quote(':' + s.key())}) "
        f"OR service_key IN ({quote(kept)}, {quote(cleared)}))"
    )

    async def rows() -> list[str]:
        return sorted(r["service_key"] for r in await asyncio.to_thread(sql, stack.server.admin_url, pumps))

    await until(lambda: _equal(rows(), sorted([own, left, kept, further, cleared])))
    listed_ = lash(stack, "groups", "staged", "--json")
    assert listed_.returncode == 0, listed_.stderr
    keys = (s.key(), pumped.key(), gone.key())  # the stack is the module's: other tests' groups are not ours
    ours = [(p["pump_key"], p["holds"]) for p in json.loads(listed_.stdout) if p.get("group_key") in keys]
    assert sorted(ours) == sorted([(left, "staged"), (kept, "outcomes"), (cleared, "outcomes")])
    # On a shared cluster: one group's alone, listed and released.
    narrowed = lash(stack, "groups", "staged", "--json", "--key", pumped.key())
    assert [(p["pump_key"], p["holds"]) for p in json.loads(narrowed.stdout)] == [(kept, "outcomes")]
    released = lash(stack, "groups", "staged", "--release", "--key", s.key())
    assert released.returncode == 0 and f"released {left}" in released.stdout, released.stdout
    assert kept not in released.stdout and cleared not in released.stdout, released.stdout
    await until(lambda: _equal(rows(), sorted([own, kept, further, cleared])))
    released = lash(stack, "groups", "staged", "--release")
    assert released.returncode == 0 and left not in released.stdout, released.stdout
    assert f"released {kept} (group {pumped.key()}; the outcomes its pump kept" in released.stdout
    await until(lambda: _equal(rows(), sorted([own, further])))
    assert "no parts left staged, and no outcomes" in lash(stack, "groups", "staged").stdout
    assert f"a child) of {s.key()}" in lash(stack, "groups", "staged", "--key", s.key()).stdout
    for key in (own, further):
        await _write_state(stack, key, {})
    assert lash(stack, "groups", "close", s.key(), "--force", "--cancel").returncode == 0
    assert "ok" in opened


async def _equal(found: Awaitable[list[str]], expected: list[str]) -> bool:
    return await found == expected


async def _write_state(stack: LocalStack, pump_key: str, state: dict[str, list[int]]) -> None:
    """Replace a pump key's state through the admin API, as an operator (or a test) can."""
    async with httpx.AsyncClient(verify=tls(), timeout=30) as client:
        written = await client.post(
            f"{stack.server.admin_url}/services/LashPump/state",
            json={"object_key": pump_key, "new_state": state},
        )
    assert written.status_code == 202, written.text


async def test_the_front_doors_save_parks_the_group(tmp_path_factory: pytest.TempPathFactory) -> None:
    """`Group.save()` in an application's handler records the park, beyond Restate's retention; the
    watch of a `Cancel` group's opener records it too, whatever the opener answered."""
    app = LocalStack.single(
        tmp_path_factory.mktemp("front"), module="tests.engine.keys_app", endpoint_args=()
    )
    with app.start():
        handle = await app.call("Keys/park", "v")
        key = json.loads(handle)["group_key"]
        view = await until(lambda: recorded_parked(app, key))
        await purge(app, view.openers[0].invocation_id)
        assert await recorded_parked(app, key)
        closed = lash(app, "groups", "close", key, "--force", "--cancel", "--json")
        assert json.loads(closed.stdout)["cancelled"] == 1, closed.stderr  # the hour-long sleep
        await until(lambda: _nothing_left(app, key))
        # A `Cancel` group's watch of its opener records the normal end of one that answered text.
        async with httpx.AsyncClient(verify=tls(), timeout=60) as client:
            answered = await client.post(f"{app.ingress_url}/Keys/park_text", json="v")
        assert answered.status_code == 200 and answered.text.startswith("parked "), answered.text
        key = json.loads(answered.text.removeprefix("parked "))["group_key"]
        await until(lambda: recorded_parked(app, key))
        closed = lash(app, "groups", "close", key, "--force", "--json")
        assert json.loads(closed.stdout)["cancelled"] == 1, closed.stderr


async def test_a_savers_watch_ends_when_it_closes_the_group(stack: LocalStack) -> None:
    """A caller that saves a handle, then closes the group and lives on, leaves no watch attached."""
    s = Scope()
    group = s.group([echo("won"), event(s.event("later"))], wake="first")
    blocker = s.group([event(s.event("never"))], batch="blocker")
    holds = (
        "SELECT status FROM sys_invocation WHERE target_service_name = 'LashGroup' "
        f"AND target_service_key = {quote(s.key())} AND target_handler_name = 'hold'"
    )

    async def ended() -> bool:
        rows = await asyncio.to_thread(sql, stack.server.admin_url, holds)
        return bool(rows) and all(r["status"] == "completed" for r in rows)

    steps = [open_(group), next_(), save(), close("cancel"), open_(blocker), next_(cancel_after_ms=600_000)]
    caller = turn_in_background(stack, s, *steps)
    await until(ended)
    assert not caller.done()  # the close ended the watch, not the caller's end
    await stack.emit(s.event("never"), "now")  # the caller may end now
    answer = await caller
    assert answer.status_code == 200 and answer.json()[-1]["ok"]["outcome"]["value"] == "now", answer.text


async def _missed(stack: LocalStack, key: str) -> GroupView | None:
    view = await asyncio.to_thread(show_group, stack.server.admin_url, key)
    return view if view is not None and view.missed else None


async def test_a_child_that_missed_its_runner_is_shown_and_run_again_by_groups_redispatch(
    stack: LocalStack,
) -> None:
    """The endpoint loses the `count` tool while a child of it runs: `groups list` counts the child
    missed and `groups show` marks it. A re-dispatch while the endpoint still lacks the tool leaves it
    missed; once the tool is back, `groups redispatch --all` runs it again, and the caller reads its
    real outcome at its rank without a reopen, the side effect once."""
    s = Scope()
    name = f"{s.id}-slow"
    group = s.group([count(name, "slow", delay_ms=60_000, slow_once=True), echo("fast")])
    [opened] = await stack.turn(open_(group))
    await wait_tool_started(stack, name)

    await until(lambda: settled(stack, s.key(), 1))  # before the restart: a cut run ranks after the re-run
    none = lash(stack, "groups", "redispatch", s.key())  # nothing missed yet: it says so
    assert none.returncode == 0, none
    assert none.stdout == f"{s.key()}: nothing dispatched again: no child of it missed its runner\n"
    try:
        await asyncio.to_thread(stack.restart_endpoint, LASH_DEMO_TOOLS_OFF="count")
        view = await until(lambda: _missed(stack, s.key()))
        assert [c.position for c in view.children if c.missed] == [0] and view.missed == 1
        shown = lash(stack, "groups", "show", s.key())
        assert shown.returncode == 0 and f"groups redispatch {s.key()}" in shown.stdout, shown.stdout
        listing = lash(stack, "groups", "list", "--json")
        assert listing.returncode == 0, listing.stderr
        assert [g["missed"] for g in json.loads(listing.stdout) if g["group_key"] == s.key()] == [1]
        still = lash(stack, "groups", "redispatch", s.key(), "--json")
        assert still.returncode == 0, still.stderr
        expected = {"group_key": s.key(), "dispatched": 0, "unroutable": 1, "refused": None, "error": None}
        assert json.loads(still.stdout) == [expected]
    finally:
        await asyncio.to_thread(stack.restart_endpoint, LASH_DEMO_TOOLS_OFF="")
    again = lash(stack, "groups", "redispatch", "--all")
    assert again.returncode == 0 and f"{s.key()}: 1 child(ren) dispatched again" in again.stdout, again.stdout
    [_, fast, slow, closed] = await stack.turn(use(ok(opened)), next_(), next_(), close())
    assert ok(fast)["position"] == 1 and (ok(slow)["rank"], ok(slow)["position"]) == (2, 0)
    assert ok(slow)["outcome"] == {"type": "ok", "value": "slow"} and "error" not in closed
    assert stack.counts().count(name) == 1
    assert lash(stack, "groups", "redispatch").returncode == 2  # neither a key nor --all
    gone = lash(stack, "groups", "redispatch", s.key())  # closed: as `groups show` of it, exit 3
    assert gone.returncode == 3 and gone.stderr.strip().endswith(f"no open group {s.key()!r}"), gone


async def test_a_redispatch_of_a_bounded_groups_missed_children_keeps_its_bound(
    stack: LocalStack, tmp_path: Path
) -> None:
    """A group of `max_in_flight=1` whose three children all missed their runner (the endpoint lost
    the `count` and `blob` tools while the first ran; the next two then missed at their start).
    With `count` back, `groups redispatch` runs its two children again one at a time, as the group
    declared (while the first waits on its gate, its pump has called no other), and keeps the
    `blob` child missed; with `blob` back, a second re-dispatch runs it. The caller reads all three
    in that order, each run once to its end."""
    s = Scope()
    gate = tmp_path / "gate"
    names = [f"{s.id}-{i}" for i in range(2)]
    held = [tool("count", {"name": n, "value": n, "after": str(gate)}) for n in names]
    held.append(tool("blob", {"size": 3, "after": str(gate)}))
    [opened] = await stack.turn(open_(s.group(held, max_in_flight=1)))
    await until(lambda: _executes_since(stack, s.key(), set(), 1))  # the first runs, held by its gate
    try:
        await asyncio.to_thread(stack.restart_endpoint, LASH_DEMO_TOOLS_OFF="count,blob")
        await until(lambda: _missed_at(stack, s.key(), [0, 1, 2]))
        await asyncio.to_thread(stack.restart_endpoint, LASH_DEMO_TOOLS_OFF="blob")
        before = await _executes(stack, s.key())
        again = lash(stack, "groups", "redispatch", s.key(), "--json")
        assert again.returncode == 0, again.stderr
        assert [(r["dispatched"], r["unroutable"]) for r in json.loads(again.stdout)] == [(2, 1)]
        assert await _missed_at(stack, s.key(), [2])  # the child it could not route is still kept
        await until(lambda: _executes_since(stack, s.key(), before, 1))
        # The pump journals a batch's calls together: had it called more than one, they would be here.
        assert [row["key"] for row in await _executes_since(stack, s.key(), before, 1)] == [f"{s.key()}/c0"]
        gate.touch()
        await until(lambda: _ranked(stack, s.key(), 2))  # both ran to their end before the restart
    finally:
        await asyncio.to_thread(stack.restart_endpoint, LASH_DEMO_TOOLS_OFF="")
    last = lash(stack, "groups", "redispatch", s.key())
    assert last.returncode == 0 and "1 child(ren) dispatched again" in last.stdout, last.stdout
    [_, *read, closed] = await stack.turn(use(ok(opened)), next_(), next_(), next_(), close())
    assert [ok(r)["position"] for r in read] == [0, 1, 2] and "error" not in closed
    assert [ok(r)["outcome"]["value"] for r in read] == [*names, "xxx"]
    assert [line for line in stack.counts() if line in names] == names


async def _missed_at(stack: LocalStack, key: str, positions: list[int]) -> bool:
    view = await asyncio.to_thread(show_group, stack.server.admin_url, key)
    return view is not None and [c.position for c in view.children if c.missed] == positions


async def _ranked(stack: LocalStack, key: str, n: int) -> bool:
    view = await asyncio.to_thread(show_group, stack.server.admin_url, key)
    return view is not None and view.settled >= n


async def _executes(stack: LocalStack, key: str) -> set[str]:
    return {row["id"] for row in await _executes_since(stack, key, set(), 0)}


async def _executes_since(
    stack: LocalStack, key: str, before: set[str], at_least: int
) -> list[dict[str, Any]]:
    """The group's children's `LashChild/execute2` invocations not in ``before`` (by id), if at least
    ``at_least``; else none."""
    query = (
        "SELECT id, target_service_key AS key FROM sys_invocation WHERE target_service_name = 'LashChild' "
        f"AND target_handler_name = 'execute2' AND starts_with(target_service_key, {quote(key + '/')})"
    )
    rows = [r for r in await asyncio.to_thread(sql, stack.server.admin_url, query) if r["id"] not in before]
    return rows if len(rows) >= at_least else []


async def test_a_redispatch_of_a_group_closed_or_reopened_since_it_was_read_says_why(
    stack: LocalStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The operator's re-dispatch names the incarnation it read: a group closed since, or closed and
    opened again, dispatches nothing and says which (`refused`), and `groups redispatch` prints it,
    in text and in `--json`, rather than passing over the group in silence."""
    s = Scope()
    [opened] = await stack.turn(open_(s.group([echo("won"), event(s.event("never"))], wake="first")))
    meta = await recorded_meta(stack, s.key())
    api, ingress = admin_api(stack.server.admin_url), stack.server.ingress_url
    ask = functools.partial(operator_call, api, ingress, s.key(), GROUP_OPERATOR_REDISPATCH)
    assert ask(OperatorRedispatch(incarnation=meta["incarnation"])).refused is None  # nothing missed
    reopened = ask(OperatorRedispatch(incarnation="an-earlier-incarnation")).refused
    assert reopened == "the group was closed and opened again since"
    # The command's reading of the group, as it was before the close, with a child it kept as missed:
    # the close then overtakes the re-dispatch, a race staged here by the reading it is given.
    [read] = read_groups(stack.server.admin_url, f" AND service_key = {quote(s.key())}")
    monkeypatch.setattr(operator, "read_groups", lambda *_, **__: [dataclasses.replace(read, missed=[1])])
    [_, closed] = await stack.turn(use(ok(opened)), close())
    assert "error" not in closed
    printed = lash(stack, "groups", "redispatch", s.key())
    assert printed.returncode == 0, printed.stderr
    assert f"{s.key()}: nothing dispatched again: the group is not open" in printed.stdout, printed.stdout
    as_json = lash(stack, "groups", "redispatch", s.key(), "--json")
    expected = {
        "group_key": s.key(),
        "dispatched": 0,
        "unroutable": 0,
        "refused": "the group is not open",
        "error": None,
    }
    assert json.loads(as_json.stdout) == [expected], as_json.stdout


def test_closing_a_group_that_is_not_open_is_a_no_op(stack: LocalStack) -> None:
    missing = subprocess.run(
        [sys.executable, "-m", "lash_restate", "groups", "close", "nokey:group:b:0"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "RESTATE_ADMIN_URL": stack.server.admin_url},
    )
    assert missing.returncode == 0 and "not open" in missing.stdout  # nothing to close: no ingress needed


def test_a_paused_invocation_the_ingress_started_counts_on_no_child(monkeypatch: pytest.MonkeyPatch) -> None:
    """The admin API leaves out a paused invocation's `invoked_by_id` when the ingress started it (an
    application's request, or an operator's): it is on no child's path, and the listing goes on."""
    import lash_restate.inspection._paused as inspection

    paused = [{"id": "inv_1turn", "target_service_name": "LashTurn", "target_service_key": None}]
    monkeypatch.setattr(inspection, "paused_rows", lambda admin, where="": paused)
    monkeypatch.setattr(inspection, "rows_in", lambda *_: pytest.fail("no invoker to look up"))
    assert inspection.paused_paths("http://127.0.0.1:1") == {}


UUID = "0b6c2f4e-3d1a-4c8e-9f70-2a5b8e1d4c37"


@pytest.mark.parametrize(
    ("row", "replay_key"),
    [
        # The callee of a call child its group's pump called: the replay key before the incarnation.
        (
            {"invoked_by_service_name": "LashPump", "idempotency_key": f"k:group:b:0/c1@{UUID}"},
            "k:group:b:0/c1",
        ),
        # A wide group's incarnation is paged (`p-`): its callees are children too.
        (
            {"invoked_by_service_name": "LashPump", "idempotency_key": f"k:group:b:0/c9@p-{UUID}"},
            "k:group:b:0/c9",
        ),
        # A group that records saves ends its incarnation in `-s` (paged or not).
        (
            {"invoked_by_service_name": "LashPump", "idempotency_key": f"k:group:b:0/c2@{UUID}-s"},
            "k:group:b:0/c2",
        ),
        (
            {"invoked_by_service_name": "LashPump", "idempotency_key": f"k:group:b:0/c3@p-{UUID}-s"},
            "k:group:b:0/c3",
        ),
        # An application's own invocation whose key has the same shape is not a child of any group.
        ({"invoked_by_service_name": "Checkout", "idempotency_key": f"order-7@{UUID}"}, None),
        (
            {"invoked_by_service_name": "LashPump", "idempotency_key": "k:group:b:0/c1@not-an-incarnation"},
            None,
        ),
        ({"invoked_by_service_name": "LashPump"}, None),
    ],
)
def test_a_call_childs_callee_is_told_by_its_pump_and_its_key(
    row: dict[str, str], replay_key: str | None
) -> None:
    assert callee_of(row) == replay_key


def test_paused_children_are_counted_by_the_group_whose_fence_names_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`groups list`'s paused counts: each paused child's replay key is found in its group's fence,
    many keys to one scan of the fences (a scan per key made the listing a crawl in an outage); a
    child counts once however many of its runs are paused, as `groups show` marks it, and only for
    a run since its group's open: one a closed namesake under the key left paused is not its."""
    fences = {f"s:group:{g}:0": [f"{g}/c{i}" for i in range(3)] for g in ("a", "b")}
    opened = datetime.datetime(2026, 12, 6, 12, 0, tzinfo=datetime.UTC)
    since, before = "2026-12-06T12:00:01.000Z", "2026-12-06T11:00:00.000Z"  # the server's ISO times
    paused = [
        ("a/c0", since),
        ("a/c0", since),  # a second paused run of one child: the child counts once
        ("a/c1", before),  # a namesake's, paused an hour before this group was opened
        ("a/c2", since),
        ("b/c1", since),
    ]
    scans: list[str] = []

    def answer(admin: Any, query: str, timeout: float = 10) -> list[dict[str, Any]]:
        if "status = 'paused'" in query:
            return [
                {
                    "id": f"inv_{n}",
                    "target_service_name": "LashChild",
                    "target_service_key": key,
                    "created_at": at,
                }
                for n, (key, at) in enumerate(paused)
            ]
        scans.append(query)
        needles = re.findall(r"strpos\(value_utf8, '([^']*)'\)", query)
        return [
            {"service_key": group, "value_utf8": json.dumps(_shape(keys))}
            for group, keys in fences.items()
            if any(needle in json.dumps(_shape(keys)) for needle in needles)
        ]

    monkeypatch.setattr(inspection_paused, "sql", answer)
    groups = {f"s:group:{g}:0": ("inc", int(opened.timestamp() * 1000)) for g in ("a", "b")}
    assert inspection_paused.paused_by_group("admin", groups) == {"s:group:a:0": 2, "s:group:b:0": 1}
    assert len(scans) == 1


def _shape(keys: list[str]) -> dict[str, Any]:
    return {
        "child_count": len(keys),
        "wake": "all",
        "disposition": "run_to_completion",
        "replay_keys": keys,
        "hashes": ["h"] * len(keys),
    }


def test_a_paused_call_a_call_childs_callee_made_is_on_that_childs_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A call child's callee (called by the group's pump under `{replay key}@{incarnation}`) that made
    a call Restate paused: the pause counts for that child, in `groups list` as in `groups show`
    (the listing looked for the caller among `LashChild` invocations only)."""
    callee = {
        "id": "inv_callee",
        "target_service_name": "Shop",
        "target_service_key": "",
        "invoked_by_service_name": "LashPump",
        "idempotency_key": "s:group:a:0/c1@0b6c2f4e-3d1a-4c8e-9f70-2a5b8e1d4c37",
    }

    def answer(admin: Any, query: str, timeout: float = 10) -> list[dict[str, Any]]:
        if "status = 'paused'" in query:
            called = {"id": "inv_paused", "target_service_name": "Stock", "invoked_by_id": "inv_callee"}
            return [called]
        return [callee] if "'inv_callee'" in query else []

    monkeypatch.setattr(inspection_paused, "sql", answer)
    monkeypatch.setattr(inspection_sql, "sql", answer)
    assert inspection_paused.paused_paths("admin") == {"s:group:a:0/c1": [None]}  # one, of no known time


@pytest.mark.parametrize("failed", [False, True], ids=["returned", "failed"])
def test_a_saver_whose_end_the_openers_watch_heard_first_is_shown_as_having_saved(failed: bool) -> None:
    """Two invocations tell the group how an opener that saved its handle ended: its saver's hold
    (kept with the group's opener ends) and the watch of its openers (on its `Opener`), in either
    order. Heard by the watch alone so far, the group is shown as its saver left it, not as one
    whose opener saved nothing (a delay before the hold's report runs that order)."""
    from lash_restate.contract import GroupWakePolicy, LoserPolicy
    from lash_restate.engine.wire._records import GroupMeta, Opener
    from lash_restate.inspection import _groups

    meta = GroupMeta(
        child_count=2,
        wake=GroupWakePolicy.FIRST,
        disposition=LoserPolicy.RUN_TO_COMPLETION,
        incarnation="inc-s",
        openers=[Opener(caller="c-saver", ended=True, failed=failed)],
    )
    heard_by_watch = _groups.StoredGroup("g", meta, {}, savers=frozenset({"c-saver"}))
    heard_by_hold = _groups.StoredGroup("g", meta, {"c-saver": failed}, savers=frozenset({"c-saver"}))
    assert _groups.classify(heard_by_watch, {}) == _groups.classify(heard_by_hold, {})
    state, why = _groups.classify(heard_by_watch, {})
    assert (state, "saved its handle" in why) == ("orphaned" if failed else "parked", True)


def test_an_openers_end_says_killed_or_cancelled_while_restate_remembers_which() -> None:
    """`groups show` named a killed or cancelled opener `failed`, as the group records only that it
    failed: where Restate still remembers the invocation (`[409] killed`, `[409] cancelled`), it
    says which; a handler's own failure, or one Restate forgot, stays `failed`."""
    from lash_restate.contract import GroupWakePolicy, LoserPolicy
    from lash_restate.engine.wire._records import GroupMeta, Opener
    from lash_restate.inspection import _groups

    callers = ["killed", "cancelled", "raised", "forgotten", "returned", "unheard"]
    meta = GroupMeta(
        child_count=2,
        wake=GroupWakePolicy.FIRST,
        disposition=LoserPolicy.RUN_TO_COMPLETION,
        incarnation="inc-s",
        openers=[Opener(caller=c, ended=c != "unheard", failed=c != "returned") for c in callers],
    )
    group = _groups.StoredGroup("g", meta, {})
    ended = {"status": "completed"}
    known = {
        "killed": {**ended, "completion_failure": "[409] killed"},
        "cancelled": {**ended, "completion_failure": "[409] cancelled"},
        "raised": {**ended, "completion_failure": "[500] boom"},
        "unheard": {**ended, "completion_failure": "[409] cancelled"},  # the group's watch not heard yet
    }
    assert [_groups._ended(group, c, known) for c in callers] == [
        "killed",
        "cancelled",
        "failed",
        "failed",
        "returned",
        "cancelled",
    ]


def test_an_orphans_reason_names_a_save_by_its_latest_opener_or_an_earlier_one_apart() -> None:
    """An orphan whose latest opener saved, its end not yet heard by the group (a failure Restate
    still remembers, or none), says that opener saved; one whose latest opener saved nothing says so,
    naming an earlier opener's save only if there is one."""
    from lash_restate.contract import GroupWakePolicy, LoserPolicy
    from lash_restate.engine.wire._records import GroupMeta, Opener
    from lash_restate.inspection import _groups

    def group(*callers: str, savers: set[str]) -> _groups.StoredGroup:
        meta = GroupMeta(
            child_count=2,
            wake=GroupWakePolicy.FIRST,
            disposition=LoserPolicy.RUN_TO_COMPLETION,
            incarnation="inc-s",
            openers=[Opener(caller=c) for c in callers],
        )
        return _groups.StoredGroup("g", meta, {}, savers=frozenset(savers))

    killed = {"c2": {"status": "completed", "completion_failure": "[409] killed"}}
    earlier = "; an earlier opener saved its handle, which a continuation may still hold and resume"
    assert _groups.classify(group("c2", savers={"c2"}), killed) == (
        "orphaned",
        "its latest opener saved its handle, then failed or was killed: [409] killed",
    )
    assert _groups.classify(group("c2", savers={"c2"}), {}) == (
        "orphaned",
        "its latest opener saved its handle; how it ended is not known",
    )
    assert _groups.classify(group("c1", "c2", savers={"c1"}), killed) == (
        "orphaned",
        "its latest opener failed or was killed: [409] killed" + earlier,
    )
    assert _groups.classify(group("c1", "c2", savers=set()), killed) == (
        "orphaned",
        "its latest opener failed or was killed: [409] killed",
    )


def test_a_close_is_lost_once_restate_ended_it_unrun_for_this_incarnation_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`lost_closes`, read from the journal of each parked group's latest opener: the last close of
    the group there, of this incarnation (or naming none, as the baseline's), that ended in failure,
    or that Restate does not know once sent long ago; never a running opener's, one still under
    way, one that ran, one the opener reopened the group after, or an orphan's (closable already).
    A last close naming an earlier incarnation means this one was opened without its opener (its
    open restarted as new): nobody holds it either. One opener's lost closes of two groups are both
    found."""
    from lash_restate.contract import GroupWakePolicy, LoserPolicy
    from lash_restate.engine.wire._records import GroupMeta, Opener
    from lash_restate.inspection import _groups

    def group(key: str, caller: str) -> _groups.StoredGroup:
        meta = GroupMeta(
            child_count=2,
            wake=GroupWakePolicy.FIRST,
            disposition=LoserPolicy.CANCEL,
            incarnation=f"inc-{key}",
            openers=[Opener(caller=caller)],
        )
        return _groups.StoredGroup(key, meta, {})

    journal: list[dict[str, Any]] = []

    def c(name: str) -> str:
        """An opener's invocation id, as Restate writes one (inspection asks about no other)."""
        return _id(len(name), sum(name.encode()))

    def sent(
        caller: str, key: str, handler: str, invocation: str, body: dict[str, Any], long: bool = True
    ) -> None:
        target = {"VirtualObject": {"name": "LashGroup", "key": key, "handler": handler}}
        lite = {"Command": {"OneWayCall": {"invocation_id": invocation, "invocation_target": target}}}
        request = {
            "invocation_id": invocation,
            "invocation_target": target,
            "parameter": list(json.dumps(body).encode()),
        }
        full = {"Command": {"OneWayCall": {"request": request}}}
        at = len(journal)
        journal.append(
            {"id": caller, "at": at, "lite": json.dumps(lite), "full": json.dumps(full), "long_sent": long}
        )

    def close(caller: str, key: str, invocation: str, incarnation: str | None, long: bool = True) -> None:
        narrowed = {"disposition": "cancel"} if key == "killed" else {}  # a race's close narrows so
        named = {"incarnation": incarnation} if incarnation else {}
        sent(caller, key, "open", f"open-{invocation}", {"reply_to": "sign_1"})
        sent(caller, key, "close", invocation, {"child_count": 2, **narrowed, **named}, long)

    close(c("killed"), "killed", "inv_k", "inc-killed")
    close(c("killed"), "also", "inv_a", "inc-also")  # the same opener parked a second group
    close(c("baseline"), "baseline", "inv_b", None)
    close(c("namesake"), "namesake", "inv_n", "inc-another")
    close(c("queued"), "queued", "inv_q", "inc-queued", long=False)
    close(c("forgotten"), "forgotten", "inv_f", "inc-forgotten")
    close(c("ran"), "ran", "inv_r", "inc-ran")
    close(c("underway"), "underway", "inv_u", "inc-underway")
    close(c("running"), "running", "inv_x", "inc-running")  # its opener runs on: open, not lost
    close(c("reopened"), "reopened", "inv_o", "inc-reopened")
    sent(c("reopened"), "reopened", "open", "open-again", {"reply_to": "sign_1"})  # it holds it again
    close(c("failed"), "orphan", "inv_z", "inc-orphan")  # an orphan: closable as it is
    failed = {"status": "completed", "completion_failure": "[409] killed"}
    ends = {"inv_k": failed, "inv_a": failed, "inv_b": failed, "inv_n": failed, "inv_x": failed}
    ends |= {"inv_o": failed, "inv_z": failed}
    ends |= {"inv_r": {"status": "completed", "completion_result": "success"}, "inv_u": {"status": "running"}}
    returned = {"status": "completed", "completion_result": "success"}
    known = {row["id"]: returned for row in journal} | {
        c("running"): {"status": "running"},
        c("failed"): failed,
    }

    answered_in: list[Callable[[list[dict[str, Any]]], Iterator[dict[str, Any]]]] = [iter]

    def rows_in(admin: Any, query: str, ids: list[str]) -> list[dict[str, Any]]:
        # The admin API answers in no order of its own: each order is asked for below.
        return [{**r, "entry": r["lite"]} for r in answered_in[0](journal) if r["id"] in ids]

    def sql(admin: Any, query: str, timeout: float = 10) -> list[dict[str, Any]]:
        wanted = re.findall(r"id = '([^']*)' AND \"index\" = (\d+)", query)
        return [{**r, "entry": r["full"]} for r in journal if (r["id"], str(r["at"])) in wanted]

    monkeypatch.setattr(_groups, "rows_in", rows_in)
    monkeypatch.setattr(_groups, "sql", sql)
    monkeypatch.setattr(_groups, "invocation_rows", lambda admin, ids: {i: ends[i] for i in ids if i in ends})
    keys = ["killed", "also", "baseline", "namesake", "queued", "forgotten", "ran", "underway", "running"]
    groups = [group(k, c("killed") if k == "also" else c(k)) for k in keys]
    groups += [group("reopened", c("reopened")), group("orphan", c("failed"))]
    for order in (iter, reversed):
        answered_in[0] = order
        assert _groups.lost_closes("admin", groups, known) == {
            "killed": _groups.LostClose("inv_k", cancel=True),
            "also": _groups.LostClose("inv_a", cancel=False),
            "baseline": _groups.LostClose("inv_b", cancel=False),
            "forgotten": _groups.LostClose("inv_f", cancel=False),
            "namesake": _groups.LostClose("inv_n", cancel=False, earlier="inc-another"),
        }
    # Such a group is nobody's: orphaned, the close named, and what it asked for said.
    state, why = _groups.classify(groups[0], known, _groups.LostClose("inv_k", cancel=True))
    assert state == "orphaned" and "(inv_k)" in why and "groups close --cancel" in why
    restarted = _groups.LostClose("inv_n", cancel=False, earlier="inc-another")
    state, why = _groups.classify(groups[3], known, restarted)
    assert state == "orphaned" and "earlier incarnation inc-another" in why and "restart-as-new" in why


def test_stranded_wakes_lists_a_caller_only_while_it_still_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """`stranded_wakes` reads which callers run, then their journals: a caller whose first open
    registered wakes with a group whose record is gone is listed, with the wakes that have not
    fired; one that ended between the reads is read again and left out."""
    import base64

    from lash_restate.inspection import _journal, _wakes

    def awakeable(signal: int) -> str:
        return "sign_1" + base64.urlsafe_b64encode(bytes(24) + signal.to_bytes(4, "big")).decode().rstrip("=")

    def open_sent(caller: str) -> dict[str, Any]:
        target = {"VirtualObject": {"name": "LashGroup", "key": f"{caller}:group:x:0", "handler": "open"}}
        body = json.dumps({"reply_to": awakeable(19), "wakes": [awakeable(17), awakeable(18)]}).encode()
        request = {"invocation_id": f"open-{caller}", "invocation_target": target, "parameter": list(body)}
        return {
            "id": caller,
            "index": 1,
            "entry": json.dumps({"Command": {"OneWayCall": {"request": request}}}),
        }

    def fired(caller: str, signal: int, index: int) -> dict[str, Any]:
        lite = {"Notification": {"ty": "Signal", "id": {"SignalIndex": signal}, "result": "Success"}}
        return {"id": caller, "index": index, "entry": json.dumps(lite)}

    callers = ["c-waits", "c-ended"]
    answer = list(b'{"reopened":false,"incarnation":"i1"}')

    def fake_sql(admin: object, query: str, **_: object) -> list[dict[str, Any]]:
        if "status != " in query:
            return [{"id": c} for c in callers]
        assert "index IN (2)" in query  # the open's answer alone is read in full
        signal = {"Notification": {"Signal": {"id": {"Index": 19}, "result": {"Success": answer}}}}
        return [{"index": 2, "entry": json.dumps(signal)}]

    def fake_rows_in(admin: object, query: str, values: list[str]) -> list[dict[str, Any]]:
        if "Command: OneWayCall" in query:
            return [open_sent(caller) for caller in values]
        if "FROM sys_invocation" in query:  # the guards still pending under the keys: one
            return [{"id": "inv_guard", "key": key} for key in values]
        # The open answered (signal 19), rank 1's wake fired (signal 17): rank 2's has not.
        return [row for caller in values for row in (fired(caller, 19, 2), fired(caller, 17, 3))]

    def fake_invocations(admin: object, ids: list[str]) -> dict[str, dict[str, Any]]:
        known = {"c-waits": {"status": "suspended"}, "c-ended": {"status": "completed"}}
        return {i: {"id": i, **known[i]} for i in ids if i in known}

    monkeypatch.setattr(_wakes, "sql", fake_sql)
    monkeypatch.setattr(_wakes, "rows_in", fake_rows_in)
    monkeypatch.setattr(_journal, "rows_in", fake_rows_in)  # the notifications
    monkeypatch.setattr(_journal, "sql", fake_sql)  # and the open's answer, read whole
    monkeypatch.setattr(_wakes, "read_groups", lambda admin, where, **_: [])  # every record cleared
    monkeypatch.setattr(_wakes, "invocation_rows", fake_invocations)
    [found] = _wakes.stranded_wakes("http://admin")
    assert (found.caller, found.handler, found.sent, found.incarnation) == (
        "c-waits",
        "open",
        "open-c-waits",
        "i1",
    )
    assert found.wakes == (awakeable(18),)
    assert found.guards == ("inv_guard",) and "guards of the key are still pending" in found.ended


def test_stranded_subscriptions_lists_only_a_subscription_that_ran_and_that_its_event_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`stranded_subscriptions` lists an event child whose subscription ran and that its event no
    longer holds, and none of the others: one its event holds (as an entry, or in an earlier
    release's list), one whose awakeable fired (the emit's answer on its way), one still queued, one
    failed that the child watches (one an earlier release parked before it watched is listed), one
    sent a moment ago that Restate does not know yet (one sent long ago that it does not know is
    listed: purged), a child cancelled, one that gave up its subscription, and one that ended
    between the reads."""
    import base64

    from lash_restate.inspection import _journal, _subscriptions

    def awakeable(signal: int) -> str:
        return "sign_1" + base64.urlsafe_b64encode(bytes(24) + signal.to_bytes(4, "big")).decode().rstrip("=")

    done: dict[str, Any] = {"status": "completed"}
    failed = {"status": "completed", "completion_failure": "[409] killed"}
    # child -> (its event, the subscription's status as Restate knows it, sent long ago?)
    children: dict[str, tuple[str, dict[str, Any] | None, bool]] = {
        "c-lost": ("ev-a", done, True),
        "c-held": ("ev-b", done, True),
        "c-listed": ("ev-c", done, True),
        "c-fired": ("ev-a", done, True),
        "c-queued": ("ev-a", {"status": "inboxed"}, True),
        "c-failed": ("ev-a", failed, True),
        "c-failed-unwatched": ("ev-a", failed, True),
        "c-recent": ("ev-a", None, False),
        "c-purged": ("ev-a", None, True),
        "c-cancelled": ("ev-a", done, True),
        "c-gave-up": ("ev-a", done, True),
        "c-ended": ("ev-a", done, True),
    }

    def sent(child: str, handler: str = "subscribe") -> dict[str, Any]:
        event, _, long_sent = children[child]
        target = {"VirtualObject": {"name": "LashSignal", "key": event, "handler": handler}}
        body = json.dumps(awakeable(23)).encode()
        request = {
            "invocation_id": f"{handler}-{child}",
            "invocation_target": target,
            "parameter": list(body),
        }
        entry = json.dumps({"Command": {"OneWayCall": {"request": request}}})
        return {"id": child, "index": 1, "entry": entry, "long_sent": long_sent}

    def fired(child: str, signal: int) -> dict[str, Any]:
        lite = {"Notification": {"ty": "Signal", "id": {"SignalIndex": signal}, "result": "Success"}}
        return {"id": child, "index": 5, "entry": json.dumps(lite)}

    def fake_sql(admin: object, query: str, **_: object) -> list[dict[str, Any]]:
        assert "status != " in query
        return [{"id": c, "key": f"g:group:b:0/{c}"} for c in children]

    def fake_rows_in(admin: object, query: str, values: list[str]) -> list[dict[str, Any]]:
        if "Command: OneWayCall" in query:
            return [sent(child) for child in values] + [sent("c-gave-up", "unsubscribe")]
        if "Notification" in query:  # c-fired's awakeable has fired; c-cancelled was cancelled (signal 1)
            answered = [fired("c-fired", 23), fired("c-cancelled", 1)]
            return [row for row in answered if row["id"] in values]
        if "AttachInvocation" in query:  # every child watches its subscription but an earlier release's
            return [{"id": child} for child in values if child != "c-failed-unwatched"]
        assert "FROM state" in query
        return [
            {"service_key": "ev-b", "key": "waiter:" + awakeable(23)},
            {"service_key": "ev-c", "key": "waiters", "value_utf8": json.dumps([awakeable(23)])},
        ]

    def fake_invocations(admin: object, ids: list[str]) -> dict[str, dict[str, Any]]:
        known: dict[str, dict[str, Any]] = {c: {"status": "suspended"} for c in children if c != "c-ended"}
        known["c-ended"] = {"status": "completed"}
        known.update(
            {f"subscribe-{c}": status for c, (_, status, _) in children.items() if status is not None}
        )
        return {i: {"id": i, **known[i]} for i in ids if i in known}

    monkeypatch.setattr(_subscriptions, "sql", fake_sql)
    monkeypatch.setattr(_subscriptions, "rows_in", fake_rows_in)
    monkeypatch.setattr(_journal, "rows_in", fake_rows_in)
    monkeypatch.setattr(_subscriptions, "invocation_rows", fake_invocations)
    found = _subscriptions.stranded_subscriptions("http://admin")
    assert sorted((f.caller, f.event, f.sent) for f in found) == [
        ("c-failed-unwatched", "ev-a", "subscribe-c-failed-unwatched"),
        ("c-lost", "ev-a", "subscribe-c-lost"),
        ("c-purged", "ev-a", "subscribe-c-purged"),
    ]
    [lost] = [f for f in found if f.caller == "c-lost"]
    assert lost.child == "g:group:b:0/c-lost" and lost.awakeable == awakeable(23)


def test_the_version_a_release_names_is_restates_own() -> None:
    """A child's outcome store is released only if the child's state is still as it was read: the
    version sent with it is the one Restate computes (its own test vectors, `state_mut.rs`)."""
    from lash_restate.inspection._staged import state_version

    assert state_version({b"name": b"bob"}) == "tDqA04Lj3_qJ-PgNPTecXDGZgpwy6jm2Ni2BYqJIthM"
    assert state_version({b"b": b"bbb", b"a": b"aaa"}) == "RVM17P6x18Wp-JnzQ01BzmqCvhAunTOQI_az6Px3Zyk"
    assert state_version({}) == "47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU"


@pytest.mark.parametrize("applied", [True, False], ids=["applied", "dropped"])
def test_a_childs_left_outcome_is_released_alone_and_only_from_the_state_it_was_read_in(
    monkeypatch: pytest.MonkeyPatch, applied: bool
) -> None:
    """`release_outcome` replaces the child's state with what it holds for groups still recorded
    (a namesake opened since keeps its own store), naming the version it read: a store written or
    released in between makes Restate drop the release, not lose the store, and a release Restate
    dropped (its stores still there a while later) is said, not taken for done."""
    from lash_restate.inspection import InspectionError, _staged

    state = {"outcome:gone-s": '{"type":"ok","value":1}', "outcome:live-s": '{"type":"ok","value":2}'}
    sent: list[tuple[str, str, dict[str, list[int]], str | None]] = []

    def fake_sql(admin: object, query: str, **_: object) -> list[dict[str, Any]]:
        assert "service_key = 'g:group:b:0/c0'" in query
        if "key IN" in query:  # looking for the released store: gone once Restate applied the release
            return [] if applied else [{"key": "outcome:gone-s"}]
        return [{"key": key, "value_utf8": value} for key, value in state.items()]

    def fake_replace(
        admin: object, service: str, key: str, kept: dict[str, list[int]], *, version: str | None = None
    ) -> None:
        sent.append((service, key, kept, version))

    monkeypatch.setattr(_staged, "sql", fake_sql)
    monkeypatch.setattr(_staged, "_replace_state", fake_replace)
    monkeypatch.setattr(_staged, "RELEASE_SEEN_WITHIN_S", 0.3)
    left = _staged.LeftOutcome("g:group:b:0/c0", ("gone-s",))
    if applied:
        _staged.release_outcome("http://admin", left)
    else:
        with pytest.raises(InspectionError, match="changed since it was read"):
            _staged.release_outcome("http://admin", left)
    read = {key.encode(): value.encode() for key, value in state.items()}
    kept = {"outcome:live-s": list(state["outcome:live-s"].encode())}
    assert sent == [("LashChild", "g:group:b:0/c0", kept, _staged.state_version(read))]


def test_a_childs_outcome_is_left_only_when_no_group_records_its_incarnation_and_nothing_runs_on_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`left_outcomes` lists a child's store of an incarnation no group records (whatever its key:
    a replay key need not name its group), not one a group records, and not a child something runs
    or is queued on (a run about to settle, or the close's release on its way); with a record it
    cannot read, nothing."""
    from lash_restate.inspection import InspectionError, _staged

    stores = {
        "a:group:b:0/c0": ["outcome:gone-1"],  # left
        "a:group:b:1/c0": ["outcome:live-1"],  # its group is recorded
        "custom-replay-key": ["outcome:live-2", "outcome:gone-2"],  # a group elsewhere records live-2
        "a:group:b:2/c0": ["outcome:gone-3"],  # its close's release is on its way
    }

    def fake_sql(admin: object, query: str, **_: object) -> list[dict[str, Any]]:
        if "starts_with(key, 'outcome:')" in query:
            return [{"service_key": key, "key": store} for key, kept in stores.items() for store in kept]
        assert "key = 'meta'" in query
        records = ['{"incarnation":"live-1"}', '{"incarnation":"live-2"}', *unreadable]
        return [{"value_utf8": record} for record in records]

    def fake_rows_in(admin: object, query: str, values: list[str]) -> list[dict[str, Any]]:
        assert "FROM sys_invocation" in query
        return [{"key": "a:group:b:2/c0"}] if "a:group:b:2/c0" in values else []

    unreadable: list[str] = []
    monkeypatch.setattr(_staged, "sql", fake_sql)
    monkeypatch.setattr(_staged, "rows_in", fake_rows_in)
    assert _staged.left_outcomes("http://admin") == [
        _staged.LeftOutcome("a:group:b:0/c0", ("gone-1",)),
        _staged.LeftOutcome("custom-replay-key", ("gone-2",)),
    ]
    # A record this release cannot read could be any group's: nothing is taken for left, and it says so.
    unreadable.append("not a record")
    with pytest.raises(InspectionError, match="cannot be read here"):
        _staged.left_outcomes("http://admin")


def test_stranded_lists_a_caller_only_while_it_still_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """`stranded_opens` reads which callers run, then their journals: one that ended between the two
    reads (its open killed while queued, say) is read again and left out, as nobody waits any more."""
    import base64

    from lash_restate.inspection import _journal, _stranded

    def awakeable(signal: int) -> str:
        return "sign_1" + base64.urlsafe_b64encode(bytes(24) + signal.to_bytes(4, "big")).decode().rstrip("=")

    def open_sent(caller: str, key: str) -> dict[str, Any]:
        target = {"VirtualObject": {"name": "LashGroup", "key": key, "handler": "open"}}
        body = json.dumps({"reply_to": awakeable(19)}).encode()
        request = {"invocation_id": f"open-{caller}", "invocation_target": target, "parameter": list(body)}
        entry = json.dumps({"Command": {"OneWayCall": {"request": request}}})
        return {"id": caller, "index": 1, "entry": entry, "long_sent": True}

    callers = ["c-waits", "c-ended"]

    def fake_sql(admin: object, query: str, **_: object) -> list[dict[str, Any]]:
        return [{"id": c} for c in callers] if "status != " in query else []

    def fake_rows_in(admin: object, query: str, values: list[str]) -> list[dict[str, Any]]:
        if "Command: OneWayCall" in query:
            return [open_sent(caller, f"{caller}:group:x:0") for caller in values]
        return []  # no signal completes either caller's awakeable

    def fake_invocations(admin: object, ids: list[str]) -> dict[str, dict[str, Any]]:
        # Each open killed while queued (Restate knows nothing of it); one caller ended since.
        known = {
            "c-waits": {"id": "c-waits", "status": "suspended"},
            "c-ended": {"id": "c-ended", "status": "completed"},
        }
        return {i: known[i] for i in ids if i in known}

    monkeypatch.setattr(_stranded, "sql", fake_sql)
    monkeypatch.setattr(_journal, "rows_in", fake_rows_in)  # the journals and their signals
    monkeypatch.setattr(_stranded, "invocation_rows", fake_invocations)
    assert [s.caller for s in _stranded.stranded_opens("http://admin")] == ["c-waits"]


def test_a_groups_age_is_measured_by_the_servers_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """`groups list` and `show` measure a group's age against the restate-server's time, not the
    clock of the machine the command runs on (an operator's laptop an hour off would see a group
    opened just now as an hour old, or not yet open)."""
    from lash_restate.contract import GroupWakePolicy, LoserPolicy
    from lash_restate.engine.wire._records import GroupMeta
    from lash_restate.inspection import _groups

    opened = 1_000_000_000
    meta = GroupMeta(
        child_count=1,
        wake=GroupWakePolicy.ALL,
        disposition=LoserPolicy.RUN_TO_COMPLETION,
        incarnation="inc-s",
        opened_at_ms=opened,
    )
    monkeypatch.setattr(_groups, "read_groups", lambda admin, *_, **__: [_groups.StoredGroup("k", meta, {})])
    monkeypatch.setattr(_groups, "invocation_rows", lambda admin, ids: {})
    monkeypatch.setattr(_groups, "paused_by_group", lambda admin, groups: {})
    monkeypatch.setattr(_groups, "retrying_by_group", lambda admin, groups: {})
    monkeypatch.setattr(_groups, "lost_closes", lambda admin, groups, known: {})
    monkeypatch.setattr(_groups, "unrecorded_openers", lambda admin, groups: {})
    monkeypatch.setattr(_groups, "server_now_ms", lambda admin: opened + 3_600_000)
    [row] = _groups.list_open_groups("admin")
    assert row.age_s == 3600
    monkeypatch.setattr(inspection_sql, "sql", lambda admin, query: [{"ns": 1_796_622_396_557_541_087}])
    assert inspection_sql.server_now_ms("admin") == 1_796_622_396_557
    monkeypatch.setattr(inspection_sql, "sql", lambda admin, query: [{}])
    with pytest.raises(InspectionError, match="gave no time of its own"):
        inspection_sql.server_now_ms("http://127.0.0.1:9070")


async def test_a_pump_cancelled_while_it_listens_for_the_close_listens_on_and_ends_as_it_would_have(
    stack: LocalStack,
) -> None:
    """Every child settled, a group's pump listens for the close a while before it says its store
    stays. A cancel then (an operator's, or a caller gone under `Cancel`) has nothing left to stop:
    the pump listens on, the close resolves it, it releases its own store and ends as it would have,
    not as a failed run that the group's watch would take for its pump gone."""
    s = Scope()
    group = s.group([echo("a"), echo("b"), echo("c")])  # three: pumped
    [_, *read, saved] = await stack.turn(open_(group), next_(), next_(), next_(), save())
    assert sorted(ok(r)["position"] for r in read) == [0, 1, 2]
    pumps = (
        "SELECT id FROM sys_invocation WHERE target_service_name = 'LashPump' "
        f"AND target_handler_name = 'run2' AND ends_with(target_service_key, {quote(':' + s.key())})"
    )
    [pump] = await _poll(stack, pumps, lambda rows: len(rows) == 1)

    def journal(kind: str) -> str:
        return f"SELECT index FROM sys_journal WHERE id = '{pump['id']}' AND entry_type = '{kind}'"

    await _poll(stack, journal("Command: Sleep"), bool)  # listening for the close, a while
    async with httpx.AsyncClient(verify=tls(), timeout=30) as client:
        cancelled = await client.patch(f"{stack.server.admin_url}/invocations/{pump['id']}/cancel")
    assert cancelled.status_code in (200, 202), cancelled.text
    await _poll(stack, journal("Notification: Signal"), bool)  # the cancel reached it
    [_, closed] = await stack.turn(use(ok(saved)), close())
    assert ok(closed) is None
    ended = f"SELECT status, completion_failure FROM sys_invocation WHERE id = '{pump['id']}'"
    [row] = await _poll(stack, ended, lambda rows: rows and rows[0]["status"] == "completed")
    assert row.get("completion_failure") is None, row
    left = "SELECT key FROM state WHERE service_name = 'LashPump' AND " + (
        f"ends_with(service_key, {quote(':' + s.key())})"
    )
    await _poll(stack, left, lambda rows: not rows)  # its store released


async def test_an_operators_request_with_no_body_is_refused_and_holds_no_lock(stack: LocalStack) -> None:
    """The public handlers an operator's levers call take a request: one POSTed with no body (a bare
    `curl -X POST`, say) is refused with 400, never retried, and leaves the group's lock free: the
    group is then read and closed as ever. (Restate's ingress refuses it; a call from inside Restate
    with no argument is refused by the handler itself: `test_records.py`.)"""
    s = Scope()
    gate = s.event("gate")
    group = s.group([echo("a"), event(gate)])
    [_, first, saved] = await stack.turn(open_(group), next_(), save())
    assert ok(first)["position"] == 0
    key = url_quote(s.key(), safe="")
    for path in (
        f"LashGroup/{key}/operator_close",
        f"LashGroup/{key}/operator_redispatch",
        f"LashGroup/{key}/operator_resend",
        f"LashSignal/{url_quote(gate, safe='')}/operator_resend",
    ):
        with pytest.raises(CallFailed) as refused:
            await stack.call(path, content=b"", retries=1)
        assert refused.value.status_code == 400, (path, refused.value.error_message)
    await stack.emit(gate, 1)
    [_, second, closed] = await stack.turn(use(ok(saved)), next_(), close())
    assert (ok(second)["position"], ok(closed)) == (1, None)
