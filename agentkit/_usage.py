"""`Usage`: what the model cost, summed over every request made."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Usage"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Usage:
    """Model usage, summed over every request made (failed attempts included)."""

    requests: int = 0
    """HTTP requests (or scripted replies) made to the model."""
    input_tokens: int = 0
    """Prompt tokens the provider reported."""
    output_tokens: int = 0
    """Completion tokens the provider reported."""

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            requests=self.requests + other.requests,
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
        )
