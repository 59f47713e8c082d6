"""`LashGroup`'s resend (`operator_resend`, public): what Restate killed or cancelled before it
answered a waiting caller, sent again on the operator's word (`lash-restate groups stranded
--resend`, which reads it from the caller's journal): an open, as a reopen (decision 93), or a
guard's look at a caller's wakes whose record was cleared (decision 128). What it is handed is
checked here, as anyone who reaches the ingress may send it."""

from __future__ import annotations

from datetime import timedelta

import msgspec
import restate

from ...contract import InvalidInput
from ..wire._messages import (
    Guard,
    OperatorResend,
    OperatorResent,
    PartedOpen,
    decode,
    require_awakeable,
    require_invocation_id,
)
from ..wire._open_request import decode_open
from ..wire._records import META, RECORD
from ..wire._routes import GROUP_GUARD, GROUP_OPEN, GROUP_OPEN_PARTS
from ._group_guard import LOOK_AT_MOST_EVERY
from ._group_open import carries_its_shape, names_its_parts

__all__ = ["on_operator_resend"]


# See decisions 93 and 128 (its docstring is what Restate's UI shows).
async def on_operator_resend(ctx: restate.ObjectSharedContext, req: OperatorResend) -> OperatorResent:
    """Send again what Restate killed or cancelled before it answered a waiting caller (read from
    the caller's journal by `lash-restate groups stranded`). An open, as a reopen: a group its first
    open recorded goes on as the caller expected, one never recorded refuses it (`group_not_open`),
    which ends the caller. A guard's look at a caller's wakes: if the group's record is gone (or is
    another incarnation's), it ends them (`group_not_open`); one naming the group recorded now is
    refused (its ranks and its own guard serve those wakes). So this public handler runs no child a
    group did not record, and ends no wake a recorded group holds. Shared: it sends, and waits
    behind nothing the group is doing."""
    try:
        if req.handler == GROUP_OPEN.handler:
            reopen = msgspec.structs.replace(decode_open(req.request), reopen_only=True)
            require_awakeable(reopen.reply_to)
            _check_caller(reopen.caller)
            carries_its_shape(reopen, ctx.key())
            sent = GROUP_OPEN.send(ctx, ctx.key(), reopen)
        elif req.handler == GROUP_OPEN_PARTS.handler:
            parted = msgspec.structs.replace(decode(req.request, PartedOpen), reopen_only=True)
            require_awakeable(parted.reply_to)
            _check_caller(parted.caller)
            if not names_its_parts(parted):
                raise InvalidInput("an open in parts names no staged parts of this group")
            sent = GROUP_OPEN_PARTS.send(ctx, ctx.key(), parted)
        elif req.handler == GROUP_GUARD.handler:
            look = decode(req.request, Guard)
            await _check_look(ctx, look)
            sent = GROUP_GUARD.send(ctx, ctx.key(), look)
        else:
            raise InvalidInput(
                f"only an open (open, open_parts) or a guard's look is sent again, not {req.handler!r}"
            )
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise InvalidInput(f"not a {req.handler!r} request of this group object: {exc}") from None
    return OperatorResent(invocation=await sent.invocation_id())


def _check_caller(caller: str | None) -> None:
    """An open sent again names its opener, whose end the group watches (an attach): a caller's
    journal holds its own id there, or none."""
    if caller is not None:
        require_invocation_id(caller)


async def _check_look(ctx: restate.ObjectSharedContext, look: Guard) -> None:
    """A guard's look sent again ends the wakes of a group whose record is gone (decision 128): one
    at wakes of the group recorded now is refused, as its ranks and its own guard serve them (and
    each look it let through would keep one more pending guard in its state)."""
    for awakeable in look.waiters:
        require_awakeable(awakeable)
    # It looks again twice as long later: 0 would look without a pause, and past a day's
    # milliseconds the delay overflows (a plain error, retried for ever).
    if not 1000 <= look.after_ms <= LOOK_AT_MOST_EVERY // timedelta(milliseconds=1):
        raise InvalidInput(f"a guard looks again after 1000 ms to a day, not {look.after_ms} ms")
    meta = await ctx.get(RECORD, serde=META)
    if meta is not None and meta.incarnation == look.incarnation:
        raise InvalidInput(
            "the group that registered these wakes is recorded: its ranks wake them, and its own "
            "guard looks at them"
        )
