"""Cost: a price table per model, `result.cost`, and `LoopConfig(cost_budget=...)` kept by the token budget's rule;
the cost survives the journal (a resume prices the first leg's rounds from the state)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentkit import (
    LoopConfig,
    RoleSpec,
    RunCheckpoint,
    StopReason,
    Tier,
    Usage,
    run_tool_loop,
    run_tool_loop_tiered,
)
from agentkit.errors import UsageError
from agentkit.journal import Journal, JournalObserver
from agentkit.providers import ModelPrice, Prices
from agentkit.testing import ScriptedCaller, ScriptedReply, call_step, done_step
from tests.support import NO_WAIT, Finder, Query, delete, search

MINI = ModelPrice(input=Decimal("0.25"), output=Decimal(2), cached_input=Decimal("0.025"))
PRICES = Prices({"exec-model": MINI})


def spent(input_tokens: int, output_tokens: int, cached: int = 0) -> Usage:
    return Usage(requests=1, input_tokens=input_tokens, output_tokens=output_tokens, cached_input_tokens=cached)


def test_a_price_costs_cached_and_written_tokens_at_their_own_prices() -> None:
    """Cached and cache-written tokens are parts of the input, each at its price (the input price when unset)."""
    price = ModelPrice(input=Decimal(3), output=Decimal(15), cached_input=Decimal("0.3"), cache_write=Decimal("3.75"))
    usage = Usage(input_tokens=1_000_000, cached_input_tokens=600_000, cache_write_tokens=100_000, output_tokens=10_000)
    assert price.cost(usage) == Decimal("0.9") + Decimal("0.18") + Decimal("0.375") + Decimal("0.15")
    assert ModelPrice(input=Decimal(1), output=Decimal(1)).cost(usage) == Decimal("1.01")


@given(a=st.integers(0, 10**7), cached=st.integers(0, 10**7), output=st.integers(0, 10**7), b=st.integers(0, 10**7))
def test_cost_adds_up_over_usages(a: int, cached: int, output: int, b: int) -> None:
    """The cost of two usages is the sum of their costs, exactly (Decimal), and never negative."""
    first = Usage(input_tokens=a + cached, cached_input_tokens=cached, output_tokens=output)
    second = Usage(input_tokens=b, output_tokens=b)
    assert MINI.cost(first + second) == MINI.cost(first) + MINI.cost(second)
    assert MINI.cost(first) >= 0


def test_a_model_is_priced_by_its_name_or_the_name_it_extends() -> None:
    """A dated model name finds its family's price; an unknown model has none."""
    prices = Prices({"gpt-5": MINI, "gpt-5-mini": ModelPrice(input=Decimal(1), output=Decimal(1))})
    assert prices.price("gpt-5-2025-08-07") is MINI
    assert prices.price("gpt-5-mini-2025-08-07") == ModelPrice(input=Decimal(1), output=Decimal(1))
    assert prices.price("gpt-50") is None
    assert prices.cost("other", Usage(input_tokens=5)) is None


def test_a_dated_snapshot_finds_its_models_price_in_each_providers_date_form() -> None:
    """A listed name followed by a date (OpenAI's `2025-08-07` and `0613`, Anthropic's `20250514`) is priced."""
    prices = Prices({"gpt-4": MINI, "claude-opus-4": MINI})
    assert prices.price("gpt-4-2024-05-13") is MINI
    assert prices.price("gpt-4-0613") is MINI
    assert prices.price("claude-opus-4-20250514") is MINI


def test_a_model_that_extends_a_listed_name_other_than_by_a_date_is_unknown() -> None:
    """`gpt-5-mini` is not `gpt-5`, nor `claude-opus-4-5` `claude-opus-4`: another model has no price."""
    prices = Prices({"gpt-5": MINI, "claude-opus-4": MINI})
    for model in ("gpt-5-mini", "gpt-5-nano", "gpt-5-mini-2025-08-07", "claude-opus-4-5", "claude-opus-4-1"):
        assert prices.price(model) is None, model
        assert prices.cost(model, Usage(input_tokens=5)) is None
    # digits that are not a date (month 13, a 31st of February) are not a snapshot either
    for model in ("gpt-5-2025-13-01", "gpt-5-20250231", "gpt-5-1399", "gpt-5-123"):
        assert prices.price(model) is None, model


def test_prices_and_budgets_are_checked() -> None:
    """Float prices, negative ones, a budget without prices or not a positive Decimal are refused, named."""
    with pytest.raises(UsageError, match=r"ModelPrice.input must be a finite Decimal >= 0.*Decimal\('0.1'\)"):
        ModelPrice(input=0.1, output=Decimal(1))  # type: ignore[arg-type]  # a float, as a typo would be
    with pytest.raises(UsageError, match=r"ModelPrice.output must be a finite Decimal"):
        ModelPrice(input=Decimal(1), output=Decimal(-1))
    with pytest.raises(UsageError, match=r"cost_budget needs LoopConfig.prices"):
        LoopConfig(cost_budget=Decimal(1))
    with pytest.raises(UsageError, match=r"cost_budget must be a Decimal > 0"):
        LoopConfig(prices=PRICES, cost_budget=Decimal(0))
    with pytest.raises(UsageError, match=r"LoopConfig.prices must be a Prices table"):
        LoopConfig(prices={"m": MINI})  # type: ignore[arg-type]  # a plain dict


async def test_result_cost_is_the_sum_of_each_rounds_cost() -> None:
    """`result.cost` prices each round at the model that answered it; without prices it is `None`."""
    script = [
        ScriptedReply(value=call_step(Query(query="a")), usage=spent(1_000_000, 100_000, cached=800_000)),
        ScriptedReply(value=done_step(), usage=spent(2_000_000, 0)),
    ]
    result = await run_tool_loop(ScriptedCaller(script), Finder(), search, "ctx", LoopConfig(prices=PRICES))
    first = Decimal("0.05") + Decimal("0.02") + Decimal("0.2")
    assert result.cost == first + Decimal("0.5")
    plain = await run_tool_loop(ScriptedCaller(script), Finder(), search, "ctx", LoopConfig())
    assert plain.cost is None
    unpriced = await run_tool_loop(
        ScriptedCaller(script), Finder(), search, "ctx", LoopConfig(prices=Prices({"other": MINI}))
    )
    assert unpriced.cost is None


class WithFallback(Finder):
    """An executor whose role falls back to another model."""

    def role(self) -> RoleSpec:
        return RoleSpec(model="exec-model", fallback_model="backup-model", prompt_type="retrieval")


async def test_a_round_the_fallback_model_answered_is_priced_at_its_own_price_or_none() -> None:
    """A round answered by the fallback model is the fallback's to price: with no price for it, `result.cost` is
    `None`, never the primary's price; a dated name the server gives the primary is still the primary's."""
    script = [
        ScriptedReply(value=call_step(Query(query="a")), usage=spent(1_000_000, 0), model="exec-model-2025-08-07"),
        ScriptedReply(value=done_step(), usage=spent(1_000_000, 0), model="backup-model"),
    ]
    result = await run_tool_loop(ScriptedCaller(script), WithFallback(), search, "ctx", LoopConfig(prices=PRICES))
    assert result.cost is None
    backup = Prices({"exec-model": MINI, "backup-model": ModelPrice(input=Decimal(1), output=Decimal(1))})
    again = await run_tool_loop(ScriptedCaller(script), WithFallback(), search, "ctx", LoopConfig(prices=backup))
    assert again.cost == Decimal("0.25") + Decimal(1)


async def test_a_cost_budget_without_a_price_for_a_model_of_the_role_is_refused_before_any_request() -> None:
    """A budget in money cannot be kept for a model the table does not price (the role's model or its fallback):
    `UsageError` before the model is asked, not a budget that silently stops counting."""
    for agent in (Finder(), WithFallback()):
        caller = ScriptedCaller([done_step()])
        config = LoopConfig(
            prices=Prices({"backup-model": MINI}) if isinstance(agent, WithFallback) else Prices({"other": MINI}),
            cost_budget=Decimal(1),
        )
        with pytest.raises(UsageError, match="cost_budget cannot be kept"):
            await run_tool_loop(caller, agent, search, "ctx", config)
        assert caller.requests == []
    fine = LoopConfig(prices=Prices({"exec-model": MINI, "backup-model": MINI}), cost_budget=Decimal(1))
    done = await run_tool_loop(ScriptedCaller([done_step()]), WithFallback(), search, "ctx", fine)
    assert done.error is None
    assert done.cost == 0


async def test_the_cost_budget_ends_the_run_before_the_round_that_would_cross_it() -> None:
    """With a cost budget the loop stops BUDGET_EXHAUSTED before a round when the cost so far plus the costliest
    round so far would exceed it: the token budget's rule, in money."""
    round_cost = Decimal("0.25") + Decimal("0.2")  # 1M input, 100k output
    caller = ScriptedCaller(
        [ScriptedReply(value=call_step(Query(query=q)), usage=spent(1_000_000, 100_000)) for q in "abcdef"]
    )
    config = LoopConfig(prices=PRICES, cost_budget=Decimal("1.00"), max_rounds=6, retry=NO_WAIT)
    result = await run_tool_loop(caller, Finder(), search, "ctx", config)
    assert result.stop_reason is StopReason.BUDGET_EXHAUSTED
    assert result.rounds == 2  # a third round would bring 0.90 to 1.35
    assert result.cost == 2 * round_cost
    assert result.cost <= Decimal("1.00")


async def test_the_cost_and_its_prices_survive_the_journal_and_a_resume(journal: Journal) -> None:
    """A run stopped at a proposal keeps its prices and budget in its state: resumed from the journal, it prices
    the first leg's rounds too, and the budget counts them."""
    first = ScriptedCaller(
        [ScriptedReply(value=call_step(Query(query="x"), tool="delete"), usage=spent(1_000_000, 100_000))]
    )
    config = LoopConfig(retry=NO_WAIT, autonomy=Tier.READ_ONLY, prices=PRICES, cost_budget=Decimal("5"))
    with JournalObserver(journal) as observer:
        stopped = await run_tool_loop_tiered(first, Finder(), [search, delete], "ctx", config, observer=observer)
    assert stopped.cost == Decimal("0.45")
    stopped.checkpoint.verify()
    loaded = RunCheckpoint.model_validate_json(stopped.checkpoint.model_dump_json())
    assert loaded.config.rebuild() == config
    [pending] = await journal.pending()
    await journal.reject(pending.id, "ops", reason="no")
    second = ScriptedCaller([ScriptedReply(value=done_step(), usage=spent(1_000_000, 0))])
    resumed = await journal.resume(stopped.run_id, second, Finder(), [search, delete], "ctx")
    assert resumed.cost == Decimal("0.45") + Decimal("0.25")
