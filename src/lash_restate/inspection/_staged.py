"""What pumps and children hold that no group will read, listed, and released through the admin API:
the parts an opener killed between staging and its open left behind (decision 71), the outcomes a
pump kept for a group that is gone without releasing them (a pump killed as the group's close
overtook the group's report of the kill, or a group whose record an operator deleted, `restate
state clear`, after its pumps had completed), and the outcome a narrow group's child kept for a
group whose record was deleted (decision 130)."""

from __future__ import annotations

import base64
import hashlib
import time
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import quote as url_quote

import msgspec

from ..admin import AdminError
from ..engine import (
    CHILD,
    GROUP,
    PUMP,
    RAN,
    RECORD,
    STAGED,
    GroupMeta,
    child_store,
    group_of_pump,
    incarnation_of_pump,
    named,
)
from ._sql import (
    ENDED,
    Admin,
    InspectionError,
    admin_api,
    alive_of,
    decoded,
    in_list,
    invocation_rows,
    quote,
    rows_in,
    sql,
)

__all__ = ["LeftOutcome", "StagedPart", "left_outcomes", "left_staged", "release_outcome", "release_staged"]


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
    recorded = {
        (key := row["service_key"]): decoded(row["value_utf8"], GroupMeta, group_key=key, what="record")
        for row in metas
    }
    # What a group recorded under the pump's incarnation holds is that group's own: of every group in
    # flight, so looked past before anything else is asked of Restate.
    keys = [key for key in keys if not _recorded_own(recorded, key)]
    if not keys:
        return []
    groups = sorted({group_of_pump(key) for key in keys})
    queued = rows_in(
        admin,
        "SELECT target_service_name AS service, target_service_key AS key, target_handler_name AS handler "
        f"FROM sys_invocation WHERE status != {quote(ENDED)} AND target_service_key IN {{values}}",
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
    _replace_state(admin, named(PUMP), part.pump_key, {})


def _replace_state(
    admin: Admin, service: str, key: str, state: dict[str, list[int]], *, version: str | None = None
) -> None:
    """Replace the state of ``service``'s object ``key`` through the admin API (with ``version``,
    only if the state is still that version when Restate applies it)."""
    api = admin_api(admin)
    body: dict[str, Any] = {"object_key": key, "new_state": state}
    if version is not None:
        body["version"] = version
    try:
        response = api.post(f"/services/{url_quote(service, safe='')}/state", body)
    except AdminError as exc:
        raise InspectionError(str(exc)) from None
    if response.status_code not in (200, 202):
        raise InspectionError(
            f"the admin API at {api.url} answered {response.status_code} to the release: "
            + response.text[:200]
        )


@dataclass(frozen=True)
class LeftOutcome:
    """The outcomes a direct child (`{prefix}Child/{child_key}`) keeps for groups no record names
    (``incarnations``, one store each): a narrow group's child whose group's record was deleted
    outside lash after it settled; nothing else would release them."""

    child_key: str
    incarnations: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "child_key": self.child_key,
            "incarnations": list(self.incarnations),
            "holds": _HOLDS,
        }


def left_outcomes(admin: Admin) -> list[LeftOutcome]:
    """The outcome stores of direct children whose group incarnation no group records, of children
    with nothing running or queued (a run about to settle, or the close's release on its way)."""
    child = quote(named(CHILD))
    rows = sql(
        admin,
        "SELECT service_key, key FROM state "
        f"WHERE service_name = {child} AND starts_with(key, {quote(_STORE)})",
    )
    if not rows:
        return []
    metas = sql(
        admin,
        f"SELECT value_utf8 FROM state WHERE service_name = {quote(named(GROUP))} AND key = {quote(RECORD)}",
    )
    # Every group's, whatever its key: a child's key is its replay key, which need not name its group.
    recorded = {_incarnation(row.get("value_utf8")) for row in metas}
    gone: dict[str, list[str]] = {}
    for row in rows:
        incarnation = row["key"].removeprefix(_STORE)
        if incarnation not in recorded:
            gone.setdefault(row["service_key"], []).append(incarnation)
    if not gone:
        return []
    queued = rows_in(
        admin,
        f"SELECT target_service_key AS key FROM sys_invocation WHERE target_service_name = {child} "
        f"AND status != {quote(ENDED)} AND target_service_key IN {{values}}",
        sorted(gone),
    )
    busy = {row["key"] for row in queued}
    return [LeftOutcome(key, tuple(sorted(gone[key]))) for key in sorted(gone) if key not in busy]


def release_outcome(admin: Admin, left: LeftOutcome) -> None:
    """Release ``left``'s stores through the admin API, keeping any other the child holds. The key's
    state is replaced only if it is still as read here (its version): a child that stored, or a
    close that released, in between leaves it as it is, to be listed again."""
    rows = sql(
        admin,
        f"SELECT key, value_utf8 FROM state WHERE service_name = {quote(named(CHILD))} "
        f"AND service_key = {quote(left.child_key)}",
    )
    if any(row.get("value_utf8") is None for row in rows):
        raise InspectionError(f"{left.child_key} holds a value that is not text: not released")
    state = {row["key"].encode(): row["value_utf8"].encode() for row in rows}
    gone = {(_STORE + incarnation).encode() for incarnation in left.incarnations}
    kept = {key.decode(): list(value) for key, value in state.items() if key not in gone}
    _replace_state(admin, named(CHILD), left.child_key, kept, version=state_version(state))
    # Restate takes the replacement at once (202) and applies it once the child's key is free,
    # dropping it, silently, if the state changed since it was read: look for a few seconds.
    stores = (
        f"SELECT key FROM state WHERE service_name = {quote(named(CHILD))} "
        f"AND service_key = {quote(left.child_key)} AND key IN {in_list(k.decode() for k in sorted(gone))}"
    )
    deadline = time.monotonic() + RELEASE_SEEN_WITHIN_S
    while sql(admin, stores):
        if time.monotonic() > deadline:
            raise InspectionError(
                f"{left.child_key}'s state changed since it was read, or Restate has not applied the "
                "release yet: list again, and release what is still listed"
            )
        time.sleep(0.2)


def state_version(state: dict[bytes, bytes]) -> str:
    """The version Restate gives a virtual object's state (what its admin API compares before it
    replaces it): the SHA-256 of its entries in key order, each numbered, URL-safe base64."""
    digest = hashlib.sha256()
    for number, (key, value) in enumerate(sorted(state.items())):
        digest.update(number.to_bytes(8, "big") + b"\x01" + key + b"\x02" + value + b"\x03")
    return base64.urlsafe_b64encode(digest.digest()).decode().rstrip("=")


class _Incarnation(msgspec.Struct):
    incarnation: str = ""


def _incarnation(record: str | None) -> str:
    """A group record's incarnation. A record this release cannot read could be any group's, whose
    children's stores are its own: nothing is listed then, and the listing says why."""
    try:
        return msgspec.json.decode(record or "", type=_Incarnation).incarnation
    except msgspec.DecodeError:
        raise InspectionError(
            "a group's record cannot be read here (of a later release?): no child's store is taken "
            "for left while any group's incarnation is unknown"
        ) from None


# How long a release of a child's stores is looked for before it is reported as not applied.
RELEASE_SEEN_WITHIN_S = 5.0


_STORE = child_store("")  # a direct child's outcome store: this prefix, then the group's incarnation
_HOLDS = "child-outcome"  # what `groups staged --json` says such a row holds
