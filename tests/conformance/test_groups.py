"""The effect-group scenarios of `lash_restate.testing.conformance`, on every tier (ADR, Decision
and Normative sections): this repository runs the suite through its public entry point, as another
host would."""

from __future__ import annotations

from lash_restate.testing.conformance import SCENARIOS, pytest_tests

globals().update(pytest_tests(s for s in SCENARIOS if s.topic == "groups"))
