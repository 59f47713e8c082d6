"""A Restate handler seen as JSON values: what a decorated handler says about itself (its service,
name, kind and serdes), and the one place its own serde turns a model into the JSON value a `Call`
records, and back, for the caller (the front door) and for an in-process twin alike.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Generic, Literal, TypeVar, cast

import msgspec
from restate.handler import handler_from_callable
from restate.serde import BytesSerde, DefaultSerde, JsonSerde, MsgspecJsonSerde, PydanticJsonSerde, Serde

from .contract import InvalidInput

__all__ = ["HandlerRef", "JsonCodec", "handler_ref"]

In = TypeVar("In")
Out = TypeVar("Out")
T = TypeVar("T")


def _untyped(serde: Serde[Any]) -> bool:
    """The SDK's `DefaultSerde` with no type: what a handler gets unless it takes or returns a pydantic
    model or a msgspec Struct, or names a serde of its own."""
    return isinstance(serde, DefaultSerde) and serde.type_hint is None


# The SDK's serdes that write JSON: what else a handler names (`BytesSerde`, its own) may not.
_JSON_SERDES = (DefaultSerde, JsonSerde, PydanticJsonSerde, MsgspecJsonSerde)


def _float_noting(rounded: list[str]) -> Callable[[str], float]:
    """A JSON number as the float lash records, noting in ``rounded`` the spelling of one it rounds."""

    def number(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            raise ValueError("Number out of range")  # refused, as msgspec refuses it without a hook
        # The float's shortest spelling names the number written, or the float holds it only rounded.
        if not rounded and Decimal(repr(value)) != Decimal(text):
            rounded.append(text)
        return value

    return number


class NotJson(ValueError):
    """A handler's serde (its class's name, the error's argument) wrote bytes that are not JSON,
    where lash records a call's argument and value as JSON."""


# Decision 51: the front door converts at both ends, so the recorded `Call` (and its hash) is unchanged.
class JsonCodec(Generic[T]):
    """One side of a Restate handler (its input or its output) as JSON values, through the serde the SDK
    chose for it: a pydantic model's or a msgspec Struct's own JSON, or the handler's named serde.

    Where the SDK left the untyped `DefaultSerde` (it picks a serde for pydantic models and msgspec
    Structs only), a dataclass is written and read with msgspec (the JSON object
    `dataclasses.asdict` gives), and any other model by its own type, as the SDK's ``ctx.set`` does.
    """

    __slots__ = ("_annotation", "_serde")

    def __init__(self, serde: Serde[T], annotation: Any) -> None:
        self._serde = serde
        self._annotation = annotation

    @property
    def raw(self) -> bool:
        """Whether its serde is the SDK's `BytesSerde`: bytes as they are, never JSON."""
        return isinstance(self._serde, BytesSerde)

    @property
    def type_name(self) -> str:
        """The annotated type's name, for messages (``Any`` when the handler names none)."""
        return getattr(self._annotation, "__name__", None) or repr(self._annotation or Any)

    @property
    def a_type(self) -> str:
        """`type_name` with its article, for messages: ``an int``, ``a Parcel``."""
        name = self.type_name
        return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"

    def to_json(self, value: T) -> Any:
        """``value`` as the JSON value its serde writes; raises what the serde raises, or
        `NotJson` if the serde does not write JSON."""
        return self.json_of(value)[0]

    def json_of(self, value: T) -> tuple[Any, str | None]:
        """As `to_json`, with the first number the serde wrote that its float holds only rounded (its
        digits are not the float's shortest spelling), as it spelled it; None if every one fits. A
        JSON number with a fraction or an exponent is recorded as a float, so lash would round it."""
        if _untyped(self._serde) and dataclasses.is_dataclass(value) and not isinstance(value, type):
            return msgspec.to_builtins(value), None
        raw = self.written(value)
        rounded: list[str] = []
        try:
            read = msgspec.json.Decoder(float_hook=_float_noting(rounded)).decode(raw) if raw else None
            return read, next(iter(rounded), None)
        except msgspec.DecodeError:
            if isinstance(self._serde, _JSON_SERDES):
                raise  # a JSON serde given a value JSON has no spelling for (a NaN): the value's fault
            raise NotJson(type(self._serde).__name__) from None

    def written(self, value: T) -> bytes:
        """``value`` as its serde writes it: the bytes a Restate handler answers."""
        serde: Serde[Any] = self._serde
        if _untyped(serde):
            serde = cast(DefaultSerde[Any], serde).with_maybe_type(type(value))
        return bytes(serde.serialize(value))

    def from_json(self, value: Any) -> T:
        """The JSON ``value`` read by the serde (``None``: what an empty body reads as)."""
        annotation = self._annotation
        if (
            value is not None  # none is what an empty body reads as, an optional dataclass's too
            and _untyped(self._serde)
            and dataclasses.is_dataclass(annotation)
            and isinstance(annotation, type)
        ):
            return cast(T, msgspec.convert(value, annotation))
        return cast(T, self._serde.deserialize(b"" if value is None else msgspec.json.encode(value)))


@dataclass(frozen=True, slots=True)
class HandlerRef(Generic[In, Out]):
    """What a decorated Restate handler says about itself, as ``ctx.service_call`` reads it: its
    service, its name, whether it is keyed (a virtual object's or a workflow's), and its two serdes."""

    service: str
    handler: str
    kind: Literal["service", "object", "workflow"]
    takes_input: bool
    arg: JsonCodec[In]
    result: JsonCodec[Out]

    @property
    def keyed(self) -> bool:
        return self.kind != "service"

    @property
    def target(self) -> str:
        return f"{self.service}/{self.handler}"


def handler_ref(
    fn: Callable[[Any, In], Awaitable[Out]] | Callable[[Any], Awaitable[Out]],
) -> HandlerRef[In, Out]:
    """The `HandlerRef` of a function decorated by ``@service.handler()`` (or an object's or a
    workflow's); `InvalidInput` for anything else."""
    try:
        found = handler_from_callable(fn)
    except (ValueError, TypeError):
        raise InvalidInput(
            f"{fn!r} is not a Restate handler: pass a function decorated with @service.handler() (or an "
            "object's or a workflow's), or lash.call('Service', 'handler', arg) for one served elsewhere"
        ) from None
    io = found.handler_io
    return HandlerRef(
        service=found.service_tag.name,
        handler=found.name,
        kind=found.service_tag.kind,
        takes_input=found.arity == 2,
        arg=JsonCodec(io.input_serde, io.input_type.annotation if io.input_type else None),
        result=JsonCodec(io.output_serde, io.output_type.annotation if io.output_type else None),
    )
