"""The direct settlement mode (decision 20): each child is its own `LashChild` invocation, which
stores its outcome and settles itself into the group."""

from __future__ import annotations

import msgspec
import restate

from ...contract import BODY_LIMIT
from ...contract import RuntimeEffectEnvelope as Envelope
from ..wire._messages import (
    READ_BUDGET,
    ChildrenFailed,
    ChildRun,
    Ref,
    SettleBatch,
    WaitReply,
)
from ..wire._records import FENCE, SHAPE, STRINGS, GroupMeta, PumpLink
from ..wire._routes import (
    CHILD,
    CHILD_FAIL,
    CHILD_FORGET,
    CHILD_OUTCOME,
    CHILD_RUN,
    named,
)
from ._mode_stores import (
    DISPATCH_ALLOWANCE,
    INVOCATIONS,
    REDISPATCHED,
    Dispatched,
    OutcomeStore,
    Release,
    child_store,
    position_of,
    stored_refs,
    too_large,
)

__all__ = ["Direct"]


class Direct:
    """Each child its own `LashChild/run`, which settles it into the group. A direct group is never
    paged (`record_group` pages pumped groups only), so its ranks are read from `meta` itself."""

    def check_fits(self, group_key: str, children: list[Envelope], sizes: list[int]) -> None:
        for position, (child, size) in enumerate(zip(children, sizes, strict=True)):
            if size + DISPATCH_ALLOWANCE > BODY_LIMIT:  # its ChildRun
                raise too_large(group_key, child, position, f"child {position} is {size} bytes encoded")

    def dispatch(
        self, ctx: restate.ObjectContext, meta: GroupMeta, children: list[Envelope], plan: list[str]
    ) -> list[Dispatched]:
        return [
            Dispatched(
                CHILD_RUN.send(ctx, child.replay_key, ChildRun(envelope=child, incarnation=meta.incarnation)),
                [position_of(child)],
            )
            for child in children
        ]

    def redispatch(
        self, ctx: restate.ObjectContext, meta: GroupMeta, children: list[Envelope]
    ) -> list[Dispatched]:
        # Queued behind a run still going on the child's key (both exclusive): a child that stored its
        # outcome meanwhile only settles again, and the group dedups by position.
        return self.dispatch(ctx, meta, children, [])

    async def to_cancel(self, ctx: restate.ObjectContext, meta: GroupMeta) -> list[str]:
        settled = meta.settled()
        invocations = await ctx.get(INVOCATIONS, serde=STRINGS) or []  # one per child, by position
        unsettled = [invocation for position, invocation in enumerate(invocations) if position not in settled]
        # A re-dispatched run of a child settled since only settles again, cancelled or not.
        return unsettled + (await ctx.get(REDISPATCHED, serde=STRINGS) or [])

    async def releases(self, ctx: restate.ObjectContext, meta: GroupMeta) -> list[Release]:
        if not meta.counter:
            return []
        fence = await ctx.get(FENCE, serde=SHAPE)
        assert fence is not None  # recorded with meta, cleared with it
        # Unsettled children's stores are released when their late settlement finds the group gone.
        return [Release(CHILD_FORGET, fence.replay_keys[p], meta.incarnation) for p in meta.positions()]

    def late_releases(self, batch: SettleBatch) -> list[Release]:
        return [Release(CHILD_FORGET, ref.replay_key, batch.incarnation) for ref in batch.refs]

    def left_to_cancel(self, meta: GroupMeta, cancels: list[str], settled: int) -> list[str]:
        return cancels  # each child's own invocation: a settled one's cancel finds it ended

    async def pump_link(self, ctx: restate.ObjectContext) -> PumpLink | None:
        return None  # no pump

    async def run_gone(self, ctx: restate.ObjectContext) -> None:
        return None  # each child is its own run: nothing of the group's is gone with one

    def store(self, group_key: str, meta: GroupMeta, position: int, replay_key: str) -> OutcomeStore:
        return OutcomeStore(named(CHILD), replay_key, child_store(meta.incarnation))

    def same_store(self, group_key: str, incarnation: str, first: Ref, other: Ref) -> bool:
        return False  # each child's outcome is kept by its own object

    def settle_failed(
        self, ctx: restate.ObjectContext, meta: GroupMeta, failed: ChildrenFailed
    ) -> list[tuple[restate.SendHandle, list[int]]]:
        # Each child's store is its own object, which settles itself (queued behind a run still going).
        sent = []
        for position, replay_key in zip(failed.positions, failed.replay_keys, strict=True):
            one = msgspec.structs.replace(failed, positions=[position], replay_keys=[replay_key])
            sent.append((CHILD_FAIL.send(ctx, replay_key, one), [position]))
        return sent

    async def read(
        self, ctx: restate.Context, group_key: str, reply: WaitReply, budget: int = READ_BUDGET
    ) -> list[bytes]:
        # Each child's store answers its whole outcome: ``budget`` bounds a pump's bulk read alone.
        calls = [CHILD_OUTCOME.call(ctx, ref.replay_key, reply.incarnation) for ref in stored_refs(reply)]
        if calls:
            await restate.gather(*calls)
        return [CHILD_OUTCOME.reply(await call) for call in calls]
