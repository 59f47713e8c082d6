"""The operator's levers, through the ingress as a caller would pull them: close a group
(`LashGroup/operator_close`) and run again what missed its runner (`operator_redispatch`)."""

from __future__ import annotations

import os
import shlex
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar
from urllib.parse import quote as url_quote

import httpx
import msgspec

from .._http import tls
from ..admin import AdminApi, AdminError, shown_url
from ..contract import LoserPolicy, RuntimeErrorCode, without_wire
from ..engine import (
    GROUP,
    GROUP_OPERATOR_CLOSE,
    GROUP_OPERATOR_REDISPATCH,
    OperatorClose,
    OperatorRedispatch,
    Route,
    SettlementMode,
    named,
)
from ._groups import OPEN, PARKED, classify, lost_closes, read_groups, show_group, unrecorded_openers
from ._sql import ENDED, Admin, InspectionError, admin_api, invocation_rows, quote
from ._views import ChildView

__all__ = [
    "DEFAULT_INGRESS_URL",
    "CloseRefused",
    "CloseResult",
    "RedispatchResult",
    "close_group",
    "ingress_url",
    "redispatch_missed",
    "said",
]

_I = TypeVar("_I")
_O = TypeVar("_O")
DEFAULT_INGRESS_URL = "http://127.0.0.1:8080"


class CloseRefused(InspectionError):
    """`close_group` would not close: the group is parked or open, or an orphan whose handle an opener
    saved (each unless forced), or it changed meanwhile."""

    code = RuntimeErrorCode.CLOSE_REFUSED


@dataclass(frozen=True)
class CloseResult:
    group_key: str
    closed: bool  # False: it was not open (closed already, or never): nothing to do
    was: str | None  # its state before the close: "open", "parked" or "orphaned"; None if not open
    disposition: str | None = None  # the disposition the close applied
    cancelled: int = 0  # cancels sent: one per unsettled child, or the one pump
    # Closed under RunToCompletion: the unsettled children Restate showed running as the close was
    # sent, which run on (an operator cancels one with Restate's own `restate invocations cancel ID`);
    # one an open still in flight had not yet sent is not among them.
    running: list[ChildView] = field(default_factory=list)
    pumped: bool = False  # its children run under pumps: the cancels went to them, not to each child
    # Closed under RunToCompletion: its pumps Restate showed not yet completed, by invocation id. A
    # bounded group's child not started yet has no invocation: its pump starts it, and a cancel of
    # that pump cancels what it runs and starts nothing more.
    pumps: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


_WHY = {
    PARKED: "it is parked: its latest opener returned normally, so a continuation may hold its handle "
    "and resume it (and would then find it closed); pass --force to close it anyway",
    OPEN: "it is open: its opener is running and still reads it; pass --force to close it anyway",
}
# An orphan an opener saved (its latest, before it failed, or an earlier one): held still (decision 121).
_SAVED = (
    "an opener saved its handle (its latest, before it failed or was killed, or an earlier one), so a "
    "continuation may hold it and resume it (and would then find it closed); pass --force to close it "
    "anyway"
)


def ingress_url(url: str | None = None, api: AdminApi | None = None) -> str:
    """``url``, else ``$RESTATE_INGRESS_URL``, else ``$LASH_INGRESS_URL``, else the ingress ``api``
    advertises (its `/version`'s ``ingress_endpoint``: an operator told the admin API alone reaches
    the ingress it names), else the local default."""
    given = url or os.environ.get("RESTATE_INGRESS_URL") or os.environ.get("LASH_INGRESS_URL")
    if given:
        return given
    if api is not None:
        try:
            answer = api.get("/version", timeout=10)
            advertised = answer.json().get("ingress_endpoint") if answer.is_success else None
        except (AdminError, ValueError, AttributeError):  # not answered, not JSON, not an object
            advertised = None
        if isinstance(advertised, str) and advertised:
            return advertised
    return DEFAULT_INGRESS_URL


def close_group(
    admin: Admin,
    group_key: str,
    *,
    cancel: bool = False,
    force: bool = False,
    ingress: str | None = None,
) -> CloseResult:
    """The operator's close of one group: the ADR's close, as its caller's would be (decision 45).

    Idempotent (a group that is not open is left alone); narrowing only (``cancel`` narrows
    RunToCompletion to Cancel, which cancels its unsettled children; a declared Cancel stays Cancel);
    it deletes the group's state. A parked or open group, and an orphaned one whose handle an opener
    saved, is refused unless ``force``.
    """
    # Its rank order is not needed here: a wide group's pages are left unread (`show_group` reads them).
    found = read_groups(admin, f" AND service_key = {quote(group_key)}", order=False)
    if not found:
        return CloseResult(group_key=group_key, closed=False, was=None)
    [group] = found
    known = invocation_rows(admin, [o.caller for o in group.meta.openers])
    lost = lost_closes(admin, [group], known).get(group_key)
    state, _ = classify(group, known, lost, unrecorded_openers(admin, [group]).get(group_key))
    # A saved handle is moot once the latest opener closed the group itself (decision 114).
    if not force and (state in _WHY or (group.saved() and lost is None)):
        raise CloseRefused(f"not closing {group_key}: {_WHY.get(state, _SAVED)}")
    running: list[ChildView] = []
    pumps: list[str] = []
    if not cancel and group.meta.disposition is LoserPolicy.RUN_TO_COMPLETION:
        view = show_group(admin, group_key)
        running = [
            c for c in (view.children if view else []) if c.rank is None and c.status not in (None, ENDED)
        ]
        pumps = [p.invocation_id for p in (view.pumps if view else [])]
    request = OperatorClose(
        incarnation=group.meta.incarnation, openers=len(group.meta.openers), cancel=cancel
    )
    api = admin_api(admin)
    answer = operator_call(api, ingress_url(ingress, api), group_key, GROUP_OPERATOR_CLOSE, request)
    if answer.refused is not None:
        raise CloseRefused(f"not closing {group_key}: {answer.refused}")
    return CloseResult(
        group_key=group_key,
        closed=answer.closed,
        was=state if answer.closed else None,
        disposition=answer.disposition.value if isinstance(answer.disposition, LoserPolicy) else None,
        cancelled=answer.cancelled,
        pumped=answer.closed and group.meta.mode is SettlementMode.PUMPED,
        running=running if answer.closed else [],
        pumps=pumps if answer.closed else [],
    )


@dataclass(frozen=True)
class RedispatchResult:
    group_key: str
    dispatched: int  # children dispatched again
    unroutable: int  # children the endpoint that answered still cannot route: still missed
    # Why the group dispatched nothing: closed, or reopened, since it was read; or, named, none missed.
    refused: str | None = None
    error: str | None = None  # why the request failed (it may still run: see the message)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def redispatch_missed(
    admin: Admin, group_key: str | None = None, *, ingress: str | None = None
) -> list[RedispatchResult]:
    """Run again the children whose runner was missing, of ``group_key`` or (None) of every open
    group with such children, without a reopen: the Restate form of the reference host's drain,
    for once a deployment routes them again. A child dispatched again runs only if it has no
    outcome, and reaches its rank as a first run's does. A group closed (or closed and opened again)
    between its reading and its re-dispatch dispatches nothing, and its result says why (`refused`).
    Each group is asked on its own: a request that fails (`error`) stops none of the others.
    """
    where = f" AND service_key = {quote(group_key)}" if group_key is not None else ""
    results = []
    api, reached = admin_api(admin), None
    for group in read_groups(admin, where, order=False):  # what it needs: the missed, the incarnation
        if not group.missed:
            if group_key is not None:  # the group named is open: say why nothing was dispatched
                results.append(RedispatchResult(group.key, 0, 0, "no child of it missed its runner"))
            continue
        request = OperatorRedispatch(incarnation=group.meta.incarnation)
        try:
            reached = reached or ingress_url(ingress, api)  # asked once, of the first group to send
            answer = operator_call(api, reached, group.key, GROUP_OPERATOR_REDISPATCH, request)
        except InspectionError as exc:
            results.append(RedispatchResult(group.key, 0, 0, error=str(exc)))
            continue
        results.append(RedispatchResult(group.key, answer.dispatched, answer.unroutable, answer.refused))
    return results


def operator_call(
    api: AdminApi, ingress: str, key: str, route: Route[_I, _O], request: _I, *, timeout: float = 60
) -> _O:
    """One operator's handler of lash's group (or event) object ``key``, reached through the ingress
    (decision 45)."""
    url = f"{ingress.rstrip('/')}/{route.service}/{url_quote(key, safe='')}/{route.handler}"
    shown = shown_url(ingress)
    try:
        headers = {"content-type": "application/json", **api.headers()}
    except AdminError as exc:
        raise InspectionError(str(exc)) from None
    try:
        response = httpx.post(
            url, content=msgspec.json.encode(request), headers=headers, timeout=timeout, verify=tls()
        )
    except httpx.ReadTimeout:
        # Sent, and not answered: the group object runs one handler at a time, so it most likely
        # waits behind the group's other work (a paused invocation there, say) and will run later.
        look = (
            f"the group (`lash-restate groups show {shlex.quote(key)}`)"
            if route.service == named(GROUP)
            else f"its invocations (`restate invocations list`, {route.service} {key})"
        )
        raise InspectionError(
            f"the ingress at {shown} took {route.handler} of {key} and gave no answer within "
            f"{timeout:g} s: it may wait behind the object's other work and run later; look at "
            f"{look} before asking again"
        ) from None
    except (httpx.HTTPError, httpx.InvalidURL) as exc:  # an unusable URL is not an HTTPError
        unreachable = f"cannot reach the Restate ingress at {ingress} ({exc})"
        raise InspectionError(api.hidden(unreachable).replace(ingress, shown)) from None
    if response.status_code != 200:
        raise InspectionError(
            f"the ingress at {shown} answered {response.status_code} to {route.handler}: "
            f"{said(response)[:200]}"
        )
    try:
        return msgspec.json.decode(response.content, type=route.output)
    except msgspec.DecodeError as exc:
        raise InspectionError(f"{shown} is not serving {route.service}/{route.handler} ({exc})") from None


def said(response: httpx.Response) -> str:
    """What the ingress answered, for a person: the failure's message (a wire line, from an endpoint
    of an earlier release, shown as its error), else the text of the answer."""
    try:
        message = response.json().get("message")
    except (ValueError, AttributeError):
        message = None
    return without_wire(message) if isinstance(message, str) else response.text
