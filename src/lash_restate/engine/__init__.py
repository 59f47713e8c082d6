"""The Restate host: group virtual object, child invocations, pumps, durable waits, controller and
endpoint.

A settlement's path, hop by hop (each hop a Restate invocation; ``Lash`` is the default prefix):

- The caller (`caller/_controller.py`, `RestateController._open`) sends `LashGroup/open` and awaits
  its answer on an awakeable; the open (`group/_group_open.py`, `on_open` → `record_group`) records
  the group and dispatches its children through its mode's ``dispatch``.
- Direct (`group/_mode_direct.py`: a narrow group of tools, timers and events): one `LashChild/run`
  per child (`child/_child.py`, `on_run`) stores its outcome and sends `LashGroup/settle`
  (`group/_group_rank.py`, `on_settle`).
- Pumped (`group/_mode_pumped.py`: a call child, a bound, or `batch_from` children or more): one
  `LashPump/run2` per slice of 256 (`pump/_pump_run.py`, `on_run2`; the open starts the first,
  which calls at most 4 further pumps, each the root of a subtree of slices that it starts the same
  way; a bounded group's one pump runs them all) calls each child as the open
  planned (`pump/_pump_calls.py`: the callee itself for a call, `LashChild/execute2` for the
  others), stores what settles and calls `LashGroup/report` (`_group_rank.py`, `on_report`).
- Both rank through `rank_refs`, whatever the group's rank layout (`group/_ranks.py`, `ranks_for`:
  in the group's record, or in pages for a wide group), which resolves the waiting caller's wake
  with a `WaitReply`. The caller's `_next` serves a plain await by `_ask_group` → `LashGroup/wait`
  (`on_wait`) → `_serve_or_read_ahead` (what an earlier await read ahead, or one read of the window's
  outcomes one store keeps) or, the rank not held yet, its wake → `_woken` → `_read` (the outcome
  inline, else from the mode's stores); a combinator's run waits on its wakes, asking only then.
  `LashGroup/close` (`group/_group_close.py`) ends the group.
- Opened in parts (a group too large for one open message): the caller stages each 256 children
  with their slice's pump (`caller/_open_parts.py`, `open_in_parts` → `LashPump/stage`,
  `pump/_pump_run.py` `on_stage`), then sends `LashGroup/open_parts` (`on_open_parts`), which
  records the group and sends the first slice's pump `LashPump/run_parts` (`on_run_parts`),
  which runs its staged children and calls the further slices' `run_parts` as `run2` does: the
  pumped path from there.
- A reopen (a resume, `RestateController.reopen_effect_group`) sends the same open with
  ``reopen_only``; `record_group` fences it against the recorded shape and records nothing, and
  `group/_group_dispatch.py` (`redispatch_on_reopen` → `dispatch_again` → the mode's ``redispatch``) runs
  again only the children whose runner was missing (of a group the baseline opened, every unsettled
  child the reopen carries): a `LashChild/run` each (direct), or a
  `LashPump/redispatch` per slice (pumped, `on_redispatch`), which report as a first run does.
- Beside the path: `group/_group_watch.py` watches what was dispatched and who opened it,
  `group/_group_guard.py` a waiting caller's wakes, `group/_group_dispatch.py` what missed its
  runner. Every handler's binding is in `group/_group.py`, `child/_child.py`, `pump/_pump.py` and
  `child/_signal.py`; every message and state record's type is in `wire/` but the paged layout's
(`group/_pages.py`), and each state key is named beside the code that owns it, every one of them
with its row in `wire/_formats.py`.

So a race over `lash.call` children is pumped, however narrow: its ranks come from `on_report`,
never `on_settle`.

The numbers that decide a group's layout and its reads:

- `BATCH_FROM` (3, `serving/_endpoint.py`): a group this wide or wider is pumped.
- `PUMP_SLICE` (256) and `PUMP_FANOUT` (4, `group/_mode_stores.py`): children per pump, and further
  pumps each pump calls (a tree).
- `PAGE_FROM` (257) and `RANK_PAGE` (1024, `group/_pages.py`): a pumped group this wide keeps its
  ranks in pages of this many.
- `WAKE_WINDOW` (32, `caller/_controller.py`): ranks a caller registers wakes for ahead (one, when
  the group's last answer served it ranks: decision 132), and a plain await asks for to read ahead;
  `READ_AHEAD_BYTES` (256 KiB): the most it reads ahead at once (decision 134).
- `WAIT_REFS` (1024, `group/_group_rank.py`): ranks one `wait` answers at most.
- `INLINE_OUTCOME_BYTES` (16 KiB, `wire/_messages.py`): an outcome this small rides the rank's
  reply; a larger one is read from its store.
- `OUTCOMES_PER_READ` (256, `pump/_pump_store.py`) and `OUTCOMES_PER_CALLER_READ` (1024,
  `group/_mode_stores.py`): outcomes one read of a pump's store loads, and one caller's read asks.
- An open too large for one message opens in parts (`caller/_open_parts.py`, decision 65).

Decisions are cited by number: decision N is `## N.` in docs/decisions.md. The ones that shaped
this package most, in reading order: 20 (pumps), 32 (an await answered by the group as it stands),
61 (one pump per group with a call child), 65 (wide groups), 66 (the open plans the pump's calls),
74 (what a group dispatched is watched).
"""

from .caller._controller import RestateController, inside_run
from .child._calls import callee_replay_key
from .child._lookup import configure_admin
from .child._signal import clear_event, emit_event, reject_event
from .group._group_guard import WAITER_CHECK
from .group._mode import OutcomeStore, outcome_store
from .group._ranks import assemble_order, ranks_recorded
from .pump._pump_run import RAN, STAGED
from .serving._endpoint import (
    APP_METADATA,
    BATCH_FROM,
    DeploymentError,
    ServedApplication,
    build_app,
    call_targets,
    check_app_name,
    lash_services,
    served_application,
    use_identity_keys,
    validate_deployment,
)
from .serving._server import FULL_GC_EVERY, SERVERS, ServerUnavailable, collect_rarely, serve
from .wire._errors import ends_the_invocation, terminal_status
from .wire._formats import BASELINE, BASELINE_HANDLERS, FORMAT, FORMATS, Format
from .wire._incarnation import bound_of, layout_of, opened_since_baseline
from .wire._messages import (
    CANCEL_SIGNAL,
    Guard,
    OpenReply,
    OperatorClose,
    OperatorClosed,
    OperatorRedispatch,
    OperatorRedispatched,
    OperatorResend,
    OperatorResent,
    WaitReply,
    awakeable_invocation,
    awakeable_signal,
    is_invocation_id,
)
from .wire._records import (
    EVENT_WAITER,
    EVENT_WAITERS,
    FENCE,
    MISSED,
    OPENER_ENDS,
    RECLAIM_AT,
    RECORD,
    SAVERS,
    GroupMeta,
    Opener,
    OpenerEnd,
    SettlementMode,
    child_store,
)
from .wire._routes import (
    CHILD,
    DEFAULT_PREFIX,
    GROUP,
    GROUP_CLOSE,
    GROUP_GUARD,
    GROUP_OPEN,
    GROUP_OPEN_PARTS,
    GROUP_OPERATOR_CLOSE,
    GROUP_OPERATOR_REDISPATCH,
    GROUP_OPERATOR_RESEND,
    GROUP_SHARED,
    GROUP_WAIT,
    PUMP,
    ROLES,
    SIGNAL,
    SIGNAL_OPERATOR_RESEND,
    SIGNAL_SUBSCRIBE,
    SIGNAL_UNSUBSCRIBE,
    PrefixChosen,
    Route,
    check_prefix,
    group_of_pump,
    groups_wired,
    incarnation_of_pump,
    named,
    use_groups_served_elsewhere,
    use_prefix,
)

__all__ = [
    "APP_METADATA",
    "BASELINE",
    "BASELINE_HANDLERS",
    "BATCH_FROM",
    "CANCEL_SIGNAL",
    "CHILD",
    "DEFAULT_PREFIX",
    "EVENT_WAITER",
    "EVENT_WAITERS",
    "FENCE",
    "FORMAT",
    "FORMATS",
    "FULL_GC_EVERY",
    "GROUP",
    "GROUP_CLOSE",
    "GROUP_GUARD",
    "GROUP_OPEN",
    "GROUP_OPEN_PARTS",
    "GROUP_OPERATOR_CLOSE",
    "GROUP_OPERATOR_REDISPATCH",
    "GROUP_OPERATOR_RESEND",
    "GROUP_SHARED",
    "GROUP_WAIT",
    "MISSED",
    "OPENER_ENDS",
    "PUMP",
    "RAN",
    "RECLAIM_AT",
    "RECORD",
    "ROLES",
    "SAVERS",
    "SERVERS",
    "SIGNAL",
    "SIGNAL_OPERATOR_RESEND",
    "SIGNAL_SUBSCRIBE",
    "SIGNAL_UNSUBSCRIBE",
    "STAGED",
    "WAITER_CHECK",
    "DeploymentError",
    "Format",
    "GroupMeta",
    "Guard",
    "OpenReply",
    "Opener",
    "OpenerEnd",
    "OperatorClose",
    "OperatorClosed",
    "OperatorRedispatch",
    "OperatorRedispatched",
    "OperatorResend",
    "OperatorResent",
    "OutcomeStore",
    "PrefixChosen",
    "RestateController",
    "Route",
    "ServedApplication",
    "ServerUnavailable",
    "SettlementMode",
    "WaitReply",
    "assemble_order",
    "awakeable_invocation",
    "awakeable_signal",
    "bound_of",
    "build_app",
    "call_targets",
    "callee_replay_key",
    "check_app_name",
    "check_prefix",
    "child_store",
    "clear_event",
    "collect_rarely",
    "configure_admin",
    "emit_event",
    "ends_the_invocation",
    "group_of_pump",
    "groups_wired",
    "incarnation_of_pump",
    "inside_run",
    "is_invocation_id",
    "lash_services",
    "layout_of",
    "named",
    "opened_since_baseline",
    "outcome_store",
    "ranks_recorded",
    "reject_event",
    "serve",
    "served_application",
    "terminal_status",
    "use_groups_served_elsewhere",
    "use_identity_keys",
    "use_prefix",
    "validate_deployment",
]
