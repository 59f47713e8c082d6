"""The Restate tier: group virtual object, child invocations, durable waits, controller and endpoint."""

from ._controller import RestateController
from ._endpoint import (
    BATCH_FROM,
    SERVERS,
    DeploymentError,
    ServerUnavailable,
    build_app,
    call_targets,
    lash_services,
    serve,
    validate_deployment,
)
from ._messages import OperatorClose, OperatorClosed
from ._mode import OutcomeStore, outcome_store
from ._records import OPENER_ENDS, GroupMeta, OpenerEnd, SettlementMode
from ._routes import (
    CHILD,
    DEFAULT_PREFIX,
    GROUP,
    GROUP_OPERATOR_CLOSE,
    PUMP,
    SIGNAL,
    check_prefix,
    named,
    use_prefix,
)

__all__ = [
    "BATCH_FROM",
    "CHILD",
    "DEFAULT_PREFIX",
    "GROUP",
    "GROUP_OPERATOR_CLOSE",
    "OPENER_ENDS",
    "PUMP",
    "SERVERS",
    "SIGNAL",
    "DeploymentError",
    "GroupMeta",
    "OpenerEnd",
    "OperatorClose",
    "OperatorClosed",
    "OutcomeStore",
    "RestateController",
    "ServerUnavailable",
    "SettlementMode",
    "build_app",
    "call_targets",
    "check_prefix",
    "lash_services",
    "named",
    "outcome_store",
    "serve",
    "use_prefix",
    "validate_deployment",
]
