"""lash called inside a ``ctx.run`` action is refused, typed and terminally, before anything is sent.

ADR: a group dispatches its children "from outside any recorded body". A race served from inside a
run answered only once its loser ended (and a sync action's journal no longer replayed); each entry
point now refuses there with `InvalidInput`, which ends the run, and the handler that does not
catch it, terminally. The same calls in the handler body are served.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from lash_restate.inspection import sql
from lash_restate.testing import LocalStack, StackError

ENTRIES = ["race", "any", "all", "all_settled", "open", "next", "close", "save", "select", "lash_select"]
# The entries that open their group inside the run; the others act on one the handler body opened.
OPENING = {"race", "any", "all", "all_settled", "open", "select", "lash_select"}


@pytest.fixture(scope="module", params=["live", "replaying"])
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """The app's own stack; ``replaying``: every await suspends, so each run's action (and the group
    the handler body opened before it) is reached on a replay of the invocation."""
    env = {"RESTATE_WORKER__INVOKER__INACTIVITY_TIMEOUT": "0s"} if request.param == "replaying" else {}
    base = tmp_path_factory.mktemp("inside-run")
    app = "tests.engine.inside_run_app"
    with LocalStack.single(base, module=app, endpoint_args=(), server_env=env).start() as s:
        yield s


async def _query(stack: LocalStack, query: str) -> list[dict[str, Any]]:
    return await asyncio.to_thread(sql, stack.admin_url, query)


async def _invoke(stack: LocalStack, request: dict[str, Any]) -> tuple[str, StackError | Any]:
    """Call `Inside/run` once: its invocation id, and its answer or the error it ended with."""
    query = "SELECT id FROM sys_invocation WHERE target = 'Inside/run'"
    before = {row["id"] for row in await _query(stack, query)}
    try:
        answer: StackError | Any = await stack.call("Inside/run", request, within=30)
    except StackError as error:
        answer = error
    [invocation] = {row["id"] for row in await _query(stack, query)} - before
    return invocation, answer


@pytest.mark.parametrize("sync", [False, True], ids=["async-action", "sync-action"])
@pytest.mark.parametrize("entry", ENTRIES)
async def test_lash_inside_a_run_action_is_refused_terminally_before_anything_is_sent(
    stack: LocalStack, entry: str, sync: bool
) -> None:
    invocation, answer = await _invoke(stack, {"entry": entry, "sync": sync})
    assert isinstance(answer, StackError) and "answered 400" in str(answer)
    assert "lash-error" not in str(answer)  # the client reads the refusal, not lash's wire form
    [row] = await _query(
        stack, f"SELECT status, completion_failure FROM sys_invocation WHERE id = '{invocation}'"
    )
    # Ended by the refusal, not retried: the run's failure is terminal, and the handler's with it.
    assert row["status"] == "completed"
    status, _, message = row["completion_failure"].partition(" ")
    assert status == "[400]"
    what = {
        "next": "Group.next",
        "close": "Group.close",
        "save": "Group.save",
        "lash_select": "lash.select",
    }.get(entry, f"lash.{entry}")
    if entry == "select":
        what = "open_effect_group"
    assert message.startswith(f"{what} was called inside a ctx.run action: ")
    assert f"Call {what} in the handler body, outside ctx.run" in message
    # Nothing was sent or journaled from inside the action: after the run's own command, only its
    # (failed) result and the invocation's output. (A wake the group resolved meanwhile, a signal to
    # an awakeable the handler registered before the run, or the end of the group's open it attached
    # to, may come between: a notification, not a command.)
    journal = await _query(
        stack, f"SELECT index, entry_type, name FROM sys_journal WHERE id = '{invocation}' ORDER BY index"
    )
    kinds = [entry["entry_type"] for entry in journal]
    run = kinds.index("Command: Run")
    assert journal[run]["name"] == "inside"
    noticed = ("Notification: Signal", "Notification: AttachInvocation")
    assert [kind for kind in kinds[run + 1 :] if kind not in noticed] == [
        "Notification: Run",
        "Command: Output",
    ]
    if entry in OPENING:
        assert kinds[:run] == ["Command: Input"]
        groups = await _query(
            stack, f"SELECT id FROM sys_invocation WHERE target_service_key LIKE '{invocation}:%'"
        )
        assert groups == []  # no group, no child was ever invoked


@pytest.mark.parametrize("entry", ENTRIES)
async def test_the_same_call_in_the_handler_body_is_served(stack: LocalStack, entry: str) -> None:
    _, answer = await _invoke(stack, {"entry": entry, "inside": False})
    assert not isinstance(answer, StackError), answer
    expected = {
        "race": "fast",
        "any": "fast",
        "all": ["fast"],
        "all_settled": ["Ok(value='fast')"],
        "next": "Ok(value='fast')",
        "close": "closed",
        "select": "deadline",
        "lash_select": "fast",
    }
    if entry == "open":
        assert ":group:" in answer
    elif entry == "save":
        assert json.loads(answer)["consumed"] == 0
    else:
        assert answer == expected[entry]


# Live only: on a server that suspends at once, an attempt whose action waits on the body (with no
# journal entry meanwhile) did not complete within 30 s.
@pytest.mark.parametrize("stack", ["live"], indirect=True)
async def test_only_the_action_is_taken_for_inside_a_run_while_it_runs(stack: LocalStack) -> None:
    """Decision 49: while a run's action of the invocation runs, the handler body and a task it made
    are not inside it (lash serves them); the action is."""
    seen = await stack.call("Inside/beside", within=30)
    assert seen == {"action": True, "body": False, "task of the body": False, "still running": True}
