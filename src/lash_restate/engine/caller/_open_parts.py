"""The caller's side of an open too large for one message (decision 65): its children staged with
the pumps of a fresh incarnation, part by part, then `LashGroup/open_parts` with the shape alone."""

from __future__ import annotations

import math

import msgspec
import restate

from ...contract import ChildUnroutable, LashError, RuntimeEffectEnvelope, RuntimeEffectGroup
from ..group._mode import PUMP_SLICE, slice_key
from ..group._pages import width_setting
from ..wire._errors import typed
from ..wire._incarnation import PAGED
from ..wire._messages import PartedOpen, StagedPart
from ..wire._routes import GROUP_OPEN_PARTS, PUMP_FORGET, PUMP_STAGE

__all__ = ["PARTS_FROM_ENV", "open_in_parts", "parts_from"]

# For tests: a group this wide or wider opens in parts even when one message would carry it, so that
# the conformance suite runs on that layout too (the batched tier sets it to 1). Unset: only a group
# too large for one open message does.
PARTS_FROM_ENV = "LASH_PARTS_FROM"
STAGE_WAVE = 16  # parts staged at once


async def open_in_parts(
    ctx: restate.Context,
    group: RuntimeEffectGroup,
    key: str,
    answer: str,
    wakes: list[str],
    *,
    reopen_only: bool,
    reopens: str | msgspec.UnsetType = msgspec.UNSET,
) -> restate.SendHandle:
    """Stage ``group``'s children with the pumps of a fresh incarnation, then send `PartedOpen`, and
    return its handle.

    Each part is called, so a child the endpoint cannot route refuses a first open
    (`ChildUnroutable`) before the group is recorded; the group then releases the parts staged, and
    nothing is left (a reopen refuses nothing). A resume stages nothing: the group runs again the
    children it kept as missed, and a resume that finds no group refuses.
    """
    stage = f"{PAGED}{ctx.uuid()}"
    keys = [slice_key(key, stage, first) for first in range(0, len(group), PUMP_SLICE)]
    unroutable: str | msgspec.UnsetType = msgspec.UNSET
    if not reopen_only:
        children = group.children
        starts = list(zip(keys, range(0, len(group), PUMP_SLICE), strict=True))
        calls = []
        try:
            # A few parts at a time: each is ~100 KB encoded, held by this endpoint until sent and
            # again by the pump's stage while it runs. The same calls in the same order: a replay
            # journals alike.
            for wave in range(0, len(starts), STAGE_WAVE):
                staged = [
                    PUMP_STAGE.call(ctx, part, _part(key, children[f : f + PUMP_SLICE]))
                    for part, f in starts[wave : wave + STAGE_WAVE]
                ]
                await restate.gather(*staged)
                calls += staged
            for call in calls:
                try:
                    await typed(call)
                except ChildUnroutable as refused:
                    # A first open is refused with the first of these; a reopen refuses nothing:
                    # only the group knows which this is (decision 84).
                    if isinstance(unroutable, msgspec.UnsetType):
                        unroutable = refused.to_wire()
        # A stage's other refusal (a routing miss is caught above and carried to the group), or
        # this caller cancelled while it stages (a terminal error at an await): no open will
        # follow, so nothing of it is kept. A forget queues behind its key's stage, and one of a
        # part never staged finds nothing.
        except (LashError, restate.TerminalError):
            for part in keys:
                PUMP_FORGET.send(ctx, part, None)
            raise
    request = PartedOpen(
        reply_to=answer,
        shape=group.shape(),
        stage=stage,
        parts=0 if reopen_only else len(keys),
        caller=ctx.request().id,
        wakes=wakes,
        reopen_only=reopen_only,
        unroutable=unroutable,
        reopens=reopens,
    )
    return GROUP_OPEN_PARTS.send(ctx, key, request)


def _part(key: str, children: tuple[RuntimeEffectEnvelope, ...]) -> StagedPart:
    return StagedPart(group_key=key, children=list(children))


def parts_from() -> float:
    """How wide a group must be to open in parts whatever its size (`PARTS_FROM_ENV`; else never)."""
    width = width_setting(PARTS_FROM_ENV)
    return math.inf if width is None else width
