"""`Usage`: what the model cost, summed over every request made."""

from __future__ import annotations

import contextlib
from collections.abc import Generator
from contextvars import ContextVar
from dataclasses import dataclass

__all__ = [
    "USAGE_COUNTS",
    "ByModel",
    "Usage",
    "check_counts",
    "counting_models",
    "counting_runs",
    "merged_by_model",
    "run_spent",
    "usage_counts",
    "usage_less",
    "usage_of_counts",
    "written_counts",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class Usage:
    """Model usage, summed over every request made (failed attempts included).

    The detail counts are parts of the two totals, as providers report them: `cached_input_tokens` and
    `cache_write_tokens` are among `input_tokens`, `reasoning_tokens` among `output_tokens`. A provider
    that does not report one leaves it 0.
    """

    requests: int = 0
    """HTTP requests (or scripted replies) made to the model."""
    input_tokens: int = 0
    """Prompt tokens the provider reported (cached and cache-written ones included)."""
    output_tokens: int = 0
    """Completion tokens the provider reported (reasoning ones included)."""
    cached_input_tokens: int = 0
    """Input tokens read from the provider's prompt cache (OpenAI's `prompt_tokens_details.cached_tokens`,
    Anthropic's `cache_read_input_tokens`): billed at the cached-input price."""
    cache_write_tokens: int = 0
    """Input tokens written to the provider's prompt cache (Anthropic's `cache_creation_input_tokens`):
    billed at the cache-write price."""
    reasoning_tokens: int = 0
    """Output tokens the model spent reasoning before its reply (OpenAI's
    `completion_tokens_details.reasoning_tokens`): billed as output."""

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            requests=self.requests + other.requests,
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cached_input_tokens=self.cached_input_tokens + other.cached_input_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
        )


USAGE_COUNTS = (
    "requests",
    "input_tokens",
    "output_tokens",
    "cached_input_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
)
"""`Usage`'s fields, as the records that carry a usage (a round's entry, a Temporal payload) name them."""


def usage_counts(usage: Usage) -> dict[str, int]:
    """The usage as a record's fields (`USAGE_COUNTS`)."""
    return {name: getattr(usage, name) for name in USAGE_COUNTS}


def written_counts(usage: Usage) -> dict[str, int]:
    """The usage as a record that predates its detail counts writes it: `requests`, `input_tokens` and
    `output_tokens` always, each detail count only where not 0 (so a record without them, an old one
    included, reads back as the same usage)."""
    return {name: count for name, count in usage_counts(usage).items() if count or name in _ALWAYS}


_ALWAYS = frozenset(USAGE_COUNTS[:3])


def check_counts(usage: Usage, caller: object) -> None:
    """Refuse a usage a caller reported whose counts are not whole numbers >= 0 (a negative count would lift a
    budget, a float one would be priced as a fraction of a token); one pass over six fields.

    Raises:
        UsageError: naming the caller, the count and the fix.
    """
    for name in USAGE_COUNTS:
        count = getattr(usage, name)
        if type(count) is not int or count < 0:
            from agentkit.errors import UsageError

            raise UsageError(
                f"model caller {type(caller).__name__} reported a usage with {name}={count!r}; a StructuredCaller "
                "reports each count (Completion.usage, or a failed call's error.usage) as a whole number >= 0"
            )


def usage_less(usage: Usage, part: Usage) -> Usage:
    """`usage` less `part`, a part of it (what is left of a round's usage once another model's share is taken)."""
    return Usage(**{name: getattr(usage, name) - getattr(part, name) for name in USAGE_COUNTS})


ByModel = dict[str, Usage]
"""Usage by the name of the model asked: how a round that asked several models (a fallback after a failed
primary, a summarizer on a model of its own) is priced, each model's share at its own price."""


def merged_by_model(into: ByModel | None, more: ByModel) -> ByModel:
    """`into` (a new one when `None`) with each model's usage in `more` added to that model's share."""
    merged: ByModel = {} if into is None else into
    for model, usage in more.items():
        had = merged.get(model)
        merged[model] = usage if had is None else had + usage
    return merged


_SPENT: ContextVar[list[Usage] | None] = ContextVar("agentkit_spent", default=None)
_MODELS: ContextVar[ByModel | None] = ContextVar("agentkit_spent_models", default=None)


@contextlib.contextmanager
def counting_runs() -> Generator[list[Usage]]:
    """Collect the usage of every run that finishes in this context (this task, and what it awaits): how a loop
    counts the model calls its `ContextWindow` summarizer makes through agentkit (`run_once_text`, say)."""
    spent: list[Usage] = []
    token = _SPENT.set(spent)
    try:
        yield spent
    finally:
        _SPENT.reset(token)


@contextlib.contextmanager
def counting_models() -> Generator[ByModel]:
    """Collect, by model, the usage of every run that finishes in this context: how a loop prices its
    summarizer's model calls at the summarizer's models, not its executor's."""
    spent: ByModel = {}
    token = _MODELS.set(spent)
    try:
        yield spent
    finally:
        _MODELS.reset(token)


def run_spent(usage: Usage, model: str = "", others: ByModel | None = None) -> None:
    """Report a finished run's usage to the `counting_runs` around it, if any (one read of a context variable),
    and to the `counting_models` around it: `others` by model, the rest as `model`'s."""
    spent = _SPENT.get()
    if spent is not None:
        spent.append(usage)
    models = _MODELS.get()
    if models is not None:
        rest = usage
        for part in (others or {}).values():
            rest = usage_less(rest, part)
        merged_by_model(models, others or {})
        merged_by_model(models, {model: rest})


def usage_of_counts(record: object) -> Usage:
    """The usage a record carries in fields named as `Usage`'s (one it lacks, written before it existed, is 0)."""
    return Usage(**{name: int(getattr(record, name, 0) or 0) for name in USAGE_COUNTS})
