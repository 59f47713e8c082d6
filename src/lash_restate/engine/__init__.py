"""The Restate host: group virtual object, child invocations, durable waits, controller and endpoint."""

from .caller._controller import RestateController, inside_run
from .child._calls import callee_replay_key
from .child._lookup import configure_admin
from .group._mode import OutcomeStore, outcome_store
from .group._pages import assemble_order
from .pump._pump_run import STAGED
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
    validate_deployment,
)
from .serving._server import FULL_GC_EVERY, SERVERS, ServerUnavailable, collect_rarely, serve
from .wire._errors import terminal_status
from .wire._formats import BASELINE, FORMAT, FORMATS, Format
from .wire._incarnation import window_of
from .wire._messages import OperatorClose, OperatorClosed, OperatorRedispatch, OperatorRedispatched
from .wire._records import MISSED, OPENER_ENDS, RECLAIM_AT, GroupMeta, OpenerEnd, SettlementMode
from .wire._routes import (
    CHILD,
    DEFAULT_PREFIX,
    GROUP,
    GROUP_OPERATOR_CLOSE,
    GROUP_OPERATOR_REDISPATCH,
    PUMP,
    SIGNAL,
    PrefixChosen,
    Route,
    check_prefix,
    group_of_pump,
    groups_wired,
    named,
    use_groups_served_elsewhere,
    use_prefix,
)

__all__ = [
    "APP_METADATA",
    "BASELINE",
    "BATCH_FROM",
    "CHILD",
    "DEFAULT_PREFIX",
    "FORMAT",
    "FORMATS",
    "FULL_GC_EVERY",
    "GROUP",
    "GROUP_OPERATOR_CLOSE",
    "GROUP_OPERATOR_REDISPATCH",
    "MISSED",
    "OPENER_ENDS",
    "PUMP",
    "RECLAIM_AT",
    "SERVERS",
    "SIGNAL",
    "STAGED",
    "DeploymentError",
    "Format",
    "GroupMeta",
    "OpenerEnd",
    "OperatorClose",
    "OperatorClosed",
    "OperatorRedispatch",
    "OperatorRedispatched",
    "OutcomeStore",
    "PrefixChosen",
    "RestateController",
    "Route",
    "ServedApplication",
    "ServerUnavailable",
    "SettlementMode",
    "assemble_order",
    "build_app",
    "call_targets",
    "callee_replay_key",
    "check_app_name",
    "check_prefix",
    "collect_rarely",
    "configure_admin",
    "group_of_pump",
    "groups_wired",
    "inside_run",
    "lash_services",
    "named",
    "outcome_store",
    "serve",
    "served_application",
    "terminal_status",
    "use_groups_served_elsewhere",
    "use_prefix",
    "validate_deployment",
    "window_of",
]
