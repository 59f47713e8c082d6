"""`lash-restate groups list|show|close|redispatch|staged|stranded`: the operator's view of open groups and
their levers, printed as tables or JSON."""

from __future__ import annotations

import argparse
import calendar
import json
import shlex
import time
from collections.abc import Callable
from typing import Any, TypeVar

from ..admin import AdminApi
from ._common import NOT_OPEN, REFUSED, STRANDED, USAGE, age, fail, prefix_from_args, table

_T = TypeVar("_T")
_R = TypeVar("_R")

__all__ = [
    "CHILD_COLUMNS",
    "COLUMNS",
    "groups_close",
    "groups_list",
    "groups_redispatch",
    "groups_show",
    "groups_staged",
    "groups_stranded",
    "reclaim_in",
]

COLUMNS = [
    "group_key",
    "child_count",
    "settled",
    "wake",
    "disposition",
    "mode",
    "layout",
    "state",
    "age",
    "paused",
    "retrying",
    "missed",
    "reclaim",
]
CHILD_COLUMNS = ["position", "replay_key", "rank", "outcome", "code", "invocation_id", "status", "missed"]


def reclaim_in(at: str | None, now: float) -> str:
    """When an orphan is reclaimed, from now: ``in 23h59m``, ``due``; ``-`` for any other group."""
    if at is None:
        return "-"
    seconds = calendar.timegm(time.strptime(at, "%Y-%m-%dT%H:%M:%SZ")) - now
    return f"in {age(int(seconds))}" if seconds >= 1 else "due"


_FAILING_SHOWN = 10  # children paused, or backing off, shown with their failure; --json lists all
_PUMPS_SHOWN = 4  # a wide group has one pump per 256 children: the rest are counted
_RUNNING_SHOWN = 20  # a wide group's close may leave thousands running: the rest are counted


def groups_list(args: argparse.Namespace) -> int:
    from ..engine import GROUP, named
    from ..inspection import InspectionError, list_open_groups, server_now_ms, sql
    from ..inspection import quote as sql_quote

    if (failed := prefix_from_args(args)) is not None:
        return failed
    try:
        admin = AdminApi.from_env(args.admin_url)
        now_ms = server_now_ms(admin)  # the cluster's clock, not this machine's: ages and reclaims by it
        listed = list_open_groups(admin, orphaned=args.orphaned, state=args.state, now_ms=now_ms)
        groups = [g.as_dict() for g in listed]
        # None listed: say so of a prefix no deployment serves (a typo reads as an empty cluster).
        served = groups or sql(admin, f"SELECT name FROM sys_service WHERE name = {sql_quote(named(GROUP))}")
    except InspectionError as exc:
        return fail(str(exc))
    if not served and not args.json:
        print(f"no open groups: no deployment serves {named(GROUP)} (is the prefix right?)")
        return 0
    if args.json:
        print(json.dumps(groups))
    elif groups:
        now = now_ms / 1000
        rows = [{**g, "age": age(g["age_s"]), "reclaim": reclaim_in(g["reclaim_at"], now)} for g in groups]
        print(table(rows, COLUMNS))
    elif args.orphaned or args.state:
        print(f"no {'orphaned' if args.orphaned else args.state} groups")
    else:
        print("no open groups")
    return 0


def groups_show(args: argparse.Namespace) -> int:
    from ..inspection import BACKING_OFF, PAUSED, InspectionError, show_group

    if (failed := prefix_from_args(args)) is not None:
        return failed
    try:
        group = show_group(AdminApi.from_env(args.admin_url), args.key)
    except InspectionError as exc:
        return fail(str(exc))
    if group is None:
        if args.json:
            print("null")
        # A record deleted outside lash leaves no group to show, though a caller may wait on it.
        gone = "(if its record was deleted under a waiting caller, `lash-restate groups stranded` finds it)"
        return fail(f"no open group {args.key!r} {gone}", NOT_OPEN)
    shown = group.as_dict()
    if args.unsettled:  # the counts above still count every child
        shown["children"] = [c for c in shown["children"] if c["rank"] is None]
    if args.json:
        print(json.dumps(shown))
        return 0
    children, openers, pumps = shown.pop("children"), shown.pop("openers"), shown.pop("pumps")
    held = shown.pop("held")
    shown["age"] = age(shown.pop("age_s"))
    for name, value in shown.items():
        print(f"{name + ':':<13} {_said(value)}")
    for opener in openers:
        how = "running" if opener["alive"] else (opener["ended"] or "ended: how is not known")
        if opener["status"] == PAUSED:  # as Restate says it: alive, but held until an operator resumes it
            how = "paused: `restate invocations resume` it"
        elif opener["status"] == BACKING_OFF:  # alive, failing, and retried by its retry policy
            how = "failing, and Restate is retrying it"
        print(f"{'opener:':<13} {opener['invocation_id']} ({how})")
    for pump in pumps[:_PUMPS_SHOWN]:
        how = f"{pump['handler']}, {pump['status']}{_unreported(pump)}"
        print(f"{'pump:':<13} {pump['invocation_id']} ({how})")
    if len(pumps) > _PUMPS_SHOWN:
        others = pumps[_PUMPS_SHOWN:]
        held_up = [
            f"{p['invocation_id']} ({p['status']})" for p in others if p["status"] in (PAUSED, BACKING_OFF)
        ]
        print(f"{'':<13} and {len(others)} more" + (f", {', '.join(held_up)}" if held_up else ""))
    print()
    rows = [{k: _said(v) for k, v in c.items() if k in CHILD_COLUMNS} for c in children]
    print(table(rows, CHILD_COLUMNS))
    if any(c["missed"] for c in children):
        print()
        print(
            "a missed child's runner was missing when it ran (a tool or handler this deployment does not "
            "serve): it ended with no outcome. Once the endpoint serves it again, "
            f"`lash-restate groups redispatch {shlex.quote(args.key)}` runs it again (a reopen does too)"
        )
    _print_failing(children, pumps, held, BACKING_OFF)
    _print_failing(children, pumps, held, PAUSED)
    return 0


def _print_failing(
    children: list[dict[str, Any]], pumps: list[dict[str, Any]], held: list[dict[str, Any]], status: str
) -> None:
    """What Restate holds in ``status`` on the group's way (paused, or backing off between attempts
    after a failure): on a child's path, with its last failure's first line (`--json` has it whole),
    a pump, a handler of the group's own object; then what the operator can do about it."""
    from ..engine import GROUP, named
    from ..inspection import PAUSED

    paused = status == PAUSED
    field = "paused" if paused else "retrying"
    failing = [c for c in children if c[field] is not None]
    for child in failing[:_FAILING_SHOWN]:
        print()
        print(f"child {child['position']} is waiting on {_failing(child[field], paused)}")
    if len(failing) > _FAILING_SHOWN:
        more = len(failing) - _FAILING_SHOWN
        print(f"and {more} more children with an invocation {status} on their path (--json lists each)")
    how = "is paused" if paused else "is failing, and Restate is retrying it"
    until = "until it is resumed or killed" if paused else "until it succeeds or is killed"
    for pump in (p for p in pumps if p["status"] == status):
        # Not the advice below: a kill of a pump settles every child it has not reported as killed.
        print()
        print(
            f"pump {pump['invocation_id']} {how}: the children it calls report nothing {until}"
            f"{_unreported(pump)}. "
            + ("Resume it (restate invocations resume ID) rather than kill it: " if paused else "")
            + "a kill of it settles every child it has not reported as killed (409), a finished one too"
        )
    for handler in (h for h in held if h["status"] == status):
        failing.append(handler)
        print()
        print(
            f"{named(GROUP)}/{handler['handler']} {handler['invocation_id']} {how}: the group's reports, "
            f"reads and close queue behind it on its key {until}"
        )
    if failing and paused:
        print()
        print(
            "fix the cause of a failure, if any, then resume it (restate invocations resume ID "
            "--deployment latest to run the fixed deployment, or PATCH "
            "/invocations/ID/resume?deployment=latest on the admin API), or kill it (restate "
            "invocations kill ID): a child's own invocation or a call it made then settles the child as "
            "failed (the operate guide says what a kill of each of lash's own invocations does)"
        )
    elif failing:
        print()
        print(
            "Restate retries it by its retry policy (and pauses it once its attempts run out, where the "
            "policy says so); fix the cause, or kill it (restate invocations kill ID): a child's own "
            "invocation or a call it made then settles the child as failed"
            # Restate's by-handler kill would take every group's and application's calls of it.
            + (
                "; the operate guide's 'A child Restate is retrying' kills this group's alone"
                if len(failing) > 1
                else ""
            )
        )


def _unreported(pump: dict[str, Any]) -> str:
    """What a pump holds that finished, as `groups show` says it: nothing, when it holds none."""
    count = pump["unreported"]
    return f", {count} of its children finished and not reported yet" if count else ""


def _said(value: object) -> str:
    """A header's value as a reader says it: ``-`` unset (as the tables show it), ``yes`` or ``no``."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _failing(invocation: dict[str, Any], paused: bool) -> str:
    """An invocation Restate paused or is retrying, as `groups show` names it: where, and why."""
    code = f" [{invocation['last_failure_error_code']}]" if invocation["last_failure_error_code"] else ""
    # Its first line: Restate's failure text goes on with the handler's traceback (in --json).
    failure = (invocation["last_failure"] or "").splitlines()[0] if invocation["last_failure"] else None
    where = f"{invocation['target']} ({invocation['invocation_id']})"
    if paused:
        if failure is None:  # nothing ran out: an operator paused it (`restate invocations pause`)
            operator = "(an operator's `restate invocations pause`)"
            return f"{where}, which is paused, with no failure recorded {operator}"
        # Restate pauses an invocation once its attempts run out, and so does an operator's pause.
        why = "its retries ran out, or an operator paused it"
        return f"{where}, which is paused ({why}); last failure{code}: {failure}"
    attempt = "" if invocation["retry_count"] is None else f"attempt {invocation['retry_count']} "
    told = f"{attempt}failed{code}: {failure}" if failure else "its last failure is not recorded"
    then = f"; next attempt at {invocation['next_retry_at']}" if invocation["next_retry_at"] else ""
    return f"{where}, which Restate is retrying: {told}{then}"


def groups_close(args: argparse.Namespace) -> int:
    from ..engine import PUMP, named
    from ..inspection import CloseRefused, InspectionError, close_group

    if (failed := prefix_from_args(args)) is not None:
        return failed
    try:
        result = close_group(
            AdminApi.from_env(args.admin_url),
            args.key,
            cancel=args.cancel,
            force=args.force,
            ingress=args.ingress_url,
        )
    except CloseRefused as exc:
        if args.json:  # a script reading stdout learns of the refusal there too
            print(json.dumps({"group_key": args.key, "closed": False, "refused": exc.message}))
        return fail(str(exc), REFUSED)
    except InspectionError as exc:
        return fail(str(exc))
    if args.json:
        print(json.dumps(result.as_dict()))
    elif result.closed:
        cancels = ""
        if result.cancelled and result.pumped:  # to its pump (and a reopen's): each cancels what it runs
            cancels = (
                f", {result.cancelled} cancel(s) sent to its pump and re-dispatched runs, "
                "which cancel every child not settled"
            )
        elif result.cancelled:
            cancels = f", {result.cancelled} cancel(s) sent, one per child not settled"
        print(f"closed {args.key} (it was {result.was}; losers: {result.disposition}{cancels})")
        if result.running:
            print(f"{len(result.running)} of its children still run, as a RunToCompletion group's do:")
            # A bounded group's child not started yet has no invocation of its own: its pump starts it.
            pump = " or ".join(result.pumps) or f"{named(PUMP)}/…:{args.key}"
            for child in result.running[:_RUNNING_SHOWN]:
                if child.invocation_id is None:
                    print(
                        f"  child {child.position} ({child.replay_key}): waiting; the pump {pump} starts it"
                    )
                else:
                    print(
                        f"  child {child.position} ({child.replay_key}): {child.invocation_id} {child.status}"
                    )
            if len(result.running) > _RUNNING_SHOWN:
                print(f"  and {len(result.running) - _RUNNING_SHOWN} more (--json lists every one)")
            print(
                "cancel one with `restate invocations cancel ID` (a close with --cancel cancels them "
                "with it; this group is closed now)"
            )
            if any(child.invocation_id is None for child in result.running):
                print(
                    f"a child waiting has no ID until its pump starts it: `restate invocations cancel "
                    f"{result.pumps[0] if len(result.pumps) == 1 else 'PUMP_ID'}` cancels what the pump "
                    "runs and starts no more"
                )
    else:
        print(f"{args.key} is not open (closed already, or never opened): nothing to close")
    return 0


def groups_redispatch(args: argparse.Namespace) -> int:
    from ..inspection import InspectionError, redispatch_missed

    if (failed := prefix_from_args(args)) is not None:
        return failed
    if (args.key is None) == (not args.all):
        return fail("name one group KEY, or pass --all for every group with missed children", USAGE)
    try:
        results = redispatch_missed(AdminApi.from_env(args.admin_url), args.key, ingress=args.ingress_url)
    except InspectionError as exc:
        return fail(str(exc))
    if not results and args.key is not None:  # the group named is open only if it has a result
        return fail(f"no open group {args.key!r}", NOT_OPEN)
    failed = 1 if any(r.error is not None for r in results) else 0
    if args.json:
        print(json.dumps([r.as_dict() for r in results]))
        return failed
    for r in results:
        if r.error is not None:
            print(f"{r.group_key}: not dispatched again: {r.error}")
            continue
        if r.refused is not None:
            print(f"{r.group_key}: nothing dispatched again: {r.refused}")
            continue
        still = f"; {r.unroutable} still have no runner on the endpoint" if r.unroutable else ""
        print(f"{r.group_key}: {r.dispatched} child(ren) dispatched again{still}")
    if not results:
        print("no open group has children whose runner was missing")
    return failed


def groups_staged(args: argparse.Namespace) -> int:
    from ..inspection import InspectionError, left_outcomes, left_staged, release_outcome, release_staged

    if (failed := prefix_from_args(args)) is not None:
        return failed
    try:
        admin = AdminApi.from_env(args.admin_url)
        parts = left_staged(admin)
    except InspectionError as exc:
        return fail(str(exc))
    unread: list[str] = []  # the children's stores are read on their own: the pumps' are still listed
    try:
        outcomes = left_outcomes(admin)
    except InspectionError as exc:
        outcomes = []
        unread.append(f"the outcomes children kept could not be listed: {exc}")
    if args.key is not None:  # a shared cluster: the operator's own group alone
        parts = [part for part in parts if part.group_key == args.key]
        outcomes = [left for left in outcomes if _group_of_child(left.child_key) == args.key]
    # Each is released on its own: one that fails stops none of the others, nor hides them.
    _, errors = _each(parts, lambda part: release_staged(admin, part), args.release)
    _, unreleased = _each(outcomes, lambda left: release_outcome(admin, left), args.release)
    failed = _exit_code(unread, errors, unreleased)
    if args.json:
        rows = [
            {**item, "released": args.release and why is None, "error": why}
            for item, why in zip(
                [*(p.as_dict() for p in parts), *(o.as_dict() for o in outcomes)],
                [*errors, *unreleased],
                strict=True,
            )
        ]
        print(json.dumps(rows))
        return failed
    for part, why in zip(parts, errors, strict=True):
        if part.holds == "outcomes":
            by = "the outcomes its pump kept for a group that is gone without releasing them"
        else:
            by = f"staged by {part.opener}, which ended" if part.opener else "its opener is long gone"
        done = f"not released ({why})" if why else "released" if args.release else "left"
        print(f"{done} {part.pump_key} (group {part.group_key}; {by})")
    for left, why in zip(outcomes, unreleased, strict=True):
        done = f"not released ({why})" if why else "released" if args.release else "left"
        stores = ", ".join(left.incarnations)
        print(f"{done} the child {left.child_key}'s outcome for a group that is gone (incarnation {stores})")
    if not parts and not outcomes and not unread:
        of = f" of {args.key}" if args.key is not None else ""
        print(f"no parts left staged, and no outcomes a group that is gone left (in a pump or a child){of}")
    elif not args.release:
        print(
            f"{len(parts) + len(outcomes)} pump(s) or child(ren) hold what no group will read: "
            "--release frees them"
        )
    return failed


def groups_stranded(args: argparse.Namespace) -> int:
    from ..inspection import (
        InspectionError,
        look_again,
        resend_open,
        resubscribe,
        stranded_opens,
        stranded_subscriptions,
        stranded_wakes,
    )

    if (failed := prefix_from_args(args)) is not None:
        return failed
    try:
        admin = AdminApi.from_env(args.admin_url)
        opens = _only(args, stranded_opens(admin, sent_before_s=args.sent_before))
    except InspectionError as exc:
        return fail(str(exc))
    unread: list[str] = []  # each later listing is read on its own: the opens found are still listed
    try:
        wakes = _only(args, stranded_wakes(admin))
    except InspectionError as exc:
        wakes = []
        unread.append(f"the callers waiting on wakes could not be listed: {exc}")
    try:
        subscriptions = _only(args, stranded_subscriptions(admin, sent_before_s=args.sent_before))
    except InspectionError as exc:
        subscriptions = []
        unread.append(f"the event children waiting on a subscription could not be listed: {exc}")
    # Each is sent again on its own: one refused (or an ingress that fails it) neither stops the
    # others nor hides those already sent, which a second run would send once more.
    ingress = args.ingress_url
    resent, refused = _each(opens, lambda o: resend_open(admin, o, ingress=ingress), args.resend)
    looked, unlooked = _each(wakes, lambda w: look_again(admin, w, ingress=ingress), args.resend)
    again, unsent = _each(subscriptions, lambda s: resubscribe(admin, s, ingress=ingress), args.resend)
    if args.json:
        rows = [
            *_rows("open", [o.as_dict() for o in opens], resent, refused),
            *_rows("wakes", [w.as_dict() for w in wakes], looked, unlooked),
            *_rows("event", [e.as_dict() for e in subscriptions], again, unsent),
        ]
        print(json.dumps(rows))
        return _stranded_exit(args, [*opens, *wakes, *subscriptions], unread, refused, unlooked, unsent)
    for o, new, why in zip(opens, resent, refused, strict=True):
        done = f"; sent again as {new}" if new else f"; not sent again: {why}" if why else ""
        print(f"{o.caller} waits for its {o.handler} of {o.group_key}: {o.sent} ended {o.ended}{done}")
    for w, new, why in zip(wakes, looked, unlooked, strict=True):
        done = f"; looked at again by {new}" if new else f"; not looked at again: {why}" if why else ""
        guards = f" (pending: {', '.join(w.guards)})" if w.guards else ""
        print(
            f"{w.caller} waits on {len(w.wakes)} wake(s) its {w.handler} ({w.sent}) registered with "
            f"{w.group_key}: {w.ended}{guards}{done}"
        )
    for e, new, why in zip(subscriptions, again, unsent, strict=True):
        done = f"; subscribed again as {new}" if new else f"; not subscribed again: {why}" if why else ""
        print(f"{e.caller} (child {e.child}) waits on event {e.event}: {e.ended}{done}")
    if not opens and not wakes and not subscriptions and not unread:
        narrowed = " (of those --caller and --key name)" if args.caller or args.key else ""
        print(
            "no caller waits for an open that ended unanswered, nor on a group whose record is gone, "
            f"nor on an event that lost its subscription{narrowed}"
        )
    elif not args.resend:
        print(
            f"{len(opens) + len(wakes) + len(subscriptions)} wait(s) for what nothing will answer: "
            "--resend sends each open again, has each gone group look at its wakes (which ends "
            "them), and subscribes each event child again"
        )
    return _stranded_exit(args, [*opens, *wakes, *subscriptions], unread, refused, unlooked, unsent)


def _stranded_exit(
    args: argparse.Namespace, listed: list[object], unread: list[str], *refusals: list[str | None]
) -> int:
    """`groups stranded`'s exit: `_exit_code`'s; with ``--check`` and nothing else wrong, STRANDED
    while anything is listed that was not sent again (a cron's alarm), else 0."""
    code = _exit_code(unread, *refusals)
    if code == 0 and args.check and listed and not args.resend:
        return STRANDED
    return code


def _only(args: argparse.Namespace, listed: list[_T]) -> list[_T]:
    """What `groups stranded` lists, narrowed to ``--caller`` and ``--key`` (a group's key, or an
    event's name), so a ``--resend`` on a shared cluster acts on the operator's own callers alone."""
    return [
        item
        for item in listed
        if (args.caller is None or getattr(item, "caller", None) == args.caller)
        and (args.key is None or args.key in _keys_of(item))
    ]


def _keys_of(item: object) -> set[str]:
    """The keys `--key` matches a stranded item by: its group's, or an event child's event and the
    group its key names (a child's key is its replay key, `{group key}/{position}` by default)."""
    keys = {getattr(item, "group_key", None), getattr(item, "event", None)}
    child = getattr(item, "child", None)
    if isinstance(child, str):
        keys.add(_group_of_child(child))
    return {key for key in keys if key}


def _group_of_child(child_key: str) -> str:
    """The group a child's key names: its replay key is `{group key}/{position}` (the front door's;
    a caller that named its children's replay keys itself gives keys that name no group)."""
    return child_key.rpartition("/")[0]


def _rows(
    on: str, listed: list[dict[str, Any]], news: list[str | None], whys: list[str | None]
) -> list[dict[str, Any]]:
    """`groups stranded --json`'s rows of one kind: what each waits on, and what became of it."""
    return [
        {**row, "waits_on": on, "resent": new, "refused": why}
        for row, new, why in zip(listed, news, whys, strict=True)
    ]


def _exit_code(unread: list[str], *refusals: list[str | None]) -> int:
    """A listing command's exit: 1 if anything was refused, or a listing could not be read (said)."""
    for why in unread:
        fail(why)
    return 1 if unread or any(any(r) for r in refusals) else 0


def _each(items: list[_T], act: Callable[[_T], _R], acting: bool) -> tuple[list[_R | None], list[str | None]]:
    """``act`` on each of ``items`` on its own (when ``acting``): what each gave, and why each that
    failed did (its `InspectionError`), one of each per item, so none stops or hides another."""
    from ..inspection import InspectionError

    done: list[_R | None] = []
    errors: list[str | None] = []
    for item in items if acting else []:
        try:
            done.append(act(item))
            errors.append(None)
        except InspectionError as exc:
            done.append(None)
            errors.append(str(exc))
    left = len(items) - len(done)
    return done + [None] * left, errors + [None] * left
