"""`LashPump`, keyed by group incarnation and key: a wide group's children, and its outcome store.

Decision 20: ``run`` calls every child and, each time it wakes, stores what settled meanwhile and
forwards it to the group in one settle: the single writer then runs once per batch, and while it does,
the next batch gathers. The store is this object's state (``o{position}``), read in bulk by
``outcomes`` and released by one ``forget`` at close.

Decision 35: a pump waits on at most `PUMP_SLICE` children. The group's pump (the one its open
sends) runs the first slice and calls one pump per further slice; each settles its own batches into
the group, which stays the single writer of ranks. Cancelling the group's pump cancels those calls,
and its ``forget`` (queued behind its ``run``, which outlives theirs) releases their stores too.
"""

from __future__ import annotations

from typing import Any

import msgspec
import restate
from restate.serde import BytesSerde

from .. import logs
from ..contract import Cancelled, GroupNotOpen, RuntimeEffectEnvelope
from ._errors import HANDLER_RETRY, NOT_FOUND, is_cancellation, terminal_errors
from ._messages import (
    BATCH_INLINE_BYTES,
    INLINE_OUTCOME_BYTES,
    OutcomesRead,
    PumpRun,
    Ref,
    SettleBatch,
    encode,
)
from ._mode import PUMP_SLICE, pump_store, slice_key
from ._records import MsgspecSerde, SettlementMode
from ._routes import (
    CHILD_EXECUTE,
    GROUP_SETTLE,
    PUMP,
    PUMP_FORGET,
    PUMP_OUTCOMES,
    PUMP_REDRIVE,
    PUMP_RUN,
    group_of_pump,
    named,
)

__all__ = ["OUTCOMES_PER_READ", "pump_object"]

_BYTES = BytesSerde()
_KEYS: MsgspecSerde[list[str]] = MsgspecSerde(list[str])
# The SDK's default serde leaves a union as plain JSON: decode a bulk read's request ourselves.
_READ: MsgspecSerde[list[int] | OutcomesRead] = MsgspecSerde(list[int] | OutcomesRead)
# The group's pump keeps the keys of the further slices' pumps here, for its forget (decision 35).
SLICES = "slices"
# A bulk read of the outcomes this pump keeps asks for at most this many at once.
OUTCOMES_PER_READ = 256


def pump_object(*, metadata: dict[str, str] | None = None) -> restate.VirtualObject:
    pump = restate.VirtualObject(named(PUMP), invocation_retry_policy=HANDLER_RETRY, metadata=metadata)

    @pump.handler(name=PUMP_RUN.handler, ingress_private=True, state_preload=False)
    async def run(ctx: restate.ObjectContext, req: PumpRun) -> None:
        own, further = req.children[:PUMP_SLICE], req.children[PUMP_SLICE:]
        calls: dict[Any, RuntimeEffectEnvelope | None] = {
            CHILD_EXECUTE.call(ctx, child.replay_key, child): child for child in own
        }
        if further:
            # Decision 35: each further slice of PUMP_SLICE children gets a pump of its own, called (not
            # sent) so that cancelling this pump cancels it, and this run outlives it.
            keys = [_slice_key(req, child) for child in further[::PUMP_SLICE]]
            ctx.set(SLICES, keys, serde=_KEYS)
            for key, first in zip(keys, range(0, len(further), PUMP_SLICE), strict=True):
                part = msgspec.structs.replace(req, children=further[first : first + PUMP_SLICE])
                calls[PUMP_RUN.call(ctx, key, part)] = None
        await _settle_as_they_finish(ctx, req, calls)

    @pump.handler(name=PUMP_REDRIVE.handler, ingress_private=True, state_preload=False)
    async def redrive(ctx: restate.ObjectContext, req: PumpRun) -> None:
        """Decision 48: a reopen's re-dispatch of children that had no outcome when it reopened.

        Sent to the group's pump, it queues behind that pump's run (both exclusive on its key), which
        ends only after every further slice's run has: so every child some run could still settle has
        settled or ended by now, and a child runs again only if no outcome is stored for it (its runner
        was missing: a routing miss ended it). The further slices' children are redriven by their
        own pumps, called (so that cancelling this one cancels them), where their outcomes live.
        """
        mine: list[RuntimeEffectEnvelope] = []
        theirs: dict[str, list[RuntimeEffectEnvelope]] = {}
        for child in req.children:
            key = _slice_key(req, child)
            if key == ctx.key():
                mine.append(child)
            else:
                theirs.setdefault(key, []).append(child)
        calls: dict[Any, RuntimeEffectEnvelope | None] = {}
        for child in mine:
            if await ctx.get(pump_store(_position(child)), serde=_BYTES) is None:
                calls[CHILD_EXECUTE.call(ctx, child.replay_key, child)] = child
        for key, part in theirs.items():
            calls[PUMP_REDRIVE.call(ctx, key, msgspec.structs.replace(req, children=part))] = None
        await _settle_as_they_finish(ctx, req, calls)

    # Lazy state (decision 46): Restate 1.7 pauses an invocation whose eager state is over its
    # per-invocation memory limit (the message limit, 32 MiB, by default), and a pump may keep up to
    # PUMP_SLICE outcomes of up to that size each: a read must load only what it asks for.
    @pump.handler(
        name=PUMP_OUTCOMES.handler,
        kind="shared",
        ingress_private=True,
        state_preload=False,
        input_serde=_READ,
        output_serde=_BYTES,
    )
    @terminal_errors
    async def outcomes(ctx: restate.ObjectSharedContext, asked: list[int] | OutcomesRead) -> bytes:
        """The stored outcomes asked for, one JSON array, cut short to stay within the read's budget."""
        read = asked if isinstance(asked, OutcomesRead) else OutcomesRead(positions=asked)
        reads = [
            ctx.get(pump_store(int(position)), serde=_BYTES)
            for position in read.positions[:OUTCOMES_PER_READ]
        ]
        if reads:
            await restate.gather(*reads)
        found: list[bytes] = []
        size = 0
        for state in reads:
            outcome = await state
            if outcome is None:
                if not found:  # ranked, so stored, unless the group was closed meanwhile
                    raise GroupNotOpen(
                        "the group was closed while reading", group_key=group_of_pump(ctx.key())
                    )
                break
            if (found or not read.first) and size + len(outcome) > read.budget:
                break
            found.append(outcome)
            size += len(outcome)
        return b"[" + b",".join(found) + b"]"

    @pump.handler(name=PUMP_FORGET.handler, ingress_private=True, state_preload=False)
    async def forget(ctx: restate.ObjectContext) -> None:
        for key in await ctx.get(SLICES, serde=_KEYS) or []:
            PUMP_FORGET.send(ctx, key, None)  # each ran to its end before this pump's run did
        ctx.clear_all()

    del run, redrive, outcomes, forget
    return pump


async def _settle_as_they_finish(
    ctx: restate.ObjectContext, req: PumpRun, calls: dict[Any, RuntimeEffectEnvelope | None]
) -> None:
    """Wait on ``calls`` (children, and further slices' pumps: None); each time some finish, store the
    children's outcomes and settle them into the group in one batch."""
    pending: list[Any] = list(calls)
    while pending:
        try:
            done, pending = await restate.wait_completed(*pending)
        except restate.TerminalError as error:
            if not is_cancellation(error):
                raise
            # Cancelled (a Cancel close, or its caller ended): the SDK has cancelled the calls
            # still pending, and their Cancelled terminals still rank (ADR, "Close deletes…").
            continue
        refs, inline = [], 0
        for future in done:
            child = calls[future]
            if child is None:
                await _slice_ended(future)
                continue
            outcome = await _child_outcome(future, child)
            if outcome is None:
                continue  # a routing miss: no terminal is synthesized, the rank stays unallocated
            position = _position(child)
            # Stored before the batch is sent, so a rank is never readable before its outcome.
            ctx.set(pump_store(position), outcome, serde=_BYTES)
            carry = len(outcome) <= INLINE_OUTCOME_BYTES and inline + len(outcome) <= BATCH_INLINE_BYTES
            inline += len(outcome) if carry else 0
            refs.append(
                Ref(position=position, replay_key=child.replay_key, outcome=outcome if carry else None)
            )
        if refs:
            batch = SettleBatch(incarnation=req.incarnation, mode=SettlementMode.PUMPED, refs=refs)
            await _forward(ctx, req.group_key, batch)


def _position(child: RuntimeEffectEnvelope) -> int:
    assert child.membership is not None  # the group stamped every child
    return child.membership.position


def _slice_key(req: PumpRun, first: RuntimeEffectEnvelope) -> str:
    assert first.membership is not None  # the group stamped every child
    return slice_key(req.group_key, req.incarnation, first.membership.position)


async def _slice_ended(future: Any) -> None:
    """A further slice's pump returned: its children were settled by it, not here."""
    try:
        await future
    except restate.TerminalError as error:
        if not is_cancellation(error):
            logs.logger.warning("a slice's pump failed: %s", error.message)


async def _child_outcome(future: Any, child: RuntimeEffectEnvelope) -> bytes | None:
    """A child call's outcome bytes; None when the child could not be routed (ADR: a 404 is terminal)."""
    try:
        return bytes(await future)
    except restate.TerminalError as error:
        if is_cancellation(error):
            return encode(Cancelled())  # cancelled before it could record its own terminal
        if error.status_code != NOT_FOUND:
            ended = "child ended without a settlement: %s"
            logs.logger.warning(ended, error.message, extra={"replay_key": child.replay_key})
        return None


async def _forward(ctx: restate.ObjectContext, group_key: str, batch: SettleBatch) -> None:
    """Hand a batch to the group, again if a cancel of the pump interrupted the call (it is idempotent)."""
    while True:
        try:
            await GROUP_SETTLE.call(ctx, group_key, batch)
            return
        except restate.TerminalError as error:
            if not is_cancellation(error):
                raise
