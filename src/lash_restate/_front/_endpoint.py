"""The endpoint: lash's services beside the application's, and serving them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeAlias

import restate

from ..calls import Target
from ..contract import InvalidInput
from ..contract._errors import a_kind
from ..engine import (
    BATCH_FROM,
    FULL_GC_EVERY,
    build_app,
    call_targets,
    lash_services,
    use_groups_served_elsewhere,
)
from ..engine import serve as _serve
from ..tools import ToolRegistry

Bindable: TypeAlias = restate.Service | restate.VirtualObject | restate.Workflow


def use_prefix(prefix: str | None = None) -> None:
    """In a process that only calls lash: another deployment of this Restate cluster serves lash's
    services, named ``{prefix}Group``, ``{prefix}Child``, …. Without this (or `app` / `services` in
    the same process) a handler here cannot open groups: its controller answers
    `supports_effect_groups()` false and refuses them with `EffectGroupUnsupported`.

    The prefix is the process's, fixed by the first of `use_prefix`, `app` and `services` to run: the
    prefix it names, or ``Lash`` if it names none. Each of them without ``prefix`` takes the process's
    (so ``use_prefix("Shop")`` first makes a later ``app()`` bind ``ShopGroup``, …); naming another
    prefix afterwards raises `PrefixChosen`."""
    use_groups_served_elsewhere(prefix)


def external(service: str | Bindable, *handlers: str, keyed: bool | None = None) -> Target:
    """Declare a service another endpoint of the cluster serves, so children may call it; without
    ``handlers``, any handler of it.

    Args:
        service: the service's name, or its definition (a ``restate.Service``, ``VirtualObject``
            or ``Workflow`` this process imports but does not serve), which says whether it is keyed.
        *handlers: the handlers children may call; none given: any of its handlers.
        keyed: the service is a virtual object or a workflow, so each call of it names a key
            (default: what its definition says, else not keyed).

    Returns:
        The `Target`, for the ``external=`` of `app` or `services`.

    Raises:
        InvalidInput: ``service`` is neither a name nor a definition, or ``keyed`` contradicts
            the definition given.
    """
    only = frozenset(handlers) if handlers else None
    if isinstance(service, str):
        return Target(service, only, bool(keyed))
    if not isinstance(service, Bindable):
        raise InvalidInput(
            f"lash.external takes a service's name or its definition (a restate.Service, VirtualObject "
            f"or Workflow), not {a_kind(service)}"
        )
    is_keyed = not isinstance(service, restate.Service)
    if keyed is not None and keyed != is_keyed:
        kind = "a service" if not is_keyed else "keyed (a virtual object or a workflow)"
        raise InvalidInput(f"lash.external({service.name!r}, keyed={keyed}): its definition is {kind}")
    return Target(service.name, only, is_keyed)


def _bindable(yours: tuple[Bindable, ...], what: str) -> tuple[Bindable, ...]:
    """``yours``, each a service, virtual object or workflow, or refused by name (a list of them, as
    ``restate.app([...])`` takes, met a plain `AttributeError` as the app was built)."""
    for service in yours:
        if not isinstance(service, Bindable):
            listed = isinstance(service, list | tuple)
            raise InvalidInput(
                f"{what} takes your services one by one ({what}(a, b), or {what}(*services)), "
                + (
                    "not a list of them"
                    if listed
                    else f"each a restate.Service, VirtualObject or Workflow, not {a_kind(service)}"
                )
            )
    return yours


def services(
    *yours: Bindable,
    tools: ToolRegistry | None = None,
    external: Sequence[Target] = (),
    batch_from: int = BATCH_FROM,
    prefix: str | None = None,
    name: str | None = None,
) -> list[Bindable]:
    """lash's services, to bind next to ``yours`` in your own ``restate.app([...])``: children may call
    the handlers of ``yours`` and of the ``external`` services, and run the ``tools``; groups of
    ``batch_from`` children or more settle in batches. They are named ``{prefix}Group``,
    ``{prefix}Child``, …, so two applications on one cluster can each have their own; without
    ``prefix``, the process's (see `use_prefix`). ``name`` names your application on them (see
    `app`). `app` takes the same keywords.

    Args:
        *yours: your services, virtual objects and workflows, whose handlers children may call.
        tools: the tools children may run (default: none).
        external: services served by another endpoint of the cluster (see `external`).
        batch_from: the child count from which a group settles in batches (at least 1).
        prefix: the prefix of lash's services' names (default: the process's).
        name: your application's name, carried by lash's services (see `app`).

    Returns:
        lash's services, to bind beside yours.

    Raises:
        PrefixChosen: this process already chose another prefix (a `ValueError`).
        DeploymentError: LASH_ORPHAN_RETENTION or LASH_WAITER_CHECK is not a duration, or
            LASH_ERROR_METADATA is not on or off.
        InvalidInput: ``prefix`` or ``name`` is malformed, ``batch_from`` is below 1, or a service is
            declared twice, differently (bound here and also declared with `external`, say).
    """
    calls = call_targets(_bindable(yours, "lash.services"), external)
    resolver = tools if tools is not None else ToolRegistry()
    return lash_services(resolver, calls=calls, batch_from=batch_from, prefix=prefix, name=name)


def app(
    *yours: Bindable,
    tools: ToolRegistry | None = None,
    external: Sequence[Target] = (),
    batch_from: int = BATCH_FROM,
    prefix: str | None = None,
    name: str | None = None,
    identity_keys: Sequence[str] = (),
) -> Any:
    """The ASGI app serving ``yours`` and lash's services, checked once assembled: the keywords of
    `services`, and ``identity_keys``, the Restate keys whose signed requests alone it serves.

    Registering it where another application's lash services already have the same names is
    refused by `lash-restate register`. Two deployments are taken for the same application (an
    upgrade) when both carry the same ``name``, or, when either has none, when they serve a service
    of their own in common, or the same services; give ``name`` to keep one identity across an
    upgrade that renames every service.

    Args:
        *yours: your services, virtual objects and workflows, served beside lash's.
        tools: the tools children may run (default: none).
        external: services served by another endpoint of the cluster (see `external`).
        batch_from: the child count from which a group settles in batches (at least 1).
        prefix: the prefix of lash's services' names (default: the process's, see `use_prefix`).
        name: your application's name, carried by lash's services, as above.
        identity_keys: Restate request identity public keys; given any, only requests signed by
            one of them are served. Given none, those `lash-restate serve --app` was told
            (``--identity-key``, LASH_IDENTITY_KEYS), if it imports this app.

    Returns:
        The ASGI app, for `serve` or any ASGI server.

    Raises:
        PrefixChosen: this process already chose another prefix (a `ValueError`).
        DeploymentError: an identity key is not a Restate public key, LASH_ORPHAN_RETENTION or
            LASH_WAITER_CHECK is not a duration, or LASH_ERROR_METADATA is not on or off.
        InvalidInput: ``prefix`` or ``name`` is malformed, ``batch_from`` is below 1, or a service is
            declared twice, differently (bound here and also declared with `external`, say).
    """
    return build_app(
        tools if tools is not None else ToolRegistry(),
        extra_services=_bindable(yours, "lash.app"),
        external=external,
        identity_keys=identity_keys,
        batch_from=batch_from,
        prefix=prefix,
        name=name,
    )


async def serve(
    asgi: Any,
    host: str = "0.0.0.0",
    port: int = 9080,
    *,
    server: str = "hypercorn",
    full_gc_every: int | None = FULL_GC_EVERY,
) -> None:
    """Serve an app (from `app`) over HTTP/2 cleartext until SIGTERM or SIGINT, under hypercorn or
    (with the ``granian`` extra) granian, in this process either way.

    It tunes the process's garbage collector for an endpoint first: what start-up built is frozen,
    and the oldest generation is collected at most once per ``full_gc_every`` collections of the
    middle one (CPython's default is 10), since a full collection walks every in-flight invocation.
    ``None`` leaves the collector as it is.

    Args:
        asgi: the app to serve (from `app`).
        host: the address to listen on.
        port: the port to listen on.
        server: ``"hypercorn"`` or ``"granian"``.
        full_gc_every: collections of the middle generation per full collection (at least 1), or
            ``None``.

    Raises:
        ServerUnavailable: ``server="granian"`` without the ``granian`` extra installed.
        InvalidInput: an unknown ``server``, or ``full_gc_every`` below 1 (a `ValueError`).
    """
    # One process either way (decision 33); the collector's tuning: decision 68.
    await _serve(asgi, host, port, server=server, full_gc_every=full_gc_every)
