"""The tier's virtual objects: the group (rank authority), the child, the pump and the durable-wait signal.

ADR, "Restate satisfaction: the group virtual object is the rank authority".
The group object's state is a shape fence, a counter and rank -> position map
(packed in the small ``meta`` record; the payload reference is that child's
``LashChild`` object, keyed by its replay key, or for a batched group its
``LashPump``), the invocation ids needed to cancel, and the waiters' awakeables.
Payload bytes never enter it.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import msgspec
import restate
from restate.serde import BytesSerde

from .. import logs
from ..contract import (
    AwaitEvent,
    Cancelled,
    ChildUnroutable,
    DispositionWidening,
    Err,
    GroupExecutors,
    GroupNotOpen,
    HandleMismatch,
    InvalidSettlement,
    LoserPolicy,
    Ok,
    Outcome,
    RuntimeEffectEnvelope,
    Sleep,
    ToolCall,
    Transient,
    execute_once,
)
from ._errors import is_cancellation, terminal_errors
from ._wire import (
    BATCH_FROM,
    BATCH_INLINE_BYTES,
    CHILD,
    GROUP,
    INLINE_OUTCOME_BYTES,
    META,
    PUMP,
    SHAPE,
    SIGNAL,
    STRINGS,
    ChildRun,
    CloseRequest,
    Meta,
    OpenReply,
    OpenRequest,
    PumpRun,
    Ref,
    SettleBatch,
    SettleRequest,
    WaitReply,
    WaitRequest,
    child_store,
    decode,
    encode,
    group_of_pump,
    handler_for,
    pump_key,
)

__all__ = [
    "DEFAULT_TOOL_ATTEMPTS",
    "MAX_OUTCOME_BYTES",
    "child_object",
    "group_object",
    "pump_object",
    "signal_object",
]

DEFAULT_TOOL_ATTEMPTS = 3
_BYTES = BytesSerde()
_NOT_FOUND = 404
# Restate caps a message at 32 MiB (worker.invoker.message-size-limit); leave room for the envelope.
MAX_OUTCOME_BYTES = 30 * 1024 * 1024
# A bulk read of a batched group's outcomes asks for at most this many at once.
OUTCOMES_PER_READ = 256

# A fault in our own handler code (not a contract error) is retried, but never forever: after the
# budget the invocation pauses, visible to an operator, instead of backing off silently (design.md).
HANDLER_RETRY = restate.InvocationRetryPolicy(
    initial_interval=timedelta(milliseconds=50),
    exponentiation_factor=2.0,
    max_interval=timedelta(seconds=10),
    max_attempts=30,
    on_max_attempts="pause",
)


def group_object(batch_from: int = BATCH_FROM) -> restate.VirtualObject:
    """`LashGroup`, keyed by the group key: the single writer of ranks for one group.

    State: ``meta`` (small and hot: the rank -> position map packed 4 bytes a rank,
    waiters, openers, the incarnation token), ``fence`` (the recorded shape, read only by
    open, close and reads of past ranks) and ``invocations`` (for cancels). For groups wider than
    SMALL_GROUP the hot handlers read state lazily, so a settlement touches only ``meta``.
    A group of ``batch_from`` children or more is batched: its children run under one `LashPump`
    invocation, which settles them into this object a batch at a time.
    """
    group = restate.VirtualObject(GROUP, invocation_retry_policy=HANDLER_RETRY)

    @group.handler(ingress_private=True)
    @terminal_errors
    async def open(ctx: restate.ObjectContext, req: OpenRequest) -> OpenReply:
        meta = await ctx.get("meta", serde=META)
        if meta is not None:
            # ADR: a reopen is fenced on shape, resolves only what it dispatches and refuses nothing;
            # on Restate the children are engine-owned invocations already, so it dispatches nothing.
            recorded = await ctx.get("fence", serde=SHAPE)
            assert recorded is not None
            recorded.fence_reopen(req.shape, ctx.key())
            await _watch_caller(ctx, meta, req)
            logs.event("group.reopened", ctx, group_key=ctx.key())
            return OpenReply(reopened=True)
        if req.miss is not None:
            # ADR (FIG-1579): a first open with a child nobody can run records nothing, group row included.
            raise ChildUnroutable(
                f"no executor is registered for {req.miss.what}",
                group_key=ctx.key(),
                position=req.miss.position,
                replay_key=req.miss.replay_key,
            )
        incarnation = str(ctx.uuid())  # tells this group's settlements from a closed namesake's
        meta = Meta(
            child_count=req.shape.child_count,
            wake=req.shape.wake.value,
            disposition=req.shape.disposition,
            incarnation=incarnation,
            batched=req.shape.child_count >= batch_from,
        )
        meta = msgspec.structs.replace(meta, waiters=meta.waiting(0, req.wakes))
        envelopes = [decode(envelope, RuntimeEffectEnvelope) for envelope in req.children]
        # Recording and dispatch are one handler run: a group is never recorded without its children.
        # Both come before the first await: a cancel signal (the caller's own cancellation reaches
        # this call) can only surface at an await, so it finds the group recorded and dispatched.
        ctx.set("fence", req.shape, serde=SHAPE)
        ctx.set("meta", meta, serde=META)
        if meta.batched:
            run = PumpRun(group_key=ctx.key(), children=envelopes, incarnation=incarnation)
            handles = [ctx.generic_send(PUMP, "run", encode(run), key=pump_key(ctx.key(), incarnation))]
        else:
            handles = [
                ctx.generic_send(
                    CHILD,
                    "run",
                    encode(ChildRun(envelope=envelope, incarnation=incarnation, child_count=len(envelopes))),
                    key=envelope.replay_key,
                )
                for envelope in envelopes
            ]
        # Cancels need these: one per child, or the one pump (cancelling it cancels its calls).
        ctx.set("invocations", [await h.invocation_id() for h in handles], serde=STRINGS)
        await _watch_caller(ctx, meta, req)
        logs.event(
            "group.opened",
            ctx,
            group_key=ctx.key(),
            children=req.shape.child_count,
            wake=req.shape.wake.value,
            disposition=req.shape.disposition.value,
        )
        return OpenReply(reopened=False)

    def bind_hot(name: str, fn: Any) -> None:
        """Bind ``fn`` twice: lazy state under ``name`` (wide groups), eager under its `_small` twin."""
        group.handler(name=name, ingress_private=True, state_preload=False)(terminal_errors(fn))
        group.handler(name=handler_for(name, 1), ingress_private=True)(terminal_errors(fn))

    async def settle(ctx: restate.ObjectContext, req: SettleRequest) -> None:
        meta = await ctx.get("meta", serde=META)
        if meta is None or meta.incarnation != req.incarnation:
            # Closed (or a closed namesake's child): a late settlement must not resurrect the group.
            # Its outcome store has nobody left to read it, so it is released too (no TTL, no leak).
            ctx.generic_send(CHILD, "forget", encode(req.incarnation), key=req.replay_key)
            return
        _rank(ctx, meta, [Ref(position=req.position, replay_key=req.replay_key, outcome=req.outcome)])

    bind_hot("settle", settle)

    async def settle_batch(ctx: restate.ObjectContext, req: SettleBatch) -> None:
        meta = await ctx.get("meta", serde=META)
        if meta is None or meta.incarnation != req.incarnation:
            return  # closed: must not resurrect; close already released the pump's store
        _rank(ctx, meta, req.refs)

    bind_hot("settle_batch", settle_batch)

    @group.handler(ingress_private=True, state_preload=False)
    @terminal_errors
    async def wait(ctx: restate.ObjectContext, req: WaitRequest) -> WaitReply:
        meta = await _open_meta(ctx, req.child_count)
        if meta.counter > req.consumed or not req.wakes:
            # ADR: read rank consumed + 1 out of state first, and only otherwise wait.
            return await _read_ranks(ctx, meta, req.consumed)
        waiters = [*meta.waiters, *meta.waiting(req.consumed, req.wakes)]
        ctx.set("meta", msgspec.structs.replace(meta, waiters=waiters), serde=META)
        return WaitReply(refs=[])

    async def close(ctx: restate.ObjectContext, req: CloseRequest) -> None:
        meta = await ctx.get("meta", serde=META)
        if meta is None:
            return  # ADR: close is idempotent, and so is the delete
        if meta.child_count != req.child_count:
            raise HandleMismatch(
                f"handle has {req.child_count} children, group has {meta.child_count}", group_key=ctx.key()
            )
        effective = meta.disposition if req.disposition is None else req.disposition
        if not meta.disposition.narrows_to(effective):
            raise DispositionWidening(
                f"group declared {meta.disposition.value}; close may only narrow it", group_key=ctx.key()
            )
        settled = set(meta.positions())
        # Every read before the first effect: a cancel signal surfaces only at an await, so a close
        # is never cut off half done (the closing caller's own cancellation reaches this call).
        invocations = await _invocations(ctx) if effective is LoserPolicy.CANCEL else []
        fence = None
        if settled and not meta.batched:
            fence = await ctx.get("fence", serde=SHAPE)
        # One cancel per unsettled child, not awaiting termination (ADR, "Close deletes…").
        _cancel_unsettled(ctx, meta, invocations, settled)
        if meta.batched:
            # The pump holds every outcome; its forget queues behind its run, so it clears last.
            ctx.generic_send(PUMP, "forget", b"", key=pump_key(ctx.key(), meta.incarnation))
        elif fence is not None:
            for position in sorted(settled):
                # Settled children's outcome stores go with the group; unsettled ones are released
                # when their late settlement finds the group gone.
                ctx.generic_send(CHILD, "forget", encode(meta.incarnation), key=fence.replay_keys[position])
        for waiter in meta.waiters:
            gone = GroupNotOpen("the group was closed while awaiting", group_key=ctx.key())
            ctx.reject_awakeable(waiter.awakeable, gone.to_wire(), 404)
        for watcher in meta.watchers:
            # Closed: nothing is left to apply when the callers end, so their watches end now
            # instead of staying attached for the callers' whole lives.
            ctx.cancel_invocation(watcher)
        # ADR: retirement is group-atomic; close deletes the object's state.
        ctx.clear_all()
        logs.event(
            "group.closed", ctx, group_key=ctx.key(), disposition=effective.value, settled=len(settled)
        )

    bind_hot("close", close)

    @group.handler(kind="shared", ingress_private=True)
    async def watch(ctx: restate.ObjectSharedContext, caller: str) -> None:
        """Wait for an opener's invocation to end, however it ends, then report it to the writer."""
        try:
            await ctx.attach_invocation(caller)
        except restate.TerminalError as error:
            if is_cancellation(error):
                raise  # this watcher itself was cancelled
        ctx.generic_send(GROUP, "caller_ended", encode(caller), key=ctx.key())

    @group.handler(ingress_private=True, state_preload=False)
    async def caller_ended(ctx: restate.ObjectContext, caller: str) -> None:
        """ADR: the declared disposition applies even when the caller never reaches its close.

        When the last opener of a group declared `Cancel` has ended without closing, its
        unsettled children are cancelled; they still take ranks (as `Cancelled`) for a resumer.
        """
        meta = await ctx.get("meta", serde=META)
        if meta is None:
            return  # closed already: nothing is left to apply
        callers = [c for c in meta.callers if c != caller]
        cancel = not callers and meta.disposition is LoserPolicy.CANCEL
        invocations = await _invocations(ctx) if cancel else []  # read before the first effect
        ctx.set("meta", msgspec.structs.replace(meta, callers=callers), serde=META)
        if cancel:
            logs.event("group.caller_gone_cancel", ctx, group_key=ctx.key())
            _cancel_unsettled(ctx, meta, invocations, set(meta.positions()))

    del open, wait, watch, caller_ended
    return group


def _rank(ctx: restate.ObjectContext, meta: Meta, refs: list[Ref]) -> None:
    """Rank each settled child in order, record it and wake its waiter: one durable handler step.

    ADR: rank assignment, rank readability and the wake are one journal step; a child already
    ranked is skipped (idempotent on the child: one terminal, one rank, however often it is sent).
    """
    woken: dict[int, Ref] = {}
    for ref in refs:
        if not 0 <= ref.position < meta.child_count:
            raise InvalidSettlement(
                "settlement names no child of this group",
                group_key=ctx.key(),
                position=ref.position,
                replay_key=ref.replay_key,
            )
        if meta.is_settled(ref.position):
            continue
        meta = meta.ranked(ref.position)  # (1) strictly monotonic; (2) appends above every consumed rank
        woken[meta.counter] = msgspec.structs.replace(ref, incarnation=meta.incarnation, pumped=meta.batched)
        logs.event("group.ranked", ctx, group_key=ctx.key(), rank=meta.counter, position=ref.position)
    if not woken:
        return  # all of them ranked already: nothing to write
    waiting = []
    for waiter in meta.waiters:
        if waiter.rank not in woken:
            waiting.append(waiter)
            continue
        # The small outcome rides along; the state keeps only the reference.
        reply = WaitReply(refs=[woken[waiter.rank]])
        ctx.resolve_awakeable(waiter.awakeable, encode(reply), serde=_BYTES)
    ctx.set("meta", msgspec.structs.replace(meta, waiters=waiting), serde=META)


async def _watch_caller(ctx: restate.ObjectContext, meta: Meta, req: OpenRequest) -> None:
    """Under a declared `Cancel`, remember a new opener in ``meta`` and watch for its end.

    RunToCompletion losers run on whatever happens to the caller: nothing to watch, nothing to write.
    """
    if req.caller is None or meta.disposition is not LoserPolicy.CANCEL or req.caller in meta.callers:
        return
    watch = ctx.generic_send(GROUP, "watch", encode(req.caller), key=ctx.key())
    watcher = await watch.invocation_id()
    meta = msgspec.structs.replace(
        meta, callers=[*meta.callers, req.caller], watchers=[*meta.watchers, watcher]
    )
    ctx.set("meta", meta, serde=META)


async def _invocations(ctx: restate.ObjectContext) -> list[str]:
    return await ctx.get("invocations", serde=STRINGS) or []


def _cancel_unsettled(
    ctx: restate.ObjectContext, meta: Meta, invocations: list[str], settled: set[int]
) -> None:
    if meta.batched:
        # Cancelling the pump cancels the child calls it still awaits, i.e. the unsettled children
        # (the SDK's implicit cancellation); their Cancelled terminals still settle through it.
        for invocation_id in invocations:
            ctx.cancel_invocation(invocation_id)
        return
    for position, invocation_id in enumerate(invocations):
        if position not in settled:
            ctx.cancel_invocation(invocation_id)


async def _read_ranks(ctx: restate.ObjectContext, meta: Meta, consumed: int) -> WaitReply:
    fence = await ctx.get("fence", serde=SHAPE)
    assert fence is not None
    return WaitReply(
        refs=[
            Ref(
                position=p, replay_key=fence.replay_keys[p], incarnation=meta.incarnation, pumped=meta.batched
            )
            for p in meta.positions(consumed)
        ]
    )


async def _open_meta(ctx: restate.ObjectContext, count: int) -> Meta:
    meta = await ctx.get("meta", serde=META)
    if meta is None:
        raise GroupNotOpen("no such group is recorded (never opened, or closed)", group_key=ctx.key())
    if meta.child_count != count:
        raise HandleMismatch(
            f"handle has {count} children, group has {meta.child_count}", group_key=ctx.key()
        )
    return meta


def child_object(
    resolver: GroupExecutors, *, tool_attempts: int = DEFAULT_TOOL_ATTEMPTS
) -> restate.VirtualObject:
    """`LashChild`, keyed by replay key: one child as its own invocation, and its outcome's home.

    The outcome lives in this object's keyed state, which has no TTL (an
    invocation's output is kept only for the retention window), and is released
    when the group is done with it.
    """
    child = restate.VirtualObject(CHILD, invocation_retry_policy=HANDLER_RETRY)

    @child.handler(ingress_private=True)
    @terminal_errors
    async def run(ctx: restate.ObjectContext, req: ChildRun) -> None:
        envelope = req.envelope
        membership = envelope.membership
        if membership is None:
            return  # only grouped children are dispatched here
        store = child_store(req.incarnation)
        stored = await ctx.get(store, serde=_BYTES)
        if stored is None:
            stored = encode(await _execute(ctx, envelope, resolver, tool_attempts))
            ctx.set(store, stored, serde=_BYTES)
        # Already settled (a re-dispatch after a reopen): settle again; the group dedups by position.
        settle = SettleRequest(
            position=membership.position,
            replay_key=envelope.replay_key,
            incarnation=req.incarnation,
            outcome=stored if len(stored) <= INLINE_OUTCOME_BYTES else None,
        )
        target = handler_for("settle", req.child_count)
        ctx.generic_send(GROUP, target, encode(settle), key=membership.group_key)

    @child.handler(ingress_private=True, output_serde=_BYTES)
    @terminal_errors
    async def execute(ctx: restate.ObjectContext, envelope: RuntimeEffectEnvelope) -> bytes:
        """A batched group's child: run it and answer its outcome to the pump, which stores it."""
        return encode(await _execute(ctx, envelope, resolver, tool_attempts))

    @child.handler(kind="shared", ingress_private=True, output_serde=_BYTES)
    @terminal_errors
    async def outcome(ctx: restate.ObjectSharedContext, incarnation: str) -> bytes:
        stored = await ctx.get(child_store(incarnation), serde=_BYTES)
        if stored is None:  # released: its group was closed meanwhile
            raise GroupNotOpen("the group was closed while reading", replay_key=ctx.key())
        return stored

    @child.handler(ingress_private=True)
    async def forget(ctx: restate.ObjectContext, incarnation: str) -> None:
        """Release the outcome one group incarnation stored; another incarnation's stays."""
        ctx.clear(child_store(incarnation))

    del run, execute, outcome, forget
    return child


def pump_object() -> restate.VirtualObject:
    """`LashPump`, keyed by group incarnation and key: a batched group's children, and its outcome store.

    ``run`` calls every child and, each time it wakes, stores what settled meanwhile and forwards it
    to the group in one ``settle_batch`` call: the single writer then runs once per batch, and while
    it does, the next batch gathers. The store is this object's state (``o{position}``), read in
    bulk by ``outcomes`` and released by one ``forget`` at close.
    """
    pump = restate.VirtualObject(PUMP, invocation_retry_policy=HANDLER_RETRY)

    @pump.handler(ingress_private=True, state_preload=False)
    async def run(ctx: restate.ObjectContext, req: PumpRun) -> None:
        target = handler_for("settle_batch", len(req.children))
        calls: dict[Any, RuntimeEffectEnvelope] = {
            ctx.generic_call(CHILD, "execute", encode(envelope), key=envelope.replay_key): envelope
            for envelope in req.children
        }
        pending: list[Any] = list(calls)
        while pending:
            try:
                done, pending = await restate.wait_completed(*pending)
            except restate.TerminalError as error:
                if not is_cancellation(error):
                    raise
                # Cancelled (a Cancel close, or its caller ended): the SDK has cancelled the calls
                # still pending, and their Cancelled terminals still rank (ADR, "Close deletes…").
                continue
            refs, inline = [], 0
            for future in done:
                envelope = calls[future]
                outcome = await _child_outcome(future, envelope)
                if outcome is None:
                    continue  # a routing miss: no terminal is synthesized, the rank stays unallocated
                assert envelope.membership is not None  # the group stamped every child
                position = envelope.membership.position
                # Stored before the batch is sent, so a rank is never readable before its outcome.
                ctx.set(f"o{position}", outcome, serde=_BYTES)
                carry = len(outcome) <= INLINE_OUTCOME_BYTES and inline + len(outcome) <= BATCH_INLINE_BYTES
                inline += len(outcome) if carry else 0
                refs.append(
                    Ref(position=position, replay_key=envelope.replay_key, outcome=outcome if carry else None)
                )
            if refs:
                await _forward(
                    ctx, req.group_key, target, SettleBatch(incarnation=req.incarnation, refs=refs)
                )

    @pump.handler(kind="shared", ingress_private=True, state_preload=False, output_serde=_BYTES)
    @terminal_errors
    async def outcomes(ctx: restate.ObjectSharedContext, positions: list[int]) -> bytes:
        """The stored outcomes of ``positions``, one JSON array, cut short to stay under the size limit."""
        reads = [ctx.get(f"o{int(position)}", serde=_BYTES) for position in positions[:OUTCOMES_PER_READ]]
        if reads:
            await restate.gather(*reads)
        found: list[bytes] = []
        size = 0
        for read in reads:
            outcome = await read
            if outcome is None:
                if not found:  # ranked, so stored, unless the group was closed meanwhile
                    raise GroupNotOpen(
                        "the group was closed while reading", group_key=group_of_pump(ctx.key())
                    )
                break
            if found and size + len(outcome) > MAX_OUTCOME_BYTES:
                break
            found.append(outcome)
            size += len(outcome)
        return b"[" + b",".join(found) + b"]"

    @pump.handler(ingress_private=True, state_preload=False)
    async def forget(ctx: restate.ObjectContext) -> None:
        ctx.clear_all()

    del run, outcomes, forget
    return pump


async def _child_outcome(future: Any, envelope: RuntimeEffectEnvelope) -> bytes | None:
    """A child call's outcome bytes; None when the child could not be routed (ADR: a 404 is terminal)."""
    try:
        return bytes(await future)
    except restate.TerminalError as error:
        if is_cancellation(error):
            return encode(Cancelled())  # cancelled before it could record its own terminal
        if error.status_code != _NOT_FOUND:
            ended = "child ended without a settlement: %s"
            logs.logger.warning(ended, error.message, extra={"replay_key": envelope.replay_key})
        return None


async def _forward(ctx: restate.ObjectContext, group_key: str, target: str, batch: SettleBatch) -> None:
    """Hand a batch to the group, again if a cancel of the pump interrupted the call (it is idempotent)."""
    while True:
        try:
            await ctx.generic_call(GROUP, target, encode(batch), key=group_key)
            return
        except restate.TerminalError as error:
            if not is_cancellation(error):
                raise


async def _execute(
    ctx: restate.ObjectContext, envelope: RuntimeEffectEnvelope, resolver: GroupExecutors, attempts: int
) -> Outcome:
    command = envelope.command
    try:
        if isinstance(command, Sleep):
            await ctx.sleep(timedelta(milliseconds=command.duration_ms))
            return Ok(value=None)
        if isinstance(command, AwaitEvent):
            awakeable, value = ctx.awakeable(serde=_BYTES)
            ctx.generic_send(SIGNAL, "subscribe", encode(awakeable), key=command.name)
            try:
                return Ok(value=json.loads(await value))
            except restate.TerminalError as error:
                if is_cancellation(error):
                    raise
                return Err(message=error.message, code="rejected")  # the signal was rejected
        return await _run_tool(ctx, envelope, resolver, attempts)
    except restate.TerminalError as error:
        if is_cancellation(error):
            return Cancelled()  # a Cancel loser's terminal still routes through the group for rank
        raise


async def _run_tool(
    ctx: restate.ObjectContext, envelope: RuntimeEffectEnvelope, resolver: GroupExecutors, attempts: int
) -> Outcome:
    command = envelope.command
    assert isinstance(command, ToolCall)

    async def attempt() -> bytes:
        # ADR: each executor is single-execution; every attempt resolves a fresh one.
        executor = resolver.resolve(envelope)
        if executor is None:
            raise restate.TerminalError(f"no executor is registered for tool {command.tool!r}", _NOT_FOUND)
        result = await execute_once(executor)
        if isinstance(result, Transient):
            raise RuntimeError(result.message)  # retried by ctx.run, bounded by max_attempts
        encoded = encode(result)
        if len(encoded) > MAX_OUTCOME_BYTES:
            # Past Restate's message limit the journal entry could never be written and the child
            # would retry forever; the oversized result becomes a terminal error instead.
            too_large = Err(
                message=f"result of {len(encoded)} bytes exceeds {MAX_OUTCOME_BYTES}", code="too_large"
            )
            return encode(too_large)
        return encoded

    options: restate.RunOptions[bytes] = restate.RunOptions(serde=_BYTES, max_attempts=attempts)
    try:
        raw = await ctx.run_typed("execute", attempt, options)
    except restate.TerminalError as error:
        if is_cancellation(error) or error.status_code == _NOT_FOUND:
            # ADR: the engine tier's form of a routing miss is a terminal 404, never a retry, and
            # never a synthesized outcome: the child ends without settling.
            raise
        return Transient(message=error.message).give_up(attempts)
    return msgspec.json.decode(raw, type=Outcome)


def signal_object() -> restate.VirtualObject:
    """`LashSignal`, keyed by event name: the durable-wait service behind `AwaitEvent` children.

    ``emit`` and ``reject`` are public: POST the event's JSON payload to
    ``/LashSignal/{name}/emit`` (or a JSON string message to ``…/reject``) on
    the ingress. An event, once emitted, stays emitted (later waiters settle at
    once) until ``clear`` is called.
    """
    signal = restate.VirtualObject(SIGNAL, invocation_retry_policy=HANDLER_RETRY)

    @signal.handler(ingress_private=True)
    async def subscribe(ctx: restate.ObjectContext, awakeable: str) -> None:
        payload = await ctx.get("payload", serde=_BYTES)
        rejection = await ctx.get("rejection", serde=_BYTES)
        if payload is not None:
            ctx.resolve_awakeable(awakeable, payload, serde=_BYTES)
        elif rejection is not None:
            ctx.reject_awakeable(awakeable, rejection.decode())
        else:
            waiters = await ctx.get("waiters", serde=STRINGS) or []
            ctx.set("waiters", [*waiters, awakeable], serde=STRINGS)

    @signal.handler(accept="*/*")
    async def emit(ctx: restate.ObjectContext, payload: Any) -> None:
        """Fulfil the event with a JSON payload; every waiter, now or later, settles Ok(payload)."""
        body = json.dumps(payload).encode()
        ctx.set("payload", body, serde=_BYTES)
        ctx.clear("rejection")
        for awakeable in await ctx.get("waiters", serde=STRINGS) or []:
            ctx.resolve_awakeable(awakeable, body, serde=_BYTES)
        ctx.clear("waiters")

    @signal.handler()
    async def reject(ctx: restate.ObjectContext, message: str) -> None:
        """Reject the event; every waiter, now or later, settles Err(message, "rejected")."""
        ctx.set("rejection", str(message).encode(), serde=_BYTES)
        ctx.clear("payload")
        for awakeable in await ctx.get("waiters", serde=STRINGS) or []:
            ctx.reject_awakeable(awakeable, str(message))
        ctx.clear("waiters")

    @signal.handler()
    async def clear(ctx: restate.ObjectContext) -> None:
        """Forget the event, so later waiters wait again."""
        ctx.clear_all()

    del subscribe, emit, reject, clear
    return signal
