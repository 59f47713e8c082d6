"""Inspection of open groups through Restate's own surface: the admin API's SQL over the `state` table.

ADR: there is no TTL on group state, so orphaned groups must be countable;
the host exposes open group keys through its existing inspection surface. Services are read
under this process's prefix (`lash_restate.engine.use_prefix`; ``--prefix`` on the command line).

A group is *open* while one of its openers runs, *parked* once the latest of them returned normally
(a continuation holds its cursor) and *orphaned* otherwise: its latest opener failed or was killed,
or how it ended is not known (decision 45), or it closed the group and Restate ended that close
before it ran (decision 114). `close_group` is the operator's close; no clock closes
a group anybody can resume (one nobody can is reclaimed by the group itself, and listed with when:
decision 78). `left_staged` lists what pumps hold that no group will read (the parts an opener
killed mid-open left staged, decision 71; the outcomes a pump kept for a group that is gone),
and `release_staged` releases one; `left_outcomes` lists the outcomes narrow groups' children
kept for groups whose record was deleted, and `release_outcome` releases them. `stranded_opens`
lists the callers waiting for an open that Restate killed or cancelled, and `resend_open` sends
that open again;
`stranded_wakes` lists those waiting on wakes no group's record holds any more (cleared under
them, their guard killed), and `look_again` sends the group's look at them that ends them;
`stranded_subscriptions` lists the event children whose event lost their subscription (its state
cleared), and `resubscribe` subscribes them again.
`rollback_blockers` lists what stands in the way of registering the baseline release again, and
`kill_pending` kills what is pending for the handlers it does not serve.
"""

from __future__ import annotations

from ._groups import list_open_groups, show_group
from ._operator import (
    DEFAULT_INGRESS_URL,
    CloseRefused,
    CloseResult,
    RedispatchResult,
    close_group,
    ingress_url,
    redispatch_missed,
)
from ._rollback import RollbackBlocker, kill_pending, rollback_blockers
from ._sql import BACKING_OFF, PAUSED, InspectionError, quote, server_now_ms, sql
from ._staged import LeftOutcome, StagedPart, left_outcomes, left_staged, release_outcome, release_staged
from ._stranded import StrandedOpen, resend_open, stranded_opens
from ._subscriptions import StrandedSubscription, resubscribe, stranded_subscriptions
from ._views import ChildView, GroupView, HeldView, OpenerView, OpenGroup, PausedView, PumpView, RetryingView
from ._wakes import StrandedWakes, look_again, stranded_wakes

__all__ = [
    "BACKING_OFF",
    "DEFAULT_INGRESS_URL",
    "PAUSED",
    "ChildView",
    "CloseRefused",
    "CloseResult",
    "GroupView",
    "HeldView",
    "InspectionError",
    "LeftOutcome",
    "OpenGroup",
    "OpenerView",
    "PausedView",
    "PumpView",
    "RedispatchResult",
    "RetryingView",
    "RollbackBlocker",
    "StagedPart",
    "StrandedOpen",
    "StrandedSubscription",
    "StrandedWakes",
    "close_group",
    "ingress_url",
    "kill_pending",
    "left_outcomes",
    "left_staged",
    "list_open_groups",
    "look_again",
    "quote",
    "redispatch_missed",
    "release_outcome",
    "release_staged",
    "resend_open",
    "resubscribe",
    "rollback_blockers",
    "server_now_ms",
    "show_group",
    "sql",
    "stranded_opens",
    "stranded_subscriptions",
    "stranded_wakes",
]

# The errors name the module an application imports them from, in tracebacks and reprs, not the
# private one that defines them (as the front door's do).
InspectionError.__module__ = CloseRefused.__module__ = __name__
