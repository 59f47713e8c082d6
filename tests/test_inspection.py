"""The operator's inspection, on what it reads (no server): which child invocations are a group's."""

from __future__ import annotations

from typing import Any

import pytest

import lash_restate.inspection._paused as inspection_paused
from lash_restate.engine import GROUP_SHARED
from lash_restate.inspection._paused import created_before, holds_up_group

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


def _paused(handler: str, key: str = "s:group:b:0", service: str = "LashGroup") -> dict[str, Any]:
    return {
        "id": f"inv_{handler}",
        "target_service_name": service,
        "target_service_key": key,
        "target_handler_name": handler,
    }


def test_a_paused_handler_of_the_groups_own_object_holds_it_up_unless_it_is_shared() -> None:
    """A paused `guard` (or `report`, `open`, any handler that runs one at a time on the group's key)
    holds up the group's reports, reads and close, and is counted; a paused `watch_runs` (shared, it
    runs beside them) does not hold it up, nor does another object's paused handler."""
    rows = [
        _paused("guard"),
        _paused("watch_runs"),
        _paused("report", key="s:group:other:0"),
        _paused("run2", key="i:s:group:b:0", service="LashPump"),
    ]
    assert [holds_up_group(row) for row in rows] == [True, False, True, False]
    assert {"watch", "hold", "operator_resend", "watch_runs"} == GROUP_SHARED
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(inspection_paused, "paused_rows", lambda admin, status: rows[:2])
        patch.setattr(inspection_paused, "paused_paths", lambda admin, paused: {})
        counted = inspection_paused.paused_by_group("http://admin", {"s:group:b:0": ("i", 0)})
    assert counted == {"s:group:b:0": 1}
