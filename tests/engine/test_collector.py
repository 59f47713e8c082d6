"""`serve` tunes the endpoint process's garbage collector before it serves (decision 68).

What it buys is measured in bench/ (`python -m bench.wide`); here, that it is done, and undone on
request.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from typing import Any

import pytest

import lash_restate as lash
from lash_restate.engine import FULL_GC_EVERY, collect_rarely
from lash_restate.engine.serving import _server


@pytest.fixture
def collector(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """What the collector looked like when the HTTP server started; the collector restored after."""
    seen: dict[str, Any] = {}

    async def served(app: Any, host: str, port: int, stop: asyncio.Event) -> None:
        seen["threshold"] = gc.get_threshold()
        seen["frozen"] = gc.get_freeze_count()

    monkeypatch.setattr(_server, "_serve_hypercorn", served)
    saved = gc.get_threshold()
    gc.unfreeze()
    try:
        yield seen
    finally:
        gc.unfreeze()
        gc.set_threshold(*saved)


def _keeps_a_third_generation() -> bool:
    """Whether this interpreter's collector has a third threshold (CPython 3.14's incremental one has not)."""
    saved = gc.get_threshold()
    gc.set_threshold(saved[0], saved[1], 12345)
    kept = gc.get_threshold()[2] == 12345
    gc.set_threshold(*saved)
    return kept


def test_serve_freezes_start_up_and_collects_the_oldest_generation_rarely(collector: dict[str, Any]) -> None:
    young, middle, _ = gc.get_threshold()
    asyncio.run(lash.serve(object(), "127.0.0.1", 9))
    assert collector["threshold"][:2] == (young, middle)  # the younger generations run as before
    if _keeps_a_third_generation():
        assert collector["threshold"][2] == FULL_GC_EVERY
    assert collector["frozen"] > 0  # the modules and app built before it serves are out of every walk


def test_serve_leaves_the_collector_alone_when_told_to(collector: dict[str, Any]) -> None:
    before = gc.get_threshold()
    asyncio.run(lash.serve(object(), "127.0.0.1", 9, full_gc_every=None))
    assert collector == {"threshold": before, "frozen": 0}


def test_a_full_collection_never_is_refused_before_anything_changes(collector: dict[str, Any]) -> None:
    before = gc.get_threshold()
    with pytest.raises(lash.InvalidInput, match="at least 1"):  # a LashError, and a ValueError
        collect_rarely(0)
    with pytest.raises(lash.InvalidInput, match="at least 1"):
        asyncio.run(lash.serve(object(), "127.0.0.1", 9, full_gc_every=0))
    with pytest.raises(lash.InvalidInput, match="server must be one of"):
        asyncio.run(lash.serve(object(), "127.0.0.1", 9, server="uvicorn"))
    assert (gc.get_threshold(), gc.get_freeze_count(), collector) == (before, 0, {})
