"""Wake rule and loser disposition: both are journaled identity (ADR, "Wake policy is journaled identity")."""

from __future__ import annotations

from enum import StrEnum

from ._errors import DispositionWidening

__all__ = ["GroupWakePolicy", "LoserPolicy", "effective_disposition"]


class GroupWakePolicy(StrEnum):
    """When a group's combinator has decided; declared at open. Exactly three variants: the wake rule
    is part of a recorded group's identity (a reopen is fenced on it), so a fourth would change the
    identity of groups already recorded."""

    FIRST = "first"
    """`Promise.race` and the signal/deadline select."""
    FIRST_SUCCESS = "first_success"
    """`Promise.any`."""
    ALL = "all"
    """`Promise.all` and `Promise.allSettled`: they differ only in how far the caller consumes."""


class LoserPolicy(StrEnum):
    """What happens to unsettled children once the caller closes. Declared at open and recorded with
    the group; a close may narrow it to `CANCEL`, never widen it (`DispositionWidening`)."""

    RUN_TO_COMPLETION = "run_to_completion"
    """ECMA-262: a losing promise keeps running and its side effects still happen."""
    CANCEL = "cancel"
    """The deadline arm: the losing arm must not run on."""

    def narrows_to(self, requested: LoserPolicy) -> bool:
        """True when closing with ``requested`` keeps or tightens this declared disposition."""
        return self is requested or requested is LoserPolicy.CANCEL


def effective_disposition(
    declared: LoserPolicy, requested: LoserPolicy | None, *, group_key: str
) -> LoserPolicy:
    """The disposition a close applies: ``requested`` if it narrows ``declared``, ``declared`` if None.

    The disposition is declared at open, so a close may only narrow it; a widening is refused rather
    than ignored.

    Args:
        declared: the disposition the group declared at open.
        requested: the disposition the close asks for, or None to keep ``declared``.
        group_key: the group's key, for the refusal.

    Returns:
        The disposition to apply.

    Raises:
        DispositionWidening: ``requested`` is `RUN_TO_COMPLETION` on a group declared `CANCEL`.
    """
    effective = declared if requested is None else requested
    if not declared.narrows_to(effective):
        raise DispositionWidening(
            f"group declared {declared.value}; close may only narrow it", group_key=group_key
        )
    return effective
