"""Every conformance test runs twice: with its `echo` children as tools, then as calls to a Restate
handler (decision 37), so call children pass the same suite on every tier."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conformance.builders import Children


@pytest.fixture(params=["tools", "calls"], autouse=True)
def children(request: pytest.FixtureRequest) -> Iterator[str]:
    Children.echo_as = request.param
    yield request.param
    Children.echo_as = "tools"
