"""A deployment of one of lash's services alone (`LashSignal`, `LashGroup` or `LashPump`), for a test
that holds that service on a deployment of its own (paused) while the rest of lash runs on another:
what a subscription, a settlement, or a staged part then waits behind. With ``--hold HANDLER``, that
one handler of the service holds what it is sent, doing nothing, until Restate ends it (a group's
`close` an operator kills before it ran), and the others run as lash's do. ``--hold open-answered``
holds each first open of `LashGroup` once it has answered its caller and sent its children, before
it records what it sent: an open running, for an operator to kill or cancel."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
from typing import Any

import restate

import lash_restate as lash
from lash_restate.engine import lash_services
from lash_restate.testing.tools import demo_tools

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--service", choices=["LashSignal", "LashGroup", "LashPump"], required=True)
    parser.add_argument("--hold")
    args = parser.parse_args()
    [service] = [s for s in lash_services(demo_tools()) if s.name == args.service]
    if args.hold == "open-answered":
        from lash_restate.engine.group import _group_open

        async def answered(ctx: Any, meta: Any, handles: Any) -> Any:
            for dispatched in handles:
                await dispatched.handle.invocation_id()
            _, never = ctx.awakeable()
            await never  # nobody resolves it: held while it runs, where a kill or a cancel reaches it

        _group_open._record_runs = answered  # `on_open` looks it up at each call
    elif args.hold:

        async def held(ctx: Any, req: Any) -> None:
            await asyncio.Event().wait()  # journals nothing: what Restate ends here never ran

        service.handlers[args.hold] = dataclasses.replace(service.handlers[args.hold], fn=held)
    asyncio.run(lash.serve(restate.app([service]), "127.0.0.1", args.port))
