"""Decision 65: the paged rank layout of a wide pumped group, so no step reads or writes O(N) state.

A pumped group of ``page_from`` children or more (`PAGE_FROM`, 257, unless the endpoint is told
otherwise), and every group opened in parts, keeps its rank order out of `GroupMeta` (whose
``order`` stays empty), in state entries of bounded size:

- ``ranks:{j}``: the positions of ranks ``j * RANK_PAGE + 1`` … ``(j + 1) * RANK_PAGE``, a JSON array;
- ``ranked`` (`RankTail`): how many such pages are full, and the positions of the ranks after them;
- ``settled:{k}``: the positions of slice ``k`` that hold a rank, a JSON array (what makes a report
  idempotent on its child: a pump reports only its own slice's children);
- ``keys:{k}``: the replay keys of slice ``k``'s children, a JSON array, written once at open, so a
  ``wait`` names the keys of the ranks it serves without reading the fence (every replay key).

A report then reads `meta`, its slices' ``settled`` entries and ``ranked`` at once (issued in that
order, which its journal keeps), and writes those (and a page when the tail fills one); a ``wait``
reads ``ranked``, at most two pages and the key pages of at most `KEY_PAGES_PER_WAIT` slices.

Which layout a group has is told by its incarnation (`PAGED`, which this module's groups' begin with):
`GroupMeta` is read first by every handler, and a baseline reader refuses a field it does not know.
`PagedRanks` is this layout's side of the rank-layout seam (`_ranks`, decision 131).
"""

from __future__ import annotations

import os
import struct
from typing import Any

import msgspec
import restate

from ...contract import GroupShape, InvalidInput
from ..wire._messages import Ref
from ..wire._records import POSITIONS, RECORD_OPTIONS, STRINGS, GroupMeta, MsgspecSerde

__all__ = [
    "KEY_PAGES_PER_WAIT",
    "PAGE_FROM",
    "RANKED",
    "RANK_PAGE",
    "PagedRanks",
    "RankTail",
    "key_page",
    "rank_page",
    "read_ranked",
    "settled_page",
    "width_setting",
]

# Ranks per `ranks:{j}` page: a wait serves at most this many (`WAIT_REFS`), so it spans two pages.
RANK_PAGE = 1024
# A wait names the keys of at most this many slices' children (it serves fewer ranks past them).
KEY_PAGES_PER_WAIT = 8
RANKED = "ranked"

_SLICE = 256  # PUMP_SLICE, repeated to keep this module below `_mode` (asserted in `_mode_stores`)
# A pumped group this wide or wider keeps its ranks in pages: one wider than a slice. The tests run
# the conformance suite with every group pumped and paged (`LASH_BATCH_FROM=1` and
# `LASH_PAGE_FROM=1`: the RB tier), so that every clause is proven on this layout too.
PAGE_FROM = _SLICE + 1


def width_setting(name: str) -> int | None:
    """A layout's width threshold set by ``$name`` (the tests' `LASH_PAGE_FROM`, `LASH_PARTS_FROM`):
    a count of children from 1; None when unset. Anything else is refused naming the variable (read
    in a caller's open, a plain error would be retried for ever)."""
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    if not value.isdecimal() or int(value) < 1:  # not isdigit: "²" is a digit `int` cannot read
        raise InvalidInput(f"{name} must be a count of children from 1, not {value!r}")
    return int(value)


class RankTail(msgspec.Struct, **RECORD_OPTIONS):
    """`ranked`: how many full ``ranks:{j}`` pages there are, and the positions of the ranks after them.

    The counter and the page a report appends to are one record, so a report reads the group's
    `meta`, its slices' ``settled:{k}`` and this at once: one round of reads, whatever the width.
    """

    pages: int = 0
    tail: list[int] = msgspec.field(default_factory=list)

    @property
    def counter(self) -> int:
        return self.pages * RANK_PAGE + len(self.tail)


_TAIL: MsgspecSerde[RankTail] = MsgspecSerde(RankTail)


def rank_page(page: int) -> str:
    return f"ranks:{page}"


def settled_page(slice_index: int) -> str:
    return f"settled:{slice_index}"


def key_page(slice_index: int) -> str:
    return f"keys:{slice_index}"


async def read_ranked(ctx: restate.ObjectContext | restate.ObjectSharedContext) -> RankTail:
    return await ctx.get(RANKED, serde=_TAIL) or RankTail()


class _PagedRead:
    def __init__(self, ranked: RankTail) -> None:
        self._ranked = ranked

    @property
    def count(self) -> int:
        return self._ranked.counter

    async def serve(self, ctx: restate.ObjectContext, consumed: int, limit: int) -> list[Ref]:
        """References of ranks ``consumed + 1`` … (at most ``limit``, and only as many as the key pages
        of `KEY_PAGES_PER_WAIT` slices name), in rank order: at most two rank pages read, never the fence."""
        ranked = self._ranked
        last = min(ranked.counter, consumed + limit)
        if last <= consumed:
            return []
        first_page = consumed // RANK_PAGE
        pages = [j for j in range(first_page, (last - 1) // RANK_PAGE + 1) if j < ranked.pages]
        reads: list[Any] = [ctx.get(rank_page(j), serde=POSITIONS) for j in pages]
        if reads:
            await restate.gather(*reads)
        order: list[int] = []
        for read in reads:
            order += await read or []
        if (last - 1) // RANK_PAGE >= ranked.pages:
            order += ranked.tail
        start = consumed - first_page * RANK_PAGE
        positions = order[start : start + last - consumed]
        slices: list[int] = []
        served: list[int] = []
        for position in positions:
            k = position // _SLICE
            if k not in slices:
                if len(slices) == KEY_PAGES_PER_WAIT:
                    break
                slices.append(k)
            served.append(position)
        key_reads: list[Any] = [ctx.get(key_page(k), serde=STRINGS) for k in slices]
        await restate.gather(*key_reads)
        keys = {k: await read or [] for k, read in zip(slices, key_reads, strict=True)}
        return [Ref(position=p, replay_key=keys[p // _SLICE][p % _SLICE]) for p in served]


class PagedRanks:
    """The rank order in pages (`_ranks.RankLayout`), read as far as one step needs it."""

    def record_open(self, ctx: restate.ObjectContext, shape: GroupShape) -> None:
        """Every slice's replay keys under its ``keys:{k}``, so a `wait` never reads the fence."""
        keys = shape.replay_keys
        for first in range(0, len(keys), _SLICE):
            ctx.set(key_page(first // _SLICE), list(keys[first : first + _SLICE]), serde=STRINGS)

    def prefetch(self, ctx: restate.ObjectContext, refs: list[Ref]) -> list[Any]:
        """Issues each reporting slice's ``settled:{k}`` read (slices ascending), then `ranked`'s: the
        order a report journals them in, which must be kept. Returns them as `rank` reads them:
        `ranked`'s first."""
        slices = sorted({ref.position // _SLICE for ref in refs})
        pages: list[Any] = [ctx.get(settled_page(k), serde=POSITIONS) for k in slices]
        return [ctx.get(RANKED, serde=_TAIL), *pages]

    async def rank(
        self, ctx: restate.ObjectContext, meta: GroupMeta, refs: list[Ref], reads: list[Any]
    ) -> tuple[GroupMeta | None, dict[int, Ref]]:
        """Appends to the tail (a full tail becomes a page) and to the slices' ``settled:{k}``, then
        writes `ranked`; the record itself holds no rank (None)."""
        slices = sorted({ref.position // _SLICE for ref in refs})
        ranked: RankTail = await reads[0] or RankTail()
        settled = {k: set(await read or []) for k, read in zip(slices, reads[1:], strict=True)}
        fresh: list[Ref] = []
        for ref in refs:
            done = settled[ref.position // _SLICE]
            if ref.position in done:
                continue
            done.add(ref.position)
            fresh.append(ref)
        if not fresh:
            return None, {}
        counter = ranked.counter
        pages, tail = ranked.pages, list(ranked.tail)
        for ref in fresh:
            tail.append(ref.position)
            if len(tail) == RANK_PAGE:
                ctx.set(rank_page(pages), tail, serde=POSITIONS)
                pages, tail = pages + 1, []
        for k in sorted({ref.position // _SLICE for ref in fresh}):
            ctx.set(settled_page(k), sorted(settled[k]), serde=POSITIONS)
        ctx.set(RANKED, RankTail(pages=pages, tail=tail), serde=_TAIL)
        return None, {counter + 1 + i: ref for i, ref in enumerate(fresh)}

    async def read(self, ctx: restate.ObjectContext, meta: GroupMeta) -> _PagedRead:
        """The counter and the last page's tail (`ranked`): never the fence, never every page."""
        return _PagedRead(await read_ranked(ctx))

    async def count(self, ctx: restate.ObjectContext, meta: GroupMeta) -> int:
        return (await read_ranked(ctx)).counter

    async def ranked_positions(self, ctx: restate.ObjectContext, meta: GroupMeta) -> set[int]:
        """One read per slice (a reopen's re-dispatch, a run's failure)."""
        reads: list[Any] = [
            ctx.get(settled_page(k), serde=POSITIONS) for k in range(-(-meta.child_count // _SLICE))
        ]
        if reads:
            await restate.gather(*reads)
        found: set[int] = set()
        for read in reads:
            found.update(await read or [])
        return found

    def count_from_rows(self, meta: GroupMeta, rows: dict[str, str]) -> int:
        """From the `ranked` record alone: its pages need not be read."""
        return msgspec.json.decode(rows.get(RANKED, "{}"), type=RankTail).counter

    def order_from_rows(self, meta: GroupMeta, rows: dict[str, str]) -> GroupMeta:
        """The order its ``ranks:{j}`` pages and `ranked` tail hold, as a flat group's record holds it."""
        pages = sorted((int(k.split(":")[1]), v) for k, v in rows.items() if k.startswith("ranks:"))
        order = [p for _, v in pages for p in msgspec.json.decode(v, type=list[int])]
        if RANKED in rows:
            order += msgspec.json.decode(rows[RANKED], type=RankTail).tail
        return msgspec.structs.replace(meta, order=struct.pack(f"<{len(order)}I", *order))
