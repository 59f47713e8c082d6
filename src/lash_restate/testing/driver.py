"""`LashTurn`: a driver service that runs a caller's turn inside a real handler.

Bound by the dev stack and the tests (``serve --with-turn`` adds it to the endpoint's
services). ``run`` takes ``{"steps": [...]}`` (see `lash_restate.testing.turn`);
``combine`` takes ``{"kind", "children", ...}`` and runs one combinator. It drives the
engine through its public names only, as any user handler would. ``resettle`` exists for
the tests alone: it hands a group a settlement again from inside Restate (see `Resettle`).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any, Literal

import msgspec
import restate
from restate.serde import BytesSerde

from .. import combinators
from ..combinators import Combinator
from ..contract import (
    GroupExecutors,
    GroupHandle,
    GroupKey,
    InvalidInput,
    LashError,
    LoserPolicy,
    decode_envelope,
)
from ..engine import CHILD, GROUP, PUMP, RestateController, named
from .turn import combinator_result_json, decode_turn, error_json, run_turn

__all__ = ["TURN", "CombineRequest", "Resettle", "turn_service"]

TURN = "LashTurn"  # the driver service's name (dev stack and tests)

_BYTES = BytesSerde()


class CombineRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One combinator over ``children`` (envelope JSON without membership, or bare commands)."""

    kind: Combinator
    children: list[dict[str, Any]]
    scope: str = "turn"
    batch: str = "demo"
    occurrence: Annotated[int, msgspec.Meta(ge=0)] = 0
    losers: LoserPolicy = LoserPolicy.RUN_TO_COMPLETION
    stop_after: Annotated[int, msgspec.Meta(ge=0)] | None = None
    handle: str | None = None


class Resettle(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A settlement ``batch`` (the `LashGroup/settle` message as JSON, or with ``handler="report"`` a
    pump's `LashGroup/report`) to deliver to ``group_key``; with ``handler="outcomes"``, a caller's
    bulk read (`LashPump/outcomes`' message) to ask of the pump at ``pump_key``; with
    ``handler="outcome"``, a caller's read of a direct child's outcome (its group's incarnation, as
    a JSON string) to ask of the child at ``child_key``.

    The group's settle and report handlers are private to the ingress, and a sender may deliver one
    settlement twice (a pump re-sends a batch whose call a cancel interrupted); this is how a test
    delivers it twice on purpose, from inside Restate, to show that a child takes one rank however
    often it settles (ADR: idempotent on the child), or delivers one naming no child of the group.
    A read of a pump (or a child) whose group was closed is how a test makes a close racing a read
    happen.
    """

    group_key: str
    batch: msgspec.Raw
    handler: Literal["settle", "report", "outcomes", "outcome"] = "settle"
    pump_key: str | None = None
    child_key: str | None = None


def _children(req: CombineRequest, key: str) -> list[Any]:
    children = []
    for index, child in enumerate(req.children):
        body = child if "command" in child else {"command": child}
        body = {"replay_key": f"{key}/{index}", **body}
        children.append(decode_envelope(msgspec.json.encode(body)))
    return children


def turn_service(resolver: GroupExecutors) -> restate.Service:
    """The `LashTurn` service (``lash-restate serve --with-turn`` serves it): `run` runs a turn's
    steps inside a real handler, `combine` a combinator over demo children, and `resettle` sends
    lash's own handlers a batch a test built; ``resolver`` routes the children it opens."""
    turn = restate.Service(TURN)

    # Both handlers take raw bytes so that malformed JSON gets a typed answer, not the SDK's 500.
    @turn.handler(input_serde=_BYTES)
    async def run(ctx: restate.Context, request: bytes) -> list[dict[str, Any]]:
        try:
            turn_request = decode_turn(request)
        except LashError as error:
            return [error_json(error)]
        # groups=False: a controller told it does no groups; otherwise this deployment's answer.
        controller = RestateController(ctx, groups=None if turn_request.groups else False)
        steps = turn_request.steps
        return await run_turn(controller, steps, lambda ms: ctx.sleep(timedelta(milliseconds=ms)), resolver)

    @turn.handler(input_serde=_BYTES)
    async def combine(ctx: restate.Context, request: bytes) -> dict[str, Any]:
        try:
            req = msgspec.json.decode(request, type=CombineRequest)
            key = str(GroupKey(scope_id=req.scope, batch_id=req.batch, occurrence=req.occurrence))
            saved = GroupHandle.from_bytes(req.handle) if req.handle is not None else None
            controller = RestateController(ctx)
            children = _children(req, key)
            result = await combinators.combine(
                controller,
                req.kind,
                key,
                children,
                losers=req.losers,
                handle=saved,
                stop_after=req.stop_after,
            )
        except (msgspec.ValidationError, msgspec.DecodeError) as error:
            return error_json(InvalidInput(f"malformed combine request: {error}"))
        except LashError as error:
            return error_json(error)
        return combinator_result_json(result)

    @turn.handler(input_serde=_BYTES)
    async def resettle(ctx: restate.Context, request: bytes) -> None:
        try:
            req = msgspec.json.decode(request, type=Resettle)
        except (msgspec.ValidationError, msgspec.DecodeError) as error:
            raise restate.TerminalError(f"malformed resettle request: {error}", 400) from None
        if req.handler == "outcomes":
            if req.pump_key is None:
                raise restate.TerminalError("handler 'outcomes' needs pump_key", 400)
            await ctx.generic_call(named(PUMP), req.handler, bytes(req.batch), key=req.pump_key)
            return
        if req.handler == "outcome":
            if req.child_key is None:
                raise restate.TerminalError("handler 'outcome' needs child_key", 400)
            await ctx.generic_call(named(CHILD), req.handler, bytes(req.batch), key=req.child_key)
            return
        # A call, so the test's request returns once the group has handled the settlement.
        await ctx.generic_call(named(GROUP), req.handler, bytes(req.batch), key=req.group_key)

    del run, combine, resettle
    return turn
