"""The in-memory reference host: the behavioural definition of the contract."""

from ._host import DrainReport, MemoryHost, MemoryStore, NoExecutor

__all__ = ["DrainReport", "MemoryHost", "MemoryStore", "NoExecutor"]
