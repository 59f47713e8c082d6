"""`all`, `all_settled`, `race`, `any`: a group opened, consumed and closed in one call."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .. import combinators
from ..contract import (
    GroupKey,
    LoserPolicy,
    Outcome,
)
from ._children import Child
from ._invocation import Caller, controller, grouped
from ._terminal import terminal


@terminal
async def all(
    ctx: Caller,
    children: Iterable[Child],
    *,
    on_reject: LoserPolicy = LoserPolicy.RUN_TO_COMPLETION,
    key: GroupKey | str | None = None,
) -> list[Any]:
    """`Promise.all`: every value in input order, or `Rejected` at the first consumed rejection.

    The others run on to completion, as in ECMA-262; ``on_reject=CANCEL`` fails fast instead: once a
    rejection is consumed the children still running are cancelled (the group declares
    `RunToCompletion` at open and the close narrows it to `Cancel`).
    """
    group_key, envelopes = grouped(ctx, children, key, "lash.all")
    return await combinators.all_(controller(ctx), group_key, envelopes, on_reject=on_reject)


@terminal
async def all_settled(
    ctx: Caller, children: Iterable[Child], *, key: GroupKey | str | None = None
) -> list[Outcome]:
    """`Promise.allSettled`: every outcome (`Ok`, `Err` or `Cancelled`) in input order."""
    group_key, envelopes = grouped(ctx, children, key, "lash.all_settled")
    return await combinators.all_settled(controller(ctx), group_key, envelopes)


@terminal
async def race(
    ctx: Caller,
    children: Iterable[Child],
    *,
    losers: LoserPolicy = LoserPolicy.RUN_TO_COMPLETION,
    key: GroupKey | str | None = None,
) -> Any:
    """`Promise.race`: the first settlement's value, or `Rejected` if it rejected. ``losers=CANCEL``
    cancels the children still running once it is decided."""
    group_key, envelopes = grouped(ctx, children, key, "lash.race")
    return await combinators.race(controller(ctx), group_key, envelopes, losers=losers)


@terminal
async def any(
    ctx: Caller,
    children: Iterable[Child],
    *,
    losers: LoserPolicy = LoserPolicy.RUN_TO_COMPLETION,
    key: GroupKey | str | None = None,
) -> Any:
    """`Promise.any`: the first success, or `AggregateRejection` (an exception group of every
    child's rejection, in input order)."""
    group_key, envelopes = grouped(ctx, children, key, "lash.any")
    return await combinators.any_(controller(ctx), group_key, envelopes, losers=losers)
