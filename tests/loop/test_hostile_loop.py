"""Hostile executors, tools, observers and callers: each run still ends with a result, and none can
change what ran, what was gathered, or what a human is asked to approve."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel, field_validator

from agentkit import (
    AfterProposal,
    LoopConfig,
    Observer,
    Outcome,
    Prompt,
    RoleSpec,
    RoundInfo,
    StopReason,
    Tier,
    ToolRoundInfo,
    pair,
    run_once,
    run_tool_loop,
    run_tool_loop_tiered,
    tool,
)
from agentkit._pair import RulesVerifier
from agentkit._structured import Completion, StructuredRequest
from agentkit.errors import ExecutorError, ToolError
from agentkit.events import Event, RoundStarted, RunFinished
from agentkit.testing import ScriptedCaller, call_step, done_step
from tests.support import NO_WAIT, Doc, Executor, PathArgs, Query, Recording


def config(**kwargs: Any) -> LoopConfig:
    return LoopConfig(retry=NO_WAIT, **kwargs)


class Tags(BaseModel):
    tags: list[str]


@tool(tier=Tier.READ_ONLY)
def tagged(args: Tags) -> list[Doc]:
    """Looks up documents by tags, and (rudely) edits the arguments it was given."""
    found = [Doc(id="+".join(args.tags))]
    args.tags.append("MUTATED")
    return found


async def test_a_tool_that_mutates_its_args_changes_neither_the_trace_nor_the_repeat_guard() -> None:
    """The tool gets its own copy: the trace records what the model asked, and a repeat is still a repeat."""
    caller = ScriptedCaller([call_step(Tags(tags=["a"])), call_step(Tags(tags=["a"])), done_step()])
    result = await run_tool_loop(caller, Executor[Doc](), tagged, "ctx", config())
    assert result.trace[0].call == Tags(tags=["a"])
    assert (result.outcome, result.stop_reason) == (Outcome.STALEMATE, StopReason.DEGENERATION)
    assert [doc.id for doc in result.items] == ["a"]


class EditsWhatItSees(Executor[Doc]):
    """An executor that edits every proposal, prior call and batch it is shown."""

    def render(self, ctx: object, info: ToolRoundInfo[Doc]) -> Prompt:
        for proposal in info.proposals:
            if isinstance(proposal.args, PathArgs):
                proposal.args.path = "/"
        for prior in info.prior_calls:
            if isinstance(prior.args, Query):
                prior.args.query = "edited"
        for batch in info.prior_results:
            for doc in batch:
                doc.id = "edited"
        return super().render(ctx, info)


async def test_an_executor_editing_the_proposals_it_sees_leaves_them_approvable() -> None:
    """render gets copies: the proposal in the result still matches its digest and its args."""
    delete = Recording("delete", Tier.IRREVERSIBLE, PathArgs)
    search = Recording("search", Tier.READ_ONLY)
    caller = ScriptedCaller([call_step(PathArgs(path="/tmp/a"), tool="delete"), done_step()])
    cfg = config(after_proposal=AfterProposal.CONTINUE)
    result = await run_tool_loop_tiered(caller, EditsWhatItSees(), [search, delete], "ctx", cfg)
    (proposal,) = result.proposed
    assert proposal.args == PathArgs(path="/tmp/a")
    assert proposal.digest_matches()


async def test_an_executor_editing_prior_calls_and_items_changes_neither_the_items_nor_the_guard() -> None:
    """Edits to prior calls cannot defeat the repeat guard; edits to batches cannot reach result.items."""
    search = Recording("search", Tier.READ_ONLY)
    script = [call_step(Query(query="a")), call_step(Query(query="a")), done_step()]
    result = await run_tool_loop(ScriptedCaller(script), EditsWhatItSees(), search, "ctx", config())
    assert (result.outcome, result.stop_reason) == (Outcome.STALEMATE, StopReason.DEGENERATION)
    assert len(search.calls) == 1
    assert [doc.id for doc in result.items] == ["search:1"]


class Meddler(Observer):
    """An observer that edits the prior calls and items it is shown, and the result it gets."""

    def on_round_start(self, event: RoundStarted) -> None:
        info = event.info
        assert isinstance(info, ToolRoundInfo)
        for prior in info.prior_calls:
            if isinstance(prior.args, Query):
                prior.args.query = "MUTATED"
        for batch in info.prior_results:
            for doc in batch:
                doc.id = "MUTATED"


async def test_an_observer_cannot_turn_a_stalemate_into_a_second_execution() -> None:
    """An observer editing RoundStarted's prior calls and batches changes neither the guard nor the items."""
    search = Recording("search", Tier.READ_ONLY)
    script = [call_step(Query(query="a")), call_step(Query(query="a")), done_step()]
    executor = Executor[Doc]()
    result = await run_tool_loop(ScriptedCaller(script), executor, search, "ctx", config(), observer=Meddler())
    assert (result.outcome, result.stop_reason) == (Outcome.STALEMATE, StopReason.DEGENERATION)
    assert len(search.calls) == 1
    assert result.trace[0].call == Query(query="a")
    assert [doc.id for doc in result.items] == ["search:1"]
    assert executor.infos[-1].prior_calls[0].args == Query(query="a")


class BreaksInRoundTwo(Executor[Doc]):
    def render(self, ctx: object, info: ToolRoundInfo[Doc]) -> Prompt:
        if info.round == 2:
            raise KeyError("a bug in the prompt template")
        return super().render(ctx, info)


class Recorder(Observer):
    def __init__(self) -> None:
        self.kinds: list[str] = []

    def on_event(self, event: Event) -> None:
        self.kinds.append(event.kind)


async def test_render_raising_mid_run_ends_executor_error_with_the_items_kept() -> None:
    """An exception from render in round 2 ends the run ERROR / EXECUTOR_ERROR; round 1's items are kept."""
    search = Recording("search", Tier.READ_ONLY)
    recorder = Recorder()
    caller = ScriptedCaller([call_step(Query(query="a"))])
    result = await run_tool_loop(caller, BreaksInRoundTwo(), search, "ctx", config(), observer=recorder)
    assert (result.outcome, result.stop_reason) == (Outcome.ERROR, StopReason.EXECUTOR_ERROR)
    assert isinstance(result.error, ExecutorError)
    assert isinstance(result.error.__cause__, KeyError)
    assert [doc.id for doc in result.items] == ["search:1"]
    assert result.rounds == 2
    assert result.trace[-1].error is not None
    caller.assert_complete()
    tool_round = ["round_start", "llm_call", "tool_call", "tool_result"]
    assert recorder.kinds == ["run_start", *tool_round, "round_start", "run_end"]


async def test_a_raising_repeat_comparator_ends_executor_error_with_the_items_kept() -> None:
    """A same= comparator that raises ends the run ERROR / EXECUTOR_ERROR, never escaping."""
    search = Recording("search", Tier.READ_ONLY)

    def broken(a: BaseModel, b: BaseModel) -> bool:
        raise ValueError("cannot compare")

    caller = ScriptedCaller([call_step(Query(query="a")), call_step(Query(query="b"))])
    result = await run_tool_loop(caller, Executor[Doc](), search, "ctx", config(), same=broken)
    assert (result.outcome, result.stop_reason) == (Outcome.ERROR, StopReason.EXECUTOR_ERROR)
    assert [doc.id for doc in result.items] == ["search:1"]


class Verdict(BaseModel):
    ok: bool


class BrokenOnce:
    def role(self) -> RoleSpec:
        return RoleSpec(model="m")

    def render(self, ctx: str, info: RoundInfo) -> Prompt:
        raise RuntimeError("template missing")


async def test_single_shot_and_pair_render_raising_end_executor_error() -> None:
    """run_once and pair end ERROR / EXECUTOR_ERROR when the executor's render raises; no model call is made."""
    caller = ScriptedCaller([])
    once = await run_once(caller, BrokenOnce(), "ctx", schema=Verdict)
    assert (once.outcome, once.stop_reason, once.value) == (Outcome.ERROR, StopReason.EXECUTOR_ERROR, None)
    drafted = await pair(caller, BrokenOnce(), RulesVerifier[Verdict](lambda v: (True, "")), "ctx", schema=Verdict)
    assert (drafted.outcome, drafted.stop_reason) == (Outcome.ERROR, StopReason.EXECUTOR_ERROR)
    assert caller.requests == []


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("__str__ is broken too")


@tool(tier=Tier.READ_ONLY)
def hostile(args: Query) -> list[Doc]:
    """Raises an exception that cannot even be printed."""
    raise Unprintable


async def test_a_tool_exception_whose_str_raises_still_ends_tool_error() -> None:
    """The exception is described safely; the run ends TOOL_ERROR instead of raising RuntimeError."""
    caller = ScriptedCaller([call_step(Query(query="a"))])
    result = await run_tool_loop(caller, Executor[Doc](), hostile, "ctx", config())
    assert (result.outcome, result.stop_reason) == (Outcome.ERROR, StopReason.TOOL_ERROR)
    assert isinstance(result.error, ToolError)
    assert "Unprintable" in str(result.error)


class NeverAnswers:
    """A caller whose requests reach the server and never come back."""

    def __init__(self) -> None:
        self.sent = 0

    async def complete(self, request: StructuredRequest, schema: type[Any]) -> Completion[Any]:
        self.sent += 1
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")


async def test_a_request_cut_off_by_the_deadline_is_counted() -> None:
    """The request in flight when the deadline passes counts in usage.requests."""
    caller = NeverAnswers()
    search = Recording("search", Tier.READ_ONLY)
    result = await run_tool_loop(caller, Executor[Doc](), search, "ctx", config(deadline=0.2))
    assert result.stop_reason is StopReason.DEADLINE
    assert result.usage.requests == caller.sent == 1


async def test_observers_get_a_result_they_cannot_edit_into_the_callers() -> None:
    """RunFinished carries its own lists: clearing them leaves the caller's result whole."""

    class Clears(Observer):
        def on_run_end(self, event: RunFinished) -> None:
            result = event.result
            assert hasattr(result, "items")
            result.items.clear()

    search = Recording("search", Tier.READ_ONLY)
    caller = ScriptedCaller([call_step(Query(query="a")), done_step()])
    result = await run_tool_loop(caller, Executor[Doc](), search, "ctx", config(), observer=Clears())
    assert len(result.items) == 1


class Handle:
    """An item JSON cannot carry (the state leaves its batches out)."""

    def __init__(self, name: str) -> None:
        self.name = name


@tool(tier=Tier.READ_ONLY)
def handles(args: Query) -> list[Handle]:
    """Opens handles."""
    return [Handle(args.query)]


class RenamesHandles(Executor[Handle]):
    def render(self, ctx: object, info: ToolRoundInfo[Handle]) -> Prompt:
        for batch in info.prior_results:
            for handle in batch:
                handle.name = "edited"
        return super().render(ctx, info)


async def test_a_batch_the_state_does_not_keep_is_still_shown_as_the_executors_own_copy() -> None:
    """Items JSON cannot carry are deep-copied for the executor: its edits do not reach result.items."""
    script = [call_step(Query(query="a")), done_step()]
    result = await run_tool_loop(ScriptedCaller(script), RenamesHandles(), handles, "ctx", config())
    assert result.stop_reason is StopReason.EXECUTOR_DONE
    assert [handle.name for handle in result.items] == ["a"]


class Stamped(BaseModel):
    """An item whose validator refuses a value the tool built around it (``model_construct``)."""

    id: str

    @field_validator("id")
    @classmethod
    def _not_stamped(cls, value: str) -> str:
        if value.startswith("stamped:"):
            raise ValueError("stamped ids are made by the tool only")
        return value


@tool(tier=Tier.READ_ONLY)
def stamps(args: Query) -> list[Stamped]:
    """Stamps documents."""
    return [Stamped.model_construct(id=f"stamped:{args.query}")]


async def test_a_batch_that_does_not_read_back_from_the_state_is_shown_as_a_deep_copy() -> None:
    """The executor's copy is read back from the state's text; where that fails, it is a deep copy of the items."""
    executor: Executor[Stamped] = Executor()
    script = [call_step(Query(query="a")), done_step()]
    result = await run_tool_loop(ScriptedCaller(script), executor, stamps, "ctx", config())
    assert result.stop_reason is StopReason.EXECUTOR_DONE
    (shown,) = executor.infos[1].prior_results
    assert [item.id for item in shown] == ["stamped:a"]
    assert shown[0] is not result.items[0]


async def test_the_executor_is_shown_the_batch_as_the_state_keeps_it() -> None:
    """Each round shows the executor fresh items equal to the tool's, never the tool's own objects."""
    search = Recording("search", Tier.READ_ONLY)
    executor: Executor[Doc] = Executor()
    script = [call_step(Query(query="a")), done_step()]
    result = await run_tool_loop(ScriptedCaller(script), executor, search, "ctx", config())
    (shown,) = executor.infos[1].prior_results
    assert list(shown) == result.items == [Doc(id="search:1")]
    assert shown[0] is not result.items[0]
