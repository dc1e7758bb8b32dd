"""The model seam's adapters: ``agentkit.providers.openai`` (``OpenAICaller``, any OpenAI-compatible server)
and ``agentkit.providers.local`` (the embedded model, extra ``local``); and the prose seam they implement
beside ``StructuredCaller``: ``TextCaller`` and its ``TextCompletion``."""

from agentkit._text import TextCaller, TextCompletion

__all__ = ["TextCaller", "TextCompletion"]
