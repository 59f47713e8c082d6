"""Envelopes, commands, group membership, canonical encoding and the envelope hash.

Membership is an optional field **omitted when absent**, so an ungrouped
envelope encodes byte-identically to the encoding before groups existed (ADR,
"Normative: ungrouped effects stay hash-identical"). Wake rule and disposition
ride inside membership, so a drifted one changes the hash and a replay refuses
it (ADR, "Wake policy is journaled identity").
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
from datetime import timedelta
from typing import Any, Generic, assert_never

import msgspec
from typing_extensions import TypeVar

from ._errors import InvalidEnvelope, a_kind
from ._policies import GroupWakePolicy, LoserPolicy
from ._struct import STRUCT_OPTIONS

__all__ = [
    "MAX_KEY_LENGTH",
    "MAX_SLEEP_MS",
    "AwaitEvent",
    "Call",
    "Child",
    "Command",
    "GroupMembership",
    "RuntimeEffectEnvelope",
    "Sleep",
    "ToolCall",
    "canonical_bytes",
    "decode_envelope",
    "describe_command",
    "envelope_hash",
    "validate_json_value",
]

MAX_KEY_LENGTH = 512
# Membership must be omitted when absent (ADR, "ungrouped effects stay hash-identical"), hence omit_defaults.
_STRUCT = {**STRUCT_OPTIONS, "omit_defaults": True}


# A lone surrogate (what `json.loads` makes of a JSON "\\ud800") is a `str` UTF-8 cannot carry.
_SURROGATE = re.compile("[\ud800-\udfff]")


def has_surrogate(value: str) -> bool:
    """Whether ``value`` holds what no UTF-8 message can carry: its encoding would fail where it is sent."""
    return not value.isascii() and _SURROGATE.search(value) is not None


def check_text(value: str, where: str) -> None:
    if has_surrogate(value):
        raise InvalidEnvelope(f"{where} holds a lone surrogate (\\ud800-\\udfff), which is not text")


def validate_json_value(value: Any, where: str = "value") -> None:
    """Refuse anything that is not plain JSON: the canonical encoding must be a function of the value."""
    try:
        _validate(value, where)
    except RecursionError:  # a plain error, where the user's mistake is the value
        raise InvalidEnvelope(f"{where} holds itself, or is nested too deeply to be JSON") from None


def _validate(value: Any, where: str) -> None:
    if value is None or isinstance(value, bool | int):
        return
    if isinstance(value, str):
        check_text(value, where)
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidEnvelope(f"{where} holds a non-finite float, which JSON cannot carry")
        return
    if isinstance(value, list | tuple):
        for item in value:
            _validate(item, where)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidEnvelope(f"{where} has a non-string object key {key!r}")
            check_text(key, where)
            _validate(item, where)
        return
    # A typed value (a model, a Struct, a dataclass) has a JSON form of its own: say how to give it.
    hint = ""
    if hasattr(value, "model_dump") or isinstance(value, msgspec.Struct) or dataclasses.is_dataclass(value):
        hint = ": give its JSON (model_dump(mode='json'), msgspec.to_builtins(v) or dataclasses.asdict(v))"
        if where == "call arg":
            hint += ", or call your handler itself, lash.call(handler, arg), whose serde writes it"
    raise InvalidEnvelope(f"{where} holds {a_kind(value)}, which is not a JSON value{hint}")


# Restate 1.7's rules (a call breaking them is retried for ever, RT0024): a scope is 1..36 of these
# characters, a limit key one or two such levels separated by '/' ("tenant1" or "tenant1/user42").
_LEVEL = r"[A-Za-z0-9_.-]{1,36}"
_SCOPE = re.compile(_LEVEL)
_LIMIT_KEY = re.compile(rf"{_LEVEL}(/{_LEVEL})?")
MAX_HEADER_VALUE = 8192


def _check_headers(headers: object) -> None:
    if not isinstance(headers, dict):
        raise InvalidEnvelope(f"call headers must be a dict of strings, not {type(headers).__name__}")
    for name, value in headers.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise InvalidEnvelope(f"call header {name!r} must map a string to a string, not {value!r}")
        _check_key(name, "call header name")
        if len(value) > MAX_HEADER_VALUE or _has_control(value):
            raise InvalidEnvelope(
                f"call header {name!r} must be at most {MAX_HEADER_VALUE} characters, "
                "none of them a control character"
            )
        check_text(value, f"call header {name!r}")


def _has_control(value: str) -> bool:
    return any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value)


def _check_key(value: object, what: str, *, empty: bool = False) -> None:
    if not isinstance(value, str):
        raise InvalidEnvelope(f"{what} must be a string, not {type(value).__name__}")
    if (not value and not empty) or len(value) > MAX_KEY_LENGTH:
        raise InvalidEnvelope(f"{what} must be {0 if empty else 1}..{MAX_KEY_LENGTH} characters")
    if _has_control(value):
        raise InvalidEnvelope(f"{what} contains a control character")
    check_text(value, what)


# The value a child settles with, to a type checker: `Any` (JSON) unless a child says otherwise, so a
# bare `Child` (an application's own subclass, an annotation) needs no parameter under mypy --strict.
V_co = TypeVar("V_co", covariant=True, default=Any)


class Child(Generic[V_co]):
    """A child as an application writes it: a command (`ToolCall`, `Sleep`, `AwaitEvent`, `Call`), an
    envelope, or the front door's typed call. A marker with no state, first among each one's bases, so
    that a list of different children has one type (``list[Child]``) where a type checker would
    otherwise see only ``list[msgspec.Struct]``.

    Its parameter is the value the child settles with, to a type checker only: a typed call's handler
    output (``Child[Quote]``), ``None`` for a `Sleep`, ``Any`` (JSON) for the others and for a bare
    ``Child``. The combinators read the value types of their children from it."""

    __slots__ = ()


class ToolCall(Child, msgspec.Struct, tag="tool_call", **_STRUCT):
    """Run the tool ``tool`` with JSON ``args`` through the host's `GroupExecutors` resolver."""

    tool: str
    args: Any = None

    def __post_init__(self) -> None:
        _check_key(self.tool, "tool name")
        validate_json_value(self.args, "tool args")


# The longest sleep a timer is set to (Python's `timedelta` is the bound): a longer one sleeps this.
MAX_SLEEP_MS = timedelta.max // timedelta(milliseconds=1)


class Sleep(Child[None], msgspec.Struct, tag="sleep", **_STRUCT):
    """A durable timer of ``duration_ms`` milliseconds; settles Ok(None)."""

    duration_ms: int

    def __post_init__(self) -> None:
        # An int, as its JSON form is read back (a float is refused there): a host that runs what
        # the other refuses would answer differently. No upper bound: this runs where a stored
        # envelope is read too, and a sleep past any timer is the longest one (`MAX_SLEEP_MS`).
        if (
            isinstance(self.duration_ms, bool)
            or not isinstance(self.duration_ms, int)
            or self.duration_ms < 0
        ):
            raise InvalidEnvelope(
                f"sleep duration_ms must be a non-negative integer (milliseconds); got {self.duration_ms!r}"
            )

    @property
    def timer_ms(self) -> int:
        """What a host sets its timer to: the duration, or past the longest timer, the longest."""
        return min(self.duration_ms, MAX_SLEEP_MS)


class AwaitEvent(Child, msgspec.Struct, tag="await_event", **_STRUCT):
    """Wait for the durable event ``name``; settles Ok(payload) once it is emitted."""

    name: str

    def __post_init__(self) -> None:
        _check_key(self.name, "event name")


class Call(Child, msgspec.Struct, tag="call", **_STRUCT):
    """Invoke the handler ``service/handler`` with JSON ``arg``; ``key`` addresses a virtual object or
    workflow. Settles Ok(the handler's output), or Err(message, code) when it ends in a terminal error.

    ``headers``, ``scope``, ``limit_key`` and ``idempotency_key`` go to the callee's invocation as a
    native Restate call's do (Restate's flow control: a scope, and a limit key within it; an
    idempotency key, under which Restate runs the callee once for every call that gives it); a host
    without them ignores them. Each is omitted when absent, so a call without them encodes (and
    hashes) as before.
    """

    service: str
    handler: str
    arg: Any = None
    key: str | None = None
    headers: dict[str, str] | None = None
    scope: str | None = None
    limit_key: str | None = None
    idempotency_key: str | None = None

    def __post_init__(self) -> None:
        _check_key(self.service, "service name")
        _check_key(self.handler, "handler name")
        if self.key is not None:
            # Restate keys an object by any string, the empty one too (`ctx.object_call(h, key="")`).
            _check_key(self.key, "call key", empty=True)
        validate_json_value(self.arg, "call arg")
        if self.headers is not None:
            _check_headers(self.headers)
        if self.scope is not None and not (isinstance(self.scope, str) and _SCOPE.fullmatch(self.scope)):
            raise InvalidEnvelope(
                f"call scope {self.scope!r} must be 1..36 characters of letters, digits, '_', '.' and '-'"
            )
        if self.idempotency_key is not None:
            if not isinstance(self.idempotency_key, str):
                raise InvalidEnvelope(f"call idempotency_key must be a string, not {self.idempotency_key!r}")
            _check_key(self.idempotency_key, "call idempotency_key")
        if self.limit_key is not None:
            if self.scope is None:
                raise InvalidEnvelope(
                    "a call's limit_key needs a scope (Restate applies limits within a scope)"
                )
            if not (isinstance(self.limit_key, str) and _LIMIT_KEY.fullmatch(self.limit_key)):
                raise InvalidEnvelope(
                    f"call limit_key {self.limit_key!r} must be one or two levels separated by '/', each "
                    "1..36 characters of letters, digits, '_', '.' and '-'"
                )

    @property
    def target(self) -> str:
        return f"{self.service}/{self.handler}"


Command = ToolCall | Sleep | AwaitEvent | Call


def describe_command(command: Command) -> str:
    """How messages name a child's command: ``tool 'echo'``, ``event 'paid'``, ``sleep of 50 ms``,
    ``call 'Payments/charge'``."""
    match command:
        case ToolCall():
            return f"tool {command.tool!r}"
        case Call():
            return f"call {command.target!r}"
        case AwaitEvent():
            return f"event {command.name!r}"
        case Sleep():
            return f"sleep of {command.duration_ms} ms"
        case _:
            assert_never(command)


class GroupMembership(msgspec.Struct, **_STRUCT):
    """Which group a child belongs to, where, and under which wake rule and disposition."""

    group_key: str
    position: int
    wake: GroupWakePolicy
    disposition: LoserPolicy


class RuntimeEffectEnvelope(Child, msgspec.Struct, **_STRUCT):
    """One effect: a command, the child's replay key, and (for grouped children) membership."""

    command: Command
    replay_key: str
    # ADR: optional and omitted when absent, so ungrouped hashes stay byte-identical.
    membership: GroupMembership | None = None

    def __post_init__(self) -> None:
        _check_key(self.replay_key, "replay key")
        if not isinstance(self.command, Command):  # built by code that ignores the types: refused typed
            what = type(self.command).__name__
            message = f"command must be a ToolCall, Sleep, AwaitEvent or Call, not {what}"
            raise InvalidEnvelope(message, replay_key=self.replay_key)
        if self.membership is not None and self.membership.position < 0:
            raise InvalidEnvelope("membership position must be non-negative", replay_key=self.replay_key)


_ENCODER = msgspec.json.Encoder(order="sorted")
_DECODER = msgspec.json.Decoder(RuntimeEffectEnvelope)


def canonical_bytes(envelope: RuntimeEffectEnvelope) -> bytes:
    """The canonical encoding: compact JSON, struct fields and object keys sorted."""
    return _ENCODER.encode(envelope)


def envelope_hash(envelope: RuntimeEffectEnvelope) -> str:
    """Hex SHA-256 of the canonical encoding; the per-child replay fence."""
    return hashlib.sha256(canonical_bytes(envelope)).hexdigest()


def decode_envelope(data: bytes | str) -> RuntimeEffectEnvelope:
    """Decode one envelope from JSON, refusing anything malformed with `InvalidEnvelope`."""
    try:
        return _DECODER.decode(data)
    except msgspec.ValidationError as exc:
        raise InvalidEnvelope(f"malformed envelope: {exc}") from None
    except msgspec.DecodeError as exc:
        raise InvalidEnvelope(f"envelope is not JSON: {exc}") from None
    except UnicodeError:  # text holding a lone surrogate, which has no UTF-8 form
        raise InvalidEnvelope("envelope is not text: it holds a lone surrogate (\\ud800-\\udfff)") from None
