"""The children Restate paused (after their retries ran out, or by an operator), or is retrying after
a failure, found on each child's path: the child's own invocation, or the callee of a call lash makes
itself (a call child's idempotency key names it), or a call either made; counted per group, with the
group's pumps and its own handlers, by one function for both statuses."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from ..contract import GroupShape, without_wire
from ..engine import (
    CHILD,
    FENCE,
    GROUP,
    GROUP_SHARED,
    PUMP,
    callee_replay_key,
    group_of_pump,
    incarnation_of_pump,
    named,
)
from ._sql import BACKING_OFF, PAUSED, Admin, decoded, quote, rows_in, sql
from ._views import PausedView, RetryingView

__all__ = [
    "callee_of",
    "created_before",
    "holds_up_group",
    "pause_failures",
    "paused_by_group",
    "paused_on",
    "paused_paths",
    "paused_rows",
    "retrying_by_group",
    "retrying_on",
    "shown",
]


def paused_rows(admin: Admin, where: str = "", *, status: str = PAUSED) -> list[dict[str, Any]]:
    """The invocations in ``status`` (paused, unless told another: ``BACKING_OFF``), ``where`` more."""
    return sql(
        admin,
        "SELECT id, target, target_service_name, target_service_key, target_handler_name, invoked_by_id, "
        "created_at, invoked_by_service_name, idempotency_key, retry_count, last_failure, "
        "last_failure_error_code, next_retry_at "
        "FROM sys_invocation "
        f"WHERE status = {quote(status)}{where}",
    )


def holds_up_group(row: dict[str, Any]) -> bool:
    """Whether ``row`` (of `paused_rows`) holds up its group: a paused handler of the group's own
    object that runs one at a time on its key (its reports, reads and close wait behind it)."""
    own = row.get("target_service_name") == named(GROUP)
    return own and row.get("target_handler_name") not in GROUP_SHARED


def callee_of(row: dict[str, Any]) -> str | None:
    """The replay key of the call child whose own invocation ``row`` is, if it is one: called by a
    pump of lash's (an application's own invocation may carry a key of the same shape)."""
    if row.get("invoked_by_service_name") != named(PUMP):
        return None
    return callee_replay_key(row.get("idempotency_key"))


def paused_paths(admin: Admin, paused: list[dict[str, Any]] | None = None) -> dict[str, list[object]]:
    """The paused invocations on each child's path, by replay key, as when each was created
    (`created_at`): the child's own (its `LashChild`, or the callee of a call lash makes itself), or a
    call it made; of ``paused``, the paused invocations read already (else read here). One query
    when none is paused (the usual case)."""
    paused = paused_rows(admin) if paused is None else paused
    keys = [(_child_of(row), row.get("created_at")) for row in paused]
    # An invocation the ingress started has no invoker: the admin API leaves the column out.
    callers = sorted(
        {str(row["invoked_by_id"]) for row in paused if _child_of(row) is None and row.get("invoked_by_id")}
    )
    if callers:
        # A paused call's caller: a child's `LashChild`, or a call child's callee (lash calls it
        # from the group's pump), whose own calls are on that child's path as well.
        rows = rows_in(
            admin,
            "SELECT id, target_service_name, target_service_key, invoked_by_service_name, idempotency_key "
            "FROM sys_invocation WHERE id IN {values}",
            callers,
        )
        made = {
            str(row["invoked_by_id"]): row.get("created_at") for row in paused if row.get("invoked_by_id")
        }
        keys += [(_child_of(row), made.get(str(row.get("id")))) for row in rows]
    paths: dict[str, list[object]] = {}
    for key, created_at in keys:
        if key is not None:
            paths.setdefault(key, []).append(created_at)
    return paths


FENCE_SCAN = 64  # paused replay keys looked for in one scan of the groups' fences


def _child_of(row: dict[str, Any]) -> str | None:
    """The replay key of the child whose own invocation ``row`` is: its `LashChild`, or the callee
    of a call lash makes itself; None for any other invocation."""
    return row["target_service_key"] if row.get("target_service_name") == named(CHILD) else callee_of(row)


def paused_by_group(
    admin: Admin, groups: dict[str, tuple[str, int]], rows: list[dict[str, Any]] | None = None
) -> dict[str, int]:
    """By group key: its children with an invocation paused on their path (each once, and none a
    namesake's: created before the group's open), and its paused pumps of the incarnation open now
    (``groups``: each group's incarnation and when it was opened, by group key; an operator's pause
    of a pump stalls what it reports; a closed namesake's paused pump is not this group's); of
    ``rows``, the paused invocations read already (else read here)."""
    return _by_group(admin, groups, paused_rows(admin) if rows is None else rows)


def retrying_by_group(
    admin: Admin, groups: dict[str, tuple[str, int]], rows: list[dict[str, Any]] | None = None
) -> dict[str, int]:
    """By group key, as `paused_by_group` counts them: what Restate is retrying after a failure
    (backing off between attempts) rather than what it paused (``rows``: those read already)."""
    return _by_group(admin, groups, paused_rows(admin, status=BACKING_OFF) if rows is None else rows)


def _by_group(
    admin: Admin, groups: dict[str, tuple[str, int]], paused: list[dict[str, Any]]
) -> dict[str, int]:
    # One read (``paused``) for the pumps, the groups' own handlers and the children's paths.
    by_group: dict[str, int] = {}
    for row in paused:
        if holds_up_group(row) and (key := str(row["target_service_key"])) in groups:
            by_group[key] = by_group.get(key, 0) + 1
    for row in (r for r in paused if r.get("target_service_name") == named(PUMP)):
        key = str(row["target_service_key"])
        group = group_of_pump(key)
        if group in groups and incarnation_of_pump(key) == groups[group][0]:
            by_group[group] = by_group.get(group, 0) + 1
    paths = paused_paths(admin, paused)
    if not paths:
        return by_group
    # The groups whose fences name the paused replay keys, a slice of keys per scan of the fences
    # (one scan per key made a listing during an outage of many paused children a crawl).
    keys = sorted(paths)
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
            group = row["service_key"]
            opened_at_ms = groups.get(group, ("", 0))[1]
            recorded = set(decoded(row["value_utf8"], GroupShape, group_key=group, what="shape").replay_keys)
            for key in part:
                # A child counts once, as `groups show` marks it, however many of its runs are paused,
                # and only for what ran since its group's open (a reused key's earlier runs do not).
                if key in recorded and any(not created_before(c, opened_at_ms) for c in paths[key]):
                    by_group[group] = by_group.get(group, 0) + 1
    return by_group


# How much earlier than its group's open (the endpoint's clock) a child's invocation may have been
# created (the server's clock) and still be taken for this incarnation's: the two clocks may differ.
CLOCKS_DIFFER_MS = 5_000


def created_before(created_at: object, opened_at_ms: int) -> bool:
    """Whether an invocation created at ``created_at`` (the admin API's ISO time) came before a group
    opened at ``opened_at_ms``: a namesake's. A group recorded before the time was kept (0), and a
    time that cannot be read, are taken as not before."""
    if not opened_at_ms or not isinstance(created_at, str):
        return False
    try:
        created = datetime.fromisoformat(created_at.replace("Z", "+00:00"))
    except ValueError:
        return False
    return created.timestamp() * 1000 < opened_at_ms - CLOCKS_DIFFER_MS


def paused_on(admin: Admin, child_ids: list[str], rows: list[dict[str, Any]]) -> dict[str, PausedView]:
    """By child invocation: the invocation Restate paused on its path (its own, or a call it made),
    of ``rows`` (`paused_rows`)."""
    on_path = _on_path(child_ids, rows)
    failures = pause_failures(admin, [row["id"] for row in on_path.values()])
    paused: dict[str, PausedView] = {}
    for child, row in on_path.items():
        message, code = failures.get(row["id"], (None, None))
        paused[child] = PausedView(
            invocation_id=row["id"],
            target=str(row.get("target")),
            retry_count=_count(row),
            last_failure=shown(row.get("last_failure") or message),
            last_failure_error_code=row.get("last_failure_error_code") or code,
        )
    return paused


def retrying_on(child_ids: list[str], retrying: list[dict[str, Any]]) -> dict[str, RetryingView]:
    """By child invocation: the invocation Restate is retrying on its path after a failure (backing
    off between attempts: its own, or a call it made), of ``retrying`` (`paused_rows` of that
    status), and what failed last."""
    return {
        child: RetryingView(
            invocation_id=row["id"],
            target=str(row.get("target")),
            retry_count=_count(row),
            last_failure=shown(row.get("last_failure")),
            last_failure_error_code=row.get("last_failure_error_code"),
            next_retry_at=row.get("next_retry_at"),
        )
        for child, row in _on_path(child_ids, retrying).items()
    }


def _on_path(child_ids: list[str], rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """By child invocation: the row, of ``rows``, of an invocation on its path, the child's own
    before a call it made."""
    wanted = set(child_ids)
    found: dict[str, dict[str, Any]] = {}
    for row in rows:
        child = row["id"] if row["id"] in wanted else row.get("invoked_by_id")
        if child not in wanted or (child in found and row["id"] != child):
            continue  # not on a child's path; or the child's own invocation wins over a call's
        found[child] = row
    return found


def _count(row: dict[str, Any]) -> int | None:
    retries = row.get("retry_count")
    return int(retries) if retries is not None else None


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
