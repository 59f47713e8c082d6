from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lash_restate.testing import LocalStack

Stack = LocalStack  # the engine tests' name for the stack they get


def private_stack(tmp: Path, server_env: dict[str, str] | None = None) -> Stack:
    """A server and endpoint of one test's own, for tests that kill or reconfigure processes."""
    return LocalStack.single(tmp, server_env=server_env).start()


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    with private_stack(tmp_path) as s:
        yield s
