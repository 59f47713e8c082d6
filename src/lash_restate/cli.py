"""The `lash-restate` command: serve the endpoint, register it, inspect open groups, run the dev stack."""

from __future__ import annotations

import argparse
import asyncio
import calendar
import errno
import importlib
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from .admin import AdminApi
from .contract import GroupExecutors

__all__ = ["build_parser", "load_resolver", "main"]

_ADMIN_HELP = (
    "Restate admin API [RESTATE_ADMIN_URL, then LASH_ADMIN_URL; default http://127.0.0.1:9070]; "
    "a bearer token is read from RESTATE_AUTH_TOKEN"
)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("lash-restate")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "unknown"


_PREFIX_HELP = "the prefix of lash's service names, {prefix}Group, … (default Lash)"
_SERVE_PREFIX_HELP = (
    "the prefix of lash's service names, {prefix}Group, …; with --app, the prefix its lash.app(...) takes "
    "when it names none (default Lash) [LASH_PREFIX]"
)


def _fail(message: str, code: int = 1) -> int:
    print(f"lash-restate: {message}", file=sys.stderr)
    return code


def _import(module_name: str) -> Any:
    """Import a module the user named, finding it in the current directory first, as hypercorn and
    uvicorn do (the installed ``lash-restate`` command has its own directory on the path, not it)."""
    here = os.getcwd()
    if here not in sys.path:
        sys.path.insert(0, here)
    return importlib.import_module(module_name)


def load_resolver(spec: str) -> GroupExecutors:
    """``module:attribute`` naming a `GroupExecutors` or a zero-argument factory of one."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise SystemExit(f"lash-restate: --resolver must be 'module:attribute', got {spec!r}")
    try:
        target: Any = getattr(_import(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise SystemExit(f"lash-restate: cannot load resolver {spec!r}: {exc}") from None
    resolver = target
    if callable(target) and not hasattr(target, "resolve"):
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


def _serve(args: argparse.Namespace) -> int:
    from . import logs
    from .engine import BATCH_FROM, DeploymentError, build_app, groups_wired, use_prefix
    from .settings import ServeSettings, SettingsError

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
        return _fail(str(exc), 2)
    logs.configure(settings.verbose)
    if settings.app is not None:
        if settings.resolver is not None or settings.with_turn or settings.app_name is not None:
            return _fail(
                "--app serves an application as it is: it takes no --resolver, --with-turn or --app-name "
                "(name it with lash.app(..., name=...))",
                2,
            )
        if settings.prefix is not None:
            # Chosen before the app is imported: its `lash.app(...)` naming no prefix takes this one
            # (decision 54), and one naming another is refused as it loads.
            try:
                use_prefix(settings.prefix)
            except ValueError as exc:
                return _fail(str(exc), 2)
        try:
            app = load_app(settings.app)
        except SystemExit as exc:
            return _fail(str(exc).removeprefix("lash-restate: "), 2)
        if not groups_wired():
            # A plain `restate.app(...)`: lash called from its handlers would answer 501 on each call.
            print(
                f"lash-restate: warning: {settings.app} serves none of lash's services and declares none "
                "served elsewhere, so a lash combinator in its handlers is refused (501 "
                "effect_group_unsupported). Build it with lash.app(...), or call lash.use_prefix() "
                "where another deployment serves them",
                file=sys.stderr,
            )
        return _run_server(app, settings)
    if settings.resolver is None:
        return _fail(
            "serve needs a resolver or an app: pass --resolver module:attribute (or set LASH_RESOLVER) "
            "naming your GroupExecutors, e.g. a ToolRegistry, or --app module:attribute (LASH_APP) "
            "naming the app lash_restate.app(...) built",
            2,
        )
    resolver = load_resolver(settings.resolver)
    extra: list[Any] = []
    external: list[Any] = []
    if settings.with_turn:
        from .testing import demo_call_services, demo_external, turn_service  # test tooling: only when asked

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
        return _fail(str(exc), 2)
    return _run_server(app, settings)


def _check_prefix_at_start(settings: Any) -> int | None:
    """With an admin URL, refuse to start an endpoint whose lash services another application serves
    now, unless it served them itself before (then it is the one taken over: it keeps serving what is
    pinned to it, and says so) or ``take_over`` (decision 43). An unreachable admin API is a warning."""
    from . import logs
    from .engine import served_application
    from .registration import Application, PrefixTaken, RegistrationError, check_at_start, taken_over

    served = served_application()
    if settings.admin_url is None or served is None:
        return None
    try:
        found = check_at_start(AdminApi.from_env(settings.admin_url), served)
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
    return _fail(problem, 4)


def _run_server(app: Any, settings: Any) -> int:
    from . import logs
    from .engine import ServerUnavailable, configure_admin, serve

    if (refused := _check_prefix_at_start(settings)) is not None:
        return refused
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
        return _fail(str(exc), 2)
    except OSError as exc:
        if exc.errno not in _CANNOT_LISTEN:
            raise
        return _fail(
            f"cannot listen on {settings.host}:{settings.port}: {exc.strerror} "
            "(another process serves there? pick another --port or LASH_PORT)",
            2,
        )
    return 0


# What binding the endpoint's port fails with: in use, not this machine's address, or not allowed.
_CANNOT_LISTEN = frozenset({errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES})


def load_app(spec: str) -> Any:
    """``module:attribute`` naming an ASGI app (what `lash_restate.app(...)` returns)."""
    from .engine import PrefixChosen

    module_name, _, attribute = spec.partition(":")
    try:
        app: Any = getattr(_import(module_name), attribute)
    except (ImportError, AttributeError, PrefixChosen) as exc:
        raise SystemExit(f"lash-restate: cannot load app {spec!r}: {exc}") from None
    if not callable(app):
        raise SystemExit(f"lash-restate: {spec!r} is not an ASGI app (it is not callable)")
    return app


def _register(args: argparse.Namespace) -> int:
    from .registration import PrefixTaken, RegistrationError, register_deployment

    try:
        answer = register_deployment(
            AdminApi.from_env(args.admin_url), args.endpoint_url, force=args.force, take_over=args.take_over
        )
    except PrefixTaken as exc:
        return _fail(str(exc), 4)
    except RegistrationError as exc:
        return _fail(str(exc))
    if args.json:
        print(json.dumps(answer))
        return 0
    services = sorted(s["name"] for s in answer.get("services", []))
    print(f"registered {args.endpoint_url} as {answer.get('id')}: {', '.join(services)}")
    return 0


def _table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    widths = {c: max([len(c), *(len(str(r[c])) for r in rows)]) for c in columns}
    lines = ["  ".join(c.upper().ljust(widths[c]) for c in columns)]
    lines += ["  ".join(str(r[c]).ljust(widths[c]) for c in columns) for r in rows]
    return "\n".join(line.rstrip() for line in lines)


_COLUMNS = [
    "group_key",
    "child_count",
    "settled",
    "wake",
    "disposition",
    "mode",
    "state",
    "age",
    "paused",
    "missed",
    "reclaim",
]
_CHILD_COLUMNS = ["position", "replay_key", "rank", "outcome", "invocation_id", "status", "missed"]


def _age(seconds: int | None) -> str:
    """``3d4h``, ``5m12s``: how long a group has been open, to the two largest units."""
    if seconds is None:
        return "-"
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size or (unit == "s" and not parts):
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return "".join(parts[:2])


def _use_prefix(args: argparse.Namespace) -> int | None:
    """Inspect lash's services under ``--prefix`` (decision 40); a bad prefix is one clear line."""
    from .engine import use_prefix

    try:
        use_prefix(args.prefix)
    except ValueError as exc:
        return _fail(str(exc), 2)
    return None


def _reclaim(at: str | None, now: float) -> str:
    """When an orphan is reclaimed, from now: ``in 23h59m``, ``due``; ``-`` for any other group."""
    if at is None:
        return "-"
    seconds = calendar.timegm(time.strptime(at, "%Y-%m-%dT%H:%M:%SZ")) - now
    return f"in {_age(int(seconds))}" if seconds >= 1 else "due"


def _groups_list(args: argparse.Namespace) -> int:
    from .inspection import InspectionError, list_open_groups

    if (failed := _use_prefix(args)) is not None:
        return failed
    try:
        admin = AdminApi.from_env(args.admin_url)
        groups = [g.as_dict() for g in list_open_groups(admin, orphaned=args.orphaned, state=args.state)]
    except InspectionError as exc:
        return _fail(str(exc))
    if args.json:
        print(json.dumps(groups))
    elif groups:
        now = time.time()
        rows = [{**g, "age": _age(g["age_s"]), "reclaim": _reclaim(g["reclaim_at"], now)} for g in groups]
        print(_table(rows, _COLUMNS))
    else:
        print("no open groups")
    return 0


def _groups_show(args: argparse.Namespace) -> int:
    from .inspection import InspectionError, show_group

    if (failed := _use_prefix(args)) is not None:
        return failed
    try:
        group = show_group(AdminApi.from_env(args.admin_url), args.key)
    except InspectionError as exc:
        return _fail(str(exc))
    if group is None:
        if args.json:
            print("null")
        return _fail(f"no open group {args.key!r}", 3)
    shown = group.as_dict()
    if args.json:
        print(json.dumps(shown))
        return 0
    children, openers = shown.pop("children"), shown.pop("openers")
    shown["age"] = _age(shown.pop("age_s"))
    for name, value in shown.items():
        print(f"{name + ':':<13} {value}")
    for opener in openers:
        how = "running" if opener["alive"] else (opener["ended"] or "ended: how is not known")
        print(f"{'opener:':<13} {opener['invocation_id']} ({how})")
    print()
    rows = [{k: "-" if v is None else v for k, v in c.items() if k != "paused"} for c in children]
    print(_table(rows, _CHILD_COLUMNS))
    if any(c["missed"] for c in children):
        print()
        print(
            "a missed child's runner was missing when it ran (a tool or handler this deployment does not "
            "serve): it ended with no outcome. Once the endpoint serves it again, "
            f"`lash-restate groups redispatch {args.key}` runs it again (a reopen does too)"
        )
    paused = [c for c in children if c["paused"] is not None]
    for child in paused:
        p = child["paused"]
        print()
        print(
            f"child {child['position']} is waiting on {p['target']} ({p['invocation_id']}), which Restate "
            "paused when its retries ran out; last failure"
            + (f" [{p['last_failure_error_code']}]" if p["last_failure_error_code"] else "")
            + f": {p['last_failure']}"
        )
    if paused:
        print()
        print(
            "fix the cause, then resume it (restate invocations resume ID, or PATCH /invocations/ID/resume "
            "on the admin API), or kill it (restate invocations kill ID): the child then settles as failed"
        )
    return 0


def _groups_close(args: argparse.Namespace) -> int:
    from .inspection import CloseRefused, InspectionError, close_group

    if (failed := _use_prefix(args)) is not None:
        return failed
    try:
        result = close_group(
            AdminApi.from_env(args.admin_url),
            args.key,
            cancel=args.cancel,
            force=args.force,
            ingress=args.ingress_url,
        )
    except CloseRefused as exc:
        return _fail(str(exc), 4)
    except InspectionError as exc:
        return _fail(str(exc))
    if args.json:
        print(json.dumps(result.as_dict()))
    elif result.closed:
        cancels = f", {result.cancelled} cancel(s) sent" if result.cancelled else ""
        print(f"closed {args.key} (it was {result.was}; losers: {result.disposition}{cancels})")
        if result.running:
            print(f"{len(result.running)} of its children still run, as a RunToCompletion group's do:")
            for child in result.running:
                print(f"  child {child.position} ({child.replay_key}): {child.invocation_id} {child.status}")
            print(
                "cancel one with `restate invocations cancel ID`; `groups close KEY --cancel` cancels "
                "them with the close"
            )
    else:
        print(f"{args.key} is not open (closed already, or never opened): nothing to close")
    return 0


def _groups_redispatch(args: argparse.Namespace) -> int:
    from .inspection import InspectionError, redispatch_missed

    if (failed := _use_prefix(args)) is not None:
        return failed
    if (args.key is None) == (not args.all):
        return _fail("name one group KEY, or pass --all for every group with missed children", 2)
    try:
        results = redispatch_missed(AdminApi.from_env(args.admin_url), args.key, ingress=args.ingress_url)
    except InspectionError as exc:
        return _fail(str(exc))
    if args.json:
        print(json.dumps([r.as_dict() for r in results]))
        return 0
    for r in results:
        still = f"; {r.unroutable} still have no runner on the endpoint" if r.unroutable else ""
        print(f"{r.group_key}: {r.dispatched} child(ren) dispatched again{still}")
    if not results:
        print("no open group has children whose runner was missing")
    return 0


def _groups_staged(args: argparse.Namespace) -> int:
    from .inspection import InspectionError, left_staged, release_staged

    if (failed := _use_prefix(args)) is not None:
        return failed
    try:
        admin = AdminApi.from_env(args.admin_url)
        parts = left_staged(admin)
        for part in parts if args.release else []:
            release_staged(admin, part)
    except InspectionError as exc:
        return _fail(str(exc))
    if args.json:
        print(json.dumps([{**p.as_dict(), "released": args.release} for p in parts]))
        return 0
    for part in parts:
        by = f"staged by {part.opener}, which ended" if part.opener else "its opener is long gone"
        print(f"{'released' if args.release else 'left'} {part.pump_key} (group {part.group_key}; {by})")
    if not parts:
        print("no parts left staged")
    elif not args.release:
        print(
            f"{len(parts)} part(s) left staged by openers that ended before their open: --release frees them"
        )
    return 0


def _dev(args: argparse.Namespace) -> int:
    from .testing.dev import run_dev

    return run_dev(once=args.once, keep=args.keep)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lash-restate", description=__doc__)
    parser.add_argument("--version", action="version", version=f"lash-restate {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub.add_parser(
        "serve",
        help="serve the deployment endpoint (hypercorn or granian, HTTP/2 cleartext)",
        description="Serve the endpoint. Every flag also reads an environment variable (in brackets); "
        "flags win.",
    )
    serve.add_argument("--host", help="bind address [LASH_HOST] (default 0.0.0.0)")
    serve.add_argument("--port", type=int, help="port [LASH_PORT] (default 9080)")
    serve.add_argument(
        "--resolver",
        help="module:attribute of your GroupExecutors: lash's services and your tools [LASH_RESOLVER]",
    )
    serve.add_argument(
        "--app",
        help="module:attribute of an app built with lash_restate.app(...), served as it is [LASH_APP]",
    )
    serve.add_argument(
        "--with-turn",
        action="store_true",
        help="also bind the LashTurn driver and the demo call targets [LASH_WITH_TURN]",
    )
    serve.add_argument(
        "--identity-key",
        action="append",
        help="accept only requests signed with this Restate key (publickeyv1_…); repeatable "
        "[LASH_IDENTITY_KEYS, comma-separated]",
    )
    serve.add_argument(
        "--batch-from",
        type=int,
        help="groups with at least this many children settle in batches through one pump invocation "
        "that starts them (narrower groups with a call child through a pump too) "
        "[LASH_BATCH_FROM] (default 3)",
    )
    serve.add_argument(
        "--server",
        choices=["hypercorn", "granian"],
        help="the HTTP server, in this process either way [LASH_SERVER] (default hypercorn; granian needs "
        "the granian extra: pip install 'lash-restate[granian]')",
    )
    serve.add_argument("--prefix", help=_SERVE_PREFIX_HELP)
    serve.add_argument(
        "--app-name",
        help="name this application on lash's services, so an upgrade keeps its identity whatever "
        "services it adds, removes or renames [LASH_APP_NAME] (with --app: lash.app(..., name=...))",
    )
    serve.add_argument(
        "--admin-url",
        help="check at start, through this admin API, that no other application serves lash's services "
        "under this prefix; refuse to start (exit 4) if one does; also where children check a declared "
        "call target [RESTATE_ADMIN_URL, then LASH_ADMIN_URL] (default: no check)",
    )
    serve.add_argument(
        "--take-over",
        action="store_true",
        help="start even though another application serves lash's services under this prefix "
        "[LASH_TAKE_OVER]",
    )
    serve.add_argument("-v", "--verbose", action="store_true", help="log every group event [LASH_VERBOSE]")
    serve.set_defaults(run=_serve)

    register = sub.add_parser("register", help="register an endpoint with a Restate admin API")
    register.add_argument("--admin-url", help=_ADMIN_HELP)
    register.add_argument("--json", action="store_true", help="print the admin API's answer as JSON")
    register.add_argument("--endpoint-url", default="http://127.0.0.1:9080")
    register.add_argument("--force", action="store_true", help="overwrite an existing deployment")
    register.add_argument(
        "--take-over",
        action="store_true",
        help="register even though lash's services under its prefix belong to another application's "
        "deployment (refused otherwise, exit 4)",
    )
    register.set_defaults(run=_register)

    groups = sub.add_parser("groups", help="inspect open groups through the admin API, and close one")
    groups_sub = groups.add_subparsers(dest="groups_command", required=True, metavar="SUBCOMMAND")
    for name, helptext, run in (
        (
            "list",
            "every open group with its child count, settled count, wake rule, disposition, settlement "
            "mode, state (open: an opener runs; parked: its latest opener returned normally, so a "
            "continuation holds it; orphaned: nobody does), age and paused children",
            _groups_list,
        ),
        (
            "show",
            "one open group: its state and why, its openers, when it was opened, and every child "
            "(with what Restate paused on its path and the last failure)",
            _groups_show,
        ),
        (
            "close",
            "close one group as its caller would: cancel its unsettled children if its losers are "
            "Cancel (or with --cancel), release its outcomes, delete its state. Refuses a parked or "
            "open group unless --force; a group that is not open is left alone (exit 0)",
            _groups_close,
        ),
        (
            "redispatch",
            "run again the children whose runner was missing (`groups show` marks them missed: their "
            "run ended with no outcome), once a deployment serves them again; the waiting caller then "
            "reads their ranks, no reopen needed. A child runs again only if it has no outcome",
            _groups_redispatch,
        ),
        (
            "staged",
            "the children an open too large for one message staged with its pumps, left by an opener "
            "that ended before it sent the open: no group holds them. --release frees them",
            _groups_staged,
        ),
    ):
        cmd = groups_sub.add_parser(name, help=helptext, description=helptext)
        if name in ("show", "close"):
            cmd.add_argument("key", help="the group key, {scope_id}:group:{batch_id}:{occurrence}")
        elif name == "staged":
            cmd.add_argument("--release", action="store_true", help="release the parts listed")
        elif name == "redispatch":
            cmd.add_argument("key", nargs="?", help="the group key (or --all)")
            cmd.add_argument("--all", action="store_true", help="every open group with missed children")
        else:
            cmd.add_argument(
                "--orphaned", action="store_true", help="only groups none of whose openers holds them"
            )
            cmd.add_argument(
                "--state", choices=["open", "parked", "orphaned"], help="only groups in this state"
            )
        if name in ("close", "redispatch"):
            cmd.add_argument(
                "--ingress-url",
                help="Restate ingress, where the request is sent [RESTATE_INGRESS_URL, then "
                "LASH_INGRESS_URL; default http://127.0.0.1:8080]",
            )
        if name == "close":
            cmd.add_argument(
                "--cancel",
                action="store_true",
                help="cancel the unsettled children of a RunToCompletion group too (a Cancel group's are)",
            )
            cmd.add_argument(
                "--force",
                action="store_true",
                help="close a parked group (a continuation that resumes it then finds it closed) or an "
                "open one (its running opener's next read fails)",
            )
        cmd.add_argument(
            "--admin-url",
            help=_ADMIN_HELP,
        )
        cmd.add_argument("--json", action="store_true", help="machine-readable output")
        cmd.add_argument("--prefix", default="Lash", help=_PREFIX_HELP)
        cmd.set_defaults(run=run)

    dev = sub.add_parser("dev", help="start restate-server and the endpoint, register, run a demo race")
    dev.add_argument("--once", action="store_true", help="exit after the demo instead of serving")
    dev.add_argument(
        "--keep",
        action="store_true",
        help="keep the server's data and the logs after it stops (default: removed, unless it failed)",
    )
    dev.set_defaults(run=_dev)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.run(args))
