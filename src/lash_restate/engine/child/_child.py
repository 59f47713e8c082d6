"""`LashChild`, keyed by replay key: one child as its own invocation, and a direct child's outcome store.

ADR, "Tier split": a Restate child is a full invocation, never an inline journaled step. A direct
child's outcome (`run`) lives in this object's keyed state, which has no TTL (an invocation's output
is kept only for the retention window), until its group is done with it (decision 1); a pumped
child (`execute2`; `execute` for a group the baseline opened) answers its outcome to the pump, which
stores it.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any, assert_never

import msgspec
import restate
from restate.exceptions import RetryableError

from ...contract import (
    AwaitEvent,
    Call,
    Cancelled,
    ChildUnroutable,
    Err,
    GroupExecutors,
    GroupNotOpen,
    InvalidEnvelope,
    Ok,
    Outcome,
    RuntimeEffectEnvelope,
    Sleep,
    ToolCall,
    Transient,
    describe_miss,
    execute_once,
    validate_json_value,
)
from ..wire._errors import (
    HANDLER_RETRY,
    MISS_MARK,
    NOT_FOUND,
    is_cancellation,
    lash_terminal,
    terminal_errors,
)
from ..wire._formats import stored_outcome
from ..wire._incarnation import journals_call_routes
from ..wire._messages import (
    INLINE_OUTCOME_BYTES,
    RUN_REPLY,
    ChildrenFailed,
    ChildRun,
    MissedChildren,
    Ref,
    SettleBatch,
)
from ..wire._records import BYTES, STRINGS, SettlementMode, child_store
from ..wire._routes import (
    CHILD,
    CHILD_EXECUTE,
    CHILD_EXECUTE2,
    CHILD_FAIL,
    CHILD_FORGET,
    CHILD_OUTCOME,
    CHILD_RUN,
    GROUP_MISSED,
    GROUP_SETTLE,
    SIGNAL_SUBSCRIBE,
    SIGNAL_UNSUBSCRIBE,
    described_by,
    named,
)
from ._calls import answered, call_arg, cancelled, invocation_options, refused
from ._lookup import unregistered
from ._routing import Routing

__all__ = ["DEFAULT_TOOL_ATTEMPTS", "child_object", "emitted_outcome"]

DEFAULT_TOOL_ATTEMPTS = 3


def child_object(
    routing: Routing, *, tool_attempts: int = DEFAULT_TOOL_ATTEMPTS, metadata: dict[str, str] | None = None
) -> restate.VirtualObject:
    """`LashChild`: ``run`` (a child that settles itself), ``execute2`` (one a pump calls; ``execute``
    for the pumps of groups opened before it), ``fail`` (the group's repair of a run that ended in
    failure), and the read and release of its outcome store."""
    child = restate.VirtualObject(named(CHILD), invocation_retry_policy=HANDLER_RETRY, metadata=metadata)

    @child.handler(name=CHILD_RUN.handler, ingress_private=True, output_serde=RUN_REPLY)
    @terminal_errors
    @described_by(on_run)
    async def run(ctx: restate.ObjectContext, req: ChildRun) -> str:
        return await on_run(ctx, req, routing, tool_attempts)

    @child.handler(name=CHILD_FAIL.handler, ingress_private=True, output_serde=RUN_REPLY)
    @described_by(on_fail)
    async def fail(ctx: restate.ObjectContext, req: ChildrenFailed) -> str:
        return await on_fail(ctx, req)

    @child.handler(name=CHILD_EXECUTE.handler, ingress_private=True, output_serde=BYTES)
    @terminal_errors
    @described_by(on_execute)
    async def execute(ctx: restate.ObjectContext, envelope: RuntimeEffectEnvelope) -> bytes:
        return await on_execute(ctx, envelope, routing, tool_attempts)

    @child.handler(name=CHILD_EXECUTE2.handler, ingress_private=True, output_serde=BYTES)
    @terminal_errors
    @described_by(on_execute2)
    async def execute2(ctx: restate.ObjectContext, req: ChildRun) -> bytes:
        return await on_execute2(ctx, req, routing, tool_attempts)

    @child.handler(name=CHILD_OUTCOME.handler, kind="shared", ingress_private=True, output_serde=BYTES)
    @terminal_errors
    @described_by(on_outcome)
    async def outcome(ctx: restate.ObjectSharedContext, incarnation: str) -> bytes:
        return await on_outcome(ctx, incarnation)

    @child.handler(name=CHILD_FORGET.handler, ingress_private=True)
    @described_by(on_forget)
    async def forget(ctx: restate.ObjectContext, incarnation: str) -> None:
        await on_forget(ctx, incarnation)

    del run, fail, execute, execute2, outcome, forget
    return child


async def on_run(ctx: restate.ObjectContext, req: ChildRun, routing: Routing, tool_attempts: int) -> str:
    """Run the child once, store its outcome, settle it into its group; answer the invocation id of
    that settle, which the group's watch of this run watches in turn: an operator's kill of the
    settle, queued behind the group's other work, would otherwise leave the child unranked."""
    envelope = req.envelope
    membership = envelope.membership
    if membership is None:
        return ""  # only grouped children are dispatched here
    store = child_store(req.incarnation)
    stored = await ctx.get(store, serde=BYTES)
    if stored is None:
        outcome = await _execute_or_miss(ctx, envelope, routing, tool_attempts, req.incarnation)
        stored = stored_outcome(outcome)
        ctx.set(store, stored, serde=BYTES)
    # Already settled (a re-dispatch after a reopen): settle again; the group dedups by position.
    settle = _settle(ctx, membership.group_key, req.incarnation, membership.position, stored)
    # No command of its own: the send's id, journaled with it. A cancel arriving while it waits ends
    # this run cancelled; the settle, sent already, ranks the child all the same.
    return await settle.invocation_id()


# See decisions 74, 89, 97, 98 (its docstring is what Restate's UI shows).
async def on_fail(ctx: restate.ObjectContext, req: ChildrenFailed) -> str:
    """This child's run ended in failure (an operator killed it) before it stored an outcome; it
    settles with that failure, or `Cancelled` (a run cancelled before it ran, or by a group nobody
    can resume), as `run` settles an outcome. One stored before the kill is settled
    instead. It answers the settle's id, as `run` does, for the group's watch of this repair."""
    store = child_store(req.incarnation)
    stored = await ctx.get(store, serde=BYTES)
    if stored is None:
        stored = stored_outcome(req.outcome)
        ctx.set(store, stored, serde=BYTES)
    settle = _settle(ctx, req.group_key, req.incarnation, req.positions[0], stored)
    return await settle.invocation_id()


async def on_execute(
    ctx: restate.ObjectContext, envelope: RuntimeEffectEnvelope, routing: Routing, tool_attempts: int
) -> bytes:
    """A child the pump of a group the baseline opened calls: `on_execute2` with no incarnation
    (a call then sends what those pumps' children journaled, and a miss is fenced by its shape)."""
    return stored_outcome(await _execute_or_miss(ctx, envelope, routing, tool_attempts, ""))


async def on_execute2(
    ctx: restate.ObjectContext, req: ChildRun, routing: Routing, tool_attempts: int
) -> bytes:
    """A child the group's pump calls: run it and answer its outcome to the pump, which stores it."""
    return stored_outcome(await _execute_or_miss(ctx, req.envelope, routing, tool_attempts, req.incarnation))


async def on_outcome(ctx: restate.ObjectSharedContext, incarnation: str) -> bytes:
    """The outcome a direct child's run stored, for a caller's read of its rank."""
    stored = await ctx.get(child_store(incarnation), serde=BYTES)
    if stored is None:  # released: its group was closed meanwhile (or its state deleted outside lash)
        raise GroupNotOpen(
            f"the group was closed while reading, or the outcome store of {ctx.key()} was deleted",
            replay_key=ctx.key(),
        )
    return stored


async def on_forget(ctx: restate.ObjectContext, incarnation: str) -> None:
    """Release the outcome one group incarnation stored; another incarnation's stays."""
    ctx.clear(child_store(incarnation))


def _settle(
    ctx: restate.ObjectContext, group_key: str, incarnation: str, position: int, stored: bytes
) -> restate.SendHandle:
    """Settle this child's stored outcome into its group (a direct child settles itself)."""
    ref = Ref(
        position=position,
        replay_key=ctx.key(),
        outcome=stored if len(stored) <= INLINE_OUTCOME_BYTES else None,
    )
    batch = SettleBatch(incarnation=incarnation, mode=SettlementMode.DIRECT, refs=[ref])
    return GROUP_SETTLE.send(ctx, group_key, batch)


async def _execute_or_miss(
    ctx: restate.ObjectContext,
    envelope: RuntimeEffectEnvelope,
    routing: Routing,
    attempts: int,
    incarnation: str,
) -> Outcome:
    """`_execute`; a child with no runner here ends with its terminal 404 as before, and first tells
    its group, which keeps it for inspection and the operator's re-dispatch (ADR: a miss is a routing
    fact, never an outcome).

    The child ends once its group has the message (decision 86): an operator's kill of it, queued
    behind the group's other work, would leave the child neither ranked nor kept, so the child then
    ends as a killed callee answers its caller, and is ranked so. The message and the wait for it
    are its last commands, so a run that an earlier release journaled replays as a prefix.
    """
    try:
        return await _execute(ctx, envelope, routing, attempts, incarnation)
    except restate.TerminalError as error:
        if error.status_code != NOT_FOUND or envelope.membership is None:
            raise
        missed = MissedChildren(incarnation=incarnation, children=[envelope])
        reporting = GROUP_MISSED.send(ctx, envelope.membership.group_key, missed)
        reported = ctx.attach_invocation(await reporting.invocation_id(), serde=BYTES)
        await restate.wait_completed(reported)  # this child's own cancellation (a close's) raises here
        try:
            await reported
        except restate.TerminalError as lost:
            # An operator's cancel of the report is not this child's own, so not worded as one.
            message = "the report of this child's miss was cancelled" if cancelled(lost) else lost.message
            raise restate.TerminalError(message, lost.status_code) from None
        # Marked, so the group's watch tells this miss from a run Restate does not know (decision 89).
        raise restate.TerminalError(error.message, error.status_code, metadata={MISS_MARK: "1"}) from None


async def _execute(
    ctx: restate.ObjectContext,
    envelope: RuntimeEffectEnvelope,
    routing: Routing,
    attempts: int,
    incarnation: str,
) -> Outcome:
    command = envelope.command
    try:
        match command:
            case Sleep():
                await ctx.sleep(timedelta(milliseconds=command.timer_ms))
                return Ok(value=None)
            case AwaitEvent():
                return await _await_event(ctx, command.name)
            case Call():
                return await _call(ctx, envelope, command, routing, incarnation)
            case ToolCall():
                return await _run_tool(ctx, envelope, routing.resolver, attempts)
            case _:
                assert_never(command)
    except restate.TerminalError as error:
        if is_cancellation(error):
            return Cancelled()  # a Cancel loser's terminal still routes through the group for rank
        raise


async def _await_event(ctx: restate.ObjectContext, name: str) -> Outcome:
    """Subscribe to event ``name`` and wait for it, watching the subscription as well (decision 86):
    an operator's kill of it, queued behind the event's other work, would otherwise leave this child
    waiting for ever. A failed subscription ends the child as a killed callee answers its caller."""
    awakeable, value = ctx.awakeable(serde=BYTES)
    subscribing = SIGNAL_SUBSCRIBE.send(ctx, name, awakeable)
    try:
        # Appended after the send: a child an earlier release journaled up to here replays as a prefix.
        subscribed = ctx.attach_invocation(await subscribing.invocation_id(), serde=BYTES)
        done, _ = await restate.wait_completed(value, subscribed)
        if value not in done:
            try:
                await subscribed
            except restate.TerminalError as error:
                # A 404: Restate no longer remembers a subscription made long ago (a parked child's).
                if error.status_code != NOT_FOUND:
                    return Err(message=error.message, code=str(error.status_code))
        try:
            payload = json.loads(await value)
        except restate.TerminalError as error:
            if is_cancellation(error):
                raise
            return Err(message=error.message, code="rejected")  # the signal was rejected
        except ValueError as error:
            # Resolved outside lash (Restate's awakeable API) with bytes that are no JSON: a bad value,
            # as an emit refuses one, where a plain exception would retry this child into a pause.
            return Err(message=f"event {name}'s payload is not JSON: {error}", code="bad_value")
        return emitted_outcome(name, payload)
    except restate.TerminalError as error:
        if is_cancellation(error):
            # Cancelled (its group's `Cancel`): the event forgets this waiter, which its state would
            # otherwise keep until the event is emitted, for ever for one never emitted.
            SIGNAL_UNSUBSCRIBE.send(ctx, name, awakeable)
        raise


def emitted_outcome(name: str, payload: Any) -> Outcome:
    """The outcome of an event emitted with ``payload``: Ok, or, for a payload an earlier release
    kept that lash cannot record (its `emit` did not check: a lone surrogate, a non-finite number),
    a bad value, as a tool's, where storing it would fail this child for ever."""
    try:
        validate_json_value(payload, f"event {name}'s payload")
    except InvalidEnvelope as error:
        return Err(message=error.message, code="bad_value")
    return Ok(value=payload)


# What a call child's run decided of its target when it does not call it (`_call`).
_NOT_ROUTED, _UNREGISTERED = "not_routed", "unregistered"


def _unroutable(
    envelope: RuntimeEffectEnvelope, routing: Routing | None = None, reason: str | None = None
) -> ChildUnroutable:
    membership = envelope.membership
    assert membership is not None  # only grouped children are dispatched here
    what = describe_miss(routing, envelope)
    return ChildUnroutable.no_executor(
        what if reason is None else f"{what} ({reason})",
        group_key=membership.group_key,
        position=membership.position,
        replay_key=envelope.replay_key,
    )


async def _call(
    ctx: restate.ObjectContext,
    envelope: RuntimeEffectEnvelope,
    call: Call,
    routing: Routing,
    incarnation: str,
) -> Outcome:
    """Invoke the target from this child's invocation: journaled here, so a retried child replays the
    call instead of issuing it again, and cancelling this child cancels the call (decision 37)."""

    async def decide() -> list[str]:
        """[] to call the target; [NOT_ROUTED], or [UNREGISTERED, why], for a miss."""
        if not routing.routes(envelope):
            # Restate answers a call to a handler nobody binds with a retryable error, so the child
            # would retry for ever; a target this endpoint no longer knows ends it as a 404 (ADR).
            return [_NOT_ROUTED]
        if routing.targets.is_external(call.service):
            # A declared target nobody registered: Restate fails the call with a retryable RT0018
            # that this handler never sees, so ask the admin API first (decision 47).
            reason = await unregistered(call)
            if reason is not None:
                return [_UNREGISTERED, reason]
        return []

    if journals_call_routes(incarnation):
        # Journaled: a replay on a process that routes, declares or reaches the admin API otherwise
        # calls as this run decided (decision 103, amended), where deciding again failed it for ever.
        decided = await ctx.run_typed("call_route", decide, restate.RunOptions(serde=STRINGS))
    else:
        # A group the baseline opened: its children journaled no such step, so decide on a replay
        # too: the journal holds the call or the report of a miss, and the answer that chose it
        # chooses again (decision 103).
        decided = await decide()
    if decided:
        raise lash_terminal(_unroutable(envelope, routing, decided[1] if len(decided) > 1 else None))
    try:
        raw = await ctx.generic_call(
            call.service, call.handler, call_arg(call, incarnation), key=call.key, **invocation_options(call)
        )
    except restate.TerminalError as error:
        if cancelled(error):
            raise  # this child (and so its call) was cancelled
        return refused(error)
    return answered(call.target, raw)


async def _run_tool(
    ctx: restate.ObjectContext,
    envelope: RuntimeEffectEnvelope,
    resolver: GroupExecutors,
    attempts: int,
) -> Outcome:

    async def attempt() -> bytes:
        # ADR: each executor is single-execution; every attempt resolves a fresh one.
        try:
            executor = resolver.resolve(envelope)
        except Exception as exc:  # the resolver's own fault, here: transient, as an executor's (decision 107)
            raise RetryableError(Transient.of(exc).message) from None
        if executor is None:
            # ADR: the engine tier's form of a routing miss is a terminal 404 (lash_terminal's status).
            raise lash_terminal(_unroutable(envelope))
        result = await execute_once(executor)
        if isinstance(result, Transient):
            # Retried by ctx.run, bounded by max_attempts; the SDK keeps a RetryableError's message as
            # it is (any other exception's as its repr), so the give-up reads alike on every tier.
            raise RetryableError(result.message)
        # Past the message limit the run's journal entry could never be written and the child would
        # retry for ever; execute_once settled it `too_large` already (decision 19).
        return stored_outcome(result)

    options: restate.RunOptions[bytes] = restate.RunOptions(serde=BYTES, max_attempts=attempts)
    try:
        raw = await ctx.run_typed("execute", attempt, options)
    except restate.TerminalError as error:
        if is_cancellation(error) or error.status_code == NOT_FOUND:
            # ADR: the engine tier's form of a routing miss is a terminal 404, never a retry, and
            # never a synthesized outcome: the child ends without settling.
            raise
        return Transient(message=error.message).give_up(attempts)
    return msgspec.json.decode(raw, type=Outcome)
