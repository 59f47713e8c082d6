"""A deployment of `LashSignal` alone, for a test that holds the event service on a deployment of
its own (paused) while the rest of lash runs on another: what a subscription waits behind."""

from __future__ import annotations

import argparse
import asyncio

import restate

import lash_restate as lash
from lash_restate.engine.child._signal import signal_object

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    asyncio.run(lash.serve(restate.app([signal_object()]), "127.0.0.1", args.port))
