"""Reference-host behaviour that has no Restate counterpart to share a test with.

Capability coherence before wiring, the drain, gap-tolerant ranks, crash and
reopen through the same store, retries through the resolver.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from lash_restate.contract import (
    Cancelled,
    ChildUnroutable,
    DispositionWidening,
    EffectGroupDefaults,
    EffectGroupUnsupported,
    Err,
    GroupHandle,
    GroupNotOpen,
    GroupWakePolicy,
    HandleMismatch,
    InvalidInput,
    LoserPolicy,
    MembershipUnsupported,
    Ok,
    RuntimeEffectEnvelope,
    RuntimeEffectGroup,
    ShapeMismatch,
    Sleep,
    ToolFailure,
)
from lash_restate.memory import MemoryHost, MemoryStore, NoExecutor
from lash_restate.testing import demo_tools
from lash_restate.tools import ToolRegistry
from tests.memory.builders import KEY, group, tool, wait


async def test_unwired_host_refuses_the_whole_surface_and_records_nothing() -> None:
    host = MemoryHost()
    assert host.supports_effect_groups() is False
    g = group(wait("e", "r0"))
    handle = GroupHandle.opened(g)
    for call in (
        host.open_effect_group(g),
        host.await_next_settlement(handle),
        host.close_effect_group(handle),
    ):
        with pytest.raises(EffectGroupUnsupported) as caught:
            await call
        assert caught.value.code == "effect_group_unsupported"
    assert host.store.groups == {}
    # ADR: the answer is "a resolver is registered", so wiring flips it.
    host.register_executors(demo_tools())
    assert host.supports_effect_groups() is True
    assert (await host.open_effect_group(g)).consumed == 0


async def test_out_of_tree_controller_defaults_fail_closed() -> None:
    class Legacy(EffectGroupDefaults):
        pass

    legacy = Legacy()
    g = group(wait("e", "r0"))
    assert legacy.supports_effect_groups() is False
    with pytest.raises(EffectGroupUnsupported):
        await legacy.open_effect_group(g)
    with pytest.raises(EffectGroupUnsupported):
        await legacy.await_next_settlement(GroupHandle.opened(g))
    with pytest.raises(EffectGroupUnsupported):
        await legacy.close_effect_group(GroupHandle.opened(g))


async def test_execute_effect_refuses_a_grouped_envelope_and_runs_an_ungrouped_one() -> None:
    host = MemoryHost(resolver=demo_tools())
    grouped = group(tool("echo", "r0", {"value": 1})).children[0]
    executor = demo_tools().resolve(grouped)
    assert executor is not None
    with pytest.raises(MembershipUnsupported) as caught:
        await host.execute_effect(grouped, executor)
    assert caught.value.position == 0
    plain = tool("echo", "r1", {"value": 7})
    executor = demo_tools().resolve(plain)
    assert executor is not None
    assert await host.execute_effect(plain, executor) == Ok(value=7)


async def test_ranks_are_gap_immune_when_sequence_numbers_are_burned() -> None:
    store = MemoryStore()
    host = MemoryHost(store, demo_tools())
    handle = await host.open_effect_group(group(wait("a", "r0"), wait("b", "r1"), wait("c", "r2")))
    for event in ("b", "a", "c"):
        store.burn_sequence(KEY)  # a rolled-back finalize used up a number (ADR: not gapless)
        store.emit_event(event, event)
        await host.join_child({"a": "r0", "b": "r1", "c": "r2"}[event])
    ranks = [await host.await_next_settlement(handle) for _ in range(3)]
    assert [(s.rank, s.position) for s in ranks] == [(1, 1), (2, 0), (3, 2)]
    assert store.groups[KEY].counter == 6  # three burned, three written: strictly monotonic


async def test_a_resuming_process_reopens_and_redispatches_only_unsettled_children() -> None:
    store = MemoryStore()
    runs: list[str] = []
    registry = ToolRegistry()

    @registry.tool("work")
    async def work(args: Any) -> Any:
        runs.append(args)
        return args

    first = MemoryHost(store, registry)
    g = group(tool("work", "r0", "a"), wait("never", "r1"), wait("later", "r2"))
    saved = await first.open_effect_group(g)
    rank1 = await first.await_next_settlement(saved)
    await first.crash()  # the process dies: r1 and r2 were parked and are gone with it
    store.emit_event("later", "L")

    second = MemoryHost(store, registry)
    await second.open_effect_group(g)  # reopen: same shape, refuses nothing
    await second.join_child("r2")
    assert (await second.await_next_settlement(saved)).position == 2
    restored = GroupHandle(KEY, 3, 0)
    assert await second.await_next_settlement(restored) == rank1  # same rank, same child
    assert runs == ["a"]  # the settled child was not run again


async def test_a_reopen_on_a_host_that_cannot_route_a_child_refuses_nothing_and_leaves_it_visible() -> None:
    """ADR: a reopen resolves only what it dispatches and refuses nothing. After a crash, a host
    whose resolver no longer routes one unsettled child reopens the group: it is not refused, every
    recorded rank is served again, and that child stays unsettled in a group still listed open."""
    store = MemoryStore()
    first = MemoryHost(store, demo_tools())
    g = group(tool("echo", "r0", {"value": "a"}), tool("echo", "r1", {"value": 1, "delay_ms": 60_000}))
    handle = await first.open_effect_group(g)
    rank1 = await first.await_next_settlement(handle)
    await first.crash()  # r1 was running and is gone with the process

    narrow = MemoryHost(store, ToolRegistry())  # routes nothing any more
    reopened = await narrow.open_effect_group(g)
    assert reopened.consumed == 0
    assert await narrow.await_next_settlement(reopened) == rank1
    assert KEY in store.open_group_keys()
    assert 1 not in store.groups[KEY].outcomes and 1 not in store.groups[KEY].live  # unsettled, unowned
    assert narrow.drain().no_executor == [NoExecutor(KEY, 1, "r1")]
    await narrow.aclose()


async def test_drain_applies_the_declared_cancel_to_an_abandoned_group() -> None:
    store = MemoryStore()
    first = MemoryHost(store, demo_tools())
    g = group(wait("x", "r0"), wait("y", "r1"), disposition=LoserPolicy.CANCEL)
    handle = await first.open_effect_group(g)
    await first.crash()  # the caller died before close: no close ever narrows or applies anything
    report = MemoryHost(store, demo_tools()).drain()
    assert report.cancelled == [(KEY, 0), (KEY, 1)]
    assert report.no_executor == []
    drained = [await first.await_next_settlement(handle) for _ in range(2)]
    assert [s.outcome for s in drained] == [Cancelled(), Cancelled()]


async def test_drain_runs_run_to_completion_losers_and_reports_no_executor() -> None:
    store = MemoryStore()
    first = MemoryHost(store, demo_tools())
    g = group(tool("echo", "r0", {"value": 1, "delay_ms": 10_000}), wait("w", "r1"))
    handle = await first.open_effect_group(g)
    await first.crash()

    # A host that cannot run the tool any more: the drain reports it and invents no terminal.
    narrow = MemoryHost(store, ToolRegistry())
    report = narrow.drain()
    assert report.no_executor == [NoExecutor(KEY, 0, "r0")]
    assert report.dispatched == [(KEY, 1)]
    assert 0 not in store.groups[KEY].outcomes
    await narrow.crash()

    # A host with no resolver at all still hands out a drain and reports every child.
    bare = MemoryHost(store)
    assert [n.position for n in bare.drain().no_executor] == [0, 1]

    full = MemoryHost(store, demo_tools())
    store.emit_event("w", "W")
    fixed = full.drain()
    assert fixed.dispatched == [(KEY, 0), (KEY, 1)]
    await full.join_child("r1")
    assert (await full.await_next_settlement(handle)).outcome == Ok(value="W")
    await full.aclose()


async def test_transient_faults_retry_with_a_fresh_executor_then_give_up() -> None:
    attempts: list[int] = []
    registry = ToolRegistry()

    @registry.tool("flaky")
    async def flaky(args: Any) -> Any:
        attempts.append(1)
        if len(attempts) < int(args):
            raise ConnectionError("try again")
        return "done"

    @registry.tool("refuse")
    async def refuse(args: Any) -> Any:
        raise ToolFailure("no", code="E")

    host = MemoryHost(resolver=registry, max_attempts=3)
    handle = await host.open_effect_group(group(tool("flaky", "r0", 3)))
    assert (await host.await_next_settlement(handle)).outcome == Ok(value="done")
    assert len(attempts) == 3

    attempts.clear()
    other = RuntimeEffectGroup(
        "scope:group:batch:1",
        [tool("flaky", "q0", 9), tool("refuse", "q1")],
        wake=GroupWakePolicy.ALL,
        disposition=LoserPolicy.RUN_TO_COMPLETION,
    )
    h2 = await host.open_effect_group(other)
    outcomes = {s.position: s.outcome for s in [await host.await_next_settlement(h2) for _ in range(2)]}
    assert outcomes[0] == Err(
        message="gave up after 3 attempts: ConnectionError: try again", code="retries_exhausted"
    )
    assert outcomes[1] == Err(message="no", code="E")  # a ToolFailure is final, never retried


async def test_close_cancel_stops_a_running_tool() -> None:
    started, finished = asyncio.Event(), []
    registry = ToolRegistry()

    @registry.tool("fast")
    async def fast(args: Any) -> Any:
        return "fast"

    @registry.tool("long")
    async def long(args: Any) -> Any:
        started.set()
        await asyncio.sleep(60)
        finished.append(args)

    host = MemoryHost(resolver=registry)
    g = RuntimeEffectGroup(
        KEY,
        [tool("echo", "r0"), tool("long", "r1")],
        wake=GroupWakePolicy.FIRST,
        disposition=LoserPolicy.RUN_TO_COMPLETION,
    )
    registry.register("echo", fast)
    handle = await host.open_effect_group(g)
    await started.wait()
    assert (await host.await_next_settlement(handle)).position == 0
    await host.close_effect_group(handle, LoserPolicy.CANCEL)  # narrowing RunToCompletion to Cancel
    await host.join_child("r1")
    assert finished == []
    assert KEY not in host.store.groups


async def test_close_cancel_does_not_await_the_losers_termination() -> None:
    """ADR: `close_effect_group(Cancel)` returns once the cancels are issued and does not await the
    losers' termination. The loser here winds down only when the test lets it: the close must have
    returned (and retired the group) while it is still running."""
    started, cancelled, release, stopped = asyncio.Event(), asyncio.Event(), asyncio.Event(), []
    registry = ToolRegistry()

    @registry.tool("fast")
    async def fast(args: Any) -> Any:
        return "fast"

    @registry.tool("stubborn")
    async def stubborn(args: Any) -> Any:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            await release.wait()  # ignores the cancel until released
            stopped.append(args)
            raise

    host = MemoryHost(resolver=registry)
    g = RuntimeEffectGroup(
        KEY,
        [tool("fast", "r0"), tool("stubborn", "r1")],
        wake=GroupWakePolicy.FIRST,
        disposition=LoserPolicy.CANCEL,
    )
    handle = await host.open_effect_group(g)
    await started.wait()
    assert (await host.await_next_settlement(handle)).position == 0
    # A close that awaited the loser would never return here: the loser is released only after it.
    async with asyncio.timeout(10):
        await host.close_effect_group(handle)
    assert KEY not in host.store.groups
    await cancelled.wait()  # the cancel was issued and reached the loser...
    assert stopped == []  # ...which is still running: the close did not wait for it
    release.set()
    await host.join_child("r1")
    assert stopped == [None]


def test_executor_runs_once() -> None:
    executor = demo_tools().resolve(tool("echo", "r", {"value": 1}))
    assert executor is not None
    assert asyncio.run(executor.execute()) == 1
    with pytest.raises(RuntimeError, match="runs once"):
        asyncio.run(executor.execute())


@pytest.mark.parametrize(
    ("call", "code"),
    [
        (lambda h: h.open_effect_group({"key": KEY}), "invalid_input"),
        (lambda h: h.await_next_settlement("scope:group:batch:0"), "invalid_handle"),
        (lambda h: h.close_effect_group(None), "invalid_handle"),
        (lambda h: h.close_effect_group(GroupHandle(KEY, 1, 0), "sometimes"), "invalid_input"),
        (lambda h: h.execute_effect({"command": "x"}, None), "invalid_envelope"),
    ],
)
async def test_wrong_arguments_get_typed_errors(call: Any, code: str) -> None:
    from lash_restate.contract import LashError

    host = MemoryHost(resolver=demo_tools())
    with pytest.raises(LashError) as caught:
        await call(host)
    assert caught.value.code == code
    assert host.store.groups == {}


async def test_refusals_are_the_contract_rules_with_their_messages() -> None:
    host = MemoryHost(resolver=demo_tools())
    with pytest.raises(ChildUnroutable) as unroutable:
        await host.open_effect_group(group(wait("e", "r0"), tool("missing", "r1")))
    assert unroutable.value.wire_body() == {
        "code": "child_unroutable",
        "message": "no executor is registered for tool 'missing'",
        "group_key": KEY,
        "position": 1,
        "replay_key": "r1",
    }
    assert host.store.groups == {}  # refused whole: nothing recorded
    await host.open_effect_group(group(wait("e", "r0"), disposition=LoserPolicy.CANCEL))
    stranger = GroupHandle(KEY, 2, 0)
    for call in (host.await_next_settlement(stranger), host.close_effect_group(stranger)):
        with pytest.raises(HandleMismatch) as mismatch:
            await call
        assert mismatch.value.message == "handle has 2 children, group has 1"
    with pytest.raises(DispositionWidening) as widening:
        await host.close_effect_group(GroupHandle(KEY, 1, 0), LoserPolicy.RUN_TO_COMPLETION)
    assert widening.value.message == "group declared cancel; close may only narrow it"
    assert KEY in host.store.groups  # a refused close closes nothing
    await host.close_effect_group(GroupHandle(KEY, 1, 0))
    with pytest.raises(GroupNotOpen) as gone:
        await host.await_next_settlement(GroupHandle(KEY, 1, 0))
    assert gone.value.message == "no such group is recorded (never opened, or closed)"
    await host.aclose()


async def test_a_routing_miss_on_retry_synthesizes_no_terminal() -> None:
    """ADR: a child with no runner is a routing fact, not an outcome, on a retry as on a reopen:
    the child stays unsettled and the drain reports it as NoExecutor."""

    class LosesItsTool:
        """Routes the child once, then never again (the deployment changed while it ran)."""

        def __init__(self) -> None:
            self.resolved = 0

        def resolve(self, envelope: Any) -> Any:
            self.resolved += 1
            return ToolRegistry({"flaky": flaky}).resolve(envelope) if self.resolved == 1 else None

    attempts: list[Any] = []

    async def flaky(args: Any) -> Any:
        attempts.append(args)
        raise ConnectionError("try again")

    store = MemoryStore()
    resolver = LosesItsTool()
    host = MemoryHost(store, resolver, max_attempts=3)
    await host.open_effect_group(group(tool("flaky", "r0")))
    await host.join_child("r0")
    assert len(attempts) == 1  # the open ran the child with the executor it resolved
    assert resolver.resolved == 2  # the retry asked the resolver again, which had nothing
    assert store.groups[KEY].outcomes == {}  # no Err(retries_exhausted) was invented
    assert host.drain().no_executor == [NoExecutor(KEY, 0, "r0")]
    await host.aclose()


async def test_reopen_continues_a_recorded_group_and_refuses_one_never_opened_or_closed() -> None:
    """A reopen (a saved group resumed) never starts a group over: one not recorded, never opened or
    already closed, is refused as `GroupNotOpen`, recording nothing; a recorded one reopens as an open
    would, fenced on its shape, with the children already run left alone."""
    store = MemoryStore()
    g = group(wait("a", "r0"), wait("b", "r1"))
    unwired = MemoryHost(store)
    with pytest.raises(EffectGroupUnsupported) as unsupported:
        await unwired.reopen_effect_group(g)
    assert unsupported.value.wire_body() == {
        "code": "effect_group_unsupported",
        "message": "no GroupExecutors resolver is registered",
        "group_key": KEY,
    }
    host = MemoryHost(store, resolver=demo_tools())
    with pytest.raises(InvalidInput) as not_a_group:
        await host.reopen_effect_group(GroupHandle.opened(g))  # type: ignore[arg-type]
    assert not_a_group.value.message == "expected a RuntimeEffectGroup, got GroupHandle"
    with pytest.raises(GroupNotOpen) as never:
        await host.reopen_effect_group(g)
    assert never.value.wire_body() == {
        "code": "group_not_open",
        "message": "no such group is recorded (never opened, or closed)",
        "group_key": KEY,
    }
    assert store.groups == {}
    await host.open_effect_group(g)
    store.emit_event("a", 1)
    first = await host.await_next_settlement(GroupHandle.opened(g))
    assert (first.position, first.outcome) == (0, Ok(value=1))
    # Another process resumes it: the reopen answers a fresh cursor on the same record.
    await host.crash()
    resumer = MemoryHost(store, resolver=demo_tools())
    handle = await resumer.reopen_effect_group(g)
    assert (handle.group_key, handle.child_count, handle.consumed) == (KEY, 2, 0)
    assert [store.groups[KEY].outcomes[0]] == [Ok(value=1)] and len(store.groups[KEY].order) == 1
    with pytest.raises(ShapeMismatch):
        await resumer.reopen_effect_group(group(wait("a", "r0")))
    store.emit_event("b", 2)
    ranks = [await resumer.await_next_settlement(handle) for _ in range(2)]
    assert [(s.rank, s.position, s.outcome) for s in ranks] == [(1, 0, Ok(value=1)), (2, 1, Ok(value=2))]
    await resumer.close_effect_group(handle)
    with pytest.raises(GroupNotOpen):
        await resumer.reopen_effect_group(g)
    assert store.groups == {}
    # Opened again under its key: a resume of the closed group's cursor is refused before this one
    # counts the resumer among its openers (decision 124).
    again = await resumer.open_effect_group(g)
    assert again.incarnation is not None and again.incarnation != handle.incarnation
    openers = list(store.groups[KEY].openers)
    with pytest.raises(GroupNotOpen, match="opened again since"):
        await MemoryHost(store, resolver=demo_tools()).reopen_effect_group(g, incarnation=handle.incarnation)
    assert store.groups[KEY].openers == openers
    assert (await resumer.reopen_effect_group(g, incarnation=again.incarnation)) == again
    await resumer.close_effect_group(again)
    await resumer.aclose()


async def test_a_declared_cancel_waits_for_every_caller_and_only_their_own_process_ends_them() -> None:
    """Decision 13: the drain cancels a `Cancel` group's losers once every caller that opened it has
    ended, the latest in failure. A second caller that reopened the group and still runs keeps them,
    whoever failed before it, and another process dying does not end it: only its own process does."""

    class LosesItsTool:
        """Routes the child once; its retry, the reopen and the drain find no runner for it."""

        def __init__(self) -> None:
            self.resolved = 0

        def resolve(self, envelope: Any) -> Any:
            self.resolved += 1
            return ToolRegistry({"flaky": flaky}).resolve(envelope) if self.resolved == 1 else None

    async def flaky(args: Any) -> Any:
        raise ConnectionError("try again")

    store = MemoryStore()
    host = MemoryHost(store, LosesItsTool())
    g = group(tool("flaky", "r0"), disposition=LoserPolicy.CANCEL)

    async def first_caller() -> None:
        await host.open_effect_group(g)
        raise RuntimeError("the first caller failed")

    with pytest.raises(RuntimeError):
        await asyncio.create_task(first_caller())
    await host.join_child("r0")  # unsettled, and no runner left for it
    reopened, gate = asyncio.Event(), asyncio.Event()

    async def second_caller() -> None:
        await host.reopen_effect_group(g)
        reopened.set()
        await gate.wait()

    second = asyncio.create_task(second_caller())
    noted = asyncio.create_task(reopened.wait())
    await asyncio.wait({second, noted}, return_when=asyncio.FIRST_COMPLETED)
    if not noted.done():
        second.result()  # the reopen failed: raise its error rather than wait for it for ever
    await MemoryHost(store, resolver=demo_tools()).crash()  # another process dies
    report = host.drain()
    assert (report.cancelled, report.no_executor) == ([], [NoExecutor(KEY, 0, "r0")])
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second
    report = host.drain()
    assert (report.cancelled, report.no_executor) == ([(KEY, 0)], [])
    assert store.groups[KEY].outcomes == {0: Cancelled()}
    await host.aclose()


def _tools(gate: asyncio.Event) -> ToolRegistry:
    """``echo`` answers its args at once; ``gated`` once ``gate`` is set."""

    async def echo(args: Any) -> Any:
        return args

    async def gated(args: Any) -> Any:
        await gate.wait()
        return args

    return ToolRegistry({"echo": echo, "gated": gated})


async def test_a_deadline_the_caller_awaits_again_is_not_cancelled_by_a_read() -> None:
    """A caller's own future passed as ``cancel`` (one deadline for a whole loop) is only waited on,
    as the Restate host selects on it: a read that ends before it leaves it pending for the next."""
    gate = asyncio.Event()
    host = MemoryHost(MemoryStore(), _tools(gate))
    handle = await host.open_effect_group(group(tool("echo", "r0", 1), tool("gated", "r1", 2)))
    deadline = asyncio.ensure_future(asyncio.Event().wait())  # never set
    first = await host.await_next_settlement(handle, deadline)
    reading = asyncio.create_task(host.await_next_settlement(handle, deadline))
    gate.set()  # the second child settles after the second read began: it ends with it
    second = await reading
    assert (first.outcome, second.outcome) == (Ok(value=1), Ok(value=2))
    assert not deadline.done()
    deadline.cancel()
    await host.aclose()


async def test_an_await_checks_its_cancel_first_and_reads_one_rank_at_a_time() -> None:
    """As the Restate host answers: a ``cancel`` that cannot be awaited is refused before anything
    (it raised a plain `TypeError`); a second await of one handle at once is refused (it served rank
    1 twice and skipped rank 2), a copy's is not; a cancel that failed raises its own error (it was
    taken for a cancellation, its error never retrieved)."""
    gate = asyncio.Event()
    host = MemoryHost(MemoryStore(), _tools(gate))
    handle = await host.open_effect_group(group(tool("gated", "r0", 1), tool("gated", "r1", 2)))
    with pytest.raises(InvalidInput, match="cancel must be an awaitable"):
        await host.await_next_settlement(handle, 5)  # type: ignore[arg-type]
    copy = handle.copy()
    reading = asyncio.create_task(host.await_next_settlement(handle))
    beside = asyncio.create_task(host.await_next_settlement(copy))
    await asyncio.sleep(0)  # both wait on rank 1
    with pytest.raises(InvalidInput, match="already awaited"):
        await host.await_next_settlement(handle)

    async def failing() -> None:
        raise RuntimeError("the deadline's own fault")

    with pytest.raises(RuntimeError, match="the deadline's own fault"):
        await host.await_next_settlement(handle.copy(), failing())
    gate.set()
    assert [(await reading).rank, (await beside).rank, handle.consumed, copy.consumed] == [1, 1, 1, 1]
    assert (await host.await_next_settlement(handle)).rank == 2
    await host.aclose()


async def test_a_cancel_group_whose_caller_was_cancelled_is_drained_though_its_process_lives() -> None:
    """Decision 13 with the opener's task cancelled and its process alive: the drain cancels the
    loser this host still runs, which ranks `Cancelled`, as the Restate host's group cancels its runs
    when it hears its opener end in failure (it ran on, and ranked `Ok`)."""
    host = MemoryHost(MemoryStore(), _tools(asyncio.Event()))
    read = asyncio.Event()
    cancel, first = LoserPolicy.CANCEL, GroupWakePolicy.FIRST
    g = group(tool("echo", "r0", 1), tool("gated", "r1"), wake=first, disposition=cancel)

    async def caller() -> None:
        handle = await host.open_effect_group(g)
        await host.await_next_settlement(handle)
        read.set()
        await host.await_next_settlement(handle)  # parked on the loser

    task = asyncio.create_task(caller())
    await read.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    host.drain()
    await host.join_child("r1")
    assert host.store.groups[KEY].outcomes[1] == Cancelled()
    await host.aclose()


async def test_a_resume_of_a_group_its_failed_opener_severed_before_any_drain_runs_its_loser_again() -> None:
    """A `Cancel` group whose process died with its caller, resumed by the next process before any
    drain: the resumer holds it again (decision 13), so its reopen starts the loser the dead process
    had been running, and the resumer reads it (the reopen started nothing: the read waited for
    ever)."""
    store, gate, read = MemoryStore(), asyncio.Event(), asyncio.Event()
    dead = MemoryHost(store, _tools(gate))
    cancel, first = LoserPolicy.CANCEL, GroupWakePolicy.FIRST
    g = group(tool("echo", "r0", 1), tool("gated", "r1", 2), wake=first, disposition=cancel)
    saved: list[bytes] = []

    async def caller() -> None:
        handle = await dead.open_effect_group(g)
        await dead.await_next_settlement(handle)
        saved.append(handle.to_bytes())
        read.set()
        await dead.await_next_settlement(handle)  # parked on the loser when its process dies

    task = asyncio.create_task(caller())
    await read.wait()
    await dead.crash()
    task.cancel()
    gate.set()
    resumer = MemoryHost(store, _tools(gate))
    await resumer.reopen_effect_group(g)
    served = await asyncio.wait_for(resumer.await_next_settlement(GroupHandle.from_bytes(saved[0])), 30)
    assert (served.position, served.outcome) == (1, Ok(value=2))
    await resumer.aclose()


async def test_a_cancel_close_reaches_the_runners_of_every_host_of_the_store() -> None:
    """A group one host opened and runs, resumed by another host of the same store and closed there
    under `Cancel`: the loser the first host runs is cancelled, as Restate's close cancels every
    child invocation whoever started it (only the closing host's were)."""
    store, gate = MemoryStore(), asyncio.Event()
    opener, resumer = MemoryHost(store, _tools(gate)), MemoryHost(store, _tools(gate))
    g = group(tool("echo", "r0", 1), tool("gated", "r1", 2), wake=GroupWakePolicy.FIRST)
    handle = await opener.open_effect_group(g)
    await opener.await_next_settlement(handle)
    await resumer.reopen_effect_group(g)
    await resumer.close_effect_group(handle, LoserPolicy.CANCEL)
    # Its gate never opens: only the close's cancel ends the first host's runner of the loser.
    await asyncio.wait_for(opener.join_child("r1"), 30)
    assert not gate.is_set()
    await opener.aclose()
    await resumer.aclose()


async def test_a_timer_run_again_after_a_crash_waits_out_only_what_is_left_of_its_first_deadline() -> None:
    """Restate's child journals its timer, so a run again after a crash keeps the first deadline;
    the reference host keeps it in the group's record (it set the timer over for the whole duration,
    so a deadline raced against work lost to work a crash had delayed)."""
    now, read = [0.0], asyncio.Event()

    def clock() -> float:
        read.set()  # only a timer reads it: the first run is setting its deadline
        return now[0]

    store = MemoryStore(clock=clock)
    first = MemoryHost(store, demo_tools())
    timer = RuntimeEffectEnvelope(command=Sleep(duration_ms=600_000), replay_key="r0")
    handle = await first.open_effect_group(group(timer))
    async with asyncio.timeout(10):
        await read.wait()
    assert 0 in store.groups[KEY].deadlines
    await first.crash()
    now[0] += 600  # its deadline passes while no process runs it
    second = MemoryHost(store, demo_tools())
    assert second.drain().dispatched == [(KEY, 0)]
    async with asyncio.timeout(30):  # it waited the whole 600 s again
        settled = await second.await_next_settlement(handle)
    assert settled.outcome == Ok(value=None)
