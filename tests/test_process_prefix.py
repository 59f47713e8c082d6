"""A default argument never chooses the prefix: ``prefix=None`` (every default) is this process's.

The prefix is chosen once per process, so each case runs in a fresh interpreter: this test process
has chosen ``Lash`` long ago.
"""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import textwrap

import lash_restate as lash

APPLICATION = """
import asyncio, json
import httpx, restate
import lash_restate as lash

shop = restate.Service("Shop")

@shop.handler()
async def ping(ctx: restate.Context, value: str) -> str:
    return value

async def bound(app) -> list[str]:
    # What the endpoint tells Restate it serves: the discovery manifest, asked as the server asks it.
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://endpoint") as client:
        answer = await client.get(
            "/discover", headers={"accept": "application/vnd.restate.endpointmanifest.v4+json"}
        )
    return sorted(service["name"] for service in answer.json()["services"])

def refused(call) -> str | None:
    try:
        call()
    except ValueError as error:
        return str(error)
    return None
"""


def run(body: str) -> dict[str, object]:
    script = APPLICATION + textwrap.dedent(body)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    answer: dict[str, object] = json.loads(done.stdout)
    return answer


def test_app_after_use_prefix_binds_that_prefix() -> None:
    answer = run(
        """
        lash.use_prefix("Shop")
        app = lash.app(shop)
        print(json.dumps({
            "app": asyncio.run(bound(app)),
            "services": sorted(s.name for s in lash.services()),
            "again": refused(lash.use_prefix),
        }))
        """
    )
    assert answer["app"] == ["Shop", "ShopChild", "ShopGroup", "ShopPump", "ShopSignal"]
    assert answer["services"] == ["ShopChild", "ShopGroup", "ShopPump", "ShopSignal"]
    assert answer["again"] is None  # `use_prefix()` with no prefix names the process's own


def test_a_default_prefix_is_the_process_prefix_and_an_explicit_other_one_is_still_refused() -> None:
    answer = run(
        """
        app = lash.app(shop)  # chooses nothing: the process's prefix is Lash until told otherwise
        print(json.dumps({
            "app": asyncio.run(bound(app)),
            "same": refused(lambda: lash.use_prefix("Lash")),
            "other": refused(lambda: lash.app(shop, prefix="Shop")),
        }))
        """
    )
    assert answer["app"] == ["LashChild", "LashGroup", "LashPump", "LashSignal", "Shop"]
    assert answer["same"] is None
    assert answer["other"] == "this process already names lash's services Lash*, not Shop*"


def test_app_and_services_take_the_same_keywords() -> None:
    """``identity_keys`` is the app's alone: services bound in your own ``restate.app`` are signed by it."""
    app = inspect.signature(lash.app).parameters
    services = inspect.signature(lash.services).parameters
    assert set(app) - {"identity_keys"} == set(services)
    for name in set(services) - {"yours"}:
        assert app[name].default == services[name].default, name
    assert app["prefix"].default is None and services["prefix"].default is None
