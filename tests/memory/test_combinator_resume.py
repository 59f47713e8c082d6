"""Combinators over a saved cursor, declared loser dispositions, and the results they hand back.

ADR, "Wake policy is journaled identity": a combinator is a caller-side loop over
durable ranks, so it can stop after any rank, resume from the saved handle in a
fresh invocation, and resume even after it decided but died before its close.
"""

from __future__ import annotations

import asyncio
import copy
import pickle
from typing import Any

import pytest

from lash_restate.combinators import (
    AggregateRejection,
    ChildRejected,
    Combinator,
    FulfilledResult,
    Rejected,
    RejectedResult,
    SuspendedResult,
    any_,
    combine,
    race,
    select,
    signal_or_deadline,
    won,
)
from lash_restate.contract import (
    AwaitEvent,
    Cancelled,
    DispositionWidening,
    EmptyGroup,
    Err,
    GroupHandle,
    GroupKey,
    LoserPolicy,
    RuntimeEffectEnvelope,
    RuntimeEffectGroup,
    Settlement,
    ToolCall,
)
from lash_restate.memory import MemoryHost
from lash_restate.testing import demo_tools

KEY = "scope:group:batch:0"


def wait(name: str) -> RuntimeEffectEnvelope:
    return RuntimeEffectEnvelope(command=AwaitEvent(name=name), replay_key=f"r-{name}")


def echo(value: Any, key: str) -> RuntimeEffectEnvelope:
    return RuntimeEffectEnvelope(command=ToolCall(tool="echo", args={"value": value}), replay_key=key)


def fail(message: str, key: str) -> RuntimeEffectEnvelope:
    return RuntimeEffectEnvelope(command=ToolCall(tool="fail", args={"message": message}), replay_key=key)


async def settle(host: MemoryHost, name: str) -> None:
    host.store.emit_event(name, f"v-{name}")
    await host.join_child(f"r-{name}")


class _EarlierHost(MemoryHost):
    """A host written before a cursor named its group: its reopen takes the group alone."""

    async def reopen_effect_group(self, group: RuntimeEffectGroup) -> GroupHandle:  # type: ignore[override]
        return await super().reopen_effect_group(group)


async def test_a_host_whose_reopen_takes_no_incarnation_still_resumes_a_cursor_that_names_none() -> None:
    """A resume passes the cursor's incarnation only when it names one: a host whose
    `reopen_effect_group` predates it resumes a cursor saved before, as it did."""
    host = _EarlierHost(resolver=demo_tools())
    children = [wait("a"), wait("b")]
    group = RuntimeEffectGroup(
        KEY, children, wake=Combinator.ALL.wake, disposition=LoserPolicy.RUN_TO_COMPLETION
    )
    await host.open_effect_group(group)
    for name in ("b", "a"):
        await settle(host, name)
    done = await combine(host, Combinator.ALL, KEY, children, handle=GroupHandle(KEY, 2, 1))
    assert done == FulfilledResult(group_key=KEY, order=(1, 0), value=["v-a", "v-b"])
    await host.aclose()


async def test_combine_stops_after_a_rank_and_resumes_from_the_handle_it_is_given() -> None:
    host = MemoryHost(resolver=demo_tools())
    children = [wait("a"), wait("b"), wait("c")]
    opened = await host.open_effect_group(
        RuntimeEffectGroup(KEY, children, wake=Combinator.ALL.wake, disposition=LoserPolicy.RUN_TO_COMPLETION)
    )
    for name in ("b", "c", "a"):
        await settle(host, name)
    # Every rank is recorded: only stop_after can make the combinator stop early.

    first = await combine(host, Combinator.ALL, KEY, children, stop_after=1)
    assert isinstance(first, SuspendedResult)
    assert (first.order, first.handle) == ((1,), GroupHandle(KEY, 3, 1, incarnation=opened.incarnation))
    saved = GroupHandle.from_bytes(first.handle.to_bytes())  # what a fresh invocation restores

    second = await combine(host, Combinator.ALL, KEY, children, handle=saved, stop_after=2)
    assert isinstance(second, SuspendedResult)
    assert second.order == (1, 2)
    assert second.handle is saved and saved.consumed == 2  # the caller's own cursor advanced

    done = await combine(host, Combinator.ALL, KEY, children, handle=saved)
    assert done == FulfilledResult(group_key=KEY, order=(1, 2, 0), value=["v-a", "v-b", "v-c"])
    assert saved.consumed == 3
    assert KEY not in host.store.groups
    await host.aclose()


@pytest.mark.parametrize(
    ("kind", "decided_after", "expected"),
    [
        (Combinator.ALL, 2, FulfilledResult(group_key=KEY, order=(1, 0), value=["v-a", "v-b"])),
        (Combinator.RACE, 1, FulfilledResult(group_key=KEY, order=(1,), value="v-b", winner=1)),
    ],
)
async def test_a_resume_after_the_deciding_rank_gives_the_verdict_and_closes(
    kind: Combinator, decided_after: int, expected: FulfilledResult
) -> None:
    # The caller consumed the deciding rank and died before its close: the resume must not await
    # past the ranks it already holds (for `all` there is none left to await).
    host = MemoryHost(resolver=demo_tools())
    group = RuntimeEffectGroup(
        KEY, [wait("a"), wait("b")], wake=kind.wake, disposition=LoserPolicy.RUN_TO_COMPLETION
    )
    handle = await host.open_effect_group(group)
    await settle(host, "b")
    await settle(host, "a")
    for _ in range(decided_after):
        await host.await_next_settlement(handle)
    result = await combine(host, kind, KEY, group.children, handle=handle)
    assert result == expected
    assert handle.consumed == decided_after
    assert KEY not in host.store.groups
    await host.aclose()


@pytest.mark.parametrize(
    ("kind", "first", "expected"),
    [
        (
            Combinator.ALL,
            fail("no", "p1"),
            RejectedResult(
                group_key=KEY,
                order=(1,),
                reason=Settlement(rank=1, position=1, replay_key="p1", outcome=Err(message="no")),
            ),
        ),
        (
            Combinator.ANY,
            echo("yes", "p1"),
            FulfilledResult(group_key=KEY, order=(1,), value="yes", winner=1),
        ),
    ],
    ids=["all", "any"],
)
async def test_a_resume_judges_the_ranks_it_re_reads_from_the_first(
    kind: Combinator, first: RuntimeEffectEnvelope, expected: Any
) -> None:
    # Rank 1 decided `all` (a rejection) or `any` (a success) before the caller died: the resume
    # re-reads it and decides on it, though a later rank would decide otherwise.
    host = MemoryHost(resolver=demo_tools())
    group = RuntimeEffectGroup(
        KEY, [wait("a"), first], wake=kind.wake, disposition=LoserPolicy.RUN_TO_COMPLETION
    )
    handle = await host.open_effect_group(group)
    await host.join_child("p1")
    await settle(host, "a")
    await host.await_next_settlement(handle)
    assert await combine(host, kind, KEY, group.children, handle=handle) == expected
    assert handle.consumed == 1
    await host.aclose()


@pytest.mark.parametrize("kind", [Combinator.RACE, Combinator.ANY], ids=["race", "any"])
async def test_a_resume_past_the_deciding_rank_names_the_child_that_decided(kind: Combinator) -> None:
    """The cursor saved after ranks 1 (a success, which decided) and 2 (a rejection): the resume
    re-reads both, and the winner is rank 1's child, with its value (it was the last consumed: the
    rejection's position, which a typed front door then read the value by)."""
    host = MemoryHost(resolver=demo_tools())
    group = RuntimeEffectGroup(
        KEY, [wait("a"), wait("b")], wake=kind.wake, disposition=LoserPolicy.RUN_TO_COMPLETION
    )
    handle = await host.open_effect_group(group)
    host.store.emit_event("b", "fast")
    await host.await_next_settlement(handle)
    host.store.reject_event("a", "late")
    await host.await_next_settlement(handle)
    result = await combine(host, kind, KEY, group.children, handle=handle)
    assert won(result) == (1, "fast")
    await host.aclose()


@pytest.mark.parametrize("combinator", [race, any_], ids=["race", "any"])
async def test_race_and_any_cancel_their_losers_when_asked(combinator: Any) -> None:
    finished: list[str] = []
    registry = demo_tools()
    gate = asyncio.Event()

    async def slow(args: Any) -> Any:
        await gate.wait()
        finished.append("slow")
        return "slow"

    registry.register("slow", slow)
    host = MemoryHost(resolver=registry)
    children = [
        RuntimeEffectEnvelope(command=ToolCall(tool="slow"), replay_key="loser"),
        echo("fast", "winner"),
    ]
    assert await combinator(host, KEY, children, losers=LoserPolicy.CANCEL) == "fast"
    gate.set()  # the loser would finish now, had it not been cancelled at the close
    await host.join_child("loser")
    assert finished == []
    await host.aclose()


@pytest.mark.parametrize("kind", [Combinator.RACE, Combinator.ANY], ids=["race", "any"])
async def test_on_reject_cancel_narrows_only_a_rejection_so_a_winner_leaves_its_losers_running(
    kind: Combinator,
) -> None:
    finished: list[str] = []
    registry = demo_tools()
    gate = asyncio.Event()

    async def slow(args: Any) -> Any:
        await gate.wait()
        finished.append("slow")
        return "slow"

    registry.register("slow", slow)
    host = MemoryHost(resolver=registry)
    children = [
        RuntimeEffectEnvelope(command=ToolCall(tool="slow"), replay_key="loser"),
        echo("fast", "winner"),
    ]
    won = await combine(host, kind, KEY, children, on_reject=LoserPolicy.CANCEL)
    assert won == FulfilledResult(group_key=KEY, order=(1,), value="fast", winner=1)
    gate.set()  # declared RunToCompletion, and nothing rejected: the loser runs on to its end
    await host.join_child("loser")
    assert finished == ["slow"]
    await host.aclose()


async def test_an_on_reject_that_widens_is_refused_before_the_group_is_opened() -> None:
    """A `Cancel` group asked to let its losers run on once a child rejects: refused unopened, where
    the close refused it once a child had rejected, the verdict lost and the group left open."""
    host = MemoryHost(resolver=demo_tools())
    children = [fail("no", "p0"), echo("yes", "p1")]
    with pytest.raises(DispositionWidening):
        await combine(
            host,
            Combinator.RACE,
            KEY,
            children,
            losers=LoserPolicy.CANCEL,
            on_reject=LoserPolicy.RUN_TO_COMPLETION,
        )
    assert KEY not in host.store.groups
    await host.aclose()


async def test_select_raises_the_rejected_event_as_the_first_settlement() -> None:
    host = MemoryHost(resolver=demo_tools())
    selecting = asyncio.create_task(
        signal_or_deadline(host, KEY, event="approved", deadline_ms=60_000, replay_key_prefix="s")
    )
    await asyncio.sleep(0)  # the select opens its group and parks
    host.store.reject_event("approved", "denied")
    with pytest.raises(Rejected) as caught:
        await selecting
    settlement = caught.value.settlement
    assert (settlement.rank, settlement.position, settlement.replay_key) == (1, 0, "s:event")
    assert settlement.outcome == Err(message="denied", code="rejected")
    await host.join_child("s:deadline")  # the deadline arm was cancelled, not left to run out
    await host.aclose()


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        (Combinator.ALL, FulfilledResult(group_key=KEY, order=(), value=[])),
        (Combinator.ALL_SETTLED, FulfilledResult(group_key=KEY, order=(), value=[])),
        (Combinator.ANY, RejectedResult(group_key=KEY, order=(), reason=())),
    ],
)
async def test_combine_over_no_children_decides_locally_and_names_the_group(
    kind: Combinator, expected: Any
) -> None:
    unwired = MemoryHost()  # would raise EffectGroupUnsupported if anything reached it
    for key in (KEY, GroupKey.parse(KEY)):
        assert await combine(unwired, kind, key, []) == expected


async def test_any_over_no_children_raises_empty_group_saying_why() -> None:
    with pytest.raises(EmptyGroup) as caught:
        await any_(MemoryHost(), KEY, [])
    assert caught.value.wire_body() == {
        "code": "empty_group",
        "message": "any([]) has no child to succeed: it would reject with no error, and an exception "
        "group cannot be empty; check for no children before calling any",
        "group_key": KEY,
    }


async def test_race_over_no_children_is_refused_naming_the_group() -> None:
    with pytest.raises(EmptyGroup) as caught:
        await combine(MemoryHost(), Combinator.RACE, GroupKey.parse(KEY), [])
    assert caught.value.wire_body() == {
        "code": "empty_group",
        "message": "race([]) never settles; refused instead of parking forever",
        "group_key": KEY,
    }


async def test_a_select_rejection_names_the_child_by_its_name() -> None:
    host = MemoryHost(resolver=demo_tools())
    with pytest.raises(Rejected) as rejected:
        await select(host, "s:group:sel:0", {"pay": fail("card declined", "p0"), "later": wait("never")})
    assert rejected.value.name == "pay"
    assert str(rejected.value) == "child 'pay' rejected: card declined"
    assert rejected.value.position == 0
    await host.aclose()


async def test_rejections_read_as_what_rejected() -> None:
    host = MemoryHost(resolver=demo_tools())
    with pytest.raises(Rejected) as rejected:
        await race(host, "s:group:r:0", [fail("card declined", "p0")])
    # A line for a person: the child's message (and code, when it gave one), not a Python repr.
    assert str(rejected.value) == "child 0 rejected: card declined"
    assert (rejected.value.position, rejected.value.replay_key, rejected.value.group_key) == (
        0,
        "p0",
        "s:group:r:0",
    )
    with pytest.raises(AggregateRejection) as aggregate:
        await any_(host, "s:group:r:1", [fail("one", "q0"), fail("two", "q1")])
    assert str(aggregate.value) == "all 2 children rejected (2 sub-exceptions)"
    # Its repr (a log line, a debugger) is an exception group's: the message, then the members.
    assert repr(aggregate.value) == (
        "AggregateRejection('all 2 children rejected', "
        "[ChildRejected('child 0 rejected: one'), ChildRejected('child 1 rejected: two')])"
    )
    assert aggregate.value.group_key == "s:group:r:1"
    # A pickle (a process boundary) or a copy reads the same, whole or split by `except*`.
    again = pickle.loads(pickle.dumps(aggregate.value))
    assert (str(again), again.errors, again.group_key) == (
        "all 2 children rejected (2 sub-exceptions)",
        aggregate.value.errors,
        "s:group:r:1",
    )
    assert str(copy.copy(aggregate.value)) == str(aggregate.value)
    split, _ = aggregate.value.split(lambda e: getattr(e, "position", None) == 1)
    assert split is not None
    assert str(pickle.loads(pickle.dumps(split))) == str(split) == "child 1 rejected (1 sub-exception)"
    # An exception group of one `ChildRejected` per child, in input order (ECMA-262 AggregateError).
    assert [(e.position, e.outcome) for e in aggregate.value.exceptions] == [
        (0, Err(message="one")),
        (1, Err(message="two")),
    ]
    assert aggregate.value.errors == [Err(message="one"), Err(message="two")]
    assert [str(e) for e in aggregate.value.exceptions] == ["child 0 rejected: one", "child 1 rejected: two"]
    assert str(ChildRejected(3, Err(message="full", code="409"))) == "child 3 rejected: full (code 409)"
    assert str(ChildRejected(4, Cancelled())) == "child 4 rejected: cancelled"
    await host.aclose()
