"""generate_structured: retry, fallback, the throttle short-circuit and usage summing."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import BaseModel

from agentkit import RetryPolicy, StructuredRequest, Usage, UsageError, generate_structured
from agentkit._structured import Attempt
from agentkit.errors import ProviderError, StructuredOutputError, Throttled
from agentkit.testing import ScriptedCaller, ScriptedReply
from tests.support import NO_WAIT


class Verdict(BaseModel):
    ok: bool


def request(fallback: str | None = "backup") -> StructuredRequest:
    return StructuredRequest(system="s", dynamic="d", model="primary", fallback_model=fallback)


def transient(status: int = 503) -> ProviderError:
    return ProviderError(f"upstream {status}", transient=True, status=status)


async def test_first_success_returns_value_and_model() -> None:
    """A valid first reply is returned with the model that answered."""
    caller = ScriptedCaller([{"ok": True}])
    completion = await generate_structured(caller, request(), Verdict, NO_WAIT)
    assert completion.value == Verdict(ok=True)
    assert completion.model == "primary"
    assert completion.usage == Usage(requests=1)


async def test_primary_tried_twice_then_fallback_once() -> None:
    """Transient failures retry the primary once, then fail over to the fallback model."""
    caller = ScriptedCaller([transient(), transient(500), {"ok": True}])
    completion = await generate_structured(caller, request(), Verdict, NO_WAIT)
    assert [r.model for r in caller.requests] == ["primary", "primary", "backup"]
    assert completion.model == "backup"


async def test_all_attempts_failing_raises_last_error_with_total_usage() -> None:
    """When every attempt fails the last error is raised, carrying the usage of all attempts."""
    last = transient(502)
    caller = ScriptedCaller([transient(), transient(), last, {"ok": True}])
    with pytest.raises(ProviderError) as raised:
        await generate_structured(caller, request(), Verdict, NO_WAIT)
    assert raised.value is last
    assert raised.value.usage == Usage(requests=3)
    assert caller.remaining == 1


async def test_without_fallback_only_primary_attempts_run() -> None:
    """With no fallback model, only the primary's two attempts are made."""
    caller = ScriptedCaller([transient(), transient(), {"ok": True}])
    with pytest.raises(ProviderError):
        await generate_structured(caller, request(fallback=None), Verdict, NO_WAIT)
    assert [r.model for r in caller.requests] == ["primary", "primary"]


async def test_throttle_is_never_retried_nor_failed_over() -> None:
    """A 429 surfaces at once: one request, no retry, no fallback."""
    caller = ScriptedCaller([Throttled(retry_after=1.5), {"ok": True}])
    with pytest.raises(Throttled) as raised:
        await generate_structured(caller, request(), Verdict, NO_WAIT)
    assert len(caller.requests) == 1
    assert raised.value.retry_after == 1.5


async def test_throttle_after_a_transient_failure_still_stops_at_once() -> None:
    """A 429 on the second attempt stops there; the fallback is not asked."""
    caller = ScriptedCaller([transient(), Throttled(), {"ok": True}])
    with pytest.raises(Throttled) as raised:
        await generate_structured(caller, request(), Verdict, NO_WAIT)
    assert [r.model for r in caller.requests] == ["primary", "primary"]
    assert raised.value.usage == Usage(requests=2)


async def test_non_transient_provider_error_is_not_retried() -> None:
    """A 400-class error ends the call after one request."""
    caller = ScriptedCaller([ProviderError("bad request", status=400), {"ok": True}])
    with pytest.raises(ProviderError, match="bad request"):
        await generate_structured(caller, request(), Verdict, NO_WAIT)
    assert len(caller.requests) == 1


async def test_invalid_reply_is_reasked_with_error_text() -> None:
    """A schema-invalid reply is retried with the validation error in the next request."""
    caller = ScriptedCaller(['{"ok": "not-a-bool-at-all"}', {"ok": False}])
    completion = await generate_structured(caller, request(), Verdict, NO_WAIT)
    assert completion.value == Verdict(ok=False)
    assert caller.requests[0].reask is None
    reask = caller.requests[1].reask
    assert reask is not None
    assert "ok" in reask
    assert "Verdict" in reask


async def test_invalid_replies_fail_over_to_fallback() -> None:
    """A reply that stays invalid counts as a failed attempt, so the fallback gets its turn."""
    caller = ScriptedCaller(["not json", "{}", {"ok": True}])
    completion = await generate_structured(caller, request(), Verdict, NO_WAIT)
    assert completion.model == "backup"
    assert [r.model for r in caller.requests] == ["primary", "primary", "backup"]


async def test_structured_output_error_names_schema_and_raw_reply() -> None:
    """The final schema failure names the schema and keeps the last raw reply."""
    caller = ScriptedCaller(["nope", "still nope"])
    with pytest.raises(StructuredOutputError) as raised:
        await generate_structured(caller, request(fallback=None), Verdict, NO_WAIT)
    assert raised.value.schema_name == "Verdict"
    assert raised.value.raw == "still nope"


async def test_usage_is_summed_over_every_attempt() -> None:
    """Usage of failed and successful attempts adds up in the completion."""
    failed = transient()
    failed.usage = Usage(requests=1, input_tokens=100, output_tokens=0)
    ok = ScriptedReply(value={"ok": True}, usage=Usage(requests=1, input_tokens=100, output_tokens=7))
    caller = ScriptedCaller([failed, ok])
    completion = await generate_structured(caller, request(), Verdict, NO_WAIT)
    assert completion.usage == Usage(requests=2, input_tokens=200, output_tokens=7)


async def test_unexpected_exception_becomes_provider_error() -> None:
    """A non-agentkit exception from a caller is wrapped as a non-transient ProviderError with its cause."""
    caller = ScriptedCaller([ConnectionResetError("reset")])
    with pytest.raises(ProviderError) as raised:
        await generate_structured(caller, request(), Verdict, NO_WAIT)
    assert isinstance(raised.value.__cause__, ConnectionResetError)
    assert len(caller.requests) == 1


async def test_usage_error_propagates_unretried() -> None:
    """A wiring mistake is raised as is, never retried."""
    caller = ScriptedCaller([UsageError("wired wrong"), {"ok": True}])
    with pytest.raises(UsageError, match="wired wrong"):
        await generate_structured(caller, request(), Verdict, NO_WAIT)
    assert len(caller.requests) == 1


async def test_on_attempt_reports_each_attempt_in_order() -> None:
    """on_attempt sees every attempt with its model, number and error."""
    seen: list[Attempt] = []
    caller = ScriptedCaller([transient(), transient(), {"ok": True}])
    await generate_structured(caller, request(), Verdict, NO_WAIT, on_attempt=seen.append)
    assert [(a.model, a.attempt, a.error is None) for a in seen] == [
        ("primary", 1, False),
        ("primary", 2, False),
        ("backup", 3, True),
    ]


async def test_policy_attempt_counts_are_honoured() -> None:
    """A policy of three primary attempts and no fallback makes exactly three requests."""
    caller = ScriptedCaller([transient(), transient(), transient(), {"ok": True}])
    policy = RetryPolicy(primary_attempts=3, fallback_attempts=0, wait_initial=0, wait_max=0)
    with pytest.raises(ProviderError):
        await generate_structured(caller, request(), Verdict, policy)
    assert [r.model for r in caller.requests] == ["primary"] * 3


def test_a_first_attempt_that_succeeds_never_enters_the_retry_machinery() -> None:
    """A call whose first attempt succeeds does not even import tenacity; a retried one does."""
    code = """
import asyncio, sys
from agentkit import RetryPolicy, StructuredRequest, generate_structured
from agentkit.errors import ProviderError
from agentkit.testing import ScriptedCaller
from pydantic import BaseModel
class Verdict(BaseModel):
    ok: bool
request = StructuredRequest(system="s", dynamic="d", model="primary")
policy = RetryPolicy(wait_initial=0, wait_max=0)
asyncio.run(generate_structured(ScriptedCaller([{"ok": True}]), request, Verdict, policy))
print("tenacity" in sys.modules)
failing = ScriptedCaller([ProviderError("503", transient=True), {"ok": True}])
asyncio.run(generate_structured(failing, request, Verdict, policy))
print("tenacity" in sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "True"]
