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
from ._formats import BASELINE, FORMAT, FORMATS, Format
from ._mode import OutcomeStore, outcome_store
from ._records import GroupMeta, SettlementMode
from ._routes import CHILD, DEFAULT_PREFIX, GROUP, PUMP, SIGNAL, check_prefix, named, use_prefix

__all__ = [
    "BASELINE",
    "BATCH_FROM",
    "CHILD",
    "DEFAULT_PREFIX",
    "FORMAT",
    "FORMATS",
    "GROUP",
    "PUMP",
    "SERVERS",
    "SIGNAL",
    "DeploymentError",
    "Format",
    "GroupMeta",
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
