"""The rank-layout seam: the one place where a group that keeps its ranks in its record and one that
keeps them in pages differ (decision 65).

- **flat**: the rank order is `GroupMeta.order` (rank r is the r-th position), read with the record
  by every handler; a served rank's replay key comes from the fence. Every group of fewer than
  `PAGE_FROM` children opened in one message, and every group the baseline opened.
- **paged**: the rank order is in ``ranks:{j}`` pages and the ``ranked`` tail, with each slice's
  ranked positions and replay keys beside them (`_pages`), so no step reads or writes O(N) state.
  A pumped group wider than a slice, and every group opened in parts; its incarnation begins with
  `PAGED`.

Which layout a group has is told by its incarnation, so a pump's report can issue the reads its
ranking needs before the group's record is read. Every step that records, ranks, counts or serves
ranks asks `ranks_for` and calls the layout's method: a settlement reaches its rank through the same
code (`_group_rank.rank_refs`) whatever the group's width, mode or history. The settlement mode
(`_mode`) is the other seam; the two are independent.
"""

from __future__ import annotations

from typing import Any, Protocol

import restate

from ...contract import GroupShape
from ..wire._incarnation import PAGED
from ..wire._messages import Ref
from ..wire._records import FENCE, SHAPE, GroupMeta
from ._pages import PagedRanks

__all__ = [
    "FlatRanks",
    "RankLayout",
    "RankRead",
    "assemble_order",
    "ranks_for",
    "ranks_recorded",
]


class RankRead(Protocol):
    """A group's rank order as one `wait` read it: how many ranks it holds, and the ranks to serve."""

    @property
    def counter(self) -> int:
        """How many ranks are recorded (the group's strictly monotonic counter)."""
        ...

    async def serve(self, ctx: restate.ObjectContext, consumed: int, limit: int) -> list[Ref]:
        """References of ranks ``consumed + 1`` … (at most ``limit``), in rank order."""
        ...


class RankLayout(Protocol):
    """Where a group keeps its rank order, and how each step reads and writes it. Each method issues
    the same state commands, in the same order, as the code before this seam did: a group handler in
    flight across an upgrade replays its journal."""

    def record(self, ctx: restate.ObjectContext, shape: GroupShape) -> None:
        """At a first open, beside the record and the fence: what serving a rank needs besides them."""
        ...

    def prefetch(self, ctx: restate.ObjectContext, refs: list[Ref]) -> list[Any]:
        """The state reads ranking ``refs`` needs besides the record, issued (not awaited) at once."""
        ...

    async def rank(
        self, ctx: restate.ObjectContext, meta: GroupMeta, refs: list[Ref], reads: list[Any]
    ) -> tuple[GroupMeta, dict[int, Ref]]:
        """Rank the refs not ranked yet, after the recorded ones (``reads``: `prefetch`'s, completed):
        the record to write (``meta`` itself if it holds nothing new) and rank -> ref. ADR: strictly
        monotonic, appended above every consumed rank, idempotent on the child. Every ref names a child
        of the group (`check_batch` refused the batch otherwise, before anything was written)."""
        ...

    async def read(self, ctx: restate.ObjectContext, meta: GroupMeta) -> RankRead:
        """The rank order as far as a `wait` needs it to decide whether to serve."""
        ...

    async def counter(self, ctx: restate.ObjectContext, meta: GroupMeta) -> int:
        """How many ranks the group has recorded."""
        ...

    async def settled(self, ctx: restate.ObjectContext, meta: GroupMeta) -> set[int]:
        """Every position holding a rank."""
        ...

    def recorded(self, meta: GroupMeta, rows: dict[str, str]) -> int:
        """How many ranks the group holds, from its state values by key as the admin API shows them."""
        ...

    def assembled(self, meta: GroupMeta, rows: dict[str, str]) -> GroupMeta:
        """``meta`` with its whole ``order``, from its state values by key as the admin API shows them."""
        ...


class _FlatRead:
    def __init__(self, meta: GroupMeta) -> None:
        self._meta = meta

    @property
    def counter(self) -> int:
        return self._meta.counter

    async def serve(self, ctx: restate.ObjectContext, consumed: int, limit: int) -> list[Ref]:
        fence = await ctx.get(FENCE, serde=SHAPE)
        assert fence is not None  # written with the record, at the first open
        served = self._meta.positions(consumed, limit)
        return [Ref(position=p, replay_key=fence.replay_keys[p]) for p in served]


class FlatRanks:
    """The rank order in `GroupMeta.order`: read and written with the record, nothing besides."""

    def record(self, ctx: restate.ObjectContext, shape: GroupShape) -> None:
        return None

    def prefetch(self, ctx: restate.ObjectContext, refs: list[Ref]) -> list[Any]:
        return []

    async def rank(
        self, ctx: restate.ObjectContext, meta: GroupMeta, refs: list[Ref], reads: list[Any]
    ) -> tuple[GroupMeta, dict[int, Ref]]:
        woken: dict[int, Ref] = {}
        settled = meta.settled()  # once per batch: a lookup per ref, not a scan of every rank (decision 36)
        fresh: list[int] = []
        for ref in refs:
            if ref.position in settled:
                continue
            settled.add(ref.position)
            fresh.append(ref.position)
            # The ADR's rank invariants: (1) strictly monotonic; (2) appends above every consumed rank
            woken[meta.counter + len(fresh)] = ref
        return (meta.ranked(fresh) if fresh else meta), woken

    async def read(self, ctx: restate.ObjectContext, meta: GroupMeta) -> RankRead:
        return _FlatRead(meta)

    async def counter(self, ctx: restate.ObjectContext, meta: GroupMeta) -> int:
        return meta.counter

    async def settled(self, ctx: restate.ObjectContext, meta: GroupMeta) -> set[int]:
        return meta.settled()

    def recorded(self, meta: GroupMeta, rows: dict[str, str]) -> int:
        return meta.counter

    def assembled(self, meta: GroupMeta, rows: dict[str, str]) -> GroupMeta:
        return meta


_FLAT = FlatRanks()
_PAGED = PagedRanks()


def ranks_for(incarnation: str) -> RankLayout:
    """The rank layout of the group of ``incarnation``: paged if it begins with `PAGED`."""
    return _PAGED if incarnation.startswith(PAGED) else _FLAT


def ranks_recorded(meta: GroupMeta, rows: dict[str, str]) -> int:
    """How many of ``meta``'s children rank, from its state values by key as the admin API shows them
    (a group in pages: from its ``ranked`` record alone, its pages unread)."""
    return ranks_for(meta.incarnation).recorded(meta, rows)


def assemble_order(meta: GroupMeta, rows: dict[str, str]) -> GroupMeta:
    """``meta`` with the ``order`` its state holds (state values by key, as the admin API shows them):
    what an operator's view reads, whatever the group's layout."""
    return ranks_for(meta.incarnation).assembled(meta, rows)
