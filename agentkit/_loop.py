"""The one loop body behind ``run_tool_loop`` and ``run_tool_loop_tiered``.

``run_core`` reads in one screen; each step of a round is a method of ``_Run``: ``ask`` the
executor, ``gate`` the call by tier, ``dispatch`` it to the tool, and ``finish`` with an ending.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
import typing
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

from agentkit.agent import PriorCall, ToolAgent, ToolRoundInfo
from agentkit.config import AfterProposal, LoopConfig
from agentkit.degeneration import SameFunc, is_repeat
from agentkit.errors import AgentkitError, MissingTierError, Throttled, ToolError, ToolRetry, ToolTimeout, UsageError
from agentkit.events import (
    DegenerationDetected,
    LLMCallFinished,
    ProposalCaptured,
    RoundStarted,
    RunAborted,
    RunFinished,
    RunStarted,
    ToolCallStarted,
    ToolResultReturned,
)
from agentkit.observe import Observer, dispatch, settle
from agentkit.outcome import Outcome, StopReason
from agentkit.proposals import ProposedAction
from agentkit.results import RoundRecord, TieredLoopResult, Usage
from agentkit.step import ToolStep, build_step_model, step_call_parts
from agentkit.structured import Attempt, StructuredCaller, StructuredRequest, generate_structured
from agentkit.tiers import Tier, runs_live, tier_choices
from agentkit.tools import Tool, declared_tier, validate_tool_names

Verdict = Literal["run", "propose", "no_tier"]


def timeout(delay: float | None) -> Any:
    """``asyncio.timeout``, imported on first use so that ``import agentkit`` does not load asyncio."""
    import asyncio  # see the docstring

    return asyncio.timeout(delay)


PROPOSED_NOTE = "proposed for human approval; not executed"


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


def missing_tier_error(name: str) -> MissingTierError:
    return MissingTierError(f"tool {name!r} declares no tier; choose one of {tier_choices()}", tool_name=name)


@dataclass(frozen=True, slots=True)
class Toolbox:
    """The tools of one run, validated once, with their step model built once."""

    tools: dict[str, Tool[Any, Any]]
    step_model: type[ToolStep[Any]]
    single: Tool[Any, Any] | None

    @classmethod
    def build(cls, tool_or_tools: Tool[Any, Any] | Sequence[Tool[Any, Any]], config: LoopConfig) -> Toolbox:
        single: Tool[Any, Any] | None
        if callable(getattr(tool_or_tools, "call", None)):
            single, tools = typing.cast("Tool[Any, Any]", tool_or_tools), [typing.cast("Tool[Any, Any]", tool_or_tools)]
        elif isinstance(tool_or_tools, Sequence) and not isinstance(tool_or_tools, str | bytes):
            single, tools = None, list(tool_or_tools)
        else:
            raise UsageError(
                "tools must be one Tool or a list or tuple of them (their order is the schema's order); "
                f"got a {type(tool_or_tools).__name__}"
            )
        validate_tool_names(tools)
        spec: tuple[tuple[str, type[BaseModel]], ...] | type[BaseModel]
        spec = single.args_type if single is not None else tuple((t.name, t.args_type) for t in tools)
        step_model = build_step_model(spec, rationale_max_length=config.rationale_max_length)  # type: ignore[arg-type]  # type objects are hashable
        return cls({t.name: t for t in tools}, step_model, single)

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


class _Run:
    def __init__(
        self,
        caller: StructuredCaller,
        agent: ToolAgent[Any, Any, Any],
        box: Toolbox,
        ctx: object,
        config: LoopConfig,
        same: SameFunc[Any] | None,
        observers: tuple[Observer, ...],
        may_propose: bool,
    ) -> None:
        self.caller, self.agent, self.box, self.ctx = caller, agent, box, ctx
        self.config, self.same, self.observers, self.may_propose = config, same, observers, may_propose
        self.role = agent.role()
        self.run_id = uuid.uuid4().hex
        self.started = time.monotonic()
        self.items: list[Any] = []
        self.batches: list[tuple[Any, ...]] = []
        self.calls: list[PriorCall[Any]] = []
        self.recent: list[tuple[str, BaseModel]] = []
        self.proposals: list[ProposedAction[Any]] = []
        self.trace: list[RoundRecord] = []
        self.usage = Usage()
        self.largest_round_tokens = 0
        self.rounds = 0
        self.llm_seconds = 0.0
        self.round_usage = Usage()

    def emit(self, event: Any) -> None:
        if self.observers:
            dispatch(self.observers, event)

    def remaining(self) -> float | None:
        if self.config.deadline is None:
            return None
        return self.config.deadline - (time.monotonic() - self.started)

    def limit_reached(self) -> Ending | None:
        remaining = self.remaining()
        if remaining is not None and remaining <= 0:
            return Ending(None, StopReason.DEADLINE)
        budget = self.config.token_budget
        if budget is not None and self.usage.total_tokens + self.largest_round_tokens > budget:
            return Ending(None, StopReason.BUDGET_EXHAUSTED)
        return None

    def round_info(self, round: int) -> ToolRoundInfo[Any]:
        max_rounds = self.config.max_rounds
        return ToolRoundInfo(
            round=round,
            max_rounds=max_rounds,
            is_final_round=round == max_rounds,
            prior_results=tuple(self.batches),
            prior_calls=tuple(self.calls),
            proposals=tuple(self.proposals),
        )

    async def ask(self, info: ToolRoundInfo[Any]) -> ToolStep[Any] | Ending:
        prompt = self.agent.render(self.ctx, info)
        role = self.role
        request = StructuredRequest(
            system=prompt.system,
            dynamic=prompt.dynamic,
            model=role.model,
            fallback_model=role.fallback_model,
            temperature=role.temperature,
            max_tokens=role.max_tokens,
            prompt_type=role.prompt_type,
            seed=role.seed,
        )
        started = time.perf_counter()
        used = Usage()
        spent: list[Usage] = []
        ending: Ending | None = None
        step: ToolStep[Any] | None = None
        try:
            async with timeout(self.remaining()):
                completion = await generate_structured(
                    self.caller,
                    request,
                    self.box.step_model,
                    self.config.retry,
                    on_attempt=self._attempt_hook(info.round, spent),
                )
            step, used = completion.value, completion.usage
        except UsageError:
            raise
        except TimeoutError:
            # The deadline cut the call short: keep what the finished attempts spent.
            used, ending = sum(spent, Usage()), Ending(None, StopReason.DEADLINE)
        except Throttled as error:
            used, ending = error.usage or Usage(), Ending(Outcome.ERROR, StopReason.THROTTLED, error)
        except AgentkitError as error:
            used, ending = error.usage or Usage(), Ending(Outcome.ERROR, StopReason.LLM_ERROR, error)
        self.usage += used
        self.largest_round_tokens = max(self.largest_round_tokens, used.total_tokens)
        self.llm_seconds, self.round_usage = time.perf_counter() - started, used
        if ending is not None:
            self.record(info.round, done=False, error=str(ending.error) if ending.error else ending.reason.value)
            return ending
        assert step is not None
        return step

    def _attempt_hook(self, round: int, spent: list[Usage]) -> Callable[[Attempt], None]:
        role = self.role.prompt_type or "executor"

        def hook(attempt: Attempt) -> None:
            spent.append(attempt.usage)
            if not self.observers:
                return
            self.emit(LLMCallFinished.of(attempt, run_id=self.run_id, role=role, round=round))

        return hook

    def record(self, round: int, **fields: Any) -> None:
        self.trace.append(RoundRecord(round=round, llm_seconds=self.llm_seconds, usage=self.round_usage, **fields))

    def degenerate(self, round: int, step: ToolStep[Any], tool: Tool[Any, Any], args: BaseModel) -> Ending | None:
        if is_repeat(tool.name, args, self.recent, self.same, self.config.degeneration_window):
            if self.observers:
                copied = args.model_copy(deep=True)
                self.emit(DegenerationDetected(run_id=self.run_id, round=round, tool_name=tool.name, args=copied))
            self.record(
                round, done=False, rationale=step.rationale, tool_name=tool.name, call=args, tier=declared_tier(tool)
            )
            return Ending(Outcome.STALEMATE, StopReason.DEGENERATION)
        self.recent.append((tool.name, args))
        return None

    def refuse(self, round: int, step: ToolStep[Any], tool: Tool[Any, Any], args: BaseModel) -> Ending:
        error = missing_tier_error(tool.name)
        self.record(round, done=False, rationale=step.rationale, tool_name=tool.name, call=args, error=str(error))
        return Ending(Outcome.ERROR, StopReason.TOOL_DECLARES_NO_TIER, error)

    def propose(
        self, round: int, step: ToolStep[Any], tool: Tool[Any, Any], tier: Tier, args: BaseModel
    ) -> Ending | None:
        if not self.may_propose:
            error = ToolError(
                f"tool {tool.name!r} (Tier.{tier.name}) cannot run live under autonomy "
                f"Tier.{self.config.autonomy.name}; use run_tool_loop_tiered for tools that need approval",
                tool_name=tool.name,
            )
            self.record(
                round, done=False, rationale=step.rationale, tool_name=tool.name, call=args, tier=tier, error=str(error)
            )
            return Ending(Outcome.ERROR, StopReason.TOOL_ERROR, error)
        # The proposal gets its own copy: the executor's view of the call (prior calls, trace) must
        # not be able to change what a human approves.
        proposal = ProposedAction[Any].create(
            tool_name=tool.name,
            tier=tier,
            args=args.model_copy(deep=True),
            rationale=step.rationale,
            round=round,
            run_id=self.run_id,
        )
        self.proposals.append(proposal)
        self.calls.append(
            PriorCall(round=round, tool_name=tool.name, args=args, observation=PROPOSED_NOTE, proposed=True)
        )
        if self.observers:
            self.emit(ProposalCaptured(run_id=self.run_id, proposal=proposal.model_copy(deep=True)))
        self.record(
            round, done=False, rationale=step.rationale, tool_name=tool.name, call=args, tier=tier, proposed=True
        )
        if self.config.after_proposal is AfterProposal.STOP:
            return Ending(Outcome.APPLIED, StopReason.PROPOSED)
        return None

    async def dispatch(
        self, round: int, step: ToolStep[Any], tool: Tool[Any, Any], tier: Tier, args: BaseModel
    ) -> Ending | None:
        if self.observers:
            # Observers get their own copy: nothing they do can change the call that runs.
            event_args = args.model_copy(deep=True)
            self.emit(ToolCallStarted(run_id=self.run_id, round=round, tool_name=tool.name, tier=tier, args=event_args))
        started = time.perf_counter()
        batch, observation, ending = await self.call_tool(tool, args)
        seconds = time.perf_counter() - started
        ran = ending is None and observation is None
        if ran:
            self.items.extend(batch)
            self.batches.append(batch)
        if ending is None:
            self.calls.append(
                PriorCall(round=round, tool_name=tool.name, args=args, batch=batch, observation=observation)
            )
        self.emit(
            ToolResultReturned(
                run_id=self.run_id,
                round=round,
                tool_name=tool.name,
                batch_size=len(batch) if ran else 0,
                seconds=seconds,
                observation=observation,
                error=ending.error if ending else None,
            )
        )
        self.record(
            round,
            done=False,
            rationale=step.rationale,
            tool_name=tool.name,
            call=args,
            tier=tier,
            executed=ran,
            batch_size=len(batch) if ran else 0,
            observation=observation,
            error=str(ending.error) if ending and ending.error else None,
            tool_seconds=seconds,
        )
        return ending

    async def call_tool(
        self, tool: Tool[Any, Any], args: BaseModel
    ) -> tuple[tuple[Any, ...], str | None, Ending | None]:
        """Run one call within the tool timeout (and the run's deadline): (batch, observation, ending)."""
        limit = self.config.tool_timeout
        remaining = self.remaining()
        if remaining is not None and (limit is None or remaining < limit):
            limit = remaining
        started = time.monotonic()
        try:
            async with timeout(limit) as scope:
                batch = await tool.call(args)
        except ToolRetry as retry:
            return (), retry.message, None
        except TimeoutError as raised:
            # Only the loop's own timer means "timed out"; a TimeoutError the tool raised
            # (a socket timeout, say) is that tool's failure.
            ending = self.timed_out(tool, limit) if scope.expired() else self.tool_failed(tool, raised)
            return (), None, ending
        except Exception as raised:
            return (), None, self.tool_failed(tool, raised)
        if limit is not None and time.monotonic() - started > limit:
            # A sync tool holds the event loop, so the timer could not interrupt it: its late
            # result is discarded all the same.
            return (), None, self.timed_out(tool, limit)
        if not isinstance(batch, Sequence) or isinstance(batch, str | bytes):
            wrong = TypeError(f"returned {type(batch).__name__}; a tool returns a sequence (a batch) of items")
            return (), None, self.tool_failed(tool, wrong)
        return tuple(batch), None, None

    def timed_out(self, tool: Tool[Any, Any], limit: float | None) -> Ending:
        remaining = self.remaining()
        if remaining is not None and remaining <= 0:
            return Ending(None, StopReason.DEADLINE)
        error = ToolTimeout(f"tool {tool.name!r} timed out after {limit}s", tool_name=tool.name)
        return Ending(Outcome.ERROR, StopReason.TOOL_ERROR, error)

    def tool_failed(self, tool: Tool[Any, Any], raised: Exception) -> Ending:
        error = ToolError(f"tool {tool.name!r} failed: {type(raised).__name__}: {raised}", tool_name=tool.name)
        error.__cause__ = raised
        return Ending(Outcome.ERROR, StopReason.TOOL_ERROR, error)

    def finish(self, ending: Ending) -> TieredLoopResult[Any, Any]:
        outcome = ending.outcome
        reason = ending.reason
        if outcome is None:
            outcome = Outcome.APPLIED if self.items or self.proposals else Outcome.SILENT
        if reason is StopReason.EXECUTOR_DONE and outcome is Outcome.SILENT:
            reason = StopReason.NOTHING_RETRIEVED
        result: TieredLoopResult[Any, Any] = TieredLoopResult(
            items=self.items,
            rounds=self.rounds,
            outcome=outcome,
            stop_reason=reason,
            error=ending.error,
            usage=self.usage,
            trace=tuple(self.trace),
            run_id=self.run_id,
            proposed=self.proposals,
        )
        if self.observers:
            # The caller's result is not the observers' to edit: they get their own lists.
            seen = dataclasses.replace(
                result, items=list(self.items), proposed=[p.model_copy(deep=True) for p in self.proposals]
            )
            self.emit(RunFinished(run_id=self.run_id, result=seen))
        return result


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
) -> TieredLoopResult[Any, Any]:
    """Run rounds until the executor stops, a ceiling is reached, or something fails."""
    run = _Run(caller, agent, box, ctx, config, same, observers, may_propose)
    run.emit(
        RunStarted(
            run_id=run.run_id,
            agent=type(agent).__name__,
            model=run.role.model,
            tools=tuple(box.tools),
            max_rounds=config.max_rounds,
            config=config,
        )
    )
    try:
        result = await _rounds(run, box, config)
    except BaseException as raised:
        # Cancellation and wiring mistakes propagate; observers still learn the run is over.
        run.emit(RunAborted(run_id=run.run_id, error=raised))
        if observers:
            await settle(observers, run.run_id)
        raise
    if observers:
        await settle(observers, run.run_id)
    return result


async def _rounds(run: _Run, box: Toolbox, config: LoopConfig) -> TieredLoopResult[Any, Any]:
    """The loop itself: ask, check for a repeat, gate by tier, dispatch; stop on the first ending."""
    for name, tool in box.tools.items():
        if declared_tier(tool) is None:
            return run.finish(Ending(Outcome.ERROR, StopReason.TOOL_DECLARES_NO_TIER, missing_tier_error(name)))
    rounds = range(1, config.max_rounds + 1) if config.max_rounds is not None else itertools.count(1)
    for round in rounds:
        if (limit := run.limit_reached()) is not None:
            return run.finish(limit)
        info = run.round_info(round)
        run.rounds = round
        run.emit(RoundStarted(run_id=run.run_id, info=info))
        step = await run.ask(info)
        if isinstance(step, Ending):
            return run.finish(step)
        if step.done or step.call is None:
            run.record(round, done=True, rationale=step.rationale)
            return run.finish(Ending(None, StopReason.EXECUTOR_DONE))
        tool, args = box.resolve(step.call)
        ending = run.degenerate(round, step, tool, args)
        if ending is None:
            match gate(tool, config):
                case "run", tier:
                    ending = await run.dispatch(round, step, tool, tier, args)
                case "propose", tier:
                    ending = run.propose(round, step, tool, tier, args)
                case _:
                    ending = run.refuse(round, step, tool, args)
        if ending is not None:
            return run.finish(ending)
    return run.finish(Ending(None, StopReason.ROUND_CEILING))
