"""Inspection of open groups through Restate's own surface: the admin API's SQL over the `state` table.

ADR: there is no TTL on group state, so orphaned groups must be countable;
the host exposes open group keys through its existing inspection surface. Services are read
under this process's prefix (`lash_restate.engine.use_prefix`; ``--prefix`` on the command line).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import msgspec

from .admin import AdminApi, AdminError
from .contract import GroupShape
from .engine import CHILD, GROUP, GroupMeta, named, outcome_store

__all__ = [
    "ChildView",
    "GroupView",
    "InspectionError",
    "OpenGroup",
    "OpenerView",
    "list_open_groups",
    "quote",
    "show_group",
    "sql",
]

# Invocation statuses in `sys_invocation` of an invocation that has not ended.
_ENDED = "completed"
# How many literals one IN (...) list carries; a wide group is looked up in slices.
_SLICE = 500


class InspectionError(RuntimeError):
    """The admin API could not be reached or refused the query; the message is one line."""


@dataclass(frozen=True)
class OpenGroup:
    group_key: str
    child_count: int
    settled: int
    wake: str
    disposition: str
    mode: str  # how its children settle: "direct", or in batches through one pump (decision 20)
    orphaned: bool  # no opener is alive: nobody holds it (the ADR's leak, countable until severance)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class OpenerView:
    """An invocation that opened the group, and whether it is still running."""

    invocation_id: str
    alive: bool


@dataclass(frozen=True)
class ChildView:
    """One child: its rank and outcome's kind once settled, and its invocation as Restate shows it."""

    position: int
    replay_key: str
    rank: int | None
    outcome: str | None  # "ok" | "err" | "cancelled", while its outcome is stored
    invocation_id: str | None
    status: str | None  # the invocation's status in sys_invocation


@dataclass(frozen=True)
class GroupView(OpenGroup):
    """`groups show`: the group, who opened it and when, and every child."""

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


def _alive(admin: Admin, invocation_ids: list[str]) -> set[str]:
    """Which of ``invocation_ids`` have not ended (a purged invocation has ended long ago)."""
    rows = _rows_in(admin, "SELECT id, status FROM sys_invocation WHERE id IN {values}", invocation_ids)
    return {row["id"] for row in rows if row.get("status") != _ENDED}


def _metas(admin: Admin, where: str = "") -> list[tuple[str, GroupMeta]]:
    rows = sql(
        admin,
        "SELECT service_key, value_utf8 FROM state "
        f"WHERE service_name = {quote(named(GROUP))} AND key = 'meta'{where}",
    )
    metas = [(row["service_key"], msgspec.json.decode(row["value_utf8"], type=GroupMeta)) for row in rows]
    return sorted(metas, key=lambda found: found[0])


def _open_group(key: str, meta: GroupMeta, alive: set[str]) -> dict[str, Any]:
    return {
        "group_key": key,
        "child_count": meta.child_count,
        "settled": meta.counter,
        "wake": meta.wake.value,
        "disposition": meta.disposition.value,
        "mode": meta.mode.value,
        "orphaned": not any(o.caller in alive for o in meta.openers),
    }


def list_open_groups(admin: Admin, *, orphaned: bool = False) -> list[OpenGroup]:
    """Every group the group object holds state for (opened and not yet closed); with ``orphaned``,
    only those none of whose openers is alive."""
    metas = _metas(admin)
    alive = _alive(admin, sorted({o.caller for _, meta in metas for o in meta.openers}))
    groups = [OpenGroup(**_open_group(key, meta, alive)) for key, meta in metas]
    return [g for g in groups if g.orphaned] if orphaned else groups


_KIND = re.compile(r'"type":"(\w+)"')


def show_group(admin: Admin, group_key: str) -> GroupView | None:
    """One open group, opener by opener and child by child; None if it is not open."""
    found = _metas(admin, f" AND service_key = {quote(group_key)}")
    fences = sql(
        admin,
        "SELECT value_utf8 FROM state WHERE service_name = "
        f"{quote(named(GROUP))} AND service_key = {quote(group_key)} AND key = 'fence'",
    )
    if not found or not fences:
        return None  # not open (or closed between the two reads)
    [(_, meta)] = found
    fence = msgspec.json.decode(fences[0]["value_utf8"], type=GroupShape)
    ranks = {position: rank for rank, position in enumerate(meta.positions(), start=1)}
    alive = _alive(admin, [o.caller for o in meta.openers])
    kinds = _outcome_kinds(admin, group_key, meta, fence, ranks)
    runs = _rows_in(
        admin,
        "SELECT id, status, target_service_key, created_at FROM sys_invocation WHERE "
        f"target_service_name = {quote(named(CHILD))} AND target_handler_name IN ('run', 'execute') "
        "AND target_service_key IN {values}",
        list(fence.replay_keys),
    )
    # The latest run of a replay key wins (a namesake group may have run it before).
    invocations = {
        row["target_service_key"]: row for row in sorted(runs, key=lambda r: str(r.get("created_at")))
    }
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
            )
        )
    opened = meta.opened_at_ms / 1000
    return GroupView(
        **_open_group(group_key, meta, alive),
        opened_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(opened)) if opened else None,
        openers=[OpenerView(invocation_id=o.caller, alive=o.caller in alive) for o in meta.openers],
        children=children,
    )


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
