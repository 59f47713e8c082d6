"""Canonical encoding and envelope hashes, pinned by golden vectors.

ADR, "Normative: ungrouped effects stay hash-identical".
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import msgspec
import pydantic
import pytest

from lash_restate.contract import (
    AwaitEvent,
    Call,
    Cancelled,
    GroupMembership,
    GroupWakePolicy,
    InvalidEnvelope,
    LoserPolicy,
    RuntimeEffectEnvelope,
    RuntimeEffectGroup,
    Sleep,
    ToolCall,
    canonical_bytes,
    decode_envelope,
    envelope_hash,
)

SEARCH = ToolCall(tool="search", args={"q": "durable", "limit": 3, "tags": ["a", "b"], "score": 0.5})
GOLDEN_UNGROUPED = [
    (
        RuntimeEffectEnvelope(command=SEARCH, replay_key="scope-1:effect:7"),
        b'{"command":{"args":{"limit":3,"q":"durable","score":0.5,"tags":["a","b"]},"tool":"search",'
        b'"type":"tool_call"},"replay_key":"scope-1:effect:7"}',
        "771b4c92881c63cb3358b588bf04568672a2678f768d9129c4eb47be59710d68",
    ),
    (
        RuntimeEffectEnvelope(command=Sleep(duration_ms=1500), replay_key="scope-1:effect:8"),
        b'{"command":{"duration_ms":1500,"type":"sleep"},"replay_key":"scope-1:effect:8"}',
        "0ae8b025c97c490a83aca510cc618bd101d5ee53e9da6a89157f603c959b84ec",
    ),
    (
        RuntimeEffectEnvelope(command=AwaitEvent(name="approved"), replay_key="scope-1:effect:9"),
        b'{"command":{"name":"approved","type":"await_event"},"replay_key":"scope-1:effect:9"}',
        "5ad9a16849000756d1afb2bfc170e5b53299a209c481538df7dba6b548a56abc",
    ),
    (
        RuntimeEffectEnvelope(
            command=Call(service="Payments", handler="charge", arg={"amount": 42, "currency": "EUR"}),
            replay_key="scope-1:effect:10",
        ),
        b'{"command":{"arg":{"amount":42,"currency":"EUR"},"handler":"charge","service":"Payments",'
        b'"type":"call"},"replay_key":"scope-1:effect:10"}',
        "e720034e3f5dae4156bded15b2d83186c9c0485de998678f0818d6713a53d9c8",
    ),
    (
        RuntimeEffectEnvelope(
            command=Call(service="Cart", handler="add", arg=["sku-1"], key="user-7"),
            replay_key="scope-1:effect:11",
        ),
        b'{"command":{"arg":["sku-1"],"handler":"add","key":"user-7","service":"Cart","type":"call"},'
        b'"replay_key":"scope-1:effect:11"}',
        "a4b378bbce4df1534336a07212fd9cf5bace89526d65542391791fc88b75e804",
    ),
]


class _EnvelopeBeforeGroups(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The envelope type as it was before groups existed: no membership field at all."""

    command: ToolCall | Sleep | AwaitEvent | Call
    replay_key: str


@pytest.mark.parametrize(("envelope", "golden_bytes", "golden_hash"), GOLDEN_UNGROUPED)
def test_ungrouped_golden_bytes_and_hash(
    envelope: RuntimeEffectEnvelope, golden_bytes: bytes, golden_hash: str
) -> None:
    assert canonical_bytes(envelope) == golden_bytes
    assert envelope_hash(envelope) == golden_hash == hashlib.sha256(golden_bytes).hexdigest()


@pytest.mark.parametrize(("envelope", "golden_bytes", "golden_hash"), GOLDEN_UNGROUPED)
def test_ungrouped_hash_is_identical_to_the_type_without_membership(
    envelope: RuntimeEffectEnvelope, golden_bytes: bytes, golden_hash: str
) -> None:
    before = _EnvelopeBeforeGroups(command=envelope.command, replay_key=envelope.replay_key)
    assert msgspec.json.Encoder(order="sorted").encode(before) == canonical_bytes(envelope) == golden_bytes


def test_grouped_golden_hashes() -> None:
    group = RuntimeEffectGroup(
        "scope-1:group:batch-9f:0",
        [GOLDEN_UNGROUPED[0][0], GOLDEN_UNGROUPED[1][0]],
        wake=GroupWakePolicy.FIRST,
        disposition=LoserPolicy.CANCEL,
    )
    assert [envelope_hash(c) for c in group.children] == [
        "077fd1a18c2c501776564d8d9084d92d17e22242e1b57cfb636c2118a601128d",
        "06c7ed3d7f94104ed0a8c3a86e9e3ff01d7eaa05b43c79ed40888aaf9ac78d99",
    ]
    calls = RuntimeEffectGroup(
        "scope-1:group:batch-9f:0",
        [GOLDEN_UNGROUPED[3][0], GOLDEN_UNGROUPED[4][0]],
        wake=GroupWakePolicy.FIRST,
        disposition=LoserPolicy.CANCEL,
    )
    assert [envelope_hash(c) for c in calls.children] == [
        "0ca17bc75b8816811a72346474366c50390314c2f7d8e7c341ca4cb7e44af754",
        "353fb3df511719b1141c425860060a4e09a28af384e72b3ca44f2172c5f73b45",
    ]


def _member(**changes: Any) -> RuntimeEffectEnvelope:
    fields: dict[str, Any] = {
        "group_key": "s:group:b:0",
        "position": 0,
        "wake": GroupWakePolicy.ALL,
        "disposition": LoserPolicy.RUN_TO_COMPLETION,
    }
    fields.update(changes)
    return RuntimeEffectEnvelope(command=SEARCH, replay_key="r", membership=GroupMembership(**fields))


@pytest.mark.parametrize(
    "drift",
    [
        {"wake": GroupWakePolicy.FIRST},
        {"wake": GroupWakePolicy.FIRST_SUCCESS},
        {"disposition": LoserPolicy.CANCEL},
        {"position": 1},
        {"group_key": "s:group:b:1"},
    ],
)
def test_membership_drift_changes_the_hash(drift: dict[str, Any]) -> None:
    assert envelope_hash(_member(**drift)) != envelope_hash(_member())


def test_canonical_encoding_ignores_key_order_of_args() -> None:
    a = RuntimeEffectEnvelope(
        command=ToolCall(tool="t", args={"a": 1, "b": {"y": 2, "x": 1}}), replay_key="r"
    )
    b = RuntimeEffectEnvelope(
        command=ToolCall(tool="t", args={"b": {"x": 1, "y": 2}, "a": 1}), replay_key="r"
    )
    assert canonical_bytes(a) == canonical_bytes(b)


def test_decode_round_trips_canonical_bytes() -> None:
    for envelope, golden, _ in GOLDEN_UNGROUPED:
        assert decode_envelope(golden) == envelope
    grouped = _member()
    assert decode_envelope(canonical_bytes(grouped)) == grouped


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"[]",
        b'{"command":{"type":"teleport"},"replay_key":"r"}',
        b'{"command":{"type":"sleep","duration_ms":-5},"replay_key":"r"}',
        b'{"command":{"type":"sleep","duration_ms":1.5},"replay_key":"r"}',
        b'{"command":{"type":"tool_call","tool":""},"replay_key":"r"}',
        b'{"command":{"type":"await_event","name":"x"},"replay_key":""}',
        b'{"command":{"type":"await_event","name":"x"},"replay_key":"a\\u0000b"}',
        b'{"command":{"type":"await_event","name":"x"},"replay_key":"r","extra":1}',
        b'{"command":{"type":"await_event","name":"x"},"replay_key":"r","membership":{"group_key":"g"}}',
        b'{"command":{"type":"await_event","name":"x"},"replay_key":"r","membership":{"group_key":"s:group:b:0",'
        b'"position":-1,"wake":"all","disposition":"cancel"}}',
        b'{"command":{"type":"await_event","name":"x"},"replay_key":"r","membership":{"group_key":"s:group:b:0",'
        b'"position":0,"wake":"fourth","disposition":"cancel"}}',
    ],
)
def test_malformed_envelopes_are_refused_typed(raw: bytes) -> None:
    with pytest.raises(InvalidEnvelope) as caught:
        decode_envelope(raw)
    assert caught.value.code == "invalid_envelope"


@pytest.mark.parametrize(
    "args", [float("nan"), float("inf"), {1: "x"}, {"s": {1, 2}}, object(), "\ud800", {"k\udc00": 1}]
)
def test_non_json_args_are_refused(args: Any) -> None:
    with pytest.raises(InvalidEnvelope):
        ToolCall(tool="t", args=args)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"service": "", "handler": "h"}, "service name must be 1..512 characters"),
        ({"service": "s" * 513, "handler": "h"}, "service name must be 1..512 characters"),
        ({"service": "S", "handler": ""}, "handler name must be 1..512 characters"),
        ({"service": "S", "handler": "h\x00"}, "handler name contains a control character"),
        ({"service": "S\x7f", "handler": "h"}, "service name contains a control character"),
        ({"service": "S", "handler": "h", "key": "k" * 513}, "call key must be 0..512 characters"),
        ({"service": "S", "handler": "h", "key": "k\n"}, "call key contains a control character"),
        ({"service": 5, "handler": "h"}, "service name must be a string, not int"),
        (
            {"service": "S", "handler": "h", "key": "k\ud800"},
            "call key holds a lone surrogate (\\ud800-\\udfff), which is not text",
        ),
        (
            {"service": "S", "handler": "h", "arg": ["\udfff"]},
            "call arg holds a lone surrogate (\\ud800-\\udfff), which is not text",
        ),
        (
            {"service": "S", "handler": "h", "arg": float("nan")},
            "call arg holds a non-finite float, which JSON cannot carry",
        ),
        ({"service": "S", "handler": "h", "arg": {1: 2}}, "call arg has a non-string object key 1"),
        (
            {"service": "S", "handler": "h", "limit_key": "acme"},
            "a call's limit_key needs a scope (Restate applies limits within a scope)",
        ),
        (
            {"service": "S", "handler": "h", "scope": "bad scope"},
            "call scope 'bad scope' must be 1..36 characters of letters, digits, '_', '.' and '-'",
        ),
        (
            {"service": "S", "handler": "h", "scope": "s" * 37},
            f"call scope {'s' * 37!r} must be 1..36 characters of letters, digits, '_', '.' and '-'",
        ),
        (
            {"service": "S", "handler": "h", "scope": "billing", "limit_key": "a/b/c"},
            "call limit_key 'a/b/c' must be one or two levels separated by '/', each 1..36 characters of "
            "letters, digits, '_', '.' and '-'",
        ),
        (
            {"service": "S", "handler": "h", "headers": {"x-a": 1}},
            "call header 'x-a' must map a string to a string, not 1",
        ),
        (
            {"service": "S", "handler": "h", "headers": {"x-a": "b\r\nx-injected: 1"}},
            "call header 'x-a' must be at most 8192 characters, none of them a control character",
        ),
        (
            {"service": "S", "handler": "h", "headers": {"": "v"}},
            "call header name must be 1..512 characters",
        ),
        (
            {"service": "S", "handler": "h", "idempotency_key": ""},
            "call idempotency_key must be 1..512 characters",
        ),
        (
            {"service": "S", "handler": "h", "idempotency_key": "k\n"},
            "call idempotency_key contains a control character",
        ),
        (
            {"service": "S", "handler": "h", "idempotency_key": 7},
            "call idempotency_key must be a string, not 7",
        ),
    ],
)
def test_a_call_is_refused_typed_naming_the_bad_field(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidEnvelope) as refused:
        Call(**fields)
    assert refused.value.message == message


def test_a_call_keyed_with_the_empty_string_is_valid_and_not_a_call_without_a_key() -> None:
    """Restate keys an object by any string, the empty one too (`ctx.object_call(h, key="")`): such a
    call is encoded with its key, read back as it was, and another call than one with no key."""
    empty = RuntimeEffectEnvelope(command=Call(service="S", handler="h", key=""), replay_key="r")
    assert msgspec.json.decode(canonical_bytes(empty))["command"]["key"] == ""
    assert decode_envelope(canonical_bytes(empty)) == empty
    unkeyed = RuntimeEffectEnvelope(command=Call(service="S", handler="h"), replay_key="r")
    assert canonical_bytes(empty) != canonical_bytes(unkeyed)


def test_a_calls_headers_scope_and_limit_key_are_its_identity_and_absent_ones_leave_it_as_before() -> None:
    """Given, they are encoded (and so hashed: a replay must give the same ones); absent, the call
    encodes as a call of a release before them did."""
    plain = RuntimeEffectEnvelope(command=Call(service="S", handler="h", arg=1), replay_key="r")
    assert canonical_bytes(plain) == (
        b'{"command":{"arg":1,"handler":"h","service":"S","type":"call"},"replay_key":"r"}'
    )
    call = Call(service="S", handler="h", arg=1, headers={"x-t": "a"}, scope="billing", limit_key="acme/u1")
    scoped = RuntimeEffectEnvelope(command=call, replay_key="r")
    assert msgspec.json.decode(canonical_bytes(scoped))["command"] == {
        "type": "call",
        "arg": 1,
        "handler": "h",
        "headers": {"x-t": "a"},
        "limit_key": "acme/u1",
        "scope": "billing",
        "service": "S",
    }
    assert decode_envelope(canonical_bytes(scoped)) == scoped
    other = msgspec.structs.replace(scoped, command=msgspec.structs.replace(call, limit_key="acme/u2"))
    keyed = msgspec.structs.replace(
        plain, command=Call(service="S", handler="h", arg=1, idempotency_key="once")
    )
    assert msgspec.json.decode(canonical_bytes(keyed))["command"]["idempotency_key"] == "once"
    assert decode_envelope(canonical_bytes(keyed)) == keyed
    hashes = {envelope_hash(plain), envelope_hash(scoped), envelope_hash(other), envelope_hash(keyed)}
    assert len(hashes) == 4


def test_a_call_names_its_target() -> None:
    call = Call(service="Cart", handler="add", arg=[1], key="u")
    assert call.target == "Cart/add"
    assert Call(service="S", handler="h", key="x" * 512).key == "x" * 512  # the longest key allowed


@pytest.mark.parametrize("command", ["echo", {"type": "sleep", "duration_ms": 1}, None])
def test_an_envelope_whose_command_is_not_a_command_is_refused_typed(command: Any) -> None:
    """Code that ignores the types gets a typed refusal where the envelope is built, not a crash at open."""
    with pytest.raises(InvalidEnvelope) as refused:
        RuntimeEffectEnvelope(command=command, replay_key="r")
    assert refused.value.message.startswith("command must be a ToolCall, Sleep, AwaitEvent or Call, not ")
    assert refused.value.replay_key == "r"


@pytest.mark.parametrize("where", ["call arg", "tool args"])
def test_a_typed_value_given_as_json_is_refused_saying_how_to_give_its_json(where: str) -> None:
    """A model, a Struct or a dataclass where JSON is wanted (a call by name, a tool's args): the
    refusal says how to give its JSON form, and for a call, that a handler of one's own takes it."""

    @dataclasses.dataclass
    class Query:
        sku: str

    class Model(pydantic.BaseModel):
        sku: str

    def make(value: Any) -> object:
        if where == "call arg":
            return Call(service="S", handler="h", arg=value)
        return ToolCall(tool="t", args=value)

    for value in (Query(sku="a"), Cancelled(), Model(sku="a")):
        with pytest.raises(InvalidEnvelope) as refused:
            make(value)
        assert refused.value.message.startswith(f"{where} holds a {type(value).__name__}, which is not")
        assert "model_dump(mode='json')" in refused.value.message
        assert ("lash.call(handler, arg)" in refused.value.message) == (where == "call arg")
    with pytest.raises(InvalidEnvelope) as plain:
        Call(service="S", handler="h", arg={1, 2})
    assert plain.value.message == "call arg holds a set, which is not a JSON value"
