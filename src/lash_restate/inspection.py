"""Inspection of open groups through Restate's own surface: the admin API's SQL over the `state` table.

ADR: there is no TTL on group state, so orphaned groups must be countable;
the host exposes open group keys through its existing inspection surface. Services are read
under this process's prefix (`lash_restate.engine.use_prefix`; ``--prefix`` on the command line).

A group is *open* while one of its openers runs, *parked* once the latest of them returned normally
(a continuation holds its cursor) and *orphaned* otherwise: its latest opener failed or was killed,
or how it ended is not known (decision 45). `close_group` is the operator's close; no clock closes
a group anybody can resume (one nobody can is reclaimed by the group itself, and listed with when:
decision 78). `left_staged` lists the parts an opener killed mid-open left staged, which no group
will read, and `release_staged` releases one (decision 71).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar
from urllib.parse import quote as url_quote

import httpx
import msgspec

from .admin import AdminApi, AdminError
from .contract import GroupShape, LashError, LoserPolicy, RuntimeErrorCode, without_wire
from .engine import (
    CHILD,
    GROUP,
    GROUP_OPERATOR_CLOSE,
    GROUP_OPERATOR_REDISPATCH,
    MISSED,
    OPENER_ENDS,
    PUMP,
    RECLAIM_AT,
    STAGED,
    GroupMeta,
    OpenerEnd,
    OperatorClose,
    OperatorRedispatch,
    Route,
    assemble_order,
    group_of_pump,
    named,
    outcome_store,
)

__all__ = [
    "DEFAULT_INGRESS_URL",
    "ChildView",
    "CloseRefused",
    "CloseResult",
    "GroupView",
    "InspectionError",
    "OpenGroup",
    "OpenerView",
    "PausedView",
    "RedispatchResult",
    "StagedPart",
    "close_group",
    "ingress_url",
    "left_staged",
    "list_open_groups",
    "quote",
    "redispatch_missed",
    "release_staged",
    "show_group",
    "sql",
]

# The `sys_invocation` status of an invocation that has ended, and of one Restate paused after its
# retries ran out (`on-max-attempts = "pause"`): it waits for an operator's resume or kill.
_ENDED = "completed"
_PAUSED = "paused"
DEFAULT_INGRESS_URL = "http://127.0.0.1:8080"

OPEN, PARKED, ORPHANED = "open", "parked", "orphaned"
# How many literals one IN (...) list carries; a wide group is looked up in slices.
_SLICE = 500


class InspectionError(LashError, RuntimeError):
    """The admin API could not be reached or refused the query; the message is one line."""

    code = RuntimeErrorCode.INSPECTION

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class OpenGroup:
    group_key: str
    child_count: int
    settled: int
    wake: str
    disposition: str
    mode: str  # how its children settle: "direct", or in batches through one pump (decision 20)
    state: str  # "open" (an opener runs), "parked" (a continuation holds it) or "orphaned" (nobody does)
    orphaned: bool  # state == "orphaned": the ADR's leak, countable (and closable) by an operator
    age_s: int | None  # seconds since it was first opened (None: its open is not timed)
    paused: int  # children Restate paused (or whose calls it paused) after their retries ran out
    missed: int = 0  # children whose runner was missing: their run ended with no outcome
    # An orphan nobody can resume is reclaimed (closed) at this time (UTC, ISO 8601), or later if its
    # children still run then; None for any other group.
    reclaim_at: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class OpenerView:
    """An invocation that opened the group, whether it is still running, and how it ended if known."""

    invocation_id: str
    alive: bool
    ended: str | None = None  # "returned" | "failed" | None (running, or its end is not known)


@dataclass(frozen=True)
class PausedView:
    """An invocation Restate paused: the child's own, or the call it made. It waits for an operator."""

    invocation_id: str
    target: str  # service/handler (and key) as Restate shows it
    retry_count: int | None
    last_failure: str | None
    last_failure_error_code: str | None


@dataclass(frozen=True)
class ChildView:
    """One child: its rank and outcome's kind once settled, and its invocation as Restate shows it."""

    position: int
    replay_key: str
    rank: int | None
    outcome: str | None  # "ok" | "err" | "cancelled", while its outcome is stored
    invocation_id: str | None
    status: str | None  # the invocation's status in sys_invocation
    paused: PausedView | None = None  # what Restate paused on this child's path, and its last failure
    missed: bool = False  # its runner was missing: it ended with no outcome; `groups redispatch` reruns it


@dataclass(frozen=True)
class GroupView(OpenGroup):
    """`groups show`: the group, its state and why, who opened it and when, and every child."""

    reason: str = ""  # why it is open, parked or orphaned
    opened_at: str | None = None  # UTC, ISO 8601
    openers: list[OpenerView] = field(default_factory=list)
    children: list[ChildView] = field(default_factory=list)


def quote(text: str) -> str:
    """A SQL string literal for ``text``: the admin query API takes no parameters, so quote exactly."""
    if "\x00" in text:
        raise ValueError("a NUL character cannot appear in a query literal")
    return "'" + text.replace("'", "''") + "'"


Admin = AdminApi | str  # an admin API, or just its address (no token)


def _api(admin: Admin) -> AdminApi:
    return AdminApi(admin) if isinstance(admin, str) else admin


def sql(admin: Admin, query: str, *, timeout: float = 10) -> list[dict[str, Any]]:
    """Rows of ``query`` over the admin API's SQL (`POST /query`)."""
    api = _api(admin)
    try:
        response = api.post("/query", {"query": query}, timeout=timeout, accept_json=True)
    except AdminError as exc:
        raise InspectionError(str(exc)) from None
    if response.status_code != 200:
        raise InspectionError(
            f"the admin API at {api.url} answered {response.status_code}: {response.text[:200]}"
        )
    try:
        rows: list[dict[str, Any]] = response.json()["rows"]
    except (ValueError, KeyError) as exc:
        raise InspectionError(f"{api.url} is not a Restate admin API (no query rows: {exc})") from None
    return rows


def _in(values: Iterable[str]) -> str:
    return "(" + ", ".join(quote(v) for v in values) + ")"


def _rows_in(admin: Admin, query: str, values: list[str]) -> list[dict[str, Any]]:
    """``query`` (with one ``{values}`` placeholder for an IN list) over ``values``, in slices."""
    rows: list[dict[str, Any]] = []
    for start in range(0, len(values), _SLICE):
        rows += sql(admin, query.replace("{values}", _in(values[start : start + _SLICE])))
    return rows


def _invocations(admin: Admin, invocation_ids: list[str]) -> dict[str, dict[str, Any]]:
    """What Restate still knows of ``invocation_ids``, by id (a purged invocation is absent)."""
    rows = _rows_in(
        admin,
        "SELECT id, status, completion_result, completion_failure FROM sys_invocation WHERE id IN {values}",
        invocation_ids,
    )
    return {row["id"]: row for row in rows}


def _alive(known: dict[str, dict[str, Any]]) -> set[str]:
    """Which invocations have not ended (a purged one has ended long ago)."""
    return {id_ for id_, row in known.items() if row.get("status") != _ENDED}


@dataclass(frozen=True)
class _Group:
    key: str
    meta: GroupMeta
    ends: dict[str, bool]  # how the callers that saved its handle ended: caller -> failed (decision 45)
    missed: list[int] = field(default_factory=list)  # positions whose runner was missing
    reclaim_at_ms: int | None = None  # when the orphan is due to be reclaimed (decision 78)


_I = TypeVar("_I")
_O = TypeVar("_O")
_ENDS = msgspec.json.Decoder(list[OpenerEnd])
_POSITIONS = msgspec.json.Decoder(list[int])


def _groups(admin: Admin, where: str = "") -> list[_Group]:
    rows = sql(
        admin,
        "SELECT service_key, key, value_utf8 FROM state "
        f"WHERE service_name = {quote(named(GROUP))} AND (key IN ('meta', {quote(OPENER_ENDS)}, "
        f"{quote(MISSED)}, {quote(RECLAIM_AT)}) "
        f"OR key = 'ranked' OR starts_with(key, 'ranks:')){where}",
    )
    metas = {r["service_key"]: r["value_utf8"] for r in rows if r["key"] == "meta"}
    ends = {r["service_key"]: r["value_utf8"] for r in rows if r["key"] == OPENER_ENDS}
    missed = {r["service_key"]: r["value_utf8"] for r in rows if r["key"] == MISSED}
    reclaims = {r["service_key"]: int(r["value_utf8"]) for r in rows if r["key"] == RECLAIM_AT}
    pages: dict[str, dict[str, str]] = {}
    for r in rows:
        if r["key"].startswith("ranks:") or r["key"] == "ranked":
            pages.setdefault(r["service_key"], {})[r["key"]] = r["value_utf8"]
    found = []
    for key in sorted(metas):
        # A wide group keeps its rank order in pages (decision 65): read as one order.
        meta = assemble_order(msgspec.json.decode(metas[key], type=GroupMeta), pages.get(key, {}))
        recorded = _ENDS.decode(ends[key]) if key in ends else []  # absent on a format-1 group
        positions = _POSITIONS.decode(missed[key]) if key in missed else []
        ended = {end.caller: end.failed for end in recorded}
        found.append(_Group(key, meta, ended, positions, reclaims.get(key)))
    return found


def _classify(group: _Group, known: dict[str, dict[str, Any]]) -> tuple[str, str]:
    """The group's state and why (decision 45): the latest opener, by open order, decides."""
    openers = group.meta.openers
    running = [o.caller for o in openers if o.caller in _alive(known)]
    if running:
        return OPEN, f"its opener {running[-1]} is running"
    if not openers:
        return ORPHANED, "no opener is recorded"
    latest = openers[-1]
    if latest.caller in group.ends:
        if group.ends[latest.caller]:
            return ORPHANED, "its latest opener saved its handle, then failed or was killed"
        return PARKED, "its latest opener saved its handle and returned normally: a continuation holds it"
    if latest.ended:  # the group's watch of its openers reported it (decisions 13, 78)
        if latest.failed and group.meta.disposition is LoserPolicy.CANCEL:
            return ORPHANED, "its latest opener failed or was killed; its unsettled children were cancelled"
        if latest.failed:
            return ORPHANED, "its latest opener failed or was killed"
        return PARKED, "its latest opener returned normally: a continuation holds it"
    row = known.get(latest.caller)
    if row is not None and row.get("completion_result") == "success":
        return PARKED, "its latest opener returned normally (Restate still remembers how it ended)"
    if row is not None:
        failure = without_wire((row.get("completion_failure") or "").strip())
        return ORPHANED, "its latest opener failed or was killed" + (f": {failure}" if failure else "")
    return ORPHANED, (
        "how its latest opener ended is not known: it saved no handle, and Restate no longer remembers it"
    )


def _age(meta: GroupMeta, now_ms: int) -> int | None:
    return max(0, (now_ms - meta.opened_at_ms) // 1000) if meta.opened_at_ms else None


def _open_group(group: _Group, state: str, now_ms: int, paused: int) -> dict[str, Any]:
    meta = group.meta
    return {
        "group_key": group.key,
        "child_count": meta.child_count,
        "settled": meta.counter,
        "wake": meta.wake.value,
        "disposition": meta.disposition.value,
        "mode": meta.mode.value,
        "state": state,
        "orphaned": state == ORPHANED,
        "age_s": _age(meta, now_ms),
        "paused": paused,
        "missed": len(group.missed),
        "reclaim_at": _utc(group.reclaim_at_ms / 1000) if group.reclaim_at_ms else None,
    }


def _utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def _paused_rows(admin: Admin, where: str = "") -> list[dict[str, Any]]:
    return sql(
        admin,
        "SELECT id, target, target_service_name, target_service_key, invoked_by_id, "
        "invoked_by_service_name, idempotency_key, retry_count, last_failure, last_failure_error_code "
        "FROM sys_invocation "
        f"WHERE status = {quote(_PAUSED)}{where}",
    )


# A call child lash calls itself is the callee's invocation, called by its group's pump under the
# idempotency key `{replay key}@{group incarnation}` (decision 61; `engine/_calls.py` `callee_key`);
# a paged group's incarnation begins `p-` (decision 65).
# An incarnation: a UUID, after `p-` if the group is paged, and before `-s` if it records saves.
_CALLEE = re.compile(r"(.+)@(?:p-)?[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}(?:-s)?")


def _callee_key(idempotency_key: str | None) -> str | None:
    """The replay key a call child's callee names in its idempotency key, if it names one."""
    found = _CALLEE.fullmatch(idempotency_key or "")
    return found.group(1) if found else None


def _callee_of(row: dict[str, Any]) -> str | None:
    """The replay key of the call child whose own invocation ``row`` is, if it is one: called by a
    pump of lash's (an application's own invocation may carry a key of the same shape)."""
    if row.get("invoked_by_service_name") != named(PUMP):
        return None
    return _callee_key(row.get("idempotency_key"))


def _paused_replay_keys(admin: Admin) -> dict[str, int]:
    """How many paused invocations lie on each child's path, by replay key: the child's own (its
    `LashChild`, or the callee of a call lash makes itself), or a call it made. One query when
    nothing is paused (the usual case)."""
    paused = _paused_rows(admin)
    child = named(CHILD)
    keys: list[str | None] = [
        row["target_service_key"] if row.get("target_service_name") == child else _callee_of(row)
        for row in paused
    ]
    # An invocation the ingress started has no invoker: the admin API leaves the column out.
    callers = sorted(
        {
            str(row["invoked_by_id"])
            for row in paused
            if row.get("target_service_name") != child
            and _callee_of(row) is None
            and row.get("invoked_by_id")
        }
    )
    if callers:
        rows = _rows_in(
            admin,
            f"SELECT target_service_key FROM sys_invocation WHERE target_service_name = {quote(child)} "
            "AND id IN {values}",
            callers,
        )
        keys += [row["target_service_key"] for row in rows]
    counts: dict[str, int] = {}
    for key in keys:
        if key is not None:
            counts[key] = counts.get(key, 0) + 1
    return counts


def _paused_by_group(admin: Admin) -> dict[str, int]:
    """Paused invocations on each group's children, by group key (read only when any is paused)."""
    counts = _paused_replay_keys(admin)
    if not counts:
        return {}
    by_group: dict[str, int] = {}
    for replay_key, count in counts.items():
        needle = msgspec.json.encode(replay_key).decode()
        rows = sql(
            admin,
            f"SELECT service_key, value_utf8 FROM state WHERE service_name = {quote(named(GROUP))} "
            f"AND key = 'fence' AND strpos(value_utf8, {quote(needle)}) > 0",
        )
        for row in rows:
            if replay_key in msgspec.json.decode(row["value_utf8"], type=GroupShape).replay_keys:
                by_group[row["service_key"]] = by_group.get(row["service_key"], 0) + count
    return by_group


def list_open_groups(admin: Admin, *, orphaned: bool = False, state: str | None = None) -> list[OpenGroup]:
    """Every group the group object holds state for (opened and not yet closed), with its state;
    with ``orphaned`` (or ``state``), only those in that state."""
    groups = _groups(admin)
    known = _invocations(admin, sorted({o.caller for g in groups for o in g.meta.openers}))
    paused = _paused_by_group(admin)
    now_ms = int(time.time() * 1000)
    listed = [
        OpenGroup(**_open_group(g, _classify(g, known)[0], now_ms, paused.get(g.key, 0))) for g in groups
    ]
    wanted = ORPHANED if orphaned else state
    return [g for g in listed if g.state == wanted] if wanted else listed


_KIND = re.compile(r'"type":"(\w+)"')


def show_group(admin: Admin, group_key: str) -> GroupView | None:
    """One open group, opener by opener and child by child; None if it is not open."""
    found = _groups(admin, f" AND service_key = {quote(group_key)}")
    fences = sql(
        admin,
        "SELECT value_utf8 FROM state WHERE service_name = "
        f"{quote(named(GROUP))} AND service_key = {quote(group_key)} AND key = 'fence'",
    )
    if not found or not fences:
        return None  # not open (or closed between the two reads)
    [group] = found
    meta = group.meta
    fence = msgspec.json.decode(fences[0]["value_utf8"], type=GroupShape)
    ranks = {position: rank for rank, position in enumerate(meta.positions(), start=1)}
    known = _invocations(admin, [o.caller for o in meta.openers])
    alive = _alive(known)
    state, reason = _classify(group, known)
    kinds = _outcome_kinds(admin, group_key, meta, fence, ranks)
    runs = _rows_in(
        admin,
        "SELECT id, status, target_service_key, created_at FROM sys_invocation WHERE "
        f"target_service_name = {quote(named(CHILD))} AND target_handler_name IN ('run', 'execute') "
        "AND target_service_key IN {values}",
        list(fence.replay_keys),
    )
    # A call child lash calls itself runs as the callee, under its idempotency key (decision 61).
    callees = _rows_in(
        admin,
        "SELECT id, status, idempotency_key, created_at FROM sys_invocation "
        "WHERE idempotency_key IN {values}",
        [f"{key}@{meta.incarnation}" for key in fence.replay_keys],
    )
    for row in callees:
        row["target_service_key"] = _callee_key(row.get("idempotency_key"))
    # The latest run of a replay key wins (a namesake group may have run it before).
    invocations = {
        row["target_service_key"]: row
        for row in sorted([*runs, *callees], key=lambda r: str(r.get("created_at")))
    }
    paused = _paused_on(admin, [row["id"] for row in invocations.values()])
    children = []
    for position, replay_key in enumerate(fence.replay_keys):
        invocation = invocations.get(replay_key, {})
        children.append(
            ChildView(
                position=position,
                replay_key=replay_key,
                rank=ranks.get(position),
                outcome=kinds.get(position),
                invocation_id=invocation.get("id"),
                status=invocation.get("status"),
                paused=paused.get(invocation.get("id", "")),
                missed=position in group.missed,
            )
        )
    opened = meta.opened_at_ms / 1000
    openers = [
        OpenerView(invocation_id=o.caller, alive=o.caller in alive, ended=_ended(group, o.caller, known))
        for o in meta.openers
    ]
    count = sum(1 for child in children if child.paused is not None)
    return GroupView(
        **_open_group(group, state, int(time.time() * 1000), count),
        reason=reason,
        opened_at=_utc(opened) if opened else None,
        openers=openers,
        children=children,
    )


def _ended(group: _Group, caller: str, known: dict[str, dict[str, Any]]) -> str | None:
    """How an opener ended, from what the group recorded or, failing that, from what Restate remembers."""
    if caller in group.ends:
        return "failed" if group.ends[caller] else "returned"
    opener = next(o for o in group.meta.openers if o.caller == caller)
    if opener.ended:
        return "failed" if opener.failed else "returned"
    row = known.get(caller)
    if row is None or row.get("status") != _ENDED:
        return None
    return "returned" if row.get("completion_result") == "success" else "failed"


def _paused_on(admin: Admin, child_ids: list[str]) -> dict[str, PausedView]:
    """By child invocation: the invocation Restate paused on its path (its own, or a call it made)."""
    if not child_ids:
        return {}
    rows: list[dict[str, Any]] = []
    for start in range(0, len(child_ids), _SLICE):
        values = _in(child_ids[start : start + _SLICE])
        rows += _paused_rows(admin, f" AND (id IN {values} OR invoked_by_id IN {values})")
    wanted = set(child_ids)
    failures = _pause_failures(admin, [row["id"] for row in rows])
    paused: dict[str, PausedView] = {}
    for row in rows:
        child = row["id"] if row["id"] in wanted else row.get("invoked_by_id")
        if child is None or (child in paused and row["id"] != child):
            continue  # the child's own pause wins over a call's
        retries = row.get("retry_count")
        message, code = failures.get(row["id"], (None, None))
        paused[child] = PausedView(
            invocation_id=row["id"],
            target=str(row.get("target")),
            retry_count=int(retries) if retries is not None else None,
            last_failure=_shown(row.get("last_failure") or message),
            last_failure_error_code=row.get("last_failure_error_code") or code,
        )
    return paused


_PAUSED_EVENT = msgspec.json.Decoder(dict[str, Any])


def _pause_failures(admin: Admin, invocation_ids: list[str]) -> dict[str, tuple[str | None, str | None]]:
    """The last failure of each paused invocation, from the journal event Restate wrote when it paused
    (`sys_invocation` keeps its ``last_failure`` columns only while it is backing off)."""
    if not invocation_ids:
        return {}
    rows = _rows_in(
        admin,
        "SELECT id, appended_at, event_json FROM sys_journal_events WHERE event_type = 'Paused' "
        "AND id IN {values}",
        invocation_ids,
    )
    failures: dict[str, tuple[str | None, str | None]] = {}
    for row in sorted(rows, key=lambda r: str(r.get("appended_at"))):  # the latest pause wins
        try:
            failure = _PAUSED_EVENT.decode(row.get("event_json") or "{}").get("last_failure") or {}
        except msgspec.DecodeError:
            continue  # a form this release does not know: the columns alone are shown
        code = failure.get("error_code")
        failures[row["id"]] = (failure.get("error_message"), None if code is None else str(code))
    return failures


class CloseRefused(InspectionError):
    """`close_group` would not close: the group is parked or open (and not forced), or changed meanwhile."""

    code = RuntimeErrorCode.CLOSE_REFUSED


@dataclass(frozen=True)
class CloseResult:
    group_key: str
    closed: bool  # False: it was not open (closed already, or never): nothing to do
    was: str | None  # its state before the close: "open", "parked" or "orphaned"; None if not open
    disposition: str | None = None  # the disposition the close applied
    cancelled: int = 0  # cancels sent: one per unsettled child, or the one pump
    # Closed under RunToCompletion: the unsettled children whose invocations still ran, which run on
    # (an operator cancels one with Restate's own `restate invocations cancel ID`).
    running: list[ChildView] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


_WHY = {
    PARKED: "it is parked: its latest opener returned normally and saved its handle, so a continuation "
    "may resume it (and would then find it closed); pass --force to close it anyway",
    OPEN: "it is open: its opener is running and still reads it; pass --force to close it anyway",
}


def ingress_url(url: str | None = None) -> str:
    """``url``, else ``$RESTATE_INGRESS_URL``, else ``$LASH_INGRESS_URL``, else the local default."""
    return (
        url
        or os.environ.get("RESTATE_INGRESS_URL")
        or os.environ.get("LASH_INGRESS_URL")
        or DEFAULT_INGRESS_URL
    )


def close_group(
    admin: Admin,
    group_key: str,
    *,
    cancel: bool = False,
    force: bool = False,
    ingress: str | None = None,
) -> CloseResult:
    """The operator's close of one group: the ADR's close, as its caller's would be (decision 45).

    Idempotent (a group that is not open is left alone); narrowing only (``cancel`` narrows
    RunToCompletion to Cancel, which cancels its unsettled children; a declared Cancel stays Cancel);
    it deletes the group's state. A parked or open group is refused unless ``force``.
    """
    found = _groups(admin, f" AND service_key = {quote(group_key)}")
    if not found:
        return CloseResult(group_key=group_key, closed=False, was=None)
    [group] = found
    known = _invocations(admin, [o.caller for o in group.meta.openers])
    state, _ = _classify(group, known)
    if state in _WHY and not force:
        raise CloseRefused(f"not closing {group_key}: {_WHY[state]}")
    running: list[ChildView] = []
    if not cancel and group.meta.disposition is LoserPolicy.RUN_TO_COMPLETION:
        view = show_group(admin, group_key)
        running = [
            c for c in (view.children if view else []) if c.rank is None and c.status not in (None, _ENDED)
        ]
    request = OperatorClose(
        incarnation=group.meta.incarnation, openers=len(group.meta.openers), cancel=cancel
    )
    answer = _operator(_api(admin), ingress_url(ingress), group_key, GROUP_OPERATOR_CLOSE, request)
    if answer.refused is not None:
        raise CloseRefused(f"not closing {group_key}: {answer.refused}")
    return CloseResult(
        group_key=group_key,
        closed=answer.closed,
        was=state if answer.closed else None,
        disposition=answer.disposition.value if isinstance(answer.disposition, LoserPolicy) else None,
        cancelled=answer.cancelled,
        running=running if answer.closed else [],
    )


@dataclass(frozen=True)
class RedispatchResult:
    group_key: str
    dispatched: int  # children dispatched again
    unroutable: int  # children the endpoint that answered still cannot route: still missed

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def redispatch_missed(
    admin: Admin, group_key: str | None = None, *, ingress: str | None = None
) -> list[RedispatchResult]:
    """Run again the children whose runner was missing, of ``group_key`` or (None) of every open
    group with such children, without a reopen: the Restate form of the reference host's drain,
    for once a deployment routes them again. A child dispatched again runs only if it has no
    outcome, and reaches its rank as a first run's does; a group that is not open is skipped.
    """
    where = f" AND service_key = {quote(group_key)}" if group_key is not None else ""
    results = []
    for group in _groups(admin, where):
        if not group.missed:
            continue
        request = OperatorRedispatch(incarnation=group.meta.incarnation)
        answer = _operator(_api(admin), ingress_url(ingress), group.key, GROUP_OPERATOR_REDISPATCH, request)
        if answer.refused is None:
            results.append(RedispatchResult(group.key, answer.dispatched, answer.unroutable))
    return results


def _operator(api: AdminApi, ingress: str, group_key: str, route: Route[_I, _O], request: _I) -> _O:
    """One operator's handler of the group object, reached through the ingress (decision 45)."""
    url = f"{ingress.rstrip('/')}/{route.service}/{url_quote(group_key, safe='')}/{route.handler}"
    headers = {"content-type": "application/json"}
    if api.token:
        headers["authorization"] = f"Bearer {api.token}"
    try:
        response = httpx.post(url, content=msgspec.json.encode(request), headers=headers, timeout=60)
    except httpx.HTTPError as exc:
        raise InspectionError(f"cannot reach the Restate ingress at {ingress} ({exc})") from None
    if response.status_code != 200:
        raise InspectionError(
            f"the ingress at {ingress} answered {response.status_code} to {route.handler}: "
            f"{_said(response)[:200]}"
        )
    try:
        return msgspec.json.decode(response.content, type=route.output)
    except msgspec.DecodeError as exc:
        raise InspectionError(f"{ingress} is not serving {route.service}/{route.handler} ({exc})") from None


def _said(response: httpx.Response) -> str:
    """What the ingress answered, for a person: the failure's message (a wire line, from an endpoint
    of an earlier release, shown as its error), else the text of the answer."""
    try:
        message = response.json().get("message")
    except (ValueError, AttributeError):
        message = None
    return without_wire(message) if isinstance(message, str) else response.text


def _shown(failure: str | None) -> str | None:
    return None if failure is None else without_wire(failure)


def _outcome_kinds(
    admin: Admin, group_key: str, meta: GroupMeta, fence: GroupShape, ranks: dict[int, int]
) -> dict[int, str]:
    """The kind of each settled child's stored outcome, read where the group's mode keeps it."""
    stores = {
        position: outcome_store(group_key, meta, position, fence.replay_keys[position]) for position in ranks
    }
    wanted = {(store.service, store.key, store.name): position for position, store in stores.items()}
    kinds: dict[int, str] = {}
    for service in sorted({store.service for store in stores.values()}):
        keys = sorted({store.key for store in stores.values() if store.service == service})
        rows = _rows_in(
            admin,
            # The outcome's tag is its first field (msgspec writes it first): a short prefix is enough.
            "SELECT service_key, key, substr(value_utf8, 1, 40) AS head FROM state "
            f"WHERE service_name = {quote(service)} AND service_key IN {{values}}",
            keys,
        )
        for row in rows:
            position = wanted.get((service, row["service_key"], row["key"]))
            kind = _KIND.search(row.get("head") or "")
            if position is not None and kind:
                kinds[position] = kind.group(1)
    return kinds


@dataclass(frozen=True)
class StagedPart:
    """Children an open in parts staged with a pump and no group will read: their opener ended
    before it sent the open (decision 71). ``opener`` is that invocation while Restate remembers it."""

    pump_key: str
    group_key: str
    opener: str | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def left_staged(admin: Admin) -> list[StagedPart]:
    """The parts staged for an open in parts that no group will read, and nothing will release.

    A part is left when no group is recorded under its stage (a first open's stage is its group's
    incarnation, whose pumps run the parts they keep), nothing is queued on its pump (a release, a
    re-dispatch or the run itself) or on its group's `open_parts`, and the invocation that staged it
    has ended (or Restate no longer remembers it, which it does for a day by default).
    """
    rows = sql(
        admin,
        f"SELECT service_key FROM state WHERE service_name = {quote(named(PUMP))} AND key = {quote(STAGED)}",
    )
    keys = sorted({row["service_key"] for row in rows})
    if not keys:
        return []
    groups = sorted({group_of_pump(key) for key in keys})
    metas = _rows_in(
        admin,
        f"SELECT service_key, value_utf8 FROM state WHERE service_name = {quote(named(GROUP))} "
        "AND key = 'meta' AND service_key IN {values}",
        groups,
    )
    recorded = {row["service_key"]: msgspec.json.decode(row["value_utf8"], type=GroupMeta) for row in metas}
    queued = _rows_in(
        admin,
        "SELECT target_service_name AS service, target_service_key AS key, target_handler_name AS handler "
        "FROM sys_invocation WHERE status != 'completed' AND target_service_key IN {values}",
        keys + groups,
    )
    busy = {row["key"] for row in queued if row["service"] == named(PUMP)}
    busy |= {
        row["key"] for row in queued if row["service"] == named(GROUP) and row["handler"] == "open_parts"
    }
    stagers = _rows_in(
        admin,
        "SELECT target_service_key AS key, invoked_by_id AS opener, created_at FROM sys_invocation "
        f"WHERE target_service_name = {quote(named(PUMP))} AND target_handler_name = 'stage' "
        "AND target_service_key IN {values} ORDER BY created_at",
        keys,
    )
    openers = {row["key"]: row["opener"] for row in stagers if row.get("opener")}  # the latest
    alive = _alive(_invocations(admin, sorted(set(openers.values()))))
    left = []
    for key in keys:
        group = group_of_pump(key)
        stage = key.partition(":")[0].split(".")[0]  # a further slice's pump adds `.{slice}`
        meta = recorded.get(group)
        if (meta is not None and meta.incarnation == stage) or key in busy or group in busy:
            continue
        if openers.get(key) in alive:
            continue  # its opener may still send the open
        left.append(StagedPart(pump_key=key, group_key=group, opener=openers.get(key)))
    return left


def release_staged(admin: Admin, part: StagedPart) -> None:
    """Release ``part``'s children through the admin API (its pump's state, which holds nothing else)."""
    api = _api(admin)
    body = {"object_key": part.pump_key, "new_state": {}}
    try:
        response = api.post(f"/services/{url_quote(named(PUMP), safe='')}/state", body)
    except AdminError as exc:
        raise InspectionError(str(exc)) from None
    if response.status_code not in (200, 202):
        raise InspectionError(
            f"the admin API at {api.url} answered {response.status_code} to the release: "
            + response.text[:200]
        )
