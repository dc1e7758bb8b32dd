"""`FakeAnthropicServer`: a real HTTP server on loopback that speaks Anthropic's Messages API, for tests.

It serves `POST /v1/messages` in the wire format of the real API: `tool_use`, `text` and `thinking` blocks,
`stop_reason` (`max_tokens` for a reply cut off), usage with the prompt cache's fields, and errors in
Anthropic's format (`{"type": "error", "error": {"type": "overloaded_error", ...}}`, `retry-after` on a 429).
It checks each request the way the API does, so a wrong body fails a test (a 400 naming the field): the
headers (`x-api-key`, `anthropic-version`), every top-level field (unknown ones included), message roles and
content blocks, `tool_use`/`tool_result` pairing, tools and `tool_choice`, thinking (a budget of at least 1024
below `max_tokens`; no forced tool and no temperature other than 1 with it), image and document sources, and
`cache_control` (ephemeral, at most four breakpoints).

**The prompt cache is simulated.** The request is read as the API reads it, in order: tools, system blocks,
message blocks. A block with `cache_control` is a breakpoint; the prefix up to it is cached (keyed by the model
and the prefix's content) when the request is answered. A later request whose prefix up to a breakpoint was
cached reports it as `cache_read_input_tokens`; the prefix written for the first time is
`cache_creation_input_tokens`; the rest is `input_tokens`. Tokens are estimated as a quarter of the JSON's
length; a prefix shorter than `min_cache_tokens` is not cached, as the API caches nothing below its minimum.

It shares the script, the recording and the faults (`FakeReply`) with `FakeOpenAIServer`: a script written for
one serves the other. Standard library only.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from agentkit.testing._fake_server import FakeReply, FakeServer, Scripted, _Handler, _pieces
from agentkit.testing._fake_wire import RequestRejected, instance_of

__all__ = ["FakeAnthropicServer"]

_VERSION = re.compile(r"\A\d{4}-\d{2}-\d{2}\Z")
"""An `anthropic-version` header: the API version's date, as the SDK sends it."""

_TOP_LEVEL = frozenset(
    {
        "model",
        "max_tokens",
        "messages",
        "system",
        "tools",
        "tool_choice",
        "thinking",
        "temperature",
        "top_p",
        "top_k",
        "stop_sequences",
        "stream",
        "metadata",
        "service_tier",
    }
)
_TOOL_NAME = re.compile(r"\A[a-zA-Z0-9_-]{1,64}\Z")
_USER_BLOCKS = frozenset({"text", "image", "document", "tool_result"})
_ASSISTANT_BLOCKS = frozenset({"text", "tool_use", "thinking", "redacted_thinking"})
_THINKING = frozenset({"thinking", "redacted_thinking"})
_IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
_MAX_BREAKPOINTS = 4
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
_THOUGHT = "The fake server considers the request before it answers."


class FakeAnthropicServer(FakeServer):
    """A Messages API server on `127.0.0.1` (an ephemeral port): `POST /v1/messages`.

    Use it as a context manager (`with` or `async with`) and point an `AnthropicCaller` (or an
    `anthropic.AsyncAnthropic`) at `base_url`. Script answers with `add` (or the constructor), as for
    `FakeOpenAIServer`: a `FakeReply`, a string (a text block), or a dict or pydantic model (a value, sent as a
    `tool_use` block when the request forces or offers exactly one tool, else as JSON text). Unscripted, each
    request gets a minimal instance of its tool's schema (booleans true, so a `ToolStep` says it is done). A
    request with thinking on gets a `thinking` block first (its text `FakeReply(reasoning=...)` when scripted).
    `FakeReply.error(529)` is an `overloaded_error`. A reply's `prompt_tokens` is reported as `input_tokens` (the
    part after the last breakpoint), its `completion_tokens` as `output_tokens`, and its `cached_tokens` as
    `cache_read_input_tokens`, in place of the simulated cache's counts.

    Args:
        replies: The script.
        respond: Answers as a function of the request body (`None`: the script's next answer).
        min_cache_tokens: The shortest prefix (in estimated tokens) the simulated cache keeps; 0 caches any.

    Example:
        >>> with FakeAnthropicServer([FakeReply.error(529)]) as server:
        ...     caller = AnthropicCaller(base_url=server.base_url)  # doctest: +SKIP
    """

    path = "/v1/messages"

    def __init__(
        self,
        replies: Iterable[Scripted] = (),
        *,
        respond: Callable[[dict[str, Any]], Scripted | None] | None = None,
        min_cache_tokens: int = 0,
    ) -> None:
        super().__init__(replies, respond=respond)
        self.min_cache_tokens = min_cache_tokens
        """The shortest prefix, in estimated tokens, that the simulated prompt cache keeps."""
        self._cache: set[str] = set()
        self._cache_lock = threading.Lock()

    @property
    def base_url(self) -> str:
        """The base URL of the running server for the Anthropic SDK (`http://127.0.0.1:PORT`)."""
        return self.address

    def clear_cache(self) -> None:
        """Forget every cached prefix (as the API does after its cache lifetime)."""
        with self._cache_lock:
            self._cache.clear()

    def check(self, body: object, headers: Mapping[str, str]) -> dict[str, Any]:
        """The Messages API request, or `RequestRejected` with the status the API answers."""
        if not headers.get("x-api-key") and not headers.get("authorization"):
            raise RequestRejected("x-api-key header is required", status=401)
        if not _VERSION.fullmatch(headers.get("anthropic-version", "")):
            version = headers.get("anthropic-version")
            raise RequestRejected(f"anthropic-version: header is required (an API version's date); got {version!r}")
        return validate_messages_request(body)

    def error_payload(self, status: int, message: str, param: str | None = None) -> dict[str, Any]:
        """Anthropic's error body."""
        kind = _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
        return {"type": "error", "error": {"type": kind, "message": message}, "request_id": _id("req")}

    def serve(self, handler: _Handler, request: dict[str, Any], reply: FakeReply, index: int) -> None:
        """A Messages API message for the scripted reply (or its error); to a request with `stream: true`, the
        message as the API streams it (`message_start`, each block's start, deltas and stop, `message_delta`,
        `message_stop`)."""
        streamed = bool(request.get("stream"))
        if reply.kind == "error":
            headers = {"retry-after": reply.retry_after} if reply.retry_after is not None else {}
            message = reply.body or f"fake server error {reply.status}"
            error = self.error_payload(reply.status, message)
            if streamed and reply.mid_stream:  # the message starts, then the error comes as an `error` event
                self._answered(index, error)
                started = self._message(request, FakeReply.auto())
                events = [*itertools.islice(_events(started, reply.chunk_chars), 4), _event(error)]
                handler.stream_events(events, reply.pace)
                return
            handler.send_json(reply.status, error, index, headers, drip=reply.drip)
            return
        if reply.kind == "malformed":
            if streamed:  # a stream whose first event is not JSON
                handler.stream_events([b'event: message_start\ndata: {"type": "message_start", "message": {\n\n'])
            else:
                handler.send_raw(200, b'{"id": "msg_broken", "type": "message", "content": [', "application/json")
            return
        payload = self._message(request, reply)
        self._answered(index, payload)
        if streamed:
            handler.stream_events(_events(payload, reply.chunk_chars), reply.pace)
            return
        handler.send_raw(200, json.dumps(payload).encode(), "application/json", drip=reply.drip)

    def _message(self, request: dict[str, Any], reply: FakeReply) -> dict[str, Any]:
        """The message that answers `request` (its usage counted against the simulated cache)."""
        content, stop = _content(request, reply)
        if (request.get("thinking") or {}).get("type") == "enabled" and reply.kind != "no_choices":
            thought = reply.reasoning or _THOUGHT
            content.insert(0, {"type": "thinking", "thinking": thought, "signature": _id("sig")})
        usage = self._usage(request, reply, content)
        return {
            "id": _id("msg"),
            "type": "message",
            "role": "assistant",
            "model": request["model"],
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": usage,
        }

    def _usage(self, request: Mapping[str, Any], reply: FakeReply, content: list[dict[str, Any]]) -> dict[str, int]:
        segments = _segments(request)
        sizes = [_estimate(text) for text, _ in segments]
        total = sum(sizes)
        ends = [position + 1 for position, (_, breakpoint) in enumerate(segments) if breakpoint]
        model = str(request["model"])
        keys = {end: _prefix_key(model, segments[:end]) for end in ends}
        read = written = 0
        with self._cache_lock:
            hit = max((end for end in ends if keys[end] in self._cache), default=0)
            read = sum(sizes[:hit])
            cached_up_to = hit
            for end in ends:
                if end > hit and sum(sizes[:end]) >= max(self.min_cache_tokens, 1):
                    self._cache.add(keys[end])
                    cached_up_to = end
            written = sum(sizes[:cached_up_to]) - read
        fresh = reply.prompt_tokens if reply.prompt_tokens is not None else total - read - written
        if reply.cached_tokens is not None:  # scripted, as for FakeOpenAIServer: the count read from the cache
            read = reply.cached_tokens
        said = sum(_estimate(json.dumps(block)) for block in content) if content else 0
        output = reply.completion_tokens if reply.completion_tokens is not None else max(said, 1)
        return {
            "input_tokens": fresh,
            "cache_creation_input_tokens": written,
            "cache_read_input_tokens": read,
            "output_tokens": output,
        }


def _event(data: Mapping[str, Any]) -> bytes:
    """One server-sent event, named by its data's `type` as the API names it."""
    return f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode()


_EMPTY: dict[str, dict[str, Any]] = {
    "text": {"text": ""},
    "thinking": {"thinking": "", "signature": ""},
    "tool_use": {"input": {}},
}
"""What a block's `content_block_start` carries in place of what its deltas will add."""


def _events(message: Mapping[str, Any], size: int | None) -> Iterator[bytes]:
    """`message` as the Messages API streams it: `message_start` (its usage with one output token so far), a
    `ping`, then per block its start, its deltas (text in pieces of `size` characters, each in three when
    `None`) and its stop, then `message_delta` (the stop reason and the output tokens) and `message_stop`."""
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None}
    start["usage"] = {**usage, "output_tokens": 1}
    yield _event({"type": "message_start", "message": start})
    yield _event({"type": "ping"})
    for index, block in enumerate(message["content"]):
        kind = block["type"]
        yield _event({"type": "content_block_start", "index": index, "content_block": {**block, **_EMPTY[kind]}})
        for delta in _deltas(block, size):
            yield _event({"type": "content_block_delta", "index": index, "delta": delta})
        yield _event({"type": "content_block_stop", "index": index})
    end = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    yield _event({"type": "message_delta", "delta": end, "usage": {"output_tokens": usage["output_tokens"]}})
    yield _event({"type": "message_stop"})


def _deltas(block: Mapping[str, Any], size: int | None) -> Iterator[dict[str, Any]]:
    kind = block["type"]
    if kind == "text":
        yield from ({"type": "text_delta", "text": piece} for piece in _pieces(block["text"], size))
    elif kind == "thinking":
        yield from ({"type": "thinking_delta", "thinking": piece} for piece in _pieces(block["thinking"], size))
        yield {"type": "signature_delta", "signature": block["signature"]}
    else:
        text = json.dumps(block["input"])
        yield from ({"type": "input_json_delta", "partial_json": piece} for piece in _pieces(text, size))


def _id(prefix: str) -> str:
    return f"{prefix}_fake_{time.monotonic_ns()}"


def _estimate(text: str) -> int:
    return math.ceil(len(text) / 4)


def _segments(request: Mapping[str, Any]) -> list[tuple[str, bool]]:
    """The request's blocks in the order the API reads them (tools, system, messages), each as its JSON without
    `cache_control`, and whether it is a breakpoint."""
    blocks: list[Mapping[str, Any]] = list(request.get("tools") or [])
    system = request.get("system")
    if isinstance(system, str):
        blocks.append({"type": "text", "text": system})
    elif isinstance(system, list):
        blocks.extend(system)
    for message in request["messages"]:
        content = message["content"]
        if isinstance(content, str):
            blocks.append({"type": "text", "text": content, "role": message["role"]})
        else:
            blocks.extend({**block, "role": message["role"]} for block in content)
    return [
        (
            json.dumps({key: part for key, part in block.items() if key != "cache_control"}, sort_keys=True),
            "cache_control" in block,
        )
        for block in blocks
    ]


def _prefix_key(model: str, segments: list[tuple[str, bool]]) -> str:
    digest = hashlib.sha256(model.encode())
    for text, _ in segments:
        digest.update(b"\x00" + text.encode())
    return digest.hexdigest()


def _forced(request: Mapping[str, Any]) -> dict[str, Any] | None:
    """The tool the reply calls: the forced one, or the only one offered (a model asked to call it does)."""
    tools = request.get("tools") or []
    choice = request.get("tool_choice") or {"type": "auto"}
    if choice["type"] == "none" or not tools:
        return None
    chosen: list[dict[str, Any]] = [tool for tool in tools if tool["name"] == choice.get("name")]
    if choice["type"] == "tool":
        return chosen[0]
    only: dict[str, Any] | None = tools[0] if len(tools) == 1 else None
    return only


def _content(request: Mapping[str, Any], reply: FakeReply) -> tuple[list[dict[str, Any]], str]:
    """The reply's content blocks and its stop reason."""
    tool = _forced(request)
    if reply.kind == "no_choices":
        return [], "end_turn"
    if reply.kind == "text":
        return [{"type": "text", "text": reply.body or ""}], "end_turn"
    if reply.kind == "tool_call":
        name = reply.tool_name or (tool["name"] if tool else "tool")
        inputs = [reply.body or "{}", *reply.more_arguments]
        return [_tool_use(name, _object(text)) for text in inputs], "tool_use"
    value: Any = json.loads(reply.body) if reply.kind == "value" and reply.body is not None else None
    if reply.kind == "truncated":
        if reply.body is not None:
            return [{"type": "text", "text": reply.body}], "max_tokens"
        if tool is not None:
            return [_tool_use(tool["name"], {})], "max_tokens"
        return [{"type": "text", "text": "This is a reply from the fa"}], "max_tokens"
    if tool is not None:
        return [_tool_use(tool["name"], value if value is not None else instance_of(tool["input_schema"]))], "tool_use"
    text = json.dumps(value) if value is not None else "This is a reply from the fake Anthropic server."
    return [{"type": "text", "text": text}], "end_turn"


def _tool_use(name: str, value: object) -> dict[str, Any]:
    return {"type": "tool_use", "id": _id("toolu"), "name": name, "input": value}


def _object(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError as error:
        raise ValueError(
            f"a tool_use block's input is a JSON value, and {text!r} is not JSON: script FakeReply.tool_call with a "
            "dict, a model, or JSON text"
        ) from error


def validate_messages_request(body: object) -> dict[str, Any]:
    """Check a Messages API request body; raise `RequestRejected` where the API answers 400."""
    if not isinstance(body, dict):
        raise RequestRejected("invalid request: the body must be a JSON object")
    for key in body:
        if key not in _TOP_LEVEL:
            raise RequestRejected(f"{key}: Extra inputs are not permitted", key)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise RequestRejected("model: Field required", "model")
    max_tokens = body.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise RequestRejected("max_tokens: Field required (an integer >= 1)", "max_tokens")
    if "stream" in body and not isinstance(body["stream"], bool):
        raise RequestRejected("stream: Input should be a valid boolean", "stream")
    breakpoints = _check_system(body.get("system"))
    tools = _check_tools(body.get("tools"))
    breakpoints += sum("cache_control" in tool for tool in body.get("tools") or [])
    breakpoints += _check_messages(body.get("messages"))
    if breakpoints > _MAX_BREAKPOINTS:
        raise RequestRejected(
            f"A maximum of {_MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {breakpoints}."
        )
    _check_tool_choice(body.get("tool_choice"), tools)
    _check_sampling(body)
    return body


def _check_cache_control(block: Mapping[str, Any], where: str) -> int:
    if "cache_control" not in block:
        return 0
    control = block["cache_control"]
    if not isinstance(control, dict) or control.get("type") != "ephemeral":
        raise RequestRejected(f"{where}.cache_control.type: Input should be 'ephemeral'", where)
    if set(control) - {"type", "ttl"} or control.get("ttl", "5m") not in ("5m", "1h"):
        raise RequestRejected(f"{where}.cache_control: only type 'ephemeral' and ttl '5m' or '1h' are allowed", where)
    return 1


def _check_text(block: Mapping[str, Any], where: str) -> None:
    text = block.get("text")
    if not isinstance(text, str) or not text:
        raise RequestRejected(f"{where}: text content blocks must be non-empty", where)
    if not text.strip():
        raise RequestRejected(f"{where}: text content blocks must contain non-whitespace text", where)


def _check_system(system: object) -> int:
    if system is None:
        return 0
    if isinstance(system, str):
        return 0
    if not isinstance(system, list):
        raise RequestRejected("system: Input should be a valid string or a list of text blocks", "system")
    found = 0
    for index, block in enumerate(system):
        where = f"system.{index}"
        if not isinstance(block, dict) or block.get("type") != "text":
            raise RequestRejected(f"{where}.type: Input should be 'text'", where)
        if set(block) - {"type", "text", "cache_control", "citations"}:
            raise RequestRejected(f"{where}: Extra inputs are not permitted", where)
        _check_text(block, where)
        found += _check_cache_control(block, where)
    return found


def _check_tools(tools: object) -> dict[str, Mapping[str, Any]]:
    if tools is None:
        return {}
    if not isinstance(tools, list):
        raise RequestRejected("tools: Input should be a valid list", "tools")
    named: dict[str, Mapping[str, Any]] = {}
    for index, tool in enumerate(tools):
        where = f"tools.{index}"
        if not isinstance(tool, dict):
            raise RequestRejected(f"{where}: Input should be an object", where)
        if set(tool) - {"name", "description", "input_schema", "cache_control", "type"}:
            raise RequestRejected(f"{where}: Extra inputs are not permitted", where)
        name = tool.get("name")
        if not isinstance(name, str) or not _TOOL_NAME.fullmatch(name):
            raise RequestRejected(f"{where}.name: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'", where)
        if name in named:
            raise RequestRejected(f"tools: Tool names must be unique ({name!r} twice)", "tools")
        schema = tool.get("input_schema")
        if not isinstance(schema, dict) or schema.get("type") != "object":
            raise RequestRejected(f"{where}.input_schema.type: Input should be 'object'", where)
        if "description" in tool and not isinstance(tool["description"], str):
            raise RequestRejected(f"{where}.description: Input should be a valid string", where)
        _check_cache_control(tool, where)
        named[name] = tool
    return named


def _check_tool_choice(choice: object, tools: Mapping[str, Mapping[str, Any]]) -> None:
    if choice is None:
        return
    if not isinstance(choice, dict) or choice.get("type") not in ("auto", "any", "tool", "none"):
        raise RequestRejected("tool_choice.type: Input should be 'auto', 'any', 'tool' or 'none'", "tool_choice")
    allowed = {"type", "disable_parallel_tool_use"} | ({"name"} if choice["type"] == "tool" else set())
    if set(choice) - allowed:
        raise RequestRejected("tool_choice: Extra inputs are not permitted", "tool_choice")
    if "disable_parallel_tool_use" in choice and not isinstance(choice["disable_parallel_tool_use"], bool):
        raise RequestRejected("tool_choice.disable_parallel_tool_use: Input should be a valid boolean", "tool_choice")
    if choice["type"] != "none" and not tools:
        raise RequestRejected("tool_choice may only be specified while providing tools", "tool_choice")
    if choice["type"] == "tool" and choice.get("name") not in tools:
        raise RequestRejected(f"tool_choice.name: no tool named {choice.get('name')!r} in tools", "tool_choice")


def _check_ranges(body: Mapping[str, Any]) -> None:
    """`temperature` and `top_p` from 0 to 1, `top_k` a whole number from 0."""
    for key in ("temperature", "top_p"):
        value = body.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1):
            raise RequestRejected(f"{key}: Input should be a number from 0 to 1", key)
    top_k = body.get("top_k")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0):
        raise RequestRejected("top_k: Input should be an integer >= 0", "top_k")


def _check_sampling(body: Mapping[str, Any]) -> None:
    _check_ranges(body)
    temperature, top_p, top_k = body.get("temperature"), body.get("top_p"), body.get("top_k")
    thinking = body.get("thinking")
    if thinking is None:
        return
    if not isinstance(thinking, dict) or thinking.get("type") not in ("enabled", "disabled"):
        raise RequestRejected("thinking.type: Input should be 'enabled' or 'disabled'", "thinking")
    if thinking["type"] == "disabled":
        if set(thinking) != {"type"}:
            raise RequestRejected("thinking: Extra inputs are not permitted", "thinking")
        return
    budget = thinking.get("budget_tokens")
    if set(thinking) != {"type", "budget_tokens"} or isinstance(budget, bool) or not isinstance(budget, int):
        raise RequestRejected("thinking.budget_tokens: Field required (an integer)", "thinking")
    if budget < 1024:
        raise RequestRejected("thinking.budget_tokens: Input should be greater than or equal to 1024", "thinking")
    if budget >= body["max_tokens"]:
        raise RequestRejected("`max_tokens` must be greater than `thinking.budget_tokens`", "max_tokens")
    if (body.get("tool_choice") or {}).get("type") in ("any", "tool"):
        raise RequestRejected("Thinking may not be enabled when tool_choice forces tool use.", "tool_choice")
    if temperature is not None and temperature != 1:
        raise RequestRejected("`temperature` may only be set to 1 when thinking is enabled.", "temperature")
    if top_k is not None:
        raise RequestRejected("`top_k` is not supported when thinking is enabled.", "top_k")
    if top_p is not None and not 0.95 <= top_p <= 1:
        raise RequestRejected("`top_p` must be between 0.95 and 1 when thinking is enabled.", "top_p")
    _check_thinking_turn(body["messages"])


def _check_thinking_turn(messages: list[Any]) -> None:
    """With thinking on, the last assistant turn, when it calls a tool, starts with its thinking block (as the API
    sent it): the tool's result continues that turn."""
    turns = [message for message in messages if message["role"] == "assistant"]
    if not turns or isinstance(turns[-1]["content"], str):
        return
    blocks = turns[-1]["content"]
    if any(block.get("type") == "tool_use" for block in blocks) and blocks[0].get("type") not in _THINKING:
        where = f"messages.{len(messages) - 1 - messages[::-1].index(turns[-1])}.content.0.type"
        raise RequestRejected(
            f"{where}: Expected `thinking` or `redacted_thinking`, but found {blocks[0].get('type')!r}. When "
            "`thinking` is enabled, a final `assistant` message must start with a thinking block.",
            where,
        )


def _check_messages(messages: object) -> int:
    if not isinstance(messages, list) or not messages:
        raise RequestRejected("messages: at least one message is required", "messages")
    found = 0
    awaiting: list[str] = []
    for index, message in enumerate(messages):
        where = f"messages.{index}"
        role, blocks = _message_blocks(message, index)
        _check_pairing(blocks, role, awaiting, where)
        awaiting = []
        for number, block in enumerate(blocks):
            found += _check_block(block, role, f"{where}.content.{number}", awaiting)
    if awaiting:
        raise RequestRejected("messages: the last message's `tool_use` blocks have no `tool_result`", "messages")
    return found


def _message_blocks(message: object, index: int) -> tuple[str, list[Any]]:
    """A message's role and its content as a list of blocks."""
    where = f"messages.{index}"
    if not isinstance(message, dict) or set(message) != {"role", "content"}:
        raise RequestRejected(f"{where}: a message is an object with exactly 'role' and 'content'", where)
    role = message["role"]
    if role not in ("user", "assistant"):
        raise RequestRejected(f"{where}.role: Input should be 'user' or 'assistant'", where)
    if index == 0 and role != "user":
        raise RequestRejected("messages: the first message must use the 'user' role", where)
    content = message["content"]
    if isinstance(content, str) and content:
        return role, [{"type": "text", "text": content}]
    if isinstance(content, list) and content:
        return role, content
    raise RequestRejected(f"{where}: all messages must have non-empty content", where)


def _check_pairing(blocks: list[Any], role: str, awaiting: list[str], where: str) -> None:
    """Every `tool_use` of the previous message answered by a `tool_result` here, first, and no other."""
    answered = [
        str(block.get("tool_use_id"))
        for block in blocks
        if isinstance(block, dict) and block.get("type") == "tool_result"
    ]
    if awaiting and (role != "user" or sorted(answered) != sorted(awaiting)):
        raise RequestRejected(
            f"{where}: `tool_use` ids were found without `tool_result` blocks immediately after: "
            f"{', '.join(awaiting)}. Each `tool_use` block must have a corresponding `tool_result` block in the "
            "next message.",
            where,
        )
    if answered and not awaiting:
        raise RequestRejected(
            f"{where}: unexpected `tool_use_id` found in `tool_result` blocks: {answered[0]}. Each "
            "`tool_result` block must have a corresponding `tool_use` block in the previous message.",
            where,
        )
    if any(block.get("type") != "tool_result" for block in blocks[: len(answered)]):
        raise RequestRejected(f"{where}: tool_result blocks must come first in the user's content", where)


def _check_block(block: object, role: str, where: str, awaiting: list[str]) -> int:
    if not isinstance(block, dict):
        raise RequestRejected(f"{where}: Input should be a content block object", where)
    kind = block.get("type")
    allowed = _USER_BLOCKS if role == "user" else _ASSISTANT_BLOCKS
    if kind not in allowed:
        raise RequestRejected(f"{where}.type: a {role} message takes {sorted(allowed)} blocks, not {kind!r}", where)
    if kind == "text":
        _check_text(block, where)
    elif kind == "tool_use":
        if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str) or "input" not in block:
            raise RequestRejected(f"{where}: a tool_use block needs 'id', 'name' and 'input'", where)
        awaiting.append(block["id"])
    elif kind == "tool_result":
        result = block.get("content")
        if not isinstance(block.get("tool_use_id"), str) or not isinstance(result, str | list):
            raise RequestRejected(f"{where}: a tool_result block needs 'tool_use_id' and 'content'", where)
    elif kind == "thinking":
        if not isinstance(block.get("thinking"), str) or not isinstance(block.get("signature"), str):
            raise RequestRejected(f"{where}: a thinking block needs 'thinking' and its 'signature' as sent", where)
    elif kind in ("image", "document"):
        _check_source(block, kind, where)
    return _check_cache_control(block, where)


def _check_source(block: Mapping[str, Any], kind: str, where: str) -> None:
    source = block.get("source")
    if not isinstance(source, dict) or source.get("type") not in ("base64", "url", "text"):
        raise RequestRejected(f"{where}.source.type: Input should be 'base64', 'url' or 'text'", where)
    if source["type"] == "url":
        if not isinstance(source.get("url"), str) or not source["url"].startswith(("https://", "http://")):
            raise RequestRejected(f"{where}.source.url: Input should be an http(s) URL", where)
        return
    media = source.get("media_type")
    allowed = _IMAGE_TYPES if kind == "image" else frozenset({"application/pdf", "text/plain"})
    if media not in allowed:
        raise RequestRejected(f"{where}.source.media_type: Input should be one of {sorted(allowed)}", where)
    data = source.get("data")
    if not isinstance(data, str) or not data:
        raise RequestRejected(f"{where}.source.data: Field required", where)
    if source["type"] == "base64" and not re.fullmatch(r"[A-Za-z0-9+/]+={0,2}", data):
        raise RequestRejected(f"{where}.source.data: invalid base64 data", where)
