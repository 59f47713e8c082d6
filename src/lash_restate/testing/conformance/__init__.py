"""The conformance suite, shipped for every host: the `Tier` protocol and the scenarios.

A host of the contract (this repository's reference and Restate hosts, or one written elsewhere:
a SQL host, say) proves itself by running every scenario in `SCENARIOS` on a `Tier` of its own,
the way `trio.testing.check_two_way_stream` checks any stream. From pytest::

    from lash_restate.testing.conformance import SCENARIOS, pytest_tests

    globals().update(pytest_tests(SCENARIOS))  # test_<scenario>, asking for `tier` and `children`

or parametrize a test of your own over `SCENARIOS` and ``await scenario.run(tier, children)``.
The scenarios are written with `Turn`, a caller's turn in the words of its handler (open, next,
save, resume, close), compiled to the steps `Tier.turn` runs. `MemoryTier` and `RestateTier` are
this repository's tiers; the guide "Run the conformance suite on your host" says how to write one.
"""

from . import (  # noqa: F401
    _bounded,
    _calls,
    _closing,
    _combinators,
    _dispositions,
    _groups,
    _losers,
    _protocols,
    _select,
    _typed_calls,
)
from ._answers import Answer, Combined, ErrorBody, Iterated, Selected
from ._scenario import _REGISTERED as _ALL
from ._scenario import Scenario, pytest_tests
from ._steps import Scope
from ._tier import CHILD_KINDS, ChildKind, Tier
from ._tiers import MemoryTier, RestateTier
from ._turn import Block, Group, Turn

SCENARIOS: tuple[Scenario, ...] = tuple(_ALL)
"""Every scenario of the suite, each variant its own entry, in the order they are written."""

__all__ = [
    "CHILD_KINDS",
    "SCENARIOS",
    "Answer",
    "Block",
    "ChildKind",
    "Combined",
    "ErrorBody",
    "Group",
    "Iterated",
    "MemoryTier",
    "RestateTier",
    "Scenario",
    "Scope",
    "Selected",
    "Tier",
    "Turn",
    "pytest_tests",
]
