"""The front door's protocols on a group (``async with lash.open``, ``async for``): the `protocols`
scenarios of `lash_restate.testing.conformance` on every tier, through the suite's public entry point."""

from __future__ import annotations

from lash_restate.testing.conformance import SCENARIOS, pytest_tests

globals().update(pytest_tests(s for s in SCENARIOS if s.topic == "protocols"))
