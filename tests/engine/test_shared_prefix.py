"""One lash per prefix on a shared cluster (decision 43), against a real server.

Restate takes a deployment serving an already-served service for that service's new version. Two
applications with the same prefix would therefore take lash's services from each other; the first
application's groups would then run where its own services are unknown. Registration refuses that
takeover, names the deployment that holds the prefix, and registers an upgrade of the same
application.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from lash_restate._http import tls
from lash_restate.registration import PrefixTaken, register_deployment
from lash_restate.testing import LocalStack, free_port
from lash_restate.testing.processes import Endpoint, StackError

APP = "tests.engine.shared_app:app"
ROLES = ("Group", "Child", "Pump", "Signal")


def shared(
    stack: LocalStack, label: str, services: list[str], *, name: str = "", prefix: str = ""
) -> Endpoint:
    """An endpoint of `tests.engine.shared_app` serving ``services`` (not started yet)."""
    endpoint = Endpoint(
        module="lash_restate",
        args=("--app", APP),
        env={"SHARED_SERVICES": ",".join(services), "SHARED_NAME": name, "SHARED_PREFIX": prefix},
        log_path=stack.base_dir / f"{label}.log",
    )
    stack.endpoints.append(endpoint)
    return endpoint


def lash(*args: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lash_restate", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **env},
    )


def serving(admin_url: str, service: str) -> str | None:
    """The id of the deployment serving ``service`` now, or None."""
    answer = httpx.get(f"{admin_url}/services/{service}", timeout=10, verify=tls())
    return None if answer.status_code == 404 else str(answer.json()["deployment_id"])


async def test_a_second_application_with_the_same_prefix_is_refused_and_the_first_keeps_working(
    tmp_path: Path,
) -> None:
    with LocalStack(tmp_path) as stack:
        stack.add_server()
        first = shared(stack, "inventory", ["Inventory"])
        second = shared(stack, "shipping", ["Shipping"])
        own_prefix = shared(stack, "ship", ["Shipping"], prefix="Ship")
        stack.start(register=False)
        [registered] = stack.register(first)
        held = registered["id"]
        assert await stack.call("Inventory/stock", "a") == ["a", "aa"]

        cli = lash(
            "register", "--endpoint-url", second.url, "--force", env={"RESTATE_ADMIN_URL": stack.admin_url}
        )
        assert cli.returncode == 4, cli.stderr
        [line] = cli.stderr.splitlines()  # one line, naming the holder, both applications and the way out
        for named in (held, first.url, "Inventory", second.url, "Shipping", "--prefix", "LASH_PREFIX"):
            assert named in line, (named, line)
        with pytest.raises(PrefixTaken) as refused:
            register_deployment(stack.admin_url, second.url)
        assert (refused.value.holder.deployment_id, refused.value.holder.uri) == (held, f"{first.url}/")
        assert refused.value.holder.services == {"Inventory"}
        assert held in str(refused.value) and "\n" not in str(refused.value)

        # Nothing of the second was registered: lash's services are still the first's.
        assert {serving(stack.admin_url, f"Lash{role}") for role in ROLES} == {held}
        assert serving(stack.admin_url, "Shipping") is None
        assert await stack.call("Inventory/stock", "b") == ["b", "bb"]

        # The same application under a prefix of its own is registered, and both run groups.
        [beside] = stack.register(own_prefix)
        assert {serving(stack.admin_url, f"Ship{role}") for role in ROLES} == {beside["id"]}
        assert await stack.call("Shipping/stock", "c") == ["c", "cc"]
        assert await stack.call("Inventory/stock", "d") == ["d", "dd"]


async def test_a_take_over_on_purpose_strands_the_first_and_each_endpoint_says_so_at_start(
    tmp_path: Path,
) -> None:
    """What the refusal prevents, done on purpose (``--take-over``): the first application's groups
    then fail. An endpoint told the admin URL checks at start: the newcomer refuses to start, the
    application taken over starts (what is pinned to its deployment must run) and says why."""
    with LocalStack(tmp_path) as stack:
        stack.add_server()
        first = shared(stack, "inventory", ["Inventory"])
        second = shared(stack, "shipping", ["Shipping"])
        stack.start(register=False)
        [registered] = stack.register(first)
        assert await stack.call("Inventory/stock", "a") == ["a", "aa"]

        env = {"SHARED_SERVICES": "Shipping", "LASH_ADMIN_URL": stack.admin_url}
        port = str(free_port())
        refused = lash("serve", "--app", APP, "--host", "127.0.0.1", "--port", port, env=env, timeout=30)
        assert refused.returncode == 4, refused.stderr
        assert registered["id"] in refused.stderr and first.url in refused.stderr
        assert "--prefix" in refused.stderr and "--take-over" in refused.stderr

        # Told to take over, the newcomer starts, and says what it is about to do.
        stack.restart_endpoint(second, LASH_ADMIN_URL=stack.admin_url, LASH_TAKE_OVER="1")
        assert second.log_path is not None and "endpoint.prefix_take_over" in second.log_path.read_text()
        cli = lash(
            "register",
            "--endpoint-url",
            second.url,
            "--take-over",
            env={"RESTATE_ADMIN_URL": stack.admin_url},
        )
        assert cli.returncode == 0, cli.stderr
        taken = serving(stack.admin_url, "LashGroup")
        assert taken not in (None, registered["id"])
        with pytest.raises(StackError, match="not bound here"):
            await stack.call("Inventory/stock", "b")

        stack.restart_endpoint(first, LASH_ADMIN_URL=stack.admin_url)  # starts: it was the holder before
        assert first.log_path is not None
        [warning] = [
            line for line in first.log_path.read_text().splitlines() if "endpoint.prefix_taken" in line
        ]
        assert taken in warning and "took them over from this application" in warning


async def test_an_upgrade_of_the_same_application_is_registered(tmp_path: Path) -> None:
    """An upgrade at a new URL that adds a service, one that renames every service under the same
    name, and one replaced in place (same URL, ``--force``) are registered; a deployment with another
    name is refused even though it shares a service: names decide when both have one."""
    with LocalStack(tmp_path) as stack:
        stack.add_server()
        v1 = shared(stack, "v1", ["Inventory"])
        v2 = shared(stack, "v2", ["Inventory", "Orders"], name="shop")
        v3 = shared(stack, "v3", ["Stock"], name="shop")
        other = shared(stack, "other", ["Stock"], name="depot")
        stack.start(register=False)
        admin = {"RESTATE_ADMIN_URL": stack.admin_url}
        stack.register(v1)
        assert await stack.call("Inventory/stock", "a") == ["a", "aa"]

        upgraded = lash("register", "--endpoint-url", v2.url, env=admin)  # a new URL, a service more
        assert upgraded.returncode == 0, upgraded.stderr
        assert await stack.call("Inventory/stock", "b") == ["b", "bb"]
        [renamed] = stack.register(v3, force=False)  # every service renamed, the same name
        assert serving(stack.admin_url, "LashGroup") == renamed["id"]
        assert await stack.call("Stock/stock", "c") == ["c", "cc"]

        stack.restart_endpoint(v3)  # replaced in place: the same URL, registered again with --force
        in_place = lash("register", "--endpoint-url", v3.url, "--force", env=admin)
        assert in_place.returncode == 0, in_place.stderr
        assert serving(stack.admin_url, "LashGroup") == renamed["id"]
        assert await stack.call("Stock/stock", "d") == ["d", "dd"]

        with pytest.raises(PrefixTaken, match="application 'shop'"):
            stack.register(other)
        assert serving(stack.admin_url, "LashGroup") == renamed["id"]
