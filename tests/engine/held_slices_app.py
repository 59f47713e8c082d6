"""The default test endpoint (`serve --with-turn`, the demo tools), except that a wide group's pump of
its second slice (the first further one; in a group of six slices or more, the pump of the subtree of
slices 1 and 2) first waits an hour (a durable sleep) before it calls anything: the moment a pump's
own work before its first call takes (its plan, its state) held open, for a test that cancels that
pump there with Restate's CLI. With `HELD_SLICE=0` in its environment, the group's own pump instead
(the root of the tree, before it has called the pumps of the further slices)."""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from typing import Any

import restate

from lash_restate.cli import main
from lash_restate.engine.group._mode import PUMP_SLICE, position_of
from lash_restate.engine.pump import _pump_run
from lash_restate.engine.pump._pump_calls import plan_all

HELD = int(os.environ.get("HELD_SLICE", "1"))  # the slice whose pump is held: 1, the first further


async def _held_plan_all(ctx: restate.ObjectContext, children: list[Any], *args: Any) -> Any:
    if children and position_of(children[0]) // PUMP_SLICE == HELD:
        await ctx.sleep(timedelta(hours=1))
    return await plan_all(ctx, children, *args)


if __name__ == "__main__":
    vars(_pump_run)["plan_all"] = _held_plan_all  # what each pump of this endpoint plans with
    [_, port, *rest] = sys.argv[1:]  # --port N, then what `serve` takes
    raise SystemExit(main(["serve", "--host", "127.0.0.1", "--port", port, *rest]))
