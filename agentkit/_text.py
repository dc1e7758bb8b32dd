"""The plain-text seam: `TextCaller`, for replies that are prose, not JSON."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from agentkit._structured import StructuredRequest
from agentkit._usage import Usage

__all__ = ["TextCaller", "TextCompletion"]


@dataclass(frozen=True, kw_only=True, slots=True)
class TextCompletion:
    """A prose reply."""

    text: str
    """The reply as the model wrote it (possibly empty)."""
    usage: Usage
    """Usage of the call."""
    model: str
    """The model that answered."""
    response_id: str | None = None
    """The server's id of the reply, when it gives one."""
    finish_reasons: tuple[str, ...] = ()
    """Why the model stopped, per choice, when the server says."""
    reasoning: str | None = None
    """The reasoning the model wrote before its reply, when the server returns it."""


class TextCaller(Protocol):
    """A model seam for prose replies; same errors as `StructuredCaller`.

    `request.reask` is unused here: there is no schema to fail.
    """

    async def complete_text(self, request: StructuredRequest) -> TextCompletion:
        """Ask `request.model` for a plain-text reply."""
        ...
