"""A deployment of one of lash's services alone (`LashSignal`, `LashGroup` or `LashPump`), for a test
that holds that service on a deployment of its own (paused) while the rest of lash runs on another:
what a subscription, a settlement, or a staged part then waits behind."""

from __future__ import annotations

import argparse
import asyncio

import restate

import lash_restate as lash
from lash_restate.engine import lash_services
from lash_restate.testing.tools import demo_tools

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--service", choices=["LashSignal", "LashGroup", "LashPump"], required=True)
    args = parser.parse_args()
    [service] = [s for s in lash_services(demo_tools()) if s.name == args.service]
    asyncio.run(lash.serve(restate.app([service]), "127.0.0.1", args.port))
