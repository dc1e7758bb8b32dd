"""The model seam's adapters: `agentkit.providers.openai` (`OpenAICaller`, any OpenAI-compatible server)
and `agentkit.providers.local` (the embedded model, extra `local`); and the prose seam they implement
beside `StructuredCaller`: `TextCaller`, its `TextCompletion`, and `TextResult`, the ending of
`agentkit.run_once_text`."""

from agentkit._once import TextResult
from agentkit._text import TextCaller, TextCompletion

__all__ = ["TextCaller", "TextCompletion", "TextResult"]
