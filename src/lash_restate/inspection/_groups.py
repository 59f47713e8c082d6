"""Open groups read from the `state` table and classified open, parked or orphaned by how their
latest opener ended (decision 45), with what Restate paused or is retrying on their way (counted in
`_paused`); one group shown child by child."""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import msgspec

from ..contract import GroupShape, LoserPolicy, without_wire
from ..engine import (
    CHILD,
    FENCE,
    GROUP,
    GROUP_CLOSE,
    GROUP_OPEN,
    GROUP_OPEN_PARTS,
    MISSED,
    OPENER_ENDS,
    PUMP,
    RECLAIM_AT,
    RECORD,
    SAVERS,
    GroupMeta,
    Opener,
    OpenerEnd,
    OutcomeStore,
    assemble_order,
    bound_of,
    callee_replay_key,
    group_of_pump,
    incarnation_of_pump,
    is_invocation_id,
    layout_of,
    named,
    outcome_store,
    ranks_recorded,
)
from ._journal import SentTo, sent_to, target_of
from ._paused import (
    created_before,
    holds_up_group,
    paused_by_group,
    paused_on,
    paused_rows,
    retrying_by_group,
    retrying_on,
)
from ._sql import (
    BACKING_OFF,
    ENDED,
    PAUSED,
    WAITING,
    Admin,
    alive_of,
    decoded,
    in_list,
    invocation_rows,
    is_alive,
    quote,
    rows_in,
    server_now_ms,
    sql,
)
from ._views import ChildView, GroupView, HeldView, OpenerView, OpenGroup, PumpView

__all__ = [
    "OPEN",
    "ORPHANED",
    "PARKED",
    "LostClose",
    "StoredGroup",
    "classify",
    "list_open_groups",
    "lost_closes",
    "open_group_row",
    "outcome_kinds",
    "read_groups",
    "show_group",
    "unrecorded_openers",
    "utc",
]

OPEN, PARKED, ORPHANED = "open", "parked", "orphaned"


@dataclass(frozen=True)
class StoredGroup:
    key: str
    meta: GroupMeta
    ends: dict[str, bool]  # how the callers that saved its handle ended: caller -> failed (decision 45)
    missed: list[int] = field(default_factory=list)  # positions whose runner was missing
    reclaim_at_ms: int | None = None  # when the orphan is due to be reclaimed (decision 78)
    settled: int | None = None  # read without its rank order (a listing): how many children rank
    savers: frozenset[str] = frozenset()  # the callers that saved its handle, as it recorded them

    def saved(self) -> bool:
        """Whether any opener saved its handle (decision 78): a continuation may hold it, whoever
        opened the group since, as the group's reclaim reads it (`anybody_saved`)."""
        return bool(self.savers) or bool(self.ends)

    @property
    def counter(self) -> int:
        return self.meta.counter if self.settled is None else self.settled


def read_groups(admin: Admin, where: str = "", *, order: bool = True) -> list[StoredGroup]:
    """The groups' records; without ``order``, a wide group's rank pages are not read (a listing
    counts its ranks from its `ranked` record alone: a group of 100,000 children keeps 97 pages)."""
    pages_too = " OR starts_with(key, 'ranks:')" if order else ""
    rows = sql(
        admin,
        "SELECT service_key, key, value_utf8 FROM state "
        f"WHERE service_name = {quote(named(GROUP))} AND (key IN ({quote(RECORD)}, {quote(OPENER_ENDS)}, "
        f"{quote(MISSED)}, {quote(RECLAIM_AT)}, {quote(SAVERS)}) "
        f"OR key = 'ranked'{pages_too}){where}",
    )
    metas = {r["service_key"]: r["value_utf8"] for r in rows if r["key"] == RECORD}
    ends = {r["service_key"]: r["value_utf8"] for r in rows if r["key"] == OPENER_ENDS}
    missed = {r["service_key"]: r["value_utf8"] for r in rows if r["key"] == MISSED}
    reclaims = {
        (key := r["service_key"]): decoded(r["value_utf8"], int, group_key=key, what="reclaim time")
        for r in rows
        if r["key"] == RECLAIM_AT
    }
    savers = {
        (key := r["service_key"]): decoded(r["value_utf8"], list[str], group_key=key, what="savers")
        for r in rows
        if r["key"] == SAVERS
    }
    pages: dict[str, dict[str, str]] = {}
    for r in rows:
        if r["key"].startswith("ranks:") or r["key"] == "ranked":
            pages.setdefault(r["service_key"], {})[r["key"]] = r["value_utf8"]
    found = []
    for key in sorted(metas):
        meta = decoded(metas[key], GroupMeta, group_key=key, what="record")
        settled = None
        if order:  # a wide group keeps its rank order in pages (decision 65): read as one order
            meta = assemble_order(meta, pages.get(key, {}))
        else:
            settled = ranks_recorded(meta, pages.get(key, {}))
        # The openers' ends are absent on a format-1 group.
        recorded = decoded(ends.get(key, "[]"), list[OpenerEnd], group_key=key, what="openers' ends")
        positions = decoded(missed.get(key, "[]"), list[int], group_key=key, what="missed children")
        ended = {end.caller: end.failed for end in recorded}
        saved = frozenset(savers.get(key, []))
        found.append(StoredGroup(key, meta, ended, positions, reclaims.get(key), settled, saved))
    return found


# A normal return without a save: parked in case the handle was kept some other way (decision 78).
_NO_SAVE = "saving no handle with the group: close it if nothing holds one"
# An orphan whose latest opener saved nothing, though an earlier one did: a continuation may hold that.
_EARLIER_SAVE = "an earlier opener saved its handle, which a continuation may still hold and resume"


class _Closing(msgspec.Struct):
    """What a close request (`CloseRequest`, any release's) names: the incarnation it closes, if any,
    and the disposition it narrows to, if any."""

    incarnation: str | None = None
    disposition: str | None = None


class LostClose(NamedTuple):
    """A close Restate ended before it ran: its invocation, and whether it asked to cancel the
    group's losers (a race's close narrowing `RunToCompletion`, say). With ``earlier``, the close
    ran, but on that earlier incarnation of the key: this one its opener never sent a message to
    (its open restarted as new, say)."""

    invocation: str
    cancel: bool
    earlier: str | None = None


_OPENS_AND_CLOSE = (GROUP_CLOSE.handler, GROUP_OPEN.handler, GROUP_OPEN_PARTS.handler)

# How long ago a close Restate does not know must have been sent to be taken as lost: until then it
# may still be on its way to the group's partition (as an open, `_stranded.SENT_BEFORE_S`).
CLOSE_SENT_BEFORE_S = 60
_CLOSES_PER_QUERY = 100  # journal entries named one by one in one query


def lost_closes(
    admin: Admin, groups: list[StoredGroup], known: dict[str, dict[str, Any]]
) -> dict[str, LostClose]:
    """By group key: the close the group's latest opener sent it last (read from that opener's
    journal, which Restate keeps for its journal retention, a day by default) that Restate ended
    before it ran, killed or cancelled (`restate invocations kill`). The opener went on, so the
    group, open behind it, would look parked for ever (decision 114). Also a last close that ran,
    on an earlier incarnation of the key (``earlier``): this incarnation was opened by none of the
    opener's messages (its open restarted as new). Only a group that would otherwise be parked is
    looked at; a later open of the group in that journal (a reopen) means the opener holds it
    again."""
    parked: dict[str, list[StoredGroup]] = {}  # latest opener -> the groups it parked
    for g in groups:
        if classify(g, known)[0] == PARKED:
            parked.setdefault(g.meta.openers[-1].caller, []).append(g)
    if not parked:
        return {}
    group_service = named(GROUP)
    last = _last_sent(admin, list(parked))
    wanted = {
        (caller, at): (g, sent, long_sent)
        for caller, gs in parked.items()
        for g in gs
        if (found := last.get((caller, g.key))) is not None
        for at, sent, long_sent in [found]
        if sent.handler == GROUP_CLOSE.handler
    }
    if not wanted:
        return {}
    # The bodies of those closes alone (an open's may be megabytes): what incarnation each names, a
    # slice of them per query (closes a paused guard holds up may be many).
    pairs = list(wanted)
    bodies: dict[tuple[str, int], str] = {}
    for start in range(0, len(pairs), _CLOSES_PER_QUERY):
        part = pairs[start : start + _CLOSES_PER_QUERY]
        which = " OR ".join(f'(id = {quote(caller)} AND "index" = {at})' for caller, at in part)
        query = f'SELECT id, "index" AS at, entry_json AS entry FROM sys_journal WHERE {which}'
        bodies.update({(row["id"], int(row["at"])): row["entry"] for row in sql(admin, query)})
    closes: dict[str, tuple[LostClose, bool]] = {}  # group key -> (the close, sent long ago)
    restarted: dict[str, LostClose] = {}
    for (caller, at), (g, sent, long_sent) in wanted.items():
        full = sent_to(bodies.get((caller, at), ""), group_service)
        try:
            request = msgspec.json.decode(full.body if full else b"", type=_Closing)
        except msgspec.DecodeError:
            continue
        if request.incarnation in (None, g.meta.incarnation):  # not a namesake's (decision 113)
            cancel = request.disposition == LoserPolicy.CANCEL.value
            closes[g.key] = (LostClose(sent.invocation, cancel), long_sent)
        else:
            # Its last message to the key closed an earlier incarnation: this one, whose latest
            # opener it is, was opened by none of its messages (`restart-as-new` of its open).
            restarted[g.key] = LostClose(sent.invocation, cancel=False, earlier=request.incarnation)
    ended = invocation_rows(admin, sorted(close.invocation for close, _ in closes.values()))
    lost = dict(restarted)
    for key, (close, long_sent) in closes.items():
        how = ended.get(close.invocation)
        # Ended in failure (a completion failure is only an ended invocation's), or not known at all.
        if (how is None and long_sent) or (how is not None and how.get("completion_failure")):
            lost[key] = close
    return lost


def _last_sent(admin: Admin, invocations: list[str]) -> dict[tuple[str, str], tuple[int, SentTo, bool]]:
    """By (invocation, group key): the last open or close each of ``invocations`` sent a group one
    way, its index in that journal, and whether it was sent `CLOSE_SENT_BEFORE_S` ago or more. Read
    in the entries' short form: an open's body may be megabytes."""
    group_service = named(GROUP)
    rows = rows_in(
        admin,
        'SELECT id, "index" AS at, entry_lite_json AS entry, '
        f"appended_at < now() - INTERVAL '{CLOSE_SENT_BEFORE_S} seconds' AS long_sent FROM sys_journal "
        "WHERE entry_type = 'Command: OneWayCall' "
        f"AND entry_lite_json LIKE {quote('%' + group_service + '%')} AND id IN {{values}}",
        sorted(i for i in invocations if is_invocation_id(i)),  # a forged opener's journal is nobody's
    )
    last: dict[tuple[str, str], tuple[int, SentTo, bool]] = {}
    for row in rows:
        sent = target_of(row["entry"], group_service)
        if sent is None or sent.handler not in _OPENS_AND_CLOSE:
            continue
        at = int(row["at"])
        held = last.get((row["id"], sent.key))
        if held is None or held[0] < at:
            last[(row["id"], sent.key)] = (at, sent, row.get("long_sent") is True)
    return last


def unrecorded_openers(admin: Admin, groups: list[StoredGroup]) -> dict[str, str]:
    """By group key, for each of ``groups`` that records no opener: a running invocation whose last
    message to the key is an open the group did not see killed. That open recorded the group and
    ended before it recorded its opener (an operator's cancel of the running open: what it sent runs
    on, and so does its caller, which reads it: decision 144). A caller whose last message closed
    the key holds it no more; one whose open was killed holds nothing (the kill killed what the
    open sent, and ended the caller's reads). Nothing is read when every group records its openers."""
    bare = {g.key for g in groups if not g.meta.openers}
    if not bare:
        return {}
    running = sql(admin, f"SELECT id FROM sys_invocation WHERE status != {quote(ENDED)}")
    opens = sorted(
        (caller, sent)
        for (caller, key), (_, sent, _) in _last_sent(admin, [row["id"] for row in running]).items()
        if key in bare and sent.handler != GROUP_CLOSE.handler
    )
    ended = invocation_rows(admin, sorted({sent.invocation for _, sent in opens}))
    found: dict[str, str] = {}
    for caller, sent in opens:
        if _failed_how(ended.get(sent.invocation)) != "killed":
            found.setdefault(sent.key, caller)
    return found


def classify(
    group: StoredGroup,
    known: dict[str, dict[str, Any]],
    lost_close: LostClose | None = None,
    unrecorded: str | None = None,
) -> tuple[str, str]:
    """The group's state and why (decision 45): the latest opener, by open order, decides; one that
    closed it, the close lost, or that closed an earlier incarnation of the key and sent this one
    nothing (``lost_close``, `lost_closes`), holds it no more. A group that records no opener is
    held by ``unrecorded``, a running invocation that sent it an open (`unrecorded_openers`)."""
    openers = group.meta.openers
    # Each opener's row looked up (a set of every group's live openers per opener made lists quadratic).
    running = [o.caller for o in openers if is_alive(known, o.caller)]
    if running:
        # Alive, but Restate's pause holds it until an operator resumes it.
        paused = known[running[-1]].get("status") == PAUSED
        return OPEN, f"its opener {running[-1]} is {'paused' if paused else 'running'}"
    if not openers and unrecorded is not None:
        # Its open ended before it recorded its opener, which runs and reads it (decision 144).
        return OPEN, f"its opener {unrecorded} is running (its open ended before it recorded it)"
    if not openers:
        return ORPHANED, "no opener is recorded"
    if lost_close is not None and lost_close.earlier is not None:
        return ORPHANED, (
            f"its latest opener closed the key's earlier incarnation {lost_close.earlier} "
            f"({lost_close.invocation}) and sent this one nothing: it was opened again without its "
            "opener (`restate invocations restart-as-new` of its open, say), and nobody holds it"
            + (
                ""
                if group.meta.disposition is LoserPolicy.CANCEL
                else " (`groups close --cancel` stops its children)"
            )
        )
    if lost_close is not None:
        asked = "; it asked to cancel the losers (`groups close --cancel`)" if lost_close.cancel else ""
        return ORPHANED, (
            f"its latest opener closed it and went on, but Restate ended that close "
            f"({lost_close.invocation}) before it closed the group (killed or cancelled): nobody "
            f"holds it{asked}"
        )
    latest = openers[-1]
    saved_end = group.ends.get(latest.caller)  # failed or not; None: no saver's end recorded
    if saved_end is None and latest.ended and latest.caller in group.savers:
        saved_end = latest.failed  # a saver's end, heard by the openers' watch before its hold
    if saved_end is not None:
        if saved_end:
            return ORPHANED, "its latest opener saved its handle, then failed or was killed"
        return PARKED, "its latest opener saved its handle and returned normally: a continuation holds it"
    # A saver whose hold has not reported its end yet is said to have saved its handle.
    saved = latest.caller in group.savers
    state, why = _by_latest_end(group, latest, known.get(latest.caller), saved=saved)
    if state == ORPHANED and not saved and (group.savers | group.ends.keys()) - {latest.caller}:
        why += f"; {_EARLIER_SAVE}"
    return state, why


def _by_latest_end(
    group: StoredGroup, latest: Opener, row: dict[str, Any] | None, *, saved: bool
) -> tuple[str, str]:
    """`classify` of a group whose latest opener's save, if any, has no end recorded (``saved``: it
    saved its handle): by how that opener ended, as the group's watch heard it or Restate still
    remembers it (``row``)."""
    who = "its latest opener saved its handle, then" if saved else "its latest opener"
    if latest.ended:  # the group's watch of its openers reported it (decisions 13, 78)
        if latest.failed and group.meta.disposition is LoserPolicy.CANCEL:
            return ORPHANED, f"{who} failed or was killed; its unsettled children were cancelled"
        if latest.failed:
            return ORPHANED, f"{who} failed or was killed"
        return PARKED, f"its latest opener returned normally, {_NO_SAVE}"
    if row is not None and row.get("completion_result") == "success":
        return PARKED, "its latest opener returned normally (Restate still remembers how it ended)"
    if row is not None:
        failure = without_wire((row.get("completion_failure") or "").strip())
        return ORPHANED, f"{who} failed or was killed" + (f": {failure}" if failure else "")
    if saved:
        return ORPHANED, "its latest opener saved its handle; how it ended is not known"
    return ORPHANED, (
        "how its latest opener ended is not known: it saved no handle, and Restate no longer remembers it"
    )


def _age(meta: GroupMeta, now_ms: int) -> int | None:
    return max(0, (now_ms - meta.opened_at_ms) // 1000) if meta.opened_at_ms else None


def open_group_row(group: StoredGroup, state: str, now_ms: int, paused: int, retrying: int) -> dict[str, Any]:
    meta = group.meta
    return {
        "group_key": group.key,
        "child_count": meta.child_count,
        "settled": group.counter,
        "wake": meta.wake.value,
        "disposition": meta.disposition.value,
        "mode": meta.mode.value,
        "state": state,
        "orphaned": state == ORPHANED,
        "age_s": _age(meta, now_ms),
        "paused": paused,
        "missed": len(group.missed),
        "retrying": retrying,
        "reclaim_at": utc(group.reclaim_at_ms / 1000) if group.reclaim_at_ms else None,
        "incarnation": meta.incarnation,
        "layout": layout_of(meta.incarnation),
    }


def utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def list_open_groups(
    admin: Admin, *, orphaned: bool = False, state: str | None = None, now_ms: int | None = None
) -> list[OpenGroup]:
    """Every group the group object holds state for (opened and not yet closed), with its state;
    with ``orphaned`` (or ``state``), only those in that state. Ages are measured to ``now_ms``
    (default: the restate-server's time, `server_now_ms`)."""
    groups = read_groups(admin, order=False)
    known = invocation_rows(admin, sorted({o.caller for g in groups for o in g.meta.openers}))
    opened = {g.key: (g.meta.incarnation, g.meta.opened_at_ms) for g in groups}
    paused, retrying = paused_by_group(admin, opened), retrying_by_group(admin, opened)
    lost = lost_closes(admin, groups, known)
    unrecorded = unrecorded_openers(admin, groups)
    now_ms = server_now_ms(admin) if now_ms is None else now_ms
    listed = [
        OpenGroup(
            **open_group_row(
                g,
                classify(g, known, lost.get(g.key), unrecorded.get(g.key))[0],
                now_ms,
                paused.get(g.key, 0),
                retrying.get(g.key, 0),
            )
        )
        for g in groups
    ]
    wanted = ORPHANED if orphaned else state
    return [g for g in listed if g.state == wanted] if wanted else listed


_KIND = re.compile(r'"type":"(\w+)"')
# An `Err`'s code, a field of its own: inside the message a quote is escaped, so never matched there.
_CODE = re.compile(r'"code":"((?:[^"\\]|\\.)*)"')


def show_group(admin: Admin, group_key: str) -> GroupView | None:
    """One open group, opener by opener and child by child; None if it is not open."""
    found = read_groups(admin, f" AND service_key = {quote(group_key)}")
    fences = sql(
        admin,
        "SELECT value_utf8 FROM state WHERE service_name = "
        f"{quote(named(GROUP))} AND service_key = {quote(group_key)} AND key = {quote(FENCE)}",
    )
    if not found or not fences:
        return None  # not open (or closed between the two reads)
    [group] = found
    meta = group.meta
    fence = decoded(fences[0]["value_utf8"], GroupShape, group_key=group_key, what="shape")
    known = invocation_rows(admin, [o.caller for o in meta.openers])
    alive = alive_of(known)
    lost = lost_closes(admin, [group], known).get(group_key)
    state, reason = classify(group, known, lost, unrecorded_openers(admin, [group]).get(group_key))
    # What Restate paused, and what it retries: one read of each serves the children, the group's own
    # handlers and the counts (which are `groups list`'s, by the same code).
    paused, retrying = paused_rows(admin), paused_rows(admin, status=BACKING_OFF)
    children = _children(admin, group, fence, paused, retrying)
    opened = meta.opened_at_ms / 1000
    openers = [
        OpenerView(
            invocation_id=o.caller,
            alive=o.caller in alive,
            ended=_ended(group, o.caller, known),
            status=known.get(o.caller, {}).get("status"),
        )
        for o in meta.openers
    ]
    pumps = _with_unreported(pumps_of(admin, group_key, meta.incarnation), group_key, meta, children)
    this = {group_key: (meta.incarnation, meta.opened_at_ms)}
    count = paused_by_group(admin, this, paused).get(group_key, 0)
    failing = retrying_by_group(admin, this, retrying).get(group_key, 0)
    return GroupView(
        **open_group_row(group, state, server_now_ms(admin), count, failing),
        reason=reason,
        opened_at=utc(opened) if opened else None,
        openers=openers,
        children=children,
        pumps=pumps,
        held=_held(group_key, paused, retrying),
    )


def _children(
    admin: Admin,
    group: StoredGroup,
    fence: GroupShape,
    paused_now: list[dict[str, Any]],
    retrying_now: list[dict[str, Any]],
) -> list[ChildView]:
    """Every child of ``group``: its rank and outcome once settled, its invocation and its status,
    and what Restate paused or is retrying on its path (of ``paused_now`` and ``retrying_now``)."""
    meta = group.meta
    ranks = {position: rank for rank, position in enumerate(meta.positions(), start=1)}
    kinds = outcome_kinds(admin, group.key, meta, fence, ranks)
    codes = outcome_codes(admin, group.key, meta, fence, [p for p, kind in kinds.items() if kind == "err"])
    invocations = _child_invocations(admin, meta, fence)
    paused = paused_on(admin, [row["id"] for row in invocations.values()], paused_now)
    retrying = retrying_on([row["id"] for row in invocations.values()], retrying_now)
    bounded = bound_of(meta.incarnation) is not None  # `max_in_flight`: some may not have started
    missed = set(group.missed)  # asked once per child: a wide group's misses are many
    children = []
    for position, replay_key in enumerate(fence.replay_keys):
        invocation = invocations.get(replay_key, {})
        status = invocation.get("status")
        if status is None and bounded and position not in ranks and position not in missed:
            status = WAITING  # its group's pump starts it as a slot frees
        children.append(
            ChildView(
                position=position,
                replay_key=replay_key,
                rank=ranks.get(position),
                outcome=kinds.get(position),
                code=codes.get(position),
                invocation_id=invocation.get("id"),
                status=status,
                paused=paused.get(invocation.get("id", "")),
                missed=position in missed,
                retrying=retrying.get(invocation.get("id", "")),
            )
        )
    return children


def _child_invocations(admin: Admin, meta: GroupMeta, fence: GroupShape) -> dict[str, dict[str, Any]]:
    """By replay key, the invocation that runs each child of this incarnation: its `LashChild` run,
    or the callee of a call child its pump calls, the latest of them."""
    runs = rows_in(
        admin,
        "SELECT id, status, target_service_key, created_at FROM sys_invocation WHERE "
        f"target_service_name = {quote(named(CHILD))} "
        "AND target_handler_name IN ('run', 'execute', 'execute2') "
        "AND target_service_key IN {values}",
        list(fence.replay_keys),
    )
    # A call child lash calls itself runs as the callee, under its idempotency key (decision 61).
    callees = rows_in(
        admin,
        "SELECT id, status, idempotency_key, created_at FROM sys_invocation "
        "WHERE idempotency_key IN {values}",
        [f"{key}@{meta.incarnation}" for key in fence.replay_keys],
    )
    for row in callees:
        row["target_service_key"] = callee_replay_key(row.get("idempotency_key"))
    # The latest run of a replay key wins, and none from before this incarnation's open: a namesake
    # group (closed, the key opened again) may have run it, and its run is not this group's child.
    return {
        row["target_service_key"]: row
        for row in sorted([*runs, *callees], key=lambda r: str(r.get("created_at")))
        if not created_before(row.get("created_at"), meta.opened_at_ms)
    }


def _held(group_key: str, paused: list[dict[str, Any]], retrying: list[dict[str, Any]]) -> list[HeldView]:
    """The handlers of the group's own object that Restate holds paused or retries (of ``paused`` and
    ``retrying``), and that run one at a time on its key: its reports, reads and close queue behind them."""
    return [
        HeldView(invocation_id=str(row["id"]), handler=str(row.get("target_handler_name")), status=status)
        for status, rows in ((PAUSED, paused), (BACKING_OFF, retrying))
        for row in rows
        if holds_up_group(row) and row.get("target_service_key") == group_key
    ]


def pumps_of(admin: Admin, group_key: str, incarnation: str) -> list[PumpView]:
    """The group's `LashPump` invocations of this incarnation that have not completed, oldest first."""
    rows = sql(
        admin,
        "SELECT id, target_handler_name, target_service_key, status FROM sys_invocation WHERE "
        f"target_service_name = {quote(named(PUMP))} AND status != {quote(ENDED)} "
        f"AND starts_with(target_service_key, {quote(incarnation)}) "
        f"AND ends_with(target_service_key, {quote(':' + group_key)}) ORDER BY created_at",
    )
    return [
        PumpView(
            invocation_id=str(row["id"]),
            handler=str(row["target_handler_name"]),
            key=key,
            status=str(row["status"]),
        )
        for row in rows
        # Not a key that only starts or ends alike: this group's, of this incarnation.
        if (group_of_pump(key := str(row["target_service_key"])), incarnation_of_pump(key))
        == (group_key, incarnation)
    ]


def _with_unreported(
    pumps: list[PumpView], group_key: str, meta: GroupMeta, children: list[ChildView]
) -> list[PumpView]:
    """``pumps``, each with its children that finished and hold no rank: it runs them and keeps their
    outcomes (`outcome_store`), and has not reported them yet (held up, if it is paused)."""
    if not pumps:
        return pumps
    waiting: dict[str, int] = {}
    for child in children:
        if child.rank is None and child.status == ENDED:
            store = outcome_store(group_key, meta, child.position, child.replay_key).key
            waiting[store] = waiting.get(store, 0) + 1
    return [dataclasses.replace(pump, unreported=waiting.get(pump.key, 0)) for pump in pumps]


def _ended(group: StoredGroup, caller: str, known: dict[str, dict[str, Any]]) -> str | None:
    """How an opener ended, from what the group recorded or, failing that, from what Restate remembers:
    ``returned``, or ``killed``, ``cancelled`` or ``failed`` (the group records only that it failed;
    Restate, while it remembers the invocation, says which)."""
    row = known.get(caller)
    if caller in group.ends:
        return _failed_how(row) if group.ends[caller] else "returned"
    opener = next(o for o in group.meta.openers if o.caller == caller)
    if opener.ended:
        return _failed_how(row) if opener.failed else "returned"
    if row is None or row.get("status") != ENDED:
        return None
    return "returned" if row.get("completion_result") == "success" else _failed_how(row)


def _failed_how(row: dict[str, Any] | None) -> str:
    """``killed`` or ``cancelled`` where Restate's row says so (as it answers a caller, `[409] …`), else
    ``failed``."""
    failure = str((row or {}).get("completion_failure") or "")
    return next((how for how in ("killed", "cancelled") if failure == f"[409] {how}"), "failed")


def outcome_kinds(
    admin: Admin, group_key: str, meta: GroupMeta, fence: GroupShape, ranks: dict[int, int]
) -> dict[int, str]:
    """The kind of each settled child's stored outcome, read where the group's mode keeps it."""
    stores = _stores(group_key, meta, fence, ranks)
    # The outcome's tag is its first field (msgspec writes it first): a short prefix is enough.
    heads = _heads(admin, stores, 40)
    return {position: kind.group(1) for position, head in heads.items() if (kind := _KIND.search(head))}


def outcome_codes(
    admin: Admin, group_key: str, meta: GroupMeta, fence: GroupShape, rejected: list[int]
) -> dict[int, str]:
    """The code of each ``rejected`` child's stored outcome (an `Err`: its message, then its code),
    from its first KiB: one whose message is longer shows none here."""
    heads = _heads(admin, _stores(group_key, meta, fence, rejected), 1024, named_only=True)
    return {position: code.group(1) for position, head in heads.items() if (code := _CODE.search(head))}


def _stores(
    group_key: str, meta: GroupMeta, fence: GroupShape, positions: Iterable[int]
) -> dict[int, OutcomeStore]:
    """Where the group's mode keeps the outcome of each of ``positions``."""
    return {p: outcome_store(group_key, meta, p, fence.replay_keys[p]) for p in positions}


def _heads(
    admin: Admin, stores: dict[int, OutcomeStore], length: int, *, named_only: bool = False
) -> dict[int, str]:
    """The first ``length`` characters of each position's stored outcome; with ``named_only``, only
    those entries are asked for, not every entry their stores keep."""
    wanted = {(store.service, store.key, store.name): position for position, store in stores.items()}
    heads: dict[int, str] = {}
    for service in sorted({store.service for store in stores.values()}):
        keys = sorted({store.key for store in stores.values() if store.service == service})
        names = sorted({store.name for store in stores.values() if store.service == service})
        rows = rows_in(
            admin,
            f"SELECT service_key, key, substr(value_utf8, 1, {int(length)}) AS head FROM state "
            f"WHERE service_name = {quote(service)} AND service_key IN {{values}}"
            + (f" AND key IN {in_list(names)}" if named_only else ""),
            keys,
        )
        for row in rows:
            position = wanted.get((service, row["service_key"], row["key"]))
            if position is not None:
                heads[position] = row.get("head") or ""
    return heads
