"""`LashPump`, keyed by group incarnation and key: a pumped group's children, and its outcome store.

A group is pumped when it has a call child, a bound (`max_in_flight`) or `batch_from` children or
more (`LashGroup`'s `record_group`); only a narrow group of tools, timers and events settles
directly, each child through `LashChild/run`.

Decision 20: the pump awaits its children and, each time it wakes, stores what settled meanwhile and
reports it to the group in one batch: the single writer then runs once per batch, and while it does,
the next batch gathers. The store is this object's state (``o{position}``), read in bulk by
``outcomes`` and released at the group's close (below).

Decisions 35 and 65: a pump waits on at most `PUMP_SLICE` children of an unbounded group (a bounded
group's one pump holds them all, decision 81). The group's pump (the one its open sends) runs the
first slice and calls at most `PUMP_FANOUT` further pumps, each the root of a subtree of slices;
each reports its own batches to the group, which stays the single writer of ranks. Cancelling the
group's pump cancels those calls, and its ``forget`` (queued behind its run, which outlives theirs)
releases their stores too.

Decision 61: ``run2`` is the pump of every pumped group `LashGroup/open` records now, and each of its
children's caller (with ``redispatch``, which calls again, on the same key, a child that missed its
runner): a call child straight to the user's handler (no `LashChild` invocation in
between, under an idempotency key that names the child), anything else through `LashChild/execute2`,
as a plan says: the open's, sent with the children (decision 66), or one the pump journals once. It
reports each batch to `LashGroup/report`, which answers whether the group is still open, and listens
on an awakeable the group's close resolves: then it releases its store and stops (a bounded group's
pump with children yet to start runs them on under `RunToCompletion`, decision 81), so neither a late
settlement nor a release invocation follows the close. Two closes release it otherwise: one that
cancels children does not resolve the awakeable (the pump learns it at its next report), and once
the pump stopped listening (`LINGER` after its last child, saying so in a report) the close sends
its `forget`.

Each handler and the message it takes: ``run2`` and ``redispatch`` a `PumpAwait` (``listens`` is read by
``run2`` alone: a re-dispatch never listens), ``stage`` a `StagedPart`, ``run_parts`` a `PumpParts`,
``fail`` a `ChildrenFailed`, ``forget`` nothing; `PumpRun` is the baseline's ``run``'s.

This module binds each handler, in one place; what each does is a function of the module for its
job: `_pump_run` (run a slice, stage and run an open in parts, re-dispatch, fail a killed run's
children) and `_pump_store` (read and release the outcome store); the baseline's `run`, kept for
the groups it opened, is `engine/compat/_pump_compat.py`.
"""

from __future__ import annotations

import restate

from ..child._routing import Routing
from ..compat._pump_compat import on_baseline_run
from ..wire._errors import HANDLER_RETRY, terminal_errors
from ..wire._messages import (
    ChildrenFailed,
    OutcomesRead,
    PumpAwait,
    PumpParts,
    PumpRun,
    StagedPart,
)
from ..wire._records import BYTES
from ..wire._routes import (
    PUMP,
    PUMP_FAIL,
    PUMP_FORGET,
    PUMP_OUTCOMES,
    PUMP_REDISPATCH,
    PUMP_RUN,
    PUMP_RUN2,
    PUMP_RUN_PARTS,
    PUMP_STAGE,
    PUMP_STAGED,
    described_by,
    named,
)
from ._pump_run import on_fail, on_redispatch, on_run2, on_run_parts, on_stage, on_staged
from ._pump_store import READ, on_forget, on_outcomes

__all__ = ["pump_object"]


def pump_object(routing: Routing, *, metadata: dict[str, str] | None = None) -> restate.VirtualObject:
    pump = restate.VirtualObject(named(PUMP), invocation_retry_policy=HANDLER_RETRY, metadata=metadata)

    @pump.handler(name=PUMP_RUN.handler, ingress_private=True, state_preload=False)
    @described_by(on_baseline_run)
    async def run(ctx: restate.ObjectContext, req: PumpRun) -> None:
        await on_baseline_run(ctx, req)

    @pump.handler(name=PUMP_RUN2.handler, ingress_private=True, state_preload=False)
    @described_by(on_run2)
    async def run2(ctx: restate.ObjectContext, req: PumpAwait) -> None:
        await on_run2(ctx, req, routing)

    @pump.handler(name=PUMP_STAGE.handler, ingress_private=True, state_preload=False)
    @terminal_errors
    @described_by(on_stage)
    async def stage(ctx: restate.ObjectContext, part: StagedPart) -> None:
        await on_stage(ctx, part, routing)

    @pump.handler(name=PUMP_STAGED.handler, kind="shared", ingress_private=True, state_preload=False)
    @terminal_errors
    @described_by(on_staged)
    async def staged(ctx: restate.ObjectSharedContext) -> bool:
        return await on_staged(ctx)

    @pump.handler(name=PUMP_RUN_PARTS.handler, ingress_private=True, state_preload=False)
    @described_by(on_run_parts)
    async def run_parts(ctx: restate.ObjectContext, req: PumpParts) -> None:
        await on_run_parts(ctx, req, routing)

    @pump.handler(name=PUMP_REDISPATCH.handler, ingress_private=True, state_preload=False)
    @described_by(on_redispatch)
    async def redispatch(ctx: restate.ObjectContext, req: PumpAwait) -> None:
        await on_redispatch(ctx, req, routing)

    @pump.handler(name=PUMP_FAIL.handler, ingress_private=True, state_preload=False)
    @described_by(on_fail)
    async def fail(ctx: restate.ObjectContext, req: ChildrenFailed) -> None:
        await on_fail(ctx, req)

    # Lazy state (decision 46): Restate 1.7 pauses an invocation whose eager state is over its
    # per-invocation memory limit (the message limit, 32 MiB, by default), and a pump may keep up to
    # PUMP_SLICE outcomes of up to that size each: a read must load only what it asks for.
    @pump.handler(
        name=PUMP_OUTCOMES.handler,
        kind="shared",
        ingress_private=True,
        state_preload=False,
        input_serde=READ,
        output_serde=BYTES,
    )
    @terminal_errors
    @described_by(on_outcomes)
    async def outcomes(ctx: restate.ObjectSharedContext, asked: list[int] | OutcomesRead) -> bytes:
        return await on_outcomes(ctx, asked)

    @pump.handler(name=PUMP_FORGET.handler, ingress_private=True, state_preload=False)
    @described_by(on_forget)
    async def forget(ctx: restate.ObjectContext) -> None:
        await on_forget(ctx)

    del run, run2, stage, staged, run_parts, redispatch, fail, outcomes, forget
    return pump
