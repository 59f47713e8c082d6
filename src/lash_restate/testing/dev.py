"""``lash-restate dev``: a local Restate server and our endpoint, registered, with a demo race."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from ..engine import ROLES, named
from .processes import StackError, restate_server_binary
from .stack import LocalStack

__all__ = ["DEMO_RACE", "run_dev"]

DEMO_RACE: list[dict[str, Any]] = [
    {"type": "tool_call", "tool": "echo", "args": {"value": "slow arm", "delay_ms": 400}},
    {"type": "tool_call", "tool": "echo", "args": {"value": "fast arm", "delay_ms": 50}},
    {"type": "tool_call", "tool": "fail", "args": {"message": "failing arm", "delay_ms": 200}},
]


def _say(text: str) -> None:
    print(f"lash-restate dev: {text}", flush=True)


def _config_file() -> Path | None:
    for folder in [Path.cwd(), *Path.cwd().parents]:
        if (folder / "restate.toml").is_file():
            return folder / "restate.toml"
    return None


def demo(stack: LocalStack) -> dict[str, Any]:
    """Run the demo race as one `LashTurn` invocation: the winner, then every loser's rank, then close."""
    key = f"dev-{int(time.time() * 1000)}:group:demo:0"
    group = {
        "key": key,
        "wake": "first",
        "disposition": "run_to_completion",
        "children": [{"command": c, "replay_key": f"{key}/arm{i}"} for i, c in enumerate(DEMO_RACE)],
    }
    steps: list[dict[str, Any]] = [
        {"type": "open", "group": group},
        *[{"type": "next"}] * len(DEMO_RACE),
        {"type": "close"},
    ]
    results = asyncio.run(stack.turn(*steps))
    settlements = [r["ok"] for r in results[1 : 1 + len(DEMO_RACE)]]
    return {"group_key": key, "settlements": settlements}


def _describe(outcome: dict[str, Any]) -> str:
    if outcome["type"] == "ok":
        return f"fulfilled {json.dumps(outcome['value'])}"
    if outcome["type"] == "err":
        return f"rejected {json.dumps(outcome['message'])}"
    return "cancelled"


def _handler_urls(ingress: str, services: list[dict[str, Any]]) -> list[str]:
    """Where the ingress reaches each handler of the application's own services (not lash's), as
    the registration answered them: ``{KEY}`` stands for a virtual object's or workflow's key."""
    lash = {named(role) for role in ROLES}
    urls = []
    for service in services:
        if service.get("name") in lash:
            continue
        keyed = "/{KEY}" if service.get("ty") in ("VirtualObject", "Workflow") else ""
        for handler in service.get("handlers", []):
            urls.append(f"POST {ingress}/{service['name']}{keyed}/{handler['name']}")
    return sorted(urls)


def _serve_until_stopped() -> int:
    _say("press Ctrl-C to stop")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with contextlib.suppress(KeyboardInterrupt):
        stop.wait()
    return 0


def run_dev(*, once: bool, keep: bool = False, app: str | None = None) -> int:
    """Start, register, race, serve until Ctrl-C (or ``once``: exit after the race), then stop.

    With ``app`` (``module:attribute``, an application built with ``lash.app``, found from the
    current directory) the endpoint serves that application instead of lash's demo, and no demo
    race is run: yours are called through the ingress.

    The stack lives in a temporary directory, removed when it stops: kept (and named) with ``keep``
    or when something failed, for its logs."""
    try:
        restate_server_binary()  # before anything is started or written: say how to get one
    except StackError as exc:
        print(f"lash-restate dev: {exc}", file=sys.stderr)
        return 1
    stack = LocalStack(keep=keep)  # a temporary directory of its own: it goes when the stack stops
    server = stack.add_server(config_file=_config_file())
    endpoint = stack.add_endpoint(app=app) if app is not None else stack.add_endpoint()
    try:
        _say(f"starting restate-server (logs: {server.log_path}) …")
        stack.start_servers()
        _say(f"restate-server is up: ingress {server.ingress_url}, admin API and UI {server.admin_url}")
        # Known once the server is up (its ports may be picked again): with it, a first open refuses
        # a call to a declared target no deployment serves, where Restate would retry it, and a
        # `Cancel` would not reach the retrying call.
        endpoint.env["LASH_ADMIN_URL"] = server.admin_url
        _say(f"starting the endpoint on {endpoint.url} …")
        stack.start_endpoints()
        [answer] = stack.register()
        services = ", ".join(sorted(s["name"] for s in answer.get("services", [])))
        _say(f"registered deployment {answer.get('id')}: {services}")
        # `lash-restate groups` (and Restate's own CLI) read the admin API from this variable.
        _say(f"its groups: RESTATE_ADMIN_URL={server.admin_url} lash-restate groups list")
        if app is not None:
            _say(f"serving {app}; call its handlers at {server.ingress_url}/SERVICE/HANDLER:")
            for url in _handler_urls(server.ingress_url, answer.get("services", [])):
                _say(f"  {url}")
            return 0 if once else _serve_until_stopped()

        result = demo(stack)
        winner = result["settlements"][0]
        _say(f"demo race {result['group_key']}")
        _say(f"  winner: arm {winner['position']} ({_describe(winner['outcome'])})")
        order = ", ".join(f"arm {s['position']}" for s in result["settlements"])
        _say(f"  settlement order (durable ranks 1..{len(result['settlements'])}): {order}")
        for s in result["settlements"]:
            _say(f"    rank {s['rank']}: arm {s['position']} {_describe(s['outcome'])}")
        _say("your own application on such a stack: lash-restate dev --app MODULE:ATTR")
        if once:
            return 0
        body = '{"kind":"race","children":[{"type":"tool_call","tool":"echo","args":{"value":1}}]}'
        _say(f"serving; try: curl -X POST {server.ingress_url}/LashTurn/combine --json '{body}'")
        return _serve_until_stopped()
    except (StackError, httpx.HTTPError) as exc:
        print(f"lash-restate dev: {exc}", file=sys.stderr)
        stack.keep = True  # what failed is in the logs
        return 1
    finally:
        stack.stop()
        kept = f"; its logs and data are in {stack.base_dir}" if stack.keep else ""
        _say(f"stopped restate-server and the endpoint{kept}")
