"""Every state record and message the Restate host writes, and the format version it is written in.

docs/compatibility.md is the promise this table keeps: a release reads every format any release
since the baseline wrote, and writes only what the release before it reads. Format 1 is the
baseline's (commit 0450b4d); no format-1 record carries a version field, so its version is
implied by its place (the state key, or the handler it is sent to). A later format that the release
before it could not read arrives under a new state key or a new handler, never in place of an old
one; an additive field that a reader may ignore needs no new version (decision 42).

`tests/formats/` holds the bytes format 1 writes, one fixture per row of `FORMATS` and more, and
fails when an encoding changes without a new version.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

import msgspec

from ...contract import Err, Outcome, fit_outcome
from ._routes import CHILD, GROUP, PUMP, SIGNAL

__all__ = [
    "BASELINE",
    "BASELINE_HANDLERS",
    "ERROR_METADATA_ENV",
    "FORMAT",
    "FORMATS",
    "SWITCH_OFF",
    "SWITCH_ON",
    "Format",
    "stored_outcome",
    "writes_error_metadata",
    "written",
]

BASELINE: Final = "0450b4d"  # the release whose groups every later release resumes (format 1)
# The handlers the baseline serves, by role: whatever is pending for another when it is registered
# again (a rollback) is answered 404 there and holds its object's key (docs/guides/upgrade.md).
BASELINE_HANDLERS: Final[Mapping[str, tuple[str, ...]]] = MappingProxyType(
    {
        GROUP: ("caller_ended", "close", "open", "settle", "wait", "watch"),
        CHILD: ("execute", "forget", "outcome", "run"),
        PUMP: ("forget", "outcomes", "run"),
        SIGNAL: ("clear", "emit", "reject", "subscribe"),
    }
)
FORMAT: Final = 1  # the newest format this release writes anywhere


@dataclass(frozen=True)
class Format:
    """One record or message: where it lives, and the version this release writes there."""

    name: str  # what `tests/formats` calls its fixtures: "{name}.{variant}"
    where: str  # the state key or handler that implies its version
    version: int = 1
    since: str = BASELINE  # the release that first wrote it ("unreleased" until the next release)


FORMATS: Final[tuple[Format, ...]] = (
    # State, by service.
    Format("state.group.meta", "{prefix}Group state `meta`: GroupMeta"),
    Format("state.group.fence", "{prefix}Group state `fence`: GroupShape"),
    Format("state.group.invocations", "{prefix}Group state `invocations`: list of invocation ids"),
    Format(
        "state.group.opener_ends",
        "{prefix}Group state `opener_ends`: list of OpenerEnd (how each caller that saved a handle ended)",
        since="unreleased",
    ),
    Format(
        "state.group.redispatched",
        "{prefix}Group state `redispatched`: list of invocation ids (what reopens dispatched again)",
        since="unreleased",
    ),
    Format(
        "state.group.pump",
        "{prefix}Group state `pump`: PumpLink (how the close releases the pump's store)",
        since="unreleased",
    ),
    Format(
        "state.group.ranked",
        "{prefix}Group state `ranked` of a paged group: RankTail (full pages, the ranks after them)",
        since="unreleased",
    ),
    Format(
        "state.group.ranks",
        "{prefix}Group state `ranks:{page}` of a paged group: positions of 1024 ranks, a JSON array",
        since="unreleased",
    ),
    Format(
        "state.group.settled",
        "{prefix}Group state `settled:{slice}` of a paged group: its ranked positions, a JSON array",
        since="unreleased",
    ),
    Format(
        "state.group.keys",
        "{prefix}Group state `keys:{slice}` of a paged group: its children's replay keys, a JSON array",
        since="unreleased",
    ),
    Format(
        "state.group.missed",
        "{prefix}Group state `missed`: positions of the children whose runner was missing, a JSON array",
        since="unreleased",
    ),
    Format(
        "state.group.missed_child",
        "{prefix}Group state `missed:{position}`: RuntimeEffectEnvelope (a child whose runner was missing)",
        since="unreleased",
    ),
    Format(
        "state.group.cancelled_runs",
        "{prefix}Group state `cancelled_runs`: [incarnation] (it cancelled its runs: nobody could resume it)",
        since="unreleased",
    ),
    Format(
        "state.group.guarded",
        "{prefix}Group state `guarded`: each pending guard's invocation id -> the wakes it carries",
        since="unreleased",
    ),
    Format(
        "state.group.watches",
        "{prefix}Group state `watches`: list of invocation ids (what it sent itself and a close "
        "cancels: watches, holds, guards, reclaims)",
        since="unreleased",
    ),
    Format("state.child.outcome", "{prefix}Child state `outcome:{incarnation}`: Outcome"),
    Format("state.pump.outcome", "{prefix}Pump state `o{position}`: Outcome"),
    Format("state.pump.slices", "{prefix}Pump state `slices`: list of pump keys"),
    Format(
        "state.pump.ran", "{prefix}Pump state `ran`: `1` (its run of its slice began)", since="unreleased"
    ),
    Format(
        "state.pump.staged",
        "{prefix}Pump state `staged`: list of RuntimeEffectEnvelope (a slice of an open in parts)",
        since="unreleased",
    ),
    Format("state.signal.payload", "{prefix}Signal state `payload`: the emitted JSON"),
    Format("state.signal.rejection", "{prefix}Signal state `rejection`: the message, UTF-8"),
    Format(
        "state.signal.waiters",
        "{prefix}Signal state `waiters`: list of awakeable ids (an earlier release's list: read, and "
        "emptied as its waiters go; each waiter is an entry now)",
    ),
    Format(
        "state.signal.waiter",
        "{prefix}Signal state `waiter:{awakeable}`: empty (one waiting child)",
        since="unreleased",
    ),
    # Messages between lash's services, by the handler that receives them.
    Format(
        "msg.group.open",
        "{prefix}Group/open input: OpenRequest (a resume's `reopens`, omitted when absent, is newer)",
    ),
    Format("msg.group.open_reply", "the opener's awakeable: OpenReply, or an error line"),
    Format("msg.group.settle", "{prefix}Group/settle input: SettleBatch"),
    Format(
        "msg.group.wait",
        "{prefix}Group/wait input: WaitRequest (`at_most` and `incarnation`, omitted when absent, are newer)",
    ),
    Format("msg.group.wait_reply", "{prefix}Group/wait output and each wake's awakeable: WaitReply"),
    Format(
        "msg.group.close",
        "{prefix}Group/close input: CloseRequest (`incarnation`, omitted when absent, is newer)",
    ),
    Format("msg.group.report", "{prefix}Group/report input: PumpReport", since="unreleased"),
    Format("msg.group.report_reply", "{prefix}Group/report output: ReportReply", since="unreleased"),
    Format(
        "msg.group.open_parts",
        "{prefix}Group/open_parts input: PartedOpen (an open too large for one message)",
        since="unreleased",
    ),
    Format("msg.group.watch", "{prefix}Group/watch and {prefix}Group/caller_ended input: CallerEnded"),
    Format(
        "msg.group.hold",
        "{prefix}Group/hold and {prefix}Group/held input: CallerEnded (a caller that saved a handle)",
        since="unreleased",
    ),
    Format(
        "msg.group.operator_close",
        "{prefix}Group/operator_close input, from `groups close` through the ingress: OperatorClose",
        since="unreleased",
    ),
    Format(
        "msg.group.operator_closed",
        "{prefix}Group/operator_close output: OperatorClosed",
        since="unreleased",
    ),
    Format(
        "msg.group.missed",
        "{prefix}Group/missed input: MissedChildren (children whose runner was missing)",
        since="unreleased",
    ),
    Format(
        "msg.group.operator_redispatch",
        "{prefix}Group/operator_redispatch input, from `groups redispatch` through the ingress: "
        "OperatorRedispatch",
        since="unreleased",
    ),
    Format(
        "msg.group.operator_redispatched",
        "{prefix}Group/operator_redispatch output: OperatorRedispatched",
        since="unreleased",
    ),
    Format(
        "msg.group.operator_resend",
        "{prefix}Group/operator_resend input, from `groups stranded --resend` through the ingress: "
        "OperatorResend",
        since="unreleased",
    ),
    Format(
        "msg.group.operator_resent",
        "{prefix}Group/operator_resend output: OperatorResent",
        since="unreleased",
    ),
    Format(
        "msg.group.watch_runs",
        "{prefix}Group/watch_runs input: RunsWatch (what an open or a reopen dispatched)",
        since="unreleased",
    ),
    Format(
        "msg.group.saved",
        "{prefix}Group/saved input: CallerEnded (a caller saved the group's handle)",
        since="unreleased",
    ),
    Format(
        "state.group.savers",
        "{prefix}Group state `savers`: list of invocation ids (the callers that saved its handle)",
        since="unreleased",
    ),
    Format(
        "state.group.reclaim_at",
        "{prefix}Group state `reclaim_at`: ms since the epoch (when an orphan is due to be reclaimed)",
        since="unreleased",
    ),
    Format(
        "msg.group.reclaim",
        "{prefix}Group/reclaim input: Reclaim (an orphan's retention has passed)",
        since="unreleased",
    ),
    Format(
        "msg.group.guard",
        "{prefix}Group/guard input: Guard (wakes to end if the group's record is gone under them)",
        since="unreleased",
    ),
    Format(
        "msg.group.run_ended",
        "{prefix}Group/run_ended input: RunEnded (a dispatched run ended in failure)",
        since="unreleased",
    ),
    Format("msg.child.run", "{prefix}Child/run input: ChildRun"),
    Format(
        "msg.child.run_reply",
        "{prefix}Child/run output: the id of the settle it sent, a JSON string (an earlier release: nothing)",
        since="unreleased",
    ),
    Format("msg.child.execute", "{prefix}Child/execute input: RuntimeEffectEnvelope"),
    Format("msg.child.execute_reply", "{prefix}Child/execute output: Outcome"),
    Format(
        "msg.child.execute2",
        "{prefix}Child/execute2 input: ChildRun (a pump's child, told its group's incarnation)",
        since="unreleased",
    ),
    Format("msg.child.execute2_reply", "{prefix}Child/execute2 output: Outcome", since="unreleased"),
    Format(
        "msg.child.fail",
        "{prefix}Child/fail input: ChildrenFailed (one child, settled with its run's failure)",
        since="unreleased",
    ),
    Format(
        "msg.child.fail_reply",
        "{prefix}Child/fail output: the id of the settle it sent, a JSON string (earlier releases: nothing)",
        since="unreleased",
    ),
    Format("msg.child.outcome", "{prefix}Child/outcome input: the incarnation, a JSON string"),
    Format("msg.child.forget", "{prefix}Child/forget input: the incarnation, a JSON string"),
    Format("msg.pump.run", "{prefix}Pump/run input: PumpRun"),
    Format("msg.pump.run2", "{prefix}Pump/run2 input: PumpAwait", since="unreleased"),
    Format("msg.pump.stage", "{prefix}Pump/stage input: StagedPart", since="unreleased"),
    Format("msg.pump.run_parts", "{prefix}Pump/run_parts input: PumpParts", since="unreleased"),
    Format(
        "msg.pump.staged_reply",
        "{prefix}Pump/staged output: a JSON boolean (its slice's children are staged)",
        since="unreleased",
    ),
    Format(
        "msg.pump.listen",
        "the pump's awakeable (PumpReport.listen), resolved by the close: `true`",
        since="unreleased",
    ),
    Format(
        "msg.pump.fail",
        "{prefix}Pump/fail input: ChildrenFailed (a slice's children, settled with their run's failure)",
        since="unreleased",
    ),
    Format("msg.pump.outcomes", "{prefix}Pump/outcomes input: OutcomesRead, or a list of positions"),
    Format("msg.pump.outcomes_reply", "{prefix}Pump/outcomes output: a JSON array of Outcomes"),
    Format(
        "msg.pump.redispatch",
        "{prefix}Pump/redispatch input: PumpAwait (a reopen's children of one slice, not listening)",
        since="unreleased",
    ),
    Format("msg.signal.subscribe", "{prefix}Signal/subscribe input: an awakeable id, a JSON string"),
    Format(
        "msg.signal.operator_resend",
        "{prefix}Signal/operator_resend input, from `groups stranded --resend` through the ingress: "
        "OperatorResend (a `subscribe`)",
        since="unreleased",
    ),
    Format(
        "msg.signal.operator_resent",
        "{prefix}Signal/operator_resend output: OperatorResent",
        since="unreleased",
    ),
    Format(
        "msg.signal.unsubscribe",
        "{prefix}Signal/unsubscribe input: the awakeable id a cancelled child subscribed with",
        since="unreleased",
    ),
    Format("msg.error", "an awakeable's rejection or a TerminalError's message: `lash-error:{json}`"),
    # What a caller keeps: its saved cursor, and what its own journal holds.
    Format(
        "caller.handle",
        "GroupHandle.to_bytes() and Group.save(): the saved cursor (`incarnation`, omitted when absent, "
        "is newer)",
    ),
    Format("caller.execute_effect", "the caller's `execute_effect` run entry: Outcome"),
    Format("contract.envelope", "canonical envelope bytes (their hash is each child's identity)"),
)


# Whether this endpoint writes a rejection's metadata, which only this release and later ones read: the
# baseline reads an outcome strictly, and a caller pinned to it reads what this release's children
# settle (decision 118). Off until the operator says no deployment of the baseline serves lash.
ERROR_METADATA_ENV = "LASH_ERROR_METADATA"
SWITCH_ON, SWITCH_OFF = frozenset({"1", "true", "yes", "on"}), frozenset({"", "0", "false", "no", "off"})


def writes_error_metadata() -> bool:
    """Whether this process writes a rejection's metadata: ``$LASH_ERROR_METADATA`` on. Read where
    it is written, so every way a process runs lash (an app, its services alone, a caller of
    services served elsewhere) reads the one setting; an app refuses a value neither on nor off
    when it is built."""
    return os.environ.get(ERROR_METADATA_ENV, "").strip().lower() in SWITCH_ON


def written(outcome: Outcome) -> Outcome:
    """``outcome`` as this endpoint writes it: a rejection's metadata only where it is told to."""
    if not isinstance(outcome, Err) or outcome.metadata is msgspec.UNSET or writes_error_metadata():
        return outcome
    return msgspec.structs.replace(outcome, metadata=msgspec.UNSET)


def stored_outcome(outcome: Outcome) -> bytes:
    """The bytes a child stores (and a pump serves) for ``outcome``, as this endpoint writes it
    (`written`): past the limit for one message (decision 19) a call's answer, a rejection's message
    or an event's payload could never be stored or served, so the child would retry for ever; it
    settles ``too_large`` instead."""
    outcome = written(outcome)
    encoded = msgspec.json.encode(outcome)
    fitted = fit_outcome(outcome, len(encoded))
    return encoded if fitted is outcome else msgspec.json.encode(fitted)
