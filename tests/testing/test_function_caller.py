"""FunctionCaller: each reply computed by a function of the request, validated like a real reply."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, Field

from agentkit import (
    LoopConfig,
    Outcome,
    StopReason,
    StructuredRequest,
    Tier,
    Usage,
    UsageError,
    run_once,
    run_once_text,
    run_tool_loop,
    tool,
)
from agentkit._text import TextCompletion
from agentkit.errors import ProviderError, StructuredOutputError, Throttled
from agentkit.testing import FunctionCaller, ScriptedReply, call_step, done_step
from tests.support import NO_WAIT, Classifier, Executor, Label, Query


class Verdict(BaseModel):
    ok: bool
    note: str = Field(default="", max_length=5)


def ask(model: str = "m") -> StructuredRequest:
    return StructuredRequest(system="s", dynamic="d", model=model)


async def test_answer_is_computed_from_the_request_and_schema() -> None:
    """The function gets the request and the schema; its dict is validated and returned."""
    seen: list[tuple[str, type[BaseModel] | None]] = []

    def answer(request: StructuredRequest, schema: type[BaseModel] | None) -> dict[str, Any]:
        seen.append((request.dynamic, schema))
        return {"ok": request.dynamic == "d"}

    caller = FunctionCaller(answer)
    completion = await caller.complete(ask(), Verdict)
    assert completion.value == Verdict(ok=True)
    assert (completion.model, completion.usage) == ("m", Usage(requests=1))
    assert seen == [("d", Verdict)]
    assert caller.requests == [ask()]


def test_a_function_of_one_parameter_is_refused_at_construction() -> None:
    """A function that cannot take (request, schema) is a UsageError naming the fix when the caller is made."""

    def request_only(request: StructuredRequest) -> dict[str, Any]:
        return {"ok": True}

    for wrong in (request_only, lambda: {"ok": True}, lambda request, schema, info, extra: {"ok": True}):
        with pytest.raises(UsageError, match=r"two positional parameters, \(request, schema\)"):
            FunctionCaller(wrong)  # type: ignore[arg-type]  # the point of the test


async def test_a_function_taking_star_args_or_defaults_is_accepted() -> None:
    """``*args`` and a third parameter with a default still take (request, schema)."""

    def star(*args: Any) -> dict[str, Any]:
        return {"ok": len(args) == 2}

    def defaulted(request: StructuredRequest, schema: type[BaseModel] | None, extra: int = 0) -> dict[str, Any]:
        return {"ok": True}

    assert (await FunctionCaller(star).complete(ask(), Verdict)).value == Verdict(ok=True)
    assert (await FunctionCaller(defaulted).complete(ask(), Verdict)).value == Verdict(ok=True)


async def test_async_function_is_awaited() -> None:
    """An async function's answer is awaited."""

    async def answer(request: StructuredRequest, schema: type[BaseModel] | None) -> str:
        return '{"ok": false}'

    assert (await FunctionCaller(answer).complete(ask(), Verdict)).value == Verdict(ok=False)


async def test_answer_is_validated_through_json_like_a_real_reply() -> None:
    """An answer that breaks the schema fails as a StructuredOutputError, exactly as a scripted one does."""
    caller = FunctionCaller(lambda request, schema: Verdict.model_construct(ok=True, note="far too long"))
    with pytest.raises(StructuredOutputError, match="Verdict") as raised:
        await caller.complete(ask(), Verdict)
    assert raised.value.raw is not None
    assert "far too long" in raised.value.raw


async def test_raised_exception_is_the_model_calls_failure_and_is_recorded() -> None:
    """A raised AgentkitError is the call's failure, with one request of usage; the request is recorded."""

    def answer(request: StructuredRequest, schema: type[BaseModel] | None) -> dict[str, Any]:
        raise Throttled(retry_after=3)

    caller = FunctionCaller(answer)
    with pytest.raises(Throttled) as raised:
        await caller.complete(ask(), Verdict)
    assert raised.value.usage == Usage(requests=1)
    assert len(caller.requests) == 1


async def test_scripted_reply_sets_usage_and_model() -> None:
    """A ScriptedReply answer carries its own usage and model name."""
    reply = ScriptedReply(value={"ok": True}, usage=Usage(requests=1, input_tokens=9), model="served")
    completion = await FunctionCaller(lambda request, schema: reply).complete(ask(), Verdict)
    assert (completion.model, completion.usage.input_tokens) == ("served", 9)


async def test_prose_request_gets_no_schema_and_a_str_is_the_text() -> None:
    """complete_text passes schema None and returns a str answer as the text, as is."""
    schemas: list[type[BaseModel] | None] = []

    def answer(request: StructuredRequest, schema: type[BaseModel] | None) -> str:
        schemas.append(schema)
        return "  two lines\nof prose "

    completion = await FunctionCaller(answer).complete_text(ask())
    assert completion.text == "  two lines\nof prose "
    assert schemas == [None]


async def test_wrong_kind_of_answer_is_a_usage_error() -> None:
    """A text answer to a structured request, a dict to a prose one, or a non-answer is a wiring mistake."""
    text = TextCompletion(text="x", usage=Usage(requests=1), model="m")
    with pytest.raises(UsageError, match="TextCompletion"):
        await FunctionCaller(lambda request, schema: text).complete(ask(), Verdict)
    with pytest.raises(UsageError, match="return a str"):
        await FunctionCaller(lambda request, schema: {"ok": True}).complete_text(ask())
    with pytest.raises(UsageError, match="int"):
        await FunctionCaller(lambda request, schema: 7).complete(ask(), Verdict)  # type: ignore[arg-type]  # the wrong answer under test


def test_a_non_callable_is_refused() -> None:
    """FunctionCaller(non-callable) is a UsageError at construction."""
    with pytest.raises(UsageError, match="function"):
        FunctionCaller("not a function")  # type: ignore[arg-type]  # the mistake under test


@tool(tier=Tier.READ_ONLY)
def search(args: Query) -> list[str]:
    """Look a query up."""
    return [args.query.upper()]


async def test_drives_a_loop_by_reading_the_round_from_the_prompt() -> None:
    """A loop runs against a function that calls the tool in round 1 and says done after."""

    def executor(request: StructuredRequest, schema: type[BaseModel] | None) -> dict[str, Any]:
        return call_step(Query(query="otters")) if request.dynamic.endswith("round 1") else done_step("enough")

    caller = FunctionCaller(executor)
    result = await run_tool_loop(caller, Executor[str](), search, "q", LoopConfig(retry=NO_WAIT))
    assert (result.outcome, result.stop_reason, result.items) == (Outcome.APPLIED, StopReason.EXECUTOR_DONE, ["OTTERS"])
    assert len(caller.requests) == 2


async def test_failures_get_retry_and_fallback_in_runs() -> None:
    """A function failing on the primary model is retried, then answered by the fallback."""

    def answer(request: StructuredRequest, schema: type[BaseModel] | None) -> dict[str, Any]:
        if request.model == "primary":
            raise ProviderError("503", transient=True)
        return {"label": "spam"}

    caller = FunctionCaller(answer)
    result = await run_once(caller, Classifier(), "x", schema=Label, retry=NO_WAIT)
    assert result.value == Label(label="spam")
    assert [r.model for r in caller.requests] == ["primary", "primary", "backup"]
    text = await run_once_text(FunctionCaller(lambda request, schema: "fine"), Classifier(), "x")
    assert text.text == "fine"


async def test_a_bug_in_the_function_ends_the_run_llm_error_with_it_as_the_cause() -> None:
    """A non-agentkit exception from the function becomes a ProviderError whose cause it is."""

    def broken(request: StructuredRequest, schema: type[BaseModel] | None) -> dict[str, Any]:
        raise KeyError("oops")

    result = await run_once(FunctionCaller(broken), Classifier(), "x", schema=Label, retry=NO_WAIT)
    assert (result.outcome, result.stop_reason) == (Outcome.ERROR, StopReason.LLM_ERROR)
    assert isinstance(result.error, ProviderError)
    assert isinstance(result.error.__cause__, KeyError)


async def test_a_function_of_three_parameters_gets_the_round_it_answers() -> None:
    """`FunctionCaller(function(request, schema, info))`: the tool loop's `ToolRoundInfo` of each request."""
    from agentkit import LoopConfig, Tier, ToolRoundInfo, run_tool_loop
    from agentkit.testing import call_step, done_step
    from tests.support import NO_WAIT, Doc, Executor, Query, Recording

    seen: list[tuple[int, int]] = []

    def answer(request: object, schema: object, info: ToolRoundInfo[Any] | None) -> dict[str, Any]:
        assert info is not None
        seen.append((info.round, len(info.prior_calls)))
        return call_step(Query(query="q")) if info.round == 1 else done_step()

    caller = FunctionCaller(answer)
    search = Recording("search", Tier.READ_ONLY)
    await run_tool_loop(caller, Executor[Doc](), search, "ctx", LoopConfig(retry=NO_WAIT))
    assert seen == [(1, 0), (2, 1)]
    assert [info.round if info else None for info in caller.rounds] == [1, 2]
