"""What a caller sent: each request's messages as the server got them, for observers that keep a transcript.

A caller that writes the wire messages itself (`OpenAICaller`: the schema text the JSON modes add to
the system prompt, the re-asks that send a validation error back within one attempt) reports each
request with `sent`; an observer's `around` context listens with `listening` while its model call
runs. Without a listener, `sent` costs one context-variable read, and `listened` tells a caller
whether building the report is worth it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

__all__ = ["Sent", "listened", "listening", "sent"]

logger = logging.getLogger("agentkit.observe")


@dataclass(frozen=True, kw_only=True, slots=True)
class Sent:
    """One request of a model call, as it went on the wire."""

    messages: tuple[Mapping[str, Any], ...]
    """The messages sent, in order (`role`, `content`), the system message included."""
    reply: str | None
    """The reply's text (a forced function call's arguments); `None` when no reply came."""
    reasoning: str | None = None
    """The reasoning the server returned beside the reply, if any (a listener keeps it only when told to)."""


_LISTENER: ContextVar[Callable[[Sent], None] | None] = ContextVar("agentkit_transcript", default=None)


def listened() -> bool:
    """Whether a listener is there (so a caller builds its report only when someone reads it)."""
    return _LISTENER.get() is not None


def sent(messages: Sequence[Mapping[str, Any]], reply: str | None, reasoning: str | None = None) -> None:
    """Report one request to the listener, if any; a listener that raises is logged and never fails the call."""
    listener = _LISTENER.get()
    if listener is None:
        return
    try:
        listener(Sent(messages=tuple(dict(message) for message in messages), reply=reply, reasoning=reasoning))
    except Exception:
        logger.exception("a transcript listener failed; the call goes on")


@contextlib.contextmanager
def listening(listener: Callable[[Sent], None]) -> Iterator[None]:
    """Hand every request reported in this context (this task, and what it awaits) to `listener`."""
    token = _LISTENER.set(listener)
    try:
        yield
    finally:
        _LISTENER.reset(token)
