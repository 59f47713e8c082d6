"""`LashPump`'s path kept only for what the baseline release (0450b4d, format 1) sent, which settles
through `LashGroup/settle` rather than `report`: its pumped groups' `run` (`PumpRun`). It may go once
the compatibility promise's baseline moves past 0450b4d (docs/compatibility.md): no group that
release opened can then be open."""

from __future__ import annotations

from typing import Any

import msgspec
import restate

from ...contract import Cancelled, RuntimeEffectEnvelope
from ..group._mode import PUMP_SLICE, position_of, pump_store
from ..pump._pump_common import (
    SLICES,
    add_ref,
    further_slice_key,
    slice_ended,
)
from ..wire._errors import is_cancellation
from ..wire._formats import stored_outcome
from ..wire._messages import (
    PumpRun,
    Ref,
    SettleBatch,
)
from ..wire._records import BYTES, STRINGS, SettlementMode
from ..wire._routes import (
    CHILD_EXECUTE,
    GROUP_SETTLE,
    PUMP_RUN,
)

__all__ = [
    "baseline_outcome",
    "forward_batch",
    "on_baseline_run",
    "settle_as_they_finish",
]


async def on_baseline_run(ctx: restate.ObjectContext, req: PumpRun) -> None:
    own, further = req.children[:PUMP_SLICE], req.children[PUMP_SLICE:]
    calls: dict[Any, RuntimeEffectEnvelope | None] = {
        CHILD_EXECUTE.call(ctx, child.replay_key, child): child for child in own
    }
    if further:
        # Decision 35: each further slice of PUMP_SLICE children gets a pump of its own, called (not
        # sent) so that cancelling this pump cancels it, and this run outlives it.
        keys = [further_slice_key(req, child) for child in further[::PUMP_SLICE]]
        ctx.set(SLICES, keys, serde=STRINGS)
        for key, first in zip(keys, range(0, len(further), PUMP_SLICE), strict=True):
            part = msgspec.structs.replace(req, children=further[first : first + PUMP_SLICE])
            calls[PUMP_RUN.call(ctx, key, part)] = None
    await settle_as_they_finish(ctx, req, calls)


async def settle_as_they_finish(
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
        refs: list[Ref] = []
        inline = 0
        for future in done:
            child = calls[future]
            if child is None:
                await slice_ended(future, req.group_key)
                continue
            outcome = await baseline_outcome(future)
            if outcome is None:
                continue  # a routing miss: no terminal is synthesized, the rank stays unallocated
            position = position_of(child)
            # Stored before the batch is sent, so a rank is never readable before its outcome.
            ctx.set(pump_store(position), outcome, serde=BYTES)
            inline = add_ref(refs, position, child.replay_key, outcome, inline)
        if refs:
            batch = SettleBatch(incarnation=req.incarnation, mode=SettlementMode.PUMPED, refs=refs)
            await forward_batch(ctx, req.group_key, batch)


async def baseline_outcome(future: Any) -> bytes | None:
    """A child's outcome bytes as the baseline read its `LashChild/execute`'s end, so that a pump it
    journaled replays here: any cancellation (409, a kill's included) settles `Cancelled`, any other
    terminal (a miss's 404 among them) settles nothing. (`executed_outcome` answers a kill 409 `killed`
    and settles the others, which this release's own pumps journal.)"""
    try:
        return bytes(await future)
    except restate.TerminalError as error:
        return stored_outcome(Cancelled()) if is_cancellation(error) else None


async def forward_batch(ctx: restate.ObjectContext, group_key: str, batch: SettleBatch) -> None:
    """Hand a batch to the group, again if a cancel of the pump interrupted the call (it is idempotent)."""
    while True:
        try:
            await GROUP_SETTLE.call(ctx, group_key, batch)
            return
        except restate.TerminalError as error:
            if not is_cancellation(error):
                raise
