"""`LoopbackNetwork`: the network between a local stack's processes, owned by the test, which can cut one
process off from the others (a partition) and heal it.

Each proxied process is reached through a TCP proxy on a loopback port of its own (a cluster node's
advertised address, an endpoint's registered URL), so every byte between the stack's processes passes
through the network. One proxy serves every peer and still tells them apart: it asks the kernel's
socket table which process holds the other end of each connection it accepts (``/proc/net/tcp`` and
each process's ``/proc/<pid>/fd``; Linux only, no privileges needed).

A cut stops forwarding across it, as a lost link does: connections stay open but go silent (nothing
is refused or reset), bytes in flight wait where they are, and a new connection across the cut is
accepted but held, unconnected, until the heal. A heal forwards whatever waited, and the processes
find out for themselves which of their connections they gave up on meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Callable, Mapping
from types import TracebackType

__all__ = ["LoopbackNetwork"]

_CHUNK = 64 * 1024
_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")


def _port(address: str) -> int:
    return int(address.rsplit(":", 1)[1], 16)


def _socket_inode(port: int, remote_port: int) -> str | None:
    """The inode of the loopback socket bound to ``port`` and connected to ``remote_port``."""
    for table in _TABLES:
        with contextlib.suppress(OSError), open(table, encoding="ascii") as rows:
            next(rows, None)  # the header
            for row in rows:
                fields = row.split()
                if _port(fields[1]) == port and _port(fields[2]) == remote_port:
                    return fields[9]
    return None


def _holder(inode: str, owners: Mapping[int, str]) -> str | None:
    """Which of ``owners`` (pid -> name) holds the socket ``inode`` open."""
    target = f"socket:[{inode}]"
    for pid, name in owners.items():
        with contextlib.suppress(OSError), os.scandir(f"/proc/{pid}/fd") as fds:
            for fd in fds:
                with contextlib.suppress(OSError):
                    if os.readlink(fd.path) == target:
                        return name
    return None


class LoopbackNetwork:
    """TCP proxies between named processes, with one cut at a time.

    ``owners`` answers, whenever a connection arrives, which process has which pid (pid -> name):
    a restarted process has a new pid. A connection from a process ``owners`` does not name (the
    test itself) belongs to no side, so no cut stops it. Use it as a context manager, or `close` it.
    """

    def __init__(self, owners: Callable[[], Mapping[int, str]]) -> None:
        self._owners = owners
        self._cut: frozenset[str] = frozenset()
        self._loop = asyncio.new_event_loop()
        self._changed = asyncio.Condition()
        self._servers: list[asyncio.Server] = []
        self._links: dict[tuple[str | None, str], int] = {}
        self._held = 0
        self._thread = threading.Thread(target=self._loop.run_forever, name="loopback-network", daemon=True)
        self._thread.start()

    @property
    def isolated(self) -> frozenset[str]:
        """The processes cut off from all the others (empty when healed)."""
        return self._cut

    @property
    def links(self) -> dict[tuple[str | None, str], int]:
        """How many connections each (source, target) opened through the network so far; a source
        the owners do not name is None."""
        return dict(self._links)

    @property
    def held(self) -> int:
        """How many times a connection or a read had to wait for a heal: what the cuts so far stopped."""
        return self._held

    def proxy(self, name: str, upstream: Callable[[], int]) -> int:
        """Listen on a free loopback port for connections to ``name``, which listens on ``upstream()``
        (asked at each connection: a restart may move it); the proxy's port."""
        return asyncio.run_coroutine_threadsafe(self._listen(name, upstream), self._loop).result(30)

    def isolate(self, *names: str) -> None:
        """Cut ``names`` off from every other process: no byte crosses until `heal`."""
        self._set(frozenset(names))

    def heal(self) -> None:
        self._set(frozenset())

    def close(self) -> None:
        """Stop every proxy and drop every connection through them."""
        if self._loop.is_closed():
            return
        asyncio.run_coroutine_threadsafe(self._shut(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
        self._loop.close()

    def __enter__(self) -> LoopbackNetwork:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    def _set(self, cut: frozenset[str]) -> None:
        async def change() -> None:
            async with self._changed:
                self._cut = cut
                self._changed.notify_all()

        asyncio.run_coroutine_threadsafe(change(), self._loop).result(30)

    def _crosses(self, source: str | None, target: str) -> bool:
        return source is not None and (source in self._cut) != (target in self._cut)

    async def _passable(self, source: str | None, target: str) -> None:
        if not self._crosses(source, target):
            return
        self._held += 1
        async with self._changed:
            await self._changed.wait_for(lambda: not self._crosses(source, target))

    async def _listen(self, name: str, upstream: Callable[[], int]) -> int:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._serve(name, upstream, reader, writer)

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        self._servers.append(server)
        return int(server.sockets[0].getsockname()[1])

    async def _serve(
        self,
        name: str,
        upstream: Callable[[], int],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        peer = int(writer.get_extra_info("peername")[1])
        here = int(writer.get_extra_info("sockname")[1])
        source = await asyncio.to_thread(self._source, peer, here)
        self._links[source, name] = self._links.get((source, name), 0) + 1
        try:
            await self._passable(source, name)  # a connection across the cut waits, unconnected
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", upstream())
        except OSError:
            writer.close()
            return
        pumps = [
            asyncio.create_task(self._pump(source, name, reader, up_writer)),
            asyncio.create_task(self._pump(source, name, up_reader, writer)),
        ]
        try:
            # Either side closing closes the other (no half-open connections: nothing here needs them).
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pump in pumps:
                pump.cancel()
            for end in (writer, up_writer):
                end.close()

    def _source(self, peer: int, here: int) -> str | None:
        inode = _socket_inode(peer, here)
        return None if inode is None else _holder(inode, self._owners())

    async def _pump(
        self, source: str | None, target: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await reader.read(_CHUNK):
                await self._passable(source, target)  # read before a cut: delivered after the heal
                writer.write(data)
                await writer.drain()

    async def _shut(self) -> None:
        for server in self._servers:
            server.close()
        tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
