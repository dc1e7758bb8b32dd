"""The Messages API wire, as `AnthropicCaller` reads it: the reply, whole or streamed.

A whole reply is validated from its bytes against `Message`, which names only the fields agentkit reads.
A streamed reply (`stream: true`) is a series of server-sent events, each named by its `type`:
`message_start` (the message with empty `content`, and the input usage), then per content block a
`content_block_start` (the block, its text or input empty), `content_block_delta`s (`text_delta`,
`input_json_delta` with a piece of a tool's input as JSON text, `thinking_delta`, `signature_delta`) and a
`content_block_stop`, then `message_delta` (the `stop_reason` and the cumulative usage, whose counts replace
those of `message_start`) and `message_stop`; `ping` events may come anywhere, and an `error` event ends a
stream that failed after its 200. `Streamed` folds the events into the `Message` a whole body would have been,
as the `anthropic` SDK's own accumulator does, so everything after the read is the same for both.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx2
from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import from_json

from agentkit._deltas import grew
from agentkit.errors import AgentkitError, ProviderError, Throttled
from agentkit.providers._wire import cause_of, transient_status

__all__ = [
    "STATUS_HINTS",
    "Block",
    "BrokenStream",
    "Event",
    "Message",
    "StreamFailed",
    "Streamed",
    "UsageBlock",
    "read_stream",
    "stream_failure",
]

STATUS_HINTS = {
    400: "the Messages API rejected the request (its message says which field)",
    401: "check the API key (api_key=... or ANTHROPIC_API_KEY)",
    403: "the API key is not allowed to use this model",
    404: "check the model name and base_url",
    413: "the request is larger than the API takes; shorten the prompt",
}
"""The hint each refused status adds to its error's message (the body's and the stream's)."""


class Block(BaseModel):
    """One content block of a reply; every field the API sends is kept, to send the block back as it came."""

    model_config = ConfigDict(frozen=True, extra="allow")
    type: str
    text: str | None = None
    id: str | None = None
    name: str | None = None
    input: object = None
    thinking: str | None = None


class UsageBlock(BaseModel):
    # Read as sent and checked by ``token_count``, so a bad count is named in a protocol error of its own.
    model_config = ConfigDict(frozen=True)
    input_tokens: object = None
    output_tokens: object = None
    cache_creation_input_tokens: object = None
    cache_read_input_tokens: object = None


class Message(BaseModel):
    """The part of a Messages API reply agentkit reads; every other field is ignored."""

    model_config = ConfigDict(frozen=True)
    type: str
    id: str | None = None
    model: str | None = None
    content: list[Block]
    stop_reason: str | None = None
    usage: UsageBlock | None = None


class Event(BaseModel):
    """One streamed event's data: the members of every event type agentkit reads."""

    model_config = ConfigDict(frozen=True)
    type: str
    index: int | None = None
    message: Message | None = None
    content_block: dict[str, object] | None = None
    delta: dict[str, object] | None = None
    usage: dict[str, object] | None = None
    error: object = None


class BrokenStream(ValueError):
    """The events do not make a message (out of order, a member missing, a tool input that is not JSON)."""


class StreamFailed(Exception):
    """An `error` event: the server failed after its 200. `kind` is the error's `type` (`overloaded_error`)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


_GROWS = {"text_delta": "text", "thinking_delta": "thinking", "signature_delta": "signature"}
"""Each delta that adds to a member of its block, and the member: a tool's input is folded apart."""


_STOPPED_MID_BLOCK = frozenset({"max_tokens", "model_context_window_exceeded", "refusal"})
"""The stop reasons that may end a reply inside a block: the token limit, the context window, the API's refusal."""


class Streamed:
    """A streamed reply folded event by event into the `Message` a whole body would have been."""

    __slots__ = ("blocks", "inputs", "message", "stop_reason", "stopped", "usage")

    def __init__(self) -> None:
        self.message: Message | None = None
        self.blocks: dict[int, dict[str, Any]] = {}
        self.inputs: dict[int, list[str]] = {}
        """Each `tool_use` block's input so far, as the JSON text of its `input_json_delta`s."""
        self.usage: dict[str, object] = {}
        self.stop_reason: str | None = None
        self.stopped = False
        """`message_stop` came: the message is whole."""

    def add(self, event: Event) -> bool:
        """Fold `event` in; whether it added text (a block's text or a tool's input). An `error` event raises
        `StreamFailed`; events that do not make a message raise `BrokenStream`."""
        kind = event.type
        if kind == "error":
            error = event.error if isinstance(event.error, dict) else {}
            raise StreamFailed(str(error.get("type") or "api_error"), str(error.get("message") or "no message"))
        if kind == "message_start":
            if event.message is None or self.message is not None:
                raise BrokenStream("a message_start without its message, or a second one")
            self.message = event.message
            self.usage = event.message.usage.model_dump(exclude_none=True) if event.message.usage else {}
            return False
        if kind == "ping":
            return False
        if self.message is None:
            raise BrokenStream(f"a {kind} event before message_start")
        if kind == "content_block_start":
            block = event.content_block
            typed = block is not None and isinstance(block.get("type"), str)
            if event.index is None or block is None or not typed or event.index in self.blocks:
                raise BrokenStream("a content_block_start without its index and typed block, or one index twice")
            self.blocks[event.index] = dict(block)
            return False
        if kind == "content_block_delta":
            if event.index is None or event.index not in self.blocks or event.delta is None:
                raise BrokenStream("a content_block_delta for no block that was started")
            return self._delta(event.index, event.delta)
        if kind == "message_delta":
            delta = event.delta or {}
            reason = delta.get("stop_reason")
            self.stop_reason = reason if isinstance(reason, str) else self.stop_reason
            # the counts are cumulative: each one sent replaces message_start's (as the SDK folds them)
            self.usage.update({key: value for key, value in (event.usage or {}).items() if value is not None})
        elif kind == "message_stop":
            self.stopped = True
        return False  # content_block_stop, and events of types this version does not know, add nothing

    def _delta(self, index: int, delta: dict[str, object]) -> bool:
        block = self.blocks[index]
        kind = delta.get("type")
        if kind == "input_json_delta":
            piece = delta.get("partial_json")
            if not isinstance(piece, str):
                raise BrokenStream("an input_json_delta without its partial_json text")
            self.inputs.setdefault(index, []).append(piece)
            return bool(piece)
        member = _GROWS.get(str(kind))
        if member is None:
            return False  # citations and deltas of types this version does not know: not read
        piece = delta.get(member)
        if not isinstance(piece, str):
            raise BrokenStream(f"a {kind} without its {member} text")
        if member == "signature":
            block[member] = piece
            return False
        block[member] = str(block.get(member) or "") + piece
        return bool(piece) and member == "text"

    def text(self, tools: bool) -> str:
        """The reply so far: the first tool call's input (`tools`), else the text blocks."""
        if tools:
            calls = [index for index, block in sorted(self.blocks.items()) if block.get("type") == "tool_use"]
            return "".join(self.inputs.get(calls[0], ())) if calls else ""
        blocks = (block for _, block in sorted(self.blocks.items()) if block.get("type") == "text")
        return "".join(str(block.get("text") or "") for block in blocks)

    def reply(self) -> Message:
        """The whole reply, as a body would have carried it; `BrokenStream` when the stream ended before
        `message_stop` or a tool's input is not JSON."""
        if self.message is None or not self.stopped:
            raise BrokenStream("the stream ended before message_stop")
        content = []
        for index, block in sorted(self.blocks.items()):
            if index in self.inputs:
                block = {**block, "input": self._input(index)}
            content.append(Block.model_validate(block))
        usage = UsageBlock.model_validate(self.usage) if self.usage else None
        return self.message.model_copy(update={"content": content, "stop_reason": self.stop_reason, "usage": usage})

    def _input(self, index: int) -> object:
        text = "".join(self.inputs[index])
        if not text:
            return self.blocks[index].get("input")
        try:
            return json.loads(text)
        except ValueError as error:
            if self.stop_reason in _STOPPED_MID_BLOCK:  # cut off mid-input: kept as far as it goes, never validated
                try:
                    return from_json(text, allow_partial=True)
                except ValueError:
                    return {}
            raise BrokenStream(f"a tool's input is not JSON ({error}): {text[:200]!r}") from error


async def read_stream(response: httpx2.Response, model: str, *, tools: bool) -> Message:
    """A streamed reply (server-sent events) folded into the message a whole body would have been, its tool input
    (`tools`) or its text reported after each event that adds to it (`agentkit._deltas`).

    The body is read as bytes and cut into lines here: each event's `data:` line carries its JSON, whose `type`
    names it as its `event:` line does, so only `data:` lines are read (a comment line, starting with `:`, and any
    other field are skipped) and no SSE library is needed. It is read to its end, past `message_stop`: a body left
    unread closes the connection, and each streamed request would then open a new one. A body that ends before
    a whole `message_stop` line (one with its newline) is not a whole reply: a transient `ProviderError`."""
    folded = Streamed()
    rest = b""
    try:
        async for block in response.aiter_bytes():
            if folded.stopped:
                continue
            lines = (rest + block).split(b"\n") if rest else block.split(b"\n")
            rest = lines.pop()  # the end of the block: a line still to be finished
            for line in lines:
                if line.startswith(b"data:") and _fold(folded, line[5:].strip(), model):
                    grew(folded.text(tools))
                if folded.stopped:
                    break
        if not folded.stopped and rest.startswith(b"data:"):
            # a last line with no newline after it: read, so that an error it reports is seen; but the stream did
            # not end as a stream ends (a line, then a blank line), so its `message_stop` ends nothing
            if _fold(folded, rest[5:].strip(), model):
                grew(folded.text(tools))
            folded.stopped = False
    except httpx2.TimeoutException as error:
        raise anthropic.APITimeoutError(request=response.request) from error
    except httpx2.HTTPError as error:  # the connection broke mid-stream: the server was reached, and answered
        raise ProviderError(
            f"the stream of model {model!r} broke after the model server answered {response.status_code} "
            f"({cause_of(error)}); it is retried",
            transient=True,
        ) from error
    try:
        return folded.reply()
    except BrokenStream as error:
        raise _unreadable_stream(model, str(error), b"") from error


def _fold(folded: Streamed, data: bytes, model: str) -> bool:
    """Fold one event's data in; whether it added text. An event that is not one, or events that make no message,
    are a transient `ProviderError`; an `error` event is the error of its status (`stream_failure`)."""
    try:
        return folded.add(Event.model_validate_json(data))
    except ValidationError as error:
        raise _unreadable_stream(model, error.errors(include_url=False)[0]["msg"], data) from error
    except BrokenStream as error:
        raise _unreadable_stream(model, str(error), data) from error
    except StreamFailed as error:
        raise stream_failure(model, error.kind, error.message) from error


def _unreadable_stream(model: str, why: str, data: bytes) -> ProviderError:
    shown = f": {data[:200]!r}" if data else ""
    return ProviderError(
        f"model server sent an unreadable stream for model {model!r} (not a Messages API event stream: {why}){shown}",
        transient=True,
    )


_ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "conflict_error": 409,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
"""The HTTP status of each Messages API error type: an `error` event mid-stream is the error of its status."""


def stream_failure(model: str, kind: str, message: str) -> AgentkitError:
    """The error of an `error` event mid-stream: the error its HTTP status would have been (`Throttled` for
    `rate_limit_error`, a transient `ProviderError` for `overloaded_error` and `api_error`, ...); an unknown
    type is a server error (transient)."""
    status = _ERROR_STATUS.get(kind, 500)
    if status == 429:
        return Throttled(f"model server throttled model {model!r} mid-stream ({kind}): {message}")
    transient = transient_status(status)
    hint = "a server error; it is retried" if transient else STATUS_HINTS.get(status, "the request was refused")
    return ProviderError(
        f"model server reported {kind} mid-stream for model {model!r} (as HTTP {status}): {message}; {hint}",
        transient=transient,
        status=status,
    )
