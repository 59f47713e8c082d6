"""The Restate tier: group virtual object, child invocations, durable waits, controller and endpoint."""

from ._controller import RestateController
from ._endpoint import DeploymentError, build_app, lash_services, serve, validate_deployment
from ._wire import BATCH_FROM, CHILD, GROUP, PUMP, SIGNAL

__all__ = [
    "BATCH_FROM",
    "CHILD",
    "GROUP",
    "PUMP",
    "SIGNAL",
    "DeploymentError",
    "RestateController",
    "build_app",
    "lash_services",
    "serve",
    "validate_deployment",
]
