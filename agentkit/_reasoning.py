"""`Reasoning`: how much a reasoning model thinks before it answers, said once for every provider.

Each caller maps it onto its own wire: `OpenAICaller` sends `reasoning_effort` (and then
`max_completion_tokens` for the token limit, as OpenAI's reasoning models require), the Anthropic
caller sends `thinking` with its `budget_tokens`. A setting a provider has no field for is said in
the caller's docs; anything else a server takes goes in `RoleSpec.extra_body`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, get_args

from pydantic import JsonValue

from agentkit.errors import UsageError

__all__ = ["EFFORTS", "Reasoning", "ReasoningEffort", "check_extra_body"]

ReasoningEffort = Literal["off", "minimal", "low", "medium", "high"]
"""How hard a reasoning model thinks: `"off"` asks for no reasoning at all (OpenAI's `"none"`,
Anthropic's thinking disabled); the others are OpenAI's `reasoning_effort` levels."""

EFFORTS: tuple[ReasoningEffort, ...] = get_args(ReasoningEffort)


@dataclass(frozen=True, kw_only=True, slots=True)
class Reasoning:
    """A role's reasoning setting (`RoleSpec.reasoning`): an effort level, a thinking budget, or both.

    `Reasoning(effort="low")` for OpenAI's reasoning models; `Reasoning(budget_tokens=4096)` for
    Anthropic's extended thinking (its `budget_tokens`, which it needs); `Reasoning(effort="off")`
    to turn reasoning off where the model allows it. `None` fields leave the server's default.
    """

    effort: ReasoningEffort | None = None
    """The effort level; `None`: the server's default (or what `budget_tokens` implies)."""
    budget_tokens: int | None = None
    """The most tokens the model may think with, where the provider takes a budget (Anthropic's
    thinking); counted within the reply's token limit by those providers."""

    def __post_init__(self) -> None:
        if self.effort is not None and self.effort not in EFFORTS:
            raise UsageError(f"Reasoning.effort must be one of {list(EFFORTS)} or None; got {self.effort!r}")
        budget = self.budget_tokens
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 1):
            raise UsageError(f"Reasoning.budget_tokens must be an int >= 1 (tokens), or None; got {budget!r}")
        if self.effort == "off" and budget is not None:
            raise UsageError(
                f"Reasoning(effort='off') turns reasoning off, so it takes no budget_tokens (got {budget}); "
                "drop one of the two"
            )

    @property
    def off(self) -> bool:
        """Reasoning is turned off."""
        return self.effort == "off"


def check_extra_body(value: object, where: str) -> None:
    """Refuse an `extra_body` that is not a JSON object (string keys, JSON values, finite numbers).

    Raises:
        UsageError: naming `where` and what is wrong.
    """
    if value is None:
        return
    if not isinstance(value, Mapping) or any(not isinstance(key, str) for key in value):
        raise UsageError(f"{where} must be a mapping of str to JSON values, or None; got {value!r}")
    try:
        json.dumps(dict(value), allow_nan=False, default=_not_json)
    except (TypeError, ValueError) as error:
        raise UsageError(
            f"{where} must hold JSON values only (str, int, finite float, bool, None, lists, dicts of str): {error}"
        ) from None


def _not_json(value: object) -> JsonValue:
    raise TypeError(f"{value!r} ({type(value).__name__}) is not a JSON value")
