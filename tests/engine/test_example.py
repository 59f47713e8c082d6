"""The examples under `examples/`, each served from its own module and invoked for real.

Each imports only `lash_restate` (the front door) and the Restate SDK: what an application writes.
"""

from __future__ import annotations

import ast
import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lash_restate.inspection import sql
from lash_restate.testing import LocalStack, StackError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("name", ["checkout", "fanout", "resume"])
def test_an_example_imports_only_the_front_door(name: str) -> None:
    tree = ast.parse((EXAMPLES / f"{name}.py").read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert {m for m in imported if m.startswith("lash_restate")} == {"lash_restate"}


async def test_checkout_races_a_payment_call_against_its_deadline_and_cancels_the_loser(
    tmp_path: Path,
) -> None:
    # As the testing guide writes it: a module of the user's own takes `--port` alone by default.
    with LocalStack.single(tmp_path, module="examples.checkout").start() as stack:
        assert await stack.call("Checkout/pay", {"id": 7, "amount": 42}) == {"status": "paid", "charged": 42}
        slow = {"id": 8, "amount": 5, "slow": True, "deadline_s": 1}
        assert await stack.call("Checkout/pay", slow) == {"status": "timed out"}
        # The hour-long payment lost, so it was cancelled: its invocation ends now.
        async with asyncio.timeout(30):
            while True:
                query = "SELECT status FROM sys_invocation WHERE target_service_name = 'Payments'"
                rows = await asyncio.to_thread(sql, stack.admin_url, query)
                if len(rows) == 2 and all(r["status"] == "completed" for r in rows):
                    break
                await asyncio.sleep(0.1)


async def test_fanout_reserves_twenty_items_through_one_group_in_input_order(tmp_path: Path) -> None:
    skus = [f"sku-{i}" for i in range(20)]
    # Served as `lash-restate serve --app` serves it (the others run their module's own `main`).
    with LocalStack.single(tmp_path, app="examples.fanout:app").start() as stack:
        first = await stack.call("Orders/place", skus)
        assert first == [{"sku": sku, "reserved": 1} for sku in skus]
        # Two identical fan-outs are two groups (another invocation, another key): reserved again.
        assert [r["reserved"] for r in await stack.call("Orders/place", skus)] == [2] * 20


async def test_resume_reads_the_same_ranks_from_a_fresh_invocation(tmp_path: Path) -> None:
    with LocalStack.single(tmp_path, module="examples.resume", endpoint_args=()).start() as stack:
        started = await stack.call("Review/start", "doc-1")
        # Ana answers first on an idle machine; on a busy one, whoever the timers let through.
        assert started["rank"] == 1 and started["first"].endswith(" approves doc-1")
        peek = {"doc": "doc-1", "saved": started["saved"], "close": False}
        once = await stack.call("Review/resume", peek)
        again = await stack.call("Review/resume", peek)
        assert once == again  # a fresh invocation, the same cursor: the same settlements
        assert [a["rank"] for a in once] == [2, 3]
        answers = sorted([started["first"], *(a["answer"] for a in once)])
        assert answers == ["ana approves doc-1", "bo approves doc-1", "cy approves doc-1"]
        final = await stack.call("Review/resume", {**peek, "close": True})
        assert final == once
        # A client retrying the resume after the close is refused; the reviews do not run again.
        with pytest.raises(StackError) as refused:
            await stack.call("Review/resume", {**peek, "close": True}, within=30)
        assert "group_not_open" in str(refused.value)
        query = "SELECT count(*) AS n FROM sys_invocation WHERE target_service_name = 'Reviewer'"
        [row] = await asyncio.to_thread(sql, stack.admin_url, query)
        assert row["n"] == 3


async def test_keys_are_derived_per_invocation_content_and_occurrence_and_survive_replay(
    tmp_path: Path,
) -> None:
    """Decision 38: inside a handler the key is ``{invocation}:group:{content hash}:{occurrence}``;
    two identical groups in one handler are two groups, and a replay (every suspension replays on
    this server) derives the same keys again."""
    replaying = {"RESTATE_WORKER__INVOKER__INACTIVITY_TIMEOUT": "0s"}
    stack = LocalStack.single(
        tmp_path, module="tests.engine.keys_app", endpoint_args=(), server_env=replaying
    )
    with stack.start():
        first, second, invocation = await stack.call("Keys/twice", "v")
    scope, _, batch, occurrence = first.rsplit(":", 3)
    assert (scope, occurrence) == (invocation, "0")
    assert second == f"{invocation}:group:{batch}:1"


async def test_an_uncaught_rejection_ends_the_invocation_instead_of_retrying_it(tmp_path: Path) -> None:
    """A rejection is a fact of the journal, which a retry would only meet again: left uncaught in a
    handler it ends the invocation terminally (decision 39), and the caller gets the answer."""
    with LocalStack.single(tmp_path, module="tests.engine.keys_app", endpoint_args=()).start() as stack:
        with pytest.raises(StackError) as failed:
            await stack.call("Keys/reject", "card declined", within=30)
        assert "card declined" in str(failed.value)
        query = "SELECT status, completion_failure FROM sys_invocation WHERE target = 'Keys/reject'"
        [row] = await asyncio.to_thread(sql, stack.admin_url, query)
    assert row["status"] == "completed" and "card declined" in row["completion_failure"]


async def test_two_applications_with_their_own_prefixes_share_one_server(tmp_path: Path) -> None:
    """Decision 40: each application names lash's services with its own prefix; both run groups on
    one server at once, and neither's registration replaced the other's services."""
    with LocalStack(tmp_path) as stack:
        stack.add_server()
        for prefix in ("Alpha", "Beta"):
            stack.add_endpoint(prefix, module="tests.engine.prefix_app", args=("--prefix", prefix))
        stack.start()
        alpha, beta = await asyncio.gather(
            stack.call("AlphaFanout/run", "x"), stack.call("BetaFanout/run", "y")
        )
        assert (alpha, beta) == (["Alpha:x", "Alpha:xx"], ["Beta:y", "Beta:yy"])
        query = "SELECT DISTINCT target_service_name AS s FROM sys_invocation"
        services = {row["s"] for row in await asyncio.to_thread(sql, stack.admin_url, query)}
        held = await stack.call("AlphaFanout/hold", "z")
        listed = {prefix: _groups_listed(stack.admin_url, prefix) for prefix in ("Alpha", "Beta", "Lash")}
    assert {"AlphaGroup", "AlphaChild", "BetaGroup", "BetaChild"} <= services
    assert not any(s.startswith("Lash") for s in services)
    # The command line follows the prefix: each application's open groups under its own.
    assert listed == {"Alpha": [held], "Beta": [], "Lash": []}


def _groups_listed(admin_url: str, prefix: str) -> list[str]:
    run = subprocess.run(
        [sys.executable, "-m", "lash_restate", "groups", "list", "--json", "--prefix", prefix],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "RESTATE_ADMIN_URL": admin_url},
    )
    assert run.returncode == 0, run.stderr
    return [g["group_key"] for g in json.loads(run.stdout)]
