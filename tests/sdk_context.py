"""A handler context of restate-sdk's own whose VM answers only whether it replays: enough for what
lash decides from a replay (`replaying`), with no server."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from restate.server_context import ServerInvocationContext


def replaying_context(answer: bool) -> ServerInvocationContext:
    """The SDK's context, its VM replaying (``answer``) or live."""
    vm = SimpleNamespace(is_replaying=lambda: answer)
    return ServerInvocationContext(
        vm=cast(Any, vm),
        handler=cast(Any, None),
        invocation=cast(Any, SimpleNamespace(random_seed=0)),
        attempt_headers={},
        send=cast(Any, None),
        receive=cast(Any, None),
    )
