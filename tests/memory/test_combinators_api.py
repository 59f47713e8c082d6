"""The public combinator functions, including the empty cases that never reach a host."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from lash_restate.combinators import (
    AggregateRejection,
    Combinator,
    FulfilledResult,
    Rejected,
    RejectedResult,
    SuspendedResult,
    all_,
    all_settled,
    any_,
    combine,
    race,
    run_combinator,
    signal_or_deadline,
)
from lash_restate.contract import (
    AwaitEvent,
    EffectGroupDefaults,
    EmptyGroup,
    Err,
    GroupHandle,
    InvalidHandle,
    InvalidInput,
    LoserPolicy,
    Ok,
    RuntimeEffectEnvelope,
    RuntimeEffectGroup,
    Settlement,
    Sleep,
    ToolCall,
    error_from_wire,
)
from lash_restate.memory import MemoryHost
from lash_restate.testing import demo_tools

KEY = "scope:group:batch:0"


def echo(value: object, key: str, delay_ms: int = 0) -> RuntimeEffectEnvelope:
    return RuntimeEffectEnvelope(
        command=ToolCall(tool="echo", args={"value": value, "delay_ms": delay_ms}), replay_key=key
    )


def fail(message: str, key: str) -> RuntimeEffectEnvelope:
    return RuntimeEffectEnvelope(command=ToolCall(tool="fail", args={"message": message}), replay_key=key)


async def test_empty_inputs_resolve_locally_without_a_host() -> None:
    unwired = MemoryHost()  # would raise EffectGroupUnsupported if anything reached it
    assert await all_(unwired, KEY, []) == []
    assert await all_settled(unwired, KEY, []) == []
    # ECMA-262's any([]) rejects with an AggregateError holding no error; an exception group cannot
    # be empty, so it is refused typed (its result says it exactly: see `combine`), with no member.
    with pytest.raises(EmptyGroup, match=r"any\(\[\]\) has no child to succeed") as caught:
        await any_(unwired, KEY, [])
    assert not isinstance(caught.value, AggregateRejection) and caught.value.group_key == KEY
    empty = await combine(unwired, Combinator.ANY, KEY, [])
    assert isinstance(empty, RejectedResult) and empty.reason == ()
    # race([]) never settles in ECMA-262; refused rather than parked forever as a durable await.
    with pytest.raises(EmptyGroup):
        await race(unwired, KEY, [])


async def test_functions_return_or_raise_what_ecma_262_gives() -> None:
    host = MemoryHost(resolver=demo_tools())
    assert await all_(host, "s:group:a:0", [echo(1, "a0"), echo(2, "a1")]) == [1, 2]
    with pytest.raises(Rejected) as rejected:
        await all_(host, "s:group:a:1", [echo(1, "b0", 5_000), fail("bad", "b1")])
    assert rejected.value.settlement.position == 1
    assert await all_settled(host, "s:group:a:2", [fail("x", "c0"), echo(2, "c1")]) == [
        Err(message="x"),
        Ok(value=2),
    ]
    assert await race(host, "s:group:a:3", [echo("slow", "d0", 5_000), echo("fast", "d1")]) == "fast"
    assert await any_(host, "s:group:a:4", [fail("x", "e0"), echo("y", "e1")]) == "y"
    with pytest.raises(AggregateRejection) as aggregate:
        await any_(host, "s:group:a:5", [fail("one", "f0"), fail("two", "f1")])
    assert [e.message for e in aggregate.value.errors] == ["one", "two"]  # type: ignore[union-attr]
    await host.aclose()


async def test_select_returns_the_event_or_the_deadline_and_cancels_the_other() -> None:
    host = MemoryHost(resolver=demo_tools())
    deadline_task = asyncio.create_task(
        signal_or_deadline(
            host, "s:group:sel:0", event="approved", deadline_ms=10_000, replay_key_prefix="s0"
        )
    )
    await asyncio.sleep(0)
    host.store.emit_event("approved", {"by": "ops"})
    assert await deadline_task == ("event", {"by": "ops"})
    assert await signal_or_deadline(
        host, "s:group:sel:1", event="never", deadline_ms=1, replay_key_prefix="s1"
    ) == (
        "deadline",
        None,
    )
    await host.join_child("s1:event")  # the losing event arm was cancelled, not left waiting
    assert "s:group:sel:1" not in host.store.groups
    await host.aclose()


async def test_signal_or_deadline_refuses_a_prefix_that_is_no_string_before_anything_opens() -> None:
    """The prefix is written into each arm's replay key: one that is no string is refused, typed,
    where it was made text (``None`` became the key ``"None:event"``)."""
    host = MemoryHost(resolver=demo_tools())
    with pytest.raises(InvalidInput, match="replay_key_prefix must be a string, not NoneType"):
        await signal_or_deadline(
            host,
            "s:group:sel:2",
            event="e",
            deadline_ms=1,
            replay_key_prefix=None,  # type: ignore[arg-type]  # on purpose
        )
    assert host.store.groups == {}
    await host.aclose()


def test_select_declares_a_two_child_first_group_with_cancel() -> None:
    seen = []

    class Spy(MemoryHost):
        async def open_effect_group(self, group):  # type: ignore[no-untyped-def]
            seen.append(group)
            return await super().open_effect_group(group)

    async def go() -> None:
        host = Spy(resolver=demo_tools())
        await signal_or_deadline(host, "s:group:sel:2", event="e", deadline_ms=0, replay_key_prefix="p")
        await host.aclose()

    asyncio.run(go())
    [group] = seen
    assert group.wake.value == "first"
    assert group.disposition is LoserPolicy.CANCEL
    assert [type(c.command) for c in group.children] == [AwaitEvent, Sleep]


async def test_run_combinator_answers_one_of_three_result_types_with_only_their_own_fields() -> None:
    host = MemoryHost(resolver=demo_tools())

    def group(key: str, kind: Combinator, *children: RuntimeEffectEnvelope) -> RuntimeEffectGroup:
        return RuntimeEffectGroup(key, children, wake=kind.wake, disposition=LoserPolicy.RUN_TO_COMPLETION)

    fulfilled = await run_combinator(
        host, Combinator.ALL, group("s:group:u:0", Combinator.ALL, echo(1, "u0"))
    )
    assert fulfilled == FulfilledResult(group_key="s:group:u:0", order=(0,), value=[1])
    assert fulfilled.status == "fulfilled"

    rejected = await run_combinator(
        host, Combinator.RACE, group("s:group:u:1", Combinator.RACE, fail("bad", "v0"))
    )
    assert isinstance(rejected, RejectedResult)
    assert rejected.status == "rejected"
    assert isinstance(rejected.reason, Settlement)  # all and race: the first rejecting settlement
    assert (rejected.reason.position, rejected.reason.outcome) == (0, Err(message="bad"))

    aggregate = await run_combinator(
        host, Combinator.ANY, group("s:group:u:2", Combinator.ANY, fail("x", "w0"), fail("y", "w1"))
    )
    assert isinstance(aggregate, RejectedResult)
    assert aggregate.reason == (Err(message="x"), Err(message="y"))  # any: outcomes in input order

    suspended = await run_combinator(
        host, Combinator.ALL, group("s:group:u:3", Combinator.ALL, echo(1, "x0")), stop_after=0
    )
    assert isinstance(suspended, SuspendedResult)
    named = suspended.handle.incarnation  # the group the host recorded
    assert suspended == SuspendedResult(
        group_key="s:group:u:3", order=(), handle=GroupHandle("s:group:u:3", 1, 0, incarnation=named)
    )
    assert suspended.status == "suspended"

    shapes = {
        type(r).__name__: {f.name for f in dataclasses.fields(r)} for r in (fulfilled, rejected, suspended)
    }
    assert shapes == {
        "FulfilledResult": {"status", "group_key", "order", "value", "winner"},
        "RejectedResult": {"status", "group_key", "order", "reason"},
        "SuspendedResult": {"status", "group_key", "order", "handle"},
    }
    with pytest.raises(dataclasses.FrozenInstanceError):
        fulfilled.value = [2]  # type: ignore[misc]
    await host.aclose()


async def test_a_combinators_arguments_and_a_defaults_controllers_are_refused_typed() -> None:
    """What an untyped caller may pass raised a plain `AttributeError` or `TypeError` (retried for ever
    inside a Restate handler), or, for a negative ``stop_after``, suspended at once."""
    host = MemoryHost(resolver=demo_tools())
    group = RuntimeEffectGroup(
        "s:group:args:0",
        [RuntimeEffectEnvelope(command=ToolCall(tool="echo", args={"value": 1}), replay_key="a0")],
        wake=Combinator.ALL.wake,
        disposition=LoserPolicy.RUN_TO_COMPLETION,
    )
    bad: list[dict[str, Any]] = [
        {"kind": "all"},
        {"group": None},
        {"handle": "x"},
        {"stop_after": "1"},
        {"stop_after": -1},
    ]
    for given in bad:
        arguments: dict[str, Any] = {"kind": Combinator.ALL, "group": group, **given}
        kind, refused_group = arguments.pop("kind"), arguments.pop("group")
        with pytest.raises(InvalidInput):
            await run_combinator(host, kind, refused_group, **arguments)
    assert "s:group:args:0" not in host.store.groups

    class Unsupported(EffectGroupDefaults):
        pass

    with pytest.raises(InvalidHandle):
        await Unsupported().await_next_settlement("x")  # type: ignore[arg-type]
    with pytest.raises(InvalidHandle):
        await Unsupported().close_effect_group("x")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        await Unsupported().open_effect_group("x")  # type: ignore[arg-type]
    assert error_from_wire('lash-error:{"code": "invalid_input", "message": "m", "position": 1e400}') is None
    await host.aclose()
