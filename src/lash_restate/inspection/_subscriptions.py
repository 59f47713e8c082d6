"""Event children waiting on a subscription their event no longer holds, and the lever that
subscribes them again (decision 129).

An event child subscribes to its event (`LashSignal/{name}/subscribe`, naming an awakeable) and
waits on that awakeable; the event keeps it (`waiter:{awakeable}`) until an emit or a reject
answers it. `restate state clear LashSignal/{name}` deletes it: a later emit answers nobody, and
the child, its rank and the caller waiting on that rank wait for ever. The child's journal holds
the subscription as it was sent: one its event no longer holds is listed here, and on the
operator's word the event sends it to itself again (its public `operator_resend`), which the next
emit, or the payload the event keeps, answers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import msgspec

from ..engine import (
    CANCEL_SIGNAL,
    CHILD,
    EVENT_WAITER,
    EVENT_WAITERS,
    SIGNAL,
    SIGNAL_OPERATOR_RESEND,
    SIGNAL_SUBSCRIBE,
    SIGNAL_UNSUBSCRIBE,
    OperatorResend,
    awakeable_signal,
    named,
)
from ._journal import answers_of, sent_in
from ._operator import ingress_url, operator_call
from ._sql import ENDED, Admin, admin_api, alive_of, invocation_rows, quote, rows_in, sql
from ._stranded import SENT_BEFORE_S

__all__ = ["StrandedSubscription", "resubscribe", "stranded_subscriptions"]

_SUBSCRIBE, _UNSUBSCRIBE = SIGNAL_SUBSCRIBE.handler, SIGNAL_UNSUBSCRIBE.handler
GONE = "its event no longer holds its subscription (the event's state was cleared)"


@dataclass(frozen=True)
class StrandedSubscription:
    """The event child ``caller`` (its invocation; ``child``, its key) waits on the event ``event``
    through a subscription (``sent``, its invocation id) that the event no longer holds."""

    caller: str
    child: str
    event: str
    sent: str
    ended: str
    awakeable: str = field(repr=False)

    def as_dict(self) -> dict[str, Any]:
        shown = {k: v for k, v in self.__dict__.items() if k != "awakeable"}
        return {**shown, "handler": _SUBSCRIBE}


class _Subscribed(NamedTuple):
    """A subscription (or its giving up) a child's journal holds."""

    caller: str
    handler: str  # subscribe, or unsubscribe: the child was cancelled
    event: str
    sent: str
    awakeable: str
    long_sent: bool  # sent long enough ago that Restate would know it by now


def stranded_subscriptions(admin: Admin, *, sent_before_s: int = SENT_BEFORE_S) -> list[StrandedSubscription]:
    """Every running event child whose subscription its event no longer holds.

    Read from each running child's journal: the `subscribe` it sent, whose awakeable has not fired,
    once that subscription has run (one still queued behind the event's work, or sent less than
    ``sent_before_s`` seconds ago and not known to Restate yet, is on its way; one that failed, the
    child watches itself, unless it is a child an earlier release parked before it watched its
    subscriptions), of an event whose state holds no such waiter. A child that was cancelled, or
    gave up its subscription (`unsubscribe`), waits on nothing.
    """
    child, signal = named(CHILD), named(SIGNAL)
    running = sql(
        admin,
        "SELECT id, target_service_key AS key FROM sys_invocation "
        f"WHERE target_service_name = {quote(child)} AND status != {quote(ENDED)}",
    )
    keys = {row["id"]: row["key"] for row in running}
    sent = _subscribed(admin, signal, sorted(keys), sent_before_s)
    gave_up = {s.caller for s in sent if s.handler == _UNSUBSCRIBE}
    subscribed = [s for s in sent if s.handler == _SUBSCRIBE and s.caller not in gave_up]
    waiting = _unfired(admin, subscribed)
    # Whether each subscription ran is read before the event's state: one that ran after that read
    # would be listed though the event holds it.
    ran = invocation_rows(admin, sorted({s.sent for s in waiting}))
    watched = _watching(admin, sorted({s.caller for s in waiting if _failed(ran.get(s.sent))}))
    done = []
    for s in waiting:
        subscription = ran.get(s.sent)
        if subscription is None and not s.long_sent:
            continue  # it may still be on its way to the event
        if subscription is not None and subscription.get("status") != ENDED:
            continue  # still queued or running: the event will hold it
        if _failed(subscription) and s.caller in watched:
            continue  # the child watches it, and settles with its failure
        done.append(s)
    held = _held(admin, signal, sorted({s.event for s in done}))
    lost = [s for s in done if s.awakeable not in held.get(s.event, set())]
    # Read again: a child may have ended, or been answered, since it was listed.
    alive = alive_of(invocation_rows(admin, sorted({s.caller for s in lost})))
    return [
        StrandedSubscription(s.caller, keys.get(s.caller, ""), s.event, s.sent, GONE, s.awakeable)
        for s in _unfired(admin, [s for s in lost if s.caller in alive])
    ]


def resubscribe(admin: Admin, stranded: StrandedSubscription, *, ingress: str | None = None) -> str:
    """Send ``stranded``'s subscription again (the event object's `operator_resend`, reached through
    the ingress): the event keeps it for its next emit or reject, or answers it at once with what it
    keeps. Returns the new subscription's invocation id."""
    request = OperatorResend(handler=_SUBSCRIBE, request=msgspec.json.encode(stranded.awakeable))
    api = admin_api(admin)
    return operator_call(
        api, ingress_url(ingress, api), stranded.event, SIGNAL_OPERATOR_RESEND, request
    ).invocation


def _subscribed(admin: Admin, signal: str, children: list[str], sent_before_s: int) -> list[_Subscribed]:
    """The subscriptions to the event object ``signal`` (and their giving up) that the journals of
    ``children`` hold."""
    found = []
    for journaled in sent_in(
        admin, children, signal, (_SUBSCRIBE, _UNSUBSCRIBE), sent_before_s=sent_before_s
    ):
        sent = journaled.sent
        try:
            awakeable = msgspec.json.decode(sent.body, type=str)
        except msgspec.DecodeError:
            continue  # one this release cannot read, passed over rather than failing the listing
        subscribed = _Subscribed(
            journaled.invocation, sent.handler, sent.key, sent.invocation, awakeable, journaled.long_sent
        )
        found.append(subscribed)
    return found


def _unfired(admin: Admin, subscribed: list[_Subscribed]) -> list[_Subscribed]:
    """Those of ``subscribed`` whose awakeable has not fired, of a child that was not cancelled."""
    if not subscribed:
        return []
    fired = answers_of(admin, sorted({s.caller for s in subscribed}))
    return [
        s
        for s in subscribed
        if not {awakeable_signal(s.awakeable), CANCEL_SIGNAL}
        & set(fired[s.caller].signals if s.caller in fired else ())
    ]


def _failed(subscription: dict[str, Any] | None) -> bool:
    return subscription is not None and bool(subscription.get("completion_failure"))


def _watching(admin: Admin, children: list[str]) -> set[str]:
    """Which of ``children`` watch their subscription (attach to it, as every child of this release
    does right after it subscribes; one an earlier release parked before that does not)."""
    if not children:
        return set()
    rows = rows_in(
        admin,
        "SELECT DISTINCT id FROM sys_journal "
        "WHERE entry_type = 'Command: AttachInvocation' AND id IN {values}",
        children,
    )
    return {row["id"] for row in rows}


def _held(admin: Admin, signal: str, events: list[str]) -> dict[str, set[str]]:
    """The awakeables each of ``events`` holds as waiters."""
    rows = rows_in(
        admin,
        f"SELECT service_key, key, value_utf8 FROM state WHERE service_name = {quote(signal)} "
        f"AND (starts_with(key, {quote(EVENT_WAITER)}) OR key = {quote(EVENT_WAITERS)}) "
        "AND service_key IN {values}",
        events,
    )
    held: dict[str, set[str]] = {}
    for row in rows:
        waiters = held.setdefault(row["service_key"], set())
        if row["key"] == EVENT_WAITERS:
            try:
                waiters.update(msgspec.json.decode(row.get("value_utf8") or "[]", type=list[str]))
            except msgspec.DecodeError:
                continue
        else:
            waiters.add(row["key"].removeprefix(EVENT_WAITER))
    return held
