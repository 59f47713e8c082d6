"""What the tests, the dev stack and the demo use, and a production endpoint never loads.

- `stack` — `LocalStack`, the one harness that builds every local Restate stack, out of the
  restate-server and endpoint processes in `processes`.
- `turn` — a caller's turn as data (open / next / close / save / use / combine / select /
  front / execute), run by any host; ``front`` runs the front door's entry points.
- `driver` — `LashTurn`, the service that runs such a turn inside a real Restate handler.
- `tools` — the demo tools (`echo`, `fail`, `blob`, `count`, `flaky`).
- `targets` — the demo call targets (`DemoCalls`, `DemoCounter`, and the typed `DemoTyped` and
  `DemoLedger`), as services and in process.
- `dev` — the body of ``lash-restate dev``.
- `conformance` — the conformance suite for every host: the `Tier` protocol, the scenarios
  (`SCENARIOS`, written with the typed `Turn`), this repository's tiers, and `pytest_tests`.
- `pytest` — the pytest plugin (``-p lash_restate.testing.pytest``): an application's own tests
  against a real restate-server, built on `LocalStack`. Nothing here imports it.

Nothing below this package in the layers (`inspection`, `engine`, `memory`, `combinators`,
`tools`, `contract`) imports it; ``make lint`` checks that with import-linter.
"""

from .driver import TURN, turn_service
from .processes import CallFailed, Endpoint, RestateServer, StackError, free_port
from .stack import LocalStack
from .targets import demo_call_services, demo_calls, demo_external
from .tools import demo_tools
from .turn import decode_turn, run_turn

__all__ = [
    "TURN",
    "CallFailed",
    "Endpoint",
    "LocalStack",
    "RestateServer",
    "StackError",
    "decode_turn",
    "demo_call_services",
    "demo_calls",
    "demo_external",
    "demo_tools",
    "free_port",
    "run_turn",
    "turn_service",
]
