"""`LashPump`'s outcome store: read in bulk by whoever serves a rank (`outcomes`). A pump releases
its own store, and its further slices' pumps', once it hears that the group closed (the close's
awakeable or a report's answer: `release_store_and_slices`); the close's `forget` releases those of a pump
that stopped listening or ended without hearing it (decisions 61, 102)."""

from __future__ import annotations

import restate

from ...contract import GroupNotOpen
from ..group._mode import pump_store
from ..wire._messages import OutcomesRead
from ..wire._records import BYTES, STRINGS, MsgspecSerde
from ..wire._routes import group_of_pump
from ._pump_common import SLICES, release_store_and_slices

__all__ = ["OUTCOMES_PER_READ", "READ", "on_forget", "on_outcomes", "within_budget"]

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
    stored = [await state for state in reads]
    if stored and stored[0] is None:  # ranked, so stored, unless the group was closed meanwhile
        # ... or this store deleted outside lash (`restate state clear`): the message says both.
        raise GroupNotOpen(
            f"the group was closed while reading, or the outcome store of {ctx.key()} was deleted: "
            f"child {read.positions[0]} has no stored outcome",
            group_key=group_of_pump(ctx.key()),
        )
    return b"[" + b",".join(within_budget(stored, read.budget, first=read.first)) + b"]"


def within_budget(stored: list[bytes | None], budget: int, *, first: bool) -> list[bytes]:
    """The leading outcomes of ``stored`` whose sizes add up to at most ``budget`` bytes, up to the
    first one missing; the first whatever its size when ``first`` (the read that must answer the
    next rank: an outcome alone always fits a reply, decision 35)."""
    found: list[bytes] = []
    size = 0
    for outcome in stored:
        if outcome is None or ((found or not first) and size + len(outcome) > budget):
            break
        found.append(outcome)
        size += len(outcome)
    return found


async def on_forget(ctx: restate.ObjectContext) -> None:
    """The group's close releases this pump's store, and those of its further slices' pumps."""
    release_store_and_slices(ctx, await ctx.get(SLICES, serde=STRINGS) or [])
