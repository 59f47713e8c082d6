"""What every `LashGroup` handler shares: the endpoint's settings for its groups, the serdes of
what it answers, and the ids of the invocations it sent itself, which its close cancels."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import msgspec
import restate

from ... import logs
from ...contract import GroupNotOpen, check_child_count
from ..child._routing import Routing
from ..wire._messages import OpenReply, WaitReply
from ..wire._records import META, RECORD, STRINGS, GroupMeta, MsgspecSerde
from ..wire._routes import PUMP_FORGET

__all__ = [
    "CANCELLED_AT_CLOSE",
    "LISTENED",
    "OPENED",
    "REPLY",
    "GroupSettings",
    "cancel_at_close",
    "cancel_runs",
    "check_incarnation",
    "open_meta",
    "release_staged",
]

REPLY: MsgspecSerde[WaitReply] = MsgspecSerde(WaitReply)
OPENED: MsgspecSerde[OpenReply] = MsgspecSerde(OpenReply)
LISTENED = b"true"  # what a listening pump's awakeable is resolved with (the value is not read)
# The group's state key holding the ids of the invocations it sent itself and keeps pending (its
# watches, holds, guards and reclaims), which its close cancels (decision 74).
CANCELLED_AT_CLOSE = "watches"


@dataclass(frozen=True)
class GroupSettings:
    """What an endpoint sets for its groups: where a group is pumped (decision 20) and paged
    (decision 65), how its children are routed (decision 37), how long an orphan is kept (decision 78),
    how often a waiting caller's group is looked at for a record deleted under it (decision 83)."""

    batch_from: int
    routing: Routing
    page_from: int
    orphan_retention: timedelta
    waiter_check: timedelta


async def cancel_at_close(ctx: restate.ObjectContext, handle: restate.SendHandle) -> None:
    """Keep the id of an invocation the group sent itself, which its close cancels (decision 74)."""
    known = await ctx.get(CANCELLED_AT_CLOSE, serde=STRINGS) or []
    ctx.set(CANCELLED_AT_CLOSE, [*known, await handle.invocation_id()], serde=STRINGS)


def cancel_runs(ctx: restate.ObjectContext, invocations: list[str], meta: GroupMeta) -> None:
    for invocation in invocations:
        ctx.cancel_invocation(invocation)
    if invocations:
        logs.event(
            "group.cancelled", ctx, group_key=ctx.key(), cancelled=len(invocations), mode=meta.mode.value
        )


def release_staged(ctx: restate.ObjectContext, staged: list[str]) -> None:
    """The parts an open in parts staged, which no run will read (decision 65)."""
    for key in staged:
        PUMP_FORGET.send(ctx, key, None)


async def open_meta(
    ctx: restate.ObjectContext, child_count: int, incarnation: str | msgspec.UnsetType = msgspec.UNSET
) -> GroupMeta:
    """The group's record, refused if it is not open, is not the ``incarnation`` a caller's cursor
    names (decision 124: opened under the key since that one was closed), or was opened with
    another child count."""
    meta = await ctx.get(RECORD, serde=META)
    if meta is None:
        raise GroupNotOpen.not_recorded(group_key=ctx.key())
    check_incarnation(ctx, meta, incarnation)
    check_child_count(meta.child_count, child_count, group_key=ctx.key())
    return meta


def check_incarnation(ctx: restate.ObjectContext, meta: GroupMeta, named: str | msgspec.UnsetType) -> None:
    """Refuse a cursor that names another incarnation than the group's (decision 124): its group was
    closed, and the key opened again since. A cursor that names none is not fenced."""
    if not isinstance(named, msgspec.UnsetType) and named != meta.incarnation:
        raise GroupNotOpen.opened_again(group_key=ctx.key())
