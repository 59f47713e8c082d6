"""Every conformance test runs twice: with its `echo` children as tools, then as calls to a Restate
handler (decision 37), so call children pass the same suite on every tier."""

from __future__ import annotations

import pytest

from lash_restate.testing.conformance import CHILD_KINDS, ChildKind


@pytest.fixture(params=CHILD_KINDS)
def children(request: pytest.FixtureRequest) -> ChildKind:
    """How a scenario writes its `echo` children (`Scope.echo`): the fixture value, not a global."""
    kind: ChildKind = request.param
    return kind
