"""Events as JSON: one form per event (`to_json`), read back by `parse_event`, described by `EVENT_SCHEMA`."""

from __future__ import annotations

import asyncio
import json
import typing
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from agentkit import (
    AfterProposal,
    LoopConfig,
    Observer,
    Prompt,
    RepeatPolicy,
    RoleSpec,
    RoundInfo,
    Tier,
    run_once,
    run_tool_loop,
    run_tool_loop_tiered,
    tool,
)
from agentkit.errors import ReportedError, UsageError
from agentkit.events import (
    EVENT_SCHEMA,
    Event,
    EventArgs,
    LLMCallFinished,
    RationaleDelta,
    RunAborted,
    ToolCallStarted,
    ToolResultReturned,
    parse_event,
)
from agentkit.providers.openai import OpenAICaller
from agentkit.testing import FakeOpenAIServer, FakeReply, ScriptedCaller, call_step, done_step
from tests.support import NO_WAIT, Doc, Finder, Query, Recorder, delete, search

_VALIDATOR = jsonschema.Draft202012Validator(EVENT_SCHEMA)

_STEPS = st.one_of(
    st.builds(lambda q: call_step(Query(query=q), tool=search), st.text(max_size=12)),
    st.just(call_step(Query(query="boom"), tool=search)),
    st.just(call_step(Query(query="retry"), tool=search)),
    st.builds(lambda q: call_step(Query(query=q), tool=delete, rationale="remove it"), st.text(max_size=8)),
    st.just(done_step("done")),
    st.just({"rationale": "no decision"}),
)


def assert_json_forms(events: list[Event]) -> None:
    """Each event's JSON form is in the schema, names its kind, run, round and number, and reads back."""
    for seq, event in enumerate(events):
        text = event.to_json()
        data = json.loads(text)
        _VALIDATOR.validate(data)
        assert (data["kind"], data["run_id"], data["round"], data["seq"]) == (
            event.kind,
            event.run_id,
            event.round,
            seq,
        )
        back = parse_event(text)
        assert type(back) is type(event)
        assert back.to_json() == text


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=st.lists(_STEPS, min_size=1, max_size=6), rounds=st.integers(1, 5), repeat=st.booleans())
async def test_every_event_of_any_run_has_a_json_form_that_reads_back(
    script: list[dict[str, Any]], rounds: int, repeat: bool
) -> None:
    """Whatever a tiered run does (calls, retries, tool errors, proposals, repeats, bad replies), every event it
    emits is numbered in order, validates against EVENT_SCHEMA, and parse_event(e.to_json()).to_json() is the
    same text."""
    recorder = Recorder()
    config = LoopConfig(
        max_rounds=rounds,
        retry=NO_WAIT,
        after_proposal=AfterProposal.CONTINUE,
        on_repeat=RepeatPolicy.REFUSE if repeat else RepeatPolicy.STOP,
    )
    caller = ScriptedCaller([*script, *[done_step()] * (rounds * 2)])
    await run_tool_loop_tiered(caller, Finder(), [search, delete], "ctx", config, observer=recorder)
    assert_json_forms(recorder.events)


def test_the_schema_covers_every_event_class() -> None:
    """EVENT_SCHEMA's discriminator maps the kind of every class of the Event union (none is left out)."""
    kinds = {cls.__dataclass_fields__["kind"].default for cls in typing.get_args(Event)}
    discriminator, variants = EVENT_SCHEMA["discriminator"], EVENT_SCHEMA["oneOf"]
    assert isinstance(discriminator, dict)
    assert isinstance(discriminator["mapping"], dict)
    assert set(discriminator["mapping"]) == kinds
    assert isinstance(variants, list)
    assert len(variants) == len(kinds)


async def test_tool_args_are_written_as_their_json_and_read_back_as_event_args() -> None:
    """A tool call's pydantic args are their JSON object in the event's form, and EventArgs when read back."""
    recorder = Recorder()
    caller = ScriptedCaller([call_step(Query(query="née"), tool=search), done_step()])
    await run_tool_loop(caller, Finder(), [search], "ctx", LoopConfig(retry=NO_WAIT), observer=recorder)
    started = next(e for e in recorder.events if isinstance(e, ToolCallStarted))
    assert json.loads(started.to_json())["args"] == {"query": "née"}
    back = parse_event(started.to_json())
    assert isinstance(back, ToolCallStarted)
    assert isinstance(back.args, EventArgs)
    assert back.args.model_dump() == {"query": "née"}


_ESCAPED = b"caf\xe9".decode("utf-8", "surrogateescape")
"""A file name read from a disk as Python reads one it cannot decode: a lone surrogate in it."""


@tool(tier=Tier.READ_ONLY, name="search")
def listing(args: Query) -> list[Doc]:
    """List files, whose names may not decode."""
    if args.query == "missing":
        raise RuntimeError(f"no such file: {_ESCAPED}")
    return [Doc(id=_ESCAPED)]


async def test_a_lone_surrogate_is_written_as_the_replacement_character_and_reads_back() -> None:
    """A lone surrogate in a tool's items or error (a file name decoded with `surrogateescape`) is written as
    U+FFFD: every event of the run still has its JSON form, in the schema, and reads back; nothing is dropped."""
    recorder = Recorder()
    steps = [call_step(Query(query="all"), tool=listing), call_step(Query(query="missing"), tool=listing)]
    await run_tool_loop(ScriptedCaller(steps), Finder(), [listing], "ctx", LoopConfig(retry=NO_WAIT), observer=recorder)
    assert_json_forms(recorder.events)
    written = [event.to_json() for event in recorder.events]
    assert any("caf\ufffd" in text for text in written)
    assert not any("\\udce9" in text for text in written)
    failed = [e for e in recorder.events if isinstance(e, ToolResultReturned) and e.error is not None]
    assert json.loads(failed[0].to_json())["error"]["message"].endswith("caf\ufffd")


async def test_errors_are_written_as_their_class_and_message() -> None:
    """A tool's error is its class name and message in the JSON form, and a ReportedError read back."""
    recorder = Recorder()
    caller = ScriptedCaller([call_step(Query(query="boom"), tool=search)])
    await run_tool_loop(caller, Finder(), [search], "ctx", LoopConfig(retry=NO_WAIT), observer=recorder)
    failed = next(e for e in recorder.events if isinstance(e, ToolResultReturned))
    assert json.loads(failed.to_json())["error"]["type"] == "ToolError"
    back = parse_event(failed.to_json())
    assert isinstance(back, ToolResultReturned)
    assert isinstance(back.error, ReportedError)
    assert (back.error.type_name, str(back.error)) == ("ToolError", str(failed.error))


async def test_a_failed_model_call_is_written_with_its_error() -> None:
    """A model attempt that failed (a reply that never validates) carries its error in the JSON form."""
    recorder = Recorder()
    caller = ScriptedCaller([{"rationale": "no decision"}] * 2)
    await run_tool_loop(caller, Finder(), [search], "ctx", LoopConfig(retry=NO_WAIT), observer=recorder)
    failed = [e for e in recorder.events if isinstance(e, LLMCallFinished)]
    assert failed
    assert all(json.loads(e.to_json())["error"]["type"] == "StructuredOutputError" for e in failed)
    assert_json_forms(recorder.events)


async def test_an_aborted_run_is_written_with_the_round_it_was_in() -> None:
    """A run cancelled in round 1 ends with a RunAborted whose JSON form names the CancelledError and round 1."""
    recorder, called = Recorder(), asyncio.Event()

    class Called(Observer):
        def on_tool_call(self, event: ToolCallStarted) -> None:
            called.set()

    caller = ScriptedCaller([call_step(Query(query="a"))])
    task = asyncio.create_task(run_tool_loop(caller, Finder(), slow, "ctx", observer=[recorder, Called()]))
    await called.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    aborted = recorder.events[-1]
    assert isinstance(aborted, RunAborted)
    data = json.loads(aborted.to_json())
    assert (data["round"], data["error"]["type"]) == (1, "CancelledError")
    assert_json_forms(recorder.events)


async def test_a_single_shot_run_has_json_forms_too() -> None:
    """The events of run_once (a RoundInfo, not a tool round's) have their JSON forms as well."""
    recorder = Recorder()
    await run_once(ScriptedCaller([Query(query="x")]), _Once(), "ctx", schema=Query, observer=recorder)
    assert [e.kind for e in recorder.events] == ["run_start", "round_start", "llm_call", "run_end"]
    assert_json_forms(recorder.events)


class _Once:
    def role(self) -> RoleSpec:
        return RoleSpec(model="m")

    def render(self, ctx: str, info: RoundInfo) -> Prompt:
        return Prompt(system="s", dynamic=f"{ctx} {info.round}")


@tool(tier=Tier.READ_ONLY)
async def slow(args: Query) -> list[Doc]:
    """Never returns before it is cancelled."""
    await asyncio.Event().wait()
    return []


def test_text_that_is_not_an_event_is_refused_with_the_problem_named() -> None:
    """parse_event refuses text that is not an event's JSON form, naming the first problem."""
    with pytest.raises(UsageError, match="kind"):
        parse_event('{"run_id": "r"}')
    with pytest.raises(UsageError, match="not an agentkit event"):
        parse_event('{"kind": "tool_call", "run_id": "r"}')


_DELTA = json.loads(RationaleDelta(run_id="r", round=1, attempt=1, text="ab", delta="b", seq=4).to_json())


@pytest.mark.parametrize(
    "text",
    [
        {**_DELTA, "seq": "4"},
        {**_DELTA, "attempt": True},
        {**_DELTA, "text": 5},
        {key: value for key, value in _DELTA.items() if key != "seq"},
        {key: value for key, value in _DELTA.items() if key != "attempt"},
    ],
    ids=["seq as a string", "attempt as a boolean", "text as a number", "no seq", "no attempt"],
)
def test_parse_event_refuses_what_the_schema_refuses(text: dict[str, Any]) -> None:
    """A text EVENT_SCHEMA refuses (a number as a string, a boolean for an integer, a member missing) is refused
    by parse_event too, not coerced or filled with a default."""
    assert list(_VALIDATOR.iter_errors(text))
    with pytest.raises(UsageError, match="not an agentkit event's JSON form"):
        parse_event(json.dumps(text))


@pytest.mark.parametrize(
    "text",
    [_DELTA, {**_DELTA, "round": 1.0}, {**_DELTA, "extra": 1}, {**_DELTA, "seq": -5}],
    ids=["as written", "an integral float", "an extra member", "a negative seq"],
)
def test_parse_event_reads_what_the_schema_takes(text: dict[str, Any]) -> None:
    """A text EVENT_SCHEMA takes is read by parse_event."""
    _VALIDATOR.validate(text)
    assert parse_event(json.dumps(text)).kind == "rationale_delta"


async def test_a_streamed_run_has_json_forms_for_its_deltas(server: FakeOpenAIServer) -> None:
    """A streamed run's RationaleDelta and AnswerDelta events (and the rest) have JSON forms that read back."""
    look = {"rationale": "Nothing is known yet; I search.", "decision": {"done": False, "call": {"query": "tiers"}}}
    done = {"rationale": "The results cover it.", "decision": {"done": True, "answer": {"text": "read only runs"}}}
    server.add(FakeReply.value(look, chunk_chars=5), FakeReply.value(done, chunk_chars=5))
    recorder = Recorder()
    async with OpenAICaller(base_url=server.base_url) as caller:
        config = LoopConfig(retry=NO_WAIT, stream=True)
        await run_tool_loop(caller, Finder(), search, "ctx", config, answer=_Answer, observer=recorder)
    kinds = {e.kind for e in recorder.events}
    assert {"rationale_delta", "answer_delta"} <= kinds
    assert_json_forms(recorder.events)
    rationale = [json.loads(e.to_json()) for e in recorder.events if isinstance(e, RationaleDelta)]
    assert rationale[-1]["text"] == "The results cover it."


class _Answer(BaseModel):
    text: str
