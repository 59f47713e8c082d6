"""The admin API's SQL, as inspection asks it: one quoted literal per value (the query API takes no
parameters), and the rows of the invocations a group is made of."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

import msgspec

from ..admin import AdminApi, AdminError
from ..contract import LashError, RuntimeErrorCode
from ..engine import is_invocation_id

__all__ = [
    "BACKING_OFF",
    "ENDED",
    "IN_SLICE",
    "PAUSED",
    "WAITING",
    "Admin",
    "InspectionError",
    "admin_api",
    "alive_of",
    "decoded",
    "in_list",
    "invocation_rows",
    "is_alive",
    "quote",
    "rows_in",
    "server_now_ms",
    "sql",
]

# The `sys_invocation` status of an invocation that has ended.
ENDED = "completed"
# Of one Restate paused, after its retries ran out (`on-max-attempts = "pause"`) or by an operator's
# `restate invocations pause`: it waits for an operator's resume or kill.
PAUSED = "paused"
# Of one that failed and waits for its next attempt, by its retry policy.
BACKING_OFF = "backing-off"
# `groups show`'s status of a bounded group's child that has not started: no invocation yet, its
# group's pump starts it as a slot frees (not one of Restate's statuses).
WAITING = "waiting"
# How many literals one IN (...) list carries; a wide group is looked up in slices.
IN_SLICE = 500


class InspectionError(LashError, RuntimeError):
    """The admin API could not be reached or refused the query, or what it answered cannot be read: the
    message says which (with as much of the server's own reason as it gave)."""

    code = RuntimeErrorCode.INSPECTION

    def __str__(self) -> str:
        return self.message


def quote(text: str) -> str:
    """A SQL string literal for ``text``: the admin query API takes no parameters, so quote exactly."""
    if "\x00" in text:  # a key given to a command, say: refused as the admin API would, in one line
        raise InspectionError(f"a NUL character cannot appear in a query literal: {text!r}")
    return "'" + text.replace("'", "''") + "'"


Admin = AdminApi | str  # an admin API, or just its address (no token)

T = TypeVar("T")


def decoded(value: str | bytes | None, kind: type[T], *, group_key: str, what: str) -> T:
    """``value``, the group ``group_key``'s ``what`` as its state keeps it, read as ``kind``: one this
    release cannot read fails the command with a line naming the group, not a traceback."""
    try:
        return msgspec.json.decode(value or b"", type=kind)
    except msgspec.DecodeError as exc:
        raise InspectionError(
            f"group {group_key!r}: its {what} cannot be read by this release of lash-restate ({exc}); "
            "a group a later release opened is inspected with that release's"
        ) from None


def admin_api(admin: Admin) -> AdminApi:
    return AdminApi(admin) if isinstance(admin, str) else admin


def sql(admin: Admin, query: str, *, timeout: float = 10) -> list[dict[str, Any]]:
    """Rows of ``query`` over the admin API's SQL (`POST /query`); a row leaves out each column
    that is null in it (Restate's JSON does), so read those with ``.get``."""
    api = admin_api(admin)
    try:
        response = api.post("/query", {"query": query}, timeout=timeout, accept_json=True)
    except AdminError as exc:
        raise InspectionError(str(exc)) from None
    if response.status_code != 200:
        raise InspectionError(
            # Whole enough for the server's own reason (a query's error lists the table's fields).
            f"the admin API at {api.shown} answered {response.status_code}: {response.text[:4000]}"
        )
    try:
        body = response.json()
    except ValueError as exc:
        raise InspectionError(f"{api.shown} is not a Restate admin API (no query rows: {exc})") from None
    rows = body.get("rows") if isinstance(body, dict) else None
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise InspectionError(f"{api.shown} is not a Restate admin API (no query rows in its answer)")
    return rows


def server_now_ms(admin: Admin) -> int:
    """The restate-server's time, in ms since the epoch: what a group's age and an orphan's reclaim
    are measured against, so that the clock of the machine the command runs on does not skew them
    (a group's times are its endpoint's, which shares the cluster's clock)."""
    rows = sql(admin, "SELECT CAST(now() AS BIGINT) AS ns")
    try:
        return int(rows[0]["ns"]) // 1_000_000
    except (IndexError, KeyError, TypeError, ValueError):
        raise InspectionError(f"{admin_api(admin).shown} gave no time of its own: {rows!r}") from None


def in_list(values: Iterable[str]) -> str:
    return "(" + ", ".join(quote(v) for v in values) + ")"


def rows_in(admin: Admin, query: str, values: list[str]) -> list[dict[str, Any]]:
    """``query`` (with one ``{values}`` placeholder for an IN list) over ``values``, in slices."""
    rows: list[dict[str, Any]] = []
    for start in range(0, len(values), IN_SLICE):
        rows += sql(admin, query.replace("{values}", in_list(values[start : start + IN_SLICE])))
    return rows


def invocation_rows(admin: Admin, invocation_ids: list[str]) -> dict[str, dict[str, Any]]:
    """What Restate still knows of ``invocation_ids``, by id (a purged invocation is absent, and so
    is a text that is no invocation id)."""
    rows = rows_in(
        admin,
        "SELECT id, status, completion_result, completion_failure FROM sys_invocation WHERE id IN {values}",
        [i for i in invocation_ids if is_invocation_id(i)],
    )
    return {row["id"]: row for row in rows}


def alive_of(known: dict[str, dict[str, Any]]) -> set[str]:
    """Which invocations have not ended (a purged one has ended long ago)."""
    return {id_ for id_ in known if is_alive(known, id_)}


def is_alive(known: dict[str, dict[str, Any]], invocation: str) -> bool:
    """Whether ``invocation`` has not ended, as ``known`` (`invocation_rows`) tells it."""
    return invocation in known and known[invocation].get("status") != ENDED
