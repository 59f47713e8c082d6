"""`lash-restate rollback-check`: what stands between this release and registering the baseline again."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from ..admin import AdminApi
from ._common import NOT_SAFE, REFUSED, fail, prefix_from_args

if TYPE_CHECKING:
    from ..inspection import RollbackBlocker

__all__ = ["rollback_check"]

# What clears each kind of blocker, as the upgrade guide's Rolling back section says.
_CLEARS = {
    "group": "let it finish or close it (lash-restate groups close KEY)",
    "waiter": (
        "emit the event (its child waits even after its group closed, if the group let its losers "
        "run to completion; lash's clear keeps its waiters), or close the waiting child's group "
        "while it is open"
    ),
    "pending": (
        "--kill-pending kills them, once nothing else is listed (a group's pump and runs end with "
        "their group: clear the groups first)"
    ),
    "metadata": "read it on this release first (close its group), or do not roll back",
}
_SHOWN = 5  # per kind; the rest are counted


def rollback_check(args: argparse.Namespace) -> int:
    from ..engine import BASELINE
    from ..inspection import InspectionError, kill_pending, rollback_blockers

    if (failed := prefix_from_args(args)) is not None:
        return failed
    try:
        admin = AdminApi.from_env(args.admin_url)
        blockers = rollback_blockers(admin)
        # Only once nothing but pending invocations is left: one of a group still open (its pump, say)
        # is working, and killed it would end that group's children as killed.
        killing = args.kill_pending and all(b.kind == "pending" for b in blockers)
        killed: list[str] = []
        if killing and blockers:
            killed = kill_pending(admin)
            blockers = rollback_blockers(admin)  # what is left, if anything
    except InspectionError as exc:
        return fail(str(exc))
    if args.json:
        print(json.dumps({"killed": killed, "blockers": [b.as_dict() for b in blockers]}))
    else:
        _print(blockers, killed, BASELINE)
    if args.kill_pending and not killing:
        # A pending invocation of a group still open is working: its pump, say.
        return fail("--kill-pending killed nothing: clear the groups, waiters and metadata first", REFUSED)
    return fail(f"{len(blockers)} thing(s) stand in the way of a rollback", NOT_SAFE) if blockers else 0


def _print(blockers: list[RollbackBlocker], killed: list[str], baseline: str) -> None:
    if killed:
        print(f"killed {len(killed)} invocation(s) pending for handlers the baseline does not serve")
    if not blockers:
        print(
            f"nothing stands in the way of the baseline ({baseline}): register it as the newest deployment, "
            "served at a new URL beside this release's (never --force over this release's URL)"
        )
        return
    print(f"rolling back to the baseline ({baseline}) is not safe yet:")
    for kind, clears in _CLEARS.items():
        found = [b for b in blockers if b.kind == kind]
        for blocker in found[:_SHOWN]:
            print(f"  {kind} {blocker.where}: {blocker.what}")
        if len(found) > _SHOWN:
            print(f"  … and {len(found) - _SHOWN} more of {kind}")
        if found:
            print(f"    to clear: {clears}")
