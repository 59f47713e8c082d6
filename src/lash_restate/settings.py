"""One validated settings model for `lash-restate serve`: environment first, flags override."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .contract import LashError, RuntimeErrorCode

__all__ = ["ServeSettings", "SettingsError"]

_ENV: dict[str, str | tuple[str, ...]] = {
    "host": "LASH_HOST",
    "port": "LASH_PORT",
    "resolver": "LASH_RESOLVER",
    "app": "LASH_APP",
    "with_turn": "LASH_WITH_TURN",
    "identity_keys": "LASH_IDENTITY_KEYS",
    "batch_from": "LASH_BATCH_FROM",
    "verbose": "LASH_VERBOSE",
    "prefix": "LASH_PREFIX",
    "server": "LASH_SERVER",
    "admin_url": ("RESTATE_ADMIN_URL", "LASH_ADMIN_URL"),  # the first set, as Restate's own CLI reads it
    "app_name": "LASH_APP_NAME",
    "take_over": "LASH_TAKE_OVER",
}


class SettingsError(LashError, ValueError):
    """Settings failed validation; the message names each bad setting and where it came from."""

    code = RuntimeErrorCode.SETTINGS

    def __str__(self) -> str:
        return self.message


class ServeSettings(BaseModel):
    """How the endpoint is served. Pydantic gives one typed, validated model for env and flags alike."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str = "0.0.0.0"
    port: Annotated[int, Field(ge=1, le=65535)] = 9080
    resolver: str | None = None  # `serve` needs this or `app`: production has no default tools
    app: str | None = None  # an application's ASGI app (from `lash.app`), served as it is
    with_turn: bool = False
    identity_keys: list[str] = Field(default_factory=list)
    # Groups this wide settle in batches through one pump invocation (decision 20); None is the
    # engine's own default, so the settings need not import the engine.
    batch_from: Annotated[int, Field(ge=1)] | None = None
    verbose: bool = False
    # lash's service names, {prefix}Group, … (decision 40); checked where the services are named. None
    # is the process's (decision 54): Lash, or with `app` what its own `lash.app(prefix=...)` names.
    prefix: str | None = None
    # The HTTP server the endpoint runs under, in this process either way (decisions 11 and 33).
    server: Literal["hypercorn", "granian"] = "hypercorn"
    # With an admin URL the endpoint checks at start that no other application serves lash's services
    # under its prefix (decision 43); `take_over` starts it anyway.
    admin_url: str | None = None
    app_name: str | None = None  # the application's name on lash's services (`lash.app(..., name=)`)
    take_over: bool = False

    @field_validator("identity_keys", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        # Comma-separated in the variable, and in each flag too (`--identity-key a,b` as one flag).
        if isinstance(value, str):
            value = [value]
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return [k.strip() for v in value for k in v.split(",") if k.strip()]
        return value

    @field_validator("admin_url")
    @classmethod
    def _no_admin(cls, url: str | None) -> str | None:
        # An empty flag is no admin URL, as an empty variable is: no start check, no look-ups.
        return url if url is None or url.strip() else None

    @field_validator("identity_keys")
    @classmethod
    def _keys(cls, keys: list[str]) -> list[str]:
        for key in keys:
            if not key.startswith("publickeyv1_"):
                raise ValueError(f"{key!r} is not a Restate identity key (publickeyv1_…)")
        return keys

    @field_validator("resolver", "app")
    @classmethod
    def _resolver(cls, spec: str | None) -> str | None:
        if spec is None:
            return None
        module, _, attribute = spec.partition(":")
        if not module or not attribute:
            raise ValueError(f"must be 'module:attribute', got {spec!r}")
        return spec

    @classmethod
    def load(cls, flags: Mapping[str, Any], env: Mapping[str, str] | None = None) -> ServeSettings:
        """Settings from ``env`` (default: the process environment), overridden by non-None ``flags``."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for field, names in _ENV.items():
            name = _first_set(names, env)
            if name is not None:
                values[field] = env[name]
        values.update({k: v for k, v in flags.items() if v is not None})
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc'])} ({_source(str(e['loc'][0]), flags, env)}): {e['msg']}"
                for e in exc.errors()
            )
            raise SettingsError(f"invalid settings: {problems}") from None


def _first_set(names: str | tuple[str, ...], env: Mapping[str, str]) -> str | None:
    """The first of a setting's environment variables that ``env`` sets; one set empty is unset (as a
    container's ``-e LASH_APP=`` clears what its image set)."""
    return next((name for name in ((names,) if isinstance(names, str) else names) if env.get(name)), None)


def _source(field: str, flags: Mapping[str, Any], env: Mapping[str, str]) -> str:
    """Where a bad setting came from, for its message: a flag, else its environment variable."""
    names = _ENV.get(field)
    name = _first_set(names, env) if names is not None and flags.get(field) is None else None
    return name or "flag"
