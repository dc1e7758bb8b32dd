"""Grounded retrieval: ``LoopConfig(min_calls=N)`` leaves done out of the step schema until N calls ran, and
``Cites[Item]`` restricts an answer's citations to the ids of the items retrieved so far, in the schema the model
sees and in validation; ``result.cited()`` resolves them."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import json
import tracemalloc
import weakref
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, create_model

from agentkit import (
    Cites,
    LoopConfig,
    Outcome,
    Prompt,
    RepeatPolicy,
    RetryPolicy,
    RoleSpec,
    StopReason,
    Tier,
    ToolLoop,
    ToolRoundInfo,
    UsageError,
    run_tool_loop,
    tool,
)
from agentkit._structured import StructuredRequest
from agentkit.providers._strict import strict_schema
from agentkit.testing import FunctionCaller, ReplayCaller, call_step
from tests.support import Query

NO_WAIT = RetryPolicy(wait_initial=0)


class Doc(BaseModel):
    id: str
    text: str


class Answer(BaseModel):
    source: Cites[Doc]
    answer: str


class Several(BaseModel):
    sources: list[Cites[Doc]]
    maybe: Cites[Doc] | None
    answer: str


@tool(tier=Tier.READ_ONLY)
def search(args: Query) -> list[Doc]:
    """Two documents per query, named after it."""
    return [Doc(id=f"{args.query}-1", text=f"one about {args.query}"), Doc(id=f"{args.query}-2", text="two")]


class Reader:
    def role(self) -> RoleSpec:
        return RoleSpec(model="m")

    def render(self, ctx: str, info: ToolRoundInfo[Doc]) -> Prompt:
        return Prompt(system="search, then answer", dynamic=f"{ctx} round {info.round}")


def done(answer: dict[str, Any] | None = None) -> dict[str, Any]:
    decision: dict[str, Any] = {"done": True}
    if answer is not None:
        decision["answer"] = answer
    return {"rationale": "", "decision": decision}


def done_variants(schema: type[BaseModel]) -> list[dict[str, Any]]:
    """The done variants of a step schema as the model sees it."""
    decision = schema.model_json_schema()["properties"]["decision"]  # its variants are written in place
    return [d for d in decision.get("anyOf", [decision]) if d["properties"]["done"].get("const") is True]


class Model:
    """A FunctionCaller's function answering from a list of replies, recording the schema of each request."""

    def __init__(self, *replies: dict[str, Any]) -> None:
        self.replies = list(replies)
        self.schemas: list[type[BaseModel]] = []

    def __call__(self, request: StructuredRequest, schema: type[BaseModel] | None) -> dict[str, Any]:
        assert schema is not None
        self.schemas.append(schema)
        return self.replies.pop(0)


# min_calls


async def test_until_min_calls_ran_the_step_schema_has_no_done_variant() -> None:
    model = Model(call_step(Query(query="a")), call_step(Query(query="b")), done())
    config = LoopConfig(min_calls=2, max_rounds=4)
    result = await run_tool_loop(FunctionCaller(model), Reader(), search, "q", config)
    assert result.stop_reason is StopReason.EXECUTOR_DONE
    assert [len(done_variants(s)) for s in model.schemas] == [0, 0, 1]
    assert '"call"' in json.dumps(model.schemas[0].model_json_schema())


async def test_a_done_reply_before_min_calls_is_refused_and_asked_again() -> None:
    model = Model(done(), call_step(Query(query="a")), done())
    result = await run_tool_loop(FunctionCaller(model), Reader(), search, "q", LoopConfig(min_calls=1, retry=NO_WAIT))
    assert (result.outcome, result.stop_reason) == (Outcome.APPLIED, StopReason.EXECUTOR_DONE)
    assert [r.tool_name for r in result.trace] == ["search", None]
    assert len(model.schemas) == 3  # the refused done, the call asked again, then done


async def test_a_model_that_insists_on_done_before_its_calls_ends_llm_error_with_its_reply_kept() -> None:
    model = Model(*[done()] * 6)
    config = LoopConfig(min_calls=1, retry=NO_WAIT)
    result = await run_tool_loop(FunctionCaller(model), Reader(), search, "q", config)
    assert (result.outcome, result.stop_reason) == (Outcome.ERROR, StopReason.LLM_ERROR)
    assert result.error is not None
    assert "a tool call comes first" in str(result.error)


async def test_too_few_calls_by_the_ceiling_end_there_without_a_closing_round() -> None:
    """The closing round could only answer from nothing: the run ends at the ceiling, unanswered."""
    model = Model(call_step(Query(query="a")), call_step(Query(query="a")))
    config = LoopConfig(min_calls=2, max_rounds=2, on_repeat=RepeatPolicy.REFUSE)
    result = await run_tool_loop(FunctionCaller(model), Reader(), search, "q", config, answer=Answer)
    assert result.stop_reason is StopReason.ROUND_CEILING
    assert (result.rounds, result.answer, len(model.schemas)) == (2, None, 2)
    assert [d.id for d in result.items] == ["a-1", "a-2"]  # the refused repeat ran nothing; the items are kept


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (lambda: LoopConfig(min_calls=5, max_rounds=4), r"min_calls \(5\) is more than max_rounds \(4\)"),
        (lambda: LoopConfig(min_calls=-1), "min_calls must be an int >= 0"),
        (lambda: LoopConfig(min_calls=True), "min_calls must be an int >= 0"),
    ],
)
def test_min_calls_that_can_never_be_met_or_is_no_count_is_refused_before_any_model_call(
    config: Any, message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        config()


def test_min_calls_with_unlimited_rounds_is_accepted() -> None:
    assert LoopConfig(min_calls=9, max_rounds=None).min_calls == 9


# Cites


async def test_citations_are_restricted_to_the_ids_retrieved_so_far_in_the_schema_the_model_sees() -> None:
    model = Model(call_step(Query(query="a")), call_step(Query(query="b")), done({"source": "b-2", "answer": "two"}))
    result = await run_tool_loop(FunctionCaller(model), Reader(), search, "q", LoopConfig(), answer=Answer)
    assert result.answer == Answer(source="b-2", answer="two")
    assert [d["properties"]["answer"] for d in done_variants(model.schemas[0])] == []  # nothing to cite: no done
    enums = [json.dumps(s.model_json_schema()) for s in model.schemas[1:]]
    assert '"enum": ["a-1", "a-2"]' in enums[0]
    assert '"enum": ["a-1", "a-2", "b-1", "b-2"]' in enums[1]


async def test_a_citation_of_an_item_never_retrieved_is_refused_and_asked_again() -> None:
    model = Model(
        call_step(Query(query="a")),
        done({"source": "z-9", "answer": "made up"}),
        done({"source": "a-1", "answer": "one"}),
    )
    config = LoopConfig(retry=NO_WAIT)
    result = await run_tool_loop(FunctionCaller(model), Reader(), search, "q", config, answer=Answer)
    assert result.answer == Answer(source="a-1", answer="one")
    assert len(model.schemas) == 3


async def test_an_answer_that_cites_nothing_where_a_citation_is_required_ends_llm_error_keeping_the_items() -> None:
    model = Model(call_step(Query(query="a")), *[done({"answer": "no source"})] * 6)
    config = LoopConfig(retry=NO_WAIT, closing_round=False)
    result = await run_tool_loop(FunctionCaller(model), Reader(), search, "q", config, answer=Answer)
    assert (result.outcome, result.stop_reason) == (Outcome.ERROR, StopReason.LLM_ERROR)
    assert [d.id for d in result.items] == ["a-1", "a-2"]
    assert result.error is not None
    assert "source" in str(result.error)


async def test_the_answer_is_the_declared_type_and_cited_resolves_to_the_items() -> None:
    model = Model(call_step(Query(query="a")), done({"sources": ["a-2", "a-1", "a-2"], "maybe": None, "answer": "x"}))
    result = await run_tool_loop(FunctionCaller(model), Reader(), search, "q", LoopConfig(), answer=Several)
    assert type(result.answer) is Several
    assert type(result.answer.sources[0]) is str
    assert [d.id for d in result.cited()] == ["a-2", "a-1"]


async def test_a_list_of_citations_may_be_empty_before_anything_was_retrieved() -> None:
    model = Model(done({"sources": [], "maybe": None, "answer": "nothing needed"}))
    result = await run_tool_loop(FunctionCaller(model), Reader(), search, "q", LoopConfig(), answer=Several)
    assert result.answer == Several(sources=[], maybe=None, answer="nothing needed")
    assert result.cited() == []


def test_every_citing_step_schema_stays_within_openai_strict_mode() -> None:
    loop = ToolLoop(FunctionCaller(Model()), Reader(), search, LoopConfig(), answer=Several)
    box = loop._bound.box  # the schemas the loop would ask with
    items = [Doc(id="a-1", text="one")]
    for executed, shown in ((0, []), (1, items)):
        for closing in (False, True):
            step = box.step_for(executed, shown, closing=closing)
            assert step is not None
            strict = strict_schema(step.model_json_schema(), step.__name__)
            assert ("a-1" in json.dumps(strict)) == bool(shown)


@dataclasses.dataclass
class Note:
    key: str
    cite_key = "key"


@dataclasses.dataclass
class Unkeyed:
    text: str


class NoteAnswer(BaseModel):
    note: Cites[Note]


class UnkeyedAnswer(BaseModel):
    source: Cites[Unkeyed]


def test_an_item_type_names_its_own_key_with_cite_key() -> None:
    @tool(tier=Tier.READ_ONLY)
    def notes(args: Query) -> list[Note]:
        """Notes."""
        return [Note(key="n1")]

    class NoteReader:
        def role(self) -> RoleSpec:
            return RoleSpec(model="m")

        def render(self, ctx: str, info: ToolRoundInfo[Note]) -> Prompt:
            return Prompt(system="s", dynamic=str(info.round))

    model = Model(call_step(Query(query="a")), done({"note": "n1"}))
    result = asyncio.run(
        run_tool_loop(FunctionCaller(model), NoteReader(), notes, "q", LoopConfig(), answer=NoteAnswer)
    )
    assert result.cited() == [Note(key="n1")]


def test_a_citation_of_an_item_type_without_its_key_field_is_refused_when_wired_naming_both() -> None:
    model = Model()
    with pytest.raises(
        UsageError, match=r"UnkeyedAnswer\.source cites 'Unkeyed' items by their 'id' field, but Unkeyed"
    ):
        ToolLoop(FunctionCaller(model), Reader(), search, LoopConfig(), answer=UnkeyedAnswer)
    assert model.schemas == []


def test_cites_inside_another_type_is_refused_when_wired() -> None:
    class Nested(BaseModel):
        sources: dict[str, Cites[Doc]]

    with pytest.raises(UsageError, match="Cites goes directly on a field"):
        ToolLoop(FunctionCaller(Model()), Reader(), search, LoopConfig(), answer=Nested)


async def test_a_replayed_citing_run_asks_the_recorded_schemas_and_ends_the_same() -> None:
    model = Model(call_step(Query(query="a")), done({"source": "a-2", "answer": "two"}))
    first = await run_tool_loop(FunctionCaller(model), Reader(), search, "q", LoopConfig(min_calls=1), answer=Answer)
    replay = ReplayCaller(first.checkpoint)
    again = await run_tool_loop(replay, Reader(), replay.tools(search), "q", LoopConfig(min_calls=1), answer=Answer)
    assert (again.answer, again.items, again.stop_reason) == (first.answer, first.items, first.stop_reason)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    queries=st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3, unique=True),
    attempts=st.lists(st.sampled_from(["a-1", "b-2", "c-1", "z-1", "q-2"]), min_size=1, max_size=4),
)
def test_whatever_the_model_cites_a_given_answer_names_only_retrieved_items(
    queries: list[str], attempts: list[str]
) -> None:
    replies = [call_step(Query(query=q)) for q in queries] + [done({"source": s, "answer": "x"}) for s in attempts]
    config = LoopConfig(max_rounds=len(queries) + 1, retry=NO_WAIT, closing_round=False)
    result = asyncio.run(
        run_tool_loop(FunctionCaller(Model(*replies, *[done()] * 8)), Reader(), search, "q", config, answer=Answer)
    )
    retrieved = {d.id for d in result.items}
    if result.answer is not None:
        assert result.answer.source in retrieved
        assert [d.id for d in result.cited()] == [result.answer.source]
    else:
        assert result.stop_reason is StopReason.LLM_ERROR
    assert retrieved == {f"{q}-{n}" for q in queries for n in (1, 2)}


@pytest.mark.slow
async def test_memory_stays_flat_over_two_thousand_citing_runs_with_new_ids_each() -> None:
    """The citing schema changes every round and every run (new ids); its caches are bounded, so the heap stays put."""

    async def one(index: int) -> None:
        model = Model(call_step(Query(query=f"r{index}")), done({"source": f"r{index}-1", "answer": "x"}))
        await run_tool_loop(FunctionCaller(model), Reader(), search, "q", LoopConfig(), answer=Answer)

    for index in range(300):  # fills the bounded caches
        await one(index)
    gc.collect()
    tracemalloc.start()
    try:
        marks: list[int] = []
        for mark in range(5):
            for index in range(400):
                await one(300 + mark * 400 + index)
            gc.collect()
            marks.append(tracemalloc.get_traced_memory()[0])
    finally:
        tracemalloc.stop()
    growth = marks[-1] - marks[1]
    assert growth < 1_000 * 1_200, f"heap grew {growth} bytes over 1,200 runs: {marks}"


async def one_request_with_its_own_answer_type() -> weakref.ref[type[BaseModel]]:
    """A run whose citing answer type is made for it alone; a weak reference to that type."""
    made: type[BaseModel] = create_model("Made", source=(Cites[Doc], ...), answer=(str, ...))
    model = Model(call_step(Query(query="r")), done({"source": "r-1", "answer": "x"}))
    result = await run_tool_loop(FunctionCaller(model), Reader(), search, "q", LoopConfig(), answer=made)
    assert [d.id for d in result.cited()] == ["r-1"]
    return weakref.ref(made)


async def test_a_citing_answer_type_made_per_request_goes_with_its_run() -> None:
    """What a citing run builds from its answer type (its citing fields, the answer restricted to each
    round's ids, their step models) is kept on that type: once a per-request answer type goes, it all goes."""
    gone = [await one_request_with_its_own_answer_type() for _ in range(3)]
    gc.collect()
    assert [ref for ref in gone if ref() is not None] == []
