"""The model seam's adapters: `agentkit.providers.openai` (`OpenAICaller`, any OpenAI-compatible server)
and `agentkit.providers.local` (the embedded model, extra `local`); and the prose seam they implement
beside `StructuredCaller`: `TextCaller`, its `TextCompletion`, and `TextResult`, the ending of
`agentkit.run_once_text`; and `Reasoning` (`RoleSpec.reasoning`: how much a reasoning model thinks, one
value for every provider) with its `ReasoningEffort` levels."""

from agentkit._once import TextResult
from agentkit._reasoning import Reasoning, ReasoningEffort
from agentkit._text import TextCaller, TextCompletion

__all__ = ["Reasoning", "ReasoningEffort", "TextCaller", "TextCompletion", "TextResult"]
