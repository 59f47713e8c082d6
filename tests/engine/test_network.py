"""`LoopbackNetwork`, the test's own network for partitions: a cut silences a link without closing it,
a heal delivers what waited, and a connection's side is its process's (no server needed)."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator

import pytest

from lash_restate.testing.network import LoopbackNetwork

SILENCE_S = 0.5  # how long a cut link is watched for a byte that must not come


@pytest.fixture
def echo() -> Iterator[int]:
    """A loopback echo server's port."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(1024):
                conn.sendall(data)

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield int(server.getsockname()[1])
    server.close()


def _silent(conn: socket.socket) -> bool:
    conn.settimeout(SILENCE_S)
    try:
        conn.recv(1)
    except TimeoutError:
        return True
    finally:
        conn.settimeout(10)
    return False


def test_a_cut_silences_an_open_connection_and_the_heal_delivers_what_waited(echo: int) -> None:
    with LoopbackNetwork(lambda: {os.getpid(): "test"}) as network:
        port = network.proxy("echo", lambda: echo)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
            conn.sendall(b"a")
            assert conn.recv(1) == b"a"
            network.isolate("test")
            conn.sendall(b"b")
            assert _silent(conn)  # not refused, not reset: silent
            network.heal()
            assert conn.recv(1) == b"b"
        assert network.links == {("test", "echo"): 1}
        assert network.held >= 1


def test_a_connection_across_a_cut_waits_for_the_heal(echo: int) -> None:
    with LoopbackNetwork(lambda: {os.getpid(): "test"}) as network:
        port = network.proxy("echo", lambda: echo)
        network.isolate("echo")  # the other end of the link this time
        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
            conn.sendall(b"c")
            assert _silent(conn)
            network.heal()
            assert conn.recv(1) == b"c"


def test_a_process_the_network_does_not_know_is_on_no_side_of_a_cut(echo: int) -> None:
    with LoopbackNetwork(dict) as network:  # it knows no process: the test is nobody's
        port = network.proxy("echo", lambda: echo)
        network.isolate("echo")
        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
            conn.sendall(b"d")
            assert conn.recv(1) == b"d"
        assert network.links == {(None, "echo"): 1}
