from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conformance.tiers import MemoryTier

TIERS = ["memory"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tier" in getattr(item, "fixturenames", ()) and "[restate" in item.name:
            item.add_marker(pytest.mark.restate)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run ``async def`` tests on a fresh event loop (no plugin needed for that)."""
    if inspect.iscoroutinefunction(pyfuncitem.obj):
        kwargs = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
        asyncio.run(pyfuncitem.obj(**kwargs))
        return True
    return None


@pytest.fixture(params=TIERS)
def tier(request: pytest.FixtureRequest) -> Iterator[Any]:
    """Every conformance test runs once per tier; the test id carries the tier name."""
    if request.param == "memory":
        # asyncio.run cancels the host's leftover child tasks when each test's loop ends.
        yield MemoryTier()
        return
    restate_tier = request.getfixturevalue("restate_tier")
    yield restate_tier
