"""The Restate tier: group virtual object, child invocations, durable waits, controller and endpoint."""

from ._controller import RestateController
from ._endpoint import (
    BATCH_FROM,
    SERVERS,
    DeploymentError,
    ServerUnavailable,
    build_app,
    lash_services,
    serve,
    validate_deployment,
)
from ._mode import OutcomeStore, outcome_store
from ._records import GroupMeta, SettlementMode
from ._routes import CHILD, GROUP, PUMP, SIGNAL

__all__ = [
    "BATCH_FROM",
    "CHILD",
    "GROUP",
    "PUMP",
    "SERVERS",
    "SIGNAL",
    "DeploymentError",
    "GroupMeta",
    "OutcomeStore",
    "RestateController",
    "ServerUnavailable",
    "SettlementMode",
    "build_app",
    "lash_services",
    "outcome_store",
    "serve",
    "validate_deployment",
]
