"""lash-restate: durable effect groups (all / allSettled / race / any that survive crashes) on Restate.

``import lash_restate as lash`` is the front door for an application: the combinators
(`all`, `all_settled`, `race`, `any`), a group by hand (`open`, `Group`), the children (`call`,
`tool`, `sleep`, `event`), the endpoint (`services`, `app`, `serve`, `external`), and the types
its answers and errors come in. A host implementer's helpers live in `lash_restate.contract`.

`all`, `any` and `open` are attributes (``lash.all``), not in ``__all__``: a star import must not
shadow the builtins.
"""

# The front door, and why all/any/open stay out of __all__: decision 39.

from ._front import (
    Child,
    Group,
    all_settled,
    app,
    call,
    controller,
    event,
    external,
    race,
    serve,
    services,
    sleep,
    tool,
    use_prefix,
)

# Attributes, not star-imported (they would shadow the builtins); `x as x` exports them to type checkers.
from ._front import all as all
from ._front import any as any
from ._front import open as open
from .calls import Target
from .combinators import AggregateRejection, ChildRejected, Rejected
from .contract import (
    AwaitCancelled,
    AwaitEvent,
    Call,
    Cancelled,
    ChildUnroutable,
    CursorError,
    CursorOverrun,
    DispositionDrift,
    DispositionWidening,
    DuplicateReplayKey,
    EffectGroupUnsupported,
    EmptyGroup,
    Err,
    ForeignGroupKey,
    GroupHandle,
    GroupKey,
    GroupNotOpen,
    GroupShapeError,
    GroupWakePolicy,
    HandleMismatch,
    InvalidEnvelope,
    InvalidGroupKey,
    InvalidHandle,
    InvalidInput,
    InvalidSettlement,
    LashError,
    LoserPolicy,
    MembershipUnsupported,
    Ok,
    Outcome,
    PayloadTooLarge,
    PermutedPosition,
    ReplayMismatch,
    RuntimeEffectEnvelope,
    RuntimeErrorCode,
    Settlement,
    ShapeMismatch,
    Sleep,
    ToolCall,
    ToolFailure,
    WakeRuleDrift,
)
from .engine import RestateController
from .tools import ToolRegistry

CANCEL = LoserPolicy.CANCEL
"""Losers are cancelled once the combinator decides (ADR, "Loser disposition is declared at open")."""
RUN_TO_COMPLETION = LoserPolicy.RUN_TO_COMPLETION
"""Losers run on to completion (ECMA-262's behaviour, and the default)."""

__all__ = [
    "CANCEL",
    "RUN_TO_COMPLETION",
    "AggregateRejection",
    "AwaitCancelled",
    "AwaitEvent",
    "Call",
    "Cancelled",
    "Child",
    "ChildRejected",
    "ChildUnroutable",
    "CursorError",
    "CursorOverrun",
    "DispositionDrift",
    "DispositionWidening",
    "DuplicateReplayKey",
    "EffectGroupUnsupported",
    "EmptyGroup",
    "Err",
    "ForeignGroupKey",
    "Group",
    "GroupHandle",
    "GroupKey",
    "GroupNotOpen",
    "GroupShapeError",
    "GroupWakePolicy",
    "HandleMismatch",
    "InvalidEnvelope",
    "InvalidGroupKey",
    "InvalidHandle",
    "InvalidInput",
    "InvalidSettlement",
    "LashError",
    "LoserPolicy",
    "MembershipUnsupported",
    "Ok",
    "Outcome",
    "PayloadTooLarge",
    "PermutedPosition",
    "Rejected",
    "ReplayMismatch",
    "RestateController",
    "RuntimeEffectEnvelope",
    "RuntimeErrorCode",
    "Settlement",
    "ShapeMismatch",
    "Sleep",
    "Target",
    "ToolCall",
    "ToolFailure",
    "ToolRegistry",
    "WakeRuleDrift",
    "all_settled",
    "app",
    "call",
    "controller",
    "event",
    "external",
    "race",
    "serve",
    "services",
    "sleep",
    "tool",
    "use_prefix",
]
