"""What stands between this release and a rollback to the baseline, read through the admin API, and
the one lever that clears part of it: killing what is pending for handlers the baseline does not
serve (docs/guides/upgrade.md, Rolling back).

Registered again as the newest deployment, the baseline answers 404 to a handler it does not serve
while the invocation holds its object's key, so a `LashGroup/guard` left pending stops its group;
it cannot resume a group this release opened (its pumps report to a handler it lacks); its `emit`
does not read a waiter this release kept as an entry of its own; and it reads a child's outcome
strictly, so one carrying a rejection's metadata fails its reader.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import quote as url_quote

from ..admin import AdminError
from ..engine import (
    BASELINE_HANDLERS,
    CHILD,
    PUMP,
    SIGNAL,
    awakeable_invocation,
    named,
    opened_since_baseline,
)
from ._groups import read_groups
from ._sql import ENDED, Admin, InspectionError, admin_api, alive_of, in_list, invocation_rows, quote, sql

__all__ = ["RollbackBlocker", "kill_pending", "rollback_blockers"]

# What a waiting event child keeps, one entry each, since one entry per waiter (decision 112).
_WAITER = "waiter:"
# A stored outcome that is a rejection carrying metadata (decision 118). In a message or a value the
# quotes are escaped, so only the outcome's own field matches.
_WITH_METADATA = """starts_with(value_utf8, '{"type":"err"') AND strpos(value_utf8, '"metadata":{') > 0"""


@dataclass(frozen=True)
class RollbackBlocker:
    """One thing that a rollback to the baseline would break: ``kind`` is ``group`` (a group this
    release opened, still open), ``waiter`` (an event child this release subscribed, still waiting),
    ``pending`` (an invocation of a handler the baseline does not serve, not ended) or ``metadata``
    (a stored rejection that carries metadata); ``where`` names it, ``what`` says what it is."""

    kind: str
    where: str
    what: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _pending_query() -> str:
    unserved = " OR ".join(
        f"(target_service_name = {quote(named(role))} AND target_handler_name NOT IN {in_list(handlers)})"
        for role, handlers in BASELINE_HANDLERS.items()
    )
    return f"SELECT id, target, status FROM sys_invocation WHERE status != {quote(ENDED)} AND ({unserved})"


def rollback_blockers(admin: Admin) -> list[RollbackBlocker]:
    """Everything that stands in the way of registering the baseline again, in the order to clear it."""
    blockers = [
        RollbackBlocker("group", g.key, f"opened by this release (incarnation {g.meta.incarnation})")
        for g in read_groups(admin, order=False)
        if opened_since_baseline(g.meta.incarnation)
    ]
    waiters = sql(
        admin,
        f"SELECT service_key, key FROM state WHERE service_name = {quote(named(SIGNAL))} "
        f"AND starts_with(key, {quote(_WAITER)})",
    )
    # A waiter whose child has ended (killed, say: its subscription is left) has nobody waiting.
    children = {row["key"]: awakeable_invocation(row["key"].removeprefix(_WAITER)) for row in waiters}
    alive = alive_of(invocation_rows(admin, [i for i in children.values() if i is not None]))
    blockers += [
        RollbackBlocker("waiter", row["service_key"], "a child waits on it")
        for row in waiters
        if children[row["key"]] is None or children[row["key"]] in alive
    ]
    blockers += [
        RollbackBlocker("pending", row["id"], f"{row['target']} ({row['status']})")
        for row in sql(admin, _pending_query())
    ]
    stored = sql(
        admin,
        f"SELECT service_name, service_key, key FROM state WHERE service_name IN "
        f"{in_list([named(CHILD), named(PUMP)])} AND {_WITH_METADATA}",
    )
    blockers += [
        RollbackBlocker("metadata", f"{row['service_name']}/{row['service_key']}", f"its {row['key']}")
        for row in stored
    ]
    return blockers


def kill_pending(admin: Admin, *, looks: int = 20, pause_s: float = 0.5) -> list[str]:
    """Kill every invocation pending for a handler the baseline does not serve, and what appears
    meanwhile (a guard that ran schedules its next), until none is listed, for up to ``looks``
    looks ``pause_s`` apart (Restate ends a killed invocation a moment after it is told); the ids
    killed, each once."""
    api = admin_api(admin)
    killed: list[str] = []
    for look in range(looks):
        pending = [row["id"] for row in sql(admin, _pending_query())]
        if not pending:
            break
        for invocation in (i for i in pending if i not in killed):
            try:
                response = api.patch(f"/invocations/{url_quote(invocation, safe='')}/kill")
            except AdminError as exc:
                raise InspectionError(str(exc)) from None
            # One that ended meanwhile is gone anyway (Restate answers it with an error).
            if response.status_code < 300:
                killed.append(invocation)
        if look + 1 < looks:
            time.sleep(pause_s)  # the admin API offers nothing to await: look again a moment later
    return killed
