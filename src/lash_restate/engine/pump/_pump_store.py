"""`LashPump`'s outcome store: read in bulk by whoever serves a rank (`outcomes`), released once at
the group's close (`forget`, for the pump and every further slice it started)."""

from __future__ import annotations

import restate

from ...contract import GroupNotOpen
from ..group._mode import pump_store
from ..wire._messages import OutcomesRead
from ..wire._records import MsgspecSerde
from ..wire._routes import (
    PUMP_FORGET,
    group_of_pump,
)
from ._pump_common import BYTES, KEYS, SLICES

__all__ = ["OUTCOMES_PER_READ", "READ", "on_forget", "on_outcomes"]

# The SDK's default serde leaves a union as plain JSON: decode a bulk read's request ourselves.
READ: MsgspecSerde[list[int] | OutcomesRead] = MsgspecSerde(list[int] | OutcomesRead)
# A bulk read of the outcomes this pump keeps asks for at most this many at once.
OUTCOMES_PER_READ = 256


async def on_outcomes(ctx: restate.ObjectSharedContext, asked: list[int] | OutcomesRead) -> bytes:
    """The stored outcomes asked for, one JSON array, cut short to stay within the read's budget."""
    read = asked if isinstance(asked, OutcomesRead) else OutcomesRead(positions=asked)
    reads = [
        ctx.get(pump_store(int(position)), serde=BYTES) for position in read.positions[:OUTCOMES_PER_READ]
    ]
    if reads:
        await restate.gather(*reads)
    found: list[bytes] = []
    size = 0
    for state in reads:
        outcome = await state
        if outcome is None:
            if not found:  # ranked, so stored, unless the group was closed meanwhile
                raise GroupNotOpen("the group was closed while reading", group_key=group_of_pump(ctx.key()))
            break
        if (found or not read.first) and size + len(outcome) > read.budget:
            break
        found.append(outcome)
        size += len(outcome)
    return b"[" + b",".join(found) + b"]"


async def on_forget(ctx: restate.ObjectContext) -> None:
    for key in await ctx.get(SLICES, serde=KEYS) or []:
        PUMP_FORGET.send(ctx, key, None)  # each ran to its end before this pump's run did
    ctx.clear_all()
