"""The Restate controller: the contract's three group methods, used inside a caller's handler.

Every durable step goes through the caller's own journal (calls to the group
object, awakeables), so a retried invocation replays the same answers and a
fresh invocation asks the group object again: the object, not this process,
is the rank authority (ADR, "Restate satisfaction").
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec
import restate
from restate.server_context import ServerInvocationContext

from ...contract import (
    AwaitCancelled,
    EffectGroupDefaults,
    GroupExecutor,
    GroupHandle,
    GroupNotOpen,
    InvalidInput,
    LashError,
    LoserPolicy,
    Outcome,
    RuntimeEffectEnvelope,
    RuntimeEffectGroup,
    Settlement,
    SettlementRun,
    canonical_bytes,
    check_await,
    check_child_count,
    check_close,
    check_open_size,
    effective_disposition,
    execute_outcome,
    opens_in_parts,
    require_group,
    require_groups,
    require_ungrouped,
)
from ..child._routing import replaying
from ..group._mode import mode_for
from ..wire._errors import CalledInsideRun, ends_the_invocation, is_kill, raise_typed, typed
from ..wire._formats import written
from ..wire._incarnation import (
    cursor_names,
    opened_since_baseline,
    read_budget,
    reads_ahead,
    registers_wakes_as_needed,
    serves_one_rank,
    watches_its_open,
)
from ..wire._messages import (
    CallerEnded,
    CloseRequest,
    OpenReply,
    OpenRequest,
    Ref,
    WaitReply,
    WaitRequest,
    decode,
    decode_outcome,
    encode,
)
from ..wire._records import BYTES
from ..wire._routes import (
    GROUP_CLOSE,
    GROUP_OPEN,
    GROUP_SAVED,
    GROUP_WAIT,
    Route,
    groups_wired,
)
from ._open_parts import open_in_parts, parts_from

__all__ = ["RestateController"]

_I = TypeVar("_I")
_O = TypeVar("_O")

# How many upcoming ranks a caller registers wakes for at once: a combinator's run that keeps up
# with the settlements then pays no call per rank (a plain await asks the group each time, decision
# 32), and the hot record stays small (decision 16). Also, for a plain await reading ahead (decision
# 134): the ranks it asks the group for, and how far behind the reading what it kept is dropped.
WAKE_WINDOW = 32

# At most this many bytes of outcomes in one read ahead, the rank's own whatever its size (decision
# 134): what a caller that stops reading has read, and journaled, for nothing.
READ_AHEAD_BYTES = 256 * 1024


@dataclass(slots=True)
class _Wakes:
    """Wakes this invocation registered with one incarnation of a group, by rank."""

    incarnation: str
    by_rank: dict[int, Any]


@dataclass(slots=True)
class _ReadAhead:
    """Settlements a plain await read past the rank it served, by rank, with the ref the group gave
    for each, from one incarnation of a group (decision 134)."""

    incarnation: str
    by_rank: dict[int, tuple[Ref, Settlement]]


def inside_run(ctx: restate.Context) -> bool:
    """Whether this code runs inside the action of one of ``ctx``'s own ``ctx.run``.

    The SDK runs each run action it executes in a task of its own, and keeps that task (with a sync
    action, the future of the executor thread running it) in ``ctx.tasks`` until the action ends; it
    sets no flag or context variable of its own while an action runs. So the code is inside an action
    when its task is one of those (an async action awaits in it, on every attempt that runs the
    action), or when it runs on another event loop, or none, while an action of ``ctx`` runs (a
    sync action runs in a thread: whatever event loop drives lash there is not the handler's). A
    handler body, and anything it gathers, runs in other tasks of the handler's loop: never refused.
    """
    # Decision 49: how the SDK (1.3) runs an action is the only signal there is.
    if not isinstance(ctx, ServerInvocationContext):
        return False
    actions = list(ctx.tasks.tasks)  # one C-level copy, safe to take from a sync action's thread
    if not actions:
        return False
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return True  # no event loop in this thread: a sync action's executor thread
    current = asyncio.current_task(loop)
    return any(action is current or action.get_loop() is not loop for action in actions)


class RestateController(EffectGroupDefaults):
    """A `RuntimeEffectController` bound to one handler invocation's context."""

    def __init__(self, ctx: restate.Context, *, groups: bool | None = None) -> None:
        """A controller for the invocation ``ctx`` belongs to. Children are routed by the endpoint
        that runs them, with the resolver it registered: a caller passes none.

        It does groups (`supports_effect_groups()`) when this process bound lash's services with a
        resolver (`lash.app`, `lash.services`), or declared that another deployment of its cluster
        serves them (`lash.use_prefix`); otherwise it refuses the whole group surface. ``groups``
        overrides that answer (``False``: one that refuses the whole surface)."""
        # Routed where the children run, not by the caller: decision 37.
        self._ctx = ctx
        self._groups = groups
        # Wakes this invocation registered, by group: each settle resolves its own.
        self._wakes: dict[str, _Wakes] = {}
        # Groups this invocation opened or reopened, with the recorded child count and declared
        # disposition: a close that can be checked against them cannot be refused, so it need not wait
        # for the object.
        self._declared: dict[str, tuple[int, LoserPolicy]] = {}
        # Groups (key and incarnation) whose handle this invocation saved and told the group of
        # (decisions 45, 78): a namesake opened again under the key is told of its own save.
        self._saved: set[tuple[str, str]] = set()
        # By group key, the incarnation its latest open, reopen or read answered (journaled): what a
        # save names, so that a namesake opened since does not take it for its own.
        self._incarnations: dict[str, str] = {}
        # By group key, whether a save of its handle is told to the group (decision 78): decided from
        # the incarnation its latest open or reopen answered (journaled); never for a baseline group.
        self._records_saves: dict[str, bool] = {}
        # By group key, decided from the incarnation the open or a read answered first (what this
        # invocation's journal holds, as on replay): whether a release since the baseline opened the
        # group, so that a plain await asks as this release does (decisions 96, 132 and 134).
        self._answered_since_baseline: dict[str, bool] = {}
        # By group key: the incarnation whose last answer to this invocation's plain await served a
        # rank (None: it served none), so that the next asks with one wake, not a window (decision 132).
        self._served_by: dict[str, str | None] = {}
        # By group key: what plain awaits read past the rank each served (decision 134). A rank's
        # outcome is never rewritten, so it is served once the group's answer to that rank's own await
        # names the same ref; the answer, not what was read, decides what an await serves (decision 32).
        self._read_ahead: dict[str, _ReadAhead] = {}
        # By group key: the incarnation a first open this invocation sent answered, and that open's
        # end, attached once it answered (decision 144): a kill of the open while it runs kills every
        # child it had started, and nothing but the open's end tells the caller. Dropped once an await
        # sees it end otherwise, or at the close; a killed one stays, so each await that waits fails.
        self._open_ends: dict[str, tuple[str, restate.RestateDurableFuture[Any]]] = {}

    def outside_run(self, what: str) -> None:
        """Refuse `CalledInsideRun` if this is called inside the action of a ``ctx.run`` of this
        invocation: lash dispatches and awaits a group's children from the handler body only, since
        an action's own steps are not journaled one by one. ``what`` names what was called, for the
        message."""
        if inside_run(self._ctx):
            raise CalledInsideRun(what)

    def supports_concurrent_effects(self) -> bool:
        # ADR: each child is an invocation of its own, so a group's children run and settle at once
        # (the Rust SDK's serial `ctx.run` branch, which answered false, is gone).
        return True

    def supports_effect_groups(self) -> bool:
        # ADR: "a resolver is registered", a per-deployment fact established at wiring (decision 47).
        return self._groups if self._groups is not None else groups_wired()

    async def execute_effect(self, envelope: RuntimeEffectEnvelope, executor: GroupExecutor) -> Outcome:
        require_ungrouped(envelope)

        async def once() -> bytes:
            return encode(written(await execute_outcome(executor)))

        options: restate.RunOptions[bytes] = restate.RunOptions(serde=BYTES)
        return decode_outcome(await self._ctx.run_typed("execute_effect", once, options))

    async def _ask(self, route: Route[_I, _O], key: str, request: _I) -> _O:
        return await typed(route.ask(self._ctx, key, request))

    async def open_effect_group(self, group: RuntimeEffectGroup) -> GroupHandle:
        return await self._open(group, reopen_only=False)

    async def reopen_effect_group(
        self, group: RuntimeEffectGroup, *, incarnation: str | None = None
    ) -> GroupHandle:
        """Reopen ``group``, refusing `GroupNotOpen` if it is not recorded: a resume never starts a
        closed group over; nor, given the resumed cursor's ``incarnation``, reads a group opened
        under the key since."""  # decisions 41 and 124
        return await self._open(group, reopen_only=True, reopens=incarnation)

    async def _open(
        self, group: RuntimeEffectGroup, *, reopen_only: bool, reopens: str | None = None
    ) -> GroupHandle:
        self.outside_run("reopen_effect_group" if reopen_only else "open_effect_group")
        key = str(require_group(group).key)
        require_groups(self.supports_effect_groups(), group_key=key)
        # The open request carries every child: one past Restate's message limit would be refused
        # by the server at every retry of this invocation, so it is refused here, before anything
        # is journaled (no awakeable, no send).
        check_open_size(group, reopen=reopen_only)
        # A first open also registers wakes for the first ranks, saving a combinator's run's awaits a
        # round trip each; a reopen's group ignores them (it keeps the wakes it holds), but the caller
        # cannot tell the two apart before the answer, and what it journals here must replay the same.
        # A resume of a cursor naming its group (decision 124) can: that group is recorded, or the
        # resume is refused, and it sends none (decision 132).
        fresh = {} if reopen_only and reopens is not None else self._fresh_wakes(0, len(group))
        # ADR: resolve all N before recording (check that each child can be run here, refusing the whole
        # open if one cannot): the group object does, where the children run (decision 37), and only it
        # knows whether the group is recorded already (a reopen refuses nothing).
        answer, opened = self._ctx.awakeable(serde=BYTES)
        # A bounded group opens in one message (check_open_size refused it otherwise); a resume keeps
        # the bound the group was opened with, so it reopens in parts a group opened in parts.
        if group.max_in_flight is None:
            in_parts = opens_in_parts(group) or len(group) >= parts_from()
        else:
            in_parts = reopen_only and opens_in_parts(group)
        named = msgspec.UNSET if reopens is None else reopens  # unset: the open's bytes are as before
        if in_parts:
            # Decision 65: too large for one message. The children go first, one part per slice, to
            # the pumps that will run them; then the open, with the shape alone.
            sent = await open_in_parts(
                self._ctx, group, key, answer, list(fresh), reopen_only=reopen_only, reopens=named
            )
        else:
            request = OpenRequest(
                reply_to=answer,
                shape=group.shape(),
                children=[canonical_bytes(c) for c in group.children],
                caller=self._ctx.request().id,
                wakes=list(fresh),
                reopen_only=reopen_only,
                window=msgspec.UNSET if group.max_in_flight is None else group.max_in_flight,
                reopens=named,
            )
            # Sent, answered on an awakeable (decision 25): this invocation's cancellation cannot cut
            # the open short between dispatching the children and recording how to cancel them.
            sent = GROUP_OPEN.send(self._ctx, key, request)
        reply = decode(await typed(opened), OpenReply)
        self._incarnations[key] = reply.incarnation
        self._records_saves[key] = opened_since_baseline(reply.incarnation)  # as the journal says
        self._answered_since_baseline.setdefault(key, serves_one_rank(reply.incarnation))
        if not reply.reopened:
            self._wakes[key] = _Wakes(reply.incarnation, dict(enumerate(fresh.values(), start=1)))
        elif (registered := self._wakes.get(key)) is not None and registered.incarnation != reply.incarnation:
            del self._wakes[key]  # registered with a closed namesake, which rejected them (decision 32)
        # Open or reopen, the recorded shape is this group's (the reopen was fenced on it).
        self._declared[key] = (len(group), group.disposition)
        if not reply.reopened and watches_its_open(reply.incarnation):
            # Decision 144: how the open ends, awaited beside the wakes. After the answer, journaled:
            # a caller of a group the baseline opened attaches to nothing, as its journal holds.
            ended = self._ctx.attach_invocation(await sent.invocation_id(), serde=BYTES)
            # Keyed by the reply's incarnation: a cursor names the same (`cursor_names`, for every
            # incarnation that `watches_its_open`), which `_open_end_of` matches.
            self._open_ends[key] = (reply.incarnation, ended)
        return GroupHandle.opened(group, incarnation=cursor_names(reply.incarnation))  # decision 124

    def handle_saved(self, handle: GroupHandle) -> None:
        """This invocation saved ``handle`` for a continuation: tell the group.

        The group records the save, so it never reclaims the group (whoever holds the handle may
        resume it), and learns how this invocation ends: once it has returned normally, the group is
        parked (a continuation holds its cursor), not orphaned. One one-way message per group and
        invocation, on the save path only (a combinator that closes its group never saves).
        """
        # Parked or orphaned: decision 45; recorded at the save: decision 78.
        self.outside_run("handle_saved")
        key = handle.group_key
        # A group the baseline opened records no save: its `save()` journaled nothing, and a caller
        # that saved one before an upgrade replays its journal on this code (decision 78).
        # "": this invocation closed the group since (a handle restored alone and never read here
        # returns below). Sent all the same, as callers journaled it (decision 140).
        incarnation = self._incarnations.get(key, "")
        if (key, incarnation) in self._saved or not self._records_saves.get(key, False):
            return
        saver = CallerEnded(caller=self._ctx.request().id, incarnation=incarnation)
        GROUP_SAVED.send(self._ctx, key, saver)
        self._saved.add((key, incarnation))

    def _fresh_wakes(self, consumed: int, child_count: int, window: int = WAKE_WINDOW) -> dict[str, Any]:
        """Fresh awakeables for ranks ``consumed + 1`` … (at most ``window``), by awakeable id."""
        fresh = {}
        for _ in range(min(window, child_count - consumed)):
            awakeable, woken = self._ctx.awakeable(serde=BYTES)
            fresh[awakeable] = woken
        return fresh

    def settlement_run(self) -> SettlementRun:
        return _Run(self)

    async def await_next_settlement(
        self, handle: GroupHandle, cancel: Awaitable[object] | None = None
    ) -> Settlement:
        self.outside_run("await_next_settlement")
        if self.replaying() and self._answered_since_baseline.get(handle.group_key) is not True:
            # Unless the journal shows this release's group (its open's reply, or a read): an attempt
            # of the baseline may have written what goes on past this await, checking `cancel` only
            # once it waited, so its replay does as it did. This release's attempts checked first, and
            # so do their replays: a refusal a handler caught journaled nothing, and skipping it would
            # read the next await's rank.
            return await self._next(handle, cancel, {}, plain=True)
        # Decision 109: every check before anything is journaled, so a refusal does not depend on
        # what the group holds; and one await of a cursor at a time.
        check_await(handle, self.supports_effect_groups(), cancel)
        if cancel is not None:
            _durable(cancel)  # refused here, before anything is journaled; `_woken` converts it again
        with handle.awaiting():
            # Decision 32: answered by the group as it stands now, never from what an earlier await read.
            return await self._next(handle, cancel, {}, plain=True)

    def replaying(self) -> bool:
        """Whether this invocation replays a journal that goes on past this point (what an earlier
        run, perhaps of an earlier release, sent)."""
        return replaying(self._ctx)

    async def _next(
        self,
        handle: GroupHandle,
        cancel: Awaitable[object] | None,
        held: dict[int, Settlement],
        *,
        plain: bool,
    ) -> Settlement:
        """Serve rank ``consumed + 1`` from ``held`` (what this await's run already read), else from
        the group (ADR, "Restate satisfaction"). ``plain`` (a plain await): ask the group, then
        wait on the rank's wake if it has not settled (decisions 32, 96). Otherwise (a combinator's
        run): wait on the wake the open registered for the rank, asking only when none is held."""
        self.outside_run("await_next_settlement")
        check_await(handle, self.supports_effect_groups())
        rank = handle.next_rank
        while rank not in held:
            wakes = self._wakes.get(handle.group_key)
            if plain or wakes is None or rank not in wakes.by_rank:
                wakes = await self._ask_group(handle, held, plain=plain)
            if rank not in held:
                woken = wakes.by_rank.pop(rank, None)
                if woken is None:
                    continue  # an await of a copy of this handle took the rank's wake meanwhile: ask again
                try:
                    reply = await self._woken(handle, woken, cancel)
                except BaseException:
                    # Cancelled, a cancel that failed, a task cancelled: a wake that has not completed is
                    # still registered and ours, for the next await (which registers none more); one that
                    # completed (rejected by a close, say) is not waited on again: the next await asks.
                    if not woken.is_completed():
                        wakes.by_rank[rank] = woken
                    raise
                await self._read(handle, reply, held)
            else:
                wakes.by_rank.pop(rank, None)  # the group served the rank: its wake carries nothing new
            break
        settlement = held[rank]
        handle.advance()
        return settlement

    async def _ask_group(self, handle: GroupHandle, held: dict[int, Settlement], *, plain: bool) -> _Wakes:
        """Read into ``held`` the ranks from ``consumed + 1`` the group holds (``plain``, a plain
        await of this release's group: the first, served from or beside what is read ahead; a
        combinator's run: every one); if it holds none yet, make sure a wake of the group's current
        incarnation is registered for the next rank."""
        key, rank = handle.group_key, handle.next_rank
        # What the journal held before this ask decides what it asks (a replay asks alike); the
        # reply decides what is read and kept. A caller of a baseline group asks as it did.
        this_release = plain and self._answered_since_baseline.get(key, False)
        # Decision 134: a plain await of a group this release opened, with nothing read ahead for its
        # rank, asks for the ranks the group holds from its own (up to a window) and reads ahead the
        # outcomes of those after it its store keeps; one with its rank read ahead asks for that alone.
        reading_ahead = this_release and reads_ahead(self._incarnations.get(key, ""))
        kept = self._read_ahead.get(key)
        rank_read_ahead = (
            reading_ahead
            and kept is not None
            and kept.incarnation == self._incarnations.get(key)
            and rank in kept.by_rank
        )
        # Asked again only after wakes a closed namesake rejected, or a rank read ahead the group
        # did not hold (defensive: it holds it, or refuses).
        while True:
            wakes = self._wakes.get(key)
            # Decision 132: a plain await after one the same group served is likely served too, which
            # no wake is needed for; one wake covers the rank if it is not. So is the first a caller
            # that (re)opened the group asks it (decision 134: a resumed group has often settled past
            # its cursor), and the next, after a wait, sends the window. A combinator's run reads
            # every rank held at once, so its next rank is not held yet: the window, as before.
            served_by = self._served_by.get(key)
            current = self._incarnations.get(key, "")
            one_wake = (
                this_release
                and registers_wakes_as_needed(current)
                and (key not in self._served_by or served_by == current)
            )
            fresh = (
                self._fresh_wakes(handle.consumed, handle.child_count, 1 if one_wake else WAKE_WINDOW)
                if not rank_read_ahead and (wakes is None or rank not in wakes.by_rank)
                else {}  # a wake held already, or a rank read ahead (held: served, or the group is closed)
            )
            request = WaitRequest(consumed=handle.consumed, child_count=handle.child_count, wakes=list(fresh))
            if handle.incarnation is not None:  # decision 124: not a group opened under the key since
                request = msgspec.structs.replace(request, incarnation=handle.incarnation)
            if this_release:
                # Decision 96: a plain await serves one rank, and the next reads the group again
                # (decision 32): the ranks after it, and their outcomes, would be read and dropped.
                # Decision 134: the window when nothing is read ahead for the rank, to read ahead.
                window = WAKE_WINDOW if reading_ahead and not rank_read_ahead else 1
                request = msgspec.structs.replace(request, at_most=window)
            reply = await self._ask(GROUP_WAIT, key, request)
            if reply.incarnation:  # an earlier release's group may answer none
                self._incarnations[key] = reply.incarnation
            # A caller of the baseline's groups asks as the baseline did (what its journal holds).
            self._answered_since_baseline.setdefault(key, serves_one_rank(reply.incarnation))
            if plain:
                self._served_by[key] = reply.incarnation if reply.refs else None
            if reply.refs:
                if reading_ahead:
                    await self._serve_or_read_ahead(handle, reply, held)
                else:
                    await self._read(handle, reply, held)  # recorded already: read from its stores
                    first_read = plain and self._answered_since_baseline[key]  # set by this reply
                    if first_read and reads_ahead(reply.incarnation):
                        # A reader's first read, which asked for every rank held (decision 96): the
                        # outcomes it read past its own are kept (a window of them), not read again.
                        kept = self._pruned_read_ahead(key, reply.incarnation, rank)
                        self._move_to_read_ahead(kept, list(enumerate(reply.refs[1:], start=rank + 1)), held)
                # Served: any fresh wakes sent were not registered (the group registers them only when
                # it serves nothing), so they are not kept.
                return wakes if wakes is not None else _Wakes(reply.incarnation, {})
            if rank_read_ahead:
                # Unreachable unless a namesake the cursor does not name answered (defensive): asked
                # again as a read of a rank nothing was read ahead for, with its wake.
                self._read_ahead.pop(key, None)
                rank_read_ahead = False
                continue
            if fresh:
                if wakes is None or wakes.incarnation != reply.incarnation:
                    wakes = self._wakes[key] = _Wakes(reply.incarnation, {})
                wakes.by_rank.update(enumerate(fresh.values(), start=rank))
                return wakes
            assert wakes is not None
            if wakes.incarnation == reply.incarnation:
                return wakes
            # Registered with a closed namesake, which rejected them: register anew. Only if still the
            # ones read before the ask: an await of a copy of the cursor may have replaced them since.
            if self._wakes.get(key) is wakes:
                del self._wakes[key]

    async def _woken(self, handle: GroupHandle, woken: Any, cancel: Awaitable[object] | None) -> WaitReply:
        """The wake's answer, once it comes; `AwaitCancelled` if ``cancel`` completes before it, and
        `GroupNotOpen` if the group's open, still running, is killed before either (decision 144).
        Of those completed when a wait returns, the wake wins, then the cancel, then the open's end;
        which have completed is as this invocation's journal holds it, so a replay decides alike."""
        key = handle.group_key
        # An SDK future (`wait_completed` takes no other), whose completion is as the journal holds it.
        cancelled: Any = None if cancel is None else _durable(cancel)
        try:
            while (open_end := self._open_end_of(handle)) is not None or cancelled is not None:
                await restate.wait_completed(*(f for f in (woken, cancelled, open_end) if f is not None))
                if woken.is_completed():
                    break
                if cancelled is not None and cancelled.is_completed():
                    await cancelled  # a cancel that failed raises its own error
                    # ADR: cancellation leaves cursor and durable rank untouched.
                    raise AwaitCancelled.at_rank(handle.next_rank, group_key=key)
                assert open_end is not None  # the one other future waited on
                await self._check_open_end(key, open_end)
            return decode(await woken, WaitReply)
        except restate.TerminalError as error:
            raise_typed(error)
            raise

    async def _check_open_end(self, key: str, open_end: restate.RestateDurableFuture[Any]) -> None:
        """The open of ``key`` this invocation attached to has ended: killed, it raises `GroupNotOpen`
        (so does every later await of the group that waits on a wake); ended otherwise (returned, or
        cancelled: what it had started runs on), it is not waited on again."""
        try:
            await open_end
        except restate.TerminalError as error:
            # Restate's kill kills each call and one-way message in the killed invocation's journal
            # too: the group's children's runs, or its pump (decision 144).
            if is_kill(error):
                raise GroupNotOpen.open_killed(group_key=key) from None
        # Only if still this end: an await of a copy of the cursor may have dropped it already.
        if (ending := self._open_ends.get(key)) is not None and ending[1] is open_end:
            del self._open_ends[key]

    def _open_end_of(self, handle: GroupHandle) -> restate.RestateDurableFuture[Any] | None:
        """The end of the open of ``handle``'s group, while this invocation awaits it: none for a group
        opened under the key since this invocation's open (a namesake's cursor), nor a baseline one."""
        ending = self._open_ends.get(handle.group_key)
        return ending[1] if ending is not None and ending[0] == handle.incarnation else None

    async def _serve_or_read_ahead(
        self, handle: GroupHandle, reply: WaitReply, held: dict[int, Settlement]
    ) -> None:
        """Serve the rank ``reply`` answers first from what an earlier await read ahead, if the group
        gave the same ref for it then; else read its outcome, and those of the ranks after it the
        reply names that the same store keeps, in one read of at most `READ_AHEAD_BYTES` (the first
        whatever its size), keeping the latter for the awaits to come."""
        key, rank = handle.group_key, handle.next_rank
        kept = self._pruned_read_ahead(key, reply.incarnation, rank)
        ref_and_settlement = kept.by_rank.get(rank)
        # A wait's answer carries no outcome (only a wake does), so its refs compare whole.
        if ref_and_settlement is not None and ref_and_settlement[0] == reply.refs[0]:
            held[rank] = ref_and_settlement[1]
            return
        mode = mode_for(reply.mode)
        # One read: a paged group's ranks spread over its slices' pumps, each a store of its own (the
        # rank served is read whatever its store; a direct group's children each keep their own).
        together = [
            (at, ref)
            for at, ref in enumerate(reply.refs, start=rank)
            if at == rank or mode.same_store(key, reply.incarnation, reply.refs[0], ref)
        ]
        # Refs of ranks that need not follow each other (what was read ahead is left out): `ranks=`
        # numbers them, where a reply's refs are consecutive ranks.
        one_read = msgspec.structs.replace(reply, refs=[ref for _, ref in together])
        await self._read(handle, one_read, held, READ_AHEAD_BYTES, ranks=[at for at, _ in together])
        self._move_to_read_ahead(kept, together[1:], held)

    def _pruned_read_ahead(self, key: str, incarnation: str, rank: int) -> _ReadAhead:
        """What plain awaits of ``key``'s ``incarnation`` read ahead, less the ranks a window or more
        behind ``rank`` (kept until then: another cursor of the group in this invocation may be
        behind this one)."""
        kept = self._read_ahead.get(key)
        if kept is None or kept.incarnation != incarnation:
            kept = self._read_ahead[key] = _ReadAhead(incarnation, {})
        for behind in [at for at in kept.by_rank if at <= rank - WAKE_WINDOW]:
            del kept.by_rank[behind]
        return kept

    @staticmethod
    def _move_to_read_ahead(
        kept: _ReadAhead, ranked: list[tuple[int, Ref]], held: dict[int, Settlement]
    ) -> None:
        """Move from ``held`` into ``kept`` the settlements of the ``ranked`` refs it holds (up to the
        first it does not), for the awaits to come: at most a window of them."""
        for at, ref in ranked[: WAKE_WINDOW - 1]:
            if (settlement := held.pop(at, None)) is None:
                break
            kept.by_rank[at] = (ref, settlement)

    async def _read(
        self,
        handle: GroupHandle,
        reply: WaitReply,
        held: dict[int, Settlement],
        budget: int | None = None,
        *,
        ranks: list[int] | None = None,
    ) -> None:
        """Outcomes of the ranks ``reply`` names (``ranks``, consecutive from the cursor's next if
        none): inline from the wake, else from the group's mode's stores (at most ``budget`` bytes,
        by default its group's `read_budget`, the first whatever its size), up to the first not read."""
        missing = [ref.position for ref in reply.refs if ref.outcome is None]
        if budget is None:
            budget = read_budget(reply.incarnation)  # the reply is journaled: a replay asks alike
        try:
            stored = await mode_for(reply.mode).read(self._ctx, handle.group_key, reply, budget)
        except restate.TerminalError as error:
            raise_typed(error)  # a store released under the reader: its group was closed meanwhile
            raise
        found = dict(zip(missing, stored, strict=False))
        first = handle.consumed + 1
        for rank, ref in zip(ranks or range(first, first + len(reply.refs)), reply.refs, strict=True):
            raw = ref.outcome if ref.outcome is not None else found.get(ref.position)
            if raw is None:
                break  # past what one reply could carry: the next await reads on from here
            held[rank] = Settlement(
                rank=rank, position=ref.position, replay_key=ref.replay_key, outcome=decode_outcome(raw)
            )

    def ends_invocation(self, error: BaseException) -> bool:
        """Whether ``error`` ends this invocation: a combinator that meets it closes its group."""
        return ends_the_invocation(error)

    async def close_effect_group(self, handle: GroupHandle, disposition: LoserPolicy | None = None) -> None:
        """Close the group; durably sent, not awaited, when nothing about it can be refused.

        A close of a group this invocation opened, with its child count and a disposition that
        narrows (or keeps) the declared one, is a one-way message in the caller's journal: Restate
        delivers it exactly once, and after any earlier message of this invocation to the group, so
        it is issued durably when this returns, and the caller does not wait for the losers. Any
        other close is a call, so a refusal (widening, wrong handle) reaches the caller typed.
        """
        self.outside_run("close_effect_group")
        disposition = check_close(handle, disposition, self.supports_effect_groups())
        key = handle.group_key
        known = self._incarnations.get(key)  # the one this invocation opened or read last
        if handle.incarnation is not None and known is not None and handle.incarnation != known:
            # Decision 124: the cursor's group is closed already; the group this invocation reached
            # under the key since is another, which this close leaves as it is, and what is known of it.
            return
        request = CloseRequest(child_count=handle.child_count, disposition=disposition)
        incarnation = known if known is not None else handle.incarnation
        if incarnation is not None and opened_since_baseline(incarnation):
            # Decision 113: it closes the group this invocation opened or read, not a namesake
            # opened under the key since. A baseline group's close journaled none: it sends none.
            request = msgspec.structs.replace(request, incarnation=incarnation)
        declared = self._declared.pop(key, None)  # closed: what this invocation opened under the key
        if _cannot_refuse(declared, handle, disposition):
            GROUP_CLOSE.send(self._ctx, key, request)
        else:
            await self._ask(GROUP_CLOSE, key, request)
        self._wakes.pop(key, None)
        self._incarnations.pop(key, None)  # closed: a later close of the key names what it reads then
        self._read_ahead.pop(key, None)
        self._open_ends.pop(key, None)
        # The group holds each saver from `saved`; its close cancels that hold with its other watches.
        self._saved = {saved for saved in self._saved if saved[0] != key}


def _cannot_refuse(
    declared: tuple[int, LoserPolicy] | None, handle: GroupHandle, disposition: LoserPolicy | None
) -> bool:
    """Whether the group this invocation opened (``declared``: its child count and disposition; None
    if it opened none under the key) would accept this close (decision 21)."""
    if declared is None:
        return False
    count, policy = declared
    try:
        check_child_count(count, handle.child_count, group_key=handle.group_key)
        effective_disposition(policy, disposition, group_key=handle.group_key)
    except LashError:
        return False  # the group refuses it: a call, so the refusal reaches the caller typed
    return True


def _durable(cancel: Awaitable[object]) -> restate.RestateDurableFuture[Any]:
    """``cancel`` as the durable future `restate.wait_completed` takes, or `InvalidInput`."""
    if not isinstance(cancel, restate.RestateDurableFuture):
        given = type(cancel).__name__
        hint = ": give its .value()" if isinstance(cancel, restate.DurablePromise) else ""
        raise InvalidInput(
            "on Restate, cancel must be a durable future (ctx.sleep(...), a call's future, "
            f"ctx.promise(name).value(), an awakeable's), not a {given}{hint}"
        )
    return cancel


@dataclass(frozen=True, slots=True)
class _Run:
    """A combinator's run (decision 32): its awaits are served from what the open and its own reads
    delivered, with no read of the group per await; a rank it read once is not read again."""

    controller: RestateController
    held: dict[int, Settlement] = field(default_factory=dict)

    async def next(self, handle: GroupHandle) -> Settlement:
        # A resume re-reads ranks from 1 on a second handle: ranks, not handles, key what is held.
        return await self.controller._next(handle, None, self.held, plain=False)
