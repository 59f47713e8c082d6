"""The in-memory reference host: the behavioural definition of the contract, and the in-process
handlers its `Call` children reach."""

from ._calls import CallRegistry, Handler, TypedHandler, first_of
from ._host import KILLED, DrainReport, MemoryHost, MemoryStore, NoExecutor

__all__ = [
    "KILLED",
    "CallRegistry",
    "DrainReport",
    "Handler",
    "MemoryHost",
    "MemoryStore",
    "NoExecutor",
    "TypedHandler",
    "first_of",
]
