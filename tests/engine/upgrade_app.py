"""An application of a user's own, served by both releases in the upgrade test: handlers that call
lash's front door (`lash.all`, `lash.race`) and wait on a group across an in-place replacement. Like
`upgrade_tools`, it uses only what the baseline already had."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import restate

import lash_restate as lash
from tests.engine.upgrade_tools import upgrade_tools

__all__ = ["APP", "app"]

APP = "tests.engine.upgrade_app:app"

shop = restate.Service("UpgradeShop")


@shop.handler()
async def gather(ctx: restate.Context, name: str) -> list[Any]:
    """Every child's value: an echo at once, then the event ``{name}-go`` once it is emitted."""
    return await lash.all(ctx, [lash.tool("echo", {"value": name}), lash.event(f"{name}-go")])


@shop.handler()
async def first(ctx: restate.Context, name: str) -> Any:
    """The first child to settle: the event ``{name}-go``, before a timer of ten minutes."""
    return await lash.race(ctx, [lash.event(f"{name}-go"), lash.sleep(timedelta(minutes=10))])


app = lash.app(shop, tools=upgrade_tools())
