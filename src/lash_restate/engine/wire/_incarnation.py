"""A group's incarnation, as the engine writes it: a UUID with marks that tell its layout to every
handler and pump that holds it (a paged group's ranks, a bounded group's one pump, a group that
records saves), so that no record has to say it."""

from __future__ import annotations

import re

from ._messages import READ_BUDGET, READ_BUDGET_SINCE_BASELINE
from ._records import SAVES

__all__ = [
    "BOUNDED",
    "INCARNATION",
    "PAGED",
    "bound_mark",
    "bound_of",
    "calls_as_native",
    "cursor_names",
    "journals_call_routes",
    "layout_of",
    "opened_since_baseline",
    "read_budget",
    "reads_ahead",
    "registers_wakes_as_needed",
    "runs_name_their_incarnation",
    "serves_one_rank",
    "watches_its_open",
    "watches_its_runs",
]

# The prefix of a paged group's incarnation (a UUID follows it): its layout is told by this alone
# (`group/_ranks.py` `ranks_for`, and `layout_of` below for an operator).
PAGED = "p-"


# The mark of a bounded group's incarnation, after `PAGED` and before the UUID (`bound_mark`).
BOUNDED = "w"
# An incarnation as this engine writes it: a UUID, after `PAGED` if paged and `w{K}-` if bounded, and
# before `SAVES` if it records saves (an earlier release's carries neither mark).
INCARNATION = re.compile(
    rf"(?:{PAGED})?(?:{BOUNDED}[0-9]+-)?"
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    rf"(?:{SAVES})?"
)


def bound_mark(bound: int | None) -> str:
    """What a bounded group's incarnation carries after `PAGED` (decision 81): ``w{K}-``; else nothing."""
    return "" if bound is None else f"{BOUNDED}{bound}-"


def bound_of(incarnation: str) -> int | None:
    """The bound ``max_in_flight`` of the group of ``incarnation`` (or of one of its pumps'), or None.

    A bounded group's one pump runs every child and keeps every outcome: the bound is in the
    incarnation, which every pump's run, re-dispatch and every reader of an outcome already holds.
    """
    rest = incarnation.removeprefix(PAGED)
    if not rest.startswith(BOUNDED):  # a UUID never starts with it
        return None
    return int(rest[len(BOUNDED) :].partition("-")[0])


def opened_since_baseline(incarnation: str) -> bool:
    """Whether the group of ``incarnation`` was opened by a release after the baseline: one opened in
    one message ends in `SAVES` (the first mark a later release wrote, when it began to record saves:
    decision 78), one opened in parts (which no earlier release did) is paged. Every way such a group
    differs from a baseline group keys off this (the predicates below). A group the baseline opened
    has neither mark: its openers' saves are not recorded (the baseline's `save()` journaled
    nothing, and its callers' replays must match), and it is never reclaimed.

    The incarnation is in the open's reply, which the opener journals, so a replay decides as its
    first run did."""
    return incarnation.endswith(SAVES) or incarnation.startswith(PAGED)


def layout_of(incarnation: str) -> str:
    """How the group of ``incarnation`` keeps its ranks and was opened, as an operator reads it:
    ``flat`` (its ranks in its record), ``paged`` (in pages: a pumped group wider than one slice,
    opened in one message) or ``parts`` (in pages, opened in parts: its incarnation is the stage its
    opener chose, which records no saves' mark)."""
    if not incarnation.startswith(PAGED):
        return "flat"
    return "paged" if incarnation.endswith(SAVES) else "parts"


def serves_one_rank(incarnation: str) -> bool:
    """Whether a plain await asks the group of ``incarnation`` for the one rank it serves (decision
    96), as its caller's journal shows: every group a release that records saves opened (that came
    after). A caller of a group the baseline opened asks as the baseline did, for every rank."""
    return opened_since_baseline(incarnation)


def registers_wakes_as_needed(incarnation: str) -> bool:
    """Whether a caller's read of the group of ``incarnation`` that finds a rank not yet registered
    sends one wake, not a window of them, when the group's last answer to it served ranks (the
    group is ahead of the reader, which the window's wakes would not serve: decision 132): every
    group a release that records saves opened. A caller of a group the baseline opened sends the
    window, as its journal holds."""
    return opened_since_baseline(incarnation)


def reads_ahead(incarnation: str) -> bool:
    """Whether a plain await of the group of ``incarnation`` with nothing read ahead for its rank asks
    for a window of ranks and reads ahead the outcomes their store keeps, and one with its rank read
    ahead asks for that rank alone, with no wake (decision 134): every group a release that records
    saves opened. A caller of a group the baseline opened asks for one rank and reads it."""
    return opened_since_baseline(incarnation)


def read_budget(incarnation: str) -> int:
    """The bytes a caller's bulk read of the group of ``incarnation`` asks its stores for in all, past
    the first outcome (decision 142): `READ_BUDGET_SINCE_BASELINE` for every group a release that
    records saves opened, so that no answer nears what Restate lets one invocation have in flight;
    `READ_BUDGET` for a group the baseline opened, as its callers journaled their reads."""
    return READ_BUDGET_SINCE_BASELINE if opened_since_baseline(incarnation) else READ_BUDGET


def watches_its_runs(incarnation: str) -> bool:
    """Whether the group of ``incarnation`` watches every run it dispatched and keeps each child whose
    runner was missing (decisions 73 and 74), so that it knows which unsettled children a reopen must
    run again (decision 95): every group a release that records saves opened (those came after both).
    A group the baseline opened does neither, and a reopen runs again every unsettled child of it."""
    return opened_since_baseline(incarnation)


def watches_its_open(incarnation: str) -> bool:
    """Whether a caller that first opened the group of ``incarnation`` awaits its open's end beside
    its wakes (decision 144), attached once the open answered: a kill of the open while it runs
    kills every child it had started, and the caller then ends with `GroupNotOpen`, where it would
    wait for ever: every group a release that records saves opened. A caller of a group the baseline
    opened attaches to nothing, as its journal holds."""
    return opened_since_baseline(incarnation)


def calls_as_native(incarnation: str) -> bool:
    """Whether a call child of the group of ``incarnation`` sends its callee what a native call sends
    (decision 111): no argument (``None``) as an empty body, which every SDK's serde reads as none,
    where a JSON ``null`` fails a handler that takes an optional model: every group a release that
    records saves opened. A group the baseline opened sends ``null``, as its children and pumps
    journaled it."""
    return opened_since_baseline(incarnation)


def runs_name_their_incarnation(incarnation: str) -> bool:
    """Whether a pump of the group of ``incarnation`` runs a child through `LashChild/execute2`, which
    names the incarnation (decision 111), so that the child calls as the group does and a miss it
    reports is fenced by it as a `run`'s is: every group a release that records saves opened. A
    pump of a group the baseline opened calls `execute`, as it journaled it."""
    return opened_since_baseline(incarnation)


def journals_call_routes(incarnation: str) -> bool:
    """Whether a call child of the group of ``incarnation`` run through `LashChild` journals what it
    decided of its target (this endpoint routes it; the cluster registers it) before it calls it, so
    that a replay on a process that routes or declares otherwise calls as its first run did
    (decision 103, amended): every group a release that records saves opened. A child of a group the
    baseline opened decides again on a replay, as its journal holds no such step."""
    return opened_since_baseline(incarnation)


def cursor_names(incarnation: str) -> str | None:
    """The incarnation a cursor of the group of ``incarnation`` names, so that it reads no group
    opened under the key since (decision 124): its own, for every group a release that records saves
    opened. None for a group the baseline opened, whose cursor the baseline reads back after a
    rollback (its handle refuses a field it does not know) and whose callers journaled none."""
    return incarnation if opened_since_baseline(incarnation) else None
