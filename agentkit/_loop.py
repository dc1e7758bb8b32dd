"""The one loop body behind every tool loop: fresh, resumed, on a journal or on Temporal.

A run enters `run_core` with its state (`RunCheckpoint`: a fresh run's is empty, a resumed
run's is the one it stopped with) and leaves with the state it reached, in its result. `_rounds`
reads in one screen; each step of a round is a method of `_Run`: `ask` the executor, check for
a `repeat`, `gate` the call by tier, `dispatch` it to the tool, and `finish` with an
ending. Each step appends one entry to the state (`_Run.append`) and the views the executor and
the observers are shown follow from the same entries: a resumed run rebuilds them from its state
with `fold`, so a live run and a resumed one cannot disagree. Model calls and events go through
the run's `RunSession`; tools run through `agentkit._invoke`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import itertools
import time
import typing
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from pydantic import BaseModel, TypeAdapter

from agentkit._agent import ASKING, PriorCall, ToolAgent, ToolRoundInfo
from agentkit._cache import kept_on
from agentkit._calls import PROPOSED_NOTE, take_calls
from agentkit._cites import as_answer
from agentkit._codec import Codec, Unencodable
from agentkit._config import LoopConfig
from agentkit._context import SummaryCutOff
from agentkit._copy import owned
from agentkit._cost import by_model_text, check_priced, round_cost, unpriced_error
from agentkit._degeneration import SameFunc
from agentkit._deltas import StepDeltas
from agentkit._events import (
    Continued,
    Decided,
    RoundStarted,
    ToolCallStarted,
    ToolResultReturned,
    status_label,
)
from agentkit._grants import Grant, Grants, grant_actor
from agentkit._invoke import Invocation, invoke, missing_tier
from agentkit._observe import Observer, ToolInvocation, deliver_checkpoint, wants_checkpoints, wrapping
from agentkit._outcome import Ending, Outcome, StopReason
from agentkit._proposals import ProposedAction
from agentkit._provenance import Tracker, run_provenance, task_source
from agentkit._results import RoundRecord, TieredLoopResult
from agentkit._session import Reply, RunSession
from agentkit._state import (
    DecisionEntry,
    EndEntry,
    RoundEntry,
    RoundOutcome,
    RunCheckpoint,
    comparator_name,
    json_text,
    made,
)
from agentkit._step import ToolStep, step_answer
from agentkit._structured import StructuredCaller
from agentkit._tiers import Tier
from agentkit._toolbox import Toolbox
from agentkit._tools import Tool, declared_tier
from agentkit._usage import ByModel, Usage, counting_models, merged_by_model, usage_counts, usage_of_counts
from agentkit._views import Views
from agentkit.errors import AgentkitError, ToolError, ToolTimeout

if typing.TYPE_CHECKING:
    from agentkit._approval import Approval, Rejection


CLOSABLE = frozenset({StopReason.ROUND_CEILING, StopReason.BUDGET_EXHAUSTED, StopReason.DEGENERATION})
"""Endings of a run with an answer schema that get a closing round (`LoopConfig.closing_round`)."""

AskGrant = Callable[[ProposedAction[Any]], Awaitable[Grant | None]]
"""How a loop asks which standing grant approves a proposal (counting its use), when not from its `Grants`."""

RunApproved = Callable[[Any, Tool[Any, Any], Any], Awaitable["Sequence[Any] | Rejection[Any]"]]
"""How a resumed run executes an approved call: `(approval, tool, ctx) -> batch` (the journal claims it), or
the `Rejection` the call got instead (decided otherwise before it ran): the run settles that."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Bound:
    """A loop's wiring, bound once: what every run (fresh or resumed) of it shares."""

    caller: StructuredCaller
    agent: ToolAgent[Any, Any, Any]
    box: Toolbox
    config: LoopConfig
    same: SameFunc[Any] | None
    observers: tuple[Observer, ...]
    may_propose: bool
    codec: Codec
    grants: Grants | None = None
    """Standing grants: a proposal one of them matches is approved by it and runs (`agentkit._grants`)."""
    ask_grant: AskGrant | None = None
    """Where the grant for a proposal is asked instead of `grants` (the Temporal workflow: an activity whose
    answer its history keeps, so a replay never counts a use again)."""

    async def grant_for(self, proposal: ProposedAction[Any]) -> Grant | None:
        """The standing grant that approves `proposal`, its use counted; `None`: it waits for a person."""
        if self.ask_grant is not None:
            return await self.ask_grant(proposal)
        return None if self.grants is None else self.grants.use(proposal)


@dataclass(frozen=True, slots=True)
class _Round:
    """One round's model call: what every entry of the round starts with."""

    round: int
    reply: Reply[Any]
    schema: type[BaseModel]
    rationale: str = ""
    closing: bool = False
    position: int | None = None
    """In a step of several calls: the call's place in the step (`agentkit._calls`)."""
    by_model: str | None = None
    """The round's usage by model, when it asked several (`RoundEntry.by_model`)."""

    def traced(self, entry: RoundEntry, args: BaseModel | None, batch_size: int, usage: Usage) -> RoundRecord:
        """The round's record in the result's trace (its typed args, which the entry holds as JSON); `usage`: the
        usage its entry carries (a step of several calls counts the step's once)."""
        outcome = entry.outcome
        return RoundRecord(
            round=self.round,
            done=outcome is RoundOutcome.DONE,
            rationale=self.rationale,
            tool_name=entry.tool,
            call=args,
            tier=entry.tier,
            executed=outcome is RoundOutcome.RAN,
            proposed=outcome is RoundOutcome.PROPOSED,
            batch_size=batch_size,
            observation=entry.observation if outcome in (RoundOutcome.RETRIED, RoundOutcome.REFUSED) else None,
            error=entry.error,
            llm_seconds=self.reply.seconds,
            tool_seconds=entry.tool_seconds,
            usage=usage,
            reasoning=self.reply.reasoning,
        )


def schema_digest(schema: type[BaseModel]) -> str:
    """SHA-256 of the JSON schema a step model gives the model (once per model, kept on it; the latest one also
    at hand, without the cache's lock: a run asks with the same step model round after round)."""
    latest = _latest_digest[0]
    if latest is not None and latest[0]() is schema:
        return latest[1]
    digest: str = kept_on(schema, "schema digest", lambda: _digest(schema))
    _latest_digest[0] = (weakref.ref(schema), digest)
    return digest


_latest_digest: list[tuple[weakref.ref[type[BaseModel]], str] | None] = [None]
"""The step model last digested (weakly: a model made per request goes with its run), and its digest; replaced
whole, so a thread reads one pair or the other."""


def _digest(schema: type[BaseModel]) -> str:
    return hashlib.sha256(json_text(schema.model_json_schema()).encode()).hexdigest()


def _answer_adapter(answer: type[Any]) -> TypeAdapter[Any]:
    adapter: TypeAdapter[Any] = kept_on(answer, "answer adapter", lambda: TypeAdapter(answer))
    return adapter


class _Run:
    """One run of a bound loop: its state, the views derived from it, and the steps of a round."""

    def __init__(
        self,
        bound: Bound,
        session: RunSession,
        ctx: object,
        state: RunCheckpoint,
        decisions: Sequence[tuple[RoundEntry, Approval[Any] | Rejection[Any]]] = (),
        run_approved: RunApproved | None = None,
    ) -> None:
        self.bound, self.session, self.ctx, self.state = bound, session, ctx, state
        self.config, self.box, self.codec = bound.config, bound.box, bound.codec
        self.decisions, self.run_approved = decisions, run_approved
        progress = state.progress
        self.started = time.monotonic() - progress.elapsed
        self.largest_round_tokens = progress.largest_round_tokens
        self.rounds = progress.rounds
        observers = session.observers
        watching = any(o.sees_calls for o in observers)
        self.views = Views(self.config, self.codec, observers=bool(observers), watching=watching)
        self.proposals: list[ProposedAction[Any]] = []
        """This leg's proposals."""
        self.trace: list[RoundRecord] = []
        """This leg's rounds."""
        self.keepers = tuple(o for o in session.observers if wants_checkpoints(o))
        """The observers that take the state at the end of each round (the journal's, to recover a crashed run)."""
        self.provenance = Tracker.start(self.config.provenance, self.box.tools, task_source(ctx), self.config.autonomy)
        """Which calls brought untrusted content in, folded from the state's entries (`agentkit._provenance`)."""
        self.provenance.catch_up(state.entries)
        self.answer: Any = None
        self.answer_from_closing_round = False
        self.step_deltas = StepDeltas.of(self.box.answer)
        """How a streamed step of this run becomes delta events (its answer type's listener class)."""
        self.repeated: PriorCall[Any] | None = None
        """The call that repeated an earlier one and ended the run in a stalemate (its closing round names it)."""
        self.charged = progress.rounds
        """The last round whose reply's usage an entry carries: a step of several calls records its usage once."""
        self.deferred: list[tuple[int, PriorCall[Any], dict[str, Any]]] | None = None
        """While a step of several calls runs (`agentkit._calls`): its calls, to join the views in the step's
        order once it is through (`show`); `None`: each joins at once."""
        self.cost: Decimal | None = None
        """What the run's rounds cost so far (`LoopConfig.prices`); `None` without prices or with a round unpriced."""
        self.unpriced: str | None = None
        """The model of the first round the price table has no price for (under a `cost_budget`, the run stops)."""
        self.largest_round_cost = Decimal(0)
        self.summary_models: ByModel | None = None
        """What the summarizer's runs spent this round, by model (taken with the views' summary usage)."""
        if self.config.prices is not None:
            self.cost = Decimal(0)
            for entry in state.entries:
                if isinstance(entry, RoundEntry):
                    self.priced(entry)

    def priced(self, entry: RoundEntry) -> None:
        """Add a round's cost to the run's: each model's share at its price (`round_cost`)."""
        prices = self.config.prices
        if prices is None or self.cost is None:
            return
        cost = round_cost(prices, self.session.role, entry.model, usage_of_counts(entry), entry.by_model)
        if isinstance(cost, str):
            self.cost, self.unpriced = None, cost
            return
        self.cost += cost
        self.largest_round_cost = max(self.largest_round_cost, cost)

    def remaining(self) -> float | None:
        if self.config.deadline is None:
            return None
        return self.config.deadline - self.elapsed()

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def limit_reached(self, *, closing: bool = False) -> Ending | None:
        """The deadline passed, or the next round would not fit the budget; a tool round also
        leaves room for the closing round when there will be one."""
        remaining = self.remaining()
        if remaining is not None and remaining <= 0:
            return Ending(None, StopReason.DEADLINE)
        budget = self.config.token_budget
        rounds = 2 if self.box.closing_model is not None and self.config.closing_round and not closing else 1
        if budget is not None and self.session.usage.total_tokens + rounds * self.largest_round_tokens > budget:
            return Ending(None, StopReason.BUDGET_EXHAUSTED)
        money = self.config.cost_budget
        if money is not None and self.cost is None and self.unpriced is not None:
            # A round that cannot be priced leaves no cost to keep the budget by: the run stops, never runs unkept.
            return Ending(Outcome.ERROR, StopReason.BUDGET_EXHAUSTED, unpriced_error(self.unpriced))
        if money is not None and self.cost is not None and self.cost + rounds * self.largest_round_cost > money:
            return Ending(None, StopReason.BUDGET_EXHAUSTED)
        return None

    def append(self, entry: RoundEntry | DecisionEntry | EndEntry) -> None:
        """Add one entry to the state (the only way the state changes), its provenance stamped on it."""
        entry = self.provenance.stamp(entry)
        self.state = self.state.appended(entry)
        self.provenance.absorb(len(self.state.entries) - 1, entry)

    def record(
        self,
        this: _Round,
        outcome: RoundOutcome,
        *,
        tool: str | None = None,
        args: BaseModel | None = None,
        tier: Tier | None = None,
        batch: Sequence[Any] = (),
        encoded: str | None = None,
        tool_seconds: float = 0.0,
        observation: str | None = None,
        repeats: int | None = None,
        proposed_at: str | None = None,
        call_digest: str | None = None,
        answer: str | None = None,
        error: str | None = None,
    ) -> RoundEntry:
        """Append the round's entry, and its record to the trace. Of a step of several calls, the first entry
        recorded carries the reply's usage and seconds; the others none."""
        reply, summarized = this.reply, self.views.take_summary()
        usage = reply.usage
        charged = self.charged == this.round and this.position is not None
        self.charged = this.round
        counted = Usage() if charged else usage
        entry = made(
            RoundEntry,
            round=this.round,
            outcome=outcome,
            closing=this.closing,
            model=reply.model,
            rationale=this.rationale,
            tool=tool,
            tier=tier,
            args=None if args is None else self.codec.encode_args(args),
            batch=encoded,
            summary=None if summarized is None else summarized[0],
            summarized=None if summarized is None else summarized[1],
            prompt=reply.prompt,
            schema_digest=schema_digest(this.schema),
            media=reply.media,
            **usage_counts(counted),
            by_model=None if charged else this.by_model,
            reasoning=None if charged else reply.reasoning,
            llm_seconds=0.0 if charged else reply.seconds,
            tool_seconds=tool_seconds,
            elapsed=self.elapsed(),
            observation=observation,
            repeats=repeats,
            proposed_at=proposed_at,
            call_digest=call_digest,
            answer=answer,
            error=error,
            position=this.position,
            trace=self.session.traceparent() if self.session.tracers else None,
        )
        self.append(entry)
        self.priced(entry)
        self.trace.append(this.traced(entry, args, len(batch), counted))
        return entry

    def show(self, this: _Round, call: PriorCall[Any], **how: Any) -> None:
        """`call` joins the views (`Views.called` with `how`): at once, or in a step of several calls once the
        step is through, in the step's order."""
        if self.deferred is None or this.position is None:
            self.views.called(call, **how)
        else:
            self.deferred.append((this.position, call, how))

    async def begin(self) -> Ending | None:
        """Before the first round: refuse a tool without a tier, then settle a resumed run's decisions
        (`settle`); then its calls join the views and the items."""
        ending = _no_tier(self.box.tools)
        for proposal, decision in self.decisions if ending is None else ():
            if (ending := await settle(self, proposal, decision)) is not None:
                break
        self.decisions = ()
        self.views.load(self.state.progress)
        return ending

    def encoded(self, tool_name: str, batch: Sequence[Any]) -> str | None:
        """The batch as the state keeps it. Raises `ToolError` for a batch that is not of the tool's
        declared item type where the state must give it back (a strict codec)."""
        try:
            return self.codec.encode_batch(tool_name, batch)
        except Unencodable as wrong:
            raise ToolError(
                f"tool {tool_name!r} returned an item that is not of its declared item type: {wrong}",
                tool_name=tool_name,
            ) from wrong

    async def infos(
        self, round: int, *, closing: Ending | None = None
    ) -> tuple[ToolRoundInfo[Any], ToolRoundInfo[Any] | None] | Ending:
        """The round's info for the executor and for the observers (`Views.infos`); the run's deadline
        bounds a summarizer too. A closing round's (`closing`: the tools' ending) says why the tools stopped."""
        why = None if closing is None else closing.reason
        repeated = self.repeated if why is StopReason.DEGENERATION else None
        # The summarizer's runs are priced at their own models: counted by model while it runs.
        with counting_models() if self.views.summarizes else _UNCOUNTED as self.summary_models:
            infos = await self.views.infos(
                round, closing=closing is not None, deadline=self.remaining(), closed_by=why, repeated=repeated
            )
        if not isinstance(infos, tuple):
            summary_failed(self, round, infos, closing=closing is not None)  # no round follows to carry its spend
        if isinstance(infos, SummaryCutOff):
            return Ending(None, StopReason.DEADLINE)
        if isinstance(infos, AgentkitError):
            return Ending(Outcome.ERROR, StopReason.EXECUTOR_ERROR, infos)
        return infos

    async def ask(self, info: ToolRoundInfo[Any], closing: bool = False) -> tuple[ToolStep[Any], _Round] | Ending:
        schema = self.box.step_for(self.views.executed, self.views.items, closing=closing)
        assert schema is not None  # ``close`` asks a closing round only when it can be asked
        asking = ASKING.set(info)  # what a test double may read of the round (FunctionCaller)
        try:
            reply = await self.session.ask(
                self.bound.caller,
                lambda: self.bound.agent.render(self.ctx, info),
                schema,
                self.config.retry,
                round=info.round,
                deadline=self.remaining(),
                stream=self.config.stream,
                deltas=self.step_deltas,
            )
        finally:
            ASKING.reset(asking)
        summarizing = self.views.take_summary_usage()
        others = reply.others
        if summarizing.requests:
            # the round's summarizer asked a model through agentkit: its usage is the round's too
            self.session.usage += summarizing
            reply = dataclasses.replace(reply, usage=reply.usage + summarizing)
            others = summarized_on(self.session, others, self.summary_models)
            self.summary_models = None
        self.largest_round_tokens = max(self.largest_round_tokens, reply.usage.total_tokens)
        rationale = reply.value.rationale if reply.value is not None else ""
        by_model = None if not others else by_model_text(reply.usage, self.session.role.model, others)
        this = _Round(info.round, reply, schema, rationale, closing=closing, by_model=by_model)
        if reply.value is None:
            assert reply.stop_reason is not None
            outcome = None if reply.error is None else Outcome.ERROR
            error = str(reply.error) if reply.error else reply.stop_reason.value
            self.record(this, RoundOutcome.FAILED, error=error)
            return Ending(outcome, reply.stop_reason, reply.error)
        return reply.value, this

    def done(self, step: ToolStep[Any], this: _Round) -> None:
        """The executor said done: its answer, if any, is the run's."""
        self.answer = step_answer(step) if self.box.answer is None else as_answer(step_answer(step), self.box.answer)
        answer = None
        if self.answer is not None and self.box.answer is not None:
            answer = json_text(_answer_adapter(self.box.answer).dump_python(self.answer, mode="json"))
        self.record(this, RoundOutcome.DONE, answer=answer)

    async def dispatch(self, this: _Round, tool: Tool[Any, Any], tier: Tier, args: BaseModel) -> Ending | None:
        run_id = self.session.run_id
        around = None
        if self.session.observers:
            # Observers get their own copy: nothing they do can change the call that runs.
            event_args = owned(args)
            count = self.views.calls_of[tool.name] + 1
            self.session.emit(
                ToolCallStarted(
                    run_id=run_id,
                    round=this.round,
                    tool_name=tool.name,
                    tier=tier,
                    args=event_args,
                    count=count,
                    label=status_label(tool.name, count),
                )
            )
            if self.session.wrappers:
                invoked = ToolInvocation(run_id=run_id, round=this.round, tool=tool, args=args, position=this.position)
                around = wrapping(self.session.wrappers, invoked)
        outcome = await invoke(tool, args, ctx=self.ctx, limit=self.tool_limit(), around=around)
        encoded = None
        if outcome.ran:
            try:
                encoded = self.encoded(tool.name, outcome.batch)
            except ToolError as wrong:
                outcome = dataclasses.replace(outcome, batch=(), error=wrong)
        ending = self.ending_of(outcome)
        batch = tuple(outcome.batch)
        kind = RoundOutcome.ENDED if ending is not None else RoundOutcome.RAN if outcome.ran else RoundOutcome.RETRIED
        error = str(ending.error) if ending and ending.error else None
        entry = self.record(
            this,
            kind,
            tool=tool.name,
            args=args,
            tier=tier,
            batch=batch,
            encoded=encoded,
            tool_seconds=outcome.seconds,
            observation=outcome.observation,
            error=None if error is None else error,
        )
        if ending is None:
            prior = PriorCall(
                round=this.round, tool_name=tool.name, args=args, batch=batch, observation=outcome.observation
            )
            self.show(this, prior, ran=outcome.ran, kept=encoded, args=entry.args)
        if self.session.observers:
            self.session.emit(
                ToolResultReturned(
                    run_id=run_id,
                    round=this.round,
                    tool_name=tool.name,
                    batch_size=len(outcome.batch),
                    seconds=outcome.seconds,
                    observation=outcome.observation,
                    error=ending.error if ending else None,
                )
            )
        return ending

    def tool_limit(self) -> float | None:
        """The tool timeout, shortened to what is left of the run's deadline."""
        limit, remaining = self.config.tool_timeout, self.remaining()
        if remaining is not None and (limit is None or remaining < limit):
            return remaining
        return limit

    def ending_of(self, outcome: Invocation[Any]) -> Ending | None:
        if outcome.error is None:
            return None
        remaining = self.remaining()
        if isinstance(outcome.error, ToolTimeout) and remaining is not None and remaining <= 0:
            return Ending(None, StopReason.DEADLINE)
        return Ending(Outcome.ERROR, StopReason.TOOL_ERROR, outcome.error)

    async def close(self, ending: Ending) -> TieredLoopResult[Any, Any, Any]:
        """Finish the run; with an answer schema, a run whose tools stopped at the round ceiling, the
        budget or a stalemate first gets one closing round, if the budget and the deadline leave
        room for it. Its failure leaves the answer unset (the trace records it); the ending stays
        the tools' own."""
        if self.box.closing_model is None or not self.config.closing_round or ending.reason not in CLOSABLE:
            return self.finish(ending)
        if self.limit_reached(closing=True) is not None:
            return self.finish(ending)
        if self.box.step_for(self.views.executed, self.views.items, closing=True) is None:
            return self.finish(ending)  # too few calls ran, or nothing to cite: no answer can be asked for
        round = self.rounds + 1
        if isinstance(infos := await self.infos(round, closing=ending), Ending):
            return self.finish(ending)  # the summarizer failed or ran past the deadline: the tools' ending stands
        self.rounds = round
        shown, watched = infos
        if watched is not None:
            self.session.emit(RoundStarted(run_id=self.session.run_id, info=watched))
        asked = await self.ask(shown, closing=True)
        if not isinstance(asked, Ending):
            step, this = asked
            self.done(step, this)
            self.answer_from_closing_round = True
        return self.finish(ending)

    def finish(self, ending: Ending) -> TieredLoopResult[Any, Any, Any]:
        outcome = ending.outcome
        reason = ending.reason
        if outcome is None:
            outcome = Outcome.APPLIED if self.views.items or self.proposals else Outcome.SILENT
        if reason is StopReason.EXECUTOR_DONE and outcome is Outcome.SILENT:
            reason = StopReason.NOTHING_RETRIEVED
        error = None if ending.error is None else str(ending.error)
        self.append(made(EndEntry, stop_reason=reason, outcome=outcome, error=error, elapsed=self.elapsed()))
        result: TieredLoopResult[Any, Any, Any] = TieredLoopResult(
            items=self.views.items,
            rounds=self.rounds,
            outcome=outcome,
            stop_reason=reason,
            error=ending.error,
            usage=self.session.usage,
            cost=self.cost,
            trace=tuple(self.trace),
            run_id=self.session.run_id,
            proposed=self.proposals,
            checkpoint=self.state,
            answer=self.answer,
            answer_from_closing_round=self.answer_from_closing_round,
            provenance=run_provenance(self.provenance, self.state, self.views, self.answer),
        )
        seen = None
        if self.session.observers:
            # The caller's result is not the observers' to edit: they get their own lists.
            seen = dataclasses.replace(
                result, items=list(self.views.items), proposed=[p.model_copy(deep=True) for p in self.proposals]
            )
        return self.session.finish(result, seen=seen)

    async def granted(self, this: _Round, proposal: ProposedAction[Any], grant: Grant) -> Ending | None:
        """A proposal a standing grant approves, run once (`granted`)."""
        return await granted(self, this, proposal, grant)

    def kept(self) -> None:
        """Hand the observers that want one the state so far (a round ended; the run goes on)."""
        if self.keepers:
            deliver_checkpoint(self.keepers, self.session.run_id, self.state)


_UNCOUNTED: contextlib.nullcontext[None] = contextlib.nullcontext()
"""A run without a summarizer counts nothing by model."""


def summarized_on(session: RunSession, others: ByModel | None, models: ByModel | None) -> ByModel | None:
    """`others` (a round's usage on models other than the role's) with the summarizer's on such models (`models`:
    what its runs spent by model), which the session counts as theirs too."""
    role = session.role.model
    extra = {name: usage for name, usage in (models or {}).items() if name != role}
    if not extra:
        return others
    session.others = merged_by_model(session.others, extra)
    return merged_by_model(dict(others or {}), extra)


def summary_failed(run: _Run, round: int, why: SummaryCutOff | AgentkitError, *, closing: bool) -> None:
    """A summarizer that failed, or that the deadline cut off, after its runs spent: the round is recorded
    `FAILED` with that spend (no executor's reply), so the run's state, usage and cost keep it."""
    spent = run.views.take_summary_usage()
    if not spent.requests:
        return
    run.session.usage += spent
    others = summarized_on(run.session, None, run.summary_models)
    run.summary_models = None
    schema = run.box.step_for(run.views.executed, run.views.items, closing=closing)
    assert schema is not None  # asked before the summary was: `close` asks a closing round only when it can be
    by_model = None if not others else by_model_text(spent, run.session.role.model, others)
    run.rounds = round
    failed = _Round(round, Reply(value=None, usage=spent), schema, closing=closing, by_model=by_model)
    error = StopReason.DEADLINE.value if isinstance(why, SummaryCutOff) else str(why)
    run.record(failed, RoundOutcome.FAILED, error=error)


def _no_tier(tools: Mapping[str, Tool[Any, Any]]) -> Ending | None:
    """A tool that declares no tier is refused before anything runs."""
    for name, tool in tools.items():
        if declared_tier(tool) is None:
            return Ending(Outcome.ERROR, StopReason.TOOL_DECLARES_NO_TIER, missing_tier(name))
    return None


async def granted(run: _Run, this: _Round, proposal: ProposedAction[Any], grant: Grant) -> Ending | None:
    """A proposal a standing grant approves: recorded as proposed and approved by `grant:<id>`, then run
    once, as a resumed run settles an approval; the executor sees the call's result, not a proposal."""
    from agentkit._approval import approve

    entry = run.record(
        this,
        RoundOutcome.PROPOSED,
        tool=proposal.tool_name,
        args=proposal.args,
        tier=proposal.tier,
        observation=PROPOSED_NOTE,
        proposed_at=proposal.created_at.isoformat(),
        call_digest=proposal.digest,
    )
    approval = approve(proposal, approved_by=grant_actor(grant.id), note=grant.reason)
    ending, batch = await settled(run, entry, approval, granted=True)
    call: PriorCall[Any] = PriorCall(
        round=this.round, tool_name=proposal.tool_name, args=proposal.args, batch=tuple(batch)
    )
    run.show(this, call, ran=ending is None, args=entry.args)
    return ending


def _call_started(run: _Run, proposal: RoundEntry, approval: Approval[Any]) -> bool:
    """Tell the observers an approved call runs (as `dispatch` tells them of a live one); whether it told them."""
    if not run.session.observers:
        return False
    assert proposal.tool is not None
    count = run.views.calls_of[proposal.tool] + 1
    run.session.emit(
        ToolCallStarted(
            run_id=run.session.run_id,
            round=proposal.round,
            tool_name=proposal.tool,
            tier=approval.proposal.tier,
            args=owned(approval.proposal.args),
            count=count,
            label=status_label(proposal.tool, count),
        )
    )
    return True


async def settle(run: _Run, proposal: RoundEntry, decision: Approval[Any] | Rejection[Any]) -> Ending | None:
    """A decision a resumed run settles before its first round, appended to its state: an approved call runs
    once through `execute_approved` (or the journal's claim) and its batch is that call's result; a
    rejection, with the reviewer's reason, is that call's observation."""
    ending, _ = await settled(run, proposal, decision)
    return ending


async def settled(
    run: _Run, proposal: RoundEntry, decision: Approval[Any] | Rejection[Any], *, granted: bool = False
) -> tuple[Ending | None, Sequence[Any]]:
    """`settle`, with the approved call's batch (empty for a rejection or a failure). `granted`: a standing
    grant's approval, made in this run: it runs here, not through `run_approved` (the journal's claim of a
    call people decided, which has no inbox entry for it)."""
    from agentkit._approval import Approval, Rejection, execute_approved

    assert proposal.tool is not None
    assert proposal.call_digest is not None
    if not isinstance(decision, Approval):
        reason = f": {decision.reason}" if decision.reason else ""
        run.append(
            made(
                DecisionEntry,
                round=proposal.round,
                call_digest=proposal.call_digest,
                approved=False,
                by=decision.rejected_by,
                reason=decision.reason,
                observation=f"rejected by {decision.rejected_by}{reason}",
                elapsed=run.elapsed(),
            )
        )
        return None, ()
    started = time.monotonic()
    encoded, failed = None, None
    batch: Sequence[Any] = ()
    announced = False
    try:
        tool = run.box.tools[proposal.tool]
        if run.run_approved is not None and not granted:
            ran = await run.run_approved(decision, tool, run.ctx)
            if isinstance(ran, Rejection):  # rejected before it ran: the run goes on with that decision
                return await settled(run, proposal, ran)
            announced = _call_started(run, proposal, decision)
            batch = ran
        else:
            announced = _call_started(run, proposal, decision)
            batch = await execute_approved(decision, tool, ctx=run.ctx, observer=run.session.observers)
        encoded = run.encoded(proposal.tool, batch)
    except AgentkitError as error:
        failed = error
    if announced:
        run.session.emit(
            ToolResultReturned(
                run_id=run.session.run_id,
                round=proposal.round,
                tool_name=proposal.tool,
                batch_size=len(batch) if failed is None else 0,
                seconds=time.monotonic() - started,
                error=failed,
            )
        )
    amendment = decision.amendment
    run.append(
        made(
            DecisionEntry,
            round=proposal.round,
            call_digest=proposal.call_digest,
            approved=True,
            by=decision.approved_by,
            reason=decision.note,
            batch=encoded,
            error=None if failed is None else str(failed),
            tool_seconds=time.monotonic() - started,
            elapsed=run.elapsed(),
            args=None if amendment is None else run.codec.encode_args(decision.proposal.args),
            amended=() if amendment is None else amendment.fields,
        )
    )
    return (None, batch) if failed is None else (Ending(Outcome.ERROR, StopReason.TOOL_ERROR, failed), ())


async def run_core(
    bound: Bound,
    ctx: object,
    state: RunCheckpoint | None = None,
    *,
    decisions: Sequence[tuple[RoundEntry, Approval[Any] | Rejection[Any]]] = (),
    run_approved: RunApproved | None = None,
    run_id: str | None = None,
) -> TieredLoopResult[Any, Any, Any]:
    """Run rounds until the executor stops, a ceiling is reached, or something fails.

    A fresh run starts from an empty state (under `run_id`, or a new one); a resumed run passes the
    `state` it stopped with (already admitted) and the `decisions` on its pending proposals.
    """
    role = bound.agent.role()
    config, box = bound.config, bound.box
    check_priced(config.prices, config.cost_budget, role)  # before the run starts: nothing to report aborted
    session = RunSession(
        bound.observers,
        agent=bound.agent,
        role=role,
        max_rounds=config.max_rounds,
        tools=tuple(box.tools),
        config=config,
        run_id=state.run_id if state is not None else run_id,
        usage=state.usage if state is not None else None,
        caller=bound.caller,
        continues=continued(state, decisions) if state is not None and bound.observers else None,
    )
    async with session:
        # Cancellation and wiring mistakes propagate; the session tells observers the run is over.
        if state is None:
            state = RunCheckpoint.start(session.run_id, config, box.entries(), same=comparator_name(bound.same))
        run = _Run(bound, session, ctx, state, decisions, run_approved)
        return await _rounds(run, box, config)


def continued(
    state: RunCheckpoint, decisions: Sequence[tuple[RoundEntry, Approval[Any] | Rejection[Any]]]
) -> Continued:
    """What a resumed leg goes on from (for its observers): the state's last round, and the decisions it settles."""
    from agentkit._approval import Approval

    last = next((e for e in reversed(state.entries) if isinstance(e, RoundEntry)), None)
    fork = state.parent is not None and (last is None or last.round <= (state.forked_at or 0))
    settled = tuple(
        Decided(
            round=entry.round,
            tool_name=entry.tool or "",
            tier=entry.tier,
            approved=isinstance(decision, Approval),
            by=decision.approved_by if isinstance(decision, Approval) else decision.rejected_by,
        )
        for entry, decision in decisions
    )
    return Continued(
        run_id=(state.parent or "") if fork else state.run_id,
        round=0 if last is None else last.round,
        trace=None if last is None else last.trace,
        fork=fork,
        decisions=settled,
    )


async def _rounds(run: _Run, box: Toolbox, config: LoopConfig) -> TieredLoopResult[Any, Any, Any]:
    """The loop itself: ask, then take the step's calls (`agentkit._calls`: check for a repeat, gate by tier,
    dispatch); stop on the first ending."""
    if (settled := await run.begin()) is not None:
        return run.finish(settled)
    run.kept()
    first = run.rounds + 1
    rounds = range(first, config.max_rounds + 1) if config.max_rounds is not None else itertools.count(first)
    for round in rounds:
        if (limit := run.limit_reached()) is not None:
            return await run.close(limit)
        if isinstance(infos := await run.infos(round), Ending):
            return run.finish(infos)
        run.rounds = round
        shown, watched = infos
        if watched is not None:
            run.session.emit(RoundStarted(run_id=run.session.run_id, info=watched))
        asked = await run.ask(shown)
        if isinstance(asked, Ending):
            return run.finish(asked)
        step, this = asked
        calls = step.step_calls()
        if not calls:
            run.done(step, this)
            return run.finish(Ending(None, StopReason.EXECUTOR_DONE))
        if (ending := await take_calls(run, this, calls)) is not None:
            return await run.close(ending)
        run.kept()
    return await run.close(Ending(None, StopReason.ROUND_CEILING))
