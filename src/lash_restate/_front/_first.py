"""`race`, `any` and `select`: a group opened, consumed until it is decided, and closed, in one call.

Children come as `all` takes them; the winner's value is read by its handler's output serde: the
first settlement's ``T`` (``T | None`` beside a `lash.sleep`), with ``with_position=True`` its position.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal, TypeVar, overload

from .. import combinators
from ..combinators import Combinator
from ..contract import Child, GroupKey, InvalidInput, LoserPolicy
from ._combinators import _RTC, NONE_GIVEN, _spread
from ._invocation import Caller, controller, typed_grouped
from ._terminal import terminal

__all__ = ["any", "race", "select"]

T = TypeVar("T")


async def _first(
    kind: Combinator,
    ctx: Caller,
    children: Child | Iterable[Child],
    more: tuple[Child, ...],
    losers: LoserPolicy,
    key: GroupKey | str | None,
    with_position: bool,
    max_in_flight: int | None,
) -> Any:
    listed, _ = _spread(children, more, f"lash.{kind.value}")
    group_key, envelopes, values = typed_grouped(ctx, listed, key, f"lash.{kind.value}")
    # Opens, consumes and closes the group: `run_combinator` (contract/_combine.py) over the controller.
    result = await combinators.combine(
        controller(ctx), kind, group_key, envelopes, losers=losers, max_in_flight=max_in_flight
    )
    position, value = combinators.won(result)
    value = values.value(position, value)
    return (position, value) if with_position else value


# `race` and `any`: the winner's value, or with `with_position=True` its position too. A child is a
# `Child[T]` of the value it settles with (a typed call's handler output, `None` for a sleep, `Any`
# for JSON), so one overload per form types them all: mypy answers `Any` where overloads differ only
# by an `Any` inside an argument (a handler returning `dict[str, Any]`).
@overload
async def race(
    ctx: Caller,
    c1: Child[T],
    /,
    *more: Child[T],
    losers: LoserPolicy = _RTC,
    key: GroupKey | str | None = None,
    max_in_flight: int | None = None,
    with_position: Literal[False] = False,
) -> T: ...
@overload
async def race(
    ctx: Caller,
    children: Iterable[Child[T]],
    *,
    losers: LoserPolicy = _RTC,
    key: GroupKey | str | None = None,
    max_in_flight: int | None = None,
    with_position: Literal[False] = False,
) -> T: ...
@overload
async def race(
    ctx: Caller,
    c1: Child[T],
    /,
    *more: Child[T],
    losers: LoserPolicy = _RTC,
    key: GroupKey | str | None = None,
    max_in_flight: int | None = None,
    with_position: Literal[True],
) -> tuple[int, T]: ...
@overload
async def race(
    ctx: Caller,
    children: Iterable[Child[T]],
    *,
    losers: LoserPolicy = _RTC,
    key: GroupKey | str | None = None,
    max_in_flight: int | None = None,
    with_position: Literal[True],
) -> tuple[int, T]: ...
@terminal
async def race(
    ctx: Caller,
    children: Child | Iterable[Child] = NONE_GIVEN,
    *more: Child,
    losers: LoserPolicy = _RTC,
    key: GroupKey | str | None = None,
    max_in_flight: int | None = None,
    with_position: bool = False,
) -> Any:
    """`Promise.race`: the first settlement's value, or `Rejected` if it rejected (its position is
    ``settlement.position``). ``losers=CANCEL`` cancels the children still running once it is
    decided; ``with_position=True`` answers ``(position, value)``.

    Args:
        ctx: the handler's ``restate.Context`` (or a `RuntimeEffectController`, given ``key``).
        children: the children as one iterable, or the first of them, given one by one.
        *more: the other children, given one by one.
        losers: `CANCEL` to cancel the children still running once the race is decided;
            `RUN_TO_COMPLETION` (the default) lets them run on.
        key: the group's key (a `GroupKey` or its text); by default one is derived from the
            invocation and the children. Required with a controller. It names the group until
            its close: opened again after it, it is a new group whose children run again.
        max_in_flight: at most this many children run at once; the next starts (in input order)
            as one settles. None (the default): all at once.
        with_position: answer ``(position, value)``, the winner's input position with its value.

    Returns:
        The first settlement's value (``None`` for a `lash.sleep`), or ``(position, value)``.

    Raises:
        Rejected: the first settlement is a rejection.
        EmptyGroup: no children (a race of none would never settle).
        InvalidInput: refused before anything is sent, as `open` refuses (a bad ``ctx``, child or
            ``key``, a typed call's argument its serde cannot write, a call inside ``ctx.run``, or a
            child too large for any message, or a bounded group's too large for one: `PayloadTooLarge`;
            a larger group is opened in parts).
        ChildUnroutable: a child no runner is registered for (an unknown tool or call target).
        EffectGroupUnsupported: this process cannot open groups (see `use_prefix`).
        UndecodableResult: a typed call's value that its handler's output serde cannot read.
    """
    return await _first(Combinator.RACE, ctx, children, more, losers, key, with_position, max_in_flight)


@overload
async def any(
    ctx: Caller,
    c1: Child[T],
    /,
    *more: Child[T],
    losers: LoserPolicy = _RTC,
    key: GroupKey | str | None = None,
    max_in_flight: int | None = None,
    with_position: Literal[False] = False,
) -> T: ...
@overload
async def any(
    ctx: Caller,
    children: Iterable[Child[T]],
    *,
    losers: LoserPolicy = _RTC,
    key: GroupKey | str | None = None,
    max_in_flight: int | None = None,
    with_position: Literal[False] = False,
) -> T: ...
@overload
async def any(
    ctx: Caller,
    c1: Child[T],
    /,
    *more: Child[T],
    losers: LoserPolicy = _RTC,
    key: GroupKey | str | None = None,
    max_in_flight: int | None = None,
    with_position: Literal[True],
) -> tuple[int, T]: ...
@overload
async def any(
    ctx: Caller,
    children: Iterable[Child[T]],
    *,
    losers: LoserPolicy = _RTC,
    key: GroupKey | str | None = None,
    max_in_flight: int | None = None,
    with_position: Literal[True],
) -> tuple[int, T]: ...
@terminal
async def any(
    ctx: Caller,
    children: Child | Iterable[Child] = NONE_GIVEN,
    *more: Child,
    losers: LoserPolicy = _RTC,
    key: GroupKey | str | None = None,
    max_in_flight: int | None = None,
    with_position: bool = False,
) -> Any:
    """`Promise.any`: the first success, or `AggregateRejection` (an exception group of every
    child's rejection, in input order); ``with_position=True`` answers ``(position, value)``.

    Args:
        ctx: the handler's ``restate.Context`` (or a `RuntimeEffectController`, given ``key``).
        children: the children as one iterable, or the first of them, given one by one.
        *more: the other children, given one by one.
        losers: `CANCEL` to cancel the children still running once a child succeeds;
            `RUN_TO_COMPLETION` (the default) lets them run on.
        key: the group's key (a `GroupKey` or its text); by default one is derived from the
            invocation and the children. Required with a controller. It names the group until
            its close: opened again after it, it is a new group whose children run again.
        max_in_flight: at most this many children run at once; the next starts (in input order)
            as one settles. None (the default): all at once.
        with_position: answer ``(position, value)``, the winner's input position with its value.

    Returns:
        The first success's value (``None`` for a `lash.sleep`), or ``(position, value)``.

    Raises:
        AggregateRejection: every child rejected; one `ChildRejected` per child, in input order.
        EmptyGroup: no children (none could succeed).
        InvalidInput: refused before anything is sent, as `open` refuses (a bad ``ctx``, child or
            ``key``, a typed call's argument its serde cannot write, a call inside ``ctx.run``, or a
            child too large for any message, or a bounded group's too large for one: `PayloadTooLarge`;
            a larger group is opened in parts).
        ChildUnroutable: a child no runner is registered for (an unknown tool or call target).
        EffectGroupUnsupported: this process cannot open groups (see `use_prefix`).
        UndecodableResult: a typed call's value that its handler's output serde cannot read.
    """
    return await _first(Combinator.ANY, ctx, children, more, losers, key, with_position, max_in_flight)


# `select`: named children, as `restate.select` takes them; `losers` and `key` are lash's own.
@terminal
async def select(
    ctx: Caller, /, *, losers: LoserPolicy = _RTC, key: GroupKey | str | None = None, **children: Child[T]
) -> tuple[str, T]:
    """Say who won: ``(name, value)`` of the first of the named children to settle, as
    ``restate.select`` answers (a `race`: ``losers`` as there, `RUN_TO_COMPLETION` unless told).
    A tuple, where ``restate.select`` answers a two-item list: unpacking and ``match`` read both
    alike.

    If that child rejected, `Rejected` is raised with its ``name``. ``losers`` and ``key`` are
    lash's keywords, so no child can take those names.

    Args:
        ctx: the handler's ``restate.Context`` (or a `RuntimeEffectController`, given ``key``).
        losers: `CANCEL` to cancel the children still running once one has settled;
            `RUN_TO_COMPLETION` (the default) lets them run on.
        key: the group's key (a `GroupKey` or its text); by default one is derived from the
            invocation and the children. Required with a controller. It names the group until
            its close: opened again after it, it is a new group whose children run again.
        **children: the children, by name; their positions are the order they are given in.

    Returns:
        ``(name, value)`` of the first child to settle (``None`` for a `lash.sleep`).

    Raises:
        Rejected: the first child to settle rejected; its ``name`` is that child's.
        EmptyGroup: no children.
        InvalidInput: refused before anything is sent, as `open` refuses (a bad ``ctx``, child or
            ``key``, a typed call's argument its serde cannot write, a call inside ``ctx.run``, or a
            child too large for any message, or a bounded group's too large for one: `PayloadTooLarge`;
            a larger group is opened in parts).
        ChildUnroutable: a child no runner is registered for (an unknown tool or call target).
        EffectGroupUnsupported: this process cannot open groups (see `use_prefix`).
        UndecodableResult: a typed call's value that its handler's output serde cannot read.
    """
    for keyword, given in (("key", key), ("losers", losers)):
        if isinstance(given, Child):  # a child meant to be named so: say why it cannot be
            raise InvalidInput(
                f"lash.select: {keyword}= is lash's own keyword, not a child's name; "
                "name that child otherwise"
            )
    names = list(children)
    group_key, envelopes, values = typed_grouped(ctx, children.values(), key, "lash.select", names)
    named = dict(zip(names, envelopes, strict=True))
    name, value = await combinators.select(controller(ctx), group_key, named, losers=losers)
    return name, values.value(names.index(name), value)
