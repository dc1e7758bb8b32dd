"""assert_type checks for reasoning settings, usage details and cost (mypy only)."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import assert_type

from agentkit import Completion, LoopConfig, RoleSpec, RoundRecord, StructuredRequest, ToolLoopResult, Usage
from agentkit.evals import Comparison, RunReport, Summary
from agentkit.providers import ModelPrice, Prices, Reasoning, ReasoningEffort, TextCompletion
from agentkit.testing import FakeReply, ScriptedReply


def reasoning_settings() -> None:
    reasoning = Reasoning(effort="low", budget_tokens=2048)
    assert_type(reasoning.effort, ReasoningEffort | None)
    assert_type(reasoning.budget_tokens, int | None)
    assert_type(reasoning.off, bool)
    role = RoleSpec(model="m", reasoning=Reasoning(effort="off"), extra_body={"chat_template_kwargs": {"x": False}})
    assert_type(role.reasoning, Reasoning | None)
    request = StructuredRequest(system="s", dynamic="d", model="m", reasoning=reasoning, extra_body={"top_k": 20})
    assert_type(request.reasoning, Reasoning | None)
    assert request.extra_body is not None
    extra: Mapping[str, object] = request.extra_body
    assert extra is not None


def usage_details(usage: Usage, completion: Completion[RunReport], text: TextCompletion, record: RoundRecord) -> None:
    assert_type(usage.cached_input_tokens, int)
    assert_type(usage.cache_write_tokens, int)
    assert_type(usage.reasoning_tokens, int)
    assert_type(usage + usage, Usage)
    assert_type(completion.reasoning, str | None)
    assert_type(text.reasoning, str | None)
    assert_type(record.reasoning, str | None)
    assert_type(ScriptedReply(value={}, reasoning="r").reasoning, str | None)
    assert_type(FakeReply.value({}, cached_tokens=3, reasoning_tokens=2, reasoning="r"), FakeReply)


def cost(result: ToolLoopResult[str], report: RunReport, summary: Summary, comparison: Comparison) -> None:
    price = ModelPrice(input=Decimal("0.25"), output=Decimal(2), cached_input=Decimal("0.025"))
    assert_type(price.cost(Usage(input_tokens=5)), Decimal)
    prices = Prices({"gpt-5-mini": price})
    assert_type(prices.price("gpt-5-mini-2025-08-07"), ModelPrice | None)
    assert_type(prices.cost("gpt-5-mini", Usage()), Decimal | None)
    assert_type(Prices.from_genai_prices(["gpt-5-mini"], provider_id="openai"), Prices)
    config = LoopConfig(prices=prices, cost_budget=Decimal("0.50"))
    assert_type(config.cost_budget, Decimal | None)
    assert_type(config.prices, Prices | None)
    assert_type(result.cost, Decimal | None)
    assert_type(report.cost, Decimal | None)
    assert_type(summary.cost_per_run, Decimal | None)
    assert_type(comparison.cost_per_run, tuple[Decimal, Decimal] | None)
