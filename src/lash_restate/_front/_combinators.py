"""`all` and `all_settled`: a group opened, consumed and closed in one call (`race`, `any` and
`select` are in `_first`).

Each takes its children as one iterable, or one by one (``lash.all(ctx, a, b)``, as
``asyncio.gather`` does); a typed call's value comes back read by its handler's output serde, so a
type checker sees the handlers' own types: ``list[T]`` (or a tuple, one type per position, for
children given one by one), the first settlement's ``T`` (``T | None`` beside a `lash.sleep`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar, overload

from .. import combinators
from ..contract import (
    Cancelled,
    Child,
    Err,
    GroupKey,
    LoserPolicy,
    Ok,
    Outcome,
)
from ._invocation import Caller, controller, iterated, typed_grouped
from ._terminal import terminal

T = TypeVar("T")
T1 = TypeVar("T1")
T2 = TypeVar("T2")
T3 = TypeVar("T3")
T4 = TypeVar("T4")
T5 = TypeVar("T5")

_RTC = LoserPolicy.RUN_TO_COMPLETION


# No children given (``f(ctx, *children)`` of an empty list, as ``restate.gather(*futures)`` takes
# none): none, given one by one, never a `TypeError` for a missing argument, which Restate retries.
NONE_GIVEN: Any = object()


def _spread(children: Child | Iterable[Child], more: tuple[Child, ...], what: str) -> tuple[list[Any], bool]:
    """The children, and whether they were given one by one (``f(ctx, a, b)``) or as one iterable."""
    if children is NONE_GIVEN:
        return [], True
    if more or isinstance(children, Child):
        return [children, *more], True
    return list(iterated(children, what)), False


# `all`: children one by one give a tuple, one type per position; an iterable gives a list. A child
# is a `Child[T]` of the value it settles with, so no overload differs from another only by an
# `Any` inside an argument, which mypy answers with `Any` (a handler returning `dict[str, Any]`):
# past five, given one by one (``lash.all(ctx, *calls)`` too), they share one type, as `all_settled`'s.
@overload
async def all(
    ctx: Caller,
    c1: Child[T1],
    /,
    *,
    on_reject: LoserPolicy = _RTC,
    key: GroupKey | str | None = None,
    max_in_flight: int | None = None,
) -> tuple[T1]: ...
@overload
async def all(
    ctx: Caller,
    c1: Child[T1],
    c2: Child[T2],
    /,
    *,
    on_reject: LoserPolicy = _RTC,
    key: GroupKey | str | None = None,
    max_in_flight: int | None = None,
) -> tuple[T1, T2]: ...
@overload
async def all(
    ctx: Caller,
    c1: Child[T1],
    c2: Child[T2],
    c3: Child[T3],
    /,
    *,
    on_reject: LoserPolicy = _RTC,
    key: GroupKey | str | None = None,
    max_in_flight: int | None = None,
) -> tuple[T1, T2, T3]: ...
@overload
async def all(
    ctx: Caller,
    c1: Child[T1],
    c2: Child[T2],
    c3: Child[T3],
    c4: Child[T4],
    /,
    *,
    on_reject: LoserPolicy = _RTC,
    key: GroupKey | str | None = None,
    max_in_flight: int | None = None,
) -> tuple[T1, T2, T3, T4]: ...
@overload
async def all(
    ctx: Caller,
    c1: Child[T1],
    c2: Child[T2],
    c3: Child[T3],
    c4: Child[T4],
    c5: Child[T5],
    /,
    *,
    on_reject: LoserPolicy = _RTC,
    key: GroupKey | str | None = None,
    max_in_flight: int | None = None,
) -> tuple[T1, T2, T3, T4, T5]: ...
@overload
async def all(
    ctx: Caller,
    c1: Child[T],
    c2: Child[T],
    c3: Child[T],
    c4: Child[T],
    c5: Child[T],
    c6: Child[T],
    /,
    *more: Child[T],
    on_reject: LoserPolicy = _RTC,
    key: GroupKey | str | None = None,
    max_in_flight: int | None = None,
) -> tuple[T, ...]: ...
@overload
async def all(
    ctx: Caller,
    children: Iterable[Child[T]],
    *,
    on_reject: LoserPolicy = _RTC,
    key: GroupKey | str | None = None,
    max_in_flight: int | None = None,
) -> list[T]: ...
@terminal
async def all(
    ctx: Caller,
    children: Child | Iterable[Child] = NONE_GIVEN,
    *more: Child,
    on_reject: LoserPolicy = _RTC,
    key: GroupKey | str | None = None,
    max_in_flight: int | None = None,
) -> Any:
    """`Promise.all`: every value in input order, or `Rejected` at the first consumed rejection.

    The others run on to completion, as in ECMA-262; ``on_reject=CANCEL`` fails fast instead: once a
    rejection is consumed the children still running are cancelled (the group declares
    `RunToCompletion` at open and the close narrows it to `Cancel`).

    Args:
        ctx: the handler's ``restate.Context`` (or a `RuntimeEffectController`, given ``key``).
        children: the children as one iterable, or the first of them, given one by one.
        *more: the other children, given one by one.
        on_reject: `CANCEL` to cancel the children still running once a rejection is consumed;
            `RUN_TO_COMPLETION` (the default) lets them run on.
        key: the group's key (a `GroupKey` or its text); by default one is derived from the
            invocation and the children. Required with a controller. It names the group until
            its close: opened again after it, it is a new group whose children run again.
        max_in_flight: at most this many children run at once; the next starts (in input order)
            as one settles. None (the default): all at once.

    Returns:
        The values in input order: a list for an iterable, a tuple for children given one by one.
        No children: ``[]``, and no group is opened.

    Raises:
        Rejected: the first rejection consumed (in rank order); its ``settlement`` says which child.
        InvalidInput: refused before anything is sent, as `open` refuses (a bad ``ctx``, child or
            ``key``, a typed call's argument its serde cannot write, a call inside ``ctx.run``, or a
            child too large for any message, or a bounded group's too large for one: `PayloadTooLarge`;
            a larger group is opened in parts).
        ChildUnroutable: a child no runner is registered for (an unknown tool or call target).
        EffectGroupUnsupported: this process cannot open groups (see `use_prefix`).
        UndecodableResult: a typed call's value that its handler's output serde cannot read.
    """
    listed, one_by_one = _spread(children, more, "lash.all")
    group_key, envelopes, values = typed_grouped(ctx, listed, key, "lash.all")
    fulfilled = await combinators.all_(
        controller(ctx), group_key, envelopes, on_reject=on_reject, max_in_flight=max_in_flight
    )
    decoded = [values.value(position, value) for position, value in enumerate(fulfilled)]
    return tuple(decoded) if one_by_one else decoded


# `all_settled`: children of one value type `T` give `Ok[T]`; a JSON child, an `Ok` of `Any`.
@overload
async def all_settled(
    ctx: Caller,
    c1: Child[T],
    /,
    *more: Child[T],
    key: GroupKey | str | None = None,
    max_in_flight: int | None = None,
) -> list[Ok[T] | Err | Cancelled]: ...
@overload
async def all_settled(
    ctx: Caller,
    children: Iterable[Child[T]],
    *,
    key: GroupKey | str | None = None,
    max_in_flight: int | None = None,
) -> list[Ok[T] | Err | Cancelled]: ...
@terminal
async def all_settled(
    ctx: Caller,
    children: Child | Iterable[Child] = NONE_GIVEN,
    *more: Child,
    key: GroupKey | str | None = None,
    max_in_flight: int | None = None,
) -> list[Outcome]:
    """`Promise.allSettled`: every outcome (`Ok`, `Err` or `Cancelled`) in input order; a typed call's
    `Ok` holds its value as its handler's output serde reads it (`Ok[T]` to a type checker, where
    every child is a typed call of one type).

    Args:
        ctx: the handler's ``restate.Context`` (or a `RuntimeEffectController`, given ``key``).
        children: the children as one iterable, or the first of them, given one by one.
        *more: the other children, given one by one.
        key: the group's key (a `GroupKey` or its text); by default one is derived from the
            invocation and the children. Required with a controller. It names the group until
            its close: opened again after it, it is a new group whose children run again.
        max_in_flight: at most this many children run at once; the next starts (in input order)
            as one settles. None (the default): all at once.

    Returns:
        One outcome per child, in input order (``[]`` for no children, and no group is opened).

    Raises:
        InvalidInput: refused before anything is sent, as `open` refuses (a bad ``ctx``, child or
            ``key``, a typed call's argument its serde cannot write, a call inside ``ctx.run``, or a
            child too large for any message, or a bounded group's too large for one: `PayloadTooLarge`;
            a larger group is opened in parts).
        ChildUnroutable: a child no runner is registered for (an unknown tool or call target).
        EffectGroupUnsupported: this process cannot open groups (see `use_prefix`).
        UndecodableResult: a typed call's value that its handler's output serde cannot read.
    """
    listed, _ = _spread(children, more, "lash.all_settled")
    group_key, envelopes, values = typed_grouped(ctx, listed, key, "lash.all_settled")
    outcomes = await combinators.all_settled(
        controller(ctx), group_key, envelopes, max_in_flight=max_in_flight
    )
    return [values.outcome(position, outcome) for position, outcome in enumerate(outcomes)]
