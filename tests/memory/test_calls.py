"""The reference host's calls (`lash_restate.memory.CallRegistry`): what routes, how a handler's
failure settles, and that an executor runs once."""

from __future__ import annotations

from typing import Any

import pytest
import restate

import lash_restate as lash
from lash_restate.contract import Call, Err, RuntimeEffectEnvelope, ToolFailure
from lash_restate.memory import CallRegistry, MemoryHost


def _call(service: str, handler: str, arg: Any = None, key: str | None = None) -> RuntimeEffectEnvelope:
    command = Call(service=service, handler=handler, arg=arg, key=key)
    return RuntimeEffectEnvelope(command=command, replay_key="c")


async def _answer(key: str | None, arg: Any) -> Any:
    return {"key": key, "arg": arg}


def test_an_empty_registry_routes_no_call_and_says_why() -> None:
    calls = CallRegistry()
    assert calls.resolve(_call("Cart", "add")) is None
    assert calls.miss_reason(_call("Cart", "add")) == (
        "service 'Cart' is not bound here and not declared: serve it in this app, "
        "or declare it served by another deployment with lash.external('Cart')"
    )


async def test_a_service_registered_without_keyed_takes_calls_without_a_key() -> None:
    calls = CallRegistry()
    calls.register("Quote", "get", _answer)  # keyed defaults to False, as a Restate service
    executor = calls.resolve(_call("Quote", "get", 1))
    assert executor is not None
    assert await executor.execute() == {"key": None, "arg": 1}
    assert calls.resolve(_call("Quote", "get", 1, key="k")) is None
    assert calls.miss_reason(_call("Quote", "get", 1, key="k")) == (
        "service 'Quote' is not keyed: the call must not carry a key"
    )


def test_a_service_is_keyed_or_not_for_all_its_handlers() -> None:
    calls = CallRegistry()
    calls.register("Cart", "add", _answer, keyed=True)
    with pytest.raises(ValueError, match="both") as refused:
        calls.register("Cart", "total", _answer)
    assert str(refused.value) == "service 'Cart' is registered both keyed and not"
    assert calls.resolve(_call("Cart", "total", key="k")) is None  # the refused handler is not bound


async def test_a_call_executor_runs_once() -> None:
    calls = CallRegistry()
    runs: list[Any] = []

    @calls.handler("Quote", "get")
    async def get(key: str | None, arg: Any) -> Any:
        runs.append(arg)
        return arg

    executor = calls.resolve(_call("Quote", "get", 7))
    assert executor is not None
    assert await executor.execute() == 7
    with pytest.raises(RuntimeError) as again:
        await executor.execute()
    assert str(again.value) == "an executor runs once; resolve a fresh one to retry"
    assert runs == [7]


async def test_a_handler_failure_settles_with_its_own_code_or_the_sdk_default_status() -> None:
    """A `ToolFailure` keeps its code and message; one with no code gets ``"500"``, as does a
    `restate.TerminalError` given no status; a TerminalError's status is its code."""
    calls = CallRegistry()

    @calls.handler("Shop", "fail")
    async def fail(key: str | None, arg: Any) -> Any:
        match arg:
            case "coded":
                raise ToolFailure("sold out", "409")
            case "bare":
                raise ToolFailure("no stock")
            case "terminal":
                raise restate.TerminalError("gone", status_code=410)
            case _:
                raise restate.TerminalError("plain")

    host = MemoryHost(resolver=calls)
    try:
        outcomes = await lash.all_settled(
            host,
            [lash.call("Shop", "fail", arg) for arg in ("coded", "bare", "terminal", "plain")],
            key="s:group:fail:0",
        )
    finally:
        await host.aclose()
    assert outcomes == [
        Err(message="sold out", code="409"),
        Err(message="no stock", code="500"),
        Err(message="gone", code="410"),
        Err(message="plain", code="500"),
    ]
