"""A process that only calls lash: it serves one service of its own and none of lash's, which
another deployment of the same cluster serves. ``--served-elsewhere`` declares that
(`lash.use_prefix()`); without it the process has no resolver and does no groups.

``Caller/race`` answers what its controller's `supports_effect_groups()` said and what a race of one
echo tool gave (the value, or the code of the refusal).
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import restate

import lash_restate as lash

caller = restate.Service("Caller")


@caller.handler()
async def race(ctx: restate.Context, value: str) -> dict[str, Any]:
    supports = lash.controller(ctx).supports_effect_groups()
    try:
        won = await lash.race(ctx, [lash.tool("echo", {"value": value})])
    except lash.LashError as error:
        return {"supports": supports, "refused": error.code.value}
    return {"supports": supports, "value": won}


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--served-elsewhere", action="store_true")
    args = parser.parse_args()
    if args.served_elsewhere:
        lash.use_prefix()
    asyncio.run(lash.serve(restate.app([caller]), "127.0.0.1", args.port))
