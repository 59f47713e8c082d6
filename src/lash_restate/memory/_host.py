"""The in-memory reference host: the behavioural definition of the contract.

Durable only for the life of a `MemoryStore` (ADR, "Tier split": in-memory
implements the full observable semantics and stores no journal). A
`MemoryHost` is one process's controller over a store; `crash()` models that
process dying (its child runners vanish without recording anything), and a
second host over the same store models the process that resumes.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import weakref
from collections.abc import Awaitable
from typing import Any, assert_never

from ..contract import (
    AwaitCancelled,
    AwaitEvent,
    Call,
    Cancelled,
    ChildUnroutable,
    Err,
    GroupExecutor,
    GroupExecutors,
    GroupHandle,
    GroupNotOpen,
    LoserPolicy,
    Outcome,
    RuntimeEffectEnvelope,
    RuntimeEffectGroup,
    Settlement,
    Sleep,
    ToolCall,
    Transient,
    canonical_bytes,
    check_await,
    check_child_count,
    check_close,
    check_open_size,
    decode_envelope,
    describe_miss,
    effective_disposition,
    execute_once,
    execute_outcome,
    require_group,
    require_groups,
    require_ungrouped,
    resolve_or_none,
)
from ._store import DrainReport, DurableWait, GroupRecord, MemoryStore, NoExecutor

__all__ = ["KILLED", "DrainReport", "MemoryHost", "MemoryStore", "NoExecutor"]

DEFAULT_MAX_ATTEMPTS = 3
# What a child an operator killed settles as: what Restate answers the caller of a killed callee.
KILLED = Err(message="killed", code="409")


class MemoryHost:
    """The reference controller. Answers `supports_effect_groups()` only once a resolver is registered."""

    _ids = itertools.count(1)

    def __init__(
        self,
        store: MemoryStore | None = None,
        resolver: GroupExecutors | None = None,
        *,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    ) -> None:
        self.store = store if store is not None else MemoryStore()
        self._resolver: GroupExecutors | None = None
        self._max_attempts = max_attempts
        self._tasks: dict[tuple[str, int], asyncio.Task[None]] = {}
        self._runners: dict[asyncio.Task[None], str] = {}
        self._runs_of: dict[asyncio.Task[None], GroupRecord] = {}  # each runner's group record
        self._crashed = False
        self._killed: set[str] = set()  # replay keys an operator killed (`kill_child`)
        # By caller (its task, an invocation) and key, the record its latest open, reopen or read
        # reached: its close closes that one, not a namesake opened since (decision 113).
        self._reached: weakref.WeakKeyDictionary[asyncio.Task[Any], dict[str, GroupRecord]] = (
            weakref.WeakKeyDictionary()
        )
        self._id = next(self._ids)
        if resolver is not None:
            self.register_executors(resolver)

    # -- wiring ------------------------------------------------------------------------------

    def register_executors(self, resolver: GroupExecutors) -> None:
        """Wire the `GroupExecutors` resolver; from now on this host does groups."""
        self._resolver = resolver

    def supports_concurrent_effects(self) -> bool:
        return True

    def supports_effect_groups(self) -> bool:
        # ADR: on an in-process host this answer *is* "a resolver is registered", never a constant.
        return self._resolver is not None

    def _resolve(self, envelope: RuntimeEffectEnvelope, *, raising: bool = False) -> GroupExecutor | None:
        """An executor for ``envelope``, None on a miss. A resolver that raises is a miss (decision
        107), unless ``raising``: on a child's retry its fault is transient, as on Restate."""
        match envelope.command:
            case Sleep() | AwaitEvent():
                return DurableWait(self.store, envelope)
            case ToolCall() | Call():
                if self._resolver is None:
                    return None
                # What the Restate host's child receives: the envelope as its JSON form reads back (a
                # tuple is a list, object keys sorted), so an executor sees the same args on both.
                sent = decode_envelope(canonical_bytes(envelope))
                return self._resolver.resolve(sent) if raising else resolve_or_none(self._resolver, sent)
            case _:
                assert_never(envelope.command)

    # -- ungrouped path ----------------------------------------------------------------------

    async def execute_effect(self, envelope: RuntimeEffectEnvelope, executor: GroupExecutor) -> Outcome:
        require_ungrouped(envelope)
        return await execute_outcome(executor)

    # -- groups ------------------------------------------------------------------------------

    async def open_effect_group(self, group: RuntimeEffectGroup) -> GroupHandle:
        return await self._open(group, reopen=False)

    async def _open(
        self, group: RuntimeEffectGroup, *, reopen: bool, incarnation: str | None = None
    ) -> GroupHandle:
        key = str(require_group(group).key)
        require_groups(self._resolver is not None, group_key=key)
        # Restate's open carries the children in one message, or in parts: a group neither can carry
        # is refused here too, recording nothing, so both hosts accept the same groups. As on Restate,
        # that is judged by the call (a resume's reopen, or an open), not by what the store holds.
        check_open_size(group, reopen=reopen)
        record = self.store.groups.get(key)
        if record is None:
            # ADR: a first open resolves all N before recording; a miss refuses the whole open.
            executors: list[GroupExecutor] = []
            for position, child in enumerate(group.children):
                executor = self._resolve(child)
                if executor is None:
                    raise ChildUnroutable.no_executor(
                        describe_miss(self._resolver, child),
                        group_key=key,
                        position=position,
                        replay_key=child.replay_key,
                    )
                executors.append(executor)
            record = GroupRecord(shape=group.shape(), children=group.children, window=group.max_in_flight)
            self.store.groups[key] = record
            record.note_opener(self._id)
            self._admit(key, record, dict(enumerate(executors)))
        else:
            if incarnation is not None and incarnation != record.incarnation:
                raise GroupNotOpen.opened_again(group_key=key)  # a resume of a cursor of a closed group
            record.shape.fence_reopen(group.shape(), key)
            # ADR: a reopen resolves only what it dispatches and refuses nothing. The bound is the
            # first open's (recorded), whatever this reopen passes.
            waiting = set(record.queued)
            again: dict[int, GroupExecutor] = {}
            for position, child in enumerate(group.children):
                if position in record.sequences or position in record.live or position in waiting:
                    continue
                executor = self._resolve(child)
                if executor is not None:
                    again[position] = executor
            # Noted before it admits them: a group whose openers had all ended, the latest in failure,
            # is held again (decision 13: its losers are not the drain's), so its children start.
            record.note_opener(self._id)
            self._admit(key, record, again)
        self._reached_by_caller()[key] = record
        return GroupHandle.opened(group, incarnation=record.incarnation)

    async def reopen_effect_group(
        self, group: RuntimeEffectGroup, *, incarnation: str | None = None
    ) -> GroupHandle:
        """Reopen ``group``, refusing `GroupNotOpen` if it is not recorded (decision 41), or if it is
        not the ``incarnation`` a resumed cursor names (decision 124)."""
        key = str(require_group(group).key)
        require_groups(self._resolver is not None, group_key=key)
        if key not in self.store.groups:
            raise GroupNotOpen.not_recorded(group_key=key)
        return await self._open(group, reopen=True, incarnation=incarnation)

    async def await_next_settlement(
        self, handle: GroupHandle, cancel: Awaitable[object] | None = None
    ) -> Settlement:
        check_await(handle, self._resolver is not None, cancel)
        with handle.awaiting():
            return await self._next(handle, cancel)

    async def _next(self, handle: GroupHandle, cancel: Awaitable[object] | None) -> Settlement:
        record = self._record(handle)
        self._reached_by_caller()[handle.group_key] = record  # as a Restate caller's read learns it
        rank = handle.next_rank
        cancel_task = asyncio.ensure_future(cancel) if cancel is not None else None
        try:
            while len(record.order) < rank:
                if self.store.groups.get(handle.group_key) is not record:
                    raise GroupNotOpen.closed_while_awaiting(group_key=handle.group_key)
                changed = asyncio.ensure_future(record.changed.wait())
                waiting: set[asyncio.Future[Any]] = {changed}
                if cancel_task is not None:
                    waiting.add(cancel_task)
                done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                if changed not in done:
                    changed.cancel()
                if cancel_task is not None and cancel_task in done and len(record.order) < rank:
                    # A cancel that failed raises its own error, as Restate's select does.
                    cancel_task.result()
                    # ADR: cancellation leaves cursor and durable rank untouched.
                    raise AwaitCancelled.at_rank(rank, group_key=handle.group_key)
        finally:
            # A task made here from a coroutine is ours to stop; the caller's own future (a deadline
            # it awaits again at its next read, say) is not.
            if cancel_task is not None and cancel_task is not cancel and not cancel_task.done():
                cancel_task.cancel()
        position = record.order[rank - 1]
        settlement = Settlement(
            rank=rank,
            position=position,
            replay_key=record.shape.replay_keys[position],
            outcome=record.outcomes[position],
        )
        handle.advance()
        return settlement

    async def close_effect_group(self, handle: GroupHandle, disposition: LoserPolicy | None = None) -> None:
        requested = check_close(handle, disposition, self._resolver is not None)
        record = self.store.groups.get(handle.group_key)
        if record is not None and handle.incarnation not in (None, record.incarnation):
            # Decision 124: the cursor's group is closed already; the one under its key is another,
            # which this close leaves as it is, and what this caller reached of it.
            return
        reached = self._reached_by_caller().pop(handle.group_key, None)  # as Restate's caller forgets it
        if record is None:
            return  # ADR: close is idempotent; a redriven close finds nothing to do
        if reached is not None and reached is not record:
            return  # decision 113: this caller's group is closed already; this is a namesake
        check_child_count(record.shape.child_count, handle.child_count, group_key=handle.group_key)
        effective = effective_disposition(record.shape.disposition, requested, group_key=handle.group_key)
        # ADR "Settlement obligation" (3): retirement is group-atomic, the whole record at once.
        del self.store.groups[handle.group_key]
        record.changed.set()
        if effective is LoserPolicy.CANCEL:
            record.queued.clear()  # a child waiting for a slot never starts
            # One cancel per unsettled child; close does not await their termination (ADR).
            for position in range(record.shape.child_count):
                task = self.store.runners.get((handle.group_key, position))
                if task is not None and position not in record.sequences:
                    task.cancel()

    def _reached_by_caller(self) -> dict[str, GroupRecord]:
        """The records the current caller reached, by key (none outside a task)."""
        task = asyncio.current_task()
        if task is None:
            return {}
        return self._reached.setdefault(task, {})

    async def kill_child(self, replay_key: str) -> None:
        """An operator's kill of the running child ``replay_key``: it stops where it is and settles
        as a killed callee's caller is answered (`KILLED`), taking its rank like any settlement."""
        tasks = [task for task, key in self._runners.items() if key == replay_key]
        self._killed.add(replay_key)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    async def join_child(self, replay_key: str) -> None:
        """Wait until this host's runner for the child ``replay_key`` (if any) has finished; a child
        waiting for a slot (``max_in_flight``) is waited for while a runner of its group could still
        start it."""
        while True:
            tasks = [task for task, key in self._runners.items() if key == replay_key]
            if tasks:
                await asyncio.wait(tasks)
                return
            ahead = [
                task
                for task, record in self._runs_of.items()
                if any(record.children[p].replay_key == replay_key for p in record.queued)
            ]
            if not ahead:
                return
            await asyncio.wait(ahead, return_when=asyncio.FIRST_COMPLETED)

    # -- drain and crash ---------------------------------------------------------------------

    def drain(self) -> DrainReport:
        """One pass of the loser drain over children that no live runner owns.

        It applies the disposition declared on the group record and never invents
        one (ADR, "Loser disposition is declared at open"). A declared `Cancel` applies once
        the group's callers are gone, the latest of them in failure (it crashed, or was
        cancelled); one that returned normally parked a continuation, so its losers run on
        for whoever resumes it, as under `RunToCompletion` (decision 13).
        """
        report = DrainReport()
        for key, record in list(self.store.groups.items()):
            again: dict[int, GroupExecutor] = {}
            waiting = set(record.queued)
            if record.shape.disposition is LoserPolicy.CANCEL and record.severed():
                report.cancelled += [(key, position) for position in self._cancel_unowned(key, record)]
                continue
            for position, child in enumerate(record.children):
                if position in record.sequences or position in record.live:
                    continue
                if position in waiting:
                    report.dispatched.append((key, position))  # runs as a slot frees
                    continue
                executor = self._resolve(child) if self._resolver is not None else None
                if executor is None:
                    report.no_executor.append(NoExecutor(key, position, child.replay_key))
                    continue
                again[position] = executor
                report.dispatched.append((key, position))
            self._admit(key, record, again)  # also takes over the queue a dead process left
        return report

    async def crash(self) -> None:
        """Model this host's process dying: its runners vanish and record nothing."""
        self._crashed = True
        for held in self.store.groups.values():
            for opener in held.openers:
                if opener.host == self._id and not opener.task.done():
                    opener.end(failed=True)  # a caller still running dies with its process
        owned = list(self._tasks.items())
        for _, task in owned:
            task.cancel()
        await asyncio.gather(*(task for _, task in owned), return_exceptions=True)
        for (key, position), _ in owned:
            # A task cancelled before it first ran never reaches its own cleanup.
            record = self.store.groups.get(key)
            if record is not None:
                record.live.discard(position)
        self._tasks.clear()

    async def aclose(self) -> None:
        """Stop this host's runners (the end of the runtime's life)."""
        await self.crash()

    # -- internals ---------------------------------------------------------------------------

    def _record(self, handle: GroupHandle) -> GroupRecord:
        record = self.store.groups.get(handle.group_key)
        if record is None:
            raise GroupNotOpen.not_recorded(group_key=handle.group_key)
        if handle.incarnation is not None and handle.incarnation != record.incarnation:
            raise GroupNotOpen.opened_again(group_key=handle.group_key)  # decision 124
        check_child_count(record.shape.child_count, handle.child_count, group_key=handle.group_key)
        return record

    def _cancel_unowned(self, key: str, record: GroupRecord) -> list[int]:
        """A severed `Cancel` group: settle Cancelled every child no runner holds (one waiting for a
        slot never starts), and cancel this host's runners of it, which settle so themselves (the
        opener's process lives on: its task was cancelled). The positions settled here."""
        cancelled = [
            p for p in range(len(record.children)) if p not in record.sequences and p not in record.live
        ]
        for position in cancelled:
            record.settle(position, Cancelled())
        record.queued.clear()
        for (group_key, position), task in list(self._tasks.items()):
            if group_key == key and position in record.live:
                task.cancel()
        return cancelled

    def _admit(self, key: str, record: GroupRecord, ready: dict[int, GroupExecutor]) -> None:
        """Run the children of ``ready`` (to run again first, then the queue), each with the executor
        resolved for it, as the group's bound allows: the first ones now, the rest as runners end."""
        record.queued.extendleft(reversed(ready))
        self._fill(key, record, ready)

    def _fill(self, key: str, record: GroupRecord, ready: dict[int, GroupExecutor] | None = None) -> None:
        """Start queued children while fewer than the group's bound run, in order: each with the
        executor resolved for it when it was queued now, else one resolved now (a child with no runner
        stays unsettled, for the drain to report). A severed `Cancel` group starts none: the drain
        settles them Cancelled, as the Restate host's cancelled pump does."""
        if record.queued and record.shape.disposition is LoserPolicy.CANCEL and record.severed():
            return
        while record.queued and (record.window is None or len(record.live) < record.window):
            position = record.queued.popleft()
            if position in record.sequences or position in record.live:
                continue
            executor = (ready or {}).get(position)
            if executor is None:
                executor = self._resolve(record.children[position])
            if executor is not None:
                self._dispatch(key, record, position, executor)

    def _dispatch(self, key: str, record: GroupRecord, position: int, executor: GroupExecutor) -> None:
        record.live.add(position)
        task = asyncio.create_task(self._run_child(key, record, position, executor))
        self._tasks[(key, position)] = task
        self.store.runners[(key, position)] = task
        task.add_done_callback(functools.partial(_forget_runner, self.store.runners, (key, position)))
        self._runners[task] = record.children[position].replay_key
        self._runs_of[task] = record
        task.add_done_callback(self._runners.pop)
        task.add_done_callback(self._runs_of.pop)

    async def _run_child(self, key: str, record: GroupRecord, position: int, executor: GroupExecutor) -> None:
        child = record.children[position]
        final: Outcome | None
        try:
            outcome: Outcome | Transient = await execute_once(executor)
            attempts = 1
            while isinstance(outcome, Transient) and attempts < self._max_attempts:
                # ADR: each executor is single-execution; a retry resolves a fresh one.
                try:
                    fresh = self._resolve(child, raising=True)
                except Exception as exc:  # the resolver's own fault, here: transient (decision 107)
                    attempts += 1
                    outcome = Transient.of(exc)
                    continue
                if fresh is None:
                    break
                attempts += 1
                outcome = await execute_once(fresh)
            if isinstance(outcome, Transient) and attempts < self._max_attempts:
                # ADR: a miss is a routing fact, never an outcome; the child stays unsettled and the
                # drain reports it as NoExecutor (the Restate host ends it with a terminal 404).
                final = None
            else:
                final = outcome.give_up(attempts) if isinstance(outcome, Transient) else outcome
        except asyncio.CancelledError:
            if self._crashed:
                record.live.discard(position)
                raise  # a dead process records nothing
            # Killed by an operator: as Restate answers a killed callee's caller; else cancelled.
            final = KILLED if child.replay_key in self._killed else Cancelled()
        finally:
            self._tasks.pop((key, position), None)
        record.live.discard(position)
        # A settlement after close must not resurrect the group: only the record we were born in counts.
        if final is not None and self.store.groups.get(key) is record:
            record.settle(position, final)
        # Its slot goes to the next child waiting, after a close too (a RunToCompletion group's run on).
        self._fill(key, record)


def _forget_runner(
    runners: dict[tuple[str, int], asyncio.Task[None]], where: tuple[str, int], task: asyncio.Task[None]
) -> None:
    """A runner ended: it is no longer the one a close would cancel (unless another took its place)."""
    if runners.get(where) is task:
        del runners[where]
