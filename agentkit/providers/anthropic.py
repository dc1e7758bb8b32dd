"""`AnthropicCaller`: agentkit's model seams over the official `anthropic` SDK (the `anthropic` extra).

`pip install 'agentkit[anthropic]'`. It speaks Anthropic's Messages API (`POST /v1/messages`) natively and
implements both `StructuredCaller` and `TextCaller`. It reads no private name of `anthropic` or `httpx2`;
`import agentkit` imports neither this module nor `anthropic`.

It is built like `OpenAICaller`, from the same pieces:

* **The step goes as one forced tool.** The schema (the union step schema, as agentkit builds it) is the
  `input_schema` of one tool named after it, forced with `tool_choice: {"type": "tool", "name": ...,
  "disable_parallel_tool_use": true}`; the reply's `tool_use` block's `input` is validated with pydantic
  against the exact schema asked for. The tool, serialised once per schema, is cached as a template.
* **Thinking.** A role's `RoleSpec.reasoning` sends `thinking: {"type": "enabled", "budget_tokens": N}`:
  `Reasoning(budget_tokens=N)` as given, an effort level by `THINKING_BUDGETS`, `effort="off"` none.
  The Messages API refuses a forced tool with thinking on (`tool_choice` must then be `auto` or `none`), so
  such a request offers the one tool with `tool_choice: {"type": "auto"}` and asks, in the user's turn, for a
  call of it; a reply without the call is re-asked like any invalid reply. Thinking blocks are kept as the
  reply's reasoning, and sent back only where the API requires it: in the re-ask that answers a `tool_use`.
* **Prompt caching on the stable part, by default.** `Prompt(system, dynamic)` splits a round's prompt into
  the part that stays byte-identical across rounds and the part that changes; the system block carries
  `cache_control: {"type": "ephemeral"}`, so the tool and the system prompt are read from Anthropic's cache
  from the second round on (`cache_system=False` turns it off). Usage reports it: `cache_read_input_tokens`
  and `cache_creation_input_tokens` are part of `Usage.input_tokens` (every input token, as OpenAI counts
  them), and also `Usage.cached_input_tokens` and `Usage.cache_write_tokens`.
* **One place for retry.** The SDK's own retries are off (`max_retries=0`): a request goes out through
  `_send` (the SDK's HTTP client, or the documented `post` of a client you pass), so retry, backoff and
  fallback are `generate_structured`'s; a 429 is `Throttled` after one request, with `retry-after`; 5xx
  (529 `overloaded_error` included), 408, 409, timeouts and lost connections are transient. Every request
  runs under one overall deadline of `timeout` seconds, and at most `max_in_flight` are on the wire at once.
* **Truncation.** `stop_reason: "max_tokens"` is `Truncated`, never parsed. The Messages API requires
  `max_tokens`, so a role without one sends `default_max_tokens` (plus the thinking budget, which counts
  within it).
* **Usage from the wire is checked** by `_wire.token_count`: a negative or absurd count is a `ProviderError`.
* **Streaming is the same exchange, read as it arrives.** With `stream=True` (or a run that asks for it) the body
  also says `stream: true`; the server-sent events are folded (`_messages.Streamed`) into the message a whole
  body would have been, so usage, truncation, re-asks and validation are unchanged, and the tool's input (or the
  text) so far is reported to the run (`agentkit._deltas`) after every event that adds to it. An `error` event
  after the 200 is the error its HTTP status would have been. The overall deadline covers the whole stream.

Example:
    >>> caller = AnthropicCaller(api_key="sk-ant-...")  # doctest: +SKIP
    >>> result = await run_tool_loop(caller, agent, search, ctx)  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import base64
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, TypeVar

import anthropic
import httpx2
from pydantic import BaseModel, ValidationError

from agentkit._cache import kept_on
from agentkit._deltas import rejected, started, wanted
from agentkit._media import ImagePart, PromptPart, parts_of
from agentkit._reasoning import Reasoning, ReasoningEffort
from agentkit._step import schema_name
from agentkit._structured import Completion, StructuredRequest, fallback_limit
from agentkit._text import TextCompletion
from agentkit._transcript import listened, sent
from agentkit._usage import Usage
from agentkit.errors import AgentkitError, ProviderError, Truncated, UsageError
from agentkit.providers._messages import STATUS_HINTS, Block, Message, read_stream
from agentkit.providers._send import ClientOwner, ClosedWhenGarbage, InFlight, Send, through_client, through_http
from agentkit.providers._wire import (
    cause_of,
    dumps,
    mismatch,
    on_this_machine,
    request_body,
    status_failure,
    token_count,
)

__all__ = ["DEFAULT_MAX_IN_FLIGHT", "DEFAULT_MAX_TOKENS", "DEFAULT_TIMEOUT", "THINKING_BUDGETS", "AnthropicCaller"]

M = TypeVar("M", bound=BaseModel)

DEFAULT_TIMEOUT: float = 120.0
"""Seconds one HTTP request may take when `AnthropicCaller` builds the client itself."""
DEFAULT_MAX_TOKENS: int = 4096
"""`max_tokens` sent for a role that sets none (the Messages API requires one)."""
DEFAULT_MAX_IN_FLIGHT: int = 100
"""Requests one `AnthropicCaller` has on the wire at once."""
THINKING_BUDGETS: Mapping[ReasoningEffort, int] = MappingProxyType(
    {"minimal": 1024, "low": 2048, "medium": 8192, "high": 16384}
)
"""The thinking budget (`budget_tokens`) of each `Reasoning.effort` that names no budget of its own; 1024, the
least the API takes, for `"minimal"`."""
_MIN_THINKING_BUDGET = 1024
"""The least `budget_tokens` the Messages API takes."""
_SCHEMA_KEYS = frozenset({"tools", "tool_choice"})
_OWN_KEYS = frozenset({"thinking"})
"""What AnthropicCaller writes from the role, which `extra_body` may not set (streaming: `check_extra_body`)."""
"""The request's members that carry the schema: `RoleSpec.extra_body` may not name them."""

_PATH = "/v1/messages"
_EPHEMERAL = {"type": "ephemeral"}
_CALL_IT = "\n\nAnswer by calling the tool `{name}` once, with the whole answer in its input."
"""Added to the user's turn when thinking is on: the API then refuses a forced tool, so the call is asked for."""
_REASK_TOOL = "Validation Error found:\n{error}\nRecall the function correctly, fix the errors"
_REASK_TEXT = "Your previous reply was rejected:\n{reask}\nReply again, fixing these errors."


@dataclass(frozen=True, slots=True)
class _Plan:
    """The tool one schema is asked through, built once: its name, and the request's tool members as JSON."""

    name: str
    forced_json: str
    """`tools` and a forced `tool_choice`, as the members of a JSON object (no braces)."""
    offered_json: str
    """`tools` and `tool_choice: auto`, for a request with thinking on."""


def _plan(schema: type[BaseModel]) -> _Plan:
    """The schema's plan, built once and kept on the schema class itself (as `OpenAICaller`'s plans are)."""
    return kept_on(schema, "anthropic plan", lambda: _new_plan(schema))


def _new_plan(schema: type[BaseModel]) -> _Plan:
    name = schema_name(schema.__name__)
    value = schema.model_json_schema()
    tool: dict[str, Any] = {"name": name}
    if value.get("description"):
        tool["description"] = value["description"]
    tool["input_schema"] = {key: part for key, part in value.items() if key not in ("title", "description")}
    tools = dumps([tool])
    forced = dumps({"type": "tool", "name": name, "disable_parallel_tool_use": True})
    offered = dumps({"type": "auto", "disable_parallel_tool_use": True})
    return _Plan(
        name=name,
        forced_json=f'"tools":{tools},"tool_choice":{forced}',
        offered_json=f'"tools":{tools},"tool_choice":{offered}',
    )


class _InvalidReply(ValueError):
    """A reply that carries no answer to validate (no tool call, several, an empty reply); re-asked."""


def thinking_budget(reasoning: Reasoning | None) -> int | None:
    """The thinking budget a role's `RoleSpec.reasoning` asks of the Messages API, or `None` for no thinking.

    Raises:
        UsageError: a budget below the least the API takes.
    """
    if reasoning is None or reasoning.off:
        return None
    if reasoning.budget_tokens is not None:
        budget = reasoning.budget_tokens
    elif reasoning.effort is not None:
        budget = THINKING_BUDGETS[reasoning.effort]
    else:
        return None
    if budget < _MIN_THINKING_BUDGET:
        raise UsageError(
            f"Reasoning.budget_tokens={budget} is below {_MIN_THINKING_BUDGET}, the least thinking budget the "
            "Messages API takes; raise it, or use Reasoning(effort='off') for no thinking"
        )
    return budget


class AnthropicCaller(ClientOwner[anthropic.AsyncAnthropic]):
    """`StructuredCaller` and `TextCaller` over Anthropic's Messages API, through the official `anthropic` SDK.

    Each `complete` is one attempt: one HTTP request, plus up to `max_reasks` more when the reply does not
    validate (the validation error goes back to the model as the `tool_result` of its call). Retry, fallback
    and backoff are `generate_structured`'s, never the SDK's.

    Errors (each carries the usage spent on `.usage`):

    * HTTP 429 -> `Throttled` (with `retry_after` from `retry-after`), after one request;
    * 5xx (529 `overloaded_error` included), 408, 409, timeouts (the whole request past `timeout`
      included), lost connections, an unreadable body or stream -> `ProviderError` with `transient=True`;
    * an `error` event in a stream, after the 200 -> the error of its type's status (`overloaded_error`: 529,
      `rate_limit_error`: 429, `invalid_request_error`: 400, ...), as above;
    * a `usage` token count that is negative, not a whole number or above `MAX_TOKENS_PER_REPLY` ->
      `ProviderError` with `transient=False`;
    * 400, 401, 403, 404, 413 and other 4xx -> `ProviderError` with `transient=False`;
    * `stop_reason: "max_tokens"` -> `Truncated`; a reply still invalid after the re-asks ->
      `StructuredOutputError` naming the schema, with the last raw reply on `.raw`.

    Args:
        client: An `anthropic.AsyncAnthropic` to use; a copy with `max_retries=0` is what is called.
            When omitted, one is built from `base_url` and `api_key` and closed by `aclose`.
        base_url: The API's address (`https://api.anthropic.com` by default); only without `client`.
        api_key: The key; only without `client`. Defaults to `ANTHROPIC_API_KEY`, or to a placeholder
            when `base_url` is on this machine (a local fake or proxy takes any key).
        timeout: Seconds one HTTP request may take in all (connecting, sending, waiting and reading the
            whole reply). `None` keeps the passed client's setting; a client built here then uses
            `DEFAULT_TIMEOUT`.
        max_reasks: Schema-invalid replies re-asked within one attempt (0 to never re-ask).
        max_in_flight: Requests this caller has on the wire at once; more wait their turn. `None`: no bound.
        cache_system: Mark the system prompt (and with it the tool before it) as a prompt-cache
            breakpoint (`cache_control: {"type": "ephemeral"}`). On by default.
        default_max_tokens: `max_tokens` for a role that sets none (with thinking on, this plus the budget).
        stream: Ask the API to stream every reply (`stream: true`) and report its tool input (or text) as it
            grows to the run, which emits `RationaleDelta` and `AnswerDelta` (`TextDelta` for prose). `False`
            (the default) streams only the runs that ask for it (`LoopConfig(stream=True)`,
            `run_once_text(stream=True)`); every other request is sent as without streaming, byte for byte. A
            streamed reply is folded into the message a whole body would have been and checked exactly as one:
            the same errors, re-asks, truncation (`stop_reason: "max_tokens"` in `message_delta`), thinking and
            usage (the cache's counts included); an `error` event mid-stream is the error of its status
            (`overloaded_error` as a 529, `rate_limit_error` as a 429).

    A role's `RoleSpec.reasoning` turns thinking on (`THINKING_BUDGETS`); its `RoleSpec.extra_body` is merged
    into the top level of each request body (it may not name `tools` or `tool_choice`, the schema's part).

    Raises:
        UsageError: `client` together with `base_url` or `api_key`, an option out of range, or no API
            key for a server that is not on this machine.
    """

    def __init__(
        self,
        client: anthropic.AsyncAnthropic | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float | None = None,
        max_reasks: int = 1,
        max_in_flight: int | None = DEFAULT_MAX_IN_FLIGHT,
        cache_system: bool = True,
        default_max_tokens: int = DEFAULT_MAX_TOKENS,
        stream: bool = False,
    ) -> None:
        if isinstance(max_reasks, bool) or not isinstance(max_reasks, int) or max_reasks < 0:
            raise UsageError(f"max_reasks must be an int >= 0; got {max_reasks!r}")
        if max_in_flight is not None and (
            isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int) or max_in_flight < 1
        ):
            raise UsageError(f"max_in_flight must be an int >= 1, or None for no bound; got {max_in_flight!r}")
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout < math.inf
        ):
            raise UsageError(f"timeout must be a finite number of seconds > 0, or None; got {timeout!r}")
        if not isinstance(cache_system, bool):
            raise UsageError(f"cache_system must be True or False; got {cache_system!r}")
        if isinstance(default_max_tokens, bool) or not isinstance(default_max_tokens, int) or default_max_tokens < 1:
            raise UsageError(f"default_max_tokens must be an int >= 1; got {default_max_tokens!r}")
        if not isinstance(stream, bool):
            raise UsageError(f"stream must be True or False; got {stream!r}")
        self._owns_client = client is None
        self._post: Send
        if client is None:
            client, http = _build_client(base_url, api_key, DEFAULT_TIMEOUT if timeout is None else timeout)
            self._post = through_http(
                client,
                http,
                _PATH,
                timeout_error=anthropic.APITimeoutError,
                connection_error=anthropic.APIConnectionError,
            )
        elif base_url is not None or api_key is not None:
            raise UsageError("pass either client=... or base_url=/api_key=, not both; configure the client you pass")
        else:
            client = (
                client.with_options(max_retries=0)
                if timeout is None
                else client.with_options(max_retries=0, timeout=timeout)
            )
            self._post = through_client(
                client, _PATH, stream_cls=anthropic.AsyncStream[object], failed=anthropic.APIConnectionError
            )
        self._client = client
        bound = client.timeout if timeout is None else timeout
        self._deadline: float | None = (
            float(bound) if isinstance(bound, int | float) and not isinstance(bound, bool) and bound > 0 else None
        )
        self.max_reasks = max_reasks
        """Schema-invalid replies re-asked within one attempt."""
        self.cache_system = cache_system
        """Whether the system prompt is a prompt-cache breakpoint."""
        self.default_max_tokens = default_max_tokens
        """`max_tokens` for a role that sets none."""
        self.stream = stream
        """Whether every request asks the API to stream (a run with `LoopConfig(stream=True)` streams anyway)."""
        url = client.base_url
        self.server_address: str = url.host
        """The server's host, as tracing reports it (`server.address`)."""
        self.server_port: int = url.port or (443 if url.scheme == "https" else 80)
        """The server's port (`server.port`)."""
        self.provider_name: str = "anthropic"
        """The provider as tracing reports it (`gen_ai.provider.name`)."""
        self._slot = InFlight(max_in_flight)

    async def complete(self, request: StructuredRequest, schema: type[M]) -> Completion[M]:
        """Ask `request.model` for one reply that validates against `schema`, through the schema's tool.

        Raises:
            Throttled: HTTP 429.
            ProviderError: the server failed (`transient` for 5xx, 529, timeouts, lost connections).
            StructuredOutputError: the reply stayed invalid after the re-asks.
            Truncated: `stop_reason: "max_tokens"` (a `StructuredOutputError`).
        """
        plan = _plan(schema)
        thinking = thinking_budget(request.reasoning)
        asked_for = _CALL_IT.format(name=plan.name) if thinking else ""
        body = self._body(request, _user_turn(request.parts or request.dynamic, request.reask, asked_for), thinking)
        tools_json = plan.offered_json if thinking else plan.forced_json
        tally = _Tally()
        try:
            for asked in range(self.max_reasks + 1):
                reply = await self._send(body, tools_json, tally)
                raw = _raw_text(reply)
                if reply.stop_reason in _CUT:
                    raise _truncated(request, reply.stop_reason, raw, body["max_tokens"], name=plan.name)
                try:
                    value = schema.model_validate(_tool_input(reply, plan.name))
                except (ValidationError, _InvalidReply) as invalid:
                    if asked == self.max_reasks:
                        raise mismatch(request.model, plan.name, invalid, raw, asked + 1) from invalid
                    if "stream" in body:
                        rejected(f"the reply did not validate and is asked again: {invalid}")
                    body = _reasked(body, reply, invalid)
                    continue
                return Completion(
                    value=value,
                    usage=tally.usage,
                    model=reply.model or request.model,
                    response_id=reply.id,
                    finish_reasons=(reply.stop_reason,) if reply.stop_reason else (),
                    reasoning=_reasoning(reply),
                )
        except AgentkitError as error:
            error.usage = tally.usage
            raise
        raise AssertionError("unreachable: the last re-ask either returns or raises")  # pragma: no cover

    async def complete_text(self, request: StructuredRequest) -> TextCompletion:
        """Ask `request.model` for a plain-text reply (no tool, no schema).

        Raises:
            Throttled: HTTP 429.
            ProviderError: the server failed.
            Truncated: `stop_reason: "max_tokens"`.
        """
        thinking = thinking_budget(request.reasoning)
        body = self._body(request, _user_turn(request.parts or request.dynamic, request.reask, ""), thinking)
        tally = _Tally()
        try:
            reply = await self._send(body, "", tally)
            text = _text(reply)
            if reply.stop_reason in _CUT:
                raise _truncated(request, reply.stop_reason, text, body["max_tokens"])
        except AgentkitError as error:
            error.usage = tally.usage
            raise
        return TextCompletion(
            text=text,
            usage=tally.usage,
            model=reply.model or request.model,
            response_id=reply.id,
            finish_reasons=(reply.stop_reason,) if reply.stop_reason else (),
            reasoning=_reasoning(reply),
        )

    def _body(self, request: StructuredRequest, user: dict[str, Any], thinking: int | None) -> dict[str, Any]:
        max_tokens = request.max_tokens
        if max_tokens is None:  # the default room for the answer, after the thinking when there is a budget
            max_tokens = self.default_max_tokens + (thinking or 0)
        body: dict[str, Any] = {"model": request.model, "max_tokens": max_tokens}
        if request.system:
            block: dict[str, Any] = {"type": "text", "text": request.system}
            if self.cache_system:
                block["cache_control"] = _EPHEMERAL
            body["system"] = [block]
        body["messages"] = [user]
        if thinking is not None:
            body["thinking"] = {"type": "enabled", "budget_tokens": thinking}
        elif request.temperature is not None:  # with thinking on, the API takes no temperature but its default
            body["temperature"] = request.temperature
        if request.extra_body:
            named = sorted(_SCHEMA_KEYS & set(request.extra_body))
            if named:
                raise UsageError(
                    f"RoleSpec.extra_body may not name {named}: the schema's tool is AnthropicCaller's own part of "
                    "the request"
                )
            named = sorted(_OWN_KEYS & set(request.extra_body))
            if named:
                raise UsageError(
                    f"RoleSpec.extra_body may not name {named}: thinking is set by RoleSpec.reasoning (the schema's "
                    "tool is offered, not forced, beside it)"
                )
            body.update(request.extra_body)
        if thinking is not None:  # after extra_body: a limit it sets is the one the budget must fit in
            _check_budget(thinking, body["max_tokens"], request)
        if self.stream or wanted():
            body["stream"] = True
        return body

    async def _send(self, body: dict[str, Any], tools_json: str, tally: _Tally) -> Message:
        """One POST: the reply validated from its bytes (or folded from its stream, when `body` asks for one),
        reported with its messages to a transcript listener."""
        tally.requests += 1
        model = str(body["model"])
        content = request_body(body, tools_json)
        messages = body["messages"]
        reply: Message | None = None
        try:
            async with self._slot():
                async with asyncio.timeout(self._deadline):
                    if "stream" in body:
                        started()
                        response = await self._post(content, True)
                        try:
                            if response.is_success:
                                reply = await read_stream(response, model, tools=bool(tools_json))
                            else:
                                await response.aread()
                        finally:
                            await response.aclose()
                    else:
                        response = await self._post(content)
        except (TimeoutError, anthropic.APIConnectionError) as error:
            sent(messages, None)
            raise self._failure(model, error) from error
        except anthropic.APIStatusError as error:  # a client you passed: its own error for the status
            sent(messages, None)
            raise status_failure(model, error.response, STATUS_HINTS) from error
        except AgentkitError:  # the stream broke, or reported an error after its 200
            sent(messages, None)
            raise
        if not response.is_success:
            sent(messages, None)
            raise status_failure(model, response, STATUS_HINTS)
        if reply is None:
            data = response.content
            try:
                reply = Message.model_validate_json(data)
            except ValidationError as error:
                sent(messages, None)
                raise ProviderError(
                    f"model server sent an unreadable reply for model {model!r} (not a Messages API message: "
                    f"{error.errors(include_url=False)[0]['msg']}): {data[:200]!r}",
                    transient=True,
                ) from error
        try:
            tally.add(reply, model)
        except AgentkitError:
            sent(messages, None)
            raise
        if listened():
            sent(messages, _raw_text(reply))
        return reply

    def _failure(self, model: str, error: Exception) -> AgentkitError:
        if isinstance(error, TimeoutError | anthropic.APITimeoutError):
            seconds = self._deadline if isinstance(error, TimeoutError) else self._client.timeout
            return ProviderError(
                f"request to model {model!r} timed out after {seconds}s for the whole request; "
                "raise AnthropicCaller(timeout=...) or check the server's load",
                transient=True,
            )
        return ProviderError(
            f"could not reach the model server at {self._client.base_url} ({cause_of(error)}); is it running?",
            transient=True,
        )


class _Tally:
    """Usage of one call, summed over every HTTP request it made."""

    __slots__ = ("cache_read", "cache_write", "input_tokens", "output_tokens", "requests")

    def __init__(self) -> None:
        self.requests = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self.cache_read = 0
        self.cache_write = 0

    def add(self, reply: Message, model: str) -> None:
        usage = reply.usage
        if usage is None:
            return
        fresh = token_count(usage.input_tokens, "input_tokens", model)
        taken = token_count(usage.output_tokens, "output_tokens", model)
        read = token_count(usage.cache_read_input_tokens, "cache_read_input_tokens", model)
        written = token_count(usage.cache_creation_input_tokens, "cache_creation_input_tokens", model)
        # Anthropic's input_tokens are only those after the last breakpoint; every input token is all three
        self.input_tokens += fresh + read + written
        self.output_tokens += taken
        self.cache_read += read
        self.cache_write += written

    @property
    def usage(self) -> Usage:
        return Usage(
            requests=self.requests,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            cached_input_tokens=self.cache_read,
            cache_write_tokens=self.cache_write,
        )


class _OwnedHttpClient(ClosedWhenGarbage, anthropic.DefaultAsyncHttpxClient):
    """The HTTP client a caller builds for its `anthropic` client: the SDK's defaults, closed once it is garbage."""


def _build_client(
    base_url: str | None, api_key: str | None, timeout: float
) -> tuple[anthropic.AsyncAnthropic, httpx2.AsyncClient]:
    """The `anthropic` client, on an HTTP client of the SDK's defaults made here (sent through by `through_http`)."""
    # ANTHROPIC_AUTH_TOKEN is the SDK's bearer token (a gateway's): the client built below reads it itself
    if api_key is None and not os.environ.get("ANTHROPIC_API_KEY") and not os.environ.get("ANTHROPIC_AUTH_TOKEN"):
        url = base_url or os.environ.get("ANTHROPIC_BASE_URL")
        if url is None or not on_this_machine(url):
            raise UsageError(
                f"no API key for the model server at {url or 'api.anthropic.com'}: pass api_key=... or set "
                "ANTHROPIC_API_KEY (or ANTHROPIC_AUTH_TOKEN, a bearer token; a server on localhost, such as "
                "FakeAnthropicServer, needs none)"
            )
        api_key = "not-needed"
    http = _OwnedHttpClient(timeout=timeout)
    try:
        client = anthropic.AsyncAnthropic(
            base_url=base_url, api_key=api_key, timeout=timeout, max_retries=0, http_client=http
        )
    except anthropic.AnthropicError as error:
        raise UsageError(f"cannot build the Anthropic client: {error}; pass api_key=... or base_url=...") from error
    return client, http


def _user_turn(dynamic: str | Sequence[PromptPart], reask: str | None, asked_for: str) -> dict[str, Any]:
    """The user's turn: the dynamic part as content blocks in reading order (text, `image` and `document` blocks,
    their bytes as a base64 source), then what the call asks for, then the previous attempt's error."""
    content = content_blocks((dynamic,) if isinstance(dynamic, str) else (*dynamic,))
    if asked_for:
        content.append({"type": "text", "text": asked_for})
    if not content:  # the API takes no empty turn
        content.append({"type": "text", "text": "(no input)"})
    if reask:
        content.append({"type": "text", "text": _REASK_TEXT.format(reask=reask)})
    return {"role": "user", "content": content}


def content_blocks(parts: Sequence[PromptPart]) -> list[dict[str, Any]]:
    """A dynamic part as Messages API content blocks, in order: `text` (adjacent text is one block, empty text
    none), `image` (a base64 source of its bytes, or a URL source) and `document` (a PDF's bytes as a base64
    source, titled with its filename)."""
    normal = parts_of(parts)
    blocks: list[dict[str, Any]] = []
    for part in (normal,) if isinstance(normal, str) else normal:
        if isinstance(part, str):
            if part:
                blocks.append({"type": "text", "text": part})
        elif isinstance(part, ImagePart):
            if part.data is None:
                blocks.append({"type": "image", "source": {"type": "url", "url": part.url}})
            else:
                source = {"type": "base64", "media_type": part.media_type, "data": _base64(part.data)}
                blocks.append({"type": "image", "source": source})
        else:
            source = {"type": "base64", "media_type": part.media_type, "data": _base64(part.data)}
            blocks.append({"type": "document", "source": source, "title": part.filename})
    return blocks


def _base64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _tool_input(reply: Message, name: str) -> object:
    if reply.stop_reason == "refusal":  # stopped by the API's classifier: a call it carries may be cut mid-input
        raise _InvalidReply(
            f"the model refused (stop_reason 'refusal'); call the tool {name!r} with input matching its schema"
        )
    calls = [block for block in reply.content if block.type == "tool_use"]
    if len(calls) > 1:
        raise _InvalidReply(
            f"the reply made {len(calls)} calls to the tool; make exactly one call, with the whole answer in its input"
        )
    if not calls:
        raise _InvalidReply(f"the reply made no call to the tool {name!r}; call it with input matching its schema")
    return calls[0].input


def _text(reply: Message) -> str:
    return "".join(block.text or "" for block in reply.content if block.type == "text")


def _raw_text(reply: Message) -> str:
    """The reply as text, for errors and transcripts: each tool call's input as JSON, else the text."""
    calls = [dumps(block.input) for block in reply.content if block.type == "tool_use"]
    return "\n".join(calls) if calls else _text(reply)


def _reasoning(reply: Message) -> str | None:
    """The reply's thinking, as text (redacted thinking carries none); `None` when it has no thinking block."""
    thoughts = [block.thinking or "" for block in reply.content if block.type == "thinking"]
    return "\n".join(thoughts) if thoughts else None


def _reasked(body: dict[str, Any], reply: Message, invalid: Exception) -> dict[str, Any]:
    """The request again, with the rejected reply (thinking blocks included: the API requires them before a tool
    result) and a `tool_result` per call carrying the error; without a call, a user turn with it."""
    # The API sends empty text blocks but refuses them (and blank ones) in a request: they are left out, and a
    # reply of nothing else (its thinking aside, which only a tool call needs) is an empty one.
    said = [block.model_dump(exclude_unset=True) for block in reply.content if _kept(block)]
    if all(block["type"] == "thinking" or block["type"] == "redacted_thinking" for block in said):
        said = []
    error = _REASK_TOOL.format(error=invalid)
    results = [
        {"type": "tool_result", "tool_use_id": block.id, "content": error, "is_error": True}
        for block in reply.content
        if block.type == "tool_use"
    ]
    turns: list[dict[str, Any]] = []
    if said:
        turns.append({"role": "assistant", "content": said})
        turns.append({"role": "user", "content": results or [{"type": "text", "text": error}]})
        return {**body, "messages": [*body["messages"], *turns]}
    last = body["messages"][-1]  # an empty reply: nothing to answer, so the error joins the user's turn
    merged = {**last, "content": [*last["content"], {"type": "text", "text": error}]}
    return {**body, "messages": [*body["messages"][:-1], merged]}


_CUT = frozenset({"max_tokens", "model_context_window_exceeded"})
"""The stop reasons of a reply cut off before its end: `Truncated`, never parsed."""


def _check_budget(thinking: int, max_tokens: object, request: StructuredRequest) -> None:
    """The thinking budget below the request's `max_tokens`, and below the fallback model's limit too."""
    limits: list[tuple[str, object]] = [("max_tokens", max_tokens)]
    fallback = fallback_limit(request)
    if request.fallback_model and request.fallback_model != request.model and fallback is not None:
        limits.append(("RoleSpec.fallback_max_tokens", fallback))
    for name, limit in limits:
        if not isinstance(limit, int) or isinstance(limit, bool) or thinking >= limit:
            raise UsageError(
                f"the thinking budget ({thinking} tokens) must be below {name} ({limit!r}), which it is part "
                "of; raise the limit or lower the budget"
            )


def _kept(block: Block) -> bool:
    """Whether `block` of a rejected reply goes back to the API: every block but text that is empty or blank."""
    return block.type != "text" or bool((block.text or "").strip())


def _truncated(request: StructuredRequest, reason: str, raw: str, max_tokens: int, *, name: str = "") -> Truncated:
    """A reply cut off by the token limit or by the model's context window (`reason`), for schema `name` (a
    structured reply) or a text one."""
    if reason == "max_tokens":
        cut = f"by the token limit (stop_reason 'max_tokens', max_tokens={max_tokens})"
        short = "keep the reply short (LoopConfig.rationale_max_length)" if name else "ask for a shorter answer"
        fix = f"raise RoleSpec.max_tokens or {short}"
    else:
        cut = f"by the model's context window (stop_reason {reason!r}: the prompt and max_tokens={max_tokens} fill it)"
        fix = "shorten the prompt (LoopConfig.context) or lower RoleSpec.max_tokens"
    answer = f" before it was a complete answer for schema {name!r}" if name else ""
    return Truncated(
        f"the reply of model {request.model!r} was cut off {cut}{answer}; {fix}",
        schema_name=name,
        raw=raw,
        max_tokens=max_tokens,
    )
