"""`lash-restate serve`, `register` and `dev`: the endpoint's settings checked, the application or
resolver loaded, the HTTP server run; a deployment registered; a local server and endpoint for a
demo."""

from __future__ import annotations

import argparse
import asyncio
import errno
import inspect
import json
import socket
import sys
from typing import Any

from ..admin import AdminApi
from ..contract import GroupExecutors
from ._common import REFUSED, USAGE, fail, import_attribute

__all__ = [
    "CANNOT_LISTEN",
    "cannot_listen",
    "check_prefix_at_start",
    "dev_command",
    "load_app",
    "load_resolver",
    "register_command",
    "run_server",
    "serve_command",
]


def load_resolver(spec: str) -> GroupExecutors:
    """``module:attribute`` naming a `GroupExecutors` or a zero-argument factory of one."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise SystemExit(f"lash-restate: --resolver must be 'module:attribute', got {spec!r}")
    try:
        target: Any = getattr(import_attribute(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise SystemExit(f"lash-restate: cannot load resolver {spec!r}: {exc}") from None
    resolver = target
    # A factory: a class (a resolver's own, whose `resolve` is still unbound) or any other callable.
    if isinstance(target, type) or (callable(target) and not hasattr(target, "resolve")):
        try:
            resolver = target()
        except Exception as exc:
            raise SystemExit(
                f"lash-restate: {spec!r} is not a GroupExecutors, and calling it failed: {exc}"
            ) from None
    if not isinstance(resolver, GroupExecutors):
        raise SystemExit(
            f"lash-restate: {spec!r} is not a GroupExecutors (it has no resolve(envelope) method)"
        )
    return resolver


def serve_command(args: argparse.Namespace) -> int:
    from .. import logs
    from ..engine import (
        BATCH_FROM,
        DeploymentError,
        build_app,
        groups_wired,
        served_application,
        use_identity_keys,
        use_prefix,
    )
    from ..settings import ServeSettings, SettingsError

    try:
        settings = ServeSettings.load(
            {
                "host": args.host,
                "port": args.port,
                "resolver": args.resolver,
                "app": args.app,
                "with_turn": args.with_turn or None,
                "identity_keys": args.identity_key,
                "prefix": args.prefix,
                "batch_from": args.batch_from,
                "verbose": args.verbose or None,
                "server": args.server,
                "admin_url": args.admin_url,
                "app_name": args.app_name,
                "take_over": args.take_over or None,
            }
        )
    except SettingsError as exc:
        return fail(str(exc), USAGE)
    logs.configure(settings.verbose)
    if settings.app is not None:
        if (
            settings.resolver is not None
            or settings.with_turn
            or settings.app_name is not None
            or settings.batch_from is not None
        ):
            return fail(
                "--app (LASH_APP) serves an application as it is: it takes no --resolver, --with-turn, "
                "--app-name or --batch-from, nor LASH_RESOLVER, LASH_WITH_TURN, LASH_APP_NAME or "
                "LASH_BATCH_FROM (give them to lash.app(..., name=..., batch_from=...))",
                USAGE,
            )
        # Chosen before the app is imported, as the prefix is: its `lash.app(...)` naming no identity
        # keys verifies these; checked once it is loaded, so no request goes unverified unawares.
        use_identity_keys(settings.identity_keys)
        if settings.prefix is not None:
            # Chosen before the app is imported: its `lash.app(...)` naming no prefix takes this one
            # (decision 54), and one naming another is refused as it loads.
            try:
                use_prefix(settings.prefix)
            except ValueError as exc:
                return fail(str(exc), USAGE)
        try:
            app = load_app(settings.app)
        except SystemExit as exc:
            return fail(str(exc).removeprefix("lash-restate: "), USAGE)
        served = served_application()
        if settings.identity_keys and (served is None or served.identity_keys != set(settings.identity_keys)):
            how = "was not built by lash.app(...)" if served is None else "verifies identity keys of its own"
            return fail(
                f"--identity-key (LASH_IDENTITY_KEYS) is verified by an app lash.app(...) builds naming "
                f"none of its own, and {settings.app} {how}: it would serve requests these keys did not "
                "sign. Give the keys to the app itself, or serve it without them",
                USAGE,
            )
        if not groups_wired():
            # A plain `restate.app(...)`: lash called from its handlers would answer 501 on each call.
            print(
                f"lash-restate: warning: {settings.app} serves none of lash's services and declares none "
                "served elsewhere, so a lash combinator in its handlers is refused (501 "
                "effect_group_unsupported). Build it with lash.app(...), or call lash.use_prefix() "
                "where another deployment serves them",
                file=sys.stderr,
            )
        return run_server(app, settings)
    if settings.resolver is None:
        return fail(
            "serve needs a resolver or an app: pass --resolver module:attribute (or set LASH_RESOLVER) "
            "naming your GroupExecutors, e.g. a ToolRegistry, or --app module:attribute (LASH_APP) "
            "naming the app lash_restate.app(...) built",
            USAGE,
        )
    try:
        resolver = load_resolver(settings.resolver)
    except SystemExit as exc:
        return fail(str(exc).removeprefix("lash-restate: "), USAGE)
    extra: list[Any] = []
    external: list[Any] = []
    if settings.with_turn:
        from ..testing import demo_call_services, demo_external, turn_service  # test tooling: only when asked

        extra.append(turn_service(resolver))
        extra.extend(demo_call_services())  # what the turn's `Call` children reach
        external.extend(demo_external())
    try:
        app = build_app(
            resolver,
            extra_services=extra,
            external=external,
            identity_keys=settings.identity_keys,
            batch_from=BATCH_FROM if settings.batch_from is None else settings.batch_from,
            prefix=settings.prefix,
            name=settings.app_name,
        )
    except (DeploymentError, ValueError) as exc:
        return fail(str(exc), USAGE)
    return run_server(app, settings)


def check_prefix_at_start(settings: Any) -> int | None:
    """With an admin URL, refuse to start an endpoint whose lash services another application serves
    now, unless it served them itself before (then it is the one taken over: it keeps serving what is
    pinned to it, and says so) or ``take_over`` (decision 43). An admin API that cannot answer now is a
    warning; one that refuses this endpoint's token is a wrong setting, refused."""
    from .. import logs
    from ..engine import served_application
    from ..registration import (
        Application,
        PrefixTaken,
        RegistrationError,
        RegistrationRefused,
        check_at_start,
        taken_over,
    )

    served = served_application()
    if settings.admin_url is None or served is None:
        return None
    try:
        found = check_at_start(AdminApi.from_env(settings.admin_url), served)
    except RegistrationRefused as exc:  # a token missing or wrong: the check would never run
        return fail(f"cannot check who serves lash's services: {exc}", USAGE)
    except RegistrationError as exc:
        logs.logger.warning(
            "cannot check who serves lash's services: %s", exc, extra={"event": "endpoint.prefix_unchecked"}
        )
        return None
    if found.ours or found.holder is None:
        return None
    mine = Application.served(served)
    if found.held_before:
        logs.logger.warning(taken_over(found.holder, mine), extra={"event": "endpoint.prefix_taken"})
        return None
    problem = str(PrefixTaken("this endpoint", mine, found.holder))
    if settings.take_over:
        logs.logger.warning("taking over: %s", problem, extra={"event": "endpoint.prefix_take_over"})
        return None
    return fail(problem, REFUSED)


def run_server(app: Any, settings: Any) -> int:
    from .. import logs
    from ..engine import ServerUnavailable, configure_admin, serve

    if (refused := check_prefix_at_start(settings)) is not None:
        return refused
    if (unable := cannot_listen(settings.host, settings.port)) is not None:
        return fail(unable, USAGE)
    # Children ask the admin API whether a declared external call target is registered (decision 47).
    configure_admin(settings.admin_url)
    logs.event(
        "endpoint.serving",
        host=settings.host,
        port=settings.port,
        with_turn=settings.with_turn,
        server=settings.server,
    )
    try:
        asyncio.run(serve(app, settings.host, settings.port, server=settings.server))
    except ServerUnavailable as exc:
        return fail(str(exc), USAGE)
    except OSError as exc:
        if exc.errno not in CANNOT_LISTEN:
            raise
        return fail(
            f"cannot listen on {settings.host}:{settings.port}: {exc.strerror} "
            "(another process serves there? pick another --port or LASH_PORT)",
            USAGE,
        )
    return 0


# What binding the endpoint's port fails with: in use, not this machine's address, or not allowed.
CANNOT_LISTEN = frozenset({errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES})


def cannot_listen(host: str, port: int) -> str | None:
    """Why the endpoint could not listen on ``host:port``, found by binding it once first, or None.

    Each server words a failed bind its own way (granian's is a `RuntimeError` with a Rust backtrace,
    and it binds with `SO_REUSEPORT`, so a second endpoint on a port in use would share it): this
    probe answers alike for both, as one line."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return f"cannot listen on {host}:{port}: {exc.strerror} (is --host, or LASH_HOST, this machine's?)"
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers do: TIME_WAIT is free
        try:
            probe.bind(address)
            probe.listen()
        except OSError as exc:
            return (
                f"cannot listen on {host}:{port}: {exc.strerror} "
                "(another process serves there? pick another --port or LASH_PORT)"
            )
    return None


def load_app(spec: str) -> Any:
    """``module:attribute`` naming an ASGI app (what `lash_restate.app(...)` returns)."""

    module_name, _, attribute = spec.partition(":")
    try:
        app: Any = getattr(import_attribute(module_name), attribute)
    # Anything its import raised (a lash error: its `lash.app(...)` refused a prefix, a setting such
    # as LASH_ORPHAN_RETENTION, an identity key; a syntax error; its own start-up's failure): one line.
    except Exception as exc:
        raise SystemExit(f"lash-restate: cannot load app {spec!r}: {exc}") from None
    if not callable(app):
        raise SystemExit(f"lash-restate: {spec!r} is not an ASGI app (it is not callable)")
    if inspect.isclass(app):
        raise SystemExit(
            f"lash-restate: {spec!r} is a class, not an ASGI app: name what lash.app(...) returned"
        )
    # A function is checked for ASGI's three arguments; an app object (Starlette's) is served as given.
    if inspect.isfunction(app) or inspect.ismethod(app):
        try:
            signature = inspect.signature(app)
        except Exception:  # none to read (annotations that do not evaluate, on Python 3.14): as given
            return app
        try:
            signature.bind(None, None, None)  # an ASGI app takes (scope, receive, send)
        except TypeError:
            raise SystemExit(
                f"lash-restate: {spec!r} is not an ASGI app (it cannot take scope, receive and send: "
                f"{app!r}, a handler?): name what lash.app(...) returned"
            ) from None
    return app


def register_command(args: argparse.Namespace) -> int:
    from ..registration import PrefixTaken, RegistrationError, register_deployment

    try:
        answer = register_deployment(
            AdminApi.from_env(args.admin_url), args.endpoint_url, force=args.force, take_over=args.take_over
        )
    except PrefixTaken as exc:
        return fail(str(exc), REFUSED)
    except RegistrationError as exc:
        return fail(str(exc))
    if args.json:
        print(json.dumps(answer))
        return 0
    services = sorted(s["name"] for s in answer.get("services", []))
    print(f"registered {args.endpoint_url} as {answer.get('id')}: {', '.join(services)}")
    return 0


def dev_command(args: argparse.Namespace) -> int:
    from ..testing.dev import run_dev

    return run_dev(once=args.once, keep=args.keep, app=args.app)
