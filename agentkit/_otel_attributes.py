"""The attribute values `OTelObserver` writes: a caller's self-description, usage, messages in the GenAI
conventions' JSON shape, and the class of an error. No OpenTelemetry here: plain values."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agentkit._usage import Usage, written_counts
from agentkit.errors import AgentkitError, ProviderError

__all__ = [
    "SERVER_ADDRESS",
    "SERVER_PORT",
    "described",
    "error_type",
    "json_text",
    "text_message",
    "server",
    "text_of",
    "text_part",
    "usage_attributes",
    "wire_message",
]

SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"


def described(caller: object, name: str, kind: type[Any]) -> Any:
    """A caller's self-description (`provider_name`, ...), looked up through a wrapper's `caller`."""
    for candidate in (caller, getattr(caller, "caller", None)):
        value = getattr(candidate, name, None)
        if isinstance(value, kind) and not isinstance(value, bool):
            return value
    return None


def server(caller: object) -> dict[str, str | int]:
    address = described(caller, "server_address", str)
    if not address:
        return {}
    port = described(caller, "server_port", int)
    return {SERVER_ADDRESS: address, SERVER_PORT: port} if port else {SERVER_ADDRESS: address}


def usage_attributes(usage: Usage) -> dict[str, int]:
    return {f"agentkit.usage.{name}": count for name, count in written_counts(usage).items()}


USAGE_DETAILS = (
    ("cached_input_tokens", "gen_ai.usage.cache_read.input_tokens"),
    ("cache_write_tokens", "gen_ai.usage.cache_creation.input_tokens"),
    ("reasoning_tokens", "gen_ai.usage.reasoning.output_tokens"),
)
"""`Usage`'s detail counts and the GenAI semantic conventions' attributes for them (each part of
`gen_ai.usage.input_tokens` or `gen_ai.usage.output_tokens`, as in `Usage`)."""


def usage_details(usage: Usage) -> dict[str, int]:
    """The GenAI attributes of the usage's detail counts, those not 0 (the conventions: when available and
    non-zero)."""
    return {attribute: getattr(usage, name) for name, attribute in USAGE_DETAILS if getattr(usage, name)}


def text_part(content: str) -> dict[str, str]:
    return {"type": "text", "content": content}


def text_message(role: str, content: str) -> dict[str, Any]:
    return {"role": role, "parts": [text_part(content)]}


def text_of(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return ""


def wire_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """A chat-completions message as the conventions' message: its role and parts (text, tool calls, tool results)."""
    role = str(message.get("role", "user"))
    if role == "tool":
        part = {"type": "tool_call_response", "id": message.get("tool_call_id"), "response": text_of(message)}
        return {"role": role, "parts": [part]}
    text = text_of(message)
    parts: list[dict[str, Any]] = [text_part(text)] if text else []
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {} if isinstance(call, Mapping) else {}
        parts.append(
            {
                "type": "tool_call",
                "id": call.get("id"),
                "name": function.get("name"),
                "arguments": function.get("arguments"),
            }
        )
    return {"role": role, "parts": parts}


def json_text(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


def error_type(error: BaseException) -> str:
    """The class of error an operation ended with: an HTTP status for a server's answer, else the class of
    what failed (the client's error under a `ProviderError`, the exception itself otherwise)."""
    if isinstance(error, ProviderError):
        if error.status is not None:
            return str(error.status)
        cause = error.__cause__
        if cause is not None and not isinstance(cause, AgentkitError):
            return _qualified(cause)
    return _qualified(error)


def _qualified(error: BaseException) -> str:
    kind = type(error)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
