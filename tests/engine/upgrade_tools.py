"""The demo tools and `gate`, served by both releases in the upgrade test (each imports its own
`lash_restate`; this module uses only what the baseline already had: `demo_tools`, `count_path`,
`append_line`, `ToolRegistry.register`)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from lash_restate.testing.tools import append_line, count_path, demo_tools
from lash_restate.tools import ToolRegistry

__all__ = ["RESOLVER", "upgrade_tools"]

RESOLVER = "tests.engine.upgrade_tools:upgrade_tools"


async def _gate(args: Any) -> Any:
    """``{"name": X, "value": V, "gate": PATH}``: append ``gate:X`` to the count file, then → V once PATH
    exists. A tool the test holds mid-call across an upgrade and releases when it chooses."""
    witness = count_path(None)
    if witness is not None:
        await asyncio.to_thread(append_line, witness, f"gate:{args['name']}")
    gate = Path(args["gate"])
    while True:  # the tool's own wait, inside its run (an endpoint that stops cancels it at once)
        if await asyncio.to_thread(gate.exists):
            return args.get("value")
        await asyncio.sleep(0.02)


def upgrade_tools() -> ToolRegistry:
    tools = demo_tools()
    tools.register("gate", _gate)
    return tools
