"""Assemble and validate the deployment endpoint (serving it is `_server`'s job).

ADR, "The deployment surface grows": an endpoint wiring this controller must
bind the group object alongside the durable-wait services. `validate` checks
that once the endpoint is assembled, so a missing piece stops the start, not
the first `Promise.all`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import restate
from restate._internal import IdentityKeyException  # what `restate.app` raises for a bad key

from ...calls import CallTargets, Target
from ...contract import GroupExecutors, InvalidInput, LashError, RuntimeErrorCode
from ..child._child import DEFAULT_TOOL_ATTEMPTS, child_object
from ..child._routing import Routing
from ..child._signal import signal_object
from ..group._group import ORPHAN_RETENTION, WAITER_CHECK, group_object
from ..group._pages import PAGE_FROM, width_setting
from ..pump._pump import pump_object
from ..wire._formats import ERROR_METADATA_ENV, SWITCH_OFF, SWITCH_ON
from ..wire._routes import CHILD, GROUP, PUMP, ROLES, SIGNAL, named, use_prefix, wire_groups

__all__ = [
    "APP_METADATA",
    "BATCH_FROM",
    "DeploymentError",
    "ServedApplication",
    "build_app",
    "call_targets",
    "check_app_name",
    "lash_services",
    "served_application",
    "use_identity_keys",
    "validate_deployment",
]

# From this many children a group settles in batches through a pump invocation, one per 256 children
# (decisions 20, 35), which starts the children itself: the single writer then runs once per batch
# instead of once per child. Below it a group of tools, timers and events has each child settle itself
# (one hop less, what a two-arm race or a signal/deadline select is measured by), and a group with a
# call child settles through a pump too, which calls the user's handler itself (decision 61).
BATCH_FROM = 3
# For tests: a pumped group this wide or wider keeps its ranks in pages (by default, one wider than a
# slice). The test suite sets it to 1 on the stack that pumps every group, so that every conformance
# scenario runs on the paged layout too.
PAGE_FROM_ENV = "LASH_PAGE_FROM"
# How long a group nobody can resume is kept before it is reclaimed (decision 78).
ORPHAN_RETENTION_ENV = "LASH_ORPHAN_RETENTION"
# How often a waiting caller's group is looked at for a record deleted under it (decision 83).
WAITER_CHECK_ENV = "LASH_WAITER_CHECK"

Bindable = restate.Service | restate.VirtualObject | restate.Workflow


def _duration(name: str, default: timedelta) -> timedelta:
    """``$name``: seconds, or a number with ``s``, ``m``, ``h`` or ``d`` (``36h``, as Restate's own
    retention settings read), from a second to ten years; ``default`` when it is not set."""
    value = os.environ.get(name, "")
    if not value.strip():  # set empty is unset, as every setting reads
        return default
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", value)
    seconds = float(found[1]) * _UNIT_S[found[2]] if found else 0.0
    # Below a second a guard would look again at once, for ever; past years, no timer is meant.
    if not _SHORTEST_S <= seconds <= _LONGEST_S:
        shape = "seconds, or like 90s, 30m, 36h, 7d"
        raise DeploymentError(f"{name} must be a duration from 1 s to 3650 d ({shape}), not {value!r}")
    return timedelta(seconds=seconds)


def _check_switch(name: str) -> None:
    """Refuse ``$name`` unless it is on (``1``, ``true``, ``yes``, ``on``) or off (``0``, ``false``,
    ``no``, ``off``, or unset), in any case; where it is written, it is read as on or not."""
    value = os.environ.get(name, "").strip().lower()
    if value not in SWITCH_ON and value not in SWITCH_OFF:
        shape = "1, true, yes or on, or 0, false, no or off"
        raise DeploymentError(f"{name} must be {shape}, not {os.environ[name]!r}")


_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
_SHORTEST_S, _LONGEST_S = 1.0, 3650 * 86400.0


class DeploymentError(LashError, RuntimeError):
    """The endpoint, as assembled, cannot run groups; the message says what to bind."""

    code = RuntimeErrorCode.DEPLOYMENT

    def __str__(self) -> str:
        return self.message


# The service metadata key, on each of lash's four services, naming the application that serves them
# when it names itself (`lash.app(..., name=...)`): what `lash-restate register` reads, through the
# admin API, to tell an upgrade of an application from another taking over its prefix (decision 43).
APP_METADATA = "lash.app"
_APP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,63}")


def check_app_name(name: str) -> str:
    if not isinstance(name, str) or not _APP_NAME.fullmatch(name):
        raise InvalidInput(
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
    identity_keys: frozenset[str] = frozenset()  # whose signed requests alone it serves (none: any)


class _Served:
    application: ServedApplication | None = None
    # Chosen by `lash-restate serve --app` before it imports the app (`use_identity_keys`).
    identity_keys: tuple[str, ...] = ()


def use_identity_keys(keys: Sequence[str]) -> None:
    """The identity keys an app built from here on verifies when it is given none of its own: what
    `lash-restate serve --app` was told (LASH_IDENTITY_KEYS), chosen before it imports the app."""
    _Served.identity_keys = tuple(keys)


def served_application() -> ServedApplication | None:
    """The application `build_app` (so `lash.app`) last assembled in this process, if any."""
    return _Served.application


def call_targets(services: Iterable[Bindable], external: Iterable[Target] = ()) -> CallTargets:
    """What `Call` children may reach: the handlers ``services`` bind, and the ``external`` services
    declared by the application (served by other endpoints of the same Restate cluster)."""
    targets = CallTargets(external=external)
    for service in services:
        keyed = not isinstance(service, restate.Service)  # virtual objects and workflows take a key
        # The definition's own keys, read at each routing: Restate serves a handler defined later.
        targets.add(Target(service.name, service.handlers.keys(), keyed))
    return targets


def lash_services(
    resolver: GroupExecutors,
    *,
    calls: CallTargets | None = None,
    tool_attempts: int = DEFAULT_TOOL_ATTEMPTS,
    batch_from: int = BATCH_FROM,
    prefix: str | None = None,
    name: str | None = None,
) -> list[Bindable]:
    """The group, child and pump objects and the durable-wait service.

    Children run through ``resolver`` (tools) and may call the handlers of ``calls``. Groups of
    ``batch_from`` children or more settle in batches through a pump that starts them; narrower ones
    with a call child or a ``max_in_flight`` bound through a pump too (decisions 61, 81). The
    services are named ``{prefix}Group``, ``{prefix}Child``, … (decision 40; ``None``: this
    process's prefix, decision 54); with ``name``, each carries it as the
    service metadata ``lash.app``, which registration reads to tell an upgrade of this application
    from another application taking its prefix over (decision 43).
    """
    if isinstance(batch_from, bool) or not isinstance(batch_from, int) or batch_from < 1:
        raise InvalidInput(f"batch_from must be at least 1, got {batch_from!r}")
    prefix = use_prefix(prefix)
    metadata = {APP_METADATA: check_app_name(name)} if name is not None else None
    routing = Routing(resolver, calls if calls is not None else CallTargets())
    page_from = width_setting(PAGE_FROM_ENV) or PAGE_FROM
    retention = _duration(ORPHAN_RETENTION_ENV, ORPHAN_RETENTION)
    check = _duration(WAITER_CHECK_ENV, WAITER_CHECK)
    _check_switch(ERROR_METADATA_ENV)  # refused at start when neither on nor off; read where written
    group = group_object(
        batch_from,
        routing,
        page_from=page_from,
        orphan_retention=retention,
        waiter_check=check,
        metadata=metadata,
    )
    services: list[Bindable] = [
        group,
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
    prefix: str | None = None,
    name: str | None = None,
) -> Any:
    """The ASGI app: lash's services (or ``services`` as given) plus yours, validated once assembled.

    `Call` children may reach the handlers of ``extra_services`` and the ``external`` services.
    ``name`` names the application on lash's services (see `lash_services`).
    """
    prefix = use_prefix(prefix)  # also when ``services`` are given: validation checks the names under it
    assembled = list(services) if services is not None else []
    if services is None and resolver is not None:
        calls = call_targets(extra_services, external)
        assembled = lash_services(resolver, calls=calls, batch_from=batch_from, prefix=prefix, name=name)
    assembled.extend(extra_services)
    validate_deployment(resolver, assembled)
    own = frozenset(s.name for s in assembled) - {named(role) for role in ROLES}
    keys = list(identity_keys) or list(_Served.identity_keys)
    try:
        app = restate.app(assembled, identity_keys=keys or None)
    except IdentityKeyException as exc:  # a plain Exception of the SDK's: one line, naming the setting
        raise DeploymentError(
            f"an identity key is not a Restate public key (publickeyv1_…): {exc}; the server logs its "
            'own as it starts with request signing: Loaded request identity key kid="publickeyv1_…"'
        ) from None
    _Served.application = ServedApplication(name, own, prefix, frozenset(keys))
    return app
