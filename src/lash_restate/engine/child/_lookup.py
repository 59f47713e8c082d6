"""Whether a declared external call target is registered with the Restate cluster (decision 47).

A `Call` child may reach a service the application only declared (`lash.external`), served by
another deployment. Restate 1.7 answers a call to a service or handler no deployment registered
with RT0018, a retryable error of the *calling* invocation (the SDK never sees it), so a child
calling a declared target nobody binds would retry for ever. With the admin API's address
(``lash-restate serve --admin-url``, else the endpoint's ``RESTATE_ADMIN_URL`` as Restate's CLI reads
it, else its ``LASH_ADMIN_URL``), a child asks the admin API first and ends as a terminal 404 when
the cluster does not know the handler. Without an address, or when the admin API cannot be reached,
the declaration is trusted as before.
"""

from __future__ import annotations

import os
import time
from typing import Any
from urllib.parse import quote

import httpx

from ... import logs
from ..._http import tls
from ...admin import AdminApi, AdminError, token_from_env
from ...contract import Call

__all__ = ["ADMIN_URL_ENV", "KNOWN_FOR_S", "configure_admin", "served_elsewhere", "unregistered"]

ADMIN_URL_ENV = "LASH_ADMIN_URL"
# Read first, as Restate's own CLI and lash's `register` and `groups` read it.
RESTATE_ADMIN_URL_ENV = "RESTATE_ADMIN_URL"
# How long a handler the admin API listed is taken as registered without asking again: a wide group
# of calls asks once, and a target removed meanwhile is seen at the child's next attempt after this.
KNOWN_FOR_S = 5.0
_TIMEOUT_S = 5.0
# An admin API that does not answer is said once a minute per target, not per call child (a wide
# group's).
_WARN_EVERY_S = 60.0


class _Lookup:
    admin: AdminApi | None = None
    configured = False
    known: dict[str, tuple[float, frozenset[str]]] = {}  # noqa: RUF012  # one process-wide cache
    warned: dict[str, float] = {}  # noqa: RUF012  # per target, when its `child.target_unchecked` was logged


def configure_admin(url: str | None) -> None:
    """Where this endpoint's children ask which services the cluster binds (None: nobody is asked)."""
    _Lookup.admin = AdminApi(url, token_from_env()) if url else None
    _Lookup.configured = True
    _Lookup.known.clear()


def _admin() -> AdminApi | None:
    if not _Lookup.configured:
        configure_admin(os.environ.get(RESTATE_ADMIN_URL_ENV) or os.environ.get(ADMIN_URL_ENV) or None)
    return _Lookup.admin


async def served_elsewhere(call: Call) -> bool:
    """Whether the admin API says some deployment of the cluster serves ``call``'s handler (False when
    it says none does, or when that cannot be told)."""
    if _admin() is None or await unregistered(call) is not None:
        return False
    cached = _Lookup.known.get(call.service)  # fresh if the admin API answered: else it could not tell
    return cached is not None and time.monotonic() - cached[0] < KNOWN_FOR_S and call.handler in cached[1]


async def unregistered(call: Call) -> str | None:
    """Why the cluster cannot route ``call`` (no deployment binds its service or handler), or None
    when it can, or when that cannot be told (no admin API configured, or it did not answer)."""
    admin = _admin()
    if admin is None:
        return None
    now = time.monotonic()
    cached = _Lookup.known.get(call.service)
    if cached is not None and now - cached[0] < KNOWN_FOR_S and call.handler in cached[1]:
        return None
    url = f"{admin.url.rstrip('/')}/services/{quote(call.service, safe='')}"  # a name is user input
    try:
        headers = {"accept": "application/json", **admin.headers()}
        async with httpx.AsyncClient(verify=tls(), timeout=_TIMEOUT_S) as client:
            response = await client.get(url, headers=headers)
    except AdminError as exc:  # a token no header can carry: it cannot tell (raised, retried for ever)
        _unchecked(call, exc.message)
        return None
    except (httpx.HTTPError, httpx.InvalidURL) as exc:  # an unusable URL is not an HTTPError
        _unchecked(call, admin.hidden(f"cannot reach the admin API at {admin.url} ({exc})"))
        return None
    if response.status_code == 404:
        return f"no deployment registered with the Restate cluster serves {call.service!r}"
    if response.status_code != 200:
        _unchecked(call, f"the admin API at {admin.shown} answered {response.status_code}")
        return None
    try:
        handlers = _handlers(response.json())
    except ValueError:  # not the admin API's JSON: it cannot tell, as when it does not answer
        _unchecked(call, f"the admin API at {admin.shown} answered something that is not JSON")
        return None
    # Known from its answer on: stamped before the ask, a slow answer would be stale as it came.
    _Lookup.known[call.service] = (time.monotonic(), handlers)
    if call.handler not in handlers:
        return f"no deployment registered with the Restate cluster serves {call.target}"
    return None


def _handlers(service: Any) -> frozenset[str]:
    entries = service.get("handlers", []) if isinstance(service, dict) else []
    return frozenset(str(h["name"]) for h in entries if isinstance(h, dict) and "name" in h)


def _unchecked(call: Call, why: str) -> None:
    now = time.monotonic()
    if now - _Lookup.warned.get(call.target, -_WARN_EVERY_S) < _WARN_EVERY_S:
        return
    _Lookup.warned[call.target] = now
    logs.logger.warning(
        "cannot check that %s is registered, calling it anyway: %s",
        call.target,
        why,
        extra={"event": "child.target_unchecked"},
    )
