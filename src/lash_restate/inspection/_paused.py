"""The children Restate paused after their retries ran out, found on each child's path: the child's
own invocation, or the callee of a call lash makes itself (a call child's idempotency key names it)."""

from __future__ import annotations

from typing import Any

import msgspec

from ..contract import GroupShape, without_wire
from ..engine import (
    CHILD,
    FENCE,
    GROUP,
    PUMP,
    callee_replay_key,
    group_of_pump,
    named,
)
from ._sql import IN_SLICE, PAUSED, Admin, in_list, quote, rows_in, sql
from ._views import PausedView

__all__ = [
    "callee_key",
    "callee_of",
    "pause_failures",
    "paused_by_group",
    "paused_on",
    "paused_replay_keys",
    "paused_rows",
    "shown",
]


def paused_rows(admin: Admin, where: str = "") -> list[dict[str, Any]]:
    return sql(
        admin,
        "SELECT id, target, target_service_name, target_service_key, invoked_by_id, "
        "invoked_by_service_name, idempotency_key, retry_count, last_failure, last_failure_error_code "
        "FROM sys_invocation "
        f"WHERE status = {quote(PAUSED)}{where}",
    )


def callee_key(idempotency_key: str | None) -> str | None:
    """The replay key a call child's callee names in its idempotency key, if it names one: a call
    child lash calls itself is the callee's invocation, called by its group's pump under the key
    ``{replay key}@{group incarnation}`` (decision 61)."""
    return callee_replay_key(idempotency_key)


def callee_of(row: dict[str, Any]) -> str | None:
    """The replay key of the call child whose own invocation ``row`` is, if it is one: called by a
    pump of lash's (an application's own invocation may carry a key of the same shape)."""
    if row.get("invoked_by_service_name") != named(PUMP):
        return None
    return callee_key(row.get("idempotency_key"))


def paused_replay_keys(admin: Admin, paused: list[dict[str, Any]] | None = None) -> dict[str, int]:
    """How many paused invocations lie on each child's path, by replay key: the child's own (its
    `LashChild`, or the callee of a call lash makes itself), or a call it made; of ``paused``, the
    paused invocations read already (else read here). One query when none is paused (the usual case)."""
    paused = paused_rows(admin) if paused is None else paused
    keys = [_child_of(row) for row in paused]
    # An invocation the ingress started has no invoker: the admin API leaves the column out.
    callers = sorted(
        {str(row["invoked_by_id"]) for row in paused if _child_of(row) is None and row.get("invoked_by_id")}
    )
    if callers:
        # A paused call's caller: a child's `LashChild`, or a call child's callee (lash calls it
        # from the group's pump), whose own calls are on that child's path as well.
        rows = rows_in(
            admin,
            "SELECT target_service_name, target_service_key, invoked_by_service_name, idempotency_key "
            "FROM sys_invocation WHERE id IN {values}",
            callers,
        )
        keys += [_child_of(row) for row in rows]
    counts: dict[str, int] = {}
    for key in keys:
        if key is not None:
            counts[key] = counts.get(key, 0) + 1
    return counts


FENCE_SCAN = 64  # paused replay keys looked for in one scan of the groups' fences


def _child_of(row: dict[str, Any]) -> str | None:
    """The replay key of the child whose own invocation ``row`` is: its `LashChild`, or the callee
    of a call lash makes itself; None for any other invocation."""
    return row["target_service_key"] if row.get("target_service_name") == named(CHILD) else callee_of(row)


def paused_by_group(admin: Admin, incarnations: dict[str, str]) -> dict[str, int]:
    """By group key: its children with an invocation paused on their path (each once), and its
    paused pumps of the incarnation open now (``incarnations``, by group key: an operator's pause of
    one stalls what it reports; a closed namesake's paused pump is not this group's)."""
    paused = paused_rows(admin)  # one read for the pumps and the children's paths
    by_group: dict[str, int] = {}
    for row in (r for r in paused if r.get("target_service_name") == named(PUMP)):
        key = str(row["target_service_key"])
        group = group_of_pump(key)
        if incarnation_of_pump(key) == incarnations.get(group):
            by_group[group] = by_group.get(group, 0) + 1
    counts = paused_replay_keys(admin, paused)
    if not counts:
        return by_group
    # The groups whose fences name the paused replay keys, a slice of keys per scan of the fences
    # (one scan per key made a listing during an outage of many paused children a crawl).
    keys = sorted(counts)
    for start in range(0, len(keys), FENCE_SCAN):
        part = keys[start : start + FENCE_SCAN]
        named_in = " OR ".join(
            f"strpos(value_utf8, {quote(msgspec.json.encode(key).decode())}) > 0" for key in part
        )
        rows = sql(
            admin,
            f"SELECT service_key, value_utf8 FROM state WHERE service_name = {quote(named(GROUP))} "
            f"AND key = {quote(FENCE)} AND ({named_in})",
        )
        for row in rows:
            recorded = set(msgspec.json.decode(row["value_utf8"], type=GroupShape).replay_keys)
            for key in part:
                if key in recorded:  # a child counts once, as `groups show` marks it, however many paused
                    by_group[row["service_key"]] = by_group.get(row["service_key"], 0) + 1
    return by_group


def incarnation_of_pump(key: str) -> str:
    """The group incarnation in a pump's key: ``{incarnation}[.{slice}]:{group key}`` (an incarnation
    holds no dot or colon)."""
    return key.partition(":")[0].partition(".")[0]


def paused_on(admin: Admin, child_ids: list[str]) -> dict[str, PausedView]:
    """By child invocation: the invocation Restate paused on its path (its own, or a call it made)."""
    if not child_ids:
        return {}
    rows: list[dict[str, Any]] = []
    for start in range(0, len(child_ids), IN_SLICE):
        values = in_list(child_ids[start : start + IN_SLICE])
        rows += paused_rows(admin, f" AND (id IN {values} OR invoked_by_id IN {values})")
    wanted = set(child_ids)
    failures = pause_failures(admin, [row["id"] for row in rows])
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
            last_failure=shown(row.get("last_failure") or message),
            last_failure_error_code=row.get("last_failure_error_code") or code,
        )
    return paused


_PAUSED_EVENT = msgspec.json.Decoder(dict[str, Any])


def pause_failures(admin: Admin, invocation_ids: list[str]) -> dict[str, tuple[str | None, str | None]]:
    """The last failure of each paused invocation, from the journal event Restate wrote when it paused
    (`sys_invocation` keeps its ``last_failure`` columns only while it is backing off)."""
    if not invocation_ids:
        return {}
    rows = rows_in(
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


def shown(failure: str | None) -> str | None:
    """A failure as an operator reads it: its text, not lash's wire form."""
    return None if failure is None else without_wire(failure)
