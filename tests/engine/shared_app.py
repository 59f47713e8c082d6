"""An application for the shared-prefix tests, shaped by its environment, served by
``lash-restate serve --app tests.engine.shared_app:app``.

``SHARED_SERVICES`` names its own services (comma-separated); the first has ``echo`` and ``stock``,
a group whose children call ``echo``: it runs only where lash's services know this application.
``SHARED_NAME`` is its name (``lash.app(..., name=)``), ``SHARED_PREFIX`` lash's prefix (default Lash).
"""

from __future__ import annotations

import os

import restate

import lash_restate as lash

names = os.environ["SHARED_SERVICES"].split(",")
own = restate.Service(names[0])


@own.handler()
async def echo(ctx: restate.Context, value: str) -> str:
    return value


@own.handler()
async def stock(ctx: restate.Context, value: str) -> list[str]:
    return await lash.all(ctx, [lash.call(names[0], "echo", value), lash.call(names[0], "echo", value * 2)])


def _other(name: str) -> restate.Service:
    service = restate.Service(name)

    @service.handler()
    async def ping(ctx: restate.Context) -> str:
        return name

    return service


app = lash.app(
    own,
    *(_other(name) for name in names[1:]),
    name=os.environ.get("SHARED_NAME") or None,
    prefix=os.environ.get("SHARED_PREFIX") or "Lash",
)
