"""The reference host's durable part: what a `MemoryStore` keeps of each group (its record) and of
each event, which outlives a `MemoryHost` (a process) and is what the next one resumes from."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, assert_never

from ..contract import (
    AwaitEvent,
    Call,
    Err,
    GroupShape,
    InvalidEnvelope,
    Ok,
    Outcome,
    RuntimeEffectEnvelope,
    Sleep,
    ToolCall,
    ToolFailure,
    check_text,
    validate_json_value,
)

__all__ = ["DrainReport", "DurableWait", "GroupRecord", "MemoryStore", "NoExecutor", "Opener"]


@dataclass
class Opener:
    """A caller (the task that opened or reopened the group) and how it ended (decision 13).

    ``host`` is the host it opened through: a crash of that host's process ends it in failure.
    """

    task: asyncio.Task[Any]
    host: int
    ended: bool = False
    failed: bool = False  # ended in failure, was cancelled, or died with its process

    def end(self, failed: bool) -> None:
        if not self.ended:  # the first end counts: a task outliving its crashed host changes nothing
            self.ended, self.failed = True, failed


@dataclass
class GroupRecord:
    """One recorded group: shape fence, strictly monotonic counter, and rank order."""

    shape: GroupShape
    children: tuple[RuntimeEffectEnvelope, ...]
    counter: int = 0
    sequences: dict[int, int] = field(default_factory=dict)  # position -> sequence
    outcomes: dict[int, Outcome] = field(default_factory=dict)
    order: list[int] = field(default_factory=list)  # positions in rank order (sorted by sequence)
    live: set[int] = field(default_factory=set)  # positions with a runner in some live host
    window: int | None = None  # at most this many children run at once (`max_in_flight`); None: all
    queued: deque[int] = field(default_factory=deque)  # positions waiting for a slot, in start order
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    openers: list[Opener] = field(default_factory=list)  # in the order they opened
    # A timer child's deadline on the store's clock, set when it first runs: a run again after a
    # crash waits out what is left, as Restate's durable timer keeps its first deadline.
    deadlines: dict[int, float] = field(default_factory=dict)
    # Which group the key held: a cursor given by this one reads no group opened under the key later.
    incarnation: str = field(default_factory=lambda: uuid.uuid4().hex)

    def severed(self) -> bool:
        """Every opener has ended, and the latest to open ended in failure (decision 13).

        An opener that returned normally parked a continuation: its losers run on for a resumer.
        """
        for opener in self.openers:
            if opener.task.done():
                opener.end(opener.task.cancelled() or opener.task.exception() is not None)
        return bool(self.openers) and all(o.ended for o in self.openers) and self.openers[-1].failed

    def note_opener(self, host: int) -> None:
        task = asyncio.current_task()
        if task is not None and all(o.task is not task for o in self.openers):
            self.openers.append(Opener(task=task, host=host))

    def allocate(self) -> int:
        # ADR "The settlement obligation" (1): every allocation exceeds every earlier one.
        self.counter += 1
        return self.counter

    def settle(self, position: int, outcome: Outcome) -> bool:
        """Record ``position``'s terminal at the next sequence; False if it already settled."""
        if position in self.sequences:
            return False  # idempotent on the child: one terminal, one rank
        self.sequences[position] = self.allocate()
        self.outcomes[position] = outcome
        # (2): a fresh sequence exceeds all recorded ones, so it appends and never inserts below.
        self.order.append(position)
        self.changed.set()
        self.changed = asyncio.Event()
        return True


@dataclass(frozen=True)
class NoExecutor:
    """A drained child this host cannot run: the group stays visible and unreclaimable (ADR)."""

    group_key: str
    position: int
    replay_key: str


@dataclass
class DrainReport:
    """What one drain pass did; ``no_executor`` non-empty means the queue is real and unfinished."""

    cancelled: list[tuple[str, int]] = field(default_factory=list)
    dispatched: list[tuple[str, int]] = field(default_factory=list)
    no_executor: list[NoExecutor] = field(default_factory=list)


class MemoryStore:
    """What outlives a host in memory: group records and emitted events."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        """A store whose timers read ``clock`` (seconds, monotonic) for their deadlines: a test may
        move it on to put a timer's deadline behind a child run again after a crash."""
        self.clock = clock
        self.groups: dict[str, GroupRecord] = {}
        self.events: dict[str, Ok[Any] | Err] = {}
        # Every host's runner of a child, by group key and position: a `Cancel` close reaches each,
        # whichever host of this store runs it (on Restate a close cancels every child invocation).
        self.runners: dict[tuple[str, int], asyncio.Task[None]] = {}
        self._event_changed = asyncio.Event()

    def emit_event(self, name: str, value: Any = None) -> None:
        """Emit durable event ``name``; every `AwaitEvent` child on it settles Ok(value).

        Raises:
            InvalidEnvelope: ``value`` is not a JSON value lash can record (as Restate's ``emit``
                refuses it, 400): kept, it would fail every child waiting on the event.
        """
        validate_json_value(value, "event payload")
        self.events[name] = Ok(value=value)
        self._event_changed.set()
        self._event_changed = asyncio.Event()

    def reject_event(self, name: str, message: str) -> None:
        """Reject durable event ``name``; every `AwaitEvent` child on it settles Err(message, "rejected").

        Raises:
            InvalidEnvelope: ``message`` is not text lash can record (as Restate's ``reject`` refuses it).
        """
        if not isinstance(message, str):
            raise InvalidEnvelope(f"reject takes a string message, not {type(message).__name__}")
        check_text(message, "rejection message")
        self.events[name] = Err(message=message, code="rejected")
        self._event_changed.set()
        self._event_changed = asyncio.Event()

    def clear_event(self, name: str) -> None:
        """Forget event ``name``'s payload (or rejection): later waiters wait again, and the
        children already waiting on it wait on, for its next emit or reject (Restate's ``clear``)."""
        self.events.pop(name, None)

    async def wait_event(self, name: str) -> Any:
        while name not in self.events:
            await self._event_changed.wait()
        outcome = self.events[name]
        if isinstance(outcome, Err):
            raise ToolFailure(outcome.message, outcome.code)
        return outcome.value

    def burn_sequence(self, group_key: str) -> None:
        """Model a rolled-back finalize: a sequence number is used up and never written (ADR: gaps)."""
        self.groups[group_key].allocate()

    def open_group_keys(self) -> list[str]:
        return sorted(self.groups)


class DurableWait:
    """The host's own runner for `Sleep` and `AwaitEvent` children."""

    def __init__(self, store: MemoryStore, envelope: RuntimeEffectEnvelope) -> None:
        self._store = store
        self._command = envelope.command
        self._membership = envelope.membership

    async def execute(self) -> Any:
        match self._command:
            case Sleep() as sleep:
                await asyncio.sleep(self._left(sleep.timer_ms / 1000))
                return None
            case AwaitEvent(name=name):
                return await self._store.wait_event(name)
            case ToolCall() | Call():  # `_resolve` hands those to the resolver, never here
                raise AssertionError(f"not a durable wait: {self._command!r}")
            case _:
                assert_never(self._command)

    def _left(self, duration: float) -> float:
        """Seconds until the timer's deadline: set on its first run (as Restate's child journals its
        timer), kept by its group for a run again after a crash."""
        membership = self._membership
        if membership is None or (record := self._store.groups.get(membership.group_key)) is None:
            return duration  # an ungrouped timer: it runs once, in its caller
        deadline = record.deadlines.setdefault(membership.position, self._store.clock() + duration)
        return max(0.0, deadline - self._store.clock())
