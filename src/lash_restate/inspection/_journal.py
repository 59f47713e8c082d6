"""What an invocation's journal says it sent lash's objects, and the answers it has had, as the
admin API shows them (`sys_journal`): the open a caller waits on (`_stranded`), the wakes it
registered (`_wakes`), an event child's subscription (`_subscriptions`), the close a caller sent and
went on from (`_groups.lost_closes`)."""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from ._sql import Admin, quote, rows_in, sql

__all__ = ["Answers", "Journaled", "SentTo", "answer_values", "answers_of", "sent_in", "sent_to", "target_of"]


class SentTo(NamedTuple):
    """A call or one-way call to one of lash's virtual objects (a group, an event): the object's key,
    the handler, the invocation id Restate gave it, and its body; a call's ``answer`` is the
    completion id its answer comes back under (None for a one-way call)."""

    key: str
    handler: str
    invocation: str
    body: bytes
    answer: int | None = None


def sent_to(entry: str, service: str) -> SentTo | None:
    """The call or one-way call to the virtual object ``service`` (its service name) that a journal
    entry (a `Call` or `OneWayCall` command's ``entry_json``) holds. None for any other entry, or one this
    release cannot read (a journal of another protocol version), which a listing passes over."""
    try:
        command = json.loads(entry)["Command"]
        call = command["OneWayCall"] if "OneWayCall" in command else command["Call"]
        request = call["request"]
        found = _to(request, service, bytes(request["parameter"]))
        if found is None or "result_completion_id" not in call:
            return found
        return found._replace(answer=int(call["result_completion_id"]))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def target_of(entry_lite: str, service: str) -> SentTo | None:
    """`sent_to` of a `OneWayCall`'s ``entry_lite_json``, which leaves out the body (``b""``): cheap to
    read for every call an invocation sent."""
    try:
        return _to(json.loads(entry_lite)["Command"]["OneWayCall"], service, b"")
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _to(call: dict[str, Any], service: str, body: bytes) -> SentTo | None:
    """A call's target and invocation id (both forms of an entry hold them alike), if ``service``'s."""
    target = call["invocation_target"].get("VirtualObject") or {}
    if target.get("name") != service:
        return None
    return SentTo(str(target["key"]), str(target["handler"]), str(call["invocation_id"]), body)


class Journaled(NamedTuple):
    """A call or one-way call an invocation's journal holds (``at``, its entry's index), and whether
    it was appended long enough ago (`sent_in`'s ``sent_before_s``)."""

    invocation: str
    at: int
    sent: SentTo
    long_sent: bool


def sent_in(
    admin: Admin,
    invocations: list[str],
    service: str,
    handlers: tuple[str, ...],
    *,
    calls: bool = False,
    sent_before_s: int = 0,
) -> list[Journaled]:
    """What the journals of ``invocations`` sent ``handlers`` of the virtual object ``service``: its
    one-way calls (and its calls, with ``calls``), each with its body. Only those entries are read
    whole (the server filters on their short form), and any this release cannot read is passed over
    rather than failing a listing."""
    kinds = "('Command: OneWayCall', 'Command: Call')" if calls else "('Command: OneWayCall')"
    rows = rows_in(
        admin,
        "SELECT id, index, entry_json AS entry, "
        f"appended_at < now() - INTERVAL '{int(sent_before_s)} seconds' AS long_sent "
        f"FROM sys_journal WHERE entry_type IN {kinds} AND {_calling(service, *handlers)} "
        "AND id IN {values}",
        invocations,
    )
    found = []
    for row in rows:
        sent = sent_to(row["entry"], service)
        if sent is not None and sent.handler in handlers:
            found.append(Journaled(row["id"], int(row["index"]), sent, row.get("long_sent") is True))
    return found


def _calling(service: str, *handlers: str) -> str:
    """A SQL condition on `sys_journal`: the entry calls one of ``handlers`` of the virtual object
    ``service``, as its short form (``entry_lite_json``) shows it. A handler matches by prefix (`open`
    also matches `open_parts`), so read each row with `sent_to` too. The server filters on the short
    form, so the bodies of the group's other calls (a pump's report carries outcomes) are not read."""
    return (
        "("
        + " OR ".join(
            "entry_lite_json LIKE " + quote(f'%{service}%"handler":"{handler}%') for handler in handlers
        )
        + ")"
    )


class Answers(NamedTuple):
    """Where an invocation's journal holds the answers it has had, by signal index (awakeables: a
    fired signal is one) and by completion id (calls): the entry index of each."""

    signals: dict[int, int]
    calls: dict[int, int]


def answers_of(admin: Admin, invocations: list[str]) -> dict[str, Answers]:
    """The answers each of ``invocations``' journals holds, read from the notifications' short form."""
    rows = rows_in(
        admin,
        "SELECT id, index, entry_lite_json AS entry FROM sys_journal "
        "WHERE entry_type IN ('Notification: Signal', 'Notification: Call') AND id IN {values}",
        invocations,
    )
    found: dict[str, Answers] = {}
    for row in rows:
        answers = found.setdefault(row["id"], Answers({}, {}))
        try:
            which = json.loads(row["entry"])["Notification"]["id"]
        except (ValueError, KeyError, TypeError):
            continue
        if isinstance(which.get("SignalIndex"), int):
            answers.signals[which["SignalIndex"]] = int(row["index"])
        elif isinstance(which.get("CompletionId"), int):
            answers.calls[which["CompletionId"]] = int(row["index"])
    return found


def answer_values(admin: Admin, invocation: str, indices: list[int]) -> dict[int, bytes]:
    """The values ``invocation``'s journal entries at ``indices`` (notifications: a signal, a call's
    completion) succeeded with, by index; one that failed is left out."""
    if not indices:
        return {}
    rows = sql(
        admin,
        "SELECT index, entry_json AS entry FROM sys_journal "
        f"WHERE id = {quote(invocation)} AND index IN ({', '.join(str(int(i)) for i in indices)})",
    )
    found = {}
    for row in rows:
        value = _success(row["entry"])
        if value is not None:
            found[int(row["index"])] = value
    return found


def _success(entry: str) -> bytes | None:
    """The value a notification (`Signal`, or a `Call`'s completion) succeeded with; None if it failed."""
    try:
        notification = json.loads(entry)["Notification"]
        result = (
            notification["Signal"]["result"]
            if "Signal" in notification
            else notification["Completion"]["Call"]["result"]
        )
        return bytes(result["Success"]) if "Success" in result else None
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
