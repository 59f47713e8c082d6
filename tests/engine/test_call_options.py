"""What a call child gives its callee's invocation beside its argument, as `ctx.service_call` and a
scoped call (`ctx.scope(scope).service_call(..., limit_key=...)`) do: headers, and Restate's flow
control scope and limit key, seen by the callee in its own `ctx.request()`.

The server runs with flow control (protocol v7 and virtual queues: experimental in 1.7, only on a new
cluster), so Restate's concurrency-limit rules would apply to lash's calls as to native ones.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from lash_restate.inspection import quote
from lash_restate.testing import LocalStack
from tests.conformance.builders import Scope, combine, ok

FLOW_CONTROL = {
    "RESTATE_EXPERIMENTAL_ENABLE_PROTOCOL_V7": "true",
    "RESTATE_EXPERIMENTAL_ENABLE_VQUEUES": "true",
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """One server with flow control; the first endpoint serves `DemoCalls` (and, once registered,
    lash's services); the second declares it external without serving it, so once it takes lash's
    services over each call is made by its child's `LashChild/execute`."""
    started = LocalStack(tmp_path_factory.mktemp("call-options"))
    started.add_server(env=FLOW_CONTROL)
    started.add_endpoint("callers")
    external = {"LASH_DEMO_CALLS_OFF": "1", "LASH_DEMO_EXTERNAL": "DemoCalls,DemoTyped"}
    started.add_endpoint("children", env=external)
    started.start(register=False)
    with started:
        started.register(started.endpoints[0])
        yield started


def request(**options: Any) -> dict[str, Any]:
    """A call to `DemoCalls/request`, which answers what its invocation carries."""
    return {"type": "call", "service": "DemoCalls", "handler": "request", "arg": {}, **options}


async def _carried(stack: LocalStack, **options: Any) -> Any:
    [answer] = await stack.turn(combine("all", Scope().group([request(**options), request()])))
    return ok(answer)["value"]


async def test_a_calls_headers_scope_and_limit_key_reach_its_callee(stack: LocalStack) -> None:
    """Both ways lash calls: the pump calling a handler this endpoint binds, and, for a target only
    declared external, the child's own `LashChild/execute`. A call given none carries none."""
    options = {"headers": {"x-tenant": "acme", "x-trace": "t-1"}, "scope": "billing", "limit_key": "acme/u42"}
    carried = {"headers": options["headers"], "scope": "billing", "limit_key": "acme/u42"}
    plain: dict[str, Any] = {"headers": {}, "scope": None, "limit_key": None}
    assert await _carried(stack, **options) == [carried, plain]  # called by the group's pump
    stack.register(stack.endpoints[1], take_over=True)  # lash's services now run where it is declared
    assert await _carried(stack, **options) == [carried, plain]  # each called by its child


async def test_a_calls_idempotency_key_runs_its_callee_once_for_every_call_that_gives_it(
    stack: LocalStack,
) -> None:
    """``idempotency_key=`` as a native call gives it: two groups, each of two calls to
    `DemoCalls/count` under one key, run the callee once and answer every call its result, and the
    callee's invocation is under that key, not lash's. Both ways lash calls."""
    for endpoint in stack.endpoints:  # the pump calls, then each child's `LashChild/execute` does
        stack.register(endpoint, take_over=True)
        s = Scope()
        name, key = f"{s.id}-once", f"{s.id}-key"
        counted: dict[str, Any] = {"type": "call", "service": "DemoCalls", "handler": "count"}
        counted |= {"arg": {"name": name, "value": "v"}, "idempotency_key": key}
        for _ in range(2):
            [answer] = await stack.turn(combine("all", Scope().group([counted, counted])))
            assert ok(answer)["value"] == ["v", "v"]
        assert stack.counts().count(name) == 1
        query = f"SELECT id FROM sys_invocation WHERE idempotency_key = {quote(key)}"
        assert len(stack.sql(query)) == 1


async def test_a_call_given_no_argument_sends_its_callee_an_empty_body_as_a_native_call_does(
    stack: LocalStack,
) -> None:
    """Both ways lash calls, no argument reaches `DemoTyped/describe`, which takes an optional model,
    as ``None``: an empty body, as ``ctx.service_call(describe, None)`` sends (a JSON ``null`` is no
    model, and the SDK fails the callee before it runs)."""
    nothing = {"type": "call", "service": "DemoTyped", "handler": "describe"}
    for endpoint in stack.endpoints:  # the pump calls, then each child's `LashChild/execute2` does
        stack.register(endpoint, take_over=True)
        [answer] = await stack.turn(combine("all", Scope().group([nothing, nothing])))
        assert ok(answer)["value"] == ["nothing", "nothing"]
