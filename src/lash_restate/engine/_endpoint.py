"""Assemble, validate and serve the deployment endpoint.

ADR, "The deployment surface grows": an endpoint wiring this controller must
bind the group object alongside the durable-wait services. `validate` checks
that once the endpoint is assembled, so a missing piece stops the start, not
the first `Promise.all`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import restate

from ..calls import CallTargets, Target
from ..contract import GroupExecutors
from ._child import DEFAULT_TOOL_ATTEMPTS, child_object
from ._group import group_object
from ._pump import pump_object
from ._routes import CHILD, DEFAULT_PREFIX, GROUP, PUMP, SIGNAL, named, use_prefix, wire_groups
from ._routing import Routing
from ._signal import signal_object

__all__ = [
    "APP_METADATA",
    "BATCH_FROM",
    "GRACE_S",
    "SERVERS",
    "DeploymentError",
    "ServedApplication",
    "ServerUnavailable",
    "build_app",
    "call_targets",
    "check_app_name",
    "lash_services",
    "serve",
    "served_application",
    "validate_deployment",
]

# From this many children a group settles in batches through a pump invocation, one per 256 children
# (decisions 20, 35), which starts the children itself: the single writer then runs once per batch
# instead of once per child. Below it a group of tools, timers and events has each child settle itself
# (one hop less, what a two-arm race or a signal/deadline select is measured by), and a group with a
# call child has its open send the children and a pump join them (decision 62).
BATCH_FROM = 3

Bindable = restate.Service | restate.VirtualObject | restate.Workflow


class DeploymentError(RuntimeError):
    """The endpoint, as assembled, cannot run groups; the message says what to bind."""


# The service metadata key, on each of lash's four services, naming the application that serves them
# when it names itself (`lash.app(..., name=...)`): what `lash-restate register` reads, through the
# admin API, to tell an upgrade of an application from another taking over its prefix (decision 43).
APP_METADATA = "lash.app"
_APP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,63}")


def check_app_name(name: str) -> str:
    if not isinstance(name, str) or not _APP_NAME.fullmatch(name):
        raise ValueError(
            f"application name {name!r}: a letter or digit, then up to 63 letters, digits or . _ : / -"
        )
    return name


@dataclass(frozen=True)
class ServedApplication:
    """What this process's endpoint serves, as `lash-restate serve` checks it at start: its name (if it
    gave one), its own services (the services bound beside lash's) and lash's prefix."""

    name: str | None
    services: frozenset[str]
    prefix: str


class _Served:
    application: ServedApplication | None = None


def served_application() -> ServedApplication | None:
    """The application `build_app` (so `lash.app`) last assembled in this process, if any."""
    return _Served.application


def call_targets(services: Iterable[Bindable], external: Iterable[Target] = ()) -> CallTargets:
    """What `Call` children may reach: the handlers ``services`` bind, and the ``external`` services
    declared by the application (served by other endpoints of the same Restate cluster)."""
    targets = CallTargets(external=external)
    for service in services:
        keyed = not isinstance(service, restate.Service)  # virtual objects and workflows take a key
        targets.add(Target(service.name, frozenset(service.handlers), keyed))
    return targets


def lash_services(
    resolver: GroupExecutors,
    *,
    calls: CallTargets | None = None,
    tool_attempts: int = DEFAULT_TOOL_ATTEMPTS,
    batch_from: int = BATCH_FROM,
    prefix: str = DEFAULT_PREFIX,
    name: str | None = None,
) -> list[Bindable]:
    """The group, child and pump objects and the durable-wait service.

    Children run through ``resolver`` (tools) and may call the handlers of ``calls``. Groups of
    ``batch_from`` children or more settle in batches through a pump that starts them; narrower ones
    with a call child through a pump that joins the children their open sent (decision 62). The
    services are named
    ``{prefix}Group``, ``{prefix}Child``, … (decision 40); with ``name``, each carries it as the
    service metadata ``lash.app``, which registration reads to tell an upgrade of this application
    from another application taking its prefix over (decision 43).
    """
    if batch_from < 1:
        raise ValueError(f"batch_from must be at least 1, got {batch_from}")
    use_prefix(prefix)
    metadata = {APP_METADATA: check_app_name(name)} if name is not None else None
    routing = Routing(resolver, calls if calls is not None else CallTargets())
    services: list[Bindable] = [
        group_object(batch_from, routing, metadata=metadata),
        child_object(routing, tool_attempts=tool_attempts, metadata=metadata),
        pump_object(routing, metadata=metadata),
        signal_object(metadata=metadata),
    ]
    validate_deployment(resolver, services)
    wire_groups()  # this process's controllers answer `supports_effect_groups()` true (decision 47)
    return services


def validate_deployment(resolver: GroupExecutors | None, services: Iterable[Bindable]) -> None:
    """Refuse an endpoint that cannot do groups: no resolver, or a required service unbound."""
    if resolver is None or not callable(getattr(resolver, "resolve", None)):
        raise DeploymentError(
            "no GroupExecutors resolver is registered: pass one (e.g. a ToolRegistry) to build_app"
        )
    bound = {s.name for s in services}
    required = {
        named(GROUP): "the group object",
        named(CHILD): "the child service",
        named(PUMP): "the settlement pump",
        named(SIGNAL): "the durable-wait service",
    }
    missing = [f"{name} ({what})" for name, what in required.items() if name not in bound]
    if missing:
        raise DeploymentError(
            "this endpoint cannot run effect groups; bind "
            + ", ".join(missing)
            + " (lash_services(resolver) returns all of them)"
        )


def build_app(
    resolver: GroupExecutors | None,
    *,
    services: Sequence[Bindable] | None = None,
    extra_services: Sequence[Bindable] = (),
    external: Sequence[Target] = (),
    identity_keys: Sequence[str] = (),
    batch_from: int = BATCH_FROM,
    prefix: str = DEFAULT_PREFIX,
    name: str | None = None,
) -> Any:
    """The ASGI app: lash's services (or ``services`` as given) plus yours, validated once assembled.

    `Call` children may reach the handlers of ``extra_services`` and the ``external`` services.
    ``name`` names the application on lash's services (see `lash_services`).
    """
    use_prefix(prefix)  # also when ``services`` are given: validation checks the names under it
    assembled = list(services) if services is not None else []
    if services is None and resolver is not None:
        calls = call_targets(extra_services, external)
        assembled = lash_services(resolver, calls=calls, batch_from=batch_from, prefix=prefix, name=name)
    assembled.extend(extra_services)
    validate_deployment(resolver, assembled)
    own = frozenset(s.name for s in assembled) - {named(role) for role in (GROUP, CHILD, PUMP, SIGNAL)}
    _Served.application = ServedApplication(name, own, prefix)
    return restate.app(assembled, identity_keys=list(identity_keys) or None)


SERVERS = ("hypercorn", "granian")  # what `serve` runs the app under; hypercorn is the default (decision 33)
GRACE_S = 2.0  # how long a stopping endpoint lets in-flight requests finish


class ServerUnavailable(RuntimeError):
    """The server asked for is not installed; the message names the extra that brings it."""


async def serve(app: Any, host: str = "0.0.0.0", port: int = 9080, *, server: str = "hypercorn") -> None:
    """Serve ``app`` in this process until SIGTERM or SIGINT, HTTP/1.1 and HTTP/2 cleartext.

    ``server`` is ``"hypercorn"`` (the default) or ``"granian"`` (the ``granian`` extra). Either
    runs inside this process, so the pid that started it is the one that owns the port: a SIGKILL
    of it takes the server with it (decisions 11 and 33).
    """
    if server not in SERVERS:
        raise ValueError(f"server must be one of {', '.join(SERVERS)}, got {server!r}")
    from restate.server import install_shutdown_hook

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        # Without a shutdown trigger the in-process server ignores SIGTERM (decision 11). The SDK's app
        # installs its own SIGTERM handler on first request, replacing a plain add_signal_handler, so
        # register through its shared hook dispatcher, where both run.
        install_shutdown_hook(loop, stop.set, sig)
    if server == "granian":
        await _serve_granian(app, host, port, stop)
    else:
        await _serve_hypercorn(app, host, port, stop)


async def _serve_hypercorn(app: Any, host: str, port: int, stop: asyncio.Event) -> None:
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
    await hypercorn_serve(_answer_lifespan(app), config, shutdown_trigger=stop.wait)


async def _serve_granian(app: Any, host: str, port: int, stop: asyncio.Event) -> None:
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
    tracked = _InFlight(app)
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
    if _known_experimental not in logging.getLogger("_granian").filters:
        logging.getLogger("_granian").addFilter(_known_experimental)

    async def stop_on_signal() -> None:
        await stop.wait()
        server.stop()  # type: ignore[no-untyped-call]  # granian leaves it unannotated

    stopper = asyncio.create_task(stop_on_signal())
    try:
        await server.serve()
    finally:
        stopper.cancel()
    # The embedded server returns once it stops listening; the app's requests still run on this
    # loop, and asyncio.run would cancel them on return: let them finish, as hypercorn's grace does.
    await tracked.drained(GRACE_S)
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
