"""The reference host's child runners: who runs a child, when it is run again, and when it stops.

A child runs at most once per live process (ADR, "a reopen resolves only what it
dispatches"): a reopen or a drain dispatches only children that have neither
settled nor a live runner, and each dispatch runs the executor the resolver
just gave. A crash returns once the process's runners are gone.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from lash_restate.contract import (
    AwaitCancelled,
    Cancelled,
    EffectGroupUnsupported,
    Err,
    GroupHandle,
    GroupNotOpen,
    InvalidEnvelope,
    LashError,
    LoserPolicy,
    Ok,
    RuntimeEffectEnvelope,
    Sleep,
    ToolFailure,
)
from lash_restate.memory import MemoryHost, MemoryStore
from lash_restate.testing import demo_tools
from lash_restate.tools import ToolRegistry
from tests.memory.builders import KEY, group, tool, wait


class Gated:
    """A `work` tool that records each start and each stop, and finishes only once ``gate`` is set."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.started: list[Any] = []
        self.stopped: list[Any] = []
        self.registry = ToolRegistry()
        self.registry.register("work", self._work)

    async def _work(self, args: Any) -> Any:
        self.started.append(args)
        try:
            await self.gate.wait()
            return args
        finally:
            self.stopped.append(args)


async def test_a_reopen_or_a_drain_does_not_start_a_child_whose_runner_is_live() -> None:
    tools = Gated()
    host = MemoryHost(resolver=tools.registry)
    g = group(tool("work", "r0", "a"))
    handle = await host.open_effect_group(g)
    await host.open_effect_group(g)  # the same caller reopens (a retried open) while r0 still runs
    report = host.drain()
    assert (report.dispatched, report.cancelled, report.no_executor) == ([], [], [])
    tools.gate.set()
    await host.join_child("r0")
    assert tools.started == ["a"]  # one run, not two
    assert (await host.await_next_settlement(handle)).outcome == Ok(value="a")
    await host.aclose()


@pytest.mark.parametrize("disposition", list(LoserPolicy))
async def test_the_drain_leaves_settled_children_alone(disposition: LoserPolicy) -> None:
    store = MemoryStore()
    first = MemoryHost(store, demo_tools())
    g = group(tool("echo", "r0", {"value": 1}), wait("never", "r1"), disposition=disposition)
    handle = await first.open_effect_group(g)
    await first.join_child("r0")
    await first.crash()
    second = MemoryHost(store, demo_tools())
    report = second.drain()
    if disposition is LoserPolicy.CANCEL:
        assert (report.cancelled, report.dispatched) == ([(KEY, 1)], [])
    else:
        assert (report.cancelled, report.dispatched) == ([], [(KEY, 1)])
    assert (await second.await_next_settlement(handle)).outcome == Ok(value=1)  # rank 1 is untouched
    await second.aclose()


@pytest.mark.parametrize("resume", ["reopen", "drain"])
async def test_a_reopen_and_a_drain_run_the_executor_they_resolved(resume: str) -> None:
    # With a single attempt allowed, the child succeeds only if its one dispatch runs a real executor.
    store = MemoryStore()
    first = MemoryHost(store, demo_tools())
    g = group(tool("echo", "r0", {"value": "x"}))
    handle = await first.open_effect_group(g)
    await first.crash()  # before the runner ever ran: r0 is unsettled
    assert store.groups[KEY].outcomes == {}
    second = MemoryHost(store, demo_tools(), max_attempts=1)
    if resume == "reopen":
        await second.open_effect_group(g)
    else:
        assert second.drain().dispatched == [(KEY, 0)]
    await second.join_child("r0")
    assert (await second.await_next_settlement(handle)).outcome == Ok(value="x")
    await second.aclose()


async def test_a_crash_returns_once_its_runners_have_stopped() -> None:
    tools = Gated()
    store = MemoryStore()
    host = MemoryHost(store, tools.registry)
    await host.open_effect_group(group(tool("work", "r0", "a"), tool("work", "r1", "b")))
    for _ in range(10):  # a few loop turns for both runners to start; no wall clock involved
        if len(tools.started) == 2:
            break
        await asyncio.sleep(0)
    assert tools.started == ["a", "b"]
    await host.crash()
    assert sorted(tools.stopped) == ["a", "b"]  # nothing of the dead process runs on
    assert store.groups[KEY].live == set()
    assert store.groups[KEY].outcomes == {}  # and a dead process records nothing


async def test_a_crash_leaves_alone_a_child_another_process_now_runs() -> None:
    """A process's runner that ended without settling its child (a transient fault, and no runner for
    the retry) is no longer its own: once another process runs that child, the first one's crash
    does not mark it unowned, so a drain does not start a second runner for it."""

    class Once:
        def __init__(self) -> None:
            self.registry, self.resolved = ToolRegistry({"work": self.flaky}), 0

        async def flaky(self, args: Any) -> Any:
            raise ConnectionError("try again")

        def resolve(self, envelope: Any) -> Any:
            self.resolved += 1
            return self.registry.resolve(envelope) if self.resolved == 1 else None

    store = MemoryStore()
    first = MemoryHost(store, Once())
    g = group(tool("work", "r0", "a"))
    await first.open_effect_group(g)
    await first.join_child("r0")
    assert store.groups[KEY].outcomes == {} and store.groups[KEY].live == set()
    tools = Gated()
    second = MemoryHost(store, tools.registry)
    handle = await second.open_effect_group(g)  # another process resumes: r0 runs there now
    await first.crash()
    report = second.drain()
    assert (report.dispatched, report.cancelled, report.no_executor) == ([], [], [])
    tools.gate.set()
    await second.join_child("r0")
    assert tools.started == ["a"]  # one run in the live process, not two
    assert (await second.await_next_settlement(handle)).outcome == Ok(value="a")
    await second.aclose()


async def test_a_cancel_close_of_a_group_with_a_child_nobody_runs_closes_cleanly() -> None:
    # The deployment lost the tool: the reopen leaves r1 unsettled with no runner, and close(Cancel)
    # has nothing to cancel for it.
    store = MemoryStore()
    first = MemoryHost(store, demo_tools())
    g = group(
        wait("e", "r0"), tool("echo", "r1", {"value": 1, "delay_ms": 60_000}), disposition=LoserPolicy.CANCEL
    )
    handle = await first.open_effect_group(g)
    await first.crash()
    narrow = MemoryHost(store, ToolRegistry())
    await narrow.open_effect_group(g)
    await narrow.close_effect_group(handle)
    assert KEY not in store.groups
    await narrow.aclose()


# -- awaiting: a close, a cancel, and a settlement racing each other ---------------------------------


async def test_an_await_on_a_group_another_caller_closes_is_refused_as_closed() -> None:
    host = MemoryHost(resolver=demo_tools())
    handle = await host.open_effect_group(group(wait("never", "r0")))
    waiting = asyncio.create_task(host.await_next_settlement(handle))
    await asyncio.sleep(0)  # let the await park on the group
    await host.close_effect_group(GroupHandle(KEY, 1, 0))
    with pytest.raises(GroupNotOpen) as caught:
        await waiting
    assert caught.value.wire_body() == {
        "code": "group_not_open",
        "message": "the group was closed while awaiting",
        "group_key": KEY,
    }
    assert handle.consumed == 0
    await host.aclose()


async def test_a_cancel_that_does_not_fire_neither_stops_the_await_nor_outlives_it() -> None:
    host = MemoryHost(resolver=demo_tools())
    handle = await host.open_effect_group(group(wait("go", "r0")))
    released: list[str] = []

    async def never() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            released.append("cancel waiter")

    waiting = asyncio.create_task(host.await_next_settlement(handle, cancel=never()))
    await asyncio.sleep(0)
    host.store.emit_event("go", "G")
    settlement = await waiting
    assert (settlement.rank, settlement.outcome) == (1, Ok(value="G"))
    for _ in range(10):  # a few loop turns for the cancelled waiter to unwind; no wall clock involved
        if released:
            break
        await asyncio.sleep(0)
    assert released == ["cancel waiter"]
    await host.aclose()


async def test_a_rank_recorded_when_the_cancel_fires_is_served_not_refused() -> None:
    store = MemoryStore()
    first = MemoryHost(store, demo_tools())
    handle = await first.open_effect_group(group(wait("never", "r0"), disposition=LoserPolicy.CANCEL))
    await first.crash()
    second = MemoryHost(store, demo_tools())
    cancel = asyncio.Event()
    waiting = asyncio.create_task(second.await_next_settlement(handle, cancel=cancel.wait()))
    await asyncio.sleep(0)  # parked on rank 1
    cancel.set()
    second.drain()  # records rank 1 (the declared Cancel) in the same turn of the loop
    settlement = await waiting
    assert (settlement.rank, settlement.outcome) == (1, Cancelled())
    assert handle.consumed == 1


async def test_a_cancelled_await_names_the_rank_and_the_group() -> None:
    host = MemoryHost(resolver=demo_tools())
    handle = await host.open_effect_group(group(wait("never", "r0")))
    fired = asyncio.get_running_loop().create_future()
    fired.set_result(None)
    with pytest.raises(AwaitCancelled) as caught:
        await host.await_next_settlement(handle, cancel=fired)
    assert caught.value.wire_body() == {
        "code": "await_cancelled",
        "message": "cancelled while awaiting rank 1",
        "group_key": KEY,
    }
    await host.aclose()


# -- what the host answers ---------------------------------------------------------------------------


def test_the_reference_host_runs_effects_concurrently() -> None:
    assert MemoryHost().supports_concurrent_effects() is True


async def test_the_hosts_refusals_name_the_group() -> None:
    unwired = MemoryHost()
    with pytest.raises(EffectGroupUnsupported) as unsupported:
        await unwired.open_effect_group(group(wait("e", "r0")))
    assert unsupported.value.group_key == KEY

    host = MemoryHost(resolver=demo_tools())
    refusals: list[tuple[Any, dict[str, Any]]] = [
        (
            host.await_next_settlement(GroupHandle(KEY, 1, 0)),
            {
                "code": "group_not_open",
                "message": "no such group is recorded (never opened, or closed)",
                "group_key": KEY,
            },
        ),
    ]
    for call, expected in refusals:
        with pytest.raises(LashError) as caught:
            await call
        assert caught.value.wire_body() == expected

    await host.open_effect_group(group(wait("e", "r0"), disposition=LoserPolicy.CANCEL))
    mismatch = {"code": "handle_mismatch", "message": "handle has 2 children, group has 1", "group_key": KEY}
    for call, expected in [
        (host.await_next_settlement(GroupHandle(KEY, 2, 0)), mismatch),
        (host.close_effect_group(GroupHandle(KEY, 2, 0)), mismatch),
        (
            host.close_effect_group(GroupHandle(KEY, 1, 0), LoserPolicy.RUN_TO_COMPLETION),
            {
                "code": "disposition_widening",
                "message": "group declared cancel; close may only narrow it",
                "group_key": KEY,
            },
        ),
        (
            host.open_effect_group(group(wait("e", "r0"))),
            {
                "code": "shape_mismatch",
                "message": "recorded disposition is cancel, reopen passed run_to_completion",
                "group_key": KEY,
            },
        ),
    ]:
        with pytest.raises(LashError) as caught:
            await call
        assert caught.value.wire_body() == expected
    await host.aclose()


# -- the ungrouped path ------------------------------------------------------------------------------


async def test_execute_effect_turns_a_transient_fault_into_its_terminal_at_once() -> None:
    registry = ToolRegistry()

    @registry.tool("down")
    async def down(args: Any) -> Any:
        raise ConnectionError("refused")

    host = MemoryHost(resolver=registry)
    envelope = tool("down", "r0")
    executor = registry.resolve(envelope)
    assert executor is not None
    assert await host.execute_effect(envelope, executor) == Err(
        message="gave up after 1 attempts: ConnectionError: refused", code="retries_exhausted"
    )


async def test_a_tool_value_settles_as_its_json_form_or_as_an_error() -> None:
    # The Restate host journals the value, so its caller reads the JSON form back; the reference host
    # must serve the same (a tuple is a list, a NaN is null), and refuse what has no JSON form.
    registry = ToolRegistry()
    # A lone surrogate (what `json.loads` makes of an answer's "\\ud800") has no UTF-8 form either.
    values: dict[str, Any] = {"pair": (1, "a"), "nan": float("nan"), "odd": object(), "lone": {"n": "\ud800"}}
    itself: list[Any] = []
    itself.append(itself)
    values["itself"] = itself  # holds itself: no JSON form at any depth
    for name, value in values.items():

        async def constant(args: Any, value: Any = value) -> Any:
            return value

        registry.register(name, constant)

    async def refusing(args: Any) -> Any:
        raise ToolFailure("no such \udc00 thing", "E1")

    async def by_status(args: Any) -> Any:
        raise ToolFailure(KeyError("sku"), 404)  # type: ignore[arg-type]  # not text: made text

    registry.register("refusing", refusing)
    registry.register("by_status", by_status)
    values["refusing"] = values["by_status"] = None

    host = MemoryHost(resolver=registry)
    handle = await host.open_effect_group(group(*(tool(name, name) for name in values)))
    outcomes = {s.replay_key: s.outcome for s in [await host.await_next_settlement(handle) for _ in values]}
    assert outcomes["pair"] == Ok(value=[1, "a"])
    assert outcomes["nan"] == Ok(value=None)
    odd = outcomes["odd"]
    assert isinstance(odd, Err)
    assert odd.code == "bad_value"
    assert odd.message.startswith("tool returned a value that is not JSON: ")
    lone = outcomes["lone"]
    assert isinstance(lone, Err) and lone.code == "bad_value" and "surrogates not allowed" in lone.message
    assert outcomes["refusing"] == Err(message="no such \\udc00 thing", code="E1")  # written as its escape
    assert outcomes["by_status"] == Err(message="'sku'", code="404")
    circular = outcomes["itself"]
    assert isinstance(circular, Err) and circular.code == "bad_value", circular
    envelope = tool("pair", "u0")
    executor = registry.resolve(envelope)
    assert executor is not None
    assert await host.execute_effect(envelope, executor) == Ok(value=[1, "a"])  # the ungrouped path too
    await host.aclose()


async def test_a_tool_sees_its_args_as_their_json_form_reads_back() -> None:
    """As the Restate host's child receives them (decoded from the envelope's JSON): a tuple is a list,
    and object keys come sorted, so one executor sees the same args on both hosts."""
    registry = ToolRegistry()
    seen: list[Any] = []

    async def look(args: Any) -> Any:
        seen.append((type(args["p"]).__name__, list(args)))
        return None

    registry.register("look", look)
    host = MemoryHost(resolver=registry)
    handle = await host.open_effect_group(group(tool("look", "r0", {"z": 1, "p": (1, 2)})))
    await host.await_next_settlement(handle)
    assert seen == [("list", ["p", "z"])]
    await host.aclose()


async def test_a_sleep_past_any_timer_sleeps_as_long_as_one_can() -> None:
    """A duration no timer can be set to is the longest sleep, on both hosts (Restate's child sets the
    longest `timedelta`); its runner raised `OverflowError` here, as Restate's child did, retried."""
    host = MemoryHost(resolver=ToolRegistry())
    forever = RuntimeEffectEnvelope(command=Sleep(duration_ms=10**400), replay_key="r0")
    handle = await host.open_effect_group(group(forever, wait("go", "r1")))
    host.store.emit_event("go", 1)
    first = await host.await_next_settlement(handle)
    assert (first.position, first.outcome) == (1, Ok(value=1))
    assert 0 in host.store.groups[KEY].live  # still sleeping
    await host.close_effect_group(handle, LoserPolicy.CANCEL)
    await host.aclose()


def test_an_event_lash_cannot_record_is_refused_where_it_is_emitted_or_rejected() -> None:
    """As Restate's `LashSignal` `emit` and `reject` refuse it (400): a payload that is no JSON value
    lash can record, or a rejection's message that is no text, is refused typed, and nothing is kept
    (kept, it would fail every child waiting on the event)."""
    store = MemoryStore()
    for payload in ({"n": "\ud800"}, [float("nan")], {1, 2}, object()):
        with pytest.raises(InvalidEnvelope, match="event payload"):
            store.emit_event("e", payload)
    for message in ("\udfff", {"why": "no"}, 7):
        with pytest.raises(InvalidEnvelope):
            store.reject_event("e", message)  # type: ignore[arg-type]  # a JSON body need not be text
    assert store.events == {}
    store.emit_event("e", {"text": "ä ☃", "n": [1, 2.5, None]})
    assert store.events == {"e": Ok(value={"text": "ä ☃", "n": [1, 2.5, None]})}
