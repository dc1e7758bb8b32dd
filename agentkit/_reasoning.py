"""`Reasoning`: how much a reasoning model thinks before it answers, said once for every provider.

Each caller maps it onto its own wire: `OpenAICaller` sends `reasoning_effort` (and then
`max_completion_tokens` for the token limit, as OpenAI's reasoning models require), the Anthropic
caller sends `thinking` with its `budget_tokens`. A setting a provider has no field for is said in
the caller's docs; anything else a server takes goes in `RoleSpec.extra_body`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, cast, get_args

from typing_extensions import TypeAliasType

from agentkit.errors import UsageError

__all__ = ["EFFORTS", "JsonData", "Reasoning", "ReasoningEffort", "check_extra_body", "check_reasoning"]

JsonData = TypeAliasType("JsonData", "str | int | float | bool | Sequence[JsonData] | Mapping[str, JsonData] | None")
"""A JSON value, as read-only containers (so a `dict[str, bool]` is one, where pydantic's `JsonValue`, made of
invariant `dict` and `list`, would need an annotation)."""

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
        _check_budget(budget)
        if self.effort == "off" and budget is not None:
            raise UsageError(
                f"Reasoning(effort='off') turns reasoning off, so it takes no budget_tokens (got {budget}); "
                "drop one of the two"
            )

    @property
    def off(self) -> bool:
        """Reasoning is turned off."""
        return self.effort == "off"


def _check_budget(budget: object) -> None:
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 1):
        raise UsageError(f"Reasoning.budget_tokens must be an int >= 1 (tokens), or None; got {budget!r}")


def check_reasoning(value: object) -> None:
    """Refuse a `RoleSpec.reasoning` that is not a `Reasoning` (a plain string, say)."""
    if value is not None and not isinstance(value, Reasoning):
        raise UsageError(f"RoleSpec.reasoning must be a Reasoning or None; got {value!r}")


def check_extra_body(value: object, where: str) -> None:
    """Refuse an `extra_body` that is not a JSON object (string keys, JSON values, finite numbers).

    Raises:
        UsageError: naming `where` and what is wrong.
    """
    if value is None:
        return
    if not isinstance(value, Mapping):
        raise UsageError(f"{where} must be a mapping of str to JSON values, or None; got {value!r}")
    body = cast("Mapping[object, object]", value)
    if any(not isinstance(key, str) for key in body):
        raise UsageError(f"{where} must be a mapping of str to JSON values, or None; got {value!r}")
    streaming = sorted(key for key in _STREAM_KEYS if key in body)
    if streaming:
        raise UsageError(
            f"{where} may not set {', '.join(map(repr, streaming))}: whether a call streams is the caller's "
            "(stream=True) or the run's (LoopConfig(stream=True)), which read the reply as a stream"
        )
    try:
        json.dumps(dict(body), allow_nan=False, default=_not_json)
    except (TypeError, ValueError) as error:
        raise UsageError(
            f"{where} must hold JSON values only (str, int, finite float, bool, None, lists, dicts of str): {error}"
        ) from None


_STREAM_KEYS = ("stream", "stream_options")
"""Keys of a request body that decide how its reply is read: never from `extra_body`."""


def _not_json(value: object) -> JsonData:
    raise TypeError(f"{value!r} ({type(value).__name__}) is not a JSON value")
