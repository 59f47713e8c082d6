"""What every `LashPump` handler shares: its further slices' keys, how a batch of settlements is put
together and reported to the group, and how its store is released."""

from __future__ import annotations

from typing import Any

import restate

from ... import logs
from ...contract import RuntimeEffectEnvelope
from ..group._mode import PUMP_FANOUT, PUMP_SLICE, slice_key
from ..wire._messages import (
    BATCH_INLINE_BYTES,
    INLINE_OUTCOME_BYTES,
    PumpAwait,
    PumpReport,
    PumpRun,
    Ref,
    ReportReply,
)
from ..wire._routes import (
    GROUP_REPORT,
    PUMP_FORGET,
)

__all__ = [
    "SLICES",
    "add_ref",
    "covered_slices",
    "fan_out",
    "further_slice_key",
    "group_is_open",
    "release_store_and_slices",
    "report_batch",
    "report_noting_cancel",
    "slice_ended",
    "split_plan",
    "subtrees",
]

# The group's pump keeps the keys of the further slices' pumps here, for its forget (decision 35).
SLICES = "slices"


def add_ref(refs: list[Ref], position: int, replay_key: str, outcome: bytes, inline: int) -> int:
    """Append the ref reporting a stored ``outcome``, carrying it if it fits what one outcome and one
    batch may carry (``inline`` bytes carried so far); the bytes carried now."""
    carry = len(outcome) <= INLINE_OUTCOME_BYTES and inline + len(outcome) <= BATCH_INLINE_BYTES
    refs.append(Ref(position=position, replay_key=replay_key, outcome=outcome if carry else None))
    return inline + len(outcome) if carry else inline


def release_store_and_slices(ctx: restate.ObjectContext, slices: list[str]) -> None:
    """Clear this pump's whole state (its outcomes, and the `RAN`, `STAGED` and `SLICES` notes,
    which `inspection` reads) and send `forget` to the pumps of ``slices``: the group closed, so
    nothing they keep will be read again; or (`run_parts` cut short, a further pump failed after
    the close) nothing will run there, and what was staged there is let go."""
    for key in slices:
        PUMP_FORGET.send(ctx, key, None)  # queued behind its run, as the group's `forget` sends them
    ctx.clear_all()


async def report_batch(ctx: restate.ObjectContext, group_key: str, report: PumpReport) -> ReportReply:
    """Hand a report to the group, again if a cancel of the pump interrupted the call (it is idempotent)."""
    return (await report_noting_cancel(ctx, group_key, report))[0]


async def group_is_open(ctx: restate.ObjectContext, group_key: str, incarnation: str) -> bool:
    """Whether the group of ``incarnation`` is still open: an empty report ranks nothing, and its
    reply says so (a closed group's pumps release their stores)."""
    return (await report_batch(ctx, group_key, PumpReport(incarnation=incarnation))).open


async def report_noting_cancel(
    ctx: restate.ObjectContext, group_key: str, report: PumpReport
) -> tuple[ReportReply, bool]:
    """`report_batch`, and whether a cancel of the pump came meanwhile (the SDK delivers it once).

    A report that itself ended in failure (an operator killed or cancelled it while it waited behind
    the group's other work) is made again too, and is not this pump's cancel (decision 86): read as
    one, a bounded group's children not yet started would settle as cancelled.
    """
    return await GROUP_REPORT.ask_made_again(ctx, group_key, report)


async def slice_ended(future: Any, group_key: str) -> restate.TerminalError | None:
    """A further slice's pump of the group ``group_key`` returned: its children were settled by it,
    not here; the failure it ended with, if it did not settle them, else None.

    A pump that runs settles its children whatever ends it early: a cancel (a `Cancel` close's,
    which comes down the tree of calls) leaves it awaiting their `Cancelled` terminals, and it
    returns. So one that ended in failure did not: killed, or cancelled before it called them
    (decision 100), its children hold no rank unless their outcomes were stored.
    """
    try:
        await future
    except restate.TerminalError as error:
        # Named: an operator reading the endpoint's log finds the group (a kill of its pump, say).
        logs.logger.warning("a slice's pump of group %s failed: %s", group_key, error.message)
        return error
    return None


def covered_slices(group_key: str, incarnation: str, covers: tuple[int, int]) -> list[str]:
    """The keys of the pumps of the whole slices ``covers`` spans: a further slice's pump's subtree."""
    first, end = covers
    return [slice_key(group_key, incarnation, position) for position in range(first, end, PUMP_SLICE)]


def further_slice_key(req: PumpRun | PumpAwait, first: RuntimeEffectEnvelope) -> str:
    assert first.membership is not None  # the group stamped every child
    return slice_key(req.group_key, req.incarnation, first.membership.position)


def fan_out(count: int) -> list[tuple[int, int]]:
    """``count`` further slices split into at most `PUMP_FANOUT` contiguous runs of whole slices, as
    even as they come: (offset of the run's first slice, its number of slices) each (decision 65)."""
    per = -(-count // PUMP_FANOUT)
    return [(offset, min(per, count - offset)) for offset in range(0, count, per)] if count else []


def split_plan(plan: list[str], parts: list[list[RuntimeEffectEnvelope]]) -> list[list[str]]:
    """``plan`` (one entry per child of ``parts``, in order) cut as ``parts`` are, one list per part."""
    cut, first = [], 0
    for part in parts:
        cut.append(plan[first : first + len(part)])
        first += len(part)
    return cut


def subtrees(further: list[RuntimeEffectEnvelope]) -> list[list[RuntimeEffectEnvelope]]:
    """``further`` (whole slices after a pump's own, in position order) as `fan_out` splits them."""
    runs = fan_out(-(-len(further) // PUMP_SLICE))
    return [further[o * PUMP_SLICE : (o + n) * PUMP_SLICE] for o, n in runs]
