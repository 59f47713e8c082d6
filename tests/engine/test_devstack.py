"""The test stack's own robustness: it must not fail a run on a lost free-port race."""

from __future__ import annotations

import socket

import pytest

from lash_restate.devstack import RestateServer


@pytest.mark.restate
def test_a_server_whose_port_was_taken_starts_on_fresh_ports() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = RestateServer(ingress_port=port)
        try:
            server.start()
            assert server.ingress_port != port
            assert server.ready()
        finally:
            server.remove()
    assert server.process is not None and server.process.poll() is not None
