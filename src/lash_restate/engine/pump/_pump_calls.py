"""How a pump calls its children: the plan (a call child called directly or through `LashChild`),
the queue a bounded group keeps (decision 81), one call, and a call's outcome (decisions 61, 66)."""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Any

import restate

from ...contract import Call, RuntimeEffectEnvelope
from ..child._calls import (
    VIA_CALL,
    VIA_CHILD,
    answered,
    call_arg,
    callee_key,
    invocation_options,
    pump_plan,
    refused,
)
from ..child._routing import Routing
from ..group._mode import position_of
from ..wire._errors import NOT_FOUND
from ..wire._formats import stored_outcome
from ..wire._incarnation import runs_name_their_incarnation
from ..wire._messages import ChildRun
from ..wire._records import STRINGS
from ..wire._routes import CHILD_EXECUTE, CHILD_EXECUTE2

__all__ = [
    "SLICE",
    "Awaited",
    "Queue",
    "call_outcome",
    "dispatch_all",
    "dispatch_one",
    "executed_outcome",
    "plan_all",
]


SLICE = "slice"


@dataclass(frozen=True, slots=True)
class Awaited:
    """What a future a pump awaits is (`run2`, `run_parts`, `redispatch`): a call to the user's
    handler, a `LashChild/execute2`, or a further pump."""

    kind: str  # how the child was called (`VIA_CALL`, `VIA_CHILD`), or `SLICE`: a further pump
    position: int  # the child's; -1 for a pump, which `covers` positions instead
    replay_key: str  # the child's; a further pump's key for a pump
    target: str = ""  # a call's ``service/handler``
    covers: tuple[int, int] = (0, 0)  # a pump's: the positions its subtree runs, first and past the last


async def dispatch_all(
    ctx: restate.ObjectContext,
    children: list[RuntimeEffectEnvelope],
    routing: Routing,
    incarnation: str,
) -> dict[Any, Awaited]:
    """Call each of ``children`` from this pump (a slice of a group opened in parts, whose children
    no open carried and so no open planned), as this pump decides; what is awaited, by future. All
    at once: a bounded group is never opened in parts (decision 81)."""
    return Queue(await plan_all(ctx, children, routing, None), None).start(ctx, incarnation, 0)


async def plan_all(
    ctx: restate.ObjectContext,
    children: list[RuntimeEffectEnvelope],
    routing: Routing,
    decided: list[str] | None,
) -> list[tuple[RuntimeEffectEnvelope, str]]:
    """Each of ``children`` with how this pump calls it: as the open ``decided`` (`PumpAwait.plan`,
    one per child) or, when it did not, as this pump decides."""
    how_each = decided if decided is not None else [VIA_CHILD] * len(children)
    if decided is None and any(isinstance(child.command, Call) for child in children):
        # Decided once and journaled: an in-place redeploy may change this endpoint's routing, and a
        # replay must make the calls the first execution made (decision 61). A plan the open sent is
        # in this pump's input, which a replay reads as it was.
        options: restate.RunOptions[list[str]] = restate.RunOptions(serde=STRINGS)
        how_each = await ctx.run_typed("route", lambda: pump_plan(routing, children), options)
    return list(zip(children, how_each, strict=True))


class Queue:
    """The children a pump has yet to call, in position order, and how many may run at once (the
    group's ``max_in_flight``; None: all at once, decision 81). A replay starts the same children at
    the same steps: what frees a slot is what the journal says settled."""

    def __init__(self, waiting: list[tuple[RuntimeEffectEnvelope, str]], bound: int | None) -> None:
        self.waiting = collections.deque(waiting)
        self.bound = bound

    def start(self, ctx: restate.ObjectContext, incarnation: str, running: int) -> dict[Any, Awaited]:
        """Call the next children while fewer than the bound run (``running`` do); what is awaited."""
        started: dict[Any, Awaited] = {}
        while self.waiting and (self.bound is None or running + len(started) < self.bound):
            child, how = self.waiting.popleft()
            future, what = dispatch_one(ctx, child, how, incarnation)
            started[future] = what
        return started

    def drop(self) -> list[RuntimeEffectEnvelope]:
        """The children never started, which a cancellation settles as cancelled; none is left."""
        dropped = [child for child, _ in self.waiting]
        self.waiting.clear()
        return dropped


def dispatch_one(
    ctx: restate.ObjectContext, child: RuntimeEffectEnvelope, how: str, incarnation: str
) -> tuple[Any, Awaited]:
    """Call ``child`` from this pump as its plan says (`open_plan` or `pump_plan`)."""
    position = position_of(child)
    if how != VIA_CALL or not isinstance(child.command, Call):  # only a call planned so is called directly
        if runs_name_their_incarnation(incarnation):
            future = CHILD_EXECUTE2.call(
                ctx, child.replay_key, ChildRun(envelope=child, incarnation=incarnation)
            )
        else:  # a reopen of a group the baseline opened: `execute`, as the baseline's pump ran them
            future = CHILD_EXECUTE.call(ctx, child.replay_key, child)
        return future, Awaited(VIA_CHILD, position, child.replay_key)
    call = child.command
    # Lash's idempotency key names the child on the callee's invocation, for inspection and
    # operators; a call that gives its own (a native call's `idempotency_key=`) is made under that.
    options = invocation_options(call, callee_key(child, incarnation))
    future = ctx.generic_call(
        call.service, call.handler, call_arg(call, incarnation), key=call.key, **options
    )
    return future, Awaited(VIA_CALL, position, child.replay_key, call.target)


async def executed_outcome(future: Any) -> bytes | None:
    """The stored outcome of a child run through `LashChild/execute2` (or the baseline's `execute`):
    its answer; None when the child could not be routed (ADR: a 404 is terminal)."""
    try:
        return bytes(await future)
    except restate.TerminalError as error:
        if error.status_code == NOT_FOUND:
            return None  # a miss: the child told its group, which keeps it (decision 73)
        # Cancelled before it could record its own terminal, or ended otherwise (an operator killed
        # it: 409 `killed`), as a call child's callee would answer (decision 74): never unsettled.
        return stored_outcome(refused(error))


async def call_outcome(future: Any, target: str) -> bytes:
    """The stored outcome of a call to the user's handler ``target``: its answer, or its terminal error."""
    try:
        raw = await future
    except restate.TerminalError as error:
        return stored_outcome(refused(error))
    return stored_outcome(answered(target, bytes(raw) if raw is not None else None))
