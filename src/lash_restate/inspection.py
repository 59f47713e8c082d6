"""Inspection of open groups through Restate's own surface: the admin API's SQL over the `state` table.

ADR: there is no TTL on group state, so orphaned groups must be countable;
the host exposes open group keys through its existing inspection surface.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import httpx
import msgspec

from .engine import GROUP, GroupMeta

__all__ = ["InspectionError", "OpenGroup", "list_open_groups", "quote", "show_group", "sql"]


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

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def quote(text: str) -> str:
    """A SQL string literal for ``text``: the admin query API takes no parameters, so quote exactly."""
    if "\x00" in text:
        raise ValueError("a NUL character cannot appear in a query literal")
    return "'" + text.replace("'", "''") + "'"


def sql(admin_url: str, query: str, *, timeout: float = 10) -> list[dict[str, Any]]:
    try:
        response = httpx.post(
            f"{admin_url.rstrip('/')}/query",
            json={"query": query},
            headers={"accept": "application/json"},
            timeout=timeout,
        )
    except httpx.HTTPError as exc:
        raise InspectionError(f"cannot reach the Restate admin API at {admin_url} ({exc})") from None
    if response.status_code != 200:
        raise InspectionError(
            f"the admin API at {admin_url} answered {response.status_code}: {response.text[:200]}"
        )
    try:
        rows: list[dict[str, Any]] = response.json()["rows"]
    except (ValueError, KeyError) as exc:
        raise InspectionError(f"{admin_url} is not a Restate admin API (no query rows: {exc})") from None
    return rows


def _groups(admin_url: str, where: str = "") -> list[OpenGroup]:
    rows = sql(
        admin_url,
        "SELECT service_key, value_utf8 FROM state "
        f"WHERE service_name = {quote(GROUP)} AND key = 'meta'{where}",
    )
    groups = []
    for row in rows:
        meta = msgspec.json.decode(row["value_utf8"], type=GroupMeta)
        groups.append(
            OpenGroup(
                group_key=row["service_key"],
                child_count=meta.child_count,
                settled=meta.counter,
                wake=meta.wake.value,
                disposition=meta.disposition.value,
                mode=meta.mode.value,
            )
        )
    return sorted(groups, key=lambda g: g.group_key)


def list_open_groups(admin_url: str) -> list[OpenGroup]:
    """Every group the group object holds state for: opened and not yet closed."""
    return _groups(admin_url)


def show_group(admin_url: str, group_key: str) -> OpenGroup | None:
    found = _groups(admin_url, f" AND service_key = {quote(group_key)}")
    return found[0] if found else None
