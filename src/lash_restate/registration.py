"""Registering a deployment with a Restate admin API: what `lash-restate register` and the local stack do.

Restate takes a deployment that serves a service another deployment serves for that service's new
version: it cannot tell an upgrade from another application reusing the name. So before it
registers, `register_deployment` asks the admin API what the new deployment serves (a dry run of the
registration) and which deployment serves lash's services under the same prefix now, and refuses to
move them from another application's deployment (`PrefixTaken`, decision 43).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from .admin import AdminApi, AdminError, AdminRefused
from .contract import LashError, RuntimeErrorCode
from .engine import APP_METADATA, GROUP, ROLES, ServedApplication, check_prefix

__all__ = [
    "Application",
    "PrefixTaken",
    "RegistrationError",
    "RegistrationRefused",
    "StartCheck",
    "check_at_start",
    "prefix_holders",
    "register_deployment",
    "taken_over",
]


class RegistrationError(LashError, RuntimeError):
    """The admin API could not be reached or refused the deployment; the message is one line."""

    code = RuntimeErrorCode.REGISTRATION

    def __str__(self) -> str:
        return self.message


class RegistrationRefused(RegistrationError):
    """The admin API refused this client (401 or 403): its token is missing or wrong; or what
    answers at the admin URL is no Restate admin API (the ingress's port given, say)."""

    code = RuntimeErrorCode.REGISTRATION_REFUSED


def _wrapped(exc: AdminError) -> RegistrationError:
    return RegistrationRefused(str(exc)) if isinstance(exc, AdminRefused) else RegistrationError(str(exc))


@dataclass(frozen=True)
class Application:
    """A deployment's application, as the admin API shows it: lash's prefix there (None if it serves
    no lash services), the name it gave itself (the ``lash.app`` metadata on lash's services, if
    any) and its own services (every service it serves but lash's four)."""

    deployment_id: str
    uri: str
    prefix: str | None
    name: str | None
    services: frozenset[str]

    @classmethod
    def of(cls, deployment: Mapping[str, Any], uri: str | None = None) -> Application:
        """From a deployment as the admin API describes it (``GET /deployments/{id}``, or the answer
        to ``POST /deployments``)."""
        services: dict[str, Mapping[str, Any]] = {
            str(s["name"]): s for s in deployment.get("services", []) if isinstance(s, Mapping)
        }
        prefix = _lash_prefix(services)
        lash = {f"{prefix}{role}" for role in ROLES} if prefix is not None else set()
        named = services[f"{prefix}{GROUP}"].get("metadata") if prefix is not None else None
        name = named.get(APP_METADATA) if isinstance(named, Mapping) else None
        return cls(
            deployment_id=str(deployment.get("id", "")),
            uri=uri if uri is not None else str(deployment.get("uri", "")),
            prefix=prefix,
            name=str(name) if name is not None else None,
            services=frozenset(services) - lash,
        )

    @classmethod
    def served(cls, served: ServedApplication) -> Application:
        """This process's own endpoint, as `lash.app` assembled it."""
        return cls("", "", served.prefix, served.name, served.services)

    def same_as(self, other: Application) -> bool:
        """Whether ``other`` is this application (an upgrade of it, or it again).

        Two names decide alone; otherwise two deployments are one application when they serve a
        service of their own in common (Restate would move that service too), or the same services.
        """
        if self.name is not None and other.name is not None:
            return self.name == other.name
        return bool(self.services & other.services) or self.services == other.services

    def describe(self) -> str:
        if self.name is not None:
            return f"application {self.name!r}"
        if self.services:
            return f"the application serving {', '.join(sorted(self.services))}"
        return "an application serving lash's services alone"


def _lash_prefix(services: Iterable[str]) -> str | None:
    names = set(services)
    for service in sorted(names):
        prefix = service.removesuffix(GROUP)
        if prefix == service or not all(f"{prefix}{role}" in names for role in ROLES):
            continue
        try:
            return check_prefix(prefix)
        except ValueError:
            continue
    return None


class PrefixTaken(RegistrationError):
    """Registering the deployment would move lash's services from another application's deployment:
    that application's groups would then run where its own services are unknown. The message names
    the other deployment and says how to choose another prefix."""

    code = RuntimeErrorCode.PREFIX_TAKEN

    def __init__(self, endpoint_url: str, new: Application, holder: Application) -> None:
        self.endpoint_url, self.new, self.holder = endpoint_url, new, holder
        super().__init__(
            f"{_held(holder, new)}; registering {endpoint_url} ({new.describe()}) would move them there "
            "and break that application's groups: choose another prefix for this one "
            f"({_CHOOSE}), or take them over on purpose with --take-over"
        )

    def __reduce__(self) -> tuple[type[PrefixTaken], tuple[str, Application, Application]]:
        return (PrefixTaken, (self.endpoint_url, self.new, self.holder))


_CHOOSE = "lash-restate serve --prefix P, lash.app(..., prefix=P) or LASH_PREFIX"


def _held(holder: Application, new: Application) -> str:
    services = ", ".join(f"{holder.prefix or new.prefix}{role}" for role in ROLES)
    return (
        f"{services} are served by deployment {holder.deployment_id} at {holder.uri}, of {holder.describe()}"
    )


def taken_over(holder: Application, mine: Application) -> str:
    """One line for an endpoint whose application served lash's services before another took them."""
    return (
        f"{_held(holder, mine)}, which took them over from this application ({mine.describe()}): this "
        f"application's groups fail until one of the two chooses another prefix ({_CHOOSE}) and is "
        "registered again"
    )


def _answer(admin: AdminApi, body: dict[str, Any], endpoint_url: str, timeout: float) -> Any:
    try:
        response = admin.post("/deployments", body, timeout=timeout)
    except AdminError as exc:
        raise _wrapped(exc) from None
    if response.status_code >= 300:
        raise RegistrationError(
            f"registering {endpoint_url} failed ({response.status_code}): {response.text[:500]}"
        )
    try:
        return response.json()
    except ValueError:  # a proxy's page, say: not the admin API's answer
        raise RegistrationError(
            f"registering {endpoint_url}: the admin API answered with no JSON: {response.text[:200]}"
        ) from None


def _get(admin: AdminApi, path: str, timeout: float) -> Any | None:
    """The admin API's answer to ``GET path``, or None where it has no such thing (404)."""
    try:
        response = admin.get(path, timeout=timeout)
    except AdminError as exc:
        raise _wrapped(exc) from None
    if response.status_code == 404:
        return None
    if response.status_code >= 300:
        raise RegistrationError(
            f"the admin API answered GET {path} with {response.status_code}: {response.text}"
        )
    try:
        return response.json()
    except ValueError:
        raise RegistrationError(f"the admin API answered GET {path} with no JSON: {response.text}") from None


def prefix_holders(admin: AdminApi, prefix: str, *, timeout: float = 30) -> list[Application]:
    """The deployments that serve lash's services under ``prefix`` now (normally one; none before the
    first registration)."""
    ids: list[str] = []
    for role in ROLES:
        service = _get(admin, f"/services/{quote(prefix + role, safe='')}", timeout)
        if isinstance(service, Mapping) and (found := service.get("deployment_id")) and found not in ids:
            ids.append(str(found))
    deployments = [_get(admin, f"/deployments/{quote(i, safe='')}", timeout) for i in ids]
    return [Application.of(d) for d in deployments if isinstance(d, Mapping)]


def register_deployment(
    admin: AdminApi | str,
    endpoint_url: str,
    *,
    force: bool = True,
    take_over: bool = False,
    timeout: float = 30,
) -> Any:
    """Register (or, with ``force``, re-register) ``endpoint_url``; returns the admin API's answer.

    Refused with `PrefixTaken`, before anything is registered, when the deployment's lash services
    are served now by another application's deployment, unless ``take_over``: an upgrade of the same
    application (another URL, or the same with ``force``) is registered.
    """
    admin = AdminApi(admin) if isinstance(admin, str) else admin
    # What the endpoint serves now: a dry run that may replace, so Restate discovers it afresh.
    dry = _answer(admin, {"uri": endpoint_url, "force": True, "dry_run": True}, endpoint_url, timeout)
    if not take_over:
        new = Application.of(dry, uri=endpoint_url)
        if new.prefix is not None:
            for holder in prefix_holders(admin, new.prefix, timeout=timeout):
                if not holder.same_as(new):
                    raise PrefixTaken(endpoint_url, new, holder)
    answer = _answer(admin, {"uri": endpoint_url, "force": force}, endpoint_url, timeout)
    if not force and _handlers(answer) != _handlers(dry):
        # Restate keeps a deployment registered at this URL as it was, and answers with it.
        raise _unchanged(endpoint_url, answer, dry)
    return answer


def _unchanged(endpoint_url: str, registered: Any, serves: Any) -> RegistrationError:
    """The refusal for an endpoint URL registered already that serves other handlers now: without
    force, Restate kept the deployment as it was, so a new handler would not be found."""
    differs = sorted(f"{name}/{handler}" for name, handler in _handlers(registered) ^ _handlers(serves))
    shown = ", ".join(differs[:10]) + (f" and {len(differs) - 10} more" if len(differs) > 10 else "")
    return RegistrationError(
        f"{endpoint_url} is registered already (as {registered.get('id')}) with other handlers than "
        f"it serves now ({shown}): Restate kept that deployment unchanged. Register it again with "
        "--force (force=True) to replace it, or serve the new version at a new URL"
    )


def _handlers(answer: Any) -> frozenset[tuple[str, str]]:
    """(service, handler) of every handler a deployment answer lists."""
    services = answer.get("services", []) if isinstance(answer, Mapping) else []
    return frozenset(
        (str(service.get("name")), str(handler.get("name")))
        for service in services
        for handler in service.get("handlers", [])
        if isinstance(handler, Mapping)
    )


@dataclass(frozen=True)
class StartCheck:
    """What an endpoint starting with an admin URL learns: who serves lash's services under its
    prefix now (None: nobody), whether that is this application, and whether this application
    served them before (then another took them over from it)."""

    holder: Application | None
    ours: bool
    held_before: bool


def check_admin_api(admin: AdminApi, *, timeout: float = 10) -> None:
    """Refuse an admin URL that answers as no Restate admin API does (`GET /version` names the
    server's version and admin API versions there): the ingress's port given by mistake answers
    every service's look-up 404, which reads as "nobody serves it", so the start check would pass
    and every child's look-up of a declared call target would end its child 404."""
    try:
        response = admin.get("/version", timeout=timeout)
    except AdminError as exc:
        raise _wrapped(exc) from None
    try:
        answer = response.json() if response.status_code == 200 else None
    except ValueError:
        answer = None
    if not isinstance(answer, Mapping) or "max_admin_api_version" not in answer:
        raise RegistrationRefused(
            f"{admin.shown} is not a Restate admin API (GET /version answered {response.status_code}: "
            f"{admin.hidden(response.text[:120])}): give the admin API's address (port 9070 by default)"
        )


def check_at_start(admin: AdminApi, served: ServedApplication, *, timeout: float = 10) -> StartCheck:
    """Where lash's services under ``served.prefix`` stand, for an endpoint about to serve ``served``."""
    check_admin_api(admin, timeout=timeout)
    mine = Application.served(served)
    holders = prefix_holders(admin, served.prefix, timeout=timeout)
    stranger = next((h for h in holders if not h.same_as(mine)), None)
    if stranger is None:
        return StartCheck(holders[0] if holders else None, True, False)
    listed = _get(admin, "/deployments", timeout)
    earlier = [
        str(d["id"])
        for d in (listed or {}).get("deployments", [])
        if d.get("id") not in {h.deployment_id for h in holders}
        and any(s.get("name") == f"{served.prefix}{GROUP}" for s in d.get("services", []))
    ]
    for deployment_id in earlier:
        described = _get(admin, f"/deployments/{quote(deployment_id, safe='')}", timeout)
        if isinstance(described, Mapping) and Application.of(described).same_as(mine):
            return StartCheck(stranger, False, True)
    return StartCheck(stranger, False, False)
