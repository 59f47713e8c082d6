"""Assemble, validate and serve the deployment endpoint.

ADR, "The deployment surface grows": an endpoint wiring this controller must
bind the group object alongside the durable-wait services. `validate` checks
that once the endpoint is assembled, so a missing piece stops the start, not
the first `Promise.all`.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Iterable, Sequence
from typing import Any

import restate

from ..contract import GroupExecutors
from ._child import DEFAULT_TOOL_ATTEMPTS, child_object
from ._group import group_object
from ._pump import pump_object
from ._routes import CHILD, GROUP, PUMP, SIGNAL
from ._signal import signal_object

__all__ = ["BATCH_FROM", "DeploymentError", "build_app", "lash_services", "serve", "validate_deployment"]

# From this many children a group settles in batches through a pump invocation, one per 256 children
# (decisions 20, 35): the
# single writer then runs once per batch instead of once per child. Below it a child settles itself:
# two hops less, which is what a two-arm race or a signal/deadline select is measured by.
BATCH_FROM = 3

Bindable = restate.Service | restate.VirtualObject | restate.Workflow


class DeploymentError(RuntimeError):
    """The endpoint, as assembled, cannot run groups; the message says what to bind."""


def lash_services(
    resolver: GroupExecutors,
    *,
    tool_attempts: int = DEFAULT_TOOL_ATTEMPTS,
    batch_from: int = BATCH_FROM,
) -> list[Bindable]:
    """The group, child and pump objects and the durable-wait service.

    Groups of ``batch_from`` children or more settle in batches through the pump.
    """
    if batch_from < 1:
        raise ValueError(f"batch_from must be at least 1, got {batch_from}")
    services: list[Bindable] = [
        group_object(batch_from),
        child_object(resolver, tool_attempts=tool_attempts),
        pump_object(),
        signal_object(),
    ]
    return services


def validate_deployment(resolver: GroupExecutors | None, services: Iterable[Bindable]) -> None:
    """Refuse an endpoint that cannot do groups: no resolver, or a required service unbound."""
    if resolver is None or not callable(getattr(resolver, "resolve", None)):
        raise DeploymentError(
            "no GroupExecutors resolver is registered: pass one (e.g. a ToolRegistry) to build_app"
        )
    bound = {s.name for s in services}
    required = {
        GROUP: "the group object",
        CHILD: "the child service",
        PUMP: "the settlement pump",
        SIGNAL: "the durable-wait service",
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
    identity_keys: Sequence[str] = (),
    batch_from: int = BATCH_FROM,
) -> Any:
    """The ASGI app: lash's services (or ``services`` as given) plus yours, validated once assembled."""
    assembled = list(services) if services is not None else []
    if services is None and resolver is not None:
        assembled = lash_services(resolver, batch_from=batch_from)
    assembled.extend(extra_services)
    validate_deployment(resolver, assembled)
    return restate.app(assembled, identity_keys=list(identity_keys) or None)


async def serve(app: Any, host: str = "0.0.0.0", port: int = 9080) -> None:
    """Serve ``app`` with hypercorn (HTTP/2 cleartext) in this process until SIGTERM or SIGINT."""
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
    from restate.server import install_shutdown_hook

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        # Without a shutdown trigger the in-process server ignores SIGTERM (decision 11). The SDK's app
        # installs its own SIGTERM handler on first request, replacing a plain add_signal_handler, so
        # register through its shared hook dispatcher, where both run.
        install_shutdown_hook(loop, stop.set, sig)
    config.graceful_timeout = 2.0
    await hypercorn_serve(_answer_lifespan(app), config, shutdown_trigger=stop.wait)


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
