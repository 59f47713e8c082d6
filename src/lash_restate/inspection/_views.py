"""What inspection answers: an open group as `groups list` shows it, and as `groups show` shows it
with its openers and children."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["ChildView", "GroupView", "OpenGroup", "OpenerView", "PausedView", "RetryingView"]


@dataclass(frozen=True)
class OpenGroup:
    group_key: str
    child_count: int
    settled: int
    wake: str
    disposition: str
    mode: str  # how its children settle: "direct", or in batches through one pump (decision 20)
    state: str  # "open" (an opener runs), "parked" (a continuation holds it) or "orphaned" (nobody does)
    orphaned: bool  # state == "orphaned": the ADR's leak, countable (and closable) by an operator
    age_s: int | None  # seconds since it was first opened (None: its open is not timed)
    # Its children with an invocation Restate paused on their path (their own, or a call they made),
    # each once, its paused pumps (after their retries ran out, or by `restate invocations pause`),
    # and its own object's paused handlers that run one at a time on its key, holding the group up.
    paused: int
    missed: int = 0  # children whose runner was missing: their run ended with no outcome
    # As `paused` counts them, what Restate is retrying after a failure instead (backing off between
    # attempts, by its retry policy: a handler that raised a plain exception, say).
    retrying: int = 0
    # An orphan nobody can resume is reclaimed (closed) at this time (UTC, ISO 8601), or later if its
    # children still run then; None for any other group.
    reclaim_at: str | None = None
    # This opening of the key, as its pumps' keys and an operator's close name it. One opened since
    # the baseline release ends in "-s" (in one message) or starts with "p-" (paged, or opened in
    # parts): a rollback to the baseline must leave none of those open.
    incarnation: str = ""
    # Where its ranks are kept, and how it was opened: "flat" (in its record), "paged" (in pages, a
    # pumped group wider than one slice) or "parts" (in pages, opened in parts), from its incarnation.
    layout: str = "flat"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class OpenerView:
    """An invocation that opened the group, whether it is still running, and how it ended if known."""

    invocation_id: str
    alive: bool
    # "returned" | "killed" | "cancelled" | "failed" | None (running, or its end is not known)
    ended: str | None = None
    status: str | None = None  # as `sys_invocation` shows it ("paused", say); None once Restate forgot it


@dataclass(frozen=True)
class PausedView:
    """An invocation Restate paused: the child's own, or the call it made. It waits for an operator."""

    invocation_id: str
    target: str  # service/handler (and key) as Restate shows it
    retry_count: int | None
    last_failure: str | None
    last_failure_error_code: str | None


@dataclass(frozen=True)
class RetryingView(PausedView):
    """An invocation Restate is retrying after a failure (backing off between attempts): the child's
    own, or the call it made. It retries by its retry policy; nothing waits for an operator yet."""

    next_retry_at: str | None  # UTC, ISO 8601, as Restate schedules its next attempt


@dataclass(frozen=True)
class ChildView:
    """One child: its rank and outcome's kind (a rejection's code too) once settled, and its
    invocation as Restate shows it."""

    position: int
    replay_key: str
    rank: int | None
    outcome: str | None  # "ok" | "err" | "cancelled", while its outcome is stored
    invocation_id: str | None
    status: str | None  # its invocation's status in sys_invocation; "waiting" until a bounded group starts it
    paused: PausedView | None = None  # what Restate paused on this child's path, and its last failure
    missed: bool = False  # its runner was missing: it ended with no outcome; `groups redispatch` reruns it
    retrying: RetryingView | None = None  # what Restate is retrying on this child's path, and why
    # A rejected child's code ("409" for a killed callee, a callee's own status, a tool's code), read
    # from its stored outcome's first KiB: None for another outcome, or one that gave none there.
    code: str | None = None


@dataclass(frozen=True)
class PumpView:
    """One of the group's `LashPump` invocations not yet completed: each calls a slice of its children
    and reports what settles. An operator's pause of one stalls every child it reports."""

    invocation_id: str
    handler: str  # run2 (the group's first), run_parts, redispatch, fail, …
    key: str  # `{incarnation}:{group key}`, a further slice's `{incarnation}.{slice}:{group key}`
    status: str  # in sys_invocation: running, suspended, paused, …
    # Its children that have finished and hold no rank yet: it has not reported them. A kill of the
    # pump settles them as killed, finished or not (`groups show` fills it in).
    unreported: int = 0


@dataclass(frozen=True)
class HeldView:
    """A handler of the group's own object that Restate holds paused, or retries after a failure, and
    that runs one at a time on its key: the group's reports, reads and close queue behind it until it
    succeeds (resumed, if paused) or is killed."""

    invocation_id: str
    handler: str  # guard, report, open, …
    status: str = "paused"  # or "backing-off": failing, and retried by Restate


@dataclass(frozen=True)
class GroupView(OpenGroup):
    """`groups show`: the group, its state and why, who opened it and when, every child and pump, and
    what holds it up."""

    reason: str = ""  # why it is open, parked or orphaned
    opened_at: str | None = None  # UTC, ISO 8601
    openers: list[OpenerView] = field(default_factory=list)
    children: list[ChildView] = field(default_factory=list)
    pumps: list[PumpView] = field(default_factory=list)
    held: list[HeldView] = field(default_factory=list)
