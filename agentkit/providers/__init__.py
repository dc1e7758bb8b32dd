"""The model seam's adapters: `agentkit.providers.openai` (`OpenAICaller`, any OpenAI-compatible server)
and `agentkit.providers.local` (the embedded model, extra `local`); and the prose seam they implement
beside `StructuredCaller`: `TextCaller`, its `TextCompletion`, and `TextResult`, the ending of
`agentkit.run_once_text`; `Reasoning` (`RoleSpec.reasoning`: how much a reasoning model thinks, one
value for every provider) with its `ReasoningEffort` levels; and what calls cost: `ModelPrice`, a table of
them, `Prices` (`LoopConfig(prices=..., cost_budget=...)`, `result.cost`)."""

from agentkit._cost import ModelPrice, Prices
from agentkit._once import TextResult
from agentkit._reasoning import Reasoning, ReasoningEffort
from agentkit._text import TextCaller, TextCompletion

__all__ = ["ModelPrice", "Prices", "Reasoning", "ReasoningEffort", "TextCaller", "TextCompletion", "TextResult"]
