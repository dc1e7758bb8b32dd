"""The chat-completions wire, as `OpenAICaller` reads and writes it: the request body and the reply.

The request body is this call's fields as compact JSON with the schema's part of the request
(serialised once per schema) spliced in, so the part that never changes is never re-encoded.
The reply is validated from its bytes by pydantic against `Reply`, which names only the fields
agentkit reads; every other field of a chat completion is ignored. Usage counts are taken as sent
and checked by `token_count`: a broken count is a protocol error of its own, named in the
message, never summed and never clamped.
"""

from __future__ import annotations

import email.utils
import ipaddress
import json
import re
import time
import urllib.parse
from collections.abc import Mapping
from typing import Any, cast

import httpx2
from pydantic import BaseModel, ConfigDict

from agentkit.errors import AgentkitError, ProviderError, StructuredOutputError, Throttled

__all__ = [
    "MAX_TOKENS_PER_REPLY",
    "Chunk",
    "Reply",
    "Streamed",
    "cause_of",
    "detail_count",
    "dumps",
    "json_in_text",
    "mismatch",
    "on_this_machine",
    "request_body",
    "retry_after",
    "server_message",
    "status_failure",
    "token_count",
    "transient_status",
]

MAX_TOKENS_PER_REPLY: int = 100_000_000
"""The largest token count one reply may report in `usage` (ten times the largest context window
of any model today); a larger one, a negative one or one that is not a whole number is a protocol
error, never summed."""


class _Function(BaseModel):
    model_config = ConfigDict(frozen=True)
    name: str | None = None
    arguments: str | None = None


class _ToolCall(BaseModel):
    model_config = ConfigDict(frozen=True)
    id: str | None = None
    type: str | None = "function"
    function: _Function | None = None


class _Reasoned(BaseModel):
    """A message, or a streamed chunk's delta, with the reasoning a server may return beside the reply."""

    model_config = ConfigDict(frozen=True)
    reasoning_content: object = None
    """The reasoning (vLLM's reasoning parsers, DeepSeek); in a delta, what the chunk adds to it."""
    reasoning: object = None
    """The same, as other servers name it (OpenRouter, Ollama, LM Studio); read only where it is text."""

    @property
    def reasoning_text(self) -> str | None:
        """The reasoning carried as text (`reasoning_content`, else `reasoning`), if any."""
        for said in (self.reasoning_content, self.reasoning):
            if isinstance(said, str) and said:
                return said
        return None


class _Message(_Reasoned):
    content: str | None = None
    refusal: str | None = None
    tool_calls: list[_ToolCall] | None = None


class _Choice(BaseModel):
    model_config = ConfigDict(frozen=True)
    message: _Message | None = None
    finish_reason: str | None = None


class _UsageBlock(BaseModel):
    # Read as sent and checked by ``token_count``, so a bad count is named in a protocol error of its own.
    model_config = ConfigDict(frozen=True)
    prompt_tokens: object = None
    completion_tokens: object = None
    prompt_tokens_details: object = None
    """`{"cached_tokens": N}`: of the prompt tokens, those read from the prompt cache."""
    completion_tokens_details: object = None
    """`{"reasoning_tokens": N}`: of the completion tokens, those spent reasoning."""


class Reply(BaseModel):
    """The part of a chat completion agentkit reads; every other field is ignored."""

    model_config = ConfigDict(frozen=True)
    id: str | None = None
    model: str | None = None
    choices: list[_Choice] | None = None
    usage: _UsageBlock | None = None


class _CallDelta(BaseModel):
    model_config = ConfigDict(frozen=True)
    index: int = 0
    id: str | None = None
    type: str | None = None
    function: _Function | None = None


class _Delta(_Reasoned):
    content: str | None = None
    refusal: str | None = None
    tool_calls: list[_CallDelta] | None = None


class _ChunkChoice(BaseModel):
    model_config = ConfigDict(frozen=True)
    index: int = 0
    delta: _Delta | None = None
    finish_reason: str | None = None


class Chunk(BaseModel):
    """The part of a streamed chat-completion chunk (one server-sent event's data) agentkit reads."""

    model_config = ConfigDict(frozen=True)
    id: str | None = None
    model: str | None = None
    choices: list[_ChunkChoice] | None = None
    usage: _UsageBlock | None = None
    error: object = None
    """An error the server reports in the stream, after its 200 (OpenAI sends `{"error": {...}}`)."""


class _CallParts:
    __slots__ = ("arguments", "id", "name", "type")

    def __init__(self) -> None:
        self.id: str | None = None
        self.type: str | None = None
        self.name: str | None = None
        self.arguments: list[str] = []


class Streamed:
    """A streamed reply folded chunk by chunk into the `Reply` a whole body would have been: the first choice's
    content, refusal, reasoning and tool calls (their arguments joined by `index`), its finish reason, and the
    usage of the last chunk (`stream_options.include_usage`)."""

    __slots__ = ("calls", "content", "finish_reason", "id", "model", "reasoning", "refusal", "seen", "usage")

    def __init__(self) -> None:
        self.id: str | None = None
        self.model: str | None = None
        self.seen = False
        self.content: list[str] = []
        self.refusal: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, _CallParts] = {}
        self.finish_reason: str | None = None
        self.usage: _UsageBlock | None = None

    def add(self, chunk: Chunk) -> bool:
        """Fold `chunk` in; whether it added text (content or a call's arguments)."""
        self.id = self.id or chunk.id
        self.model = self.model or chunk.model
        if chunk.usage is not None:
            self.usage = chunk.usage
        grew = False
        for choice in chunk.choices or ():
            if choice.index != 0:
                continue  # agentkit asks for one choice and reads the first
            self.seen = True
            if choice.finish_reason is not None:
                self.finish_reason = choice.finish_reason
            delta = choice.delta
            if delta is None:
                continue
            if delta.content:
                self.content.append(delta.content)
                grew = True
            if delta.refusal:
                self.refusal.append(delta.refusal)
            reasoning = delta.reasoning_text
            if reasoning:
                self.reasoning.append(reasoning)
            for call in delta.tool_calls or ():
                grew = self._add_call(call) or grew
        return grew

    def _add_call(self, call: _CallDelta) -> bool:
        """Fold one tool call's delta in; whether it added to the call's arguments."""
        parts = self.calls.get(call.index)
        if parts is None:
            parts = self.calls[call.index] = _CallParts()
        parts.id = parts.id or call.id
        parts.type = parts.type or call.type
        function = call.function
        if function is None:
            return False
        parts.name = parts.name or function.name
        if not function.arguments:
            return False
        parts.arguments.append(function.arguments)
        return True

    def text(self, tools: bool) -> str:
        """The reply so far: the first call's arguments (`tools`), else the content."""
        if tools:
            return "".join(self.calls[min(self.calls)].arguments) if self.calls else ""
        return "".join(self.content)

    def reply(self) -> Reply:
        """The whole reply, as a body would have carried it."""
        if not self.seen:
            return Reply(id=self.id, model=self.model, choices=[], usage=self.usage)
        calls = [
            _ToolCall(
                id=parts.id,
                type=parts.type or "function",
                function=_Function(name=parts.name, arguments="".join(parts.arguments)),
            )
            for _, parts in sorted(self.calls.items())
        ]
        message = _Message(
            content="".join(self.content) if self.content or not calls else None,
            refusal="".join(self.refusal) or None,
            tool_calls=calls or None,
            reasoning_content="".join(self.reasoning) or None,
        )
        choice = _Choice(message=message, finish_reason=self.finish_reason)
        return Reply(id=self.id, model=self.model, choices=[choice], usage=self.usage)


def token_count(value: object, field: str, model: str) -> int:
    """A token count from the wire: missing is 0; anything but a whole number in range is a protocol error."""
    if value is None:
        return 0
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOKENS_PER_REPLY:
        raise ProviderError(
            f"model server reported usage.{field}={value!r} for model {model!r}: a token count must be a whole "
            f"number from 0 to {MAX_TOKENS_PER_REPLY:,}; the server's usage report is broken, so token "
            "budgets cannot be kept (the reply was not used)",
            status=200,
        )
    return value


def detail_count(details: object, name: str, field: str, model: str, within: int) -> int:
    """A count of a usage details block (`prompt_tokens_details.cached_tokens`, say): checked as `token_count`
    does, and refused when it is more than the total it is part of (`within`). A details block that is not an
    object is a broken report too; a missing block or count is 0."""
    if details is None:
        return 0
    where = f"{field}.{name}"
    if not isinstance(details, dict):
        raise ProviderError(
            f"model server reported usage.{field}={details!r} for model {model!r}: it must be an object of token "
            "counts; the server's usage report is broken (the reply was not used)",
            status=200,
        )
    count = token_count(cast("dict[str, object]", details).get(name), where, model)
    if count > within:
        raise ProviderError(
            f"model server reported usage.{where}={count} for model {model!r}, more than the {within} tokens it is "
            "part of; the server's usage report is broken (the reply was not used)",
            status=200,
        )
    return count


_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
"""Made once: `json.dumps` with these options makes an encoder per call."""


def dumps(value: Any) -> str:
    """Compact JSON, as the openai client writes it (UTF-8 text, no NaN)."""
    return _COMPACT.encode(value)


def request_body(kwargs: Mapping[str, Any], extra_json: str) -> bytes:
    """The request body: `kwargs` as JSON, with the plan's pre-serialised members spliced in."""
    text = dumps(kwargs)
    if extra_json:
        text = f"{text[:-1]},{extra_json}}}"
    try:
        return text.encode()
    except UnicodeEncodeError:
        # a lone surrogate cannot be UTF-8; JSON's \u escapes carry it losslessly
        return json.dumps(json.loads(text), separators=(",", ":")).encode()


MAX_JSON_TEXT = 1024 * 1024
"""The longest reply `json_in_text` searches (a larger one is handed to validation whole)."""
_OPENERS = re.compile(r"[{\[]")
_DECODER = json.JSONDecoder()


def transient_status(status: int) -> bool:
    """Whether an HTTP error status is worth another try (5xx, 408 timeout, 409 conflict), for every caller."""
    return status >= 500 or status in (408, 409)


def json_in_text(text: str) -> str:
    """The last complete JSON object or array in `text` (MD_JSON's fenced block), else `text` itself.

    The last one, not the first: JSON quoted earlier in a reply may come from the prompt (a user's text the model
    reasons about), and taking it would let that text answer for the model. The work is linear in the text's
    length: a span that fails to decode is charged the rest of the text, and the search stops once it has been
    charged 16 times the text's length.
    """
    if len(text) > MAX_JSON_TEXT:
        return text
    found: str | None = None
    consumed, budget = 0, 16 * len(text)
    for opener in _OPENERS.finditer(text):
        index = opener.start()
        if index < consumed:
            continue
        if budget < len(text) - index:
            break
        try:
            _, end = _DECODER.raw_decode(text, index)
        except (ValueError, RecursionError):
            budget -= len(text) - index
            continue
        budget -= end - index
        found, consumed = text[index:end], end
    return found if found is not None else text


def status_failure(model: str, response: httpx2.Response, hints: Mapping[int, str]) -> AgentkitError:
    """The error of a reply with a status other than 2xx, for every caller: `Throttled` for 429 (at once, with its
    `retry-after`), else a `ProviderError`, transient or not by `transient_status`, with the caller's hint."""
    status = response.status_code
    if status == 429:
        return Throttled(
            f"model server throttled model {model!r} (HTTP 429): {server_message(response)}",
            retry_after=retry_after(response.headers),
        )
    transient = transient_status(status)
    hint = "a server error; it is retried" if transient else hints.get(status, "the request was refused")
    return ProviderError(
        f"model server answered HTTP {status} for model {model!r}: {server_message(response)}; {hint}",
        transient=transient,
        status=status,
    )


def server_message(response: httpx2.Response) -> str:
    """The server's own error message (OpenAI's and Anthropic's error bodies carry one under `error`), else the
    start of the body."""
    try:
        body = json.loads(response.content)
    except ValueError:
        body = None
    error = body.get("error", body) if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    if message:
        return str(message)
    text = response.content[:200].decode("utf-8", "replace").strip()
    return text or f"an empty body ({response.reason_phrase or 'no reason given'})"


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds from `retry-after-ms` or `Retry-After` (seconds or an HTTP date)."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(float(millis) / 1000, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


def cause_of(error: BaseException) -> str:
    """What made a request fail on the way, for the message: the SDK error's cause, else the error itself."""
    cause = error.__cause__ or error.__context__
    return f"{type(cause).__name__}: {cause}" if cause is not None else str(error)


def on_this_machine(url: str) -> bool:
    """The URL's host is a loopback address (`127.0.0.0/8`, `::1`) or `localhost`: a server that takes any key."""
    host = urllib.parse.urlsplit(url).hostname
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_RAW_IN_MESSAGE = 1000
"""The most characters of the last reply a `mismatch` message quotes (the whole reply is on the error)."""


def mismatch(model: str, name: str, invalid: Exception, raw: str, tries: int) -> StructuredOutputError:
    """The error of a reply that still did not match schema `name` after `tries` tries (the last reply quoted)."""
    shown = raw if len(raw) <= _RAW_IN_MESSAGE else raw[:_RAW_IN_MESSAGE] + "..."
    return StructuredOutputError(
        f"the reply of model {model!r} does not match schema {name!r} "
        f"after {tries} tr{'y' if tries == 1 else 'ies'}: {invalid}\nlast reply: {shown!r}",
        schema_name=name,
        raw=raw,
    )
