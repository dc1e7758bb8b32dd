"""A reply cut off at max_tokens: its own error, never retried on the same model, its own stop reason."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from pydantic import BaseModel

from agentkit import (
    LoopConfig,
    Outcome,
    Prompt,
    RoleSpec,
    StopReason,
    StructuredRequest,
    Tier,
    Usage,
    generate_structured,
    run_once,
    run_once_text,
    run_tool_loop,
    tool,
)
from agentkit._once import RoundInfo
from agentkit._pair import LLMVerifier, pair
from agentkit.errors import ProviderError, StructuredOutputError, Truncated
from agentkit.providers.openai import OpenAICaller
from agentkit.testing import FakeOpenAIServer, FakeReply, ScriptedCaller
from tests.support import NO_WAIT, Answer, Critic, Drafter, Executor, Query, good


class Verdict(BaseModel):
    ok: bool


def cut(raw: str = '{"ok": tr', max_tokens: int | None = 10) -> Truncated:
    return Truncated("cut off by the token limit", raw=raw, max_tokens=max_tokens)


def request(*, max_tokens: int | None = 10, fallback_max_tokens: int | None = None) -> StructuredRequest:
    return StructuredRequest(
        system="s",
        dynamic="d",
        model="primary",
        fallback_model="backup",
        max_tokens=max_tokens,
        fallback_max_tokens=fallback_max_tokens,
    )


@dataclass
class Writer:
    """A once-agent whose role sets the token limits under test."""

    spec: RoleSpec

    def role(self) -> RoleSpec:
        return self.spec

    def render(self, ctx: str, info: RoundInfo) -> Prompt:
        return Prompt(system="Write.", dynamic=ctx)


def test_truncated_is_a_structured_output_error_carrying_the_text() -> None:
    """Truncated sits under StructuredOutputError in the tree and carries the cut text and the limit."""
    error = cut("half a rep", 7)
    assert isinstance(error, StructuredOutputError)
    assert (error.raw, error.max_tokens) == ("half a rep", 7)


async def test_truncated_reply_is_not_retried_on_the_same_model() -> None:
    """A cut-off reply is one attempt on the primary; with a fallback of the same limit, nothing more."""
    caller = ScriptedCaller([cut(), {"ok": True}])
    with pytest.raises(Truncated):
        await generate_structured(caller, request(), Verdict, NO_WAIT)
    assert [r.model for r in caller.requests] == ["primary"]
    assert caller.remaining == 1


async def test_truncated_reply_fails_over_when_the_fallback_limit_differs() -> None:
    """With fallback_max_tokens different from max_tokens, the fallback is asked with its own limit."""
    caller = ScriptedCaller([cut(), {"ok": True}])
    completion = await generate_structured(caller, request(fallback_max_tokens=500), Verdict, NO_WAIT)
    assert completion.value == Verdict(ok=True)
    assert [(r.model, r.max_tokens) for r in caller.requests] == [("primary", 10), ("backup", 500)]
    assert caller.requests[1].reask is None  # the cut is not a schema failure to show the model


async def test_fallback_limit_equal_to_the_primary_is_not_a_difference() -> None:
    """fallback_max_tokens equal to max_tokens does not fail over a cut-off reply."""
    caller = ScriptedCaller([cut(), {"ok": True}])
    with pytest.raises(Truncated) as raised:
        await generate_structured(caller, request(fallback_max_tokens=10), Verdict, NO_WAIT)
    assert len(caller.requests) == 1
    assert raised.value.usage == Usage(requests=1)


async def test_truncated_on_the_fallback_is_not_retried_either() -> None:
    """The fallback's own cut-off ends the call: one request per model, the last error raised."""
    last = cut(max_tokens=500)
    caller = ScriptedCaller([cut(), last, {"ok": True}])
    with pytest.raises(Truncated) as raised:
        await generate_structured(caller, request(fallback_max_tokens=500), Verdict, NO_WAIT)
    assert raised.value is last
    assert len(caller.requests) == 2


async def test_fallback_after_transient_failures_uses_its_own_limit() -> None:
    """Failing over for any reason sends the fallback's limit."""
    caller = ScriptedCaller([ProviderError("503", transient=True), ProviderError("503", transient=True), {"ok": True}])
    await generate_structured(caller, request(fallback_max_tokens=64), Verdict, NO_WAIT)
    assert [r.max_tokens for r in caller.requests] == [10, 10, 64]


async def test_run_once_and_run_once_text_treat_a_cut_reply_the_same() -> None:
    """Over the wire, a cut-off prose reply and a cut-off verdict each end MAX_TOKENS after one request."""
    role = RoleSpec(model="primary", fallback_model="backup", max_tokens=5)
    replies = [FakeReply.truncated("Once upon"), FakeReply.truncated()]
    async with FakeOpenAIServer(replies) as server, OpenAICaller(base_url=server.base_url, api_key="k") as caller:
        text = await run_once_text(caller, Writer(role), "a story", retry=NO_WAIT)
        verdict = await run_once(caller, Writer(role), "a verdict", schema=Verdict, retry=NO_WAIT)
    for result in (text, verdict):
        assert (result.outcome, result.stop_reason) == (Outcome.ERROR, StopReason.MAX_TOKENS)
        assert isinstance(result.error, Truncated)
        assert result.error.max_tokens == 5
        assert result.usage.requests == 1
    assert isinstance(text.error, Truncated)
    assert text.error.raw == "Once upon"
    assert len(server.requests) == 2


async def test_cut_prose_fails_over_to_a_fallback_with_a_larger_limit() -> None:
    """run_once_text fails over a cut-off reply to a fallback whose limit differs, as structured runs do."""
    role = RoleSpec(model="primary", fallback_model="backup", max_tokens=5, fallback_max_tokens=200)
    replies: list[FakeReply | str] = [FakeReply.truncated("Once upon"), "Once upon a time."]
    async with FakeOpenAIServer(replies) as server, OpenAICaller(base_url=server.base_url, api_key="k") as caller:
        result = await run_once_text(caller, Writer(role), "a story", retry=NO_WAIT)
    assert result.text == "Once upon a time."
    assert [(body["model"], body["max_tokens"]) for body in server.requests] == [("primary", 5), ("backup", 200)]


@tool(tier=Tier.READ_ONLY)
def search(args: Query) -> list[str]:
    """Look a query up."""
    return [args.query]


async def test_loop_cut_off_by_the_token_limit_ends_max_tokens_keeping_items() -> None:
    """A loop whose step reply is cut off ends ERROR, MAX_TOKENS, with the items gathered before it."""
    caller = ScriptedCaller([{"rationale": "", "done": False, "call": {"query": "a"}}, cut()])
    result = await run_tool_loop(caller, Executor[str](), search, "q", LoopConfig(retry=NO_WAIT))
    assert (result.outcome, result.stop_reason) == (Outcome.ERROR, StopReason.MAX_TOKENS)
    assert isinstance(result.error, Truncated)
    assert result.items == ["a"]
    assert len(caller.requests) == 2


async def test_pair_ends_max_tokens_when_a_draft_or_a_review_is_cut_off() -> None:
    """A cut-off draft and a cut-off LLM review each end a pair ERROR, MAX_TOKENS, the draft discarded."""

    drafted = await pair(
        ScriptedCaller([cut()]), Drafter(), LLMVerifier(ScriptedCaller(), Critic(task="t")), "x", schema=Answer
    )
    critic = ScriptedCaller([cut()])
    reviewed = await pair(
        ScriptedCaller([good()]), Drafter(), LLMVerifier(critic, Critic(task="t")), "x", schema=Answer
    )
    for result in (drafted, reviewed):
        assert (result.outcome, result.stop_reason, result.value) == (Outcome.ERROR, StopReason.MAX_TOKENS, None)
        assert isinstance(result.error, Truncated)
    assert len(critic.requests) == 1
