"""The group's hot record: what decides that a declared Cancel applies (decision 13)."""

from __future__ import annotations

import itertools

from lash_restate.contract import GroupWakePolicy, LoserPolicy
from lash_restate.engine import GroupMeta
from lash_restate.engine._records import Opener


def _meta(*callers: str) -> GroupMeta:
    openers = [Opener(caller=c, watcher=f"w-{c}") for c in callers]
    return GroupMeta(
        child_count=2,
        wake=GroupWakePolicy.FIRST,
        disposition=LoserPolicy.CANCEL,
        incarnation="i",
        openers=openers,
    )


def test_a_group_is_severed_only_once_every_opener_ended_and_the_latest_failed() -> None:
    assert not _meta().severed  # nobody opened it under watch: nothing to apply
    assert not _meta("a").severed  # still live
    assert _meta("a").opener_ended("a", failed=True).severed
    assert not _meta("a").opener_ended("a", failed=False).severed  # returned: a parked continuation


def test_severance_does_not_depend_on_the_order_the_ends_are_reported_in() -> None:
    """A opened and returned (parked); B reopened to resume and was killed: severed, either way round.
    A killed while B holds the group, B then returns: not severed, either way round."""
    for ends in itertools.permutations([("a", False), ("b", True)]):
        meta = _meta("a", "b")
        for caller, failed in ends:
            meta = meta.opener_ended(caller, failed)
        assert meta.severed, ends
    for ends in itertools.permutations([("a", True), ("b", False)]):
        meta = _meta("a", "b")
        for caller, failed in ends:
            meta = meta.opener_ended(caller, failed)
        assert not meta.severed, ends
