"""The one loop body behind ``run_tool_loop`` and ``run_tool_loop_tiered``.

``_rounds`` reads in one screen; each step of a round is a method of ``_Run``: ``ask`` the
executor, check for a ``repeat``, ``gate`` the call by tier, ``dispatch`` it to the tool, and
``finish`` with an ending. Model calls and events go through the run's ``RunSession`` (shared
with single shots and the pair); tools run through ``agentkit._invoke`` (shared with approval,
program gating and the journal).
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import time
import typing
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, JsonValue

from agentkit._invoke import Invocation, invoke, missing_tier
from agentkit._session import RunSession, executor_failed
from agentkit.agent import PriorCall, ToolAgent, ToolRoundInfo
from agentkit.checkpoint import (
    CheckpointCall,
    CheckpointProposal,
    CheckpointTool,
    Codec,
    DigestMemo,
    RunCheckpoint,
    config_parts,
    tool_part,
)
from agentkit.config import AfterProposal, LoopConfig, RepeatPolicy
from agentkit.context import Omitted, Window
from agentkit.degeneration import SameFunc, repeat_of
from agentkit.errors import AgentkitError, ToolError, ToolTimeout, UsageError
from agentkit.events import DegenerationDetected, ProposalCaptured, RoundStarted, ToolCallStarted, ToolResultReturned
from agentkit.observe import Observer, ToolInvocation, deliver_checkpoint, observed, wants_checkpoints
from agentkit.outcome import Outcome, StopReason
from agentkit.proposals import ProposedAction
from agentkit.results import RoundRecord, TieredLoopResult, Usage
from agentkit.step import ToolStep, build_step_model, step_answer, step_call_parts
from agentkit.structured import StructuredCaller
from agentkit.tiers import Tier, runs_live
from agentkit.tools import AnyTool, Tool, declared_tier, validate_tool_names

Verdict = Literal["run", "propose", "no_tier"]

PROPOSED_NOTE = "proposed for human approval; not executed"

CLOSABLE = frozenset({StopReason.ROUND_CEILING, StopReason.BUDGET_EXHAUSTED, StopReason.DEGENERATION})
"""Endings of a run with an answer schema that get a closing round (``LoopConfig.closing_round``)."""


def gate(tool: Tool[Any, Any], config: LoopConfig) -> tuple[Verdict, Tier]:
    """Decide by declared tier whether a call runs live, becomes a proposal, or is refused.

    The tier is read from the tool at the moment of the call, never cached, so nothing set on
    the tool after wiring can slip a call past the gate.
    """
    tier = declared_tier(tool)
    if tier is None:
        return "no_tier", Tier.IRREVERSIBLE
    if runs_live(tier, config.autonomy):
        return "run", tier
    return "propose", tier


@dataclass(frozen=True, slots=True)
class Toolbox:
    """The tools of one run, validated once, with their step model built once."""

    tools: dict[str, Tool[Any, Any]]
    step_model: type[ToolStep[Any]]
    single: Tool[Any, Any] | None
    closing_model: type[ToolStep[Any]] | None = None
    """With an answer schema: the closing round's step, which allows no call (``None`` otherwise)."""

    @classmethod
    def build(
        cls, tool_or_tools: AnyTool | Sequence[AnyTool], config: LoopConfig, answer: type[Any] | None = None
    ) -> Toolbox:
        # A tool that takes the run's ctx is kept beside the others: what the loop reads of a tool
        # (name, tier, args type) is the same, and ``invoke`` calls it with the ctx.
        single: Tool[Any, Any] | None
        if callable(getattr(tool_or_tools, "call", None)):
            single, tools = typing.cast("Tool[Any, Any]", tool_or_tools), [typing.cast("Tool[Any, Any]", tool_or_tools)]
        elif isinstance(tool_or_tools, Sequence) and not isinstance(tool_or_tools, str | bytes):
            single, tools = None, [typing.cast("Tool[Any, Any]", t) for t in tool_or_tools]
        else:
            raise UsageError(
                "tools must be one Tool or a list or tuple of them (their order is the schema's order); "
                f"got a {type(tool_or_tools).__name__}"
            )
        validate_tool_names(tools)
        spec: tuple[tuple[str, type[BaseModel]], ...] | type[BaseModel]
        spec = single.args_type if single is not None else tuple((t.name, t.args_type) for t in tools)
        bound = config.rationale_max_length
        step_model = build_step_model(spec, rationale_max_length=bound, answer=answer)  # type: ignore[arg-type]  # type objects are hashable
        closing = None
        if answer is not None:
            closing = build_step_model(spec, rationale_max_length=bound, answer=answer, closing=True)  # type: ignore[arg-type]  # as above
        return cls({t.name: t for t in tools}, step_model, single, closing)

    def resolve(self, call: BaseModel) -> tuple[Tool[Any, Any], BaseModel]:
        name, args = step_call_parts(call)
        if self.single is not None:
            return self.single, args
        assert name is not None
        return self.tools[name], args


@dataclass(frozen=True, slots=True)
class Ending:
    outcome: Outcome | None
    """``None``: decide by whether anything was gathered (APPLIED or SILENT)."""
    reason: StopReason
    error: AgentkitError | None = None


@dataclass(frozen=True, slots=True)
class _Round:
    """One round's model call, and the typed record of each way the round can end."""

    round: int
    llm_seconds: float
    usage: Usage
    rationale: str = ""

    def failed(self, error: str) -> RoundRecord:
        """The model call failed (or the deadline cut it off): no step."""
        return RoundRecord(round=self.round, done=False, error=error, llm_seconds=self.llm_seconds, usage=self.usage)

    def done(self) -> RoundRecord:
        """The executor said it was done."""
        return RoundRecord(
            round=self.round, done=True, rationale=self.rationale, llm_seconds=self.llm_seconds, usage=self.usage
        )

    def unrun(
        self,
        tool: str,
        call: BaseModel,
        tier: Tier | None,
        *,
        proposed: bool = False,
        error: str | None = None,
        observation: str | None = None,
    ) -> RoundRecord:
        """The call did not run: a repeat, a refusal, or a proposal."""
        return RoundRecord(
            observation=observation,
            round=self.round,
            done=False,
            rationale=self.rationale,
            tool_name=tool,
            call=call,
            tier=tier,
            proposed=proposed,
            error=error,
            llm_seconds=self.llm_seconds,
            usage=self.usage,
        )

    def ran(self, call: BaseModel, tier: Tier, outcome: Invocation[Any], error: str | None) -> RoundRecord:
        """The tool was called: its batch, its observation, or the error that ended the run."""
        return RoundRecord(
            round=self.round,
            done=False,
            rationale=self.rationale,
            tool_name=outcome.tool_name,
            call=call,
            tier=tier,
            executed=outcome.ran,
            batch_size=len(outcome.batch),
            observation=outcome.observation,
            error=error,
            llm_seconds=self.llm_seconds,
            tool_seconds=outcome.seconds,
            usage=self.usage,
        )


def _own(item: Any) -> Any:
    """A deep copy of one item, or the item itself when it cannot be copied (a live handle, say)."""
    try:
        return copy.deepcopy(item)
    except Exception:  # an uncopyable item is shown as it is; see docs/loops.md
        return item


class _View:
    """What one audience (the executor; the observers) is shown of the run so far.

    Its own copies, made once per entry: nothing it does to what it is shown can reach the run
    (the items, the repeat guard, the proposals) or the other audience.
    """

    __slots__ = ("calls", "proposals", "ran")

    def __init__(self) -> None:
        self.calls: list[PriorCall[Any]] = []
        self.ran: list[bool] = []
        """Whether each call ran (and so has a batch in ``prior_results``)."""
        self.proposals: list[ProposedAction[Any]] = []

    def add(self, call: PriorCall[Any], *, ran: bool, proposal: ProposedAction[Any] | None) -> None:
        batch = tuple(_own(item) for item in call.batch)
        self.ran.append(ran)
        self.calls.append(dataclasses.replace(call, args=call.args.model_copy(deep=True), batch=batch))
        if proposal is not None:
            self.proposals.append(proposal.model_copy(deep=True))

    def info(
        self, round: int, max_rounds: int | None, start: int, omitted: Omitted, *, closing: bool = False
    ) -> ToolRoundInfo[Any]:
        """The round's info, showing the calls from ``start`` on (``LoopConfig.context``)."""
        shown = zip(self.calls[start:], self.ran[start:], strict=True)
        return ToolRoundInfo(
            round=round,
            max_rounds=max_rounds,
            is_final_round=closing or round == max_rounds,
            closing_round=closing,
            prior_results=tuple(call.batch for call, ran in shown if ran),
            prior_calls=tuple(self.calls[start:]),
            proposals=tuple(self.proposals),
            omitted=omitted,
        )


_UNSEEN = _View()
"""The view of observers that do not read the calls (``Observer.sees_calls``): always empty."""


class _Run:
    def __init__(
        self,
        session: RunSession,
        caller: StructuredCaller,
        agent: ToolAgent[Any, Any, Any],
        box: Toolbox,
        ctx: object,
        config: LoopConfig,
        same: SameFunc[Any] | None,
        may_propose: bool,
        codec: Codec | None = None,
    ) -> None:
        self.session, self.caller, self.agent, self.box, self.ctx = session, caller, agent, box, ctx
        self.config, self.same, self.may_propose, self.codec = config, same, may_propose, codec
        self.started = time.monotonic()
        self.items: list[Any] = []
        self.shown = _View()
        """The executor's view: what ``render`` gets."""
        self.watched = _View() if any(o.sees_calls for o in session.observers) else None
        """The observers' view: what ``RoundStarted`` carries (``None``: no observer reads the calls;
        with observers, their ``RoundStarted`` shows none)."""
        self.window = Window(config.context)
        """What of the views each round shows (``LoopConfig.context``)."""
        self.recent: list[tuple[str, BaseModel]] = []
        self.recent_rounds: list[int] = []
        """The round of each entry of ``recent``."""
        self.recent_made: list[tuple[str, dict[str, JsonValue]]] = []
        """``recent`` as JSON so far, for the checkpoints (``recent_json``)."""
        self.refusals = 0
        self.proposals: list[ProposedAction[Any]] = []
        self.trace: list[RoundRecord] = []
        self.largest_round_tokens = 0
        self.rounds = 0
        self.records: list[CheckpointCall] = []
        """Every call as JSON, for the checkpoint (kept only with a codec: a run that may be resumed)."""
        self.restored: list[PriorCall[Any]] = []
        """A resumed run's calls, decoded from its checkpoint (``records`` holds them as JSON)."""
        self.pending: list[tuple[int, Any]] = []
        """A resumed run's decisions, by the index of the call they decide; settled before its next round."""
        self.run_approved: Callable[[Any, Tool[Any, Any], Any], Awaitable[Sequence[Any]]] | None = None
        """How a resumed run executes an approved call (``None``: ``execute_approved``; the journal claims it)."""
        self.keepers = tuple(o for o in session.observers if wants_checkpoints(o)) if codec is not None else ()
        """The observers that take a checkpoint per round (none without a codec: the run cannot make one)."""
        self.template: RunCheckpoint | None = None
        """The run's id, config and tool set as a checkpoint holds them, built once; each checkpoint is a
        copy of it with the run's state (a run checkpoints every round)."""
        self.answer: Any = None
        self.answer_from_closing_round = False
        self.digests = DigestMemo()
        """The JSON of the calls and config for the checkpoints' digests, each made once."""

    def remaining(self) -> float | None:
        if self.config.deadline is None:
            return None
        return self.config.deadline - (time.monotonic() - self.started)

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
        return None

    def called(
        self,
        call: PriorCall[Any],
        *,
        ran: bool,
        proposal: ProposedAction[Any] | None = None,
        batch: list[JsonValue] | None = None,
        record: bool = True,
    ) -> None:
        """A call's outcome joins what the executor and the observers are shown (each their own copy)
        and, in a run that may be resumed, the checkpoint's record (``batch``: the batch as JSON)."""
        self.shown.add(call, ran=ran, proposal=proposal)
        self.window.add(call)
        if self.watched is not None:
            self.watched.add(call, ran=ran, proposal=proposal)
        if ran:
            self.items.extend(call.batch)
        if self.codec is not None and record:
            args = call.args.model_dump(mode="json")
            # Already JSON values of the fields' types (the batch from ``Codec.encode_batch``): not validated again.
            self.records.append(
                self.digests.call(
                    round=call.round,
                    tool_name=call.tool_name,
                    args=args,
                    batch=batch or [],
                    observation=call.observation,
                    proposed=call.proposed,
                    ran=ran,
                )
            )

    def encoded(self, outcome: Invocation[Any]) -> tuple[Invocation[Any], list[JsonValue] | None]:
        """The batch as JSON where the run keeps a checkpoint; a batch that is not of the tool's
        declared item type is the tool's failure (the checkpoint could not give it back)."""
        if self.codec is None or not outcome.ran:
            return outcome, None
        try:
            return outcome, self.codec.encode_batch(outcome.tool_name, outcome.batch)
        except ValueError as wrong:
            error = ToolError(
                f"tool {outcome.tool_name!r} returned an item that is not of its declared item type: {wrong}",
                tool_name=outcome.tool_name,
            )
            return dataclasses.replace(outcome, batch=(), error=error), None

    async def begin(self) -> Ending | None:
        """Before the first round: refuse a tool without a tier, then settle a resumed run's decisions;
        its calls then join the views and the items."""
        for name, tool in self.box.tools.items():
            if declared_tier(tool) is None:
                return Ending(Outcome.ERROR, StopReason.TOOL_DECLARES_NO_TIER, missing_tier(name))
        ending = None
        for index, decision in self.pending:
            if (ending := await self.decide(index, decision)) is not None:
                break
        self.pending = []
        for call, record in zip(self.restored, self.records, strict=True):
            self.called(call, ran=record.ran, record=False)
        return ending

    async def decide(self, index: int, decision: Any) -> Ending | None:
        """An approved call runs once through ``execute_approved`` and its batch is that call's
        result; a rejection, with the reviewer's reason, is that call's observation."""
        from agentkit.approval import Approval, execute_approved

        call, encoded = self.restored[index], None
        if isinstance(decision, Approval):
            try:
                tool = self.box.tools[call.tool_name]
                if self.run_approved is not None:
                    batch = await self.run_approved(decision, tool, self.ctx)
                else:
                    batch = await execute_approved(decision, tool, ctx=self.ctx)
            except AgentkitError as error:
                return Ending(Outcome.ERROR, StopReason.TOOL_ERROR, error)
            outcome, encoded = self.encoded(Invocation(tool_name=call.tool_name, batch=batch))
            if outcome.error is not None:
                return Ending(Outcome.ERROR, StopReason.TOOL_ERROR, outcome.error)
            observation, batch = None, tuple(batch)
        else:
            reason = f": {decision.reason}" if decision.reason else ""
            observation, batch = f"rejected by {decision.rejected_by}{reason}", ()
        self.restored[index] = dataclasses.replace(call, proposed=False, batch=batch, observation=observation)
        update = {"batch": encoded or [], "ran": encoded is not None, "observation": observation, "proposed": False}
        self.records[index] = self.records[index].model_copy(update=update)
        return None

    async def infos(
        self, round: int, *, closing: bool = False
    ) -> tuple[ToolRoundInfo[Any], ToolRoundInfo[Any] | None] | Ending:
        """The round's info for the executor and for the observers, bounded by ``LoopConfig.context``."""
        try:
            start, omitted = await self.window.cut(self.shown.calls, self.shown.ran)
        except Exception as raised:
            error = executor_failed("context summarizer (ContextWindow.summarize)", raised)
            return Ending(Outcome.ERROR, StopReason.EXECUTOR_ERROR, error)
        ceiling = self.config.max_rounds
        watched = None
        if self.watched is not None:
            watched = self.watched.info(round, ceiling, start, omitted, closing=closing)
        elif self.session.observers:
            watched = _UNSEEN.info(round, ceiling, 0, omitted, closing=closing)
        return self.shown.info(round, ceiling, start, omitted, closing=closing), watched

    async def ask(
        self, info: ToolRoundInfo[Any], schema: type[ToolStep[Any]] | None = None
    ) -> tuple[ToolStep[Any], _Round] | Ending:
        reply = await self.session.ask(
            self.caller,
            lambda: self.agent.render(self.ctx, info),
            schema or self.box.step_model,
            self.config.retry,
            round=info.round,
            deadline=self.remaining(),
        )
        self.largest_round_tokens = max(self.largest_round_tokens, reply.usage.total_tokens)
        this = _Round(info.round, reply.seconds, reply.usage)
        if reply.value is None:
            assert reply.stop_reason is not None
            outcome = None if reply.error is None else Outcome.ERROR
            self.trace.append(this.failed(str(reply.error) if reply.error else reply.stop_reason.value))
            return Ending(outcome, reply.stop_reason, reply.error)
        return reply.value, dataclasses.replace(this, rationale=reply.value.rationale)

    def repeat(self, this: _Round, tool: Tool[Any, Any], args: BaseModel) -> Ending | Literal["refused"] | None:
        try:
            index = repeat_of(tool.name, args, self.recent, self.same, self.config.degeneration_window)
        except Exception as raised:
            error = executor_failed("repeat comparator (same=)", raised)
            self.trace.append(this.unrun(tool.name, args, declared_tier(tool), error=str(error)))
            return Ending(Outcome.ERROR, StopReason.EXECUTOR_ERROR, error)
        if index is not None:
            refuse = self.config.on_repeat is RepeatPolicy.REFUSE and self.refusals < self.config.repeat_refusals
            if self.session.observers:
                copied = args.model_copy(deep=True)
                event = DegenerationDetected(
                    run_id=self.session.run_id, round=this.round, tool_name=tool.name, args=copied, refused=refuse
                )
                self.session.emit(event)
            if refuse:
                # Not run; the executor is told which earlier round's results already answer it.
                self.refusals += 1
                earlier = self.recent_rounds[index]
                note = f"not run: it repeats the call of round {earlier}; that round's results answer it"
                told: PriorCall[Any] = PriorCall(
                    round=this.round, tool_name=tool.name, args=args, observation=note, repeats=earlier
                )
                self.called(told, ran=False)
                self.trace.append(this.unrun(tool.name, args, declared_tier(tool), observation=note))
                return "refused"
            self.trace.append(this.unrun(tool.name, args, declared_tier(tool)))
            return Ending(Outcome.STALEMATE, StopReason.DEGENERATION)
        self.recent.append((tool.name, args))
        self.recent_rounds.append(this.round)
        return None

    def refuse(self, this: _Round, tool: Tool[Any, Any], args: BaseModel) -> Ending:
        error = missing_tier(tool.name)
        self.trace.append(this.unrun(tool.name, args, None, error=str(error)))
        return Ending(Outcome.ERROR, StopReason.TOOL_DECLARES_NO_TIER, error)

    def propose(self, this: _Round, tool: Tool[Any, Any], tier: Tier, args: BaseModel) -> Ending | None:
        if not self.may_propose:
            error = ToolError(
                f"tool {tool.name!r} (Tier.{tier.name}) cannot run live under autonomy "
                f"Tier.{self.config.autonomy.name}; use run_tool_loop_tiered for tools that need approval",
                tool_name=tool.name,
            )
            self.trace.append(this.unrun(tool.name, args, tier, error=str(error)))
            return Ending(Outcome.ERROR, StopReason.TOOL_ERROR, error)
        # The proposal gets its own copy: the executor's view of the call (prior calls, trace) must
        # not be able to change what a human approves.
        proposal = ProposedAction[Any].create(
            tool_name=tool.name,
            tier=tier,
            args=args.model_copy(deep=True),
            rationale=this.rationale,
            round=this.round,
            run_id=self.session.run_id,
        )
        self.proposals.append(proposal)
        note: PriorCall[Any] = PriorCall(
            round=this.round, tool_name=tool.name, args=args, observation=PROPOSED_NOTE, proposed=True
        )
        self.called(note, ran=False, proposal=proposal)
        if self.session.observers:
            self.session.emit(ProposalCaptured(run_id=self.session.run_id, proposal=proposal.model_copy(deep=True)))
        self.trace.append(this.unrun(tool.name, args, tier, proposed=True))
        if self.config.after_proposal is AfterProposal.STOP:
            return Ending(Outcome.APPLIED, StopReason.PROPOSED)
        return None

    async def dispatch(self, this: _Round, tool: Tool[Any, Any], tier: Tier, args: BaseModel) -> Ending | None:
        run_id = self.session.run_id
        if self.session.observers:
            # Observers get their own copy: nothing they do can change the call that runs.
            event_args = args.model_copy(deep=True)
            self.session.emit(
                ToolCallStarted(run_id=run_id, round=this.round, tool_name=tool.name, tier=tier, args=event_args)
            )
        around = None
        if self.session.observers:
            call = ToolInvocation(run_id=run_id, round=this.round, tool=tool, args=args)
            observers = self.session.observers

            def around(work: Awaitable[Sequence[Any]]) -> Awaitable[Sequence[Any]]:
                return observed(observers, call, work)

        outcome, encoded = self.encoded(await invoke(tool, args, ctx=self.ctx, limit=self.tool_limit(), around=around))
        ending = self.ending_of(outcome)
        batch = tuple(outcome.batch)
        if ending is None:
            prior = PriorCall(
                round=this.round, tool_name=tool.name, args=args, batch=batch, observation=outcome.observation
            )
            self.called(prior, ran=outcome.ran, batch=encoded)
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
        self.trace.append(this.ran(args, tier, outcome, str(ending.error) if ending and ending.error else None))
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
        closing = self.box.closing_model
        if closing is None or not self.config.closing_round or ending.reason not in CLOSABLE:
            return self.finish(ending)
        if self.limit_reached(closing=True) is not None:
            return self.finish(ending)
        round = self.rounds + 1
        if isinstance(infos := await self.infos(round, closing=True), Ending):
            return self.finish(ending)  # the summarizer failed: no closing round, the tools' ending stands
        self.rounds = round
        shown, watched = infos
        if watched is not None:
            self.session.emit(RoundStarted(run_id=self.session.run_id, info=watched))
        asked = await self.ask(shown, closing)
        if not isinstance(asked, Ending):
            step, this = asked
            self.trace.append(this.done())
            self.answer, self.answer_from_closing_round = step_answer(step), True
        return self.finish(ending)

    def finish(self, ending: Ending) -> TieredLoopResult[Any, Any, Any]:
        outcome = ending.outcome
        reason = ending.reason
        if outcome is None:
            outcome = Outcome.APPLIED if self.items or self.proposals else Outcome.SILENT
        if reason is StopReason.EXECUTOR_DONE and outcome is Outcome.SILENT:
            reason = StopReason.NOTHING_RETRIEVED
        result: TieredLoopResult[Any, Any, Any] = TieredLoopResult(
            items=self.items,
            rounds=self.rounds,
            outcome=outcome,
            stop_reason=reason,
            error=ending.error,
            usage=self.session.usage,
            trace=tuple(self.trace),
            run_id=self.session.run_id,
            proposed=self.proposals,
            checkpoint=self.checkpoint(reason),
            answer=self.answer,
            answer_from_closing_round=self.answer_from_closing_round,
        )
        seen = None
        if self.session.observers:
            # The caller's result is not the observers' to edit: they get their own lists.
            seen = dataclasses.replace(
                result, items=list(self.items), proposed=[p.model_copy(deep=True) for p in self.proposals]
            )
        return self.session.finish(result, seen=seen)

    def kept(self) -> None:
        """Hand the observers that want one a checkpoint of the run so far (a round ended; the run goes on)."""
        if self.keepers:
            deliver_checkpoint(self.keepers, self.session.run_id, self.checkpoint(None))

    def recent_json(self) -> tuple[tuple[str, dict[str, JsonValue]], ...]:
        """The degeneration window's calls as JSON; each entry made once (the window only grows)."""
        made = self.recent_made
        for name, args in self.recent[len(made) :]:
            made.append((name, args.model_dump(mode="json")))
        return tuple(made)

    def checkpoint(self, reason: StopReason | None) -> RunCheckpoint:
        """The run's state at its end, or between rounds (``reason`` ``None``); it can be resumed from a
        stop at a proposal, or from between rounds (a run that died there)."""
        usage = self.session.usage
        finished = self.codec is None or (reason is not None and reason is not StopReason.PROPOSED)
        state: dict[str, Any] = {}
        if not finished:
            pending = self.proposals if reason is StopReason.PROPOSED else ()
            state = {
                "calls": tuple(self.records),
                "recent": self.recent_json(),
                "recent_rounds": tuple(self.recent_rounds),
                "refusals": self.refusals,
                "context_summary": self.window.summary,
                "context_summarized": self.window.summarized,
                "proposals": tuple(CheckpointProposal(**p.model_dump(mode="json")) for p in pending),
            }
        if self.template is None:
            # The config's and the tools' parts (and their digest texts) are made once per process, not per run.
            config, text = config_parts(self.config)
            self.digests.know(config, text)
            tools: list[CheckpointTool] = []
            for name, t in self.box.tools.items():
                tool, text = tool_part(name, declared_tier(t))
                self.digests.know(tool, text)
                tools.append(tool)
            self.template = RunCheckpoint.model_construct(run_id=self.session.run_id, config=config, tools=tuple(tools))
        # From values already of the fields' types (so not validated again: a checkpoint per round must
        # stay cheap), one copy of the run's template; a checkpoint read back is validated by ``model_validate_json``.
        changes = {
            "finished": finished,
            "stop_reason": reason,
            "rounds": self.rounds,
            "requests": usage.requests,
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "largest_round_tokens": self.largest_round_tokens,
            "seconds": time.monotonic() - self.started,
        }
        return self.template._sealed_with(changes | state, self.digests)


async def run_core(
    caller: StructuredCaller,
    agent: ToolAgent[Any, Any, Any],
    box: Toolbox,
    ctx: object,
    config: LoopConfig,
    same: SameFunc[Any] | None,
    observers: tuple[Observer, ...],
    *,
    may_propose: bool,
    codec: Codec | None = None,
    resumed: Callable[[_Run], None] | None = None,
    run_id: str | None = None,
    usage: Usage | None = None,
) -> TieredLoopResult[Any, Any, Any]:
    """Run rounds until the executor stops, a ceiling is reached, or something fails.

    A resumed run passes its ``run_id``, the ``usage`` spent so far, and ``resumed``, which
    restores the run's state from the checkpoint before the first round.
    """
    role = agent.role()
    session = RunSession(
        observers,
        agent=agent,
        role=role,
        max_rounds=config.max_rounds,
        tools=tuple(box.tools),
        config=config,
        run_id=run_id,
        usage=usage,
    )
    async with session:
        # Cancellation and wiring mistakes propagate; the session tells observers the run is over.
        run = _Run(session, caller, agent, box, ctx, config, same, may_propose, codec)
        if resumed is not None:
            resumed(run)
        return await _rounds(run, box, config)


async def _rounds(run: _Run, box: Toolbox, config: LoopConfig) -> TieredLoopResult[Any, Any, Any]:
    """The loop itself: ask, check for a repeat, gate by tier, dispatch; stop on the first ending."""
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
        if step.done or step.call is None:
            run.trace.append(this.done())
            run.answer = step_answer(step)
            return run.finish(Ending(None, StopReason.EXECUTOR_DONE))
        tool, args = box.resolve(step.call)
        # A repeat refused under RepeatPolicy.REFUSE is neither None nor an Ending: the run goes on.
        ending = run.repeat(this, tool, args)
        if ending is None:
            match gate(tool, config):
                case "run", tier:
                    ending = await run.dispatch(this, tool, tier, args)
                case "propose", tier:
                    ending = run.propose(this, tool, tier, args)
                case _:
                    ending = run.refuse(this, tool, args)
        if isinstance(ending, Ending):
            return await run.close(ending)
        run.kept()
    return await run.close(Ending(None, StopReason.ROUND_CEILING))
