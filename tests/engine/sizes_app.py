"""An application for the size-limit tests: groups of large arguments and large results, answering
only sizes and verdicts (a caller that returned the payloads would hit the limit itself)."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import msgspec
import restate

import lash_restate as lash
from lash_restate.contract import GroupKey, RuntimeEffectGroup, canonical_bytes
from lash_restate.engine.wire._errors import typed
from lash_restate.engine.wire._messages import OpenRequest
from lash_restate.engine.wire._records import BYTES
from lash_restate.engine.wire._routes import GROUP_OPEN
from lash_restate.testing import demo_call_services, demo_tools

sizes = restate.Service("Sizes")


def _summary(outcome: lash.Outcome) -> dict[str, Any]:
    if isinstance(outcome, lash.Ok):
        value = outcome.value
        return {"type": "ok", "size": len(value) if isinstance(value, str) else value}
    if isinstance(outcome, lash.Err):
        return {"type": "err", "code": outcome.code, "message": outcome.message[:500]}
    return {"type": "cancelled"}


def _child(kind: str, handler: str, arg: Any) -> lash.Child:
    return lash.call("DemoCalls", handler, arg) if kind == "call" else lash.tool(handler, arg)


@sizes.handler()
async def arguments(ctx: restate.Context, spec: dict[str, Any]) -> dict[str, Any]:
    """``{"kind": "call"|"tool", "sizes": [N, …], "key": K}``: children echoing the size of an N-character
    argument, under group key K; answers their outcomes, or the refusal of the open."""
    children = [_child(spec["kind"], "echo_size", "x" * n) for n in spec["sizes"]]
    try:
        outcomes = await lash.all_settled(ctx, children, key=spec["key"])
    except lash.PayloadTooLarge as refused:
        return {"refused": refused.wire_body()}
    return {"outcomes": [_summary(o) for o in outcomes]}


@sizes.handler()
async def results(ctx: restate.Context, spec: dict[str, Any]) -> list[dict[str, Any]]:
    """``{"kind": "call"|"tool", "sizes": [N, …], "key": K, "after": PATH}``: children answering
    N-character strings under group key K, the last (a tool) only once the file PATH exists."""
    sizes = spec["sizes"]
    args: list[dict[str, Any]] = [{"size": n} for n in sizes]
    if spec.get("after") is not None:
        args[-1]["after"] = spec["after"]
    children = [_child(spec["kind"], "blob", arg) for arg in args]
    return [_summary(o) for o in await lash.all_settled(ctx, children, key=spec.get("key"))]


@sizes.handler()
async def native(ctx: restate.Context, size: int) -> int:
    """The same call as a ``results`` call child, made natively: how many characters it answered."""
    answer = await ctx.generic_call("DemoCalls", "blob", msgspec.json.encode({"size": size}))
    return len(msgspec.json.decode(answer))


@sizes.handler()
async def fractional_sleep(ctx: restate.Context, key: str) -> dict[str, Any]:
    """The open an earlier release's caller could send (its `Sleep` took a float): a sleep of 2.5 ms
    under group key ``key``; answers the group's refusal, or what the open answered."""
    child = lash.RuntimeEffectEnvelope(command=lash.Sleep(duration_ms=5), replay_key=f"{key}/0")
    group = RuntimeEffectGroup(
        GroupKey.parse(key),
        [child],
        wake=lash.GroupWakePolicy.ALL,
        disposition=lash.LoserPolicy.RUN_TO_COMPLETION,
    )
    [raw] = [canonical_bytes(c).replace(b'"duration_ms":5', b'"duration_ms":2.5') for c in group.children]
    answer, opened = ctx.awakeable(serde=BYTES)
    request = OpenRequest(reply_to=answer, shape=group.shape(), children=[raw], caller=ctx.request().id)
    GROUP_OPEN.send(ctx, key, request)
    try:
        return {"opened": msgspec.json.decode(await typed(opened))}
    except lash.LashError as refused:
        return {"refused": refused.wire_body()}


app = lash.app(sizes, *demo_call_services(), tools=demo_tools())

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    asyncio.run(lash.serve(app, "127.0.0.1", parser.parse_args().port))
