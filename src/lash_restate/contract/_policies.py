"""Wake rule and loser disposition: both are journaled identity (ADR, "Wake policy is journaled identity")."""

from __future__ import annotations

from enum import StrEnum

from ._errors import DispositionWidening

__all__ = ["GroupWakePolicy", "LoserPolicy", "effective_disposition"]


class GroupWakePolicy(StrEnum):
    """Exactly three variants; a fourth would change the identity of recorded groups (ADR)."""

    FIRST = "first"
    """`Promise.race` and the signal/deadline select."""
    FIRST_SUCCESS = "first_success"
    """`Promise.any`."""
    ALL = "all"
    """`Promise.all` and `Promise.allSettled`: they differ only in how far the caller consumes."""


class LoserPolicy(StrEnum):
    """What happens to unsettled children once the caller closes; declared at open (ADR)."""

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

    ADR, "Loser disposition is declared at open": close may only narrow; a widening is refused
    with `DispositionWidening` rather than ignored.
    """
    effective = declared if requested is None else requested
    if not declared.narrows_to(effective):
        raise DispositionWidening(
            f"group declared {declared.value}; close may only narrow it", group_key=group_key
        )
    return effective
