"""lash-restate: durable effect groups (all / allSettled / race / any that survive crashes) on Restate."""

from .contract import *  # noqa: F403
from .contract import __all__ as _contract_all

__all__ = [*_contract_all]
