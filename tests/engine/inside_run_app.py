"""An application that calls lash where it must not: inside the action of a ``ctx.run``.

`Inside/run` takes ``{"entry": …, "sync": …, "inside": …}``: it calls the front-door entry point
``entry`` (``lash_select`` is `lash.select`; ``select``, a combinator on the controller) inside a
``ctx.run_typed`` action: an async one, or with ``sync`` a sync one, which drives the call on an
event loop of its own (or calls ``Group.save``, itself sync, with none). With ``inside`` false it
makes the same call in the handler body. The children are an echo and an hour-long sleep, so a race
served from inside the run would answer only once the sleep ends.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable, Coroutine
from datetime import timedelta
from typing import Any

import restate

import lash_restate as lash
from lash_restate import combinators
from lash_restate.engine import inside_run

inside = restate.Service("Inside")


def _children() -> list[lash.Child]:
    return [lash.tool("echo", {"value": "fast"}), lash.sleep(timedelta(hours=1))]


async def _opened(ctx: restate.Context) -> lash.Group:
    return await lash.open(ctx, _children(), wake=lash.GroupWakePolicy.FIRST, losers=lash.CANCEL)


def _entry(
    ctx: restate.Context, entry: str, group: lash.Group | None
) -> Callable[[], Coroutine[Any, Any, Any]]:
    """The lash call named ``entry``, as a thunk (each call makes a fresh coroutine)."""

    async def call() -> Any:
        if entry == "race":
            return await lash.race(ctx, _children(), losers=lash.CANCEL)
        if entry == "any":
            return await lash.any(ctx, _children(), losers=lash.CANCEL)
        if entry == "all":
            return await lash.all(ctx, _children()[:1])
        if entry == "all_settled":
            return [str(o) for o in await lash.all_settled(ctx, _children()[:1])]
        if entry == "lash_select":
            fast, slow = _children()
            return (await lash.select(ctx, fast=fast, slow=slow, losers=lash.CANCEL))[0]
        if entry == "select":  # a combinator on the controller, below the front door
            key = f"{ctx.request().id}:group:select:0"
            which = combinators.signal_or_deadline(
                lash.controller(ctx), key, event="never", deadline_ms=1, replay_key_prefix="select"
            )
            return (await which)[0]
        if entry == "open":
            opened = await _opened(ctx)
            await opened.close()
            return opened.key
        assert group is not None
        if entry == "next":
            return str((await group.next()).outcome)
        if entry == "close":
            await group.close()
            return "closed"
        if entry == "save":
            return group.save()
        raise restate.TerminalError(f"no entry {entry!r}", 400)

    return call


async def _probe(ctx: restate.Context) -> bool:
    return inside_run(ctx)


@inside.handler()
async def beside(ctx: restate.Context) -> dict[str, bool]:
    """Where the check takes code to be inside a run action, asked while an action of this
    invocation is running: in the action, in the handler body, and in a task the body made."""
    started, release = asyncio.Event(), asyncio.Event()
    seen: dict[str, bool] = {}

    async def held() -> str:
        seen["action"] = inside_run(ctx)
        started.set()
        await release.wait()
        return "ran"

    # Awaited from a task of its own (the SDK then runs the action), so the body goes on meanwhile.
    running = asyncio.ensure_future(ctx.run_typed("beside", held))
    await started.wait()
    seen["body"] = inside_run(ctx)
    seen["task of the body"] = await asyncio.create_task(_probe(ctx))
    seen["still running"] = not running.done()
    release.set()
    await running
    return seen


@inside.handler()
async def run(ctx: restate.Context, request: dict[str, Any]) -> Any:
    entry = str(request["entry"])
    # The per-group entries act on a group the handler body opened.
    group = await _opened(ctx) if entry in ("next", "close", "save") else None
    call = _entry(ctx, entry, group)
    if not request.get("inside", True):
        answer = await call()
    elif request.get("sync", False):

        def action() -> str:
            if group is not None and entry == "save":
                return group.save()  # sync itself: called from the action's thread, with no event loop
            return str(asyncio.run(call()))  # a sync action runs in a thread: its own loop

        answer = await ctx.run_typed("inside", action)
    else:

        async def async_action() -> str:
            return str(await call())

        answer = await ctx.run_typed("inside", async_action)
    if group is not None and entry != "close":
        await group.close()
    return answer


tools = lash.ToolRegistry()


@tools.tool("echo")
async def echo(args: dict[str, str]) -> str:
    return args["value"]


app = lash.app(inside, tools=tools)

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    asyncio.run(lash.serve(app, "127.0.0.1", parser.parse_args().port))
