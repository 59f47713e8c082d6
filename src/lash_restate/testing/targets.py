"""Demo call targets: the same handlers as Restate services (bound by a ``--with-turn`` endpoint) and
as an in-process `CallRegistry` (for the reference host), so `Call` children behave alike on every
tier of the conformance suite.

- ``DemoCalls/echo`` ``{"value": V, "delay_ms": N}`` → V after N ms (a durable timer on Restate).
- ``DemoCalls/fail`` ``{"message": M, "status": S}`` → ends in a terminal error M with status S (none
  given: TerminalError's default).
- ``DemoCalls/count`` ``{"name": X, "value": V}`` → appends X to the count file, → V.
- ``DemoCalls/stall`` ``{"message": M}`` → a plain exception M: a fault Restate retries under its retry
  policy and, on a server that pauses when retries run out, pauses (the Restate host only).
- ``DemoCalls/echo_size`` ``V`` → how many characters the string V has (for argument-size tests).
- ``DemoCalls/blob`` ``{"size": N}`` → a string of N characters (for result-size tests).
- ``DemoCalls/request`` → what its invocation carries beside the argument: ``{"headers": {…the
  x-… ones}, "scope": S, "limit_key": K}`` (on Restate; the reference host has none of them).
- ``DemoFlow/run`` (a workflow, keyed) ``{"value": V}`` → V: a workflow's main handler, which Restate
  runs once per key whatever the idempotency key.
- ``DemoCounter/add`` (keyed) ``N`` → the key's running total after adding N.

Typed, for ``lash.call(handler, arg)`` (their handlers are `quote` and `weigh`, module-level):

- ``DemoTyped/quote`` takes a pydantic `QuoteRequest` ``{sku, qty, delay_ms, refuse}`` and answers a
  `Quote` ``{sku, total}`` (7 per item) after ``delay_ms``, or ends in a terminal error ``refuse``
  with status 409.
- ``DemoLedger/weigh`` (keyed) takes a msgspec `Parcel` ``{grams}`` and answers a `Label`
  ``{key, grams, total}``, ``total`` being the key's running weight.
- ``DemoTyped/describe`` takes an optional `QuoteRequest` and answers its ``sku``, or ``"nothing"``
  given none (``None``: what an empty body reads as).
"""

from __future__ import annotations

import asyncio
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import msgspec
import restate
from pydantic import BaseModel

from ..calls import Target
from ..memory import CallRegistry
from .tools import append_line, arg_of, blob, count_path, size_of

__all__ = [
    "DEMO_FLOW",
    "DEMO_LEDGER",
    "DEMO_OBJECT",
    "DEMO_SERVICE",
    "DEMO_TYPED",
    "Label",
    "Parcel",
    "Quote",
    "QuoteRequest",
    "demo_call_services",
    "demo_calls",
    "demo_external",
    "describe",
    "quote",
    "weigh",
]

DEMO_SERVICE = "DemoCalls"
DEMO_OBJECT = "DemoCounter"
DEMO_TYPED = "DemoTyped"
DEMO_LEDGER = "DemoLedger"
DEMO_FLOW = "DemoFlow"


class QuoteRequest(BaseModel):
    """What `quote` takes (a pydantic model)."""

    sku: str
    qty: int
    delay_ms: int = 0
    refuse: str | None = None


class Quote(BaseModel):
    """What `quote` answers (a pydantic model)."""

    sku: str
    total: int


class Parcel(msgspec.Struct, frozen=True):
    """What `weigh` takes (a msgspec Struct)."""

    grams: int


class Label(msgspec.Struct, frozen=True):
    """What `weigh` answers (a msgspec Struct)."""

    key: str
    grams: int
    total: int


def _priced(req: QuoteRequest) -> Quote:
    return Quote(sku=req.sku, total=7 * req.qty)


_typed = restate.Service(DEMO_TYPED)
_ledger = restate.VirtualObject(DEMO_LEDGER)


@_typed.handler()
async def quote(ctx: restate.Context, req: QuoteRequest) -> Quote:
    if req.delay_ms:
        await ctx.sleep(timedelta(milliseconds=req.delay_ms))  # cancelled with the call
    if req.refuse is not None:
        raise restate.TerminalError(req.refuse, 409)
    return _priced(req)


@_typed.handler()
async def describe(ctx: restate.Context, req: QuoteRequest | None) -> str:
    return "nothing" if req is None else req.sku


@_ledger.handler()
async def weigh(ctx: restate.ObjectContext, parcel: Parcel) -> Label:
    total = (await ctx.get("grams", type_hint=int) or 0) + parcel.grams
    ctx.set("grams", total)
    return Label(key=ctx.key(), grams=parcel.grams, total=total)


def demo_calls(count_file: str | Path | None = None) -> CallRegistry:
    """The demo targets as in-process handlers, for the reference host."""
    calls = CallRegistry()
    path = count_path(count_file)
    totals: dict[str, int] = {}

    @calls.handler(DEMO_SERVICE, "echo")
    async def echo(key: str | None, arg: Any) -> Any:
        await asyncio.sleep(int(arg_of(arg, "delay_ms", 0)) / 1000)
        return arg_of(arg, "value")

    @calls.handler(DEMO_SERVICE, "fail")
    async def fail(key: str | None, arg: Any) -> Any:
        # As the Restate handler below: a TerminalError, with the status only when one is asked for.
        raise _terminal(arg)

    @calls.handler(DEMO_SERVICE, "count")
    async def count(key: str | None, arg: Any) -> Any:
        if path is not None:
            await asyncio.to_thread(append_line, path, str(arg_of(arg, "name", "")))
        return arg_of(arg, "value")

    @calls.handler(DEMO_SERVICE, "echo_size")
    async def echo_size(key: str | None, arg: Any) -> Any:
        return size_of(arg)

    @calls.handler(DEMO_SERVICE, "blob")
    async def blob_(key: str | None, arg: Any) -> Any:
        return blob(arg)

    @calls.handler(DEMO_SERVICE, "request")
    async def request(key: str | None, arg: Any) -> Any:
        return {"headers": {}, "scope": None, "limit_key": None}  # an in-process call carries none

    @calls.handler(DEMO_OBJECT, "add", keyed=True)
    async def add(key: str | None, arg: Any) -> Any:
        assert key is not None  # keyed: routing refuses a call without one
        totals[key] = totals.get(key, 0) + int(arg)
        return totals[key]

    @calls.typed(quote)
    async def quote_here(key: str | None, req: QuoteRequest) -> Quote:
        await asyncio.sleep(req.delay_ms / 1000)
        if req.refuse is not None:
            raise restate.TerminalError(req.refuse, 409)  # as the Restate handler above
        return _priced(req)

    @calls.typed(describe)
    async def describe_here(key: str | None, req: QuoteRequest | None) -> str:
        return "nothing" if req is None else req.sku

    grams: dict[str, int] = {}

    @calls.typed(weigh)
    async def weigh_here(key: str | None, parcel: Parcel) -> Label:
        assert key is not None  # keyed: routing refuses a call without one
        grams[key] = grams.get(key, 0) + parcel.grams
        return Label(key=key, grams=parcel.grams, total=grams[key])

    return calls


def _terminal(arg: Any) -> restate.TerminalError:
    message = str(arg_of(arg, "message", "failed"))
    status = arg_of(arg, "status", None)
    metadata = arg_of(arg, "metadata", None)
    given = {str(k): str(v) for k, v in metadata.items()} if isinstance(metadata, dict) else None
    # 500 is TerminalError's own default status, as a handler that gives none ends with.
    return restate.TerminalError(message, 500 if status is None else int(status), metadata=given)


def demo_external() -> list[Target]:
    """Services a ``--with-turn`` endpoint declares external (served elsewhere, if anywhere): the
    comma-separated names in ``$LASH_DEMO_EXTERNAL``, any handler, unkeyed."""
    names = os.environ.get("LASH_DEMO_EXTERNAL", "")
    return [Target(name.strip()) for name in names.split(",") if name.strip()]


def demo_call_services(
    count_file: str | Path | None = None,
) -> list[restate.Service | restate.VirtualObject | restate.Workflow]:
    """The demo targets as Restate services (the typed ones too), bound next to lash's own by a
    ``--with-turn`` endpoint.

    With ``$LASH_DEMO_CALLS_OFF`` set, none (how tests model a deployment that dropped a target).
    """
    if os.environ.get("LASH_DEMO_CALLS_OFF"):
        return []
    service = restate.Service(DEMO_SERVICE)
    counter = restate.VirtualObject(DEMO_OBJECT)
    flow = restate.Workflow(DEMO_FLOW)
    path = count_path(count_file)

    @service.handler()
    async def echo(ctx: restate.Context, arg: Any) -> Any:
        delay = int(arg_of(arg, "delay_ms", 0))
        if delay:
            await ctx.sleep(timedelta(milliseconds=delay))  # cancelled with the call (decision 37)
        return arg_of(arg, "value")

    @service.handler()
    async def fail(ctx: restate.Context, arg: Any) -> Any:
        raise _terminal(arg)

    @service.handler()
    async def stall(ctx: restate.Context, arg: Any) -> Any:
        raise RuntimeError(str(arg_of(arg, "message", "stalled")))  # retryable: never a terminal error

    @service.handler()
    async def count(ctx: restate.Context, arg: Any) -> Any:
        if path is not None:
            witness = path

            async def append() -> str:
                name = str(arg_of(arg, "name", ""))
                await asyncio.to_thread(append_line, witness, name)
                return name

            await ctx.run_typed("count", append)
        return arg_of(arg, "value")

    @service.handler(name="echo_size")
    async def echo_size_(ctx: restate.Context, arg: Any) -> Any:
        return size_of(arg)

    @service.handler(name="blob")
    async def blob_(ctx: restate.Context, arg: Any) -> Any:
        return blob(arg)

    @service.handler()
    async def request(ctx: restate.Context, arg: Any) -> Any:
        invocation = ctx.request()
        headers = {name: value for name, value in invocation.headers.items() if name.startswith("x-")}
        return {"headers": headers, "scope": invocation.scope, "limit_key": invocation.limit_key}

    @counter.handler()
    async def add(ctx: restate.ObjectContext, arg: Any) -> Any:
        current = await ctx.get("total", type_hint=int)
        total = (current or 0) + int(arg)
        ctx.set("total", total)
        return total

    @flow.main()
    async def run(ctx: restate.WorkflowContext, arg: Any) -> Any:
        return arg_of(arg, "value")

    del echo, fail, stall, count, echo_size_, blob_, request, add, run
    return [service, counter, flow, _typed, _ledger]
