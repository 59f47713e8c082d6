"""Callers waiting on wakes that their group's record no longer holds, and the lever that ends them
(decision 128).

A caller waits for a rank on a wake (an awakeable) it registered with its group: its open, or an
await's `LashGroup/wait`, carries the wakes, and the group's record keeps them until a rank wakes
them or a close ends them. `restate state clear LashGroup/KEY` deletes the record, the wakes with
it; the group's guard (`LashGroup/guard`, a look at each registration later) then ends them with
`group_not_open`, unless Restate killed that guard too, and then nothing answers the caller. Its
journal still holds what it registered, the incarnation each registration was answered with and
which wakes have fired: those no record holds any more are listed here, and on the operator's word
the guard's look is sent again (by the group object's public `operator_resend`, as a killed open
is), to end them as it would have.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import msgspec

from ..engine import (
    GROUP,
    GROUP_GUARD,
    GROUP_OPEN,
    GROUP_OPEN_PARTS,
    GROUP_OPERATOR_RESEND,
    GROUP_WAIT,
    ROLES,
    WAITER_CHECK,
    GroupMeta,
    Guard,
    OpenReply,
    OperatorResend,
    WaitReply,
    awakeable_signal,
    named,
)
from ._groups import read_groups
from ._journal import Answers, SentTo, answer_values, answers_of, sent_in
from ._operator import ingress_url, operator_call
from ._sql import ENDED, IN_SLICE, Admin, admin_api, alive_of, in_list, invocation_rows, quote, rows_in, sql

__all__ = ["StrandedWakes", "look_again", "stranded_wakes"]

_REGISTERS = (GROUP_OPEN.handler, GROUP_OPEN_PARTS.handler, GROUP_WAIT.handler)

# Why no group will wake them, by whether a group is recorded under the key; a cleared group's guard
# still pending may end them at its next look (which wakes it carries is not shown), one killed never.
GONE = "its group's record is gone (its state was cleared)"
PENDING = (
    "; guards of the key are still pending (which wakes each carries is not shown): one carrying its "
    "wakes ends it at its next look (`--resend` ends it now)"
)
NO_GUARD = ", and no guard of the key is pending"
REPLACED = (
    "its group's record is gone (its state was cleared), and another group was opened under the key since"
)


@dataclass(frozen=True)
class StrandedWakes:
    """``caller`` waits on ``wakes`` it registered with the group ``group_key`` (``incarnation``),
    which no record holds any more (``ended`` says why); ``handler`` and ``sent`` name the last of
    its messages that registered them (`open`, `open_parts` or `wait`, and its invocation id).
    ``guards``: under a key with no record, the guards still pending there (the cleared group's,
    each carrying the wakes of one registration, this caller's or another's)."""

    caller: str
    group_key: str
    handler: str
    sent: str
    ended: str
    incarnation: str
    wakes: tuple[str, ...] = field(repr=False)
    # The guards still pending under a key with no record (their ids); None where not looked for
    # (another group recorded under the key, whose own guards would be among them).
    guards: tuple[str, ...] | None = None

    def as_dict(self) -> dict[str, Any]:
        shown = {k: v for k, v in self.__dict__.items() if k not in ("wakes", "guards")}
        pending = None if self.guards is None else list(self.guards)
        return {**shown, "wakes": len(self.wakes), "guards_pending": pending}


class _Registers(msgspec.Struct):
    """What an open (`OpenRequest` or `PartedOpen`, any format) or a `WaitRequest` says of the wakes
    it registers, and of where an open is answered."""

    reply_to: str = ""
    wakes: list[str] = msgspec.field(default_factory=list)


class _Sent(NamedTuple):
    """A message a caller's journal holds that it sent its group, at entry ``at``."""

    caller: str
    at: int
    sent: SentTo
    asks: _Registers


def stranded_wakes(admin: Admin) -> list[StrandedWakes]:
    """Every running caller waiting on wakes that no group's record holds.

    Read from each running caller's journal: the wakes its open or its `wait`s registered (the open
    answered it as a first open, or the `wait` found no rank to serve), that have not fired, of a
    group whose record is gone or is another incarnation's. A registration not answered yet is not
    one: the open may be on its way (`stranded_opens` lists the opens Restate ended unanswered).
    """
    group = named(GROUP)
    lashs = in_list(named(role) for role in ROLES)  # lash's own services register no wakes
    running = sql(
        admin,
        f"SELECT id FROM sys_invocation WHERE status != {quote(ENDED)} "
        f"AND target_service_name NOT IN {lashs}",
    )
    callers = sorted(row["id"] for row in running)
    sent = _sent(admin, group, callers)
    if not sent:
        return []
    answers = answers_of(admin, sorted({s.caller for s in sent}))
    waiting: dict[tuple[str, str], list[_Sent]] = {}
    for s in sent:
        waiting.setdefault((s.caller, s.sent.key), []).append(s)
    records = _records(admin, {key for _, key in waiting})
    found = []
    for (caller, key), messages in sorted(waiting.items()):
        registers = sorted(messages, key=lambda s: s.at)
        had = answers.get(caller, Answers({}, {}))
        unfired = {w for s in registers for w in s.asks.wakes if awakeable_signal(w) not in had.signals}
        record = records.get(key)
        unfired -= {w.awakeable for w in record.waiters} if record is not None else set()
        if unfired:  # wakes the group recorded under the key does not hold: read what registered them
            found += _stranded(admin, caller, key, registers, unfired, record, had)
    # Read again: a caller may have ended since it was listed running (nobody waits then).
    alive = alive_of(invocation_rows(admin, sorted({f.caller for f in found})))
    found = [f for f in found if f.caller in alive]
    pending = _guards(admin, group, sorted({f.group_key for f in found if f.ended == GONE}))
    return [_with_guards(f, pending.get(f.group_key, ())) if f.ended == GONE else f for f in found]


def _guards(admin: Admin, group: str, keys: list[str]) -> dict[str, tuple[str, ...]]:
    """The guards still pending under each of ``keys`` (scheduled, most likely), by key."""
    if not keys:
        return {}
    rows = rows_in(
        admin,
        "SELECT id, target_service_key AS key FROM sys_invocation "
        f"WHERE target_service_name = {quote(group)} AND target_handler_name = {quote(GROUP_GUARD.handler)} "
        f"AND status != {quote(ENDED)} "
        "AND target_service_key IN {values}",
        keys,
    )
    found: dict[str, list[str]] = {}
    for row in rows:
        found.setdefault(row["key"], []).append(row["id"])
    return {key: tuple(sorted(ids)) for key, ids in found.items()}


def _with_guards(stranded: StrandedWakes, guards: tuple[str, ...]) -> StrandedWakes:
    ended = GONE + (PENDING if guards else NO_GUARD)
    return dataclasses.replace(stranded, ended=ended, guards=guards)


def look_again(admin: Admin, stranded: StrandedWakes, *, ingress: str | None = None) -> str:
    """Have ``stranded``'s group look at its wakes again, as its guard would have (sent by the group
    object's `operator_resend`, reached through the ingress): it ends them with `group_not_open` if
    the group's record is gone or is another incarnation's, else looks again later at those a group
    still holds. Returns the look's invocation id."""
    look = Guard(
        incarnation=stranded.incarnation,
        waiters=list(stranded.wakes),
        after_ms=int(WAITER_CHECK.total_seconds() * 1000),
    )
    request = OperatorResend(handler=GROUP_GUARD.handler, request=msgspec.json.encode(look))
    api = admin_api(admin)
    return operator_call(
        api, ingress_url(ingress, api), stranded.group_key, GROUP_OPERATOR_RESEND, request
    ).invocation


def _sent(admin: Admin, group: str, callers: list[str]) -> list[_Sent]:
    """What ``callers`` sent the group object ``group`` that registers wakes, as journaled."""
    found = []
    for journaled in sent_in(admin, callers, group, _REGISTERS, calls=True):
        try:
            asks = msgspec.json.decode(journaled.sent.body, type=_Registers)
        except msgspec.DecodeError:
            continue  # one this release cannot read, passed over rather than failing the listing
        found.append(_Sent(journaled.invocation, journaled.at, journaled.sent, asks))
    return found


def _records(admin: Admin, keys: Iterable[str]) -> dict[str, GroupMeta]:
    """The records of the groups under ``keys`` that have one."""
    if not (wanted := sorted(keys)):
        return {}
    found: dict[str, GroupMeta] = {}
    for start in range(0, len(wanted), IN_SLICE):
        listed = in_list(wanted[start : start + IN_SLICE])
        for group in read_groups(admin, f" AND service_key IN {listed}", order=False):
            found[group.key] = group.meta
    return found


def _stranded(
    admin: Admin,
    caller: str,
    key: str,
    registers: list[_Sent],
    unfired: set[str],
    record: GroupMeta | None,
    answers: Answers,
) -> list[StrandedWakes]:
    """``caller``'s wakes of the group ``key`` that were registered, have not fired and no record
    holds: one entry per incarnation they were registered with (read from each registration's
    answer, in the journal)."""
    entries: dict[int, int] = {}  # the entry index of each registration's answer, by registration
    for s in registers:
        if s.sent.answer is not None:
            at = answers.calls.get(s.sent.answer)
        else:
            signal = awakeable_signal(s.asks.reply_to)
            at = answers.signals.get(signal) if signal is not None else None
        if at is not None:
            entries[s.at] = at
    values = answer_values(admin, caller, sorted(set(entries.values())))
    by_incarnation: dict[str, tuple[list[str], _Sent]] = {}
    for s in registers:
        registered = _registered(s, values.get(entries.get(s.at, -1)))
        if registered is None:
            continue  # not answered, refused, or answered with ranks: it registered nothing
        wakes = [w for w in s.asks.wakes if w in unfired]
        if not wakes or (record is not None and record.incarnation == registered):
            continue  # the group still recorded holds them, or will wake them (a rank on its way)
        held, _ = by_incarnation.get(registered, ([], s))
        by_incarnation[registered] = ([*held, *wakes], s)
    why = GONE if record is None else REPLACED
    return [
        StrandedWakes(caller, key, s.sent.handler, s.sent.invocation, why, incarnation, tuple(wakes))
        for incarnation, (wakes, s) in by_incarnation.items()
    ]


def _registered(s: _Sent, value: bytes | None) -> str | None:
    """The incarnation ``s`` registered its wakes with, read from its answer ``value``; None if it
    registered none (no answer yet, a refusal, a reopen's, or a `wait` that served ranks)."""
    if value is None or not s.asks.wakes:
        return None
    try:
        if s.sent.answer is None:
            opened = msgspec.json.decode(value, type=OpenReply)
            return None if opened.reopened else opened.incarnation
        waited = msgspec.json.decode(value, type=WaitReply)
    except msgspec.DecodeError:
        return None
    return None if waited.refs else waited.incarnation
