"""What pumps hold that no group will read, listed, and released through the admin API: the parts an
opener killed between staging and its open left behind (decision 71), and the outcomes a pump kept
for a group that is gone without releasing them (a pump killed as the group's close overtook the
group's report of the kill, or a group whose record an operator deleted, `restate state clear`,
after its pumps had completed)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import quote as url_quote

import msgspec

from ..admin import AdminError
from ..engine import (
    GROUP,
    PUMP,
    RAN,
    RECORD,
    STAGED,
    GroupMeta,
    group_of_pump,
    incarnation_of_pump,
    named,
)
from ._sql import Admin, InspectionError, admin_api, alive_of, invocation_rows, quote, rows_in, sql

__all__ = ["StagedPart", "left_staged", "release_staged"]


@dataclass(frozen=True)
class StagedPart:
    """What a pump holds that no group will read: children an open in parts staged with it whose
    opener ended before it sent the open (decision 71; ``opener`` is that invocation while Restate
    remembers it), or (``holds`` ``"outcomes"``) outcomes it kept for a group that is gone."""

    pump_key: str
    group_key: str
    opener: str | None
    holds: str = "staged"  # "staged" children, or "outcomes" of a group that is gone

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def left_staged(admin: Admin) -> list[StagedPart]:
    """What pumps hold that no group will read, and nothing will release.

    A part is left when no group is recorded under its stage (a first open's stage is its group's
    incarnation, whose pumps run the parts they keep), nothing is queued on its pump (a release, a
    re-dispatch or the run itself) or on its group's `open_parts`, and the invocation that staged it
    has ended (or Restate no longer remembers it, which it does for a day by default). A pump's
    outcomes are left when no group is recorded under its incarnation and nothing runs or is queued
    on the pump: the close of a group releases them through the pump's run, or its `forget`, so they
    are left only by a pump killed when its group's close overtook the group's report of the kill,
    or by a group whose record was deleted outside lash once its pumps had completed.
    """
    pump = quote(named(PUMP))
    rows = sql(admin, f"SELECT service_key FROM state WHERE service_name = {pump} AND key = {quote(STAGED)}")
    staged = {row["service_key"] for row in rows}
    # Every pump holding anything but staged children, or its note that it ran (decision 125: a pump
    # killed before it stored an outcome holds nothing); its key only, never a value.
    holding = sql(
        admin,
        f"SELECT DISTINCT service_key FROM state WHERE service_name = {pump} "
        f"AND key != {quote(RAN)} AND key != {quote(STAGED)}",
    )
    keeping = {row["service_key"] for row in holding} - staged
    keys = sorted(staged | keeping)
    if not keys:
        return []
    groups = sorted({group_of_pump(key) for key in keys})
    metas = rows_in(
        admin,
        f"SELECT service_key, value_utf8 FROM state WHERE service_name = {quote(named(GROUP))} "
        f"AND key = {quote(RECORD)} AND service_key IN {{values}}",
        groups,
    )
    recorded = {row["service_key"]: msgspec.json.decode(row["value_utf8"], type=GroupMeta) for row in metas}
    # What a group recorded under the pump's incarnation holds is that group's own: of every group in
    # flight, so looked past before anything else is asked of Restate.
    keys = [key for key in keys if not _recorded_own(recorded, key)]
    if not keys:
        return []
    groups = sorted({group_of_pump(key) for key in keys})
    queued = rows_in(
        admin,
        "SELECT target_service_name AS service, target_service_key AS key, target_handler_name AS handler "
        "FROM sys_invocation WHERE status != 'completed' AND target_service_key IN {values}",
        keys + groups,
    )
    busy = {row["key"] for row in queued if row["service"] == named(PUMP)}
    busy |= {
        row["key"] for row in queued if row["service"] == named(GROUP) and row["handler"] == "open_parts"
    }
    stagers = rows_in(
        admin,
        "SELECT target_service_key AS key, invoked_by_id AS opener, created_at FROM sys_invocation "
        f"WHERE target_service_name = {quote(named(PUMP))} AND target_handler_name = 'stage' "
        "AND target_service_key IN {values} ORDER BY created_at",
        [key for key in keys if key in staged],  # outcomes have no stager to ask of
    )
    openers = {row["key"]: row["opener"] for row in stagers if row.get("opener")}  # the latest
    alive = alive_of(invocation_rows(admin, sorted(set(openers.values()))))
    left = []
    for key in keys:
        group = group_of_pump(key)
        if key in busy:
            continue
        if key in keeping:
            left.append(StagedPart(pump_key=key, group_key=group, opener=None, holds="outcomes"))
            continue
        if group in busy or openers.get(key) in alive:
            continue  # an open in parts about to take it, or an opener that may still send it
        left.append(StagedPart(pump_key=key, group_key=group, opener=openers.get(key)))
    return left


def _recorded_own(recorded: dict[str, GroupMeta], pump_key: str) -> bool:
    """Whether ``pump_key``'s group is recorded under the incarnation the pump is keyed by."""
    meta = recorded.get(group_of_pump(pump_key))
    return meta is not None and meta.incarnation == incarnation_of_pump(pump_key)


def release_staged(admin: Admin, part: StagedPart) -> None:
    """Release what ``part``'s pump holds through the admin API: all of its state (staged children,
    or the outcomes and notes it kept for a group that is gone; nobody reads either)."""
    api = admin_api(admin)
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
