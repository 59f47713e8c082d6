"""Callers waiting for the answer of an open that Restate killed or cancelled, and the lever that
sends that open again (decision 93).

A caller sends its group's open (`LashGroup/open`, or `open_parts` for an open in parts) and waits on
an awakeable the open resolves. `restate invocations kill` (or `cancel`) of that open before it ran
leaves the awakeable unresolved: nothing else knows it. The caller's own journal does: it holds the
open as it was sent. So the open is found there and, on the operator's word, sent again as a reopen
by the group object itself (the open is not a public handler; its `operator_resend` is): a group
its first open recorded goes on, one never recorded refuses it, which ends the caller.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import msgspec

from ..engine import (
    GROUP,
    GROUP_OPEN,
    GROUP_OPEN_PARTS,
    GROUP_OPERATOR_RESEND,
    OperatorResend,
    awakeable_signal,
    named,
)
from ._journal import Journaled, answers_of, sent_in
from ._operator import ingress_url, operator_call
from ._sql import ENDED, Admin, InspectionError, admin_api, invocation_rows, quote, sql

__all__ = ["StrandedOpen", "resend_open", "stranded_opens"]

_OPENS = (GROUP_OPEN.handler, GROUP_OPEN_PARTS.handler)


class _Answered(msgspec.Struct):
    """What an open request (`OpenRequest`, `PartedOpen`, any format) says about its answer."""

    reply_to: str


@dataclass(frozen=True)
class StrandedOpen:
    """``caller`` waits for the answer of the open of ``group_key`` it sent (``handler``): the open
    ended without answering (``ended`` says how, as Restate tells it), and ``request`` is what was
    sent, read from the caller's journal."""

    caller: str
    group_key: str
    handler: str
    sent: str  # the open's invocation id
    ended: str
    request: bytes = field(repr=False)

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "request"}


# How long ago a caller must have sent an open that Restate does not know for it to be listed: until
# then the open may still be on its way to the group's partition (a lagging one, a failover).
SENT_BEFORE_S = 60


def stranded_opens(admin: Admin, *, sent_before_s: int = SENT_BEFORE_S) -> list[StrandedOpen]:
    """Every caller still waiting for an open that ended without answering it.

    Read from each running caller's journal: an open it sent (`open` or `open_parts` of the group
    object) whose awakeable has no completion there, and whose invocation has ended in failure
    (killed or cancelled while it ran) or is not known to Restate at all (killed or cancelled while
    queued: Restate keeps nothing of those), once the caller sent it ``sent_before_s`` seconds ago
    (by the server's clock): sooner, it may not have reached its group yet, and a resend would
    overtake it. An open still queued or running is not stranded.
    """
    if sent_before_s < 0:
        raise InspectionError(f"sent_before_s must be 0 or more, got {sent_before_s}")
    group = named(GROUP)
    sent = _opens_sent(admin, group, sent_before_s, f"status != {quote(ENDED)}")
    if not sent:
        return []
    answered = answers_of(admin, sorted({s.caller for s in sent}))
    waiting = [s for s in sent if s.caller not in answered or s.signal not in answered[s.caller].signals]
    resent = _resent(admin, group, sent_before_s) if waiting else {}
    known = invocation_rows(
        admin,
        sorted(
            {s.sent for s in waiting}
            | {r.sent for rs in resent.values() for r in rs}
            | {s.caller for s in waiting}  # read again: one may have ended since it was listed running
        ),
    )
    stranded = []
    for s in waiting:
        if known.get(s.caller, {}).get("status", ENDED) == ENDED:
            continue  # the caller ended meanwhile: nobody waits for this open any more
        if any(_on_its_way(known.get(r.sent), r.long_sent) for r in resent.get(_reply_to(s.body), ())):
            continue  # sent again already, and that open has not ended unanswered: a second would overtake it
        ended_as = known.get(s.sent)
        if _on_its_way(ended_as, s.long_sent):
            continue  # queued, running or sent a moment ago; or it answered (its completion follows)
        ended = (
            ended_as["completion_failure"]
            if ended_as is not None
            else "not known to Restate (killed or cancelled while queued)"
        )
        stranded.append(StrandedOpen(s.caller, s.group_key, s.handler, s.sent, ended, s.body))
    return stranded


def resend_open(admin: Admin, stranded: StrandedOpen, *, ingress: str | None = None) -> str:
    """Send ``stranded``'s open again as a reopen (through the group object's `operator_resend`,
    reached through the ingress), which answers the caller's awakeable: it goes on with a group its
    first open recorded, or ends `group_not_open`. Returns the new open's invocation id."""
    request = OperatorResend(handler=stranded.handler, request=stranded.request)
    api = admin_api(admin)
    return operator_call(
        api, ingress_url(ingress, api), stranded.group_key, GROUP_OPERATOR_RESEND, request
    ).invocation


class _Sent(NamedTuple):
    """An open a caller's journal holds: whose, to which group and handler, the invocation id
    Restate gave it, its body, and the signal index of the awakeable it answers on."""

    caller: str
    group_key: str
    handler: str
    sent: str
    body: bytes
    signal: int
    long_sent: bool = False  # sent long enough ago that it would be known by now


def _open_in(journaled: Journaled) -> _Sent | None:
    """The open a caller's journal holds, with the signal it is answered on; None for one that names
    no awakeable (or that this release cannot read), which is passed over."""
    sent = journaled.sent
    signal = awakeable_signal(reply_to) if (reply_to := _reply_to(sent.body)) else None
    if signal is None:
        return None
    return _Sent(
        journaled.invocation, sent.key, sent.handler, sent.invocation, sent.body, signal, journaled.long_sent
    )


def _opens_sent(admin: Admin, group: str, sent_before_s: int, which: str) -> list[_Sent]:
    """The opens of ``group`` that the journals of the invocations ``which`` picks (SQL over
    `sys_invocation`) sent, each with whether it was sent ``sent_before_s`` seconds ago or more.

    The invocations first, then their journals by id: Restate reads only those journals, where a
    join scanned every journal it keeps (seconds on a busy cluster, past the admin API's wait)."""
    senders = sorted(row["id"] for row in sql(admin, f"SELECT id FROM sys_invocation WHERE {which}"))
    journaled = sent_in(admin, senders, group, _OPENS, sent_before_s=sent_before_s)
    return [found for sent in journaled if (found := _open_in(sent))]


def _resent(admin: Admin, group: str, sent_before_s: int) -> dict[str, list[_Sent]]:
    """The opens the group object's `operator_resend` sent again (its journal, kept a while after it
    ended), by the awakeable each answers."""
    resender = f"target_service_name = {quote(group)} "
    resender += f"AND target_handler_name = {quote(GROUP_OPERATOR_RESEND.handler)}"
    resent: dict[str, list[_Sent]] = {}
    for found in _opens_sent(admin, group, sent_before_s, resender):
        resent.setdefault(_reply_to(found.body), []).append(found)
    return resent


def _on_its_way(ended_as: dict[str, Any] | None, long_sent: bool) -> bool:
    """Whether an open Restate shows as ``ended_as`` (None: not known to it), sent ``long_sent`` ago
    or not, may still answer its caller: queued, running, answered, or sent a moment ago."""
    if ended_as is None:
        return not long_sent
    return ended_as.get("status") != ENDED or not ended_as.get("completion_failure")


def _reply_to(body: bytes) -> str:
    """The awakeable an open request (any format) is answered on; "" if it names none."""
    try:
        return msgspec.json.decode(body, type=_Answered).reply_to
    except msgspec.DecodeError:
        return ""
