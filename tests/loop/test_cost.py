"""Cost: a price table per model, `result.cost`, and `LoopConfig(cost_budget=...)` kept by the token budget's rule;
the cost survives the journal (a resume prices the first leg's rounds from the state)."""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentkit import (
    ContextWindow,
    LoopConfig,
    Outcome,
    PriorCall,
    Prompt,
    RoleSpec,
    RoundInfo,
    RunCheckpoint,
    StopReason,
    Tier,
    Usage,
    resume_tool_loop,
    run_once_text,
    run_tool_loop,
    run_tool_loop_tiered,
)
from agentkit._cost import round_cost
from agentkit._state import RoundEntry
from agentkit._usage import usage_of_counts
from agentkit.errors import ResumeRefused, UsageError
from agentkit.journal import Journal, JournalObserver
from agentkit.providers import ModelPrice, Prices
from agentkit.testing import ScriptedCaller, ScriptedReply, call_step, calls_step, done_step
from tests.support import NO_WAIT, Finder, Query, delete, search

if TYPE_CHECKING:
    from typing import Any

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


BACKUP = ModelPrice(input=Decimal(10), output=Decimal(40))
BOTH = Prices({"exec-model": MINI, "backup-model": BACKUP})
INVALID = {"not": "a step"}
"""A reply that fails validation: the attempt is spent, with its usage."""


async def test_a_round_that_failed_over_prices_each_models_attempts_at_that_models_price() -> None:
    """The primary's failed attempts are priced at the primary's price, the fallback's answer at the fallback's
    (not the whole round at the model that answered); the state keeps the split, so a resume prices alike."""
    script = [
        ScriptedReply(value=INVALID, usage=spent(1_000_000, 0)),
        ScriptedReply(value=INVALID, usage=spent(1_000_000, 0)),
        ScriptedReply(value=done_step(), usage=spent(100_000, 10_000), model="backup-model"),
    ]
    result = await run_tool_loop(ScriptedCaller(script), WithFallback(), search, "ctx", LoopConfig(prices=BOTH))
    assert result.cost == 2 * Decimal("0.25") + Decimal(1) + Decimal("0.4")
    assert result.usage == Usage(requests=3, input_tokens=2_100_000, output_tokens=10_000)
    [entry] = result.checkpoint.entries[:1]
    assert isinstance(entry, RoundEntry)
    assert entry.by_model is not None
    loaded = RunCheckpoint.model_validate_json(result.checkpoint.model_dump_json())
    loaded.verify()
    assert round_cost(BOTH, WithFallback().role(), entry.model, usage_of_counts(entry), entry.by_model) == result.cost


async def test_a_round_whose_every_attempt_failed_prices_each_models_attempts_at_that_models_price() -> None:
    """A round with no answer, on the primary and then the fallback, is priced model by model, not all at the
    role's model."""
    script = [ScriptedReply(value=INVALID, usage=spent(1_000_000, 0)) for _ in range(3)]
    config = LoopConfig(prices=BOTH, retry=NO_WAIT)
    result = await run_tool_loop(ScriptedCaller(script), WithFallback(), search, "ctx", config)
    assert result.stop_reason is StopReason.LLM_ERROR
    assert result.cost == 2 * Decimal("0.25") + Decimal(10)


class Summarizer:
    """A summarizer's own executor, on a model of its own."""

    def __init__(self, model: str) -> None:
        self.model = model

    def role(self) -> RoleSpec:
        return RoleSpec(model=self.model)

    def render(self, ctx: str, info: RoundInfo) -> Prompt:
        return Prompt(system="summarize", dynamic=ctx)


def summarizing_on(model: str, usage: Usage) -> ContextWindow:
    """A window whose summarizer asks `model` through agentkit, spending `usage` a summary."""

    async def summarize(summary: str | None, calls: tuple[PriorCall[Any], ...]) -> str:
        said = ScriptedCaller([ScriptedReply(value="a summary", usage=usage)])
        return (await run_once_text(said, Summarizer(model), "the calls")).unwrap()

    return ContextWindow(last=1, summarize=summarize)


async def test_a_summarizer_on_another_model_is_priced_at_its_models_price() -> None:
    """The summarizer's model calls count in the round's usage but are priced at the summarizer's model."""
    script = [ScriptedReply(value=call_step(Query(query=q)), usage=spent(1_000_000, 0)) for q in "ab"]
    script.append(ScriptedReply(value=done_step(), usage=spent(1_000_000, 0)))
    window = summarizing_on("backup-model", spent(100_000, 0))
    config = LoopConfig(prices=BOTH, context=window, retry=NO_WAIT)
    result = await run_tool_loop(ScriptedCaller(script), Finder(), search, "ctx", config)
    assert result.stop_reason is StopReason.EXECUTOR_DONE
    summaries = result.usage.requests - 3
    assert summaries > 0
    assert result.cost == 3 * Decimal("0.25") + summaries * Decimal(1)


class Aliased(Finder):
    """An executor on a model whose name extends its fallback's (`gpt-4o-mini` beside `gpt-4o`)."""

    def role(self) -> RoleSpec:
        return RoleSpec(model="exec-model-mini", fallback_model="exec-model", prompt_type="retrieval")


async def test_an_alias_of_the_roles_model_is_priced_at_the_roles_model_not_a_shorter_fallback() -> None:
    """A reply naming `exec-model-mini-latest` is the role's model (the longest name it extends), not the fallback
    `exec-model`: priced at the role's price, so the cost budget keeps counting."""
    mini = ModelPrice(input=Decimal(1), output=Decimal(0))
    prices = Prices({"exec-model-mini": mini, "exec-model": BACKUP})
    script = [
        ScriptedReply(value=call_step(Query(query=q)), usage=spent(1_000_000, 0), model="exec-model-mini-latest")
        for q in "abcd"
    ]
    config = LoopConfig(prices=prices, cost_budget=Decimal("2.5"), max_rounds=4, retry=NO_WAIT)
    result = await run_tool_loop(ScriptedCaller(script), Aliased(), search, "ctx", config)
    assert result.cost == Decimal(2)
    assert (result.rounds, result.stop_reason) == (2, StopReason.BUDGET_EXHAUSTED)


async def test_a_round_that_cannot_be_priced_under_a_cost_budget_ends_the_run_with_an_error() -> None:
    """A round of a model the table has no price for (a summarizer's) leaves no cost to keep the budget by: the run
    ends ERROR, BUDGET_EXHAUSTED, naming the model, before its next round; it never goes on unkept."""
    script = [ScriptedReply(value=call_step(Query(query=q)), usage=spent(1_000, 0)) for q in "abcdef"]
    window = summarizing_on("cheap-model", spent(1_000, 0))
    config = LoopConfig(prices=PRICES, cost_budget=Decimal(100), context=window, max_rounds=6, retry=NO_WAIT)
    result = await run_tool_loop(ScriptedCaller(script), Finder(), search, "ctx", config)
    assert (result.outcome, result.stop_reason) == (Outcome.ERROR, StopReason.BUDGET_EXHAUSTED)
    assert result.cost is None
    assert "'cheap-model'" in str(result.error)
    assert result.rounds == 3  # the first summary came with round 3; no round ran after it


async def test_a_step_of_several_calls_counts_its_usage_once_in_the_trace() -> None:
    """Every call of a step has its record in the trace, but the step's usage is on one of them: the trace's
    usage adds up to the run's, as the state's does."""
    both = calls_step(call_step(Query(query="a")), call_step(Query(query="b")))
    script = [ScriptedReply(value=both, usage=spent(1_000, 10)), ScriptedReply(value=done_step(), usage=spent(1, 1))]
    config = LoopConfig(max_calls_per_step=2, retry=NO_WAIT)
    result = await run_tool_loop(ScriptedCaller(script), Finder(), search, "ctx", config)
    assert len(result.trace) == 3
    assert sum((r.usage for r in result.trace), Usage()) == result.usage == result.checkpoint.usage


class OnNewModel(Finder):
    """The executor of a fork that goes on with another model."""

    def role(self) -> RoleSpec:
        return RoleSpec(model="new-model", prompt_type="retrieval")


async def test_a_fork_with_a_new_price_table_keeps_the_inherited_rounds_prices() -> None:
    """A fork whose config names another model and a table of its price only still prices the rounds it
    inherits at their own model's price (the run's table), never at the new model's."""
    script = [ScriptedReply(value=call_step(Query(query=q)), usage=spent(1_000_000, 0)) for q in "ab"]
    parent = await run_tool_loop(
        ScriptedCaller(script), Finder(), search, "ctx", LoopConfig(prices=PRICES, max_rounds=2, retry=NO_WAIT)
    )
    new = LoopConfig(prices=Prices({"new-model": BACKUP}), max_rounds=3, retry=NO_WAIT)
    fork = parent.checkpoint.forked("fork", at_round=2, config=new)
    prices = fork.config.rebuild().prices
    assert prices is not None
    assert (prices.price("exec-model"), prices.price("new-model")) == (MINI, BACKUP)
    more = ScriptedCaller([ScriptedReply(value=done_step(), usage=spent(1_000_000, 0))])
    resumed = await resume_tool_loop(more, OnNewModel(), search, "ctx", fork, [])
    assert resumed.cost == 2 * Decimal("0.25") + Decimal(10)


async def test_a_summarizer_that_raises_after_its_model_call_keeps_that_spend_in_the_state_and_the_cost() -> None:
    """A summarizer whose run spent, then raised, ends the run EXECUTOR_ERROR; what it spent is in the run's
    state (a FAILED round of its own), its usage and its cost, at the summarizer's model's price."""

    async def summarize(summary: str | None, calls: tuple[PriorCall[Any], ...]) -> str:
        said = ScriptedCaller([ScriptedReply(value="a summary", usage=spent(100_000, 0))])
        await run_once_text(said, Summarizer("backup-model"), "the calls")
        raise RuntimeError("the summary store is down")

    script = [ScriptedReply(value=call_step(Query(query=q)), usage=spent(1_000_000, 0)) for q in "abc"]
    config = LoopConfig(prices=BOTH, context=ContextWindow(last=1, summarize=summarize), retry=NO_WAIT)
    result = await run_tool_loop(ScriptedCaller(script), Finder(), search, "ctx", config)
    assert result.stop_reason is StopReason.EXECUTOR_ERROR
    assert result.checkpoint.usage == result.usage == Usage(requests=3, input_tokens=2_100_000)
    assert result.cost == 2 * Decimal("0.25") + Decimal(1)
    assert "the summary store is down" in (result.trace[-1].error or "")


async def test_a_resume_on_a_model_the_runs_table_does_not_price_is_refused_and_leaves_the_run_as_it_was(
    journal: Journal,
) -> None:
    """A journaled run under a cost budget, resumed by an agent on a model its stored table has no price for, is
    refused before anything runs (`ResumeRefused`, worded for a resume): the run is not marked aborted, and a
    resume with the right agent still goes on."""
    first = ScriptedCaller([ScriptedReply(value=call_step(Query(query="x"), tool="delete"), usage=spent(1_000, 0))])
    config = LoopConfig(retry=NO_WAIT, autonomy=Tier.READ_ONLY, prices=PRICES, cost_budget=Decimal("5"))
    with JournalObserver(journal) as observer:
        stopped = await run_tool_loop_tiered(first, Finder(), [search, delete], "ctx", config, observer=observer)
    [pending] = await journal.pending()
    await journal.reject(pending.id, "ops", reason="no")
    before = (await journal.run(stopped.run_id)).status
    caller = ScriptedCaller([done_step()])
    with pytest.raises(ResumeRefused, match=r"'new-model'.*fork it with a config whose prices add this model"):
        await journal.resume(stopped.run_id, caller, OnNewModel(), [search, delete], "ctx")
    assert caller.requests == []
    assert (await journal.run(stopped.run_id)).status is before
    resumed = await journal.resume(stopped.run_id, ScriptedCaller([done_step()]), Finder(), [search, delete], "ctx")
    assert resumed.stop_reason is StopReason.NOTHING_RETRIEVED  # the one call was rejected
