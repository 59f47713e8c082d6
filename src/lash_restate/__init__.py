"""lash-restate: durable effect groups (all / allSettled / race / any that survive crashes) on Restate.

``import lash_restate as lash`` is the front door for an application: the combinators
(`all`, `all_settled`, `race`, `any`, `select`), a group by hand (`open`, `Group`), the children
(`call`, `tool`, `sleep`, `event`; `TypedCall`, a call by handler reference), an event's signals
from a handler (`emit`, `reject_event`, `clear_event`), the endpoint
(`services`, `app`, `serve`, `external`), and the types
its answers and errors come in. A host implementer's helpers live in `lash_restate.contract`.

`all`, `any` and `open` are attributes (``lash.all``), not in ``__all__``: a star import must not
shadow the builtins.
"""

import dataclasses
import inspect

import msgspec

# The front door, and why all/any/open stay out of __all__: decision 39.
from ._front import (
    Child,
    Group,
    Opening,
    TypedCall,
    all_settled,
    app,
    call,
    clear_event,
    controller,
    emit,
    event,
    external,
    race,
    reject_event,
    select,
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
    UndecodableResult,
    WakeRuleDrift,
)
from .engine import DeploymentError, PrefixChosen, RestateController, ServerUnavailable
from .tools import ToolRegistry

CANCEL = LoserPolicy.CANCEL
"""Losers are cancelled once the combinator decides (declared when the group opens)."""
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
    "DeploymentError",
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
    "Opening",
    "Outcome",
    "PayloadTooLarge",
    "PermutedPosition",
    "PrefixChosen",
    "Rejected",
    "ReplayMismatch",
    "RestateController",
    "RuntimeEffectEnvelope",
    "RuntimeErrorCode",
    "ServerUnavailable",
    "Settlement",
    "ShapeMismatch",
    "Sleep",
    "Target",
    "ToolCall",
    "ToolFailure",
    "ToolRegistry",
    "TypedCall",
    "UndecodableResult",
    "WakeRuleDrift",
    "all_settled",
    "app",
    "call",
    "clear_event",
    "controller",
    "emit",
    "event",
    "external",
    "race",
    "reject_event",
    "select",
    "serve",
    "services",
    "sleep",
    "tool",
    "use_prefix",
]


def _at_the_front_door() -> None:
    """Public names report ``lash_restate`` as their module (as httpx's do), so tracebacks, reprs and
    the reference name what an application imports, not the private module that defines them.

    Records (msgspec structs, dataclasses) keep theirs: msgspec, pydantic and ``get_type_hints``
    resolve a record's field annotations in the module it names (decision 59).
    """
    for name in (*__all__, "all", "any", "open"):
        value = globals()[name]
        record = isinstance(value, type) and (
            issubclass(value, msgspec.Struct) or dataclasses.is_dataclass(value)
        )
        if (isinstance(value, type) and not record) or inspect.isfunction(value):
            value.__module__ = __name__


_at_the_front_door()
