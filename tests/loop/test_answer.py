"""A typed final answer: ``run_tool_loop(..., answer=Schema)`` and the closing round."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

from agentkit import (
    AfterProposal,
    LoopConfig,
    Observer,
    Outcome,
    RepeatPolicy,
    StopReason,
    StructuredRequest,
    Tier,
    ToolRoundInfo,
    UsageError,
    resume_tool_loop,
    run_tool_loop,
    run_tool_loop_tiered,
    tool,
)
from agentkit._results import Usage
from agentkit.events import Event, RoundStarted
from agentkit.prompting import reflective_prompt
from agentkit.providers.openai import OpenAICaller, StructuredMode
from agentkit.testing import FakeOpenAIServer, FunctionCaller, ScriptedCaller, ScriptedReply, call_step, done_step
from tests.support import NO_WAIT, Doc, Executor, Query


class Verdict(BaseModel):
    text: str
    source: str


VERDICT = Verdict(text="1977", source="search:1")


def config(**fields: Any) -> LoopConfig:
    return LoopConfig(retry=NO_WAIT, **fields)


@tool(tier=Tier.READ_ONLY)
def search(args: Query) -> list[Doc]:
    """Search."""
    return [Doc(id=f"search:{args.query}")]


@tool(tier=Tier.IRREVERSIBLE)
def wipe(args: Query) -> list[Doc]:
    """Wipe (never runs live)."""
    raise AssertionError("an irreversible call ran")


def searches(*queries: str) -> list[dict[str, Any]]:
    return [call_step(Query(query=q)) for q in queries]


async def test_done_step_carries_the_validated_answer() -> None:
    """With answer=, the done step's answer is validated as the schema and is result.answer."""
    caller = ScriptedCaller([*searches("a"), done_step(answer=VERDICT)])
    result = await run_tool_loop(caller, Executor[Doc](), search, "q", config(), answer=Verdict)
    assert (result.outcome, result.stop_reason) == (Outcome.APPLIED, StopReason.EXECUTOR_DONE)
    assert result.answer == VERDICT
    assert isinstance(result.answer, Verdict)
    assert result.answer_from_closing_round is False
    assert caller.remaining == 0


async def test_done_step_without_the_answer_is_re_asked() -> None:
    """A done step with no answer is invalid when an answer is asked for: the model is asked again."""
    caller = ScriptedCaller([done_step(), done_step(answer=VERDICT)])
    result = await run_tool_loop(caller, Executor[Doc](), search, "q", config(), answer=Verdict)
    assert result.answer == VERDICT
    assert result.usage.requests == 2


async def test_answer_of_the_wrong_shape_is_re_asked() -> None:
    """An answer that does not validate as the schema is a validation error, not a result."""
    caller = ScriptedCaller([done_step(answer={"text": "x"}), done_step(answer=VERDICT)])
    result = await run_tool_loop(caller, Executor[Doc](), search, "q", config(), answer=Verdict)
    assert result.answer == VERDICT


async def test_round_ceiling_gets_a_closing_round_that_gives_the_answer() -> None:
    """A run stopped by the round ceiling asks once more, for the answer; the stop reason stays ROUND_CEILING."""
    agent = Executor[Doc]()
    caller = ScriptedCaller([*searches("a", "b"), done_step(answer=VERDICT)])
    result = await run_tool_loop(caller, agent, search, "q", config(max_rounds=2), answer=Verdict)
    assert (result.outcome, result.stop_reason) == (Outcome.APPLIED, StopReason.ROUND_CEILING)
    assert (result.answer, result.answer_from_closing_round) == (VERDICT, True)
    assert [d.id for d in result.items] == ["search:a", "search:b"]
    assert result.rounds == 3
    assert result.trace[-1].done
    closing = agent.infos[-1]
    assert (closing.round, closing.closing_round, closing.is_final_round) == (3, True, True)
    assert len(closing.prior_results) == 2
    assert not any(info.closing_round for info in agent.infos[:-1])


async def test_closing_round_step_schema_allows_no_tool_call() -> None:
    """The closing round asks with a step schema whose only variant is done with the answer."""
    schemas: list[dict[str, Any]] = []

    def answer(request: StructuredRequest, schema: type[BaseModel] | None) -> dict[str, Any]:
        assert schema is not None
        schemas.append(schema.model_json_schema())
        return done_step(answer=VERDICT) if len(schemas) == 2 else call_step(Query(query="a"))

    caller = FunctionCaller(answer)
    result = await run_tool_loop(caller, Executor[Doc](), search, "q", config(max_rounds=1), answer=Verdict)
    assert (result.answer, result.answer_from_closing_round) == (VERDICT, True)
    tool_round, closing = schemas
    assert len(tool_round["properties"]["decision"]["anyOf"]) == 2
    done = closing["properties"]["decision"]  # the closing round's one variant, written in place
    assert done["properties"]["done"]["const"] is True
    assert done["required"] == ["done", "answer"]


async def test_a_call_in_the_closing_round_is_refused_and_the_run_keeps_its_ending() -> None:
    """A tool call in the closing round never runs: the step is invalid, and with no valid answer the
    run ends as the tools left it, answer None, the failure on the trace."""
    calls: list[Query] = []

    @tool(tier=Tier.READ_ONLY)
    def counting(args: Query) -> list[Doc]:
        """Counts its calls."""
        calls.append(args)
        return [Doc(id=args.query)]

    caller = ScriptedCaller([*searches("a"), *searches("b", "c", "d")])
    result = await run_tool_loop(caller, Executor[Doc](), counting, "q", config(max_rounds=1), answer=Verdict)
    assert (result.outcome, result.stop_reason, result.error) == (Outcome.APPLIED, StopReason.ROUND_CEILING, None)
    assert (result.answer, result.answer_from_closing_round) == (None, False)
    assert calls == [Query(query="a")]
    assert result.trace[-1].error is not None
    assert "allows no tool call" in result.trace[-1].error or "none" in result.trace[-1].error.lower()


async def test_stalemate_gets_a_closing_round() -> None:
    """A repeated call ends the tools STALEMATE; the closing round still gets the answer."""
    caller = ScriptedCaller([*searches("a", "a"), done_step(answer=VERDICT)])
    result = await run_tool_loop(caller, Executor[Doc](), search, "q", config(), answer=Verdict)
    assert (result.outcome, result.stop_reason) == (Outcome.STALEMATE, StopReason.DEGENERATION)
    assert (result.answer, result.answer_from_closing_round) == (VERDICT, True)


async def test_stalemate_after_refusals_gets_a_closing_round() -> None:
    """Under RepeatPolicy.REFUSE, the repeat that ends the run STALEMATE is followed by the closing round."""
    caller = ScriptedCaller([*searches("a", "a", "a"), done_step(answer=VERDICT)])
    policy = config(max_rounds=10, on_repeat=RepeatPolicy.REFUSE, repeat_refusals=1)
    result = await run_tool_loop(caller, Executor[Doc](), search, "q", policy, answer=Verdict)
    assert result.stop_reason is StopReason.DEGENERATION
    assert (result.answer, result.answer_from_closing_round) == (VERDICT, True)


def used(tokens: int, value: Any) -> ScriptedReply:
    return ScriptedReply(value=value, usage=Usage(requests=1, input_tokens=tokens))


async def test_budget_leaves_room_for_the_closing_round() -> None:
    """With a token budget the tool rounds stop a round early, so the closing round fits within it."""
    caller = ScriptedCaller([used(40, call_step(Query(query="a"))), used(40, done_step(answer=VERDICT))])
    result = await run_tool_loop(caller, Executor[Doc](), search, "q", config(token_budget=100), answer=Verdict)
    assert result.stop_reason is StopReason.BUDGET_EXHAUSTED
    assert (result.answer, result.answer_from_closing_round) == (VERDICT, True)
    assert result.usage.total_tokens == 80
    assert result.rounds == 2


async def test_no_closing_round_when_the_budget_has_no_room_left() -> None:
    """A run whose budget cannot hold one more round gets no closing round: the budget is never exceeded."""
    caller = ScriptedCaller([used(70, call_step(Query(query="a")))])
    result = await run_tool_loop(caller, Executor[Doc](), search, "q", config(token_budget=100), answer=Verdict)
    assert result.stop_reason is StopReason.BUDGET_EXHAUSTED
    assert (result.answer, result.answer_from_closing_round) == (None, False)
    assert (result.rounds, result.usage.total_tokens) == (1, 70)
    assert caller.remaining == 0


async def test_no_closing_round_after_the_deadline() -> None:
    """A run stopped by its deadline has no time left, so it gets no closing round."""

    @tool(tier=Tier.READ_ONLY)
    async def hangs(args: Query) -> list[Doc]:
        """Never answers in time."""
        await asyncio.sleep(3600)
        return []

    caller = ScriptedCaller([*searches("a")])
    result = await run_tool_loop(caller, Executor[Doc](), hangs, "q", config(deadline=0.2), answer=Verdict)
    assert result.stop_reason is StopReason.DEADLINE
    assert (result.answer, result.rounds, caller.remaining) == (None, 1, 0)


async def test_closing_round_is_cut_off_at_the_deadline() -> None:
    """The closing round's model call is bounded by what is left of the deadline."""

    async def slow(request: StructuredRequest, schema: type[BaseModel] | None) -> dict[str, Any]:
        if len(caller.requests) == 2:
            await asyncio.sleep(3600)
        return call_step(Query(query="a"))

    caller = FunctionCaller(slow)
    result = await run_tool_loop(
        caller, Executor[Doc](), search, "q", config(max_rounds=1, deadline=0.5), answer=Verdict
    )
    assert result.stop_reason is StopReason.ROUND_CEILING
    assert (result.answer, result.answer_from_closing_round) == (None, False)
    assert result.rounds == 2


async def test_closing_round_can_be_turned_off() -> None:
    """LoopConfig(closing_round=False): the run ends at the ceiling with no answer and no extra request."""
    caller = ScriptedCaller([*searches("a")])
    off = config(max_rounds=1, closing_round=False)
    result = await run_tool_loop(caller, Executor[Doc](), search, "q", off, answer=Verdict)
    assert (result.stop_reason, result.answer, result.rounds) == (StopReason.ROUND_CEILING, None, 1)
    assert caller.remaining == 0


async def test_without_an_answer_schema_there_is_no_closing_round() -> None:
    """Without answer= the round ceiling ends the run as before: no closing round, answer None."""
    caller = ScriptedCaller([*searches("a")])
    result = await run_tool_loop(caller, Executor[Doc](), search, "q", config(max_rounds=1))
    assert (result.stop_reason, result.answer, result.answer_from_closing_round) == (
        StopReason.ROUND_CEILING,
        None,
        False,
    )
    assert result.rounds == 1


async def test_errors_and_proposals_get_no_closing_round() -> None:
    """Only the ceiling, the budget and a stalemate close with an answer; a proposal ends the run as ever."""
    caller = ScriptedCaller([call_step(Query(query="x"), tool=wipe)])
    result = await run_tool_loop_tiered(caller, Executor[Doc](), [search, wipe], "q", config(), answer=Verdict)
    assert (result.stop_reason, result.answer, caller.remaining) == (StopReason.PROPOSED, None, 0)


def test_closing_round_flag_must_be_a_bool() -> None:
    """LoopConfig.closing_round accepts True or False only."""
    with pytest.raises(UsageError, match="closing_round"):
        LoopConfig(closing_round="yes")  # type: ignore[arg-type]  # the wrong type is the point


async def test_tiered_run_carries_the_answer_and_resume_keeps_asking_for_it() -> None:
    """The tiered loop takes answer= too; a run resumed after a proposal ends with the answer."""
    from agentkit._approval import reject

    first = ScriptedCaller([call_step(Query(query="x"), tool=wipe)])
    tools = [search, wipe]
    paused = await run_tool_loop_tiered(first, Executor[Doc](), tools, "q", config(), answer=Verdict)
    assert (paused.stop_reason, paused.answer) == (StopReason.PROPOSED, None)
    again = ScriptedCaller([call_step(Query(query="a"), tool=search), done_step(answer=VERDICT)])
    decision = reject(paused.proposed[0], rejected_by="reviewer", reason="not now")
    resumed = await resume_tool_loop(again, Executor[Doc](), tools, "q", paused.checkpoint, [decision], answer=Verdict)
    assert (resumed.stop_reason, resumed.answer) == (StopReason.EXECUTOR_DONE, VERDICT)


async def test_continue_after_proposal_to_the_ceiling_closes_with_the_answer() -> None:
    """A tiered run that goes on after proposals and reaches the ceiling gets its closing round."""
    caller = ScriptedCaller([call_step(Query(query="x"), tool=wipe), done_step(answer=VERDICT)])
    go_on = config(max_rounds=1, after_proposal=AfterProposal.CONTINUE)
    result = await run_tool_loop_tiered(caller, Executor[Doc](), [search, wipe], "q", go_on, answer=Verdict)
    assert (result.stop_reason, result.answer, result.answer_from_closing_round) == (
        StopReason.ROUND_CEILING,
        VERDICT,
        True,
    )
    assert len(result.proposed) == 1


class Rounds(Observer):
    def __init__(self) -> None:
        self.events: list[Event] = []

    def on_round_start(self, event: RoundStarted) -> None:
        self.events.append(event)


async def test_observers_see_the_closing_round_start() -> None:
    """The closing round is a round: observers get its RoundStarted, marked closing."""
    watcher = Rounds()
    caller = ScriptedCaller([*searches("a"), done_step(answer=VERDICT)])
    await run_tool_loop(caller, Executor[Doc](), search, "q", config(max_rounds=1), observer=watcher, answer=Verdict)
    infos = [e.info for e in watcher.events if isinstance(e, RoundStarted) and isinstance(e.info, ToolRoundInfo)]
    assert [(info.round, info.closing_round) for info in infos] == [(1, False), (2, True)]


def test_reflective_prompt_asks_for_the_answer_in_the_closing_round() -> None:
    """The prompt helper's closing round says no call can be made and asks for the answer."""
    info: ToolRoundInfo[str] = ToolRoundInfo(round=3, max_rounds=2, is_final_round=True, closing_round=True)
    dynamic = reflective_prompt("Answer questions.", "q", info, check="If enough, set done to true.").dynamic
    assert "taken from the results above only." in dynamic
    assert "no more calls" in dynamic


@pytest.mark.parametrize("mode", [StructuredMode.JSON_SCHEMA, StructuredMode.TOOLS])
async def test_answer_schemas_on_the_wire_pass_strict_mode(server: FakeOpenAIServer, mode: StructuredMode) -> None:
    """Over HTTP in strict mode: the tool round's done variant requires the answer, and the closing
    round's schema has no call variant; OpenAI's strict rules accept both."""
    server.add(call_step(Query(query="a")), done_step(answer=VERDICT))
    async with OpenAICaller(base_url=server.base_url, mode=mode, strict=True) as caller:
        result = await run_tool_loop(caller, Executor[Doc](), search, "q", config(max_rounds=1), answer=Verdict)
    assert (result.answer, result.answer_from_closing_round) == (VERDICT, True)
    tool_round, closing = (_schema(body) for body in server.requests)
    variants = tool_round["properties"]["decision"]["anyOf"]
    assert len(variants) == 2
    assert "call" not in closing["properties"]["decision"]["properties"]
    assert "anyOf" not in closing["properties"]["decision"]
    assert closing["properties"]["decision"]["required"] == ["done", "answer"]


def _schema(body: dict[str, Any]) -> dict[str, Any]:
    if "response_format" in body:
        return dict(body["response_format"]["json_schema"]["schema"])
    return dict(body["tools"][0]["function"]["parameters"])


async def test_streamed_run_takes_the_answer_schema_too() -> None:
    """iter_tool_loop passes answer= through: its result carries the answer."""
    from agentkit.events import iter_tool_loop

    caller = ScriptedCaller([*searches("a"), done_step(answer=VERDICT)])
    async with iter_tool_loop(caller, Executor[Doc](), search, "q", config(), answer=Verdict) as run:
        kinds = [event.kind async for event in run]
    assert run.result.answer == VERDICT
    assert kinds[-1] == "run_end"
