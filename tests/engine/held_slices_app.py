"""The default test endpoint (`serve --with-turn`, the demo tools), except that a wide group's pump of
its second slice (the first further one; in a group of six slices or more, the pump of the subtree of
slices 1 and 2) first waits an hour (a durable sleep) before it calls anything: the moment a pump's
own work before its first call takes (its plan, its state) held open, for a test that cancels that
pump there with Restate's CLI. With `HELD_SLICE=0` in its environment, the group's own pump instead
(the root of the tree, before it has called the pumps of the further slices). With `HELD_GATE=PATH`,
the held pump, once cancelled, goes on holding until that file exists, and only then ends cancelled.
A group opened in parts is held the same way (its pumps' `run_parts`)."""

from __future__ import annotations

import asyncio
import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import restate

from lash_restate.cli import main
from lash_restate.engine.group._mode import PUMP_SLICE, position_of
from lash_restate.engine.pump import _pump_run
from lash_restate.engine.pump._pump_calls import dispatch_all, plan_all

HELD = int(os.environ.get("HELD_SLICE", "1"))  # the slice whose pump is held: 1, the first further
GATE = os.environ.get("HELD_GATE")


async def _gate() -> None:
    while GATE is not None:
        if await asyncio.to_thread(Path(GATE).exists):
            break
        await asyncio.sleep(0.05)  # a file the test creates: there is nothing to await


async def _hold(ctx: restate.ObjectContext, children: list[Any]) -> None:
    if not children or position_of(children[0]) // PUMP_SLICE != HELD:
        return
    try:
        await ctx.sleep(timedelta(hours=1))
    except restate.TerminalError:
        if GATE is not None:  # cancelled: it ends so once the test opens the gate
            await ctx.run_typed("gate", _gate)
        raise


async def _held_plan_all(ctx: restate.ObjectContext, children: list[Any], *args: Any) -> Any:
    await _hold(ctx, children)
    return await plan_all(ctx, children, *args)


async def _held_dispatch_all(ctx: restate.ObjectContext, children: list[Any], *args: Any) -> Any:
    await _hold(ctx, children)
    return await dispatch_all(ctx, children, *args)


if __name__ == "__main__":
    vars(_pump_run)["plan_all"] = _held_plan_all  # what each pump of this endpoint plans with
    vars(_pump_run)["dispatch_all"] = _held_dispatch_all  # and calls with, opened in parts
    [_, port, *rest] = sys.argv[1:]  # --port N, then what `serve` takes
    raise SystemExit(main(["serve", "--host", "127.0.0.1", "--port", port, *rest]))
