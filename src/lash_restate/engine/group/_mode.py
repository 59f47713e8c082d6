"""The settlement-mode seam: the one place where the direct and the pumped paths differ (decision 24).

A group's `SettlementMode` is chosen once, at open (`record_group`), and kept in its `GroupMeta`:

- **direct**: tools, timers and events, fewer than `batch_from` (3). Each child runs in its own
  `LashChild/run`, which stores its outcome and `settle`s it; ranks in `meta.order`.
- **pumped**: a call child, a bound (`max_in_flight`), or `batch_from` children or more. The pump
  runs them (a call straight to its handler, anything else through `LashChild/execute2`), stores
  the outcomes and `report`s them; ranks in `meta.order`.
- **pumped and paged**: `page_from` (257) children or more, or opened in parts. As pumped, through
  a tree of pumps, one per slice of 256 (one pump for a bounded group, which starts each child as
  one settles); ranks in pages (`_pages`), the incarnation starting with `p-`.

The ranks' layout is a second seam (`_ranks.ranks_for`), read from the incarnation, not from the
mode; both entries (`settle`, `report`) rank through `_group_rank.rank_refs`, whatever the layout.

Everything that depends on the mode — how the children are dispatched, which invocations a
`Cancel` cancels, which outcome stores a close or a late settlement releases, and how a caller reads
outcomes that did not ride the wake — is a method here; the group object and the controller call
`mode_for(...)` and never test the mode themselves.

Direct: each child is its own `LashChild` invocation, stores its outcome in its own state (per group
incarnation) and settles itself. Pumped: one `LashPump` invocation per group incarnation calls the
children, stores the outcomes in its own state and reports them a batch at a time; past
`PUMP_SLICE` children it keeps the first slice and calls a tree of further pumps, one per slice
(decisions 35, 65). A reopen (or an operator's re-dispatch) sends a pumped group's children that
were kept as missed (decision 95) slice by slice to the pump that keeps each slice's outcomes, which
calls them and reports them as the first run did.

The modes are `_mode_direct.Direct` and `_mode_pumped.Pumped`; where they keep outcomes and the keys
they use are `_mode_stores`'s, re-exported here for the modules that name them.
"""

from __future__ import annotations

from typing import Protocol

import restate

from ...contract import RuntimeEffectEnvelope as Envelope
from ..wire._messages import READ_BUDGET, ChildrenFailed, Ref, SettleBatch, WaitReply
from ..wire._records import GroupMeta, PumpLink, SettlementMode
from ._mode_direct import Direct
from ._mode_pumped import Pumped
from ._mode_stores import (
    INVOCATIONS,
    PUMP_FANOUT,
    PUMP_SLICE,
    REDISPATCHED,
    Dispatched,
    OutcomeStore,
    Release,
    child_store,
    position_of,
    pump_store,
    slice_key,
)

__all__ = [
    "INVOCATIONS",
    "PUMP_FANOUT",
    "PUMP_SLICE",
    "REDISPATCHED",
    "Dispatched",
    "Mode",
    "OutcomeStore",
    "Release",
    "child_store",
    "mode_for",
    "outcome_store",
    "position_of",
    "pump_store",
    "slice_key",
]


class Mode(Protocol):
    """What a settlement mode decides; every method reads before any effect is issued (decision 22)."""

    def dispatch(
        self, ctx: restate.ObjectContext, meta: GroupMeta, children: list[Envelope], plan: list[str]
    ) -> list[Dispatched]:
        """Start the children, a pump calling each as ``plan`` says (`open_plan`, decision 66); the
        returned sends' invocation ids are what `to_cancel` cancels."""
        ...

    def redispatch(
        self, ctx: restate.ObjectContext, meta: GroupMeta, children: list[Envelope]
    ) -> list[Dispatched]:
        """A reopen's (or an operator's) dispatch of ``children``, unsettled: each runs again only if
        it ended without an outcome (its runner was missing), once whatever runs it already has ended
        (decision 48). Run and reported by the same code as a first run (a direct child's `run`, a
        pump's calls and reports), so a re-run child reaches its rank as a first run's would; a pump
        plans these itself, as no open sent it a plan."""
        ...

    def check_fits(self, group_key: str, children: list[Envelope], sizes: list[int]) -> None:
        """Refuse (`PayloadTooLarge`) children whose dispatch would not fit one message; ``sizes``
        are their encoded sizes. Called before anything is recorded."""
        ...

    async def to_cancel(self, ctx: restate.ObjectContext, meta: GroupMeta) -> list[str]:
        """The invocations whose cancellation cancels the group's unsettled children: a direct
        group's runs of those children; a pumped group's pumps, listed whether or not a child is
        left (`left_to_cancel` then drops them)."""
        ...

    async def releases(self, ctx: restate.ObjectContext, meta: GroupMeta) -> list[Release]:
        """At close: the stores holding this incarnation's settled outcomes."""
        ...

    def late_releases(self, batch: SettleBatch) -> list[Release]:
        """A settlement that finds its group closed: the stores nobody is left to read."""
        ...

    async def read(
        self, ctx: restate.Context, group_key: str, reply: WaitReply, budget: int = READ_BUDGET
    ) -> list[bytes]:
        """Outcomes of the refs that carry none, in rank order, fewer past one reply's size; a pump's
        bulk read stops where ``budget`` bytes would be passed (the first whatever its size)."""
        ...

    def same_store(self, group_key: str, incarnation: str, first: Ref, other: Ref) -> bool:
        """Whether one read of ``first``'s outcome can answer ``other``'s too (decision 134)."""
        ...

    def store(self, group_key: str, meta: GroupMeta, position: int, replay_key: str) -> OutcomeStore:
        """Where a settled child's outcome is kept (what an operator's view reads)."""
        ...

    def settle_failed(
        self, ctx: restate.ObjectContext, meta: GroupMeta, failed: ChildrenFailed
    ) -> list[tuple[restate.SendHandle, list[int]]]:
        """Settle the children ``failed`` names with its outcome, each unless an outcome is stored for
        it: through the store that keeps it, which settles it as a run would (decision 74). Answers
        each message it sent with the positions it carries, for the group to watch (decision 89)."""
        ...

    def left_to_cancel(self, meta: GroupMeta, cancels: list[str], settled: int) -> list[str]:
        """Of ``cancels`` (`to_cancel`'s), what a close still cancels once ``settled`` children rank:
        a pumped group's pump, once every child ranks, is dropped, so the close releases it through
        its awakeable rather than cancel it."""
        ...

    async def pump_link(self, ctx: restate.ObjectContext) -> PumpLink | None:
        """How a close releases the group's pump (decision 61); None where it has no pump."""
        ...

    async def run_gone(self, ctx: restate.ObjectContext) -> None:
        """The one invocation that ran every child ended in failure (decision 74): what a close then
        releases it by."""
        ...


_MODES: dict[SettlementMode, Mode] = {SettlementMode.DIRECT: Direct(), SettlementMode.PUMPED: Pumped()}


def mode_for(mode: SettlementMode) -> Mode:
    return _MODES[mode]


def outcome_store(group_key: str, meta: GroupMeta, position: int, replay_key: str) -> OutcomeStore:
    """Where the outcome of the child at ``position`` of the group ``meta`` describes is kept."""
    return _MODES[meta.mode].store(group_key, meta, position, replay_key)
