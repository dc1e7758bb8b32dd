"""``resume_tool_loop``: continue a tiered run that stopped at a proposal, once a human has decided.

The resumed run is the same loop core (``agentkit._loop``) restored from the checkpoint: before its
next round each approved call runs once through ``execute_approved`` and each rejection becomes
that call's observation; then the rounds go on under the checkpoint's ceilings, budget, deadline
and degeneration window, counted from where the run stopped. Everything is checked before anything
runs: a refused resume makes no model call and runs no tool.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, overload

from pydantic import BaseModel, ValidationError
from typing_extensions import TypeVar as DefaultedTypeVar

from agentkit._loop import Toolbox, _Run, run_core
from agentkit.agent import PriorCall, ToolAgent
from agentkit.checkpoint import CheckpointCall, Codec, RunCheckpoint, function_name
from agentkit.context import Summarizer
from agentkit.degeneration import SameFunc
from agentkit.errors import ResumeRefused
from agentkit.observe import ObserverArg, observers_of
from agentkit.results import TieredLoopResult, Usage
from agentkit.structured import StructuredCaller
from agentkit.tiers import Tier
from agentkit.tools import ContextTool, Tool, declared_tier

if TYPE_CHECKING:
    from agentkit.approval import Approval, Rejection

__all__ = ["resume_tool_loop"]

Ctx = TypeVar("Ctx")
Args = TypeVar("Args", bound=BaseModel)
R = TypeVar("R")
Answer = DefaultedTypeVar("Answer", default=None)


@overload
async def resume_tool_loop(
    caller: StructuredCaller,
    agent: ToolAgent[Ctx, Args, R],
    tools: Tool[Args, R] | ContextTool[Args, R, Ctx],
    ctx: Ctx,
    checkpoint: RunCheckpoint,
    decisions: Iterable[Approval[Any] | Rejection[Any]],
    *,
    observer: ObserverArg = None,
    same: SameFunc[Args] | None = None,
    summarize: Summarizer | None = None,
    answer: type[Answer] | None = None,
) -> TieredLoopResult[Args, R, Answer]: ...
@overload
async def resume_tool_loop(
    caller: StructuredCaller,
    agent: ToolAgent[Ctx, BaseModel, R],
    tools: Sequence[Tool[Any, R] | ContextTool[Any, R, Ctx]],
    ctx: Ctx,
    checkpoint: RunCheckpoint,
    decisions: Iterable[Approval[Any] | Rejection[Any]],
    *,
    observer: ObserverArg = None,
    same: SameFunc[BaseModel] | None = None,
    summarize: Summarizer | None = None,
    answer: type[Answer] | None = None,
) -> TieredLoopResult[BaseModel, R, Answer]: ...
async def resume_tool_loop(
    caller: StructuredCaller,
    agent: ToolAgent[Ctx, Any, R],
    tools: Tool[Any, R] | ContextTool[Any, R, Ctx] | Sequence[Tool[Any, R] | ContextTool[Any, R, Ctx]],
    ctx: Ctx,
    checkpoint: RunCheckpoint,
    decisions: Iterable[Approval[Any] | Rejection[Any]],
    *,
    observer: ObserverArg = None,
    same: SameFunc[Any] | None = None,
    summarize: Summarizer | None = None,
    answer: type[Any] | None = None,
) -> TieredLoopResult[Any, R, Any]:
    """Continue the run ``checkpoint`` records, with a decision for each of its pending proposals.

    Args:
        caller: The structured-call seam.
        agent: The executor (the same one, or one that renders the same way).
        tools: The run's tool set: the same names, in the same order, at the same tiers.
        ctx: The caller's data for ``agent.render``, and for the tools that take the run's ctx (the approved calls
            included).
        checkpoint: ``result.checkpoint`` of a run that stopped at a proposal (perhaps reloaded
            with ``RunCheckpoint.model_validate_json``).
        decisions: One ``Approval`` or ``Rejection`` per pending proposal.
        observer: One observer, several, or none.
        same: Degeneration comparator; default compares args by value.
        summarize: The run's ``ContextWindow.summarize``, given again: a function cannot be stored
            in the checkpoint (its bounds and its running summary are). Required exactly when the
            run had one, and of the same ``module.qualname``.
        answer: The run's answer type, as given to ``run_tool_loop_tiered`` (a type is not part
            of the checkpoint, so it is passed again).

    Returns:
        The continued run's result, under the same run id: ``rounds`` and ``usage`` count the whole
        run, ``items`` every item gathered (the approved calls' batches included), ``trace`` and
        ``proposed`` this leg's rounds and proposals, ``checkpoint`` the state to resume from again.

    Raises:
        ResumeRefused: the checkpoint is altered or of another version, or finished; the tool set
            differs from the checkpoint's; a decision is for a proposal the checkpoint does not hold,
            is one of two for the same proposal, or is an approval already spent; or a pending
            proposal has no decision; ``summarize`` is missing, unexpected, or another function than
            the run's. Nothing ran.
        UsageError: a tool whose items cannot round-trip through JSON.
    """
    run = prepare_resume(
        caller,
        agent,
        tools,
        ctx,
        checkpoint,
        decisions,
        observer=observer,
        same=same,
        summarize=summarize,
        answer=answer,
    )
    return await run()


def prepare_resume(
    caller: StructuredCaller,
    agent: ToolAgent[Any, Any, Any],
    tools: Tool[Any, Any] | ContextTool[Any, Any, Any] | Sequence[Tool[Any, Any] | ContextTool[Any, Any, Any]],
    ctx: object,
    checkpoint: RunCheckpoint,
    decisions: Iterable[Approval[Any] | Rejection[Any]],
    *,
    observer: ObserverArg = None,
    same: SameFunc[Any] | None = None,
    summarize: Summarizer | None = None,
    answer: type[Any] | None = None,
    run_approved: Callable[[Any, Tool[Any, Any], Any], Awaitable[Sequence[Any]]] | None = None,
) -> Callable[[], Awaitable[TieredLoopResult[Any, Any]]]:
    """Check everything ``resume_tool_loop`` checks, running nothing; returns the coroutine function that resumes.

    ``run_approved`` executes an approved call in place of ``execute_approved`` (the journal runs
    it through its claim).
    """
    checkpoint.verify()
    if checkpoint.finished:
        reason = checkpoint.stop_reason.value if checkpoint.stop_reason is not None else "no run recorded"
        raise ResumeRefused(
            f"run {checkpoint.run_id!r} is finished ({reason}); only a run that stopped at a proposal can resume"
        )
    _check_summarizer(checkpoint, summarize)
    config = checkpoint.config.rebuild(summarize)
    box = Toolbox.build(tools, config, answer)
    _check_tools(checkpoint, box)
    codec = Codec(box.tools)
    pending = _match(checkpoint, codec, list(decisions))
    decoded = [_decode(codec, call) for call in checkpoint.calls]
    recent = [(name, _decode_args(codec, name, args)) for name, args in checkpoint.recent]

    def restore(run: _Run) -> None:
        run.rounds, run.largest_round_tokens = checkpoint.rounds, checkpoint.largest_round_tokens
        run.started -= checkpoint.seconds
        run.records, run.restored, run.recent, run.pending = list(checkpoint.calls), decoded, recent, pending
        run.recent_rounds, run.refusals = list(checkpoint.recent_rounds), checkpoint.refusals
        run.window.summary, run.window.summarized = checkpoint.context_summary, checkpoint.context_summarized
        run.run_approved = run_approved

    usage = Usage(
        requests=checkpoint.requests, input_tokens=checkpoint.input_tokens, output_tokens=checkpoint.output_tokens
    )

    async def resume() -> TieredLoopResult[Any, Any]:
        return await run_core(
            caller,
            agent,
            box,
            ctx,
            config,
            same,
            observers_of(observer),
            may_propose=True,
            codec=codec,
            resumed=restore,
            run_id=checkpoint.run_id,
            usage=usage,
        )

    return resume


def _check_tools(checkpoint: RunCheckpoint, box: Toolbox) -> None:
    given: dict[str, Tier | None] = {name: declared_tier(t) for name, t in box.tools.items()}
    kept = {tool.name: tool.tier for tool in checkpoint.tools}
    problems = [f"tool {name!r} is missing" for name in kept if name not in given]
    problems += [f"tool {name!r} was not in the run" for name in given if name not in kept]
    problems += [
        f"tool {name!r} now declares {_tier(given[name])}, the run had {_tier(tier)}"
        for name, tier in kept.items()
        if name in given and given[name] is not tier
    ]
    if not problems and list(given) != list(kept):
        problems.append(f"the tools are in another order ({list(given)}; the run had {list(kept)})")
    if problems:
        raise ResumeRefused(
            f"run {checkpoint.run_id!r} cannot resume with another tool set: {'; '.join(problems)}. Nothing ran"
        )


def _check_summarizer(checkpoint: RunCheckpoint, summarize: Summarizer | None) -> None:
    context = checkpoint.config.context
    had = None if context is None else context.summarize
    given = None if summarize is None else function_name(summarize)
    if had == given:
        return
    if had is None:
        why = "the run had no ContextWindow summarizer; resume without summarize="
    elif given is None:
        why = f"the run's ContextWindow summarized with {had}; pass it again as summarize="
    else:
        why = f"the run's ContextWindow summarized with {had}, not {given}; pass the same function"
    raise ResumeRefused(f"run {checkpoint.run_id!r} cannot resume: {why}. Nothing ran")


def _tier(tier: Tier | None) -> str:
    return f"Tier.{tier.name}" if tier is not None else "no tier"


def _match(
    checkpoint: RunCheckpoint, codec: Codec, decisions: list[Approval[Any] | Rejection[Any]]
) -> list[tuple[int, Any]]:
    """Each pending proposal's decision, by the index of its call in the checkpoint's record."""
    from agentkit.approval import Approval, Rejection

    wanted = {(p.round, p.tool_name, p.digest): p for p in checkpoint.proposals}
    found: dict[tuple[int, str, str], Approval[Any] | Rejection[Any]] = {}
    for decision in decisions:
        if not isinstance(decision, Approval | Rejection):
            raise ResumeRefused(f"decisions are Approval or Rejection values; got {type(decision).__name__}")
        proposal = decision.proposal
        key = (proposal.round, proposal.tool_name, decision.digest)
        if proposal.run_id != checkpoint.run_id or key not in wanted or proposal.digest != decision.digest:
            raise ResumeRefused(
                f"a decision is for a call to {proposal.tool_name!r} (round {proposal.round}, run "
                f"{proposal.run_id!r}, digest {decision.digest[:12]}) that run {checkpoint.run_id!r} does not hold "
                "as a pending proposal; nothing ran"
            )
        if key in found:
            raise ResumeRefused(
                f"two decisions for the proposed call to {proposal.tool_name!r} in round {proposal.round}; "
                "give one. Nothing ran"
            )
        if isinstance(decision, Approval) and decision.executed:
            raise ResumeRefused(
                f"approval {decision.id} for {proposal.tool_name!r} was already executed; an approval runs once. "
                "Nothing ran"
            )
        found[key] = decision
    missing = [key for key in wanted if key not in found]
    if missing:
        named = ", ".join(f"{name!r} in round {round} (digest {digest[:12]})" for round, name, digest in missing)
        raise ResumeRefused(
            f"run {checkpoint.run_id!r} cannot resume: no decision for the proposed call to {named}; "
            "approve or reject each pending proposal. Nothing ran"
        )
    for stored in checkpoint.proposals:
        try:
            codec.decode_proposal(stored)
        except ValidationError as invalid:
            raise ResumeRefused(
                f"the proposed call to {stored.tool_name!r} no longer validates as its tool's args: {invalid}"
            ) from invalid
    index = {(c.round, c.tool_name): i for i, c in enumerate(checkpoint.calls) if c.proposed}
    return [(index[(round, name)], found[(round, name, digest)]) for round, name, digest in wanted]


def _decode(codec: Codec, call: CheckpointCall) -> PriorCall[Any]:
    args = _decode_args(codec, call.tool_name, call.args)
    try:
        batch = tuple(codec.decode_batch(call.tool_name, call.batch))
    except ValidationError as invalid:
        raise ResumeRefused(
            f"the items of tool {call.tool_name!r} in the checkpoint no longer validate as its item type: {invalid}"
        ) from invalid
    return PriorCall(
        round=call.round,
        tool_name=call.tool_name,
        args=args,
        batch=batch,
        observation=call.observation,
        proposed=call.proposed,
    )


def _decode_args(codec: Codec, tool_name: str, args: dict[str, Any]) -> BaseModel:
    try:
        return codec.decode_args(tool_name, args)
    except ValidationError as invalid:
        raise ResumeRefused(
            f"args stored for tool {tool_name!r} no longer validate as {codec.args[tool_name].__name__}: {invalid}"
        ) from invalid
