"""A caller's turn as data: steps run against any controller, results as JSON.

One interpreter serves every tier: the conformance suite hands the same steps
to the in-memory host and to the `LashTurn` service (`lash_restate.testing.driver`),
which runs them inside a real handler with the Restate controller. A turn holds
one current handle, the way a VM frame holds its cursor.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal, cast

import msgspec
from pydantic import BaseModel

from .. import _front as lash
from ..combinators import (
    AggregateRejection,
    Combinator,
    CombinatorResult,
    Rejected,
    empty_result,
    run_combinator,
    signal_or_deadline,
)
from ..contract import (
    STRUCT_OPTIONS,
    Command,
    GroupExecutors,
    GroupHandle,
    GroupKey,
    InvalidInput,
    LashError,
    LoserPolicy,
    Ok,
    Outcome,
    RuntimeEffectController,
    RuntimeEffectGroup,
    Settlement,
    decode_envelope,
    describe_command,
)
from ..engine import RestateController
from .targets import Parcel, QuoteRequest, describe, quote, weigh

__all__ = [
    "CloseStep",
    "CombineStep",
    "ExecuteStep",
    "FrontStep",
    "IterateStep",
    "NextStep",
    "OpenStep",
    "SaveStep",
    "SelectStep",
    "Step",
    "SupportsStep",
    "TurnRequest",
    "UseStep",
    "combinator_result_json",
    "decode_turn",
    "error_json",
    "run_turn",
]


class OpenStep(msgspec.Struct, tag="open", **STRUCT_OPTIONS):
    """Open (or reopen) ``group``; the turn's current handle becomes the returned one."""

    group: dict[str, Any]


class NextStep(msgspec.Struct, tag="next", **STRUCT_OPTIONS):
    """Await the next settlement; with ``cancel_after_ms``, race it against a cancel after that long."""

    cancel_after_ms: Annotated[int, msgspec.Meta(ge=0)] | None = None


class CloseStep(msgspec.Struct, tag="close", **STRUCT_OPTIONS):
    """Close the current group, optionally narrowing its disposition."""

    disposition: LoserPolicy | None = None


class SaveStep(msgspec.Struct, tag="save", **STRUCT_OPTIONS):
    """Return the current handle's bytes (what a frame would persist)."""


class UseStep(msgspec.Struct, tag="use", **STRUCT_OPTIONS):
    """Make a saved handle the current one (what a restored frame supplies)."""

    handle: str


class SupportsStep(msgspec.Struct, tag="supports", **STRUCT_OPTIONS):
    """Return `supports_effect_groups()`."""


class CombineStep(msgspec.Struct, tag="combine", **STRUCT_OPTIONS):
    """Run a combinator over ``group``; optionally stop after k settlements, or resume from a handle,
    or close with ``on_reject`` once it rejected (`all`'s fail fast)."""

    kind: Combinator
    group: dict[str, Any]
    stop_after: Annotated[int, msgspec.Meta(ge=0)] | None = None
    handle: str | None = None
    on_reject: LoserPolicy | None = None


class SelectStep(msgspec.Struct, tag="select", **STRUCT_OPTIONS):
    """`combinators.signal_or_deadline`: the event ``event`` against a deadline of ``deadline_ms``, as
    group ``key``.

    Gives ``{"winner": "event" | "deadline", "value": ...}``, or ``{"winner": "event", "rejected":
    settlement}`` when the event was rejected.
    """

    key: str
    event: str
    deadline_ms: Annotated[int, msgspec.Meta(ge=0)]
    replay_key_prefix: str


class IterateStep(msgspec.Struct, tag="iterate", **STRUCT_OPTIONS):
    """The front door's protocols over ``group``: ``async with lash.open(...)`` (resumed from the
    turn's current handle when ``resume``) and ``async for`` its settlements.

    After ``save_after`` settlements the group is saved and the block left (the turn's current
    handle becomes the saved one); after ``raise_after`` an error is raised inside the block. Gives
    ``{"settlements": [...], "saved": handle | None}``.
    """

    group: dict[str, Any]
    resume: bool = False
    save_after: Annotated[int, msgspec.Meta(ge=0)] | None = None
    raise_after: Annotated[int, msgspec.Meta(ge=0)] | None = None


class FrontStep(msgspec.Struct, tag="front", **STRUCT_OPTIONS):
    """The front door's ``lash.<entry>`` over ``children``, as group ``key``, on the turn's controller.

    ``children`` is a list, or for ``select`` an object of named children. A child is a command, or
    ``{"type": "typed", "handler": "quote" | "describe" | "weigh", "arg": JSON, "key": K}``: a
    `lash.call` of that demo handler (`lash_restate.testing.targets`) with ``arg`` built into its
    input model first (``"raw": true`` passes it as it is). A value is answered as ``{"type": its
    class's name, "value": its JSON}``: ``{"values": [...]}`` for ``all``, ``{"outcomes": [...]}`` for
    ``all_settled``, ``{"value": ..., "position": P}`` for ``race`` and ``any``, ``{"winner": name,
    "value": ...}`` for ``select``; a rejection as ``{"rejected": settlement, "name": N}`` or
    ``{"rejected_all": [outcome, ...]}``.
    """

    entry: Literal["all", "all_settled", "race", "any", "select"]
    key: str
    children: list[dict[str, Any]] | dict[str, dict[str, Any]]
    losers: LoserPolicy = LoserPolicy.RUN_TO_COMPLETION


class ExecuteStep(msgspec.Struct, tag="execute", **STRUCT_OPTIONS):
    """`execute_effect` on ``envelope`` (envelope JSON), with an executor resolved by the turn's host."""

    envelope: dict[str, Any]


Step = (
    OpenStep
    | NextStep
    | CloseStep
    | SaveStep
    | UseStep
    | SupportsStep
    | CombineStep
    | SelectStep
    | IterateStep
    | FrontStep
    | ExecuteStep
)


class TurnRequest(msgspec.Struct, **STRUCT_OPTIONS):
    """A turn's steps; ``groups=False`` asks the `LashTurn` driver for a controller built without a
    resolver, i.e. a host that does not do groups (the reference host's tier ignores it)."""

    steps: list[Step]
    groups: bool = True


_TURN = msgspec.json.Decoder(TurnRequest)


def decode_turn(data: bytes | str) -> TurnRequest:
    """A turn's JSON (``{"steps": [...]}``, as `LashTurn/run` takes it) decoded; `InvalidInput` if
    it is not one."""
    try:
        return _TURN.decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise InvalidInput(f"malformed turn: {exc}") from None


def error_json(error: LashError) -> dict[str, Any]:
    return {"error": error.wire_body()}


def settlement_json(settlement: Settlement) -> dict[str, Any]:
    return msgspec.to_builtins(settlement)  # type: ignore[no-any-return]


def combinator_result_json(result: CombinatorResult) -> dict[str, Any]:
    body: dict[str, Any] = {
        "status": result.status,
        "group_key": result.group_key,
        "order": list(result.order),  # a tuple on the result, a JSON array here
    }
    if result.status == "fulfilled":
        body["value"] = msgspec.to_builtins(result.value)
    elif result.status == "rejected":
        reason = result.reason  # a settlement, or (for `any`) a tuple of outcomes: a JSON array here
        body["reason"] = msgspec.to_builtins(reason if isinstance(reason, Settlement) else list(reason))
    else:
        body["handle"] = result.handle.to_bytes().decode()
    return body


async def run_turn(
    controller: RuntimeEffectController,
    steps: list[Step],
    make_cancel: Callable[[int], Awaitable[object]],
    executors: GroupExecutors | None = None,
) -> list[dict[str, Any]]:
    """Run ``steps`` in order; each gives ``{"ok": ...}`` or ``{"error": {...}}`` and the turn goes on.

    Args:
        controller: the host the steps run against (a handler's `RestateController`, or a
            `MemoryHost`).
        steps: the turn's steps, decoded (`Step`).
        make_cancel: given a step's ``cancel_after_ms``, the awaitable that cancels its wait (a
            durable sleep on Restate).
        executors: resolves the executor an `execute` step hands to `execute_effect`.

    Returns:
        One result per step, in order.
    """
    handle: GroupHandle | None = None
    results: list[dict[str, Any]] = []
    for step in steps:
        try:
            if isinstance(step, OpenStep):
                handle = await controller.open_effect_group(RuntimeEffectGroup.from_wire(step.group))
                results.append({"ok": handle.to_bytes().decode()})
            elif isinstance(step, NextStep):
                cancel = make_cancel(step.cancel_after_ms) if step.cancel_after_ms is not None else None
                settlement = await controller.await_next_settlement(_current(handle), cancel)
                results.append({"ok": settlement_json(settlement)})
            elif isinstance(step, CloseStep):
                await controller.close_effect_group(_current(handle), step.disposition)
                results.append({"ok": None})
            elif isinstance(step, SaveStep):
                if isinstance(controller, RestateController):
                    controller.handle_saved(_current(handle))  # a continuation holds it: parked
                results.append({"ok": _current(handle).to_bytes().decode()})
            elif isinstance(step, UseStep):
                handle = GroupHandle.from_bytes(step.handle)
                results.append({"ok": None})
            elif isinstance(step, SupportsStep):
                results.append({"ok": controller.supports_effect_groups()})
            elif isinstance(step, SelectStep):
                results.append({"ok": await _select(controller, step)})
            elif isinstance(step, IterateStep):
                body, saved = await _iterate(controller, step, handle)
                handle = saved if saved is not None else handle
                results.append({"ok": body})
            elif isinstance(step, FrontStep):
                results.append({"ok": await _front(controller, step)})
            elif isinstance(step, ExecuteStep):
                envelope = decode_envelope(msgspec.json.encode(step.envelope))
                executor = executors.resolve(envelope) if executors is not None else None
                if executor is None:
                    raise InvalidInput(f"no executor in this turn for {describe_command(envelope.command)}")
                outcome = await controller.execute_effect(envelope, executor)
                results.append({"ok": msgspec.to_builtins(outcome)})
            else:
                saved = GroupHandle.from_bytes(step.handle) if step.handle is not None else None
                if step.group.get("children") == []:  # decided locally, as `combine` does
                    result = empty_result(step.kind, str(GroupKey.parse(str(step.group.get("key")))))
                else:
                    group = RuntimeEffectGroup.from_wire(step.group)
                    result = await run_combinator(
                        controller,
                        step.kind,
                        group,
                        handle=saved,
                        stop_after=step.stop_after,
                        on_reject=step.on_reject,
                    )
                results.append({"ok": combinator_result_json(result)})
        except LashError as error:
            results.append(error_json(error))
    return results


async def _iterate(
    controller: RuntimeEffectController, step: IterateStep, current: GroupHandle | None
) -> tuple[dict[str, Any], GroupHandle | None]:
    group = RuntimeEffectGroup.from_wire(step.group)
    resume = _current(current).to_bytes().decode() if step.resume else None
    settlements: list[dict[str, Any]] = []
    saved: str | None = None
    opening = lash.open(
        controller,
        group.children,
        wake=group.wake,
        losers=group.disposition,
        key=group.key,
        resume=resume,
        max_in_flight=group.max_in_flight,
    )
    async with opening as opened:
        async for settlement in opened:
            settlements.append(settlement_json(settlement))
            if step.raise_after is not None and len(settlements) >= step.raise_after:
                raise InvalidInput(f"raised inside the block after {len(settlements)} settlements")
            if step.save_after is not None and len(settlements) >= step.save_after:
                saved = opened.save()
                break
    handle = GroupHandle.from_bytes(saved) if saved is not None else None
    return {"settlements": settlements, "saved": saved}, handle


async def _select(controller: RuntimeEffectController, step: SelectStep) -> dict[str, Any]:
    try:
        winner, value = await signal_or_deadline(
            controller,
            step.key,
            event=step.event,
            deadline_ms=step.deadline_ms,
            replay_key_prefix=step.replay_key_prefix,
        )
    except Rejected as rejected:  # only the event arm can reject (a deadline fulfils with null)
        return {"winner": "event", "rejected": settlement_json(rejected.settlement)}
    return {"winner": winner, "value": value}


_COMMAND = msgspec.json.Decoder(Command)


def _child(spec: dict[str, Any]) -> lash.Child:
    if spec.get("type") != "typed":
        return _COMMAND.decode(msgspec.json.encode(spec))
    arg: Any = spec.get("arg")  # given as it is with "raw" (a wrong type, on purpose)
    key, raw = spec.get("key"), spec.get("raw")
    # Untyped on purpose: a scenario may give a key to a service's handler, or none to an object's,
    # which the type checker refuses and lash must refuse at run time too.
    call: Any = lash.call
    if spec["handler"] == "quote":
        return cast(lash.Child, call(quote, arg if raw else QuoteRequest.model_validate(arg), key=key))
    if spec["handler"] == "describe":  # no argument is `None`, as a native call gives it
        given = arg if raw or arg is None else QuoteRequest.model_validate(arg)
        return cast(lash.Child, call(describe, given, key=key))
    return cast(lash.Child, call(weigh, arg if raw else msgspec.convert(arg, Parcel), key=key))


def _shown(value: Any) -> dict[str, Any]:
    """A value as the front door handed it back: its class's name, and its JSON."""
    body = value.model_dump(mode="json") if isinstance(value, BaseModel) else msgspec.to_builtins(value)
    return {"type": type(value).__name__, "value": body}


async def _front(controller: RuntimeEffectController, step: FrontStep) -> dict[str, Any]:
    options: dict[str, Any] = {"key": step.key}
    if step.entry in ("race", "any", "select"):
        options["losers"] = step.losers
    try:
        if isinstance(step.children, dict):
            if step.entry != "select":
                raise InvalidInput(f"lash.{step.entry} takes a list of children")
            named = {name: _child(spec) for name, spec in step.children.items()}
            winner, value = await lash.select(controller, key=step.key, losers=step.losers, **named)
            return {"winner": winner, "value": _shown(value)}
        children = [_child(spec) for spec in step.children]
        if step.entry == "all":
            return {"values": [_shown(v) for v in await lash.all(controller, children, **options)]}
        if step.entry == "all_settled":
            outcomes = await lash.all_settled(controller, children, **options)
            return {"outcomes": [_outcome_json(o) for o in outcomes]}
        if step.entry == "select":
            raise InvalidInput("lash.select takes named children")
        first = lash.race if step.entry == "race" else lash.any
        position, value = await first(controller, children, with_position=True, **options)
        return {"value": _shown(value), "position": position}
    except Rejected as rejected:
        return {"rejected": settlement_json(rejected.settlement), "name": rejected.name}
    except AggregateRejection as rejected:
        return {"rejected_all": [msgspec.to_builtins(o) for o in rejected.errors]}


def _outcome_json(outcome: Outcome) -> dict[str, Any]:
    if isinstance(outcome, Ok):
        return {"type": "ok", "value": _shown(outcome.value)}
    return msgspec.to_builtins(outcome)  # type: ignore[no-any-return]


def _current(handle: GroupHandle | None) -> GroupHandle:
    if handle is None:
        raise InvalidInput("no current handle: open a group or use a saved handle first")
    return handle
