"""Restate handlers as children (`Call`): the `calls` scenarios of
`lash_restate.testing.conformance` on every tier, through the suite's public entry point."""

from __future__ import annotations

from lash_restate.testing.conformance import SCENARIOS, pytest_tests

globals().update(pytest_tests(s for s in SCENARIOS if s.topic == "calls"))
