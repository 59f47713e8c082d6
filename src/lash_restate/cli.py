"""The `lash-restate` command: serve the endpoint, register it, run the local dev stack."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

from .contract import GroupExecutors

__all__ = ["main"]


def load_resolver(spec: str) -> GroupExecutors:
    """``module:attribute`` naming a `GroupExecutors` or a zero-argument factory of one."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise SystemExit(f"--resolver must be 'module:attribute', got {spec!r}")
    try:
        target: Any = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise SystemExit(f"cannot load resolver {spec!r}: {exc}") from None
    resolver = target
    if callable(target) and not hasattr(target, "resolve"):
        try:
            resolver = target()
        except Exception as exc:
            raise SystemExit(f"{spec!r} is not a GroupExecutors, and calling it failed: {exc}") from None
    if not isinstance(resolver, GroupExecutors):
        raise SystemExit(f"{spec!r} is not a GroupExecutors (it has no resolve(envelope) method)")
    return resolver


def _serve(args: argparse.Namespace) -> int:
    from .engine import build_app, serve

    keys = list(args.identity_key or [])
    keys += [k for k in os.environ.get("LASH_IDENTITY_KEYS", "").split(",") if k.strip()]
    app = build_app(load_resolver(args.resolver), with_turn=args.with_turn, identity_keys=keys)
    asyncio.run(serve(app, args.host, args.port))
    return 0


def _register(args: argparse.Namespace) -> int:
    from .devstack import StackError, register_deployment

    try:
        answer = register_deployment(args.admin_url, args.endpoint_url, force=args.force)
    except StackError as exc:
        print(f"lash-restate: {exc}", file=sys.stderr)
        return 1
    services = sorted(s["name"] for s in answer.get("services", []))
    print(f"registered {args.endpoint_url} as {answer.get('id')}: {', '.join(services)}")
    return 0


def _dev(args: argparse.Namespace) -> int:
    from .dev import run_dev

    return run_dev(once=args.once)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lash-restate", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="serve the deployment endpoint (hypercorn, HTTP/2 cleartext)")
    serve.add_argument("--host", default=os.environ.get("LASH_HOST", "0.0.0.0"))
    serve.add_argument("--port", type=int, default=int(os.environ.get("LASH_PORT", "9080")))
    serve.add_argument(
        "--resolver",
        default=os.environ.get("LASH_RESOLVER", "lash_restate.tools:demo_tools"),
        help="module:attribute of your GroupExecutors (default: the demo tools)",
    )
    serve.add_argument("--with-turn", action="store_true", help="also bind the LashTurn driver service")
    serve.add_argument(
        "--identity-key",
        action="append",
        help="accept only requests signed by this Restate identity key (publickeyv1_…); repeatable",
    )
    serve.set_defaults(run=_serve)

    register = sub.add_parser("register", help="register an endpoint with a Restate admin API")
    register.add_argument("--admin-url", default=os.environ.get("LASH_ADMIN_URL", "http://127.0.0.1:9070"))
    register.add_argument("--endpoint-url", default="http://127.0.0.1:9080")
    register.add_argument("--force", action="store_true", help="overwrite an existing deployment")
    register.set_defaults(run=_register)

    dev = sub.add_parser("dev", help="start restate-server and the endpoint, register, run a demo race")
    dev.add_argument("--once", action="store_true", help="exit after the demo instead of serving")
    dev.set_defaults(run=_dev)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.run(args))
