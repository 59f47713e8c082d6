"""`lash-restate rollback-check`: what stands between this release and registering the baseline again."""

from __future__ import annotations

import argparse
import json

from ..admin import AdminApi
from ._common import fail, prefix_from_args

__all__ = ["rollback_check"]

# What clears each kind of blocker, as the upgrade guide's Rolling back section says.
_CLEARS = {
    "group": "let it finish or close it (lash-restate groups close KEY)",
    "waiter": "emit or clear the event, or close the waiting child's group",
    "pending": "--kill-pending kills them (a guard that runs meanwhile schedules another: run it again)",
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
        killed = kill_pending(admin) if args.kill_pending else []
        blockers = rollback_blockers(admin)
    except InspectionError as exc:
        return fail(str(exc))
    if args.json:
        print(json.dumps({"killed": killed, "blockers": [b.as_dict() for b in blockers]}))
        return 1 if blockers else 0
    if killed:
        print(f"killed {len(killed)} invocation(s) pending for handlers the baseline does not serve")
    if not blockers:
        print(f"nothing stands in the way of the baseline ({BASELINE}): register it as the newest deployment")
        return 0
    print(f"rolling back to the baseline ({BASELINE}) is not safe yet:")
    for kind, clears in _CLEARS.items():
        found = [b for b in blockers if b.kind == kind]
        for blocker in found[:_SHOWN]:
            print(f"  {kind} {blocker.where}: {blocker.what}")
        if len(found) > _SHOWN:
            print(f"  … and {len(found) - _SHOWN} more of {kind}")
        if found:
            print(f"    to clear: {clears}")
    return 1
