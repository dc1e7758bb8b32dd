"""What a run's model calls cost in money: `ModelPrice`, a table of them (`Prices`), and the cost of a usage.

A price table is a value, not a lookup service: a run keeps the one it started with in its state, so a
resumed run, a replay and a Temporal run price every round at the same prices, whatever a price database
says later. `Prices.from_genai_prices` fills one from `genai-prices` (the `prices` extra), priced once,
at the base tier (the price of a prompt of a thousand tokens).
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, cast

from agentkit._usage import ByModel, Usage, usage_less, written_counts
from agentkit.errors import ResumeRefused, UsageError

if TYPE_CHECKING:
    from agentkit._agent import RoleSpec

__all__ = [
    "MILLION",
    "ModelPrice",
    "Prices",
    "answering_model",
    "by_model_text",
    "check_cost_budget",
    "check_priced",
    "inherited_prices",
    "round_cost",
    "unpriced_error",
]

MILLION = Decimal(1_000_000)

_SNAPSHOT = re.compile(r"(?P<name>.+)-(?P<date>\d{4}-\d{2}-\d{2}|\d{8}|\d{4})")
"""A dated snapshot's name: the model's name, `-`, and a date as providers write one: `2025-08-07` (OpenAI),
`20250514` (Anthropic), `0613` (month and day, OpenAI's older snapshots)."""


def _money(value: object, where: str, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, Decimal) or not value.is_finite() or value < 0:
        hint = (
            f" (write Decimal({str(value)!r}): a float's binary fraction is not a price)"
            if isinstance(value, float)
            else ""
        )
        raise UsageError(f"{where} must be a finite Decimal >= 0{' or None' if optional else ''}; got {value!r}{hint}")


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelPrice:
    """One model's prices, in money per million tokens (`Decimal`, never `float`)."""

    input: Decimal
    """Per million input tokens, those neither read from nor written to the prompt cache."""
    output: Decimal
    """Per million output tokens (reasoning tokens included)."""
    cached_input: Decimal | None = None
    """Per million input tokens read from the prompt cache; `None`: the `input` price."""
    cache_write: Decimal | None = None
    """Per million input tokens written to the prompt cache; `None`: the `input` price."""

    def __post_init__(self) -> None:
        _money(self.input, "ModelPrice.input")
        _money(self.output, "ModelPrice.output")
        _money(self.cached_input, "ModelPrice.cached_input", optional=True)
        _money(self.cache_write, "ModelPrice.cache_write", optional=True)

    def cost(self, usage: Usage) -> Decimal:
        """What `usage` costs at these prices (cached and cache-written tokens are parts of `input_tokens`)."""
        cached, written = usage.cached_input_tokens, usage.cache_write_tokens
        plain = max(usage.input_tokens - cached - written, 0)
        total = (
            plain * self.input
            + cached * (self.input if self.cached_input is None else self.cached_input)
            + written * (self.input if self.cache_write is None else self.cache_write)
            + usage.output_tokens * self.output
        )
        return total / MILLION

    def to_json(self) -> dict[str, str | None]:
        """The prices as JSON text (as a run's state keeps them)."""
        return {
            "input": str(self.input),
            "output": str(self.output),
            "cached_input": None if self.cached_input is None else str(self.cached_input),
            "cache_write": None if self.cache_write is None else str(self.cache_write),
        }


@dataclass(frozen=True, slots=True)
class Prices:
    """A price table: each model's `ModelPrice`, in one currency (`LoopConfig(prices=...)`).

    A model is found by its exact name, else, when it is a dated snapshot of a name in the table, by that
    name: the name, `-` and a date as providers write one (`"gpt-5-2025-08-07"`, `"claude-opus-4-20250514"`,
    `"gpt-4-0613"`), the model a server says answered. Any other extension is another model, unknown unless
    listed: `"gpt-5"` does not price `"gpt-5-mini"`, nor `"claude-opus-4"` `"claude-opus-4-5"`.

    Example:
        `Prices({"gpt-5-mini": ModelPrice(input=Decimal("0.25"), output=Decimal("2"), cached_input=Decimal("0.025"))})`
    """

    models: Mapping[str, ModelPrice]
    """Each model's prices, by name."""
    currency: str = "USD"
    """The currency of every price (a label: nothing is converted)."""

    def __post_init__(self) -> None:
        _check_table(self.models, self.currency)
        object.__setattr__(self, "models", MappingProxyType(dict(self.models)))

    def __hash__(self) -> int:
        return hash((frozenset(self.models.items()), self.currency))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Prices):
            return NotImplemented
        return dict(self.models) == dict(other.models) and self.currency == other.currency

    def price(self, model: str) -> ModelPrice | None:
        """The prices of `model` (its own, else those of the name it is a dated snapshot of); `None`: unknown."""
        found = self.models.get(model)
        if found is not None:
            return found
        snapshot = _SNAPSHOT.fullmatch(model)
        if snapshot is None or not _is_date(snapshot["date"]):
            return None
        return self.models.get(snapshot["name"])

    def cost(self, model: str, usage: Usage) -> Decimal | None:
        """What `usage` of `model` costs; `None` when the table has no price for it."""
        price = self.price(model)
        return None if price is None else price.cost(usage)

    def to_json(self) -> dict[str, Any]:
        """The table as JSON (as a run's state keeps it)."""
        return {"currency": self.currency, "models": {name: price.to_json() for name, price in self.models.items()}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Prices:
        """The table `to_json` wrote."""

        def decimal(value: object) -> Decimal | None:
            return None if value is None else Decimal(str(value))

        models = {
            name: ModelPrice(
                input=Decimal(str(price["input"])),
                output=Decimal(str(price["output"])),
                cached_input=decimal(price.get("cached_input")),
                cache_write=decimal(price.get("cache_write")),
            )
            for name, price in data["models"].items()
        }
        return cls(models, currency=str(data.get("currency", "USD")))

    @classmethod
    def from_genai_prices(cls, models: Iterable[str], *, provider_id: str | None = None) -> Prices:
        """A table of `models`' prices today, from `genai-prices` (`pip install 'agentkit[prices]'`), in USD.

        Each model is priced once, at the base tier (what a call of a thousand input tokens pays), through
        `genai_prices.calc_price`; `provider_id` (`"openai"`, `"anthropic"`...) narrows the lookup.

        Raises:
            UsageError: `genai-prices` is not installed, or it has no price for a model (named).
        """
        try:
            import genai_prices
        except ImportError as missing:
            raise UsageError("Prices.from_genai_prices needs genai-prices: pip install 'agentkit[prices]'") from missing
        table: dict[str, ModelPrice] = {}
        for model in models:

            def per_million(counts: dict[str, int], model: str = model) -> Decimal:
                return _genai_price(genai_prices, model, provider_id, counts)

            table[model] = ModelPrice(
                input=per_million({"input_tokens": _UNIT}),
                output=per_million({"output_tokens": _UNIT}),
                cached_input=per_million({"input_tokens": _UNIT, "cache_read_tokens": _UNIT}),
                cache_write=per_million({"input_tokens": _UNIT, "cache_write_tokens": _UNIT}),
            )
        return cls(table)


def _check_table(models: object, currency: object) -> None:
    if not isinstance(models, Mapping):
        raise UsageError(f"Prices.models must be a mapping of model names to ModelPrice; got {models!r}")
    for name, price in cast("Mapping[object, object]", models).items():
        if not isinstance(name, str) or not name:
            raise UsageError(f"Prices.models: a model name must be a non-empty str; got {name!r}")
        if not isinstance(price, ModelPrice):
            raise UsageError(f"Prices.models[{name!r}] must be a ModelPrice; got {price!r}")
    if not isinstance(currency, str) or not currency:
        raise UsageError(f"Prices.currency must be a non-empty str; got {currency!r}")


_UNIT = 1000
"""The tokens `Prices.from_genai_prices` prices a model at: small enough for the base tier of a tiered price."""


def _genai_price(module: Any, model: str, provider_id: str | None, counts: dict[str, int]) -> Decimal:
    """What `counts` tokens of `model` cost per million, as `genai_prices.calc_price` says."""
    try:
        priced = module.calc_price(module.Usage(**counts), model_ref=model, provider_id=provider_id)
    except LookupError as unknown:
        raise UsageError(
            f"genai-prices has no price for model {model!r} ({unknown}); give its ModelPrice yourself"
        ) from None
    return Decimal(priced.total_price) * (MILLION / _UNIT)


def check_cost_budget(budget: object, prices: object) -> None:
    """Refuse a cost budget that is not a positive Decimal, or one without a price table to keep it by.

    Raises:
        UsageError: naming the field and the fix.
    """
    if prices is not None and not isinstance(prices, Prices):
        raise UsageError(f"LoopConfig.prices must be a Prices table or None; got {prices!r}")
    if budget is None:
        return
    if not isinstance(budget, Decimal) or not budget.is_finite() or budget <= 0:
        raise UsageError(f"LoopConfig.cost_budget must be a Decimal > 0 (money), or None for no budget; got {budget!r}")
    if prices is None:
        raise UsageError(
            "LoopConfig.cost_budget needs LoopConfig.prices: a budget in money can only be kept with each model's "
            "price (Prices({...}), or Prices.from_genai_prices([...]))"
        )


def _is_date(text: str) -> bool:
    """`text` is a calendar date in one of `_SNAPSHOT`'s forms (a month and day in a leap year for the short form)."""
    digits = text.replace("-", "")
    try:
        if len(digits) == 4:
            datetime.date(2000, int(digits[:2]), int(digits[2:]))
        else:
            datetime.date(int(digits[:4]), int(digits[4:6]), int(digits[6:]))
    except ValueError:
        return False
    return True


def check_priced(prices: Prices | None, budget: Decimal | None, role: RoleSpec, *, resumed: str | None = None) -> None:
    """A budget in money needs a price for every model the role may ask; raises `UsageError` before anything
    runs, not a budget that stops counting at the first round of an unpriced model. `resumed`: the id of the run
    a resume goes on with (its table is the one its state keeps): `ResumeRefused`, worded for a resume.

    Raises:
        UsageError: naming the model and the fix (`ResumeRefused` for a resume).
    """
    if budget is None or prices is None:
        return
    for model in (role.model, role.fallback_model):
        if model is not None and prices.price(model) is None:
            if resumed is not None:
                raise ResumeRefused(
                    f"run {resumed!r} cannot go on under its cost_budget: the price table its state keeps has no "
                    f"price for model {model!r} (this agent's role's model or its fallback); resume it with an "
                    "agent on a model the table prices, or fork it with a config whose prices add this model "
                    "(journal.fork(..., config=...)). Nothing ran"
                )
            raise UsageError(
                f"LoopConfig.cost_budget cannot be kept: LoopConfig.prices has no price for model {model!r} "
                "(the role's model or its fallback); add it to the table, or leave cost_budget out"
            )


def by_model_text(usage: Usage, model: str, others: ByModel) -> str:
    """A round's `usage` split by model as its entry keeps it (`RoundEntry.by_model`): `others` (each model's
    share but the role's), and what is left of it as `model`'s (the role's)."""
    split: dict[str, dict[str, int]] = {}
    rest = usage
    for name, share in others.items():
        split[name] = written_counts(share)
        rest = usage_less(rest, share)
    if rest.requests or rest.total_tokens:
        split[model] = written_counts(rest)
    return json.dumps(split, sort_keys=True, separators=(",", ":"))


def _shares(text: str) -> dict[str, Usage]:
    return {name: Usage(**{k: int(v) for k, v in counts.items()}) for name, counts in json.loads(text).items()}


def answering_model(answered: str, role: RoleSpec) -> str:
    """The model whose price a round pays that a server says `answered` answered, when the table has no price
    for that name: of the role's model and its fallback, the one `answered` names most specifically (itself, or
    an alias such as `gpt-4o-mini-latest`), the role's model first; the role's model when it names neither (a
    failed round names none)."""
    named = [model for model in (role.model, role.fallback_model) if model and _names(answered, model)]
    return max(named, key=len) if named else role.model


def _names(answered: str, model: str) -> bool:
    return answered == model or answered.startswith(model + "-")


def round_cost(prices: Prices, role: RoleSpec, model: str, usage: Usage, by_model: str | None) -> Decimal | str:
    """What a round costs at `prices`: each model's share of it (`by_model`) at that model's price, else the whole
    at the price of the model that answered (`model`; see `answering_model`); or the name of the model that
    has no price in the table."""
    if by_model is not None:
        total = Decimal(0)
        for name, share in _shares(by_model).items():
            price = prices.price(name)
            if price is None:
                if share.total_tokens:
                    return name
                continue
            total += price.cost(share)
        return total
    price = prices.price(model) if model else None
    if price is None:
        model = answering_model(model, role)
        price = prices.price(model)
        if price is None:
            return model
    return price.cost(usage)


def unpriced_error(model: str) -> UsageError:
    """Why a run under a `cost_budget` stopped: a round of `model`, which the price table has no price for."""
    return UsageError(
        f"LoopConfig.cost_budget cannot be kept: a round of model {model!r} has no price in LoopConfig.prices, so "
        "the run stopped before its next round; add the model to the table (a summarizer's model included)"
    )


def inherited_prices(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """A fork's price table (as its state keeps one, `Prices.to_json`): `new`, plus the models of the run's table
    (`old`) that `new` does not name, so the rounds a fork inherits keep their own models' prices (a table in
    another currency is taken as it is: prices are not converted)."""
    if old.get("currency", "USD") != new.get("currency", "USD"):
        return dict(new)
    return {**new, "models": {**old["models"], **new["models"]}}
