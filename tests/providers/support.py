"""What the provider contract tests share: each caller with its fake server, behind one face (`Wire`).

`tests/providers/test_contract.py` runs the same tests on every `Wire`: `OpenAICaller` against
`FakeOpenAIServer`, `AnthropicCaller` against `FakeAnthropicServer`. A wire knows where its requests carry
the model and the text sent, and how its replies report usage; the tests know nothing of either format.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel

from agentkit import StructuredCaller, StructuredRequest
from agentkit.providers import TextCaller
from agentkit.providers.anthropic import AnthropicCaller
from agentkit.providers.openai import OpenAICaller
from agentkit.testing import FakeAnthropicServer, FakeOpenAIServer


class Verdict(BaseModel):
    """A score for the text."""

    score: int


def request(**fields: Any) -> StructuredRequest:
    """A request to rate "the text" with model "m", with `fields` of `StructuredRequest` over those."""
    return StructuredRequest(**{"system": "Rate it.", "dynamic": "the text", "model": "m", **fields})


WIRES = ("openai", "anthropic")
"""The providers the contract tests run on, by name (the `wire` fixture's params)."""


class Caller(StructuredCaller, TextCaller, Protocol):
    """Both seams, closed with `aclose`: what every provider's caller is."""

    async def aclose(self) -> None: ...


@dataclass(frozen=True, kw_only=True, slots=True)
class Wire:
    """One provider's caller, its fake server, and how to read that provider's wire format."""

    name: str
    server: FakeOpenAIServer | FakeAnthropicServer
    build: Callable[..., Caller]
    """A caller pointed at `server` (keyword options: timeout, max_reasks), or at `base_url=` when given."""

    def caller(self, **options: Any) -> Caller:
        """A caller of this provider on the fake server (close it with `aclose` or `async with`)."""
        return self.build(**{"base_url": self.server.base_url, **options})

    def models(self) -> list[str]:
        """The model each request asked for, in order."""
        return [str(body["model"]) for body in self.server.requests]

    def last_text(self, body: dict[str, Any]) -> str:
        """Every text the last message of a request carries (a tool result's included), joined."""
        return message_text(body["messages"][-1])

    def texts(self, body: dict[str, Any]) -> list[str]:
        """The text of each message of a request."""
        return [message_text(message) for message in body["messages"]]

    def usage_blocks(self) -> list[tuple[int, int]]:
        """Each answered reply's usage as (every input token, output tokens), in that provider's terms."""
        blocks: list[tuple[int, int]] = []
        for body in self.server.responses:
            usage = body.get("usage") if body is not None else None
            if not isinstance(usage, dict):
                continue
            if self.name == "openai":
                blocks.append((usage["prompt_tokens"], usage["completion_tokens"]))
            else:
                given = usage["input_tokens"] + usage["cache_read_input_tokens"] + usage["cache_creation_input_tokens"]
                blocks.append((given, usage["output_tokens"]))
        return blocks

    def forget_cache(self) -> None:
        """Empty the fake server's simulated prompt cache (Anthropic's), so that a request writes what it wrote
        before; OpenAI's fake reports only scripted cache counts."""
        if isinstance(self.server, FakeAnthropicServer):
            self.server.clear_cache()

    def cached_counts(self) -> list[int]:
        """Each answered reply's input tokens read from the prompt cache, in that provider's terms."""
        counts: list[int] = []
        for body in self.server.responses:
            usage = body.get("usage") if body is not None else None
            if not isinstance(usage, dict):
                continue
            if self.name == "openai":
                counts.append((usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0))
            else:
                counts.append(usage["cache_read_input_tokens"])
        return counts


def message_text(message: dict[str, Any]) -> str:
    """The text of a message in either format: a string, or text and tool-result blocks joined."""
    content = message["content"]
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content:
        if block.get("type") == "text":
            parts.append(block["text"])
        elif block.get("type") == "tool_result":
            parts.append(block["content"] if isinstance(block["content"], str) else json.dumps(block["content"]))
    return "\n".join(parts)


def open_wire(name: str, server: FakeOpenAIServer | FakeAnthropicServer) -> Wire:
    """The wire `name` on its running fake `server`."""
    build: Callable[..., Caller] = OpenAICaller if name == "openai" else AnthropicCaller
    return Wire(name=name, server=server, build=build)


def fake_server(name: str) -> FakeOpenAIServer | FakeAnthropicServer:
    """An unstarted fake server for the wire `name`."""
    return FakeOpenAIServer() if name == "openai" else FakeAnthropicServer()
