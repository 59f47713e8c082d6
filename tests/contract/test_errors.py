"""Error codes are stable, every error names where it happened, and errors survive their wire form."""

from __future__ import annotations

import pytest

import lash_restate
from lash_restate import contract
from lash_restate.contract import (
    ChildUnroutable,
    LashError,
    LoserPolicy,
    RuntimeErrorCode,
    error_from_wire,
)


def _all_errors() -> list[type[LashError]]:
    """Every concrete error of the contract (LashError itself is only the base and is never raised).

    A host may subclass one to carry it through its engine (the Restate tier's `CalledInsideRun` is
    an `InvalidInput` that is also a `TerminalError`); such a subclass keeps its parent's code and
    reads back as its parent, so only the contract's own classes are the codes' classes.
    """
    found: list[type[LashError]] = []
    stack: list[type[LashError]] = list(LashError.__subclasses__())
    while stack:
        cls = stack.pop()
        if cls.__module__.startswith("lash_restate.contract"):
            found.append(cls)
        stack.extend(cls.__subclasses__())
    return found


def test_every_error_class_has_its_own_code_and_docstring() -> None:
    errors = _all_errors()
    codes = [cls.code for cls in errors]
    assert len(codes) == len(set(codes))
    assert set(codes) == set(RuntimeErrorCode)
    assert all(cls.__doc__ for cls in errors)


def test_codes_are_stable_strings() -> None:
    # Released values never change: this list is the compatibility promise.
    assert {c.value for c in RuntimeErrorCode} == {
        "effect_group_unsupported",
        "invalid_input",
        "invalid_group_key",
        "invalid_envelope",
        "invalid_handle",
        "invalid_settlement",
        "group_shape",
        "empty_group",
        "foreign_group_key",
        "permuted_position",
        "wake_rule_drift",
        "disposition_drift",
        "duplicate_replay_key",
        "child_unroutable",
        "shape_mismatch",
        "replay_mismatch",
        "cursor",
        "cursor_overrun",
        "handle_mismatch",
        "group_not_open",
        "disposition_widening",
        "await_cancelled",
        "membership_unsupported",
        "too_large",
        "undecodable_result",
    }


@pytest.mark.parametrize("cls", _all_errors())
def test_wire_round_trip_keeps_type_and_fields(cls: type[LashError]) -> None:
    error = cls('it\'s "quoted"\nand multi-line', group_key="s:group:b:0", position=2, replay_key="r'2")
    back = error_from_wire(error.to_wire())
    assert type(back) is cls
    assert back is not None
    assert (back.message, back.group_key, back.position, back.replay_key) == (
        error.message,
        error.group_key,
        error.position,
        error.replay_key,
    )


@pytest.mark.parametrize(
    "text", ["", "cancelled", "lash-error:", "lash-error:{}", 'lash-error:{"code":"nope"}']
)
def test_non_wire_text_is_not_an_error(text: str) -> None:
    assert error_from_wire(text) is None


def test_str_names_code_and_location() -> None:
    text = str(ChildUnroutable("no runner", group_key="g:group:b:0", position=1, replay_key="k"))
    assert text.startswith("[child_unroutable] no runner")
    assert "position=1" in text
    assert "replay_key='k'" in text


def test_narrowing_is_only_towards_cancel() -> None:
    rtc, cancel = LoserPolicy.RUN_TO_COMPLETION, LoserPolicy.CANCEL
    assert rtc.narrows_to(rtc)
    assert rtc.narrows_to(cancel)
    assert cancel.narrows_to(cancel)
    assert not cancel.narrows_to(rtc)


def test_every_error_type_is_reachable_from_the_front_door() -> None:
    """An application catches what it is raised: every `LashError` subclass is at the top level."""
    errors = [n for n in contract.__all__ if isinstance(getattr(contract, n), type)]
    errors = [n for n in errors if issubclass(getattr(contract, n), contract.LashError)]
    for name in errors:
        assert getattr(lash_restate, name) is getattr(contract, name)
