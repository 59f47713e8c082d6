"""A group by hand: open, consume, save, resume, close."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Generator, Iterable
from types import TracebackType
from typing import Any, Generic, cast

from typing_extensions import TypeVar

from ..contract import (
    Child,
    GroupHandle,
    GroupKey,
    GroupWakePolicy,
    InvalidInput,
    LoserPolicy,
    Reopens,
    RuntimeEffectController,
    RuntimeEffectGroup,
    Settlement,
    reopen_as_saved,
)
from ..engine import RestateController, ends_the_invocation
from ._invocation import Caller, Values, controller, outside_run, typed_grouped
from ._terminal import terminal

# The value type of a group's settlements, to a type checker: its children's (`Child[T]`), joined.
T = TypeVar("T", covariant=True, default=Any)


class Group(Generic[T]):
    """An open group and its cursor; `save` gives what a fresh invocation resumes from.

    ``async with`` closes the group when the block ends, unless it was saved (a continuation holds
    it) or closed already, or ended by an exception Restate retries (anything but a
    ``restate.TerminalError`` or a lash error: the retry runs the block again from the journal), or
    by any exception in a block that resumed a saved cursor (whoever else holds it may resume it);
    ``async for settlement in group`` yields the settlements still to consume, in rank order.
    ``Group[T]`` where its children's value type is known: each `Ok` is an ``Ok[T]``.
    """

    def __init__(
        self,
        controller: RuntimeEffectController,
        handle: GroupHandle,
        values: Values | None = None,
        *,
        resumed: bool = False,
    ) -> None:
        self._controller = controller
        self._handle = handle
        self._held = False  # saved or closed: the end of an ``async with`` leaves it alone
        self._values = values
        self._resumed = resumed  # reopened from a saved cursor, which something else may hold

    @property
    def key(self) -> str:
        return self._handle.group_key

    @property
    def consumed(self) -> int:
        return self._handle.consumed

    def __len__(self) -> int:
        return self._handle.child_count

    @terminal
    async def next(self, cancel: Awaitable[object] | None = None) -> Settlement[T]:
        """The next settlement in rank order (the order the children settled in); the cursor advances
        by exactly this one, so a fresh invocation resuming the saved cursor gets the settlement after
        it. A typed call's `Ok` holds its value as its handler's output serde reads it.

        ``cancel``, an awaitable (on Restate a durable one: ``ctx.sleep(...)``, a call's future,
        ``ctx.promise(name).value()``, not the promise itself), ends the wait
        with `AwaitCancelled` if it completes first; the cursor is then left where it was. Once every
        settlement was consumed, `CursorOverrun`. One cursor reads one rank at a time: a `next`
        while another is awaited is refused `InvalidInput`."""
        outside_run(self._controller, "Group.next")
        # A second `next` at once is refused by the handle itself, on every host.
        settlement = await self._controller.await_next_settlement(self._handle, cancel)
        # Typed as its children: a typed call's `Ok` read by its handler's output serde, JSON else.
        return cast(
            Settlement[T], settlement if self._values is None else self._values.settlement(settlement)
        )

    def __aiter__(self) -> AsyncIterator[Settlement[T]]:
        """The settlements not consumed yet, in rank order, each advancing the cursor by one."""
        return self._remaining()

    async def _remaining(self) -> AsyncIterator[Settlement[T]]:
        while self.consumed < len(self):
            yield await self.next()

    def save(self) -> str:
        """The cursor as text: keep it, and `open(..., resume=...)` in a fresh invocation.

        On Restate the group also learns that a continuation holds it, so once this invocation returns
        normally an operator sees the group as parked, not orphaned (`lash-restate groups list`).
        """
        if isinstance(self._controller, RestateController):
            self._controller.outside_run("Group.save")
            self._controller.handle_saved(self._handle)
        self._held = True
        return self._handle.to_bytes().decode()

    @terminal
    async def close(self, losers: LoserPolicy | None = None) -> None:
        """Close the group; ``losers`` may narrow the declared disposition to `CANCEL`."""
        outside_run(self._controller, "Group.close")
        await self._controller.close_effect_group(self._handle, losers)
        self._held = True

    async def __aenter__(self) -> Group[T]:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._held:
            return
        if error is None:
            await self.close()
        elif not self._resumed and ends_the_invocation(error):
            # Decision 122: a group this block opened, which nothing else can reach once it ends.
            with contextlib.suppress(Exception):  # the error that ends the invocation is the one raised
                await self.close()


class Opening(Awaitable[Group[T]]):
    """What `open` returns: await it for the `Group`, or ``async with`` it to close the group when
    the block ends (unless it was saved)."""

    def __init__(self, opening: Awaitable[Group[T]]) -> None:
        self._opening = opening
        self._group: Group[T] | None = None

    def __await__(self) -> Generator[Any, None, Group[T]]:
        return self._opening.__await__()

    async def __aenter__(self) -> Group[T]:
        self._group = await self._opening
        return self._group

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._group is not None  # __aenter__ returned it
        await self._group.__aexit__(kind, error, tb)


def open(
    ctx: Caller,
    children: Iterable[Child[T]],
    *,
    wake: GroupWakePolicy = GroupWakePolicy.ALL,
    losers: LoserPolicy = LoserPolicy.RUN_TO_COMPLETION,
    key: GroupKey | str | None = None,
    resume: str | None = None,
    max_in_flight: int | None = None,
) -> Opening[T]:
    """Open a group of ``children`` (or, with ``resume``, reopen the saved one and restore its cursor).

    ``group = await lash.open(...)``, or ``async with lash.open(...) as group:`` to have it closed
    when the block ends (a saved group is left open for the invocation that resumes it).

    Args:
        ctx: the handler's ``restate.Context`` (or a `RuntimeEffectController`, given ``key``).
        children: the children (`lash.call`, `lash.tool`, `lash.sleep`, `lash.event`), read once.
        wake: the group's wake rule, declared at open and part of its identity:
            `GroupWakePolicy.ALL` (the default), `GroupWakePolicy.FIRST` or `FIRST_SUCCESS`.
        losers: what becomes of the children still running once the group closes:
            `RUN_TO_COMPLETION` (the default) or `CANCEL`; a close may narrow it, never widen it.
        key: the group's key (a `GroupKey` or its text, ``{scope}:group:{batch}:{occurrence}``,
            e.g. ``f"{order_id}:group:pay:0"``: no ``:`` in the batch, the occurrence a number);
            by default one is derived from the invocation and the children. Required with a
            controller. It names the group until its close: opened again after it, it is a new
            group whose children run again.
        resume: a cursor from `Group.save`: reopen that group (the cursor names its key: a
            ``key`` given too must be the same) with the same children, wake and losers, and go
            on from where it was saved.
        max_in_flight: at most this many children run at once; the next starts (in input order)
            as one settles. None (the default): all at once. A resumed group keeps the bound it was
            opened with.

    Returns:
        An `Opening`: await it for the `Group`, or use it in ``async with``.

    Raises:
        InvalidInput: when awaited, before anything is sent: ``ctx`` is neither a handler's context
            nor a controller, a child is not one, a typed call's argument cannot be written, ``key``
            is missing with a controller or malformed (`InvalidGroupKey`), ``resume`` is not a saved
            cursor (`InvalidHandle`), ``key`` and ``resume`` name two groups, the call is made
            inside a ``ctx.run`` action, or a child would
            fit no message, or a bounded group's children not one (`PayloadTooLarge`; a larger
            group is opened in parts).
        GroupShapeError: no children (`EmptyGroup`), or a child no runner is registered for
            (`ChildUnroutable`); with ``resume``, a count, wake or losers that differ from the
            recorded group's (`ShapeMismatch`).
        ReplayMismatch: with ``resume``, a child that differs from the recorded one.
        GroupNotOpen: ``resume`` names a group that was closed (whether or not another has been
            opened under its key since).
        EffectGroupUnsupported: this process cannot open groups (see `use_prefix`).
    """
    return Opening(
        _open(ctx, children, wake=wake, losers=losers, key=key, resume=resume, max_in_flight=max_in_flight)
    )


@terminal
async def _open(
    ctx: Caller,
    children: Iterable[Child[T]],
    *,
    wake: GroupWakePolicy,
    losers: LoserPolicy,
    key: GroupKey | str | None,
    resume: str | None,
    max_in_flight: int | None,
) -> Group[T]:
    outside_run(controller(ctx), "lash.open")
    saved = GroupHandle.from_bytes(resume) if resume is not None else None
    if saved is not None and key is not None:
        given = str(key if isinstance(key, GroupKey) else GroupKey.parse(key))  # malformed: InvalidGroupKey
        if given != saved.group_key:
            raise InvalidInput(
                f"key={given!r} is not the key of the saved cursor's group, {saved.group_key!r}: "
                "a resume reopens the cursor's group (give resume= alone)",
                group_key=saved.group_key,
            )
    group_key, envelopes, values = typed_grouped(
        ctx, children, saved.group_key if saved is not None else key, "lash.open", opens=saved is None
    )
    group = RuntimeEffectGroup(
        group_key, envelopes, wake=wake, disposition=losers, max_in_flight=max_in_flight
    )
    owner = controller(ctx)
    if saved is None:
        return Group(owner, await owner.open_effect_group(group), values)
    if not isinstance(owner, Reopens):
        raise InvalidInput(  # decision 41
            f"{type(owner).__name__} cannot reopen a saved group: it has no reopen_effect_group, and a "
            "resume must never start a closed group over"
        )
    await reopen_as_saved(owner, group, saved)  # a closed group is refused, never started over
    return Group(owner, saved, values, resumed=True)
