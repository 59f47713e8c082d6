"""`LashGroup`, keyed by the group key: the single writer of one group's ranks.

ADR, "Restate satisfaction: the group virtual object is the rank authority". State: ``meta`` (the
small hot `GroupMeta`: rank order, waiters, openers, incarnation, settlement mode), ``fence`` (the
recorded `GroupShape`, read only by open, reads of past ranks, a direct close, a killed run's
repair and the keeping of a child that missed its runner), the invocation
ids a `Cancel` needs and, for a pumped group recorded now, how to reach its pump at the close (``pump``).
Payload bytes never enter it.

A group is recorded in one of two settlement modes (`record_group`): pumped (a call child, a
`max_in_flight` bound, or `batch_from` children or more: a pump per slice of 256 awaits its
children, one for a bounded group, decisions 61, 65 and 81)
or direct (each child's own run settles it, decision 20); a group a release before recorded goes on
as it did.

This module binds each handler, in one place; what each does is a function of the module for its
job: `_group_open` (open, open in parts), `_group_rank` (report, settle, wait), `_group_close`
(close, the operator's close), `_group_watch` (openers, savers, runs, reclaim), `_group_guard`
(waiting callers' wakes), `_group_dispatch` (what missed its runner, and a reopen's re-dispatch)
and `_group_resend` (what Restate killed before it answered a caller, sent again on an operator's
word).
"""

from __future__ import annotations

from datetime import timedelta

import restate

from ..child._routing import Routing
from ..wire._errors import HANDLER_RETRY, client_errors, terminal_errors
from ..wire._messages import (
    CallerEnded,
    CloseRequest,
    Guard,
    MissedChildren,
    OpenRequest,
    OpenRequestSerde,
    OperatorClose,
    OperatorClosed,
    OperatorRedispatch,
    OperatorRedispatched,
    OperatorResend,
    OperatorResent,
    PartedOpen,
    PumpReport,
    Reclaim,
    ReportReply,
    RunEnded,
    RunsWatch,
    SettleBatch,
    WaitReply,
    WaitRequest,
)
from ..wire._routes import (
    GROUP,
    GROUP_CALLER_ENDED,
    GROUP_CLOSE,
    GROUP_GUARD,
    GROUP_HELD,
    GROUP_HOLD,
    GROUP_MISSED,
    GROUP_OPEN,
    GROUP_OPEN_PARTS,
    GROUP_OPERATOR_CLOSE,
    GROUP_OPERATOR_REDISPATCH,
    GROUP_OPERATOR_RESEND,
    GROUP_RECLAIM,
    GROUP_REPORT,
    GROUP_RUN_ENDED,
    GROUP_SAVED,
    GROUP_SETTLE,
    GROUP_WAIT,
    GROUP_WATCH,
    GROUP_WATCH_RUNS,
    described_by,
    named,
)
from ._group_close import on_close, on_operator_close
from ._group_common import GroupSettings
from ._group_dispatch import on_missed, on_operator_redispatch
from ._group_guard import WAITER_CHECK, on_guard
from ._group_open import on_open, on_open_parts
from ._group_rank import on_report, on_settle, on_wait
from ._group_resend import on_operator_resend
from ._group_watch import (
    ORPHAN_RETENTION,
    on_caller_ended,
    on_held,
    on_hold,
    on_reclaim,
    on_run_ended,
    on_saved,
    on_watch,
    on_watch_runs,
)
from ._pages import PAGE_FROM

__all__ = ["ORPHAN_RETENTION", "WAITER_CHECK", "GroupSettings", "group_object"]


def group_object(
    batch_from: int,
    routing: Routing,
    *,
    page_from: int = PAGE_FROM,
    orphan_retention: timedelta = ORPHAN_RETENTION,
    waiter_check: timedelta = WAITER_CHECK,
    metadata: dict[str, str] | None = None,
) -> restate.VirtualObject:
    """`LashGroup`; a group of ``batch_from`` children or more settles through a pump (decision 20),
    and a pumped group of ``page_from`` children or more keeps its ranks in pages (decision 65). A
    group nobody can resume is closed ``orphan_retention`` after it was orphaned (decision 78); a
    caller's registered wakes are looked at every ``waiter_check`` while it waits (decision 83).

    A first open is routed here, where the children run, with ``routing`` (decision 37).
    """
    group = restate.VirtualObject(named(GROUP), invocation_retry_policy=HANDLER_RETRY, metadata=metadata)
    settings = GroupSettings(batch_from, routing, page_from, orphan_retention, waiter_check)

    # Reads children in either format (decision 46); this release writes format 1.
    @group.handler(name=GROUP_OPEN.handler, ingress_private=True, input_serde=OpenRequestSerde())
    @described_by(on_open)
    async def open(ctx: restate.ObjectContext, req: OpenRequest) -> None:
        await on_open(ctx, req, settings)

    @group.handler(name=GROUP_OPEN_PARTS.handler, ingress_private=True, state_preload=False)
    @described_by(on_open_parts)
    async def open_parts(ctx: restate.ObjectContext, req: PartedOpen) -> None:
        await on_open_parts(ctx, req, settings)

    @group.handler(name=GROUP_REPORT.handler, ingress_private=True, state_preload=False)
    @terminal_errors
    @described_by(on_report)
    async def report(ctx: restate.ObjectContext, batch: PumpReport) -> ReportReply:
        return await on_report(ctx, batch)

    @group.handler(name=GROUP_SETTLE.handler, ingress_private=True, state_preload=False)
    @terminal_errors
    @described_by(on_settle)
    async def settle(ctx: restate.ObjectContext, batch: SettleBatch) -> None:
        await on_settle(ctx, batch)

    @group.handler(name=GROUP_WAIT.handler, ingress_private=True, state_preload=False)
    @terminal_errors
    @described_by(on_wait)
    async def wait(ctx: restate.ObjectContext, req: WaitRequest) -> WaitReply:
        return await on_wait(ctx, req, settings)

    @group.handler(name=GROUP_CLOSE.handler, ingress_private=True, state_preload=False)
    @terminal_errors
    @described_by(on_close)
    async def close(ctx: restate.ObjectContext, req: CloseRequest) -> None:
        await on_close(ctx, req)

    @group.handler(name=GROUP_OPERATOR_CLOSE.handler, state_preload=False)
    @client_errors  # called through the ingress only: what it answers is for a client
    @described_by(on_operator_close)
    async def operator_close(ctx: restate.ObjectContext, req: OperatorClose) -> OperatorClosed:
        return await on_operator_close(ctx, req)

    @group.handler(name=GROUP_WATCH.handler, kind="shared", ingress_private=True)
    @described_by(on_watch)
    async def watch(ctx: restate.ObjectSharedContext, ended: CallerEnded) -> None:
        await on_watch(ctx, ended)

    @group.handler(name=GROUP_CALLER_ENDED.handler, ingress_private=True, state_preload=False)
    @described_by(on_caller_ended)
    async def caller_ended(ctx: restate.ObjectContext, ended: CallerEnded) -> None:
        await on_caller_ended(ctx, ended, settings)

    @group.handler(name=GROUP_RECLAIM.handler, ingress_private=True, state_preload=False)
    @described_by(on_reclaim)
    async def reclaim(ctx: restate.ObjectContext, req: Reclaim) -> None:
        await on_reclaim(ctx, req, settings)

    @group.handler(name=GROUP_SAVED.handler, ingress_private=True, state_preload=False)
    @described_by(on_saved)
    async def saved(ctx: restate.ObjectContext, saver: CallerEnded) -> None:
        await on_saved(ctx, saver)

    @group.handler(name=GROUP_HOLD.handler, kind="shared", ingress_private=True)
    @described_by(on_hold)
    async def hold(ctx: restate.ObjectSharedContext, saver: CallerEnded) -> None:
        await on_hold(ctx, saver)

    @group.handler(name=GROUP_HELD.handler, ingress_private=True, state_preload=False)
    @described_by(on_held)
    async def held(ctx: restate.ObjectContext, ended: CallerEnded) -> None:
        await on_held(ctx, ended)

    @group.handler(name=GROUP_MISSED.handler, ingress_private=True, state_preload=False)
    @described_by(on_missed)
    async def missed(ctx: restate.ObjectContext, req: MissedChildren) -> None:
        await on_missed(ctx, req)

    @group.handler(name=GROUP_OPERATOR_REDISPATCH.handler, state_preload=False)
    @client_errors  # called through the ingress only: what it answers is for a client
    @described_by(on_operator_redispatch)
    async def operator_redispatch(
        ctx: restate.ObjectContext, req: OperatorRedispatch
    ) -> OperatorRedispatched:
        return await on_operator_redispatch(ctx, req, settings)

    @group.handler(name=GROUP_OPERATOR_RESEND.handler, kind="shared")
    @client_errors  # called through the ingress only: what it answers is for a client
    @described_by(on_operator_resend)
    async def operator_resend(ctx: restate.ObjectSharedContext, req: OperatorResend) -> OperatorResent:
        return await on_operator_resend(ctx, req)

    @group.handler(name=GROUP_WATCH_RUNS.handler, kind="shared", ingress_private=True)
    @described_by(on_watch_runs)
    async def watch_runs(ctx: restate.ObjectSharedContext, req: RunsWatch) -> None:
        await on_watch_runs(ctx, req)

    @group.handler(name=GROUP_RUN_ENDED.handler, ingress_private=True, state_preload=False)
    @described_by(on_run_ended)
    async def run_ended(ctx: restate.ObjectContext, ended: RunEnded) -> None:
        await on_run_ended(ctx, ended)

    @group.handler(name=GROUP_GUARD.handler, ingress_private=True, state_preload=False)
    @described_by(on_guard)
    async def guard(ctx: restate.ObjectContext, req: Guard) -> None:
        await on_guard(ctx, req)

    del open, open_parts, report, settle, wait, close, operator_close, watch, caller_ended, hold, held
    del missed, operator_redispatch, watch_runs, run_ended, reclaim, saved, guard
    return group
