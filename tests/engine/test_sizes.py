"""Message-size limits where lash builds a message (issue 18, item 5; decision 46).

Against a real server: a child argument at the limit opens and is answered, one byte past it is
refused typed at open, recording nothing; an outcome at the limit is served and one byte past it
settles ``too_large``, for tool and call children, direct and pumped. Without a server: every message
lash builds stays under the limit for one message at its worst case, and the group reads both child
formats of an open request.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from lash_restate._http import tls
from lash_restate.contract import (
    BODY_LIMIT,
    OUTCOME_LIMIT,
    Call,
    GroupWakePolicy,
    LoserPolicy,
    PayloadTooLarge,
    RuntimeEffectEnvelope,
    RuntimeEffectGroup,
    ToolCall,
    canonical_bytes,
    check_open_size,
    ok_size,
)
from lash_restate.contract._limits import open_size
from lash_restate.engine.caller._controller import WAKE_WINDOW
from lash_restate.engine.group._group_rank import WAIT_REFS
from lash_restate.engine.group._mode import PUMP_SLICE, mode_for
from lash_restate.engine.group._mode_stores import DISPATCH_ALLOWANCE
from lash_restate.engine.pump._pump_common import add_ref
from lash_restate.engine.wire._errors import terminal_status
from lash_restate.engine.wire._messages import (
    BATCH_INLINE_BYTES,
    INLINE_OUTCOME_BYTES,
    ChildRun,
    OpenRequest,
    PumpRun,
    Ref,
    SettleBatch,
    WaitReply,
    decode_open,
    encode,
)
from lash_restate.engine.wire._open_request import _OpenRequestIn
from lash_restate.engine.wire._records import SettlementMode
from lash_restate.inspection import list_open_groups, show_group, sql
from lash_restate.testing import LocalStack
from tests.engine.test_engine import _poll

MiB = 1024 * 1024
LONGEST_KEY = "k" * 512  # the longest replay key an envelope takes
# Restate's ids are under 60 characters (`inv_1…`, `sign_1…`); the sizing allows for far longer ones.
SOME_ID = "sign_1" + "A" * 94


def _envelope(kind: str, key: str, position: int, arg: Any) -> RuntimeEffectEnvelope:
    """A child as `lash.call(...)` / `lash.tool(...)` makes it under ``key``."""
    command: Call | ToolCall = (
        Call(service="DemoCalls", handler="echo_size", arg=arg)
        if kind == "call"
        else ToolCall(tool="echo_size", args=arg)
    )
    return RuntimeEffectEnvelope(command=command, replay_key=f"{key}/{position}")


def _group(key: str, children: list[RuntimeEffectEnvelope]) -> RuntimeEffectGroup:
    # `all_settled` opens under wake All, disposition RunToCompletion
    return RuntimeEffectGroup(
        key, children, wake=GroupWakePolicy.ALL, disposition=LoserPolicy.RUN_TO_COMPLETION
    )


def _largest(kind: str, key: str) -> int:
    """The longest string a one-child group under ``key`` may carry (by bisection)."""
    low, high = 0, BODY_LIMIT
    while low < high:
        mid = (low + high + 1) // 2
        try:
            check_open_size(_group(key, [_envelope(kind, key, 0, "x" * mid)]))
            low = mid
        except PayloadTooLarge:
            high = mid - 1
    return low


def _request(group: RuntimeEffectGroup, wakes: int = WAKE_WINDOW) -> OpenRequest:
    """The open request the controller builds for ``group``."""
    return OpenRequest(
        reply_to=SOME_ID,
        shape=group.shape(),
        children=[canonical_bytes(c) for c in group.children],
        caller="inv_1" + "B" * 95,
        wakes=[SOME_ID] * wakes,
    )


# -- without a server ------------------------------------------------------------------------------


def test_the_open_request_is_never_larger_than_its_sizing_says() -> None:
    key = f"{uuid.uuid4()}:group:b:0"
    largest = _largest("call", key)
    at_limit = _group(key, [_envelope("call", key, 0, "x" * largest)])
    encoded = len(encode(_request(at_limit)))
    assert encoded <= BODY_LIMIT
    # Wide, with the longest keys: the shape's share is sized too.
    wide = RuntimeEffectGroup(
        key,
        [
            RuntimeEffectEnvelope(command=ToolCall(tool="echo", args=p), replay_key=f"{LONGEST_KEY[:500]}{p}")
            for p in range(2000)
        ],
        wake=GroupWakePolicy.ALL,
        disposition=LoserPolicy.RUN_TO_COMPLETION,
    )
    shape = msgspec.json.encode(wide.shape())
    carried = [4 * ((len(canonical_bytes(c)) + 2) // 3) + 3 for c in wide.children]
    assert len(encode(_request(wide))) <= open_size(shape, carried)


def test_the_open_request_costs_a_third_over_the_argument_and_its_dispatch_none() -> None:
    """What docs/performance.md reports: format 1 carries each child base64-encoded in the open."""
    key = f"{uuid.uuid4()}:group:b:0"
    for size in (MiB, 8 * MiB, 20 * MiB):
        group = _group(key, [_envelope("call", key, 0, "x" * size)])
        assert 1.33 < len(encode(_request(group))) / size < 1.34
        child = ChildRun(envelope=group.children[0], incarnation=str(uuid.uuid4()))
        assert 1.0 < len(encode(child)) / size < 1.001


def test_the_group_reads_children_as_base64_strings_and_as_raw_envelopes() -> None:
    """Format 1 (written by this release and the baseline) and format 2 (read only, for now)."""
    key = f"{uuid.uuid4()}:group:b:0"
    group = _group(key, [_envelope("call", key, 0, {"a": [1, 2]}), _envelope("tool", key, 1, "é")])
    request = _request(group)
    format_1 = encode(request)
    assert b'"children":["' in format_1  # base64 strings
    children = b",".join(canonical_bytes(c) for c in group.children)
    head, _, tail = format_1.partition(b'"children":[')
    format_2 = head + b'"children":[' + children + tail[tail.index(b"]") :]
    assert b'"children":[{' in format_2
    assert decode_open(format_1) == request
    assert decode_open(format_2) == request
    # A field a later release added is read past, as every engine record is (decision 42).
    assert decode_open(format_1.replace(b'"reply_to"', b'"added":1,"reply_to"')) == request


def test_the_groups_reader_of_an_open_request_reads_every_field_a_caller_writes() -> None:
    """The group reads an open through a struct of its own (its children in either format): a field
    added to `OpenRequest` and not to that reader would be dropped as unknown, with no error."""
    assert _OpenRequestIn.__struct_fields__ == OpenRequest.__struct_fields__
    key = f"{uuid.uuid4()}:group:b:0"
    every = msgspec.structs.replace(
        _request(_group(key, [_envelope("tool", key, 0, "a")])),
        caller="inv_1caller",
        wakes=["sign_1wake"],
        reopen_only=True,
        window=3,
        reopens="inc-1",
    )
    assert decode_open(encode(every)) == every


def test_the_group_refuses_a_raw_child_its_dispatch_could_not_carry() -> None:
    """A format-2 child fits the open 1:1, so the group sizes its own dispatch (ChildRun, PumpRun)."""
    key = f"{uuid.uuid4()}:group:b:0"
    small = _envelope("call", key, 0, "x")
    with pytest.raises(PayloadTooLarge) as direct:
        mode_for(SettlementMode.DIRECT).check_fits(key, [small, small], [10, BODY_LIMIT])
    assert direct.value.position == 1
    with pytest.raises(PayloadTooLarge) as pumped:
        mode_for(SettlementMode.PUMPED).check_fits(key, [small] * 3, [12 * MiB] * 3)
    assert pumped.value.position == 2
    mode_for(SettlementMode.PUMPED).check_fits(key, [small] * 2, [12 * MiB] * 2)
    assert terminal_status(direct.value) == 413  # how the group's refusal reaches the opener
    # The pump's run reckons each child as its bytes and the comma after it in the run's list: the
    # largest group it carries is accepted to the byte, one byte more is refused.
    room = BODY_LIMIT - len(key) - DISPATCH_ALLOWANCE
    sizes = [room // 3 - 1, room // 3 - 1, room - 2 * (room // 3) - 1]
    mode_for(SettlementMode.PUMPED).check_fits(key, [small] * 3, sizes)
    with pytest.raises(PayloadTooLarge) as over:
        mode_for(SettlementMode.PUMPED).check_fits(key, [small] * 3, [*sizes[:2], sizes[2] + 1])
    assert over.value.position == 2


def test_settle_batches_and_wait_replies_stay_under_the_limit_at_their_worst() -> None:
    """Budgeted already (decisions 15, 20, 36): verified at each one's largest."""
    inline = b"x" * INLINE_OUTCOME_BYTES
    carried = BATCH_INLINE_BYTES // INLINE_OUTCOME_BYTES
    refs = [
        Ref(position=p, replay_key=LONGEST_KEY, outcome=inline if p < carried else None)
        for p in range(PUMP_SLICE)
    ]
    batch = SettleBatch(incarnation=str(uuid.uuid4()), mode=SettlementMode.PUMPED, refs=refs)
    assert len(encode(batch)) < BODY_LIMIT // 8
    served = [Ref(position=p, replay_key=LONGEST_KEY) for p in range(WAIT_REFS)]
    assert len(encode(WaitReply(refs=served, incarnation=str(uuid.uuid4())))) < BODY_LIMIT // 8
    woken = WaitReply(refs=[Ref(position=0, replay_key=LONGEST_KEY, outcome=inline)])
    assert len(encode(woken)) < BODY_LIMIT // 8
    # A pump's run carries what the open carried, without base64: it fits whenever the open did.
    key = f"{uuid.uuid4()}:group:b:0"
    group = _group(key, [_envelope("call", key, 0, "x" * _largest("call", key))])
    run = PumpRun(group_key=key, children=list(group.children), incarnation=str(uuid.uuid4()))
    assert len(encode(run)) < len(encode(_request(group)))


def test_a_pumps_report_carries_outcomes_up_to_each_budget_to_the_byte() -> None:
    """What a pump's report carries inline (`add_ref`): an outcome of at most 16 KiB, while the batch
    carries at most 1 MiB in all, each bound taken whole; past either, the ref alone (the reader
    fetches the outcome from the pump's store)."""
    refs: list[Ref] = []
    inline = 0
    at_most = b"x" * INLINE_OUTCOME_BYTES
    for position in range(BATCH_INLINE_BYTES // INLINE_OUTCOME_BYTES + 1):
        inline = add_ref(refs, position, f"r{position}", at_most, inline)
    assert [ref.outcome is not None for ref in refs[-2:]] == [True, False]  # the last that fits, then none
    assert inline == BATCH_INLINE_BYTES
    one_past: list[Ref] = []
    assert add_ref(one_past, 0, "r", at_most + b"x", 0) == 0 and one_past[0].outcome is None


# -- against a real server -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sizes_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    base = tmp_path_factory.mktemp("sizes")
    with LocalStack.single(base, module="tests.engine.sizes_app", endpoint_args=()).start() as stack:
        yield stack


async def _recorded(stack: LocalStack, key: str) -> list[dict[str, Any]]:
    query = f"SELECT id FROM sys_invocation WHERE target_service_key = '{key}'"
    return await asyncio.to_thread(sql, stack.admin_url, query)


@pytest.mark.parametrize("kind", ["call", "tool"])
async def test_a_child_argument_at_the_limit_is_answered_and_one_byte_past_it_is_refused_at_open(
    sizes_stack: LocalStack, kind: str
) -> None:
    stack = sizes_stack
    key = f"{uuid.uuid4()}:group:at:0"
    largest = _largest(kind, key)
    assert largest > 23 * MiB  # three quarters of 32 MiB, less headroom
    fits = await stack.call("Sizes/arguments", {"kind": kind, "sizes": [largest], "key": key}, within=180)
    assert fits == {"outcomes": [{"type": "ok", "size": largest}]}

    past = f"{uuid.uuid4()}:group:past:0"
    over = _largest(kind, past) + 1
    spec = {"kind": kind, "sizes": [5, over], "key": past}
    answers = [await stack.call("Sizes/arguments", spec, within=120) for _ in range(2)]
    assert answers[0] == answers[1]  # nothing was recorded: the second open is refused identically
    refused = answers[0]["refused"]
    assert (refused["code"], refused["position"], refused["group_key"]) == ("too_large", 1, past)
    assert f"limit of {BODY_LIMIT} bytes" in refused["message"]
    assert await asyncio.to_thread(show_group, stack.admin_url, past) is None
    assert await _recorded(stack, past) == []  # no group invocation, no child


async def test_an_open_carrying_a_child_no_release_builds_is_refused_typed_not_retried(
    sizes_stack: LocalStack,
) -> None:
    """A sleep of 2.5 ms, as an earlier release's caller could open one (its `Sleep` took a float):
    the group refuses the open, naming what is wrong, where it failed the open and Restate retried
    it until it paused, the caller waiting for ever."""
    key = f"{uuid.uuid4()}:group:float:0"
    refused = (await sizes_stack.call("Sizes/fractional_sleep", key, within=60))["refused"]
    assert (refused["code"], refused["group_key"], refused["position"]) == ("invalid_envelope", key, 0)
    assert "duration_ms" in refused["message"], refused
    assert await asyncio.to_thread(show_group, sizes_stack.admin_url, key) is None


async def test_a_28_mib_argument_is_refused_at_open_instead_of_retried_forever(
    sizes_stack: LocalStack,
) -> None:
    """Issue 18: the open of this call child, about 37 MiB as format 1 carries it, was refused by the
    server at every retry of the caller; now the caller refuses it before anything is sent."""
    key = f"{uuid.uuid4()}:group:issue:0"
    spec = {"kind": "call", "sizes": [28 * MiB], "key": key}
    refused = (await sizes_stack.call("Sizes/arguments", spec, within=60))["refused"]
    assert (refused["code"], refused["position"]) == ("too_large", 0)
    [stamped] = _group(key, [_envelope("call", key, 0, "x" * 28 * MiB)]).children  # as the open carries it
    assert f"child 0 is {len(canonical_bytes(stamped))} bytes encoded" in refused["message"]
    assert await _recorded(sizes_stack, key) == []


async def test_children_that_fit_alone_but_not_together_are_refused_naming_the_first_past_it(
    sizes_stack: LocalStack,
) -> None:
    key = f"{uuid.uuid4()}:group:many:0"
    spec = {"kind": "call", "sizes": [8 * MiB] * 4, "key": key}
    refused = (await sizes_stack.call("Sizes/arguments", spec, within=120))["refused"]
    # In parts (raw JSON, 8 MiB each) three fit a message; the fourth is the first past it.
    assert (refused["code"], refused["position"]) == ("too_large", 3)
    assert "the open request is" in refused["message"] and "the part from child 0" in refused["message"]
    assert await _recorded(sizes_stack, key) == []


@pytest.mark.timeout(300)  # four messages of 32 MiB through one server, sharing two cores
@pytest.mark.slow
async def test_an_outcome_at_the_limit_is_served_and_one_byte_past_it_settles_too_large(
    sizes_stack: LocalStack,
) -> None:
    """Tools through a pump (three children), calls one per group: lash's `Ok` wrapping and the bulk
    read's array are sized, so an answer near the limit never becomes a message over it. The pump
    then keeps 44 MiB of outcomes, more than Restate lets one invocation load as eager state. (The
    third tool answers only once the first two are ranked, and each call has a group of its own: an
    invocation that has more than 32 MiB of results in flight at once may stall on Restate 1.7,
    natively too, which is not what this test is about; a group's pump receives every call's answer,
    decision 61.)"""
    at = OUTCOME_LIMIT - ok_size(2)  # a string of `at` characters is an Ok of OUTCOME_LIMIT bytes
    too_large = {"type": "err", "code": "too_large"}
    key = f"{uuid.uuid4()}:group:results:0"
    gate = sizes_stack.base_dir / f"gate-{uuid.uuid4()}"
    spec = {"kind": "tool", "sizes": [at, at + 1, 12 * MiB], "key": key, "after": str(gate)}
    tools_answer = asyncio.create_task(sizes_stack.call("Sizes/results", spec, within=300))
    async with asyncio.timeout(240):
        while True:
            if await asyncio.to_thread(_ranked, sizes_stack, key) >= 2:
                break
            await asyncio.sleep(0.2)  # the admin API is polled: it has nothing to await
    gate.touch()
    tools = await tools_answer
    calls = [
        outcome
        for n in (at, at + 1)
        for outcome in await sizes_stack.call("Sizes/results", {"kind": "call", "sizes": [n]}, within=300)
    ]
    for answered in (tools, calls):
        assert answered[0] == {"type": "ok", "size": at}
        assert {k: answered[1][k] for k in ("type", "code")} == too_large
        assert f"result of {OUTCOME_LIMIT + 1} bytes" in answered[1]["message"]
    assert tools[2] == {"type": "ok", "size": 12 * MiB}


# A quarter of Restate's default per-invocation memory limit (32 MiB): results that add up past it
# show at a third of the bytes, so the test costs the suite a third of its CPU.
MEMORY_LIMIT = {"RESTATE_WORKER__INVOKER__PER_INVOCATION_MEMORY_LIMIT": "8 MiB"}


@pytest.mark.timeout(300)  # 31 MiB through a server of its own, sharing two cores
@pytest.mark.slow
async def test_a_group_whose_outcomes_add_up_to_more_than_an_invocation_may_hold_is_read_in_full(
    tmp_path: Path,
) -> None:
    """100 outcomes of 320 KiB (31 MiB in all) of a pumped group, read by its caller in bulk (a
    user's trial, there 96 MiB under the default limit): each read asked the pumps for up to 30
    MiB, and a caller whose answers came near what Restate lets one invocation have in flight
    stalled and never answered, where a native `gather` of the same results answered in seconds.
    Its reads ask for 4 MiB now (here: 5 s; with reads of 30 MiB, no answer in 120 s)."""
    size = 320 * 1024
    app = LocalStack.single(
        tmp_path, module="tests.engine.sizes_app", endpoint_args=(), server_env=MEMORY_LIMIT
    )
    with app.start() as stack:
        answer = await stack.call("Sizes/results", {"kind": "tool", "sizes": [size] * 100}, within=120)
    assert answer == [{"type": "ok", "size": size}] * 100


def _ranked(stack: LocalStack, key: str) -> int:
    """How many ranks the open group ``key`` holds (0 while it is not recorded)."""
    return next((g.settled for g in list_open_groups(stack.admin_url) if g.group_key == key), 0)


@pytest.mark.timeout(300)  # its waits add up past the default 120 s on a busy machine
async def test_a_callee_whose_own_result_is_over_the_limit_is_retried_by_restate_not_by_lash(
    sizes_stack: LocalStack,
) -> None:
    """As for a native caller: the callee's output is refused by the server (RT0003) and Restate retries
    the callee (pausing it once its retry policy gives up); the group's pump waits on it, retrying
    nothing, and settles the callee's end once an operator kills it."""
    stack = sizes_stack
    # Its answer can only come after the kill below: its wait is bounded from there, not from here
    # (the retries before it take as long as the machine takes to make 33 MiB three times).
    answer = asyncio.create_task(
        stack.call("Sizes/results", {"kind": "call", "sizes": [33 * MiB]}, within=3600)
    )
    [callee] = await _poll(
        stack,
        "SELECT id, last_failure_error_code AS code FROM sys_invocation "
        "WHERE target = 'DemoCalls/blob' AND status != 'completed' AND retry_count >= 3",
        lambda rows: len(rows) == 1,
        within=90,
    )
    assert callee["code"] == "RT0003"  # the server's "hit message size limit"
    children = await asyncio.to_thread(
        sql,
        stack.admin_url,
        "SELECT retry_count FROM sys_invocation WHERE target_service_name = 'LashPump' "
        "AND status != 'completed'",
    )
    assert [int(c["retry_count"] or 0) for c in children] == [1]  # its first attempt, never retried
    async with httpx.AsyncClient(verify=tls()) as client:
        killed = await client.patch(f"{stack.server.admin_url}/invocations/{callee['id']}/kill")
        assert killed.status_code in (200, 202), killed.text
    assert await asyncio.wait_for(answer, 60) == [{"type": "err", "code": "409", "message": "killed"}]
