"""The operator's inspection, on what it reads (no server): which child invocations are a group's."""

from __future__ import annotations

from lash_restate.inspection._paused import created_before

OPENED = 1_796_000_000_000  # a group's open, by the endpoint's clock (ms)


def test_a_child_invocation_from_before_its_groups_open_is_a_namesakes() -> None:
    """`groups show` (and `close`) took a replay key's latest invocation for the group's child, a
    namesake's too (the key closed and opened again): one created well before this incarnation's
    open is not its child; one about as old, by another clock, still is."""
    iso = "2026-11-30T00:53:20.000Z"  # OPENED itself
    assert not created_before(iso, OPENED)
    assert not created_before("2026-11-30T00:53:17.000Z", OPENED)  # 3 s earlier: the clocks may differ
    assert created_before("2026-11-30T00:53:10.000Z", OPENED)  # 10 s earlier: a namesake's
    assert not created_before("2026-11-30T00:53:10.000Z", 0)  # a group recorded before opens kept a time
    assert not created_before("not a time", OPENED) and not created_before(None, OPENED)
