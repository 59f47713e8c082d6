"""Serve an endpoint's ASGI app in this process: hypercorn or granian, signals and a graceful stop.

Either server runs inside the process that called `serve`, so the pid that started it is the one
that owns the port, and a SIGKILL of it takes the server with it (decisions 11 and 33).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import math
import os
import signal
import threading
from typing import Any

from ... import logs
from ...contract import InvalidInput, LashError, RuntimeErrorCode

__all__ = ["FULL_GC_EVERY", "GRACE_S", "SERVERS", "ServerUnavailable", "collect_rarely", "serve"]


SERVERS = ("hypercorn", "granian")  # what `serve` runs the app under; hypercorn is the default (decision 33)
GRACE_S = 2.0  # how long a stopping endpoint lets in-flight requests finish
# Decision 68: the oldest generation is collected at most once per this many collections of the middle one
# (Python's default is 10): an endpoint's in-flight invocations make a heap of hundreds of MB that a
# full collection walks, and at 10 those walks were a third of a wide group's endpoint CPU.
FULL_GC_EVERY = 1000


class ServerUnavailable(LashError, RuntimeError):
    """The server asked for is not installed; the message names the extra that brings it."""

    code = RuntimeErrorCode.SERVER_UNAVAILABLE

    def __str__(self) -> str:
        return self.message


async def serve(
    app: Any,
    host: str = "0.0.0.0",
    port: int = 9080,
    *,
    server: str = "hypercorn",
    full_gc_every: int | None = FULL_GC_EVERY,
) -> None:
    """Serve ``app`` in this process until SIGTERM or SIGINT, HTTP/1.1 and HTTP/2 cleartext.

    ``server`` is ``"hypercorn"`` (the default) or ``"granian"`` (the ``granian`` extra). Either
    runs inside this process, so the pid that started it is the one that owns the port: a SIGKILL
    of it takes the server with it (decisions 11 and 33).

    Before it serves, the process's garbage collector is tuned for an endpoint (`collect_rarely`):
    what start-up built is frozen, and the oldest generation is collected at most once per
    ``full_gc_every`` collections of the middle one. ``None`` leaves the collector as it is.
    """
    if server not in SERVERS:
        raise InvalidInput(f"server must be one of {', '.join(SERVERS)}, got {server!r}")
    from restate.server import install_shutdown_hook

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        # Without a shutdown trigger the in-process server ignores SIGTERM (decision 11). The SDK's app
        # installs its own SIGTERM handler on first request, replacing a plain add_signal_handler, so
        # register through its shared hook dispatcher, where both run.
        install_shutdown_hook(loop, stop.set, sig)
    if full_gc_every is not None:
        collect_rarely(full_gc_every)  # once this process is sure to serve (a main thread, signals set)
    tracked = _InFlight(app)
    quiet = asyncio.create_task(_quiet_once_stopping(stop))
    met = asyncio.create_task(_in_flight_once_stopping(stop, tracked))
    try:
        if server == "granian":
            await _serve_granian(tracked, host, port, stop)
        else:
            await _serve_hypercorn(tracked, host, port, stop)
    finally:
        quiet.cancel()
        met.cancel()
    # Restate retries on another attempt whatever the stop cut; an operator may want to know. What the
    # stop met is counted, not what it cut: past the grace a server may end a request as if it had
    # completed (granian's does), so no count taken later tells a cut request from a finished one.
    logs.event("endpoint.stopped", in_flight=met.result() if met.done() else 0, grace_s=GRACE_S)


# Where the SDK and the servers log the errors of a request the stop cut.
_CUT_LOGGERS = ("restate.server", "hypercorn.error", "_granian")


async def _in_flight_once_stopping(stop: asyncio.Event, tracked: _InFlight) -> int:
    """The requests in flight when a stop is asked for: those not done within its grace are cut."""
    await stop.wait()
    return tracked.count


async def _quiet_once_stopping(stop: asyncio.Event) -> None:
    """Once a stop is asked for, what cutting the requests still in flight raises (cancellations, a
    task group shutting down, a closed stream) is expected: it is logged at debug, not as an error,
    up to the process's end (asyncio.run cancels what is left after `serve` returns)."""
    await stop.wait()
    asyncio.get_running_loop().set_exception_handler(
        lambda _, context: _to_debug(context.get("message"), context.get("exception"))
    )
    for name in _CUT_LOGGERS:
        logging.getLogger(name).addFilter(_at_debug)


def _at_debug(record: logging.LogRecord) -> bool:
    if record.levelno < logging.ERROR:
        return True
    _to_debug(record.getMessage(), record.exc_info)
    return False


def _to_debug(message: object, error: Any) -> None:
    logs.logger.debug("while stopping: %s", message, exc_info=error)


# Decision 68.
def collect_rarely(full_every: int = FULL_GC_EVERY) -> None:
    """Tune this process's garbage collector for a Restate endpoint.

    Every in-flight invocation keeps its state machine, its request and its pending futures alive,
    so the heap of a busy endpoint grows to hundreds of MB, and CPython (3.11 to 3.13) walks all of
    it at each collection of the oldest generation: at most once per 10 collections of the middle
    one by default, which was a third of the endpoint's CPU in an `all` over 100,000 children. The
    two younger generations run as before; the oldest is collected at most once per ``full_every``
    collections of the middle one, so the cycles that live long enough to reach it wait longer to be
    freed (the endpoint's peak memory grew 7 to 30% in that `all`). What is alive when this is
    called (modules, the app, the SDK's tables) is frozen out of every later collection, for good:
    call it once, after start-up. An interpreter without a third generation (CPython 3.14's
    incremental collector) ignores the threshold, and only the freeze applies.
    """
    if full_every < 1:
        raise InvalidInput(f"full_every must be at least 1, got {full_every}")
    gc.collect()  # start-up's own garbage, before what is left is frozen for good
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, full_every)


async def _serve_hypercorn(app: _InFlight, host: str, port: int, stop: asyncio.Event) -> None:
    from hypercorn.asyncio import serve as hypercorn_serve
    from hypercorn.config import Config

    config = Config()
    config.bind = [f"{host}:{port}"]
    config.h2_max_concurrent_streams = 10_000
    config.keep_alive_timeout = 3600
    # Restate keeps a few long-lived HTTP/2 connections and multiplexes every invocation over them.
    # Hypercorn closes a connection after 1000 requests by default; the invoker then stalls the next
    # invocation on it until its keep-alive notices (40 s), seen here once per ~1000 invocations.
    config.keep_alive_max_requests = 2**62
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")  # through our JSON lines, at our level
    config.graceful_timeout = GRACE_S
    try:
        await hypercorn_serve(_answer_lifespan(app), config, shutdown_trigger=stop.wait)
    except Exception:
        # Past its grace hypercorn cuts the connections still open and its teardown of their HTTP/2
        # streams can raise (an ExceptionGroup of a KeyError, seen here): the stop was asked for.
        if not stop.is_set():
            raise


async def _serve_granian(tracked: _InFlight, host: str, port: int, stop: asyncio.Event) -> None:
    """Granian's embedded server: its Rust HTTP stack on threads of this process, the app on this
    loop (decision 33). Its process-per-worker server is not used: that worker outlives a SIGKILLed
    parent and keeps the port."""
    try:
        from granian.constants import HTTPModes, Interfaces
        from granian.http import HTTP2Settings
        from granian.log import LogLevels
        from granian.server.embed import Server
    except ImportError:
        raise ServerUnavailable("granian is not installed: pip install 'lash-restate[granian]'") from None
    verbose = logging.getLogger("lash_restate").isEnabledFor(logging.INFO)
    server = Server(
        tracked,
        address=host,
        port=port,
        interface=Interfaces.ASGINL,  # no lifespan: the SDK's app refuses it (see _answer_lifespan)
        http=HTTPModes.auto,  # HTTP/2 cleartext with prior knowledge (Restate), HTTP/1.1 (health checks)
        # Restate multiplexes every invocation over a few connections (decision 18); hyper has no
        # per-connection request cap, so only the stream limit needs lifting.
        http2_settings=HTTP2Settings(max_concurrent_streams=10_000),
        websockets=False,
        log_level=LogLevels.info if verbose else LogLevels.warning,
        # Granian's records go through the root logger, as JSON lines like ours, not to its stdout handler.
        log_dictconfig={"loggers": {name: {"handlers": [], "propagate": True} for name in _GRANIAN_LOGGERS}},
    )
    # Decision 75: its stop otherwise waits for every connection to close, and Restate holds its
    # HTTP/2 connections open while invocations run on them: never, for an endpoint with a caller waiting.
    server.workers_kill_timeout = math.ceil(GRACE_S)
    if _known_experimental not in logging.getLogger("_granian").filters:
        logging.getLogger("_granian").addFilter(_known_experimental)

    async def stop_on_signal() -> None:
        await stop.wait()
        server.stop()  # type: ignore[no-untyped-call]  # granian leaves it unannotated

    stopper = asyncio.create_task(stop_on_signal())
    try:
        await server.serve()
    except TimeoutError:
        # Its join of the worker timed out, which cancelled it; granian then raises instead of going on.
        if not stop.is_set():
            raise
    else:
        # The embedded server returns once it stops listening; the app's requests still run on this
        # loop, and asyncio.run would cancel them on return: let them finish, as hypercorn's grace does.
        await tracked.drained(GRACE_S)
    finally:
        stopper.cancel()
    # Granian's Rust threads finish their teardown just after `serve` returns; one still attaching to
    # the interpreter while it finalizes aborts the process (SIGABRT, about one stop in ten here).
    await _rust_threads_ended(GRACE_S)
    if server.interrupt_children:
        raise RuntimeError("granian's worker exited unexpectedly; see the log above")


async def _rust_threads_ended(within: float) -> None:
    """Wait (at most ``within`` seconds) until every thread of this process is one Python knows of."""
    for _ in range(round(within / 0.01)):
        if not _foreign_threads():
            return
        await asyncio.sleep(0.01)


def _foreign_threads() -> int:
    """Threads of this process that Python did not start (Linux, where /proc lists them; else 0)."""
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return 0
    known = {thread.native_id for thread in threading.enumerate()}
    return sum(int(tid) not in known for tid in tids)


_GRANIAN_LOGGERS = ("_granian", "granian.access")


def _known_experimental(record: logging.LogRecord) -> bool:
    """Drop granian's note, at every start, that its embedded server is experimental (decision 33)."""
    return record.getMessage() != "Embedded server is experimental!"


class _InFlight:
    """The app, counting its HTTP requests in flight so a stopping server can wait for them."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.count = 0
        self.idle = asyncio.Event()
        self.idle.set()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.count += 1
        self.idle.clear()
        try:
            await self.app(scope, receive, send)
        finally:
            self.count -= 1
            if self.count == 0:
                self.idle.set()

    async def drained(self, within: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.idle.wait(), within)


def _answer_lifespan(app: Any) -> Any:
    """Complete the ASGI lifespan handshake the SDK's app refuses, so every start does not log a warning."""

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":
            await app(scope, receive, send)
            return
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return

    return wrapped
