from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lash_restate.devstack import Endpoint, RestateServer, register_deployment


class Stack:
    """A private server and endpoint for tests that kill or reconfigure processes."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.count_file = tmp / "counts.txt"
        self.server = RestateServer(
            base_dir=tmp / "restate", extra_env={"RESTATE_DEFAULT_NUM_PARTITIONS": "4"}
        )
        self.server.base_dir.mkdir(parents=True)
        self.endpoint = Endpoint(log_path=tmp / "endpoint.log", env={"LASH_COUNT_FILE": str(self.count_file)})

    def start(self) -> Stack:
        self.server.start()
        self.endpoint.start()
        register_deployment(self.server.admin_url, self.endpoint.url)
        return self

    def restart_endpoint(self, **env: str) -> None:
        """SIGKILL the endpoint and serve again on the same port (optionally with changed settings)."""
        self.endpoint.kill()
        self.endpoint.env.update(env)
        self.endpoint.start()

    def counts(self) -> list[str]:
        return self.count_file.read_text().splitlines() if self.count_file.exists() else []

    def stop(self) -> None:
        self.endpoint.stop()
        self.server.remove()


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    s = Stack(tmp_path).start()
    try:
        yield s
    finally:
        s.stop()
