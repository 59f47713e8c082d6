"""What a client sees when a handler leaves lash's error uncaught: the child's own status and message,
or the contract error's status and its line; never lash's wire form (`lash-error:`), which is between
lash's own handlers. And how a group refuses an open in parts that another handler of the cluster
forged. Served by `tests/engine/errors_app.py` on a real restate-server."""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from lash_restate._http import tls
from lash_restate.contract import (
    GroupNotOpen,
    GroupShape,
    GroupWakePolicy,
    LoserPolicy,
    RuntimeEffectEnvelope,
    RuntimeEffectGroup,
    ToolCall,
    canonical_bytes,
)
from lash_restate.engine import GroupMeta
from lash_restate.engine.wire._formats import ERROR_METADATA_ENV
from lash_restate.engine.wire._incarnation import PAGED
from lash_restate.engine.wire._records import META, SHAPE
from lash_restate.inspection import GroupView, close_group, quote, show_group, sql
from lash_restate.inspection._operator import said
from lash_restate.testing import CallFailed, LocalStack, StackError
from tests.engine.test_engine import _poll
from tests.engine.test_operator import until

WIRE = "lash-error"
REFUSES = {"refuse": "carrier b refuses", "status": 409}
SLOW = {"price": 2, "delay_ms": 3_600_000}  # an hour-long quote: a loser that only a cancel ends


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    base = tmp_path_factory.mktemp("uncaught")
    # Its callees' metadata written (off by default, for a release beside the baseline: decision 118).
    app = LocalStack.single(
        base, module="tests.engine.errors_app", endpoint_args=(), endpoint_env={ERROR_METADATA_ENV: "1"}
    )
    with app.start() as s:
        yield s


async def _call(stack: LocalStack, path: str, body: Any = None) -> Any:
    """What a client gets from ``path``, through the test kit's `call`: the handler's answer, or the
    `CallFailed` carrying its status and body; never lash's wire form, which is between lash's own
    handlers."""
    try:
        got: Any = await stack.call(path, body)
    except CallFailed as failed:
        got = failed
    text = got.text if isinstance(got, CallFailed) else json.dumps(got)
    assert WIRE not in text, text
    return got


async def _answer(stack: LocalStack, path: str, body: Any = None) -> tuple[int, Any]:
    """`_call`: the status and the whole body, as JSON."""
    got = await _call(stack, path, body)
    return (got.status_code, json.loads(got.text)) if isinstance(got, CallFailed) else (200, got)


async def _post(stack: LocalStack, path: str, body: Any = None) -> tuple[int, str]:
    """`_call`: the status, and the failure's message (none on success), as `CallFailed` reads it."""
    got = await _call(stack, path, body)
    if not isinstance(got, CallFailed):
        return 200, ""
    assert got.error_message is not None, got.text
    return got.status_code, got.error_message


GIVES = {"refuse": "out of stock", "status": 409, "metadata": {"left": "5", "sku": "A-1"}}


async def test_a_callees_metadata_reaches_the_caller_as_a_native_calls_does(stack: LocalStack) -> None:
    """A callee's ``TerminalError("out of stock", 409, metadata={...})`` reads alike caught natively,
    as a `Rejected` of `all` and as each `ChildRejected` of `any`'s aggregate (``status_code``,
    ``child_message``, ``metadata``), and reaches a client alike when left uncaught."""
    seen = {"status": 409, "message": "out of stock", "metadata": GIVES["metadata"]}
    assert await _answer(stack, "Shop/caught", GIVES) == (200, {"native": seen, "all": seen, "any": [seen]})
    native = await _answer(stack, "Shop/native", GIVES)
    assert await _answer(stack, "Shop/all", [GIVES]) == native


@pytest.mark.parametrize(
    ("entry", "children"),
    [("all", [{"price": 1}, REFUSES]), ("race", [REFUSES, SLOW]), ("all", [SLOW, REFUSES])],
    ids=["all", "race", "all-before-a-slow-one"],
)
async def test_an_uncaught_rejection_ends_the_caller_with_the_childs_status_and_message(
    stack: LocalStack, entry: str, children: list[dict[str, Any]]
) -> None:
    """A callee's ``TerminalError("carrier b refuses", 409)``, uncaught by a caller that raced or
    awaited all of its calls, reaches the caller's client as 409 ``carrier b refuses``: as if the
    caller had awaited the call itself."""
    assert await _post(stack, f"Shop/{entry}", children) == (409, "carrier b refuses")


async def test_a_rejection_without_a_status_of_its_own_ends_the_caller_with_500(stack: LocalStack) -> None:
    # A callee's TerminalError given no status is Restate's 500; a tool's rejection has none: 500 too,
    # unless the tool's code is an HTTP error status.
    assert await _post(stack, "Shop/all", [{"refuse": "no status"}]) == (500, "no status")
    assert await _post(stack, "Shop/tools", [{"tool": "fail", "message": "tool says no"}]) == (
        500,
        "tool says no",
    )
    coded = [{"tool": "fail", "message": "out of stock", "code": "410"}]
    assert await _post(stack, "Shop/tools", coded) == (410, "out of stock")
    named = [{"tool": "fail", "message": "declined", "code": "card_declined"}]
    assert await _post(stack, "Shop/tools", named) == (500, "declined")


async def test_a_callee_that_answers_bytes_that_are_not_json_rejects_its_child_saying_so(
    stack: LocalStack,
) -> None:
    """lash reads a call's value as JSON: a callee answering other bytes (its own serde's) settles
    its child `Err`, code `not_json`, naming the callee and the size, never a retry."""
    assert await _post(stack, "Shop/raw_answer") == (500, "Carriers/raw answered 10 bytes that are not JSON")


async def test_an_uncaught_aggregate_rejection_names_every_child(stack: LocalStack) -> None:
    alike = [{"refuse": "a full", "status": 409}, {"refuse": "b full", "status": 409}]
    assert await _post(stack, "Shop/any", alike) == (
        409,
        "all 2 children rejected: child 0: a full (code 409); child 1: b full (code 409)",
    )
    # Children that ended differently share no status: 500.
    mixed = [alike[0], {"refuse": "b down", "status": 503}]
    assert await _post(stack, "Shop/any", mixed) == (
        500,
        "all 2 children rejected: child 0: a full (code 409); child 1: b down (code 503)",
    )


async def test_an_uncaught_aggregate_rejection_carries_the_metadata_its_children_share(
    stack: LocalStack,
) -> None:
    """Every child's callee gave the same metadata: the client gets it beside their status, as each
    child's own would reach it; children that gave different metadata (or none) give none."""
    status, body = await _answer(stack, "Shop/any", [GIVES, GIVES])
    assert (status, body.get("metadata")) == (409, GIVES["metadata"]), body
    apart = {**GIVES, "metadata": {"left": "4", "sku": "A-1"}}
    status, body = await _answer(stack, "Shop/any", [GIVES, apart])
    assert (status, body.get("metadata")) == (409, None), body


@pytest.mark.parametrize("entry", ["not_open", "not_open_below"])
async def test_an_uncaught_group_not_open_is_a_404_with_its_line(stack: LocalStack, entry: str) -> None:
    status, message = await _post(stack, f"Shop/{entry}")
    assert status == 404
    assert message.startswith("[group_not_open] no such group is recorded (never opened, or closed) ")
    assert ":group:" in message  # where: the group's key


async def test_an_uncaught_child_unroutable_is_a_404_naming_the_child(stack: LocalStack) -> None:
    status, message = await _post(stack, "Shop/unroutable")
    assert status == 404
    assert message.startswith("[child_unroutable] no executor is registered for tool 'no_such_tool' ")
    assert "position=1" in message


async def test_an_event_emitted_rejected_and_cleared_from_a_handler_settles_its_waiters(
    stack: LocalStack,
) -> None:
    """`lash.emit`, `lash.reject_event` and `lash.clear_event` in a handler's own code do what the
    ingress's `LashSignal/{name}/emit`, `/reject` and `/clear` do: a child already waiting settles
    with the payload, a later one at once; after a clear a waiter waits, and a rejection rejects it
    (500 and the message, left uncaught); what lash cannot record is refused at the sender with 400."""
    name = f"ev-{uuid.uuid4().hex[:8]}"
    waiting = asyncio.create_task(_answer(stack, "Shop/await_event", name))
    subscribed = (
        "SELECT key FROM state WHERE service_name = 'LashSignal' "
        f"AND service_key = {quote(name)} AND starts_with(key, 'waiter:')"
    )
    await until(lambda: asyncio.to_thread(sql, stack.admin_url, subscribed))
    assert await _answer(stack, "Shop/signal", {"name": name, "do": "emit", "payload": {"a": 1}}) == (
        200,
        None,
    )
    assert await waiting == (200, [{"a": 1}])
    assert await _answer(stack, "Shop/await_event", name) == (200, [{"a": 1}])  # emitted: at once

    assert await _answer(stack, "Shop/signal", {"name": name, "do": "clear"}) == (200, None)
    waiting = asyncio.create_task(_answer(stack, "Shop/await_event", name))
    await until(lambda: asyncio.to_thread(sql, stack.admin_url, subscribed))
    assert await _answer(stack, "Shop/signal", {"name": name, "do": "reject", "message": "no"}) == (200, None)
    status, body = await waiting
    assert (status, body["message"]) == (500, "no"), body

    status, message = await _post(stack, "Shop/signal", {"name": name, "do": "nan"})
    assert status == 400 and message.startswith("[invalid_envelope] event payload"), message
    status, message = await _post(stack, "Shop/signal", {"name": "", "do": "emit"})
    assert status == 400 and message.startswith("[invalid_envelope] event name"), message
    status, message = await _post(stack, "Shop/signal", {"name": name, "do": "reject", "message": 5})
    assert status == 400 and message.startswith("[invalid_input] reject_event takes a str"), message


async def test_a_workflows_promise_given_as_a_cancel_is_refused_naming_its_value(stack: LocalStack) -> None:
    """A `DurablePromise` is an awaitable but not a durable future: refused with 400, the message
    saying to give its ``.value()``."""
    status, message = await _post(stack, "Approval/w-promise/run")
    assert status == 400, message
    assert message.startswith("[invalid_input] on Restate, cancel must be a durable future"), message
    assert message.endswith("not a ServerDurablePromise: give its .value()"), message


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("not_json", "[invalid_envelope] "),
        ("unkeyed", "[invalid_input] Tally/add is a virtual object's handler: the call needs key="),
        ("bad_sleep", "[invalid_input] lash.sleep takes a timedelta"),
        ("select_key", "[invalid_input] lash.select: key= is lash's own keyword, not a child's name"),
        ("bad_cancel", "[invalid_input] cancel must be an awaitable (e.g. ctx.sleep(...)), not an int"),
    ],
)
async def test_a_child_refused_where_the_handler_builds_it_ends_the_caller_with_400(
    stack: LocalStack, entry: str, says: str
) -> None:
    """Bad input to `lash.call`, `lash.sleep` (or `lash.tool`, `lash.event`), raised in the handler's
    own code before any combinator runs, ends the invocation with 400 and the refusal's line: the
    client gets its answer, instead of an invocation that Restate retries for ever."""
    status, message = await _post(stack, f"Shop/{entry}")
    assert status == 400, message
    assert message.startswith(says), message


def test_the_cli_shows_an_earlier_endpoints_wire_line_as_the_error() -> None:
    """An endpoint of an earlier release answered an operator's close with the wire form: the CLI shows
    the error's line instead."""
    error = GroupNotOpen.not_recorded(group_key="s:group:b:0")
    shown = said(httpx.Response(404, json={"code": 404, "message": error.to_wire()}))
    assert shown == str(error) and WIRE not in shown
    assert said(httpx.Response(502, text="bad gateway")) == "bad gateway"


async def test_a_call_a_retried_handler_never_answers_says_what_restate_is_retrying(
    stack: LocalStack,
) -> None:
    """The test kit's `call` of a handler that raises a plain exception (retried for ever, so never
    answered): at its timeout it raises `StackError` naming the invocation Restate retries, with
    its last failure and the end of the endpoint's log, where it raised the HTTP client's bare
    timeout (and not chained to it, whose frames a test's report would show first). Another test's
    invocation retried on the same stack from before the call is left out, though the call's own
    fails only after its timeout (as on a loaded machine): the report waits for that failure."""
    earlier = "SELECT id FROM sys_invocation WHERE target = 'Shop/also_broken' AND retry_count >= 1"
    async with httpx.AsyncClient(verify=tls(), timeout=30) as client:
        assert (await client.post(f"{stack.ingress_url}/Shop/also_broken/send")).is_success
    await _poll(stack, earlier, lambda rows: len(rows) == 1)
    with pytest.raises(StackError) as caught:
        await stack.call("Shop/late_bug", 4, within=2)
    said = str(caught.value)
    assert "POST /Shop/late_bug had no answer within 2 s" in said, said
    assert "Restate is retrying Shop/late_bug" in said and "a bug of the handler's own" in said, said
    assert "Restate is retrying Shop/also_broken" not in said, said
    assert f"{stack.endpoint.log_path} ends:" in said, said
    # The report is the whole failure: not printed under the HTTP client's frames of its timeout.
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    rows = stack.sql("SELECT id FROM sys_invocation WHERE target IN ('Shop/late_bug', 'Shop/also_broken')")
    async with httpx.AsyncClient(verify=tls(), timeout=30) as client:  # retried for ever: end them
        for row in rows:
            killed = await client.patch(f"{stack.admin_url}/invocations/{row['id']}/kill")
            assert killed.is_success, killed.text


async def test_a_block_that_raised_a_plain_exception_is_retried_and_reads_on(
    stack: LocalStack, tmp_path: Path
) -> None:
    """A plain exception inside ``async with lash.open(...)`` is retried by Restate; the retry replays
    the block and, its fault gone, reads on and closes. Closed at the failed attempt's end, the group
    was gone for the retry, which met the close in its journal where it read on."""
    marker = tmp_path / "raised"
    assert await stack.call("Shop/retried_block", str(marker), within=30) == [0, 1]
    assert marker.exists()  # the first attempt raised


@pytest.fixture(scope="module")
def replaying(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """The same application on a server that suspends every invocation that waits, and so replays it."""
    base = tmp_path_factory.mktemp("uncaught-replayed")
    env = {"RESTATE_WORKER__INVOKER__INACTIVITY_TIMEOUT": "0s"}
    with LocalStack.single(
        base, module="tests.engine.errors_app", endpoint_args=(), server_env=env
    ).start() as s:
        yield s


async def test_a_refusal_the_handler_caught_is_refused_again_on_its_replay(replaying: LocalStack) -> None:
    """An await refused before anything was journaled (`cancel=` that is no awaitable), caught, then
    both ranks read: the replay after the second read's suspension refuses it again. (It skipped the
    checks on every replay, so the refused await read rank 1 and the last read ran past the group.)"""
    async with httpx.AsyncClient(verify=tls(), timeout=60) as client:
        response = await client.post(f"{replaying.ingress_url}/Shop/caught_cancel")
    assert response.status_code == 200, response.text
    assert sorted(response.json()) == [0, 1]


async def test_an_await_whose_cancel_failed_keeps_its_rank_s_wake_for_the_next(stack: LocalStack) -> None:
    """An await ended by its cancel's own failure (a call that failed first) consumes nothing, and
    the rank's wake stays the caller's: three such awaits leave the one wake the open registered.
    (Each lost it, and the next registered another: the group's waiters grew with every try.)"""
    async with httpx.AsyncClient(verify=tls(), timeout=60) as client:
        response = await client.post(f"{stack.ingress_url}/Shop/failing_cancels")
    assert response.status_code == 200, response.text
    key = response.json()
    query = (
        "SELECT value_utf8 FROM state WHERE service_name = 'LashGroup' "
        f"AND service_key = {quote(key)} AND key = 'meta'"
    )
    [row] = await asyncio.to_thread(sql, stack.server.admin_url, query)
    waiters = msgspec.json.decode(row["value_utf8"], type=GroupMeta).waiters
    assert [w.rank for w in waiters] == [1]


async def test_a_combinators_cursor_answered_to_be_saved_keeps_its_group_though_its_caller_failed(
    stack: LocalStack,
) -> None:
    """`combine(..., stop_after=k)` answers a cursor for a continuation: the group records the save,
    so a caller that failed after it leaves a group that is never reclaimed (only `Group.save()`
    told the group: such a group was taken for one nobody can resume, and reclaimed a day after)."""
    status, message = await _post(stack, "Shop/suspended_then_failed")
    assert status == 500 and message.startswith("failed once "), message
    key = message.removeprefix("failed once ").removesuffix(" was saved")

    saved = (
        "SELECT key FROM state WHERE service_name = 'LashGroup' "
        f"AND service_key = {quote(key)} AND key = 'savers'"
    )

    async def settled_view() -> GroupView | None:
        # Its save and its caller's end recorded, both children settled: when an orphan is made due.
        if not await asyncio.to_thread(sql, stack.server.admin_url, saved):
            return None
        view = await asyncio.to_thread(show_group, stack.server.admin_url, key)
        if view is None or view.settled < 2 or "Restate still remembers" in view.reason:
            return None
        return view if view.openers[-1].ended == "failed" else None

    view = await until(settled_view, within=30)
    assert view.reclaim_at is None, view  # a continuation may resume it: no clock closes it


@pytest.mark.parametrize("parts", [0, 2])
async def test_a_first_open_in_parts_its_opener_never_staged_is_refused_saying_so_and_records_nothing(
    stack: LocalStack, parts: int
) -> None:
    """A first `open_parts` sent by another handler of the cluster (the ingress refuses it; a
    handler's send is not refused) whose parts no opener staged: none (as a resume's, but not one)
    or more than its shape's slices. Refused on its reply awakeable with `invalid_input` saying so;
    the open writes nothing and sends nothing (its journal shows it)."""
    key = f"forged-{uuid.uuid4()}"
    shape = GroupShape(
        child_count=1,
        wake=GroupWakePolicy.ALL,
        disposition=LoserPolicy.CANCEL,
        replay_keys=("forged-child",),
        hashes=("forged-hash",),
    )
    forged = {"shape": msgspec.to_builtins(shape), "stage": f"{PAGED}{uuid.uuid4()}", "parts": parts}
    answer = await stack.call("Forger/open_group", {"key": key, "handler": "open_parts", "open": forged})
    says = "[invalid_input] an open in parts names no staged parts of this group"
    assert answer == {"status": 400, "error": says}
    ran = (
        "SELECT status FROM sys_invocation WHERE target_service_name = 'LashGroup' "
        f"AND target_handler_name = 'open_parts' AND target_service_key = {quote(key)}"
    )
    await _poll(stack, ran, lambda rows: [r["status"] for r in rows] == ["completed"])
    kept = f"SELECT key FROM state WHERE service_name = 'LashGroup' AND service_key = {quote(key)}"
    assert stack.sql(kept) == []
    # What the open journaled: it read its record and answered the refusal; it wrote and sent nothing.
    journal = (
        "SELECT j.entry_type FROM sys_journal j JOIN sys_invocation i ON j.id = i.id "
        "WHERE i.target_service_name = 'LashGroup' AND i.target_handler_name = 'open_parts' "
        f"AND i.target_service_key = {quote(key)} ORDER BY j.index"
    )
    commands = [row["entry_type"] for row in stack.sql(journal) if row["entry_type"].startswith("Command")]
    assert commands == [
        "Command: Input",
        "Command: GetLazyState",
        "Command: CompleteAwakeable",
        "Command: Output",
    ]


async def test_a_reopen_of_a_baseline_group_carrying_a_child_its_shape_does_not_name_is_refused_typed(
    stack: LocalStack,
) -> None:
    """A group the baseline release opened kept no missed children, so a reopen of it runs again the
    children the reopen carries. One sent by another handler of the cluster (the ingress refuses
    it; a handler's send is not) carrying a child its fenced shape does not name, or no envelope at
    all, is refused on its reply awakeable, running nothing: it ran the forged child, or failed with
    a plain error Restate retried for ever, holding the group's queue."""
    key = f"baseline-{uuid.uuid4()}:group:b:0"

    def one_tool(value: str) -> RuntimeEffectGroup:
        command = ToolCall(tool="echo", args={"value": value})
        child = RuntimeEffectEnvelope(command=command, replay_key=f"{key}/a")
        return RuntimeEffectGroup(
            key, [child], wake=GroupWakePolicy.ALL, disposition=LoserPolicy.RUN_TO_COMPLETION
        )

    shape = one_tool("a").shape()
    # As the baseline recorded it: an incarnation with no mark of a later release.
    meta = GroupMeta(
        child_count=1, wake=shape.wake, disposition=shape.disposition, incarnation=str(uuid.uuid4())
    )
    state = {"meta": list(META.serialize(meta)), "fence": list(SHAPE.serialize(shape))}
    carried = {
        "another child": canonical_bytes(one_tool("b").children[0]),
        "no envelope": b'{"not": "an envelope"}',
    }
    async with httpx.AsyncClient(verify=tls(), timeout=30) as client:
        written = await client.post(
            f"{stack.server.admin_url}/services/LashGroup/state", json={"object_key": key, "new_state": state}
        )
        assert written.status_code == 202, written.text
        try:
            for what, child in carried.items():
                request = {
                    "shape": msgspec.to_builtins(shape),
                    "children": [base64.b64encode(child).decode()],
                    "reopen_only": True,
                }
                answer = await stack.call(
                    "Forger/open_group", {"key": key, "handler": "open", "open": request}
                )
                assert answer.get("status") == 400, (what, answer)
            opens = (
                "SELECT status, completion_result FROM sys_invocation "
                "WHERE target_service_name = 'LashGroup' AND target_handler_name = 'open' "
                f"AND target_service_key = {quote(key)}"
            )
            ended = await _poll(stack, opens, lambda rows: [r["status"] for r in rows] == ["completed"] * 2)
            assert [r["completion_result"] for r in ended] == ["success"] * 2  # answered, not failed
            ran = f"SELECT id FROM sys_invocation WHERE target_service_key = {quote(key + '/a')}"
            assert stack.sql(ran) == []  # no child was run again
        finally:  # the group written here goes, whatever the test found
            cleared = await client.post(
                f"{stack.server.admin_url}/services/LashGroup/state",
                json={"object_key": key, "new_state": {}},
            )
            assert cleared.status_code == 202, cleared.text


async def test_a_first_open_that_registers_no_wakes_still_keeps_its_watch(stack: LocalStack) -> None:
    """A first open sent by another handler of the cluster with no wakes (every release's caller
    sends some; the field's default is none): the group is recorded, the open answers, and the watch
    of the run it dispatched is kept with the group's watches (a close cancels it), though no guard
    is sent: it did not fail after answering, retried for ever with the group's queue behind it."""
    key = f"forged-{uuid.uuid4()}:group:b:0"
    command = ToolCall(tool="echo", args={"value": "a"})
    child = RuntimeEffectEnvelope(command=command, replay_key=f"{key}/a")
    group = RuntimeEffectGroup(
        key, [child], wake=GroupWakePolicy.ALL, disposition=LoserPolicy.RUN_TO_COMPLETION
    )
    stamped = group.children[0]
    request = {
        "shape": msgspec.to_builtins(group.shape()),
        "children": [base64.b64encode(canonical_bytes(stamped)).decode()],
    }
    answer = await stack.call("Forger/open_group", {"key": key, "handler": "open", "open": request})
    assert answer == {}, answer
    opens = (
        "SELECT status, completion_result FROM sys_invocation WHERE target_service_name = 'LashGroup' "
        f"AND target_handler_name = 'open' AND target_service_key = {quote(key)}"
    )
    [ended] = await _poll(stack, opens, lambda rows: [r["status"] for r in rows] == ["completed"])
    assert ended["completion_result"] == "success", ended
    watches = f"SELECT key FROM state WHERE service_name = 'LashGroup' AND service_key = {quote(key)}"
    kept = {row["key"] for row in stack.sql(watches)}
    assert {"meta", "watches"} <= kept and "guarded" not in kept, kept
    closed = await asyncio.to_thread(
        close_group, stack.server.admin_url, key, force=True, ingress=stack.server.ingress_url
    )
    assert closed.closed, closed
