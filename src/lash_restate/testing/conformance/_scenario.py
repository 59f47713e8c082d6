"""Scenarios: the suite's host-neutral test bodies, and how pytest runs them on a host's tier."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ._tier import ChildKind, Tier

__all__ = ["Scenario", "pytest_tests", "scenario"]

Body = Callable[..., Awaitable[None]]


@dataclass(frozen=True)
class Scenario:
    """One behaviour of the contract, run on a tier: ``await scenario.run(tier, children)``.

    ``name`` is the behaviour in words (``open_returns_once_recorded_with_cursor_at_zero``);
    ``topic`` is the part of the contract it belongs to (``groups``, ``combinators``, ``calls``,
    ``dispositions``, ``protocols``, ``select``, ``typed_calls``); ``variant`` tells apart the runs
    of a scenario run with several arguments (``two``, ``three``).
    """

    name: str
    topic: str
    body: Body = field(repr=False, compare=False)
    variant: str | None = None
    args: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}), compare=False)

    @property
    def id(self) -> str:
        """``name``, or ``name[variant]``: unique in `SCENARIOS`, the natural pytest id."""
        return self.name if self.variant is None else f"{self.name}[{self.variant}]"

    def __str__(self) -> str:
        return self.id

    async def run(self, tier: Tier, children: ChildKind = "tools") -> None:
        """Run the scenario on ``tier``, its `echo` children written as ``children``; an
        `AssertionError` says where the tier departs from the contract."""
        await self.body(tier, children, **self.args)


_REGISTERED: list[Scenario] = []


def scenario(
    topic: str, *, variants: Mapping[str, Mapping[str, Any]] | None = None
) -> Callable[[Body], Body]:
    """Register ``async def name(tier, children, **args)`` as a scenario of ``topic`` (one per variant)."""

    def register(body: Body) -> Body:
        for variant, args in (variants or {None: {}}).items():  # type: ignore[dict-item]
            _REGISTERED.append(Scenario(body.__name__, topic, body, variant, MappingProxyType(dict(args))))
        return body

    return register


def pytest_tests(scenarios: Iterable[Scenario]) -> dict[str, Callable[..., None]]:
    """One pytest test function per scenario name, ``test_{name}``, for a test module's namespace::

        globals().update(pytest_tests(SCENARIOS))

    Each test asks for the fixtures ``tier`` (a `Tier`) and ``children`` (a `ChildKind`; parametrize
    it over `CHILD_KINDS`), and a scenario with variants is parametrized over them by id. The test
    is a plain ``def`` that runs the scenario on an event loop of its own (``asyncio.run``), so no
    async plugin is needed; the tier must not hold a loop from before (create it in the fixture,
    open its connections in its methods).
    """
    import pytest  # the rest of the package does not need pytest

    by_name: dict[str, list[Scenario]] = {}
    for each in scenarios:
        by_name.setdefault(each.name, []).append(each)
    tests: dict[str, Callable[..., None]] = {}
    for name, runs in by_name.items():
        test = _single(runs[0]) if runs[0].variant is None else _varied(runs, pytest.mark.parametrize)
        test.__name__ = test.__qualname__ = f"test_{name}"
        test.__doc__ = runs[0].body.__doc__
        tests[test.__name__] = test
    return tests


def _single(one: Scenario) -> Callable[..., None]:
    def test(tier: Tier, children: ChildKind) -> None:
        asyncio.run(one.run(tier, children))

    return test


def _varied(runs: list[Scenario], parametrize: Any) -> Callable[..., None]:
    by_variant = {run.variant: run for run in runs}

    def test(tier: Tier, children: ChildKind, variant: str) -> None:
        asyncio.run(by_variant[variant].run(tier, children))

    marked: Callable[..., None] = parametrize("variant", list(by_variant), ids=list(by_variant))(test)
    return marked
