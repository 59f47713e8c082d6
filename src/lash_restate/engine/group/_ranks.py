"""The rank-layout seam (decision 131): the one place where a group that keeps its rank order in
its record and one that keeps it in pages (decision 65) differ.

- **flat**: the rank order is `GroupMeta.order` (rank r is the r-th position), read and written
  with the record by every handler; a served rank's replay key comes from the fence. A direct group
  of any width, a pumped group of fewer than ``page_from`` children (`PAGE_FROM`, 257, unless the
  endpoint is told otherwise) opened in one message, and every group the baseline opened.
- **paged**: the rank order is in ``ranks:{j}`` pages and the ``ranked`` tail, with each slice's
  ranked positions and replay keys beside them (`_pages`), so no step reads or writes O(N) state.
  A pumped group of ``page_from`` children or more, and every group opened in parts; its
  incarnation begins with `PAGED`.

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
    def count(self) -> int:
        """How many ranks are recorded (the group's strictly monotonic counter)."""
        ...

    async def serve(self, ctx: restate.ObjectContext, consumed: int, limit: int) -> list[Ref]:
        """References of ranks ``consumed + 1`` … (at most ``limit``), in rank order."""
        ...


class RankLayout(Protocol):
    """Where a group keeps its rank order, and how each step reads and writes it.

    The state commands a method issues are journaled by the handler that calls it, which replays
    them when it resumes, possibly on a later release: their number, keys and order are part of the
    layout, and a change to them is a change of format. Flat: no command but `_FlatRead.serve`'s read
    of the fence (the record is read and written by the handlers). Paged: as `_pages` lists them.
    """

    def record_open(self, ctx: restate.ObjectContext, shape: GroupShape) -> None:
        """At a first open, beside the record and the fence: what serving a rank needs besides them."""
        ...

    def prefetch(self, ctx: restate.ObjectContext, refs: list[Ref]) -> list[Any]:
        """The state reads ranking ``refs`` needs besides the record, issued (not awaited) at once."""
        ...

    async def rank(
        self, ctx: restate.ObjectContext, meta: GroupMeta, refs: list[Ref], reads: list[Any]
    ) -> tuple[GroupMeta | None, dict[int, Ref]]:
        """Rank the refs not ranked yet, after the recorded ones (``reads``: `prefetch`'s, completed):
        the record holding the new ranks (None when the record holds none: nothing was new, or the
        layout keeps them outside it), and rank -> ref. ADR: strictly monotonic, appended above every
        consumed rank, idempotent on the child. Every ref names a child of the group (`check_batch`
        refused the batch otherwise, before anything was written)."""
        ...

    async def read(self, ctx: restate.ObjectContext, meta: GroupMeta) -> RankRead:
        """The rank order as far as a `wait` needs it to decide whether to serve."""
        ...

    async def count(self, ctx: restate.ObjectContext, meta: GroupMeta) -> int:
        """How many ranks the group has recorded."""
        ...

    async def ranked_positions(self, ctx: restate.ObjectContext, meta: GroupMeta) -> set[int]:
        """Every position holding a rank."""
        ...

    def count_from_rows(self, meta: GroupMeta, rows: dict[str, str]) -> int:
        """How many ranks the group holds, from its state values by key as the admin API shows them."""
        ...

    def order_from_rows(self, meta: GroupMeta, rows: dict[str, str]) -> GroupMeta:
        """``meta`` with its whole ``order``, from its state values by key as the admin API shows them."""
        ...


class _FlatRead:
    def __init__(self, meta: GroupMeta) -> None:
        self._meta = meta

    @property
    def count(self) -> int:
        return self._meta.counter

    async def serve(self, ctx: restate.ObjectContext, consumed: int, limit: int) -> list[Ref]:
        fence = await ctx.get(FENCE, serde=SHAPE)
        assert fence is not None  # written with the record, at the first open
        served = self._meta.positions(consumed, limit)
        return [Ref(position=p, replay_key=fence.replay_keys[p]) for p in served]


class FlatRanks:
    """The rank order in `GroupMeta.order`: read and written with the record, nothing besides."""

    def record_open(self, ctx: restate.ObjectContext, shape: GroupShape) -> None:
        return None

    def prefetch(self, ctx: restate.ObjectContext, refs: list[Ref]) -> list[Any]:
        return []

    async def rank(
        self, ctx: restate.ObjectContext, meta: GroupMeta, refs: list[Ref], reads: list[Any]
    ) -> tuple[GroupMeta | None, dict[int, Ref]]:
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
        return (meta.ranked(fresh) if fresh else None), woken

    async def read(self, ctx: restate.ObjectContext, meta: GroupMeta) -> RankRead:
        return _FlatRead(meta)

    async def count(self, ctx: restate.ObjectContext, meta: GroupMeta) -> int:
        return meta.counter

    async def ranked_positions(self, ctx: restate.ObjectContext, meta: GroupMeta) -> set[int]:
        return meta.settled()

    def count_from_rows(self, meta: GroupMeta, rows: dict[str, str]) -> int:
        return meta.counter

    def order_from_rows(self, meta: GroupMeta, rows: dict[str, str]) -> GroupMeta:
        return meta


_FLAT = FlatRanks()
_PAGED = PagedRanks()


def ranks_for(incarnation: str) -> RankLayout:
    """The rank layout of the group of ``incarnation``: paged if it begins with `PAGED`."""
    return _PAGED if incarnation.startswith(PAGED) else _FLAT


def ranks_recorded(meta: GroupMeta, rows: dict[str, str]) -> int:
    """How many of ``meta``'s children rank, from its state values by key as the admin API shows them
    (a group in pages: from its ``ranked`` record alone, its pages unread)."""
    return ranks_for(meta.incarnation).count_from_rows(meta, rows)


def assemble_order(meta: GroupMeta, rows: dict[str, str]) -> GroupMeta:
    """``meta`` with the ``order`` its state holds (state values by key, as the admin API shows them):
    what an operator's view reads, whatever the group's layout."""
    return ranks_for(meta.incarnation).order_from_rows(meta, rows)
