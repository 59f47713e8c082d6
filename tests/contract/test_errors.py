"""One error tree: every error lash raises is a `LashError` with a stable code, the tree drawn in the
docs is the code's, every error names where it happened, and errors survive their wire form."""

from __future__ import annotations

import importlib
import pickle
import pkgutil
import re
from pathlib import Path

import pytest

import lash_restate
from lash_restate import contract
from lash_restate.contract import (
    ChildUnroutable,
    LashError,
    LoserPolicy,
    RuntimeErrorCode,
    ToolFailure,
    _errors,
    error_from_wire,
    without_wire,
)

REFERENCE = Path(__file__).resolve().parents[2] / "docs/reference/front-door.md"


def _all_errors() -> list[type[LashError]]:
    """Every concrete error of the contract (LashError itself is only the base and is never raised).

    A host may subclass one to carry it through its implementation (the Restate host's `CalledInsideRun` is
    an `InvalidInput` that is also a `TerminalError`); such a subclass keeps its parent's code and
    reads back as its parent, so only the contract's own classes are the codes' classes.
    """
    found: list[type[LashError]] = []
    stack: list[type[LashError]] = list(LashError.__subclasses__())
    while stack:
        cls = stack.pop()
        if getattr(contract, cls.__name__, None) is cls:  # the contract's own, not a test's subclass
            found.append(cls)
        stack.extend(cls.__subclasses__())
    return found


def _public_exceptions() -> dict[str, type[BaseException]]:
    """Every exception class a public module of lash_restate names in its ``__all__``, by name."""
    found: dict[str, type[BaseException]] = {}
    modules = [lash_restate.__name__] + [
        m.name
        for m in pkgutil.walk_packages(lash_restate.__path__, "lash_restate.")
        if not any(part.startswith("_") for part in m.name.split(".")[1:])
    ]
    for name in modules:
        module = importlib.import_module(name)
        for attr in getattr(module, "__all__", []):
            value = getattr(module, attr)
            if isinstance(value, type) and issubclass(value, BaseException):
                assert found.setdefault(attr, value) is value, f"two public {attr}s"
    return found


def _tree() -> list[type[LashError]]:
    """The error tree: `LashError` and every public class under it (a host's private subclass, such as
    the Restate host's `CalledInsideRun`, keeps its parent's code and is not part of it)."""
    public = set(_public_exceptions().values())
    return [LashError] + [cls for cls in _descendants(LashError) if cls in public]


def _descendants(cls: type[LashError]) -> list[type[LashError]]:
    return [c for sub in cls.__subclasses__() for c in (sub, *_descendants(sub))]


def test_lash_error_is_the_root_of_every_public_exception() -> None:
    exceptions = _public_exceptions()
    assert {"Rejected", "AggregateRejection", "ChildRejected", "DeploymentError", "ServerUnavailable"} <= set(
        exceptions
    )
    outside = {name for name, cls in exceptions.items() if not issubclass(cls, lash_restate.LashError)}
    # A tool raises ToolFailure to lash (its child then settles Err); lash never raises it.
    assert outside == {"ToolFailure"}
    assert exceptions["ToolFailure"] is ToolFailure


def test_the_errors_keep_what_they_were_besides() -> None:
    from lash_restate.engine import DeploymentError, ServerUnavailable
    from lash_restate.settings import SettingsError

    assert issubclass(lash_restate.AggregateRejection, ExceptionGroup)
    assert issubclass(DeploymentError, RuntimeError) and issubclass(ServerUnavailable, RuntimeError)
    assert issubclass(SettingsError, ValueError) and issubclass(lash_restate.InvalidInput, ValueError)
    # A line for a person, as before: an error outside the contract has no code in its str.
    assert str(ServerUnavailable("granian is not installed")) == "granian is not installed"
    assert ServerUnavailable("x").code == "server_unavailable"


def test_the_errors_outside_the_contract_survive_a_pickle() -> None:
    from lash_restate.combinators import ChildRejected, Rejected
    from lash_restate.contract import Err, Settlement
    from lash_restate.engine import DeploymentError
    from lash_restate.registration import Application, PrefixTaken

    settlement = Settlement(rank=1, position=1, replay_key="k/c1", outcome=Err(message="no", code="409"))
    mine = Application("", "", "Lash", "shop", frozenset({"Shop"}))
    theirs = Application("dp_1", "http://other:9080", "Lash", "books", frozenset({"Books"}))
    for error in (
        Rejected(settlement, group_key="s:group:b:0"),
        ChildRejected(2, Err(message="no")),
        DeploymentError("bind LashGroup"),
        PrefixTaken("http://me:9080", mine, theirs),
    ):
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is type(error) and str(again) == str(error) and again.code == error.code
        assert (again.group_key, again.position, again.replay_key) == (
            error.group_key,
            error.position,
            error.replay_key,
        )


def test_every_error_class_has_its_own_code_and_docstring() -> None:
    errors = _tree()[1:]
    codes = [cls.code for cls in errors]
    assert len(codes) == len(set(codes))
    assert set(codes) == set(RuntimeErrorCode)
    assert all(cls.__doc__ for cls in errors)
    # Only the contract's errors cross lash's wire: a line with any other code reads as no error.
    assert {str(cls.code) for cls in _all_errors()} < {c.value for c in RuntimeErrorCode}
    assert error_from_wire('lash-error:{"code":"rejected","message":"m"}') is None


def _drawn(text: str) -> list[tuple[int, str]]:
    """The tree drawn under a ``LashError`` line in ``text``: (depth, class name) per line."""
    lines = text[text.index("    LashError\n") :].splitlines()
    drawn = [(0, "LashError")]
    for line in lines[1:]:
        found = re.match(r"^ {4}((?:│   |    )*)[├└]── (\w+)", line)
        if found is None:
            break
        drawn.append((len(found.group(1)) // 4 + 1, found.group(2)))
    return drawn


def _actual(root: type[LashError], depth: int, tree: set[type[LashError]]) -> set[tuple[int, str, str]]:
    found = set()
    for sub in root.__subclasses__():
        if sub in tree:
            found |= {(depth + 1, sub.__name__, root.__name__)} | _actual(sub, depth + 1, tree)
    return found


@pytest.mark.parametrize("where", ["errors module", "reference"])
def test_the_drawn_tree_is_the_code(where: str) -> None:
    from lash_restate.contract import _errors

    text = _errors.__doc__ if where == "errors module" else REFERENCE.read_text()
    assert text is not None
    drawn = _drawn(text)
    parents: list[str] = []
    edges = set()
    for depth, name in drawn[1:]:
        del parents[depth - 1 :]
        edges.add((depth, name, parents[-1] if parents else "LashError"))
        parents.append(name)
    assert len(drawn) == len(_tree())  # each class once
    assert edges == _actual(LashError, 0, set(_tree()))


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
        "rejected",
        "aggregate_rejection",
        "child_rejected",
        "deployment",
        "server_unavailable",
        "settings",
        "prefix_chosen",
        "registration",
        "prefix_taken",
        "registration_refused",
        "admin",
        "admin_refused",
        "inspection",
        "close_refused",
        "stack",
        "call_failed",
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


def test_the_wire_index_is_the_whole_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    """The code -> class index `error_from_wire` reads is built once, at import, by walking the tree
    from `LashError`; that walk is run again here on an empty index, since mutating it otherwise
    changes nothing a test can run after the import."""
    monkeypatch.setattr(_errors, "_BY_CODE", {})
    _errors._index(LashError)
    index = _errors._BY_CODE
    tree, stack = [LashError], list(LashError.__subclasses__())
    while stack:
        tree.append(stack.pop())
        stack.extend(tree[-1].__subclasses__())
    assert set(index) == {str(cls.code) for cls in tree}
    # Each contract class reads back as itself, or as a subclass keeping its code (the Restate host's
    # `CalledInsideRun` keeps `InvalidInput`'s), walked after it.
    for cls in _all_errors():
        assert issubclass(index[str(cls.code)], cls), cls


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
    """An application catches what it is raised: every error of the contract, the rejections, and what
    the endpoint's functions raise are at the top level, as what they are in their own module."""
    from lash_restate import combinators, engine

    errors = [n for n in contract.__all__ if isinstance(getattr(contract, n), type)]
    errors = [n for n in errors if issubclass(getattr(contract, n), contract.LashError)]
    for name in errors:
        assert getattr(lash_restate, name) is getattr(contract, name)
    for module, names in (
        (combinators, ["Rejected", "AggregateRejection", "ChildRejected"]),
        (engine, ["DeploymentError", "ServerUnavailable"]),
    ):
        for name in names:
            assert getattr(lash_restate, name) is getattr(module, name)


def test_a_failure_that_carries_a_wire_line_is_shown_as_the_error() -> None:
    error = ChildUnroutable("no executor is registered for tool 'nope'", group_key="s:group:b:0", position=1)
    shown = without_wire(f"[404] {error.to_wire()}")
    assert shown == f"[404] {error}" and "lash-error" not in shown
    assert without_wire("[500] plain") == "[500] plain"
    assert without_wire('lash-error:{"code":"nope"} tail') == 'lash-error:{"code":"nope"} tail'
    assert without_wire("lash-error:{broken") == "lash-error:{broken"
    # The wire line alone (an edge that shows the bare failure message) reads as the error too.
    assert without_wire(error.to_wire()) == str(error)
    # Two of them (an error around another's text): the first, the outermost, is the one shown.
    inner = ChildUnroutable("inner", position=2)
    twice = f"[500] {error.to_wire()} after {inner.to_wire()}"
    assert without_wire(twice) == f"[500] {error} after {inner.to_wire()}"
