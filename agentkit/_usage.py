"""`Usage`: what the model cost, summed over every request made."""

from __future__ import annotations

import contextlib
from collections.abc import Generator
from contextvars import ContextVar
from dataclasses import dataclass

__all__ = ["USAGE_COUNTS", "Usage", "counting_runs", "run_spent", "usage_counts", "usage_of_counts", "written_counts"]


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


_SPENT: ContextVar[list[Usage] | None] = ContextVar("agentkit_spent", default=None)


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


def run_spent(usage: Usage) -> None:
    """Report a finished run's usage to the `counting_runs` around it, if any (one read of a context variable)."""
    spent = _SPENT.get()
    if spent is not None:
        spent.append(usage)


def usage_of_counts(record: object) -> Usage:
    """The usage a record carries in fields named as `Usage`'s (one it lacks, written before it existed, is 0)."""
    return Usage(**{name: int(getattr(record, name, 0) or 0) for name in USAGE_COUNTS})
