"""`ToolLoop`: a tool loop's wiring bound once, with `run`, `run_sync`, `stream` and `resume`.

The caller, the executor, the tools, the config, the observers and the answer type are bound
when the loop is made (its tools validated and its step schema built once); each call of `run`
is one run of that wiring, each `resume` one run continued from its state. Every loop function
of the package (`run_tool_loop`, `run_tool_loop_tiered`, `resume_tool_loop`, the streams,
`journal.resume`) is a `ToolLoop` used once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from pydantic import BaseModel
from typing_extensions import TypeVar as DefaultedTypeVar
from typing_extensions import Unpack

from agentkit._admission import admit
from agentkit._agent import ToolAgent
from agentkit._codec import Codec, decoded_args, proposal_of
from agentkit._config import AfterProposal, LoopConfig
from agentkit._context import Summarizer
from agentkit._cost import check_priced
from agentkit._grants import Grants
from agentkit._loop import AskGrant, Bound, RunApproved, run_core
from agentkit._observe import Observer, observers_of, wants_checkpoints
from agentkit._options import LoopOptions, RunOptions
from agentkit._outcome import StopReason
from agentkit._proposals import ProposedAction
from agentkit._results import TieredLoopResult
from agentkit._state import RoundEntry, RunCheckpoint, comparator_name, function_name
from agentkit._structured import StructuredCaller
from agentkit._toolbox import Toolbox, gate, may_stop_at_a_proposal
from agentkit._tools import AnyTool, ContextTool, Tool
from agentkit.errors import ResumeRefused, UsageError

if TYPE_CHECKING:
    from agentkit._approval import Approval, Rejection
    from agentkit._stream import RunStream

__all__ = ["ToolLoop", "awaiting", "pending_proposals"]

Ctx = TypeVar("Ctx")
Args = TypeVar("Args", bound=BaseModel)
R = TypeVar("R")
Answer = DefaultedTypeVar("Answer", default=None)

_UNSET: Any = object()


class ToolLoop(Generic[Ctx, Args, R, Answer]):
    """A tiered tool loop's wiring, bound once: run it, stream it, or resume one of its runs.

    Calls above the autonomy ceiling become proposals (`run_tool_loop_tiered`'s semantics); a run
    that stopped at one continues with `resume` once a human decided, and so does a run whose
    process died between rounds, from the state its journal kept.

    Example:
        >>> loop = ToolLoop(caller, Researcher(), [search, delete], LoopConfig(max_rounds=6))
        >>> first = await loop.run("clean up the old reports")
        >>> decided = [approve(first.proposed[0], approved_by="ops")]
        >>> again = await loop.resume("clean up the old reports", first.checkpoint, decided)

    Raises:
        UsageError: bad tool names or another wiring mistake; where a run may stop at a proposal, a
            tool whose item type is undeclared or cannot round-trip through JSON. Raised when the
            loop is made, before any model call.
    """

    @overload
    def __init__(
        self: ToolLoop[Ctx, Args, R, Answer],
        caller: StructuredCaller,
        agent: ToolAgent[Ctx, Args, R],
        tools: Tool[Args, R] | ContextTool[Args, R, Ctx],
        config: LoopConfig | None = None,
        **options: Unpack[LoopOptions[Args, Answer]],
    ) -> None: ...
    @overload
    def __init__(
        self: ToolLoop[Ctx, BaseModel, R, Answer],
        caller: StructuredCaller,
        agent: ToolAgent[Ctx, BaseModel, R],
        tools: Sequence[Tool[Any, R] | ContextTool[Any, R, Ctx]],
        config: LoopConfig | None = None,
        **options: Unpack[LoopOptions[BaseModel, Answer]],
    ) -> None: ...
    def __init__(
        self,
        caller: StructuredCaller,
        agent: ToolAgent[Any, Any, Any],
        tools: AnyTool | Sequence[AnyTool],
        config: LoopConfig | None = None,
        **options: Unpack[LoopOptions[Any, Any]],
    ) -> None:
        self._bind(caller, agent, tools, config, options, grants=options.get("grants"))

    def _bind(
        self,
        caller: StructuredCaller,
        agent: ToolAgent[Any, Any, Any],
        tools: AnyTool | Sequence[AnyTool],
        config: LoopConfig | None,
        options: RunOptions[Any, Any],
        *,
        grants: Grants | None = None,
        may_propose: bool = True,
    ) -> None:
        self.config = config or LoopConfig()
        """The ceilings and policies of a fresh run (a resumed run goes on under its state's)."""
        answer = options.get("answer")
        self._tools, self._answer = tools, answer
        box = Toolbox.build(tools, self.config, answer)
        if not may_propose:
            for candidate in box.tools.values():
                verdict, tier = gate(candidate, self.config)
                if verdict == "propose":
                    raise UsageError(
                        f"tool {candidate.name!r} is Tier.{tier.name} and cannot run live under autonomy "
                        f"Tier.{self.config.autonomy.name}; use run_tool_loop_tiered so its calls become proposals"
                    )
        observers = observers_of(options.get("observer"))
        self._bound = Bound(
            caller=caller,
            agent=agent,
            box=box,
            config=self.config,
            same=options.get("same"),
            observers=observers,
            may_propose=may_propose,
            codec=_codec(box, self.config, observers),
            grants=grants,
        )
        if grants is not None:
            grants.check(box.tools)

    def _asking_grants(self, ask: AskGrant) -> None:
        """Ask `ask` for the standing grant of each proposal, not this loop's `Grants` (the Temporal workflow)."""
        self._bound = dataclasses.replace(self._bound, ask_grant=ask)

    @classmethod
    def _wired(
        cls,
        caller: StructuredCaller,
        agent: ToolAgent[Any, Any, Any],
        tools: AnyTool | Sequence[AnyTool],
        config: LoopConfig | None,
        options: RunOptions[Any, Any],
        *,
        grants: Grants | None = None,
        may_propose: bool = True,
    ) -> ToolLoop[Any, Any, Any, Any]:
        """A loop from an entry point's options, unchecked by the overloads (which its entry point has).

        `may_propose=False` is `run_tool_loop`'s loop: every tool must run live under the config
        (checked before it is bound).
        """
        loop: ToolLoop[Any, Any, Any, Any] = cls.__new__(cls)
        loop._bind(caller, agent, tools, config, options, grants=grants, may_propose=may_propose)
        return loop

    @property
    def tools(self) -> dict[str, Tool[Any, Any]]:
        """The tools, by name, in the step schema's order."""
        return dict(self._bound.box.tools)

    async def run(self, ctx: Ctx, *, run_id: str | None = None) -> TieredLoopResult[Args, R, Answer]:
        """One run: rounds until the executor is done, a ceiling, a proposal (by default) or an error.

        Args:
            ctx: The caller's data for `agent.render`, and the very object each tool that takes
                the run's ctx is called with.
            run_id: The run's id (a fresh one when omitted).
        """
        return await run_core(self._bound, ctx, run_id=run_id)

    def run_sync(self, ctx: Ctx) -> TieredLoopResult[Args, R, Answer]:
        """`run` for scripts: runs it to completion in a new event loop."""
        import asyncio  # kept off `import agentkit`

        return asyncio.run(self.run(ctx))

    def stream(self, ctx: Ctx) -> RunStream[TieredLoopResult[Args, R, Answer]]:
        """`run` as a stream of its events (see `iter_tool_loop_tiered`)."""
        from agentkit._stream import RunStream

        def start(feed: Observer) -> Coroutine[Any, Any, TieredLoopResult[Args, R, Answer]]:
            bound = dataclasses.replace(self._bound, observers=(*self._bound.observers, feed))
            return run_core(bound, ctx)

        return RunStream(start)

    async def resume(
        self,
        ctx: Ctx,
        checkpoint: RunCheckpoint,
        decisions: Iterable[Approval[Any] | Rejection[Any]] = (),
        *,
        summarize: Summarizer | None = _UNSET,
    ) -> TieredLoopResult[Args, R, Answer]:
        """Continue the run `checkpoint` records, with a decision for each proposal it stopped at.

        The run goes on under its own id and config (its ceilings, budget, deadline and repeat
        window counted from where it stopped): an approved call runs once before the next round and
        its batch is that call's result; a rejection is that call's observation.

        Args:
            ctx: As for `run`: the approved calls of tools that take the run's ctx get it too.
            checkpoint: `result.checkpoint` of a run that stopped at a proposal, or the last state
                a journal kept of a run whose process died (perhaps read back with
                `RunCheckpoint.model_validate_json`).
            decisions: One `Approval` or `Rejection` per proposal the run stopped at.
            summarize: The run's `ContextWindow.summarize` (a function is not part of the state);
                by default this loop's config's, when the run had one of that name.

        Raises:
            ResumeRefused: the state is altered, of another version or finished; the tool set
                differs from the run's (`ToolSetChanged`); a decision is for a proposal the run
                does not wait on, is one of two for one proposal, or is a spent approval; a proposal
                the run waits on has no decision; `summarize`, or this loop's `same=`, is missing or
                another function than the run's; the run keeps a `cost_budget` and its state's price table
                has no price for this agent's model (or its fallback). Nothing ran.
        """
        resume = self.prepared(checkpoint, decisions, summarize=summarize)
        return await resume(ctx)

    def prepared(
        self,
        checkpoint: RunCheckpoint,
        decisions: Iterable[Approval[Any] | Rejection[Any]] = (),
        *,
        summarize: Summarizer | None = _UNSET,
        run_id: str | None = None,
        run_approved: RunApproved | None = None,
        observers: Sequence[Observer] = (),
    ) -> Callable[[Ctx], Awaitable[TieredLoopResult[Args, R, Answer]]]:
        """Check everything `resume` checks, running nothing; the function that resumes.

        `run_id`: the run the caller asked for (a state of another run is refused).
        `run_approved`: executes an approved call in place of `execute_approved` (the journal
        runs it through its claim). `observers`: more observers for the resumed run.
        """
        admit(checkpoint, self._bound.box.tools, run_id=run_id)
        if summarize is _UNSET:
            summarize = self._summarizer_for(checkpoint)
        _check_summarizer(checkpoint, summarize)
        _check_comparator(checkpoint, self._bound.same)
        config = checkpoint.config.rebuild(summarize)
        check_priced(config.prices, config.cost_budget, self._bound.agent.role(), resumed=checkpoint.run_id)
        box = Toolbox.build(self._tools, config, self._answer)
        codec = Codec(box.tools)
        if not checkpoint.resumable:
            raise ResumeRefused(
                f"run {checkpoint.run_id!r} cannot go on: a tool's items could not be kept in its state (the tool "
                "declares no item type JSON can carry); nothing ran"
            )
        matched = _match(checkpoint, codec, list(decisions))
        bound = Bound(
            caller=self._bound.caller,
            agent=self._bound.agent,
            box=box,
            config=config,
            same=self._bound.same,
            observers=(*self._bound.observers, *observers),
            may_propose=True,
            codec=codec,
            grants=self._bound.grants,
            ask_grant=self._bound.ask_grant,
        )

        async def resume(ctx: Ctx) -> TieredLoopResult[Args, R, Answer]:
            return await run_core(bound, ctx, checkpoint, decisions=matched, run_approved=run_approved)

        return resume

    def _summarizer_for(self, checkpoint: RunCheckpoint) -> Summarizer | None:
        """This loop's summarizer, when it is the one the run had (by name); else none."""
        context = self.config.context
        mine = None if context is None else context.summarize
        recorded = checkpoint.config.context
        if mine is not None and recorded is not None and recorded.summarize == function_name(mine):
            return mine
        return None


def _codec(box: Toolbox, config: LoopConfig, observers: tuple[Observer, ...]) -> Codec:
    """The run's codec: strict where the run may stop at a proposal (its state must give every batch
    back); lenient otherwise, so a tool whose items JSON cannot carry still runs (its batches are left
    out of the state, which then cannot resume)."""
    if may_stop_at_a_proposal(box.tools, config):
        return Codec(box.tools)
    codec = Codec(box.tools, strict=False)
    if any(wants_checkpoints(observer) for observer in observers):
        # The state is kept for recovery: a batch of another type than its tool declares is then the
        # tool's error, as where the run may stop at a proposal.
        codec.strict = all(adapter is not None for adapter in codec.items.values())
    return codec


def awaiting(checkpoint: RunCheckpoint) -> tuple[RoundEntry, ...]:
    """The proposals the run stopped at, each needing a decision before it goes on. Under
    `AfterProposal.STOP`, a run that died before its end was recorded (mid-step, after a call of a step of
    several was proposed and another ran) stopped at its proposals too. None for a run under
    `AfterProposal.CONTINUE` that died between rounds: its undecided proposals stay so."""
    if checkpoint.stop_reason is StopReason.PROPOSED:
        return checkpoint.proposals
    if checkpoint.stop_reason is None and checkpoint.config.after_proposal is AfterProposal.STOP:
        return checkpoint.proposals
    return ()


def pending_proposals(checkpoint: RunCheckpoint, codec: Codec) -> list[tuple[RoundEntry, ProposedAction[Any]]]:
    """The proposals the run stopped at, each with its `ProposedAction` (args typed by `codec`).

    Raises:
        ResumeRefused: a proposal's args no longer validate as its tool's args type.
    """
    found: list[tuple[RoundEntry, ProposedAction[Any]]] = []
    for entry in awaiting(checkpoint):
        assert entry.tool is not None
        assert entry.args is not None
        if entry.tool not in codec.args:
            continue  # the admission names a missing tool
        found.append((entry, proposal_of(entry, decoded_args(codec, entry.tool, entry.args), checkpoint.run_id)))
    return found


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


def _check_comparator(checkpoint: RunCheckpoint, same: object) -> None:
    """A run goes on with the repeat comparator it had: another one (or the default in place of one) would
    judge its repeats otherwise, and end it otherwise."""
    had, given = checkpoint.same, comparator_name(same)
    if had == given:
        return
    if had is None:
        why = f"the run compared repeats by value (no same=), not with {given}; resume without same="
    elif given is None:
        why = f"the run compared repeats with {had}; pass it again as same="
    else:
        why = f"the run compared repeats with {had}, not {given}; pass the same function as same="
    raise ResumeRefused(f"run {checkpoint.run_id!r} cannot resume: {why}. Nothing ran")


def _match(
    checkpoint: RunCheckpoint, codec: Codec, decisions: list[Approval[Any] | Rejection[Any]]
) -> list[tuple[RoundEntry, Approval[Any] | Rejection[Any]]]:
    """Each proposal the run stopped at, with its decision, in the order proposed."""
    from agentkit._approval import Approval, Rejection

    wanted = {(entry.round, entry.tool, entry.call_digest): entry for entry, _ in pending_proposals(checkpoint, codec)}
    found: dict[tuple[int, str | None, str | None], Approval[Any] | Rejection[Any]] = {}
    for decision in decisions:
        if not isinstance(decision, Approval | Rejection):
            raise ResumeRefused(f"decisions are Approval or Rejection values; got {type(decision).__name__}")
        proposal = decision.proposal
        # An amended approval settles the proposal it amends: the pending call is the original.
        amendment = decision.amendment if isinstance(decision, Approval) else None
        settles = decision.digest if amendment is None else amendment.original_digest
        key: tuple[int, str | None, str | None] = (proposal.round, proposal.tool_name, settles)
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
        named = ", ".join(
            f"{name!r} in round {round} (digest {(digest or '')[:12]})" for round, name, digest in missing
        )
        raise ResumeRefused(
            f"run {checkpoint.run_id!r} cannot resume: no decision for the proposed call to {named}; "
            "approve or reject each pending proposal. Nothing ran"
        )
    return [(entry, found[key]) for key, entry in wanted.items()]
