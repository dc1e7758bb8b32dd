"""Behaviour of ``run_once`` and ``run_once_text``: one call, a typed (or prose) ending, never raised."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic import BaseModel

from agentkit import Observer, Outcome, RoleSpec, StopReason, Usage
from agentkit._once import Material, RoundInfo, is_material, run_once, run_once_text
from agentkit._structured import StructuredRequest
from agentkit._text import TextCompletion
from agentkit.errors import ProviderError, StructuredOutputError, Throttled, UsageError
from agentkit.events import Event, LLMCallFinished, RoundStarted, RunAborted, RunFinished, RunStarted
from agentkit.providers.openai import OpenAICaller
from agentkit.testing import FakeOpenAIServer, FakeReply, ScriptedCaller, ScriptedReply, ScriptExhausted
from tests.support import NO_WAIT, Classifier, Label, Recorder


class Change(BaseModel):
    reason: str
    changes: list[str]

    def is_material(self) -> bool:
        return bool(self.changes)


class Flagged(BaseModel):
    is_material: bool
    note: str = ""


async def test_material_verdict_is_applied() -> None:
    """A verdict with no materiality marker is material: outcome APPLIED, reason EXECUTOR_DONE."""
    caller = ScriptedCaller([{"label": "spam"}])
    result = await run_once(caller, Classifier(), "buy now", schema=Label)
    assert result.outcome is Outcome.APPLIED
    assert result.stop_reason is StopReason.EXECUTOR_DONE
    assert result.value == Label(label="spam")
    assert result.error is None
    caller.assert_complete()


async def test_non_material_verdict_method_is_silent() -> None:
    """A verdict whose is_material() says False ends SILENT, and its value is kept."""
    caller = ScriptedCaller([{"reason": "already correct", "changes": []}])
    result = await run_once(caller, Classifier(), "x", schema=Change)
    assert result.outcome is Outcome.SILENT
    assert result.value is not None
    assert result.value.reason == "already correct"


async def test_material_verdict_method_true_is_applied() -> None:
    """A verdict whose is_material() says True ends APPLIED."""
    caller = ScriptedCaller([{"reason": "typo", "changes": ["fix typo"]}])
    result = await run_once(caller, Classifier(), "x", schema=Change)
    assert result.outcome is Outcome.APPLIED


async def test_non_material_verdict_field_is_silent() -> None:
    """A verdict carrying an is_material=False field ends SILENT too."""
    caller = ScriptedCaller([{"is_material": False}, {"is_material": True}])
    assert (await run_once(caller, Classifier(), "x", schema=Flagged)).outcome is Outcome.SILENT
    assert (await run_once(caller, Classifier(), "x", schema=Flagged)).outcome is Outcome.APPLIED


def test_is_material_reads_method_field_or_defaults_true() -> None:
    """is_material() reads the method, then a bool field, else says True."""
    assert is_material(Change(reason="", changes=[])) is False
    assert is_material(Flagged(is_material=False)) is False
    assert is_material(Label(label="x")) is True
    assert isinstance(Change(reason="", changes=[]), Material)


async def test_agent_renders_round_one_of_one() -> None:
    """The agent renders once, from the caller's context, as round 1 of 1 (final, no feedback)."""
    agent = Classifier()
    await run_once(ScriptedCaller([{"label": "a"}]), agent, "the text", schema=Label)
    assert agent.seen == [("the text", RoundInfo(round=1, max_rounds=1, is_final_round=True))]


async def test_request_carries_prompt_and_role() -> None:
    """The request holds the rendered system/dynamic split and every role setting."""
    role = RoleSpec(model="m", fallback_model="f", temperature=0.2, max_tokens=50, prompt_type="label", seed=7)
    caller = ScriptedCaller([{"label": "a"}])
    await run_once(caller, Classifier(role_spec=role), "hello", schema=Label)
    assert caller.requests == [
        StructuredRequest(
            system="Label the text.",
            dynamic="Text: hello",
            model="m",
            fallback_model="f",
            temperature=0.2,
            max_tokens=50,
            prompt_type="label",
            seed=7,
        )
    ]


async def test_throttle_is_error_throttled_and_not_retried() -> None:
    """HTTP 429 ends the run at once: ERROR, THROTTLED, the Throttled attached, one request made."""
    caller = ScriptedCaller([Throttled(retry_after=3.0), {"label": "never used"}])
    result = await run_once(caller, Classifier(), "x", schema=Label, retry=NO_WAIT)
    assert result.outcome is Outcome.ERROR
    assert result.stop_reason is StopReason.THROTTLED
    assert isinstance(result.error, Throttled)
    assert result.value is None
    assert len(caller.requests) == 1


async def test_transient_errors_retry_then_fall_back() -> None:
    """Transient failures are retried on the primary, then the fallback answers; usage counts all three."""
    caller = ScriptedCaller(
        [ProviderError("503", transient=True), ProviderError("503", transient=True), {"label": "a"}]
    )
    result = await run_once(caller, Classifier(), "x", schema=Label, retry=NO_WAIT)
    assert result.outcome is Outcome.APPLIED
    assert [r.model for r in caller.requests] == ["primary", "primary", "backup"]
    assert result.model == "backup"
    assert result.usage.requests == 3


async def test_schema_failure_is_reasked_with_the_error() -> None:
    """A reply that fails the schema is re-asked with the validation error shown to the model."""
    caller = ScriptedCaller([{"wrong": 1}, {"label": "a"}])
    result = await run_once(caller, Classifier(), "x", schema=Label, retry=NO_WAIT)
    assert result.outcome is Outcome.APPLIED
    assert caller.requests[0].reask is None
    assert caller.requests[1].reask is not None
    assert "label" in caller.requests[1].reask


async def test_exhausted_attempts_end_llm_error_with_usage() -> None:
    """When every attempt fails the run ends ERROR, LLM_ERROR, with the last error and all usage."""
    failures = [ScriptedReply(value=ProviderError("boom", transient=True), usage=Usage(requests=1, input_tokens=5))]
    caller = ScriptedCaller(failures * 3)
    result = await run_once(caller, Classifier(), "x", schema=Label, retry=NO_WAIT)
    assert result.outcome is Outcome.ERROR
    assert result.stop_reason is StopReason.LLM_ERROR
    assert isinstance(result.error, ProviderError)
    assert result.usage == Usage(requests=3, input_tokens=15)
    with pytest.raises(ProviderError):
        result.raise_for_error()


async def test_non_transient_error_is_not_retried() -> None:
    """A non-transient provider error (a 400) ends the run after one request."""
    caller = ScriptedCaller([ProviderError("bad request", status=400)])
    result = await run_once(caller, Classifier(), "x", schema=Label, retry=NO_WAIT)
    assert result.stop_reason is StopReason.LLM_ERROR
    assert len(caller.requests) == 1


async def test_unexpected_caller_exception_becomes_error_result() -> None:
    """A caller raising a foreign exception still ends in a result (ERROR), not a raise."""
    caller = ScriptedCaller([RuntimeError("socket closed")])
    result = await run_once(caller, Classifier(), "x", schema=Label, retry=NO_WAIT)
    assert result.outcome is Outcome.ERROR
    assert isinstance(result.error, ProviderError)
    assert isinstance(result.error.__cause__, RuntimeError)


async def test_raise_for_error_returns_the_result_on_success() -> None:
    """raise_for_error() hands back the same result when there is no error."""
    result = await run_once(ScriptedCaller([{"label": "a"}]), Classifier(), "x", schema=Label)
    assert result.raise_for_error() is result


async def test_script_run_dry_is_a_wiring_error() -> None:
    """A scripted caller with no reply left is a wiring mistake: it raises, it is not a result."""
    with pytest.raises(ScriptExhausted):
        await run_once(ScriptedCaller(), Classifier(), "x", schema=Label)


async def test_schema_that_is_not_a_model_is_usage_error() -> None:
    """schema= must be a pydantic model class; anything else is refused before any call."""
    caller = ScriptedCaller()
    with pytest.raises(UsageError, match="pydantic model"):
        await run_once(caller, Classifier(), "x", schema=dict)  # type: ignore[type-var]  # the mistake under test
    assert caller.requests == []


async def test_observer_sees_start_round_calls_and_finish() -> None:
    """Observers get run start, round 1 of 1, one event per attempt, and the finish with the outcome."""
    recorder = Recorder()
    role = RoleSpec(model="primary", prompt_type="labeler")
    caller = ScriptedCaller([{"nope": 1}, {"label": "a"}])
    result = await run_once(caller, Classifier(role_spec=role), "x", schema=Label, observer=recorder, retry=NO_WAIT)
    kinds = [e.kind for e in recorder.events]
    assert kinds == ["run_start", "round_start", "llm_call", "llm_call", "run_end"]
    start, round_start, failed, ok, end = recorder.events
    assert isinstance(start, RunStarted)
    assert (start.model, start.max_rounds, start.tools) == ("primary", 1, ())
    assert isinstance(round_start, RoundStarted)
    assert round_start.info.is_final_round
    assert isinstance(failed, LLMCallFinished)
    assert isinstance(failed.error, StructuredOutputError)
    assert isinstance(ok, LLMCallFinished)
    assert (ok.role, ok.attempt, ok.error) == ("labeler", 2, None)
    assert isinstance(end, RunFinished)
    assert end.result.outcome is Outcome.APPLIED
    assert end.result.usage == result.usage
    assert {e.run_id for e in recorder.events} == {result.run_id}


async def test_observer_sees_abort_when_the_run_raises() -> None:
    """A run left by an exception reports RunAborted, so observers can close what they opened."""
    recorder = Recorder()
    with pytest.raises(ScriptExhausted):
        await run_once(ScriptedCaller(), Classifier(), "x", schema=Label, observer=recorder)
    assert [e.kind for e in recorder.events][-1] == "run_abort"
    aborted = recorder.events[-1]
    assert isinstance(aborted, RunAborted)
    assert isinstance(aborted.error, ScriptExhausted)


async def test_failing_observer_does_not_change_the_result() -> None:
    """An observer that raises in every hook leaves the outcome as it would have been."""

    class Broken(Observer):
        def on_event(self, event: Event) -> None:
            raise RuntimeError("observer bug")

    result = await run_once(ScriptedCaller([{"label": "a"}]), Classifier(), "x", schema=Label, observer=Broken())
    assert result.outcome is Outcome.APPLIED


# --- run_once_text ---------------------------------------------------------------------------


@dataclass
class TextOnly:
    """A caller that has only the prose seam, so no JSON mode can be used by accident."""

    replies: list[Any]
    requests: list[StructuredRequest] = field(default_factory=list)

    async def complete_text(self, request: StructuredRequest) -> TextCompletion:
        self.requests.append(request)
        reply = self.replies.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        assert isinstance(reply, TextCompletion)
        return reply


async def test_prose_reply_is_returned_verbatim() -> None:
    """The text comes back exactly as written, not wrapped in an envelope; outcome APPLIED."""
    prose = 'Dear team,\n\nthe build is {"green"} again.\n'
    result = await run_once_text(ScriptedCaller([prose]), Classifier(), "x")
    assert result.text == prose
    assert result.outcome is Outcome.APPLIED
    assert result.stop_reason is StopReason.EXECUTOR_DONE


async def test_empty_reply_comes_back_as_is_not_as_error() -> None:
    """An empty reply is returned as "" with no error (outcome SILENT), never retried."""
    caller = ScriptedCaller([""])
    result = await run_once_text(caller, Classifier(), "x")
    assert result.text == ""
    assert result.error is None
    assert result.outcome is Outcome.SILENT
    assert len(caller.requests) == 1


async def test_text_goes_through_the_text_seam_only() -> None:
    """run_once_text uses complete_text with the rendered prompt and reports the answering model."""
    caller = TextOnly([TextCompletion(text="hi", usage=Usage(requests=1, output_tokens=2), model="served")])
    result = await run_once_text(caller, Classifier(), "hello")
    assert [(r.system, r.dynamic, r.model) for r in caller.requests] == [("Label the text.", "Text: hello", "primary")]
    assert result.model == "served"
    assert result.usage == Usage(requests=1, output_tokens=2)


async def test_text_throttle_is_error_throttled_without_fallback() -> None:
    """A 429 on the prose seam ends ERROR, THROTTLED, after one request (no retry, no fallback)."""
    caller = ScriptedCaller([Throttled(), "unused"])
    result = await run_once_text(caller, Classifier(), "x", retry=NO_WAIT)
    assert result.stop_reason is StopReason.THROTTLED
    assert isinstance(result.error, Throttled)
    assert result.text is None
    assert len(caller.requests) == 1


async def test_text_transient_errors_fall_back() -> None:
    """Transient prose-call failures retry on the primary, then fall back, like structured calls."""
    caller = ScriptedCaller([ProviderError("503", transient=True), ProviderError("503", transient=True), "ok"])
    result = await run_once_text(caller, Classifier(), "x", retry=NO_WAIT)
    assert result.text == "ok"
    assert [r.model for r in caller.requests] == ["primary", "primary", "backup"]
    assert result.usage.requests == 3


async def test_text_failure_is_llm_error_result() -> None:
    """A prose call that fails for good ends ERROR, LLM_ERROR, with the error and no text."""
    result = await run_once_text(ScriptedCaller([ProviderError("401", status=401)]), Classifier(), "x")
    assert result.outcome is Outcome.ERROR
    assert result.stop_reason is StopReason.LLM_ERROR
    assert result.text is None
    with pytest.raises(ProviderError):
        result.raise_for_error()


async def test_text_run_reports_events() -> None:
    """Observers see a prose run start and finish with its outcome."""
    recorder = Recorder()
    await run_once_text(ScriptedCaller(["fine"]), Classifier(), "x", observer=recorder)
    assert [e.kind for e in recorder.events] == ["run_start", "round_start", "llm_call", "run_end"]


async def test_scripted_structured_entry_for_text_is_usage_error() -> None:
    """Scripting a dict where a prose reply is asked is a wiring mistake named in the error."""
    with pytest.raises(UsageError, match="asked for text"):
        await run_once_text(ScriptedCaller([{"label": "a"}]), Classifier(), "x")


# --- over the wire: the OpenAI adapter against the fake OpenAI-compatible server ----------------


async def test_run_once_over_the_wire_returns_the_typed_verdict() -> None:
    """Through OpenAICaller and a real HTTP exchange, run_once returns the validated verdict with usage."""
    reply = FakeReply.value({"label": "spam"}, prompt_tokens=11, completion_tokens=3)
    async with FakeOpenAIServer([reply]) as server, OpenAICaller(base_url=server.base_url, api_key="k") as caller:
        result = await run_once(caller, Classifier(), "buy now", schema=Label, retry=NO_WAIT)
    assert result.value == Label(label="spam")
    assert result.outcome is Outcome.APPLIED
    assert result.usage == Usage(requests=1, input_tokens=11, output_tokens=3)
    assert server.requests[0]["model"] == "primary"


async def test_run_once_text_over_the_wire_uses_no_json_mode() -> None:
    """The prose request carries no response format and no tools, and the text comes back verbatim."""
    prose = "Line one.\n\nLine two, with {braces}."
    async with FakeOpenAIServer([prose]) as server, OpenAICaller(base_url=server.base_url, api_key="k") as caller:
        result = await run_once_text(caller, Classifier(), "x", retry=NO_WAIT)
    assert result.text == prose
    body = server.requests[0]
    assert "response_format" not in body
    assert "tools" not in body
    assert body["messages"][0] == {"role": "system", "content": "Label the text."}


async def test_empty_text_over_the_wire_is_silent() -> None:
    """An empty completion from a real server comes back as "" (SILENT), not as an error."""
    async with FakeOpenAIServer([FakeReply.text("")]) as server, OpenAICaller(base_url=server.base_url) as caller:
        result = await run_once_text(caller, Classifier(), "x", retry=NO_WAIT)
    assert (result.text, result.outcome, result.error) == ("", Outcome.SILENT, None)


async def test_http_429_over_the_wire_is_throttled_after_one_request() -> None:
    """A 429 from the server ends run_once THROTTLED with retry_after, after exactly one request."""
    replies = [FakeReply.error(429, retry_after=7), FakeReply.value({"label": "unused"})]
    async with FakeOpenAIServer(replies) as server, OpenAICaller(base_url=server.base_url, api_key="k") as caller:
        result = await run_once(caller, Classifier(), "x", schema=Label, retry=NO_WAIT)
    assert result.stop_reason is StopReason.THROTTLED
    assert isinstance(result.error, Throttled)
    assert result.error.retry_after == 7
    assert len(server.requests) == 1


class Settling(Observer):
    def __init__(self) -> None:
        self.settled: list[str] = []

    async def settle(self, run_id: str) -> None:
        await asyncio.sleep(0)
        self.settled.append(run_id)


async def test_run_once_awaits_its_observers_settle_before_returning() -> None:
    """A single shot settles its observers (a journal writes its record) before it returns."""
    settling = Settling()
    result = await run_once(ScriptedCaller([{"label": "spam"}]), Classifier(), "x", schema=Label, observer=settling)
    assert settling.settled == [result.run_id]
