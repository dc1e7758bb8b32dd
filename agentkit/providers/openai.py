"""`OpenAICaller`: agentkit's model seams over the official `openai` async client.

It drives any server that speaks the OpenAI chat-completions API (OpenAI, vLLM, a llama.cpp
server, Ollama, LM Studio) and implements both `StructuredCaller` and `TextCaller`. It reads no
private name of `openai` or `httpx2`, and needs no instructor; `import agentkit` imports neither
this module nor `openai`.

How the work is split, and why:

* **The modes' request shapes are this module's.** Each `StructuredMode` has its shape (the
  `response_format`, the forced tool, the schema instructions that JSON and MD_JSON add to the
  prompt) and its re-ask messages that send a validation error back to the model (`_new_plan`,
  `_reasked`; the wording is instructor's, so the requests are those sent since the start, pinned
  by tests/providers/golden). The shape is built **once per schema** and cached as a template; a
  call only fills in this round's system and user text.
* **This module owns the HTTP exchange.** Each attempt is one `POST /chat/completions` whose
  body is this module's JSON (the message list, then the schema's part of the request, serialised
  once per schema), and the reply is validated from its bytes by pydantic. It goes out on public
  interfaces only (`_send`): a client the caller builds, through its HTTP client's `build_request`
  and `send`; a client you pass, through its documented `post(..., cast_to=httpx2.Response,
  content=...)`, so its auth, hooks, logging and instrumentation apply. `chat.completions.create`
  would walk every request against its typed parameters and build a `ChatCompletion` for every
  reply: that costs more client CPU than the rest of a round. The client's own
  retries are off (`max_retries=0`), so retry and fallback live in one place
  (`generate_structured`), a 429 surfaces as `Throttled` after exactly one request, and usage
  is read from every response, re-asks included.
* **The timeout bounds the whole request.** httpx's timeouts apply per phase and per read, so a
  server that sends its headers and then one byte at a time could hold a request forever; every
  request here also runs under one overall deadline of `timeout` seconds.
* **Requests in flight are bounded** (`max_in_flight`, 100 by default): further requests wait
  their turn in a FIFO queue before they reach the HTTP pool. httpx's pool scans every queued
  request and every connection on each request it starts or ends, so 10,000 concurrent runs
  handed to it at once cost quadratic CPU (and a pool wider than the 100 connections it keeps
  alive closes and reopens connections); behind the bound, its work per request stays constant.
* **Usage from the wire is checked.** A token count that is negative, not a whole number, or
  above `MAX_TOKENS_PER_REPLY` is a protocol error (`ProviderError`), never summed: a server
  that reports `prompt_tokens: -1000000` would otherwise defeat `LoopConfig.token_budget`.
* **Strict mode is this module's.** OpenAI enforces a schema only with `strict: true`, and
  then only a subset of JSON Schema; `_strict.strict_schema` rewrites the schema into it, once
  per schema, as part of the cached template.
* **Streaming is the same exchange, read as it arrives.** With `stream=True` (or a run that asks for
  it) the body also says `stream: true` and `stream_options: {"include_usage": true}`; the
  response's server-sent events are folded chunk by chunk (`_wire.Streamed`) into the reply a
  whole body would have been, so everything after the read (usage, truncation, re-asks,
  validation) is unchanged, and the text so far is reported to the run (`agentkit._deltas`)
  after every chunk that adds to it. The overall deadline covers the whole stream. A stream must reach
  its end (its `finish_reason`, then the usage chunk or `data: [DONE]`): one cut before it is a transient
  `ProviderError`, retried, never a reply (`_StreamEnd`).
* **Replies are validated with pydantic** against the exact schema class that was asked for,
  after the checks a raw reply needs first: no choices, a reply cut off by the token limit
  (`finish_reason == "length"`: its JSON may be truncated, so it is never parsed), an empty
  reply or a refusal.

Example:
    >>> caller = OpenAICaller(base_url="http://localhost:8000/v1", mode=StructuredMode.JSON_SCHEMA)
    >>> result = await run_tool_loop(caller, agent, search, ctx)  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import enum
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import httpx2
import openai
from pydantic import BaseModel, ValidationError

from agentkit._cache import kept_on
from agentkit._deltas import grew, rejected, started, wanted
from agentkit._media import ImagePart, PromptPart, parts_of
from agentkit._reasoning import Reasoning
from agentkit._step import schema_name
from agentkit._structured import Completion, StructuredRequest
from agentkit._text import TextCompletion
from agentkit._transcript import listened, sent
from agentkit._usage import Usage
from agentkit.errors import AgentkitError, ProviderError, Truncated, UsageError
from agentkit.providers._send import ClientOwner, InFlight, OwnedHttpClient, through_client, through_http
from agentkit.providers._strict import strict_schema
from agentkit.providers._wire import (
    MAX_TOKENS_PER_REPLY,
    Chunk,
    Reply,
    Streamed,
    cause_of,
    detail_count,
    dumps,
    json_in_text,
    mismatch,
    on_this_machine,
    request_body,
    status_failure,
    token_count,
)

__all__ = [
    "DEFAULT_MAX_IN_FLIGHT",
    "DEFAULT_MAX_REASKS",
    "DEFAULT_TIMEOUT",
    "MAX_TOKENS_PER_REPLY",
    "OpenAICaller",
    "StructuredMode",
]

M = TypeVar("M", bound=BaseModel)

DEFAULT_TIMEOUT = 120.0
"""Seconds one HTTP request may take when `OpenAICaller` builds the client itself."""
DEFAULT_MAX_REASKS = 1
"""Schema-invalid replies re-asked within one attempt before it fails."""
DEFAULT_MAX_IN_FLIGHT: int = 100
"""Requests one `OpenAICaller` has on the wire at once (the `openai` client keeps 100 connections alive)."""

_PATH = "/chat/completions"
_STRICT_HOSTS = frozenset({"api.openai.com"})
"""Hosts `strict=None` sends strict schemas to: the ones known to implement OpenAI's strict mode."""
_PROVIDERS = {
    "api.deepseek.com": "deepseek",
    "api.groq.com": "groq",
    "api.mistral.ai": "mistral_ai",
    "api.perplexity.ai": "perplexity",
    "api.x.ai": "x_ai",
    "generativelanguage.googleapis.com": "gcp.gemini",
}
"""`gen_ai.provider.name` (OpenTelemetry GenAI conventions) of OpenAI-compatible endpoints known by host;
any other server speaks OpenAI's API and wire format, so it is reported as `"openai"`."""
_STATUS_HINTS = {
    400: "the server rejected the request; if it does not support this structured mode, pick another StructuredMode",
    401: "check the API key (api_key=... or OPENAI_API_KEY)",
    403: "the API key is not allowed to use this model",
    404: "check the model name and base_url (an OpenAI-compatible base_url usually ends in /v1)",
}


class StructuredMode(enum.StrEnum):
    """How the schema is put to the server and how the reply carries the JSON."""

    JSON_SCHEMA = "json_schema"
    """`response_format={"type": "json_schema", ...}`: the default. vLLM, a llama.cpp server and
    Ollama constrain decoding to the schema as sent; OpenAI constrains it only in strict mode
    (`OpenAICaller(strict=...)`, on by default for `api.openai.com`), which sends the schema
    rewritten into OpenAI's strict subset."""
    TOOLS = "tools"
    """One function whose parameters are the schema, forced with `tool_choice` and
    `parallel_tool_calls: false`: for servers with function calling but no JSON-schema response
    format. A reply with more than one call is re-asked. Strict mode applies as in `JSON_SCHEMA`."""
    JSON = "json"
    """`response_format={"type": "json_object"}` plus the schema in the system prompt: JSON is
    guaranteed, the schema is not."""
    MD_JSON = "md_json"
    """The schema in the prompt and the answer in a fenced ```json block: for servers with neither
    JSON mode nor function calling."""


_JSON_INSTRUCTIONS = (
    "\n\n\n            As a genius expert, your task is to understand the content and provide\n"
    "            the parsed objects in json that match the following json_schema:\n\n\n"
    "            {schema}\n\n"
    "            Make sure to return an instance of the JSON, not the schema itself\n"
)
"""What JSON and MD_JSON add to the system prompt: the schema, as compact JSON (instructor's wording, kept so that
the request is the one sent since the start; tests/providers/golden pins it)."""
_FENCE_REQUEST = "\n\nReturn the correct JSON response within a ```json codeblock. not the JSON_SCHEMA"
"""What MD_JSON adds to the user's message."""
_REASK_JSON = "Correct your JSON ONLY RESPONSE, based on the following errors:\n{error}"
_REASK_TOOL = "Validation Error found:\n{error}\nRecall the function correctly, fix the errors"


@dataclass(frozen=True, slots=True)
class _Slot:
    """One message of a cached request template: fixed text around this call's system or user text."""

    role: str
    prefix: str
    field: Literal["system", "dynamic"] | None
    suffix: str


@dataclass(frozen=True, slots=True)
class _Plan:
    """What a mode needs for one schema, built once: message template and wire extras."""

    name: str
    template: tuple[_Slot, ...]
    extra: Mapping[str, Any]
    extra_json: str
    """`extra` as the members of a JSON object (no braces), spliced into every request body."""


def _plan(schema: type[BaseModel], mode: StructuredMode, strict: bool = False) -> _Plan:
    """The schema's plan for `mode`, built once and kept on the schema class itself: two tool sets with the
    same step name never share one, and the plans of schemas made per request go with them."""
    return kept_on(schema, ("openai plan", mode, strict), lambda: _new_plan(schema, mode, strict))


def _new_plan(schema: type[BaseModel], mode: StructuredMode, strict: bool) -> _Plan:
    """The request shape of `mode` for `schema` (see `StructuredMode`)."""
    name = schema_name(schema.__name__)
    value = schema.model_json_schema()
    system, user = _Slot("system", "", "system", ""), _Slot("user", "", "dynamic", "")
    extra: dict[str, Any] = {}
    if mode is StructuredMode.JSON_SCHEMA:
        body = {key: part for key, part in value.items() if key != "title"}  # the name is sent beside it
        extra["response_format"] = {"type": "json_schema", "json_schema": {"name": name, "schema": body}}
    elif mode is StructuredMode.TOOLS:
        extra["tools"] = [{"type": "function", "function": _function(value, name)}]
        extra["tool_choice"] = {"type": "function", "function": {"name": name}}
        # the schema is the whole answer, so a second call could only be a second, competing answer
        extra["parallel_tool_calls"] = False
    else:
        system = _Slot("system", "", "system", _JSON_INSTRUCTIONS.format(schema=dumps(value)))
        if mode is StructuredMode.JSON:
            extra["response_format"] = {"type": "json_object"}
        else:
            user = _Slot("user", "", "dynamic", _FENCE_REQUEST)
    if strict:
        _make_strict(extra, name)
    extra_json = dumps(extra)[1:-1] if extra else ""
    return _Plan(name=name, template=(system, user), extra=extra, extra_json=extra_json)


def _function(value: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The function TOOLS forces: the schema as its parameters, the model's docstring as its description."""
    parameters = {key: part for key, part in value.items() if key not in ("title", "description")}
    parameters["required"] = sorted(value.get("required", ()))
    function: dict[str, Any] = {"name": name}
    if value.get("description"):
        function["description"] = value["description"]
    function["parameters"] = parameters
    return function


def _make_strict(extra: dict[str, Any], name: str) -> None:
    """Mark the schema strict and rewrite it into OpenAI's strict subset (JSON_SCHEMA and TOOLS carry one)."""
    response_format = extra.get("response_format")
    if isinstance(response_format, dict) and isinstance(response_format.get("json_schema"), dict):
        spec = response_format["json_schema"]
        spec["schema"] = strict_schema(spec.get("schema") or {}, name)
        spec["strict"] = True
    for tool in extra.get("tools", ()):
        function = tool["function"]
        function["parameters"] = strict_schema(function.get("parameters") or {}, name)
        function["strict"] = True


class _InvalidReply(ValueError):
    """A reply that carries no JSON to validate (empty, a refusal, no tool call); re-asked like a schema error."""


class OpenAICaller(ClientOwner[openai.AsyncOpenAI]):
    """`StructuredCaller` and `TextCaller` for any OpenAI-compatible chat-completions server.

    Each `complete` is one attempt: one HTTP request, plus up to `max_reasks` more when the
    reply does not validate (the validation error is sent back to the model). Retry, fallback
    and backoff are `generate_structured`'s, never the client's.

    Errors (each carries the usage spent on `.usage`):

    * HTTP 429 -> `Throttled` (with `retry_after` from `Retry-After`), after one request;
    * 5xx, 408, 409, timeouts (the whole request past `timeout` included), lost connections,
      an unreadable body, no choices -> `ProviderError` with `transient=True` (retried, then
      failed over to the fallback model);
    * a `usage` token count that is negative, not a whole number or above
      `MAX_TOKENS_PER_REPLY` -> `ProviderError` with `transient=False` (a broken server);
    * 400, 401, 403, 404 and other 4xx -> `ProviderError` with `transient=False` (no retry);
    * a reply still invalid after the re-asks, or cut off by the token limit ->
      `StructuredOutputError` naming the schema, with the last raw reply on `.raw`.

    Args:
        client: An `openai.AsyncOpenAI` to use; a copy with `max_retries=0` is what is called.
            When omitted, one is built from `base_url` and `api_key` and closed by `aclose`.
        mode: How the schema is put to the server (`StructuredMode`).
        base_url: The server, e.g. `http://localhost:8000/v1`; only without `client`.
        api_key: The key; only without `client`. Defaults to `OPENAI_API_KEY`, or to a
            placeholder when `base_url` is on this machine (`localhost`, `127.0.0.0/8`,
            `::1`): local servers take any key. Any other server needs one.
        timeout: Seconds one HTTP request may take in all: connecting, sending, waiting and
            reading the whole reply (a server that drips its reply byte by byte is cut off too).
            It is also the client's per-phase httpx timeout. `None` keeps the passed client's
            setting (a plain number bounds the whole request the same way; an
            `httpx2.Timeout` applies per phase only); a client built here then uses
            `DEFAULT_TIMEOUT`.
        max_reasks: Schema-invalid replies re-asked within one attempt (0 to never re-ask).
        max_tokens_field: The request field that carries `StructuredRequest.max_tokens`:
            `"max_tokens"` (understood by every compatible server) or
            `"max_completion_tokens"` (required by OpenAI's reasoning models).
        max_in_flight: Requests this caller has on the wire at once; more wait their turn (first
            come, first served) before they are sent, and the wait is not part of `timeout`.
            `None` hands every request to the client's connection pool at once.
        strict: Ask for strict mode in `JSON_SCHEMA` and `TOOLS` (`strict: true`, with the
            schema rewritten into OpenAI's strict subset), which is what makes OpenAI enforce the
            schema. `None` (the default) turns it on for `api.openai.com` only: other servers
            enforce the schema as sent, with the constraints the subset lacks (`maxLength`
            bounds a rationale), and some refuse the flag. Pass `True` for other servers that
            implement OpenAI's strict mode (Azure OpenAI). The reply is validated against the
            real model either way.
        stream: Ask the server to stream every reply (`stream: true`, with
            `stream_options: {"include_usage": true}` so that the last chunk carries the usage),
            and report its text as it grows to the run, which emits `RationaleDelta` and
            `AnswerDelta` (`TextDelta` for prose). `False` (the default) streams only the runs that
            ask for it (`LoopConfig(stream=True)`, `run_once_text(stream=True)`); every other
            request is sent as without streaming, byte for byte. A streamed reply is folded into
            the reply a whole body would have been and checked exactly as one: the same errors,
            re-asks, truncation (`finish_reason == "length"` in the last chunk) and usage.

    Raises:
        UsageError: `client` together with `base_url` or `api_key`, an unknown `mode`,
            a negative `max_reasks`, or no API key for a server that is not on this machine.
            `complete` raises it for a schema that strict mode cannot express (a `dict` field).
    """

    def __init__(
        self,
        client: openai.AsyncOpenAI | None = None,
        *,
        mode: StructuredMode = StructuredMode.JSON_SCHEMA,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float | None = None,
        max_reasks: int = DEFAULT_MAX_REASKS,
        max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens",
        strict: bool | None = None,
        max_in_flight: int | None = DEFAULT_MAX_IN_FLIGHT,
        stream: bool = False,
    ) -> None:
        if not isinstance(mode, StructuredMode):
            raise UsageError(f"mode must be a StructuredMode, one of {[m.name for m in StructuredMode]}; got {mode!r}")
        if isinstance(max_reasks, bool) or not isinstance(max_reasks, int) or max_reasks < 0:
            raise UsageError(f"max_reasks must be an int >= 0; got {max_reasks!r}")
        if max_tokens_field not in ("max_tokens", "max_completion_tokens"):
            raise UsageError(
                f"max_tokens_field must be 'max_tokens' or 'max_completion_tokens'; got {max_tokens_field!r}"
            )
        if strict is not None and not isinstance(strict, bool):
            raise UsageError(f"strict must be True, False or None (decided by the server's host); got {strict!r}")
        if not isinstance(stream, bool):
            raise UsageError(f"stream must be True or False; got {stream!r}")
        if max_in_flight is not None and (
            isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int) or max_in_flight < 1
        ):
            raise UsageError(f"max_in_flight must be an int >= 1, or None for no bound; got {max_in_flight!r}")
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout < math.inf
        ):
            raise UsageError(f"timeout must be a finite number of seconds > 0, or None; got {timeout!r}")
        self._owns_client = client is None
        if client is None:
            client, http = _build_client(base_url, api_key, DEFAULT_TIMEOUT if timeout is None else timeout)
            self._post = through_http(client, http, _PATH)
        elif base_url is not None or api_key is not None:
            raise UsageError("pass either client=... or base_url=/api_key=, not both; configure the client you pass")
        elif timeout is not None:
            client = client.with_options(max_retries=0, timeout=timeout)
        else:
            client = client.with_options(max_retries=0)
        if not self._owns_client:
            self._post = through_client(
                client, _PATH, stream_cls=openai.AsyncStream[object], failed=openai.APIConnectionError
            )
        self._client = client
        bound = client.timeout if timeout is None else timeout
        self._deadline: float | None = (
            float(bound) if isinstance(bound, int | float) and not isinstance(bound, bool) and bound > 0 else None
        )
        self.mode = mode
        """How the schema is put to the server."""
        self.max_reasks = max_reasks
        """Schema-invalid replies re-asked within one attempt."""
        self.strict = client.base_url.host in _STRICT_HOSTS if strict is None else strict
        """Whether `JSON_SCHEMA` and `TOOLS` requests ask for OpenAI's strict mode."""
        self.stream = stream
        """Whether every request asks the server to stream (a run with `LoopConfig(stream=True)` streams anyway)."""
        self._max_tokens_field = max_tokens_field
        url = client.base_url
        self.server_address: str = url.host
        """The server's host, as tracing reports it (`server.address`)."""
        self.server_port: int = url.port or (443 if url.scheme == "https" else 80)
        """The server's port (`server.port`)."""
        azure = url.host.endswith(".openai.azure.com")
        self.provider_name: str = "azure.ai.openai" if azure else _PROVIDERS.get(url.host, "openai")
        """The provider as tracing reports it (`gen_ai.provider.name`): known from the host, else `"openai"`."""
        self._slot = InFlight(max_in_flight)
        self._last_plan: tuple[type[BaseModel], StructuredMode, bool, _Plan] | None = None
        """The plan of the latest call's schema (a run asks with the same step model round after round)."""

    async def complete(self, request: StructuredRequest, schema: type[M]) -> Completion[M]:
        """Ask `request.model` for one reply that validates against `schema`.

        Raises:
            Throttled: HTTP 429.
            ProviderError: the server failed (`transient` for 5xx, timeouts, lost connections).
            StructuredOutputError: the reply stayed invalid after the re-asks.
            Truncated: the reply was cut off by the token limit (a `StructuredOutputError`).
        """
        plan = self._plan_for(schema)
        kwargs = self._kwargs(request, _messages(plan, request), plan.extra)
        tally = _Tally()
        try:
            for asked in range(self.max_reasks + 1):
                reply = await self._send(kwargs, plan.extra_json, tally)
                choice = _first_choice(reply, request.model)
                raw = _raw_text(choice)
                if choice.finish_reason == "length":
                    raise _truncated(request, plan.name, raw, tally)
                try:
                    value = schema.model_validate_json(self._json_text(choice))
                except (ValidationError, _InvalidReply) as invalid:
                    if asked == self.max_reasks:
                        raise mismatch(request.model, plan.name, invalid, raw, asked + 1) from invalid
                    if "stream" in kwargs:
                        rejected(f"the reply did not validate and is asked again: {invalid}")
                    kwargs = _reasked(kwargs, self.mode, choice, invalid)
                    continue
                reasons = (choice.finish_reason,) if choice.finish_reason else ()
                model = reply.model or request.model
                return Completion(
                    value=value,
                    usage=tally.usage,
                    model=model,
                    response_id=reply.id,
                    finish_reasons=reasons,
                    reasoning=_reasoning(choice),
                )
        except AgentkitError as error:
            error.usage = tally.usage
            raise
        raise AssertionError("unreachable: the last re-ask either returns or raises")  # pragma: no cover

    async def complete_text(self, request: StructuredRequest) -> TextCompletion:
        """Ask `request.model` for a plain-text reply (no JSON mode, no schema).

        Raises:
            Throttled: HTTP 429.
            ProviderError: the server failed.
            Truncated: the reply was cut off by the token limit.
        """
        messages: list[dict[str, Any]] = [{"role": "system", "content": request.system}] if request.system else []
        messages.append({"role": "user", "content": content_parts(request.parts) if request.parts else request.dynamic})
        tally = _Tally()
        try:
            reply = await self._send(self._kwargs(request, messages, {}), "", tally)
            choice = _first_choice(reply, request.model)
            if choice.finish_reason == "length":
                raise Truncated(
                    f"the reply of model {request.model!r} was cut off by the token limit "
                    f"(max_tokens={request.max_tokens}){_reasoned(tally)}; raise max_tokens or ask for a shorter "
                    "answer",
                    raw=_raw_text(choice),
                    max_tokens=request.max_tokens,
                )
        except AgentkitError as error:
            error.usage = tally.usage
            raise
        reasons = (choice.finish_reason,) if choice.finish_reason else ()
        return TextCompletion(
            text=_raw_text(choice),
            usage=tally.usage,
            model=reply.model or request.model,
            response_id=reply.id,
            finish_reasons=reasons,
            reasoning=_reasoning(choice),
        )

    def _kwargs(
        self, request: StructuredRequest, messages: list[dict[str, Any]], planned: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The request's own fields (the mode's `planned` part is spliced in by `request_body`)."""
        kwargs: dict[str, Any] = {"model": request.model, "messages": messages}
        if request.temperature is not None:
            kwargs["temperature"] = request.temperature
        kwargs.update(limit_and_reasoning(request.reasoning, request.max_tokens, self._max_tokens_field))
        if request.seed is not None:
            kwargs["seed"] = request.seed
        if request.extra_body:
            clash = sorted(set(request.extra_body) & set(planned))
            if clash:
                raise UsageError(
                    f"RoleSpec.extra_body sets {', '.join(map(repr, clash))}, which OpenAICaller's mode "
                    f"{self.mode.name} writes from the schema; choose the mode (OpenAICaller(mode=...)) instead"
                )
            kwargs.update(request.extra_body)
            if "max_tokens" in kwargs and "max_completion_tokens" in kwargs:
                raise UsageError(
                    "RoleSpec.extra_body sets 'max_tokens' beside the 'max_completion_tokens' a role with reasoning "
                    "sends (RoleSpec.max_tokens): a server refuses both; give the limit once, in RoleSpec.max_tokens"
                )
        if self.stream or wanted():
            kwargs["stream"] = True
            kwargs["stream_options"] = {"include_usage": True}  # the last chunk then carries the usage
        return kwargs

    async def _send(self, kwargs: dict[str, Any], extra_json: str, tally: _Tally) -> Reply:
        """One POST (`_send`): the reply validated from its bytes (or folded from its stream, when `kwargs` asks
        for one), reported with its messages to a transcript listener (`agentkit._transcript`)."""
        tally.requests += 1
        model = str(kwargs["model"])
        content = request_body(kwargs, extra_json)
        streaming = "stream" in kwargs
        reply: Reply | None = None
        try:
            async with self._slot():
                async with asyncio.timeout(self._deadline):
                    if streaming:
                        started()
                        response = await self._post(content, True)
                        try:
                            if response.is_success:
                                reply = await _read_stream(response, model, tools=self.mode is StructuredMode.TOOLS)
                            else:
                                await response.aread()
                        finally:
                            await response.aclose()
                    else:
                        response = await self._post(content)
        except (TimeoutError, openai.APIConnectionError) as error:
            sent(kwargs["messages"], None)
            raise self._failure(model, error) from error
        except openai.APIStatusError as error:  # a client you passed: its own error for the status
            sent(kwargs["messages"], None)
            raise _status_failure(model, error.response) from error
        except ProviderError:
            sent(kwargs["messages"], None)
            raise
        if not response.is_success:
            sent(kwargs["messages"], None)
            raise _status_failure(model, response)
        if reply is None:
            body = response.content
            try:
                reply = Reply.model_validate_json(body)
            except ValidationError as error:
                sent(kwargs["messages"], None)
                raise ProviderError(
                    f"model server sent an unreadable reply for model {model!r} (not a chat completion: "
                    f"{error.errors(include_url=False)[0]['msg']}): {body[:200]!r}",
                    transient=True,
                ) from error
        try:
            tally.add(reply, model)
        except AgentkitError:
            sent(kwargs["messages"], None)
            raise
        if listened():
            choices = reply.choices
            first = choices[0] if choices else None
            sent(kwargs["messages"], None if first is None else _raw_text(first), _reasoning(first))
        return reply

    def _failure(self, model: str, error: Exception) -> AgentkitError:
        """The error of a request that failed on the way or with an HTTP status."""
        if isinstance(error, TimeoutError):
            return ProviderError(
                f"request to model {model!r} timed out after {self._deadline}s for the whole request "
                "(connecting, sending, waiting and reading the reply); "
                "raise OpenAICaller(timeout=...) or check the server's load",
                transient=True,
            )
        if isinstance(error, openai.APITimeoutError):
            return ProviderError(
                f"request to model {model!r} timed out after {self._client.timeout}s; "
                "raise OpenAICaller(timeout=...) or check the server's load",
                transient=True,
            )
        return ProviderError(
            f"could not reach the model server at {self._client.base_url} ({cause_of(error)}); is it running?",
            transient=True,
        )

    def _plan_for(self, schema: type[BaseModel]) -> _Plan:
        """`_plan` of `schema` in this caller's mode, the latest one kept at hand."""
        mode, strict, last = self.mode, self.strict, self._last_plan
        if last is not None and last[0] is schema and last[1] is mode and last[2] is strict:
            return last[3]
        plan = _plan(schema, mode, strict)
        self._last_plan = (schema, mode, strict, plan)
        return plan

    def _json_text(self, choice: Any) -> str:
        message = getattr(choice, "message", None)
        if self.mode is StructuredMode.TOOLS:
            calls = getattr(message, "tool_calls", None) or []
            if len(calls) > 1:
                raise _InvalidReply(
                    f"the reply made {len(calls)} calls to the function; "
                    "make exactly one call, with the whole answer in its arguments"
                )
            function = getattr(calls[0], "function", None) if calls else None
            arguments = getattr(function, "arguments", None)
            if not arguments:
                raise _InvalidReply(
                    "the reply made no call to the function; call it with arguments matching its schema"
                    + _refusal(message)
                )
            return str(arguments)
        content = getattr(message, "content", None)
        if not content or not content.strip():
            raise _InvalidReply(
                "the reply was empty; answer with one JSON object matching the schema" + _refusal(message)
            )
        if self.mode is StructuredMode.MD_JSON:
            return json_in_text(content)
        return str(content)


def limit_and_reasoning(reasoning: Reasoning | None, limit: int | None, limit_field: str) -> dict[str, Any]:
    """A chat completion's token limit and reasoning effort as a role asks them: a reasoning model takes its limit
    (hidden reasoning included) as `max_completion_tokens` only, else `limit_field` carries it; `effort="off"` is
    OpenAI's `"none"`."""
    fields: dict[str, Any] = {}
    if limit is not None:
        fields["max_completion_tokens" if reasoning is not None else limit_field] = limit
    if reasoning is not None and reasoning.effort is not None:
        fields["reasoning_effort"] = "none" if reasoning.off else reasoning.effort
    return fields


async def _read_stream(response: httpx2.Response, model: str, *, tools: bool) -> Reply:
    """A streamed reply (server-sent events, one chunk in each `data:` line, `[DONE]` last) folded into the
    reply a whole body would have been (`tools`: the TOOLS mode's, its step in a tool call), its text reported
    after each chunk that adds to it (`agentkit._deltas`).

    The body is read as bytes and cut into lines here: OpenAI's stream is `data:` lines and blank
    lines only (a comment line, starting with `:`, and any other field are skipped), so no SSE
    library is needed, and each chunk's JSON is validated from its bytes. It is read to its end,
    past `[DONE]`: a body left unread closes the connection, and each streamed request would
    then open a new one.

    A body that ends is not a whole reply: the stream must have reached its end (`_StreamEnd`), or it was
    cut (a proxy's timeout, a server that stopped), and the reply so far is a transient `ProviderError`,
    retried, never taken as the model's. So is a connection that breaks mid-stream."""
    folded = Streamed()
    end = _StreamEnd()
    rest = b""
    try:
        async for block in response.aiter_bytes():
            if end.done:
                continue
            lines = (rest + block).split(b"\n") if rest else block.split(b"\n")
            rest = lines.pop()  # the end of the block: a line still to be finished
            for line in lines:
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    end.done = True
                    break
                chunk = _chunk(data, model)
                if folded.add(chunk):
                    grew(folded.text(tools))
                end.saw(chunk, folded)
        # a last line with no newline after it: read, so that a finish_reason it says is seen; but the stream
        # did not end as a stream ends (a line, then a blank line), so the line ends nothing (`end`)
        last = rest[5:].strip() if not end.done and rest.startswith(b"data:") else b"[DONE]"
        if last != b"[DONE]" and folded.add(_chunk(last, model)):
            grew(folded.text(tools))
    except httpx2.TimeoutException as error:
        raise openai.APITimeoutError(request=response.request) from error
    except httpx2.HTTPError as error:  # the connection broke mid-stream
        raise ProviderError(
            f"the stream of model {model!r} broke after the model server answered {response.status_code} "
            f"({cause_of(error)}); it is retried",
            transient=True,
        ) from error
    missing = end.missing(folded)
    if missing and folded.finish_reason != "length":  # a reply cut by the token limit is so however it ended
        raise ProviderError(
            f"the stream of model {model!r} ended before {missing}: the reply is incomplete; it is retried",
            transient=True,
        )
    return folded.reply()


class _StreamEnd:
    """How far a stream got towards its end. A stream has ended when its first choice's `finish_reason` came and
    then `data: [DONE]` or the usage chunk (`stream_options.include_usage`), as each server sends them: OpenAI,
    vLLM, llama.cpp and Ollama send both; a stream cut after the finish reason and before the usage would
    otherwise count no tokens. A stream with no choice at all ends at its `[DONE]` (its reply has no choices,
    and says so)."""

    __slots__ = ("done", "usage")

    def __init__(self) -> None:
        self.done = False
        """`data: [DONE]` came (on a line of its own)."""
        self.usage = False
        """A chunk carrying usage came at or after the finish reason."""

    def saw(self, chunk: Chunk, folded: Streamed) -> None:
        """Note what `chunk`, just folded into `folded`, tells of the stream's end."""
        if chunk.usage is not None and folded.finish_reason is not None:
            self.usage = True

    def missing(self, folded: Streamed) -> str:
        """What of its end the stream folded into `folded` lacks; empty when it ended."""
        if folded.seen and folded.finish_reason is None:
            return "its finish_reason"
        if self.done or self.usage:
            return ""
        return "data: [DONE]" if folded.seen else "its first chunk"


class _Tally:
    """Usage of one call, summed over every HTTP request it made (and the last reply's own counts)."""

    __slots__ = ("cached", "input_tokens", "last_output", "last_reasoning", "output_tokens", "reasoning", "requests")

    def __init__(self) -> None:
        self.requests = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self.cached = 0
        self.reasoning = 0
        self.last_output = self.last_reasoning = 0

    def add(self, reply: Reply, model: str) -> None:
        """Count the reply's usage; all of its counts are checked before any is added."""
        usage = reply.usage
        self.last_output = self.last_reasoning = 0
        if usage is not None:
            prompt = token_count(usage.prompt_tokens, "prompt_tokens", model)
            completion = token_count(usage.completion_tokens, "completion_tokens", model)
            cached = detail_count(usage.prompt_tokens_details, "cached_tokens", "prompt_tokens_details", model, prompt)
            reasoning = detail_count(
                usage.completion_tokens_details, "reasoning_tokens", "completion_tokens_details", model, completion
            )
            self.input_tokens += prompt
            self.output_tokens += completion
            self.cached += cached
            self.reasoning += reasoning
            self.last_output, self.last_reasoning = completion, reasoning

    @property
    def usage(self) -> Usage:
        return Usage(
            requests=self.requests,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            cached_input_tokens=self.cached,
            reasoning_tokens=self.reasoning,
        )


def _build_client(
    base_url: str | None, api_key: str | None, timeout: float
) -> tuple[openai.AsyncOpenAI, httpx2.AsyncClient]:
    """The `openai` client, on an HTTP client of the SDK's defaults made here (sent through by `through_http`)."""
    if api_key is None and not os.environ.get("OPENAI_API_KEY"):
        url = base_url or os.environ.get("OPENAI_BASE_URL")
        if url is None or not on_this_machine(url):
            # a remote server without a key would only answer 401, after a request; say so now
            raise UsageError(
                f"no API key for the model server at {url or 'api.openai.com'}: pass api_key=... or set "
                "OPENAI_API_KEY (a server on localhost needs none; for a remote one that ignores keys, "
                "pass any string, e.g. api_key='none')"
            )
        api_key = "not-needed"  # local servers (vLLM, llama.cpp, Ollama) take any key, but the client wants one
    http = OwnedHttpClient(timeout=timeout)  # unopened, it holds nothing if the client fails
    try:
        client = openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key, timeout=timeout, max_retries=0, http_client=http
        )
    except openai.OpenAIError as error:
        raise UsageError(
            f"cannot build the OpenAI client: {error}; pass api_key=... (or set OPENAI_API_KEY), "
            "or base_url=... for a local server"
        ) from error
    return client, http


def _messages(plan: _Plan, request: StructuredRequest) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for slot in plan.template:
        if slot.field == "dynamic" and request.parts:
            messages.append({"role": slot.role, "content": content_parts((slot.prefix, *request.parts, slot.suffix))})
            continue
        text = request.system if slot.field == "system" else request.dynamic if slot.field == "dynamic" else ""
        content = slot.prefix + text + slot.suffix
        if content or slot.role != "system":
            messages.append({"role": slot.role, "content": content})
    if request.reask:
        messages.append(
            {
                "role": "user",
                "content": f"Your previous reply was rejected:\n{request.reask}\nReply again, fixing these errors.",
            }
        )
    return messages


def content_parts(parts: Sequence[PromptPart]) -> list[dict[str, Any]]:
    """A dynamic part with images or documents as chat-completions content parts, in order: `text`, `image_url`
    (a `data:` URL of the bytes, or the image's URL) and `file` (a PDF's bytes as `file_data`, with its
    `filename`); adjacent text is one part."""
    content: list[dict[str, Any]] = []
    normal = parts_of(parts)
    for part in (normal,) if isinstance(normal, str) else normal:
        if isinstance(part, str):
            content.append({"type": "text", "text": part})
        elif isinstance(part, ImagePart):
            content.append({"type": "image_url", "image_url": {"url": part.data_url}})
        else:
            content.append({"type": "file", "file": {"filename": part.filename, "file_data": part.data_url}})
    return content


def _chunk(data: bytes, model: str) -> Chunk:
    """One streamed chunk, validated from its bytes; a chunk that is not one, or an error the server streams
    after its 200, is a transient `ProviderError` (retried)."""
    try:
        chunk = Chunk.model_validate_json(data)
    except ValidationError as error:
        raise ProviderError(
            f"model server sent an unreadable stream for model {model!r} (a chunk that is not a chat "
            f"completion chunk: {error.errors(include_url=False)[0]['msg']}): {data[:200]!r}",
            transient=True,
        ) from error
    if chunk.error is not None:
        raise ProviderError(
            f"model server reported an error mid-stream for model {model!r}: {str(chunk.error)[:200]}; it is retried",
            transient=True,
            status=200,
        )
    return chunk


def _first_choice(response: Reply, model: str) -> Any:
    choices = getattr(response, "choices", None)
    if not choices:
        raise ProviderError(
            f"model server answered with no choices for model {model!r} (an empty 'choices' list); "
            "the server failed to produce a reply",
            transient=True,
            status=200,
        )
    return choices[0]


def _raw_text(choice: Any) -> str:
    message = getattr(choice, "message", None)
    calls = getattr(message, "tool_calls", None) or []
    if calls:
        return "\n".join(str(getattr(call.function, "arguments", "") or "") for call in calls)
    return str(getattr(message, "content", "") or "")


def _refusal(message: Any) -> str:
    refusal = getattr(message, "refusal", None)
    return f" (the model refused: {refusal})" if refusal else ""


def _reasoning(choice: Any) -> str | None:
    """The reasoning a choice's message carries (`reasoning_content` or `reasoning`), if any."""
    message = getattr(choice, "message", None)
    return message.reasoning_text if message is not None else None


def _reasoned(tally: _Tally) -> str:
    """What a cut-off reply's message adds when the server says the model spent tokens reasoning: how many."""
    if not tally.last_reasoning:
        return ""
    return (
        f"; {tally.last_reasoning} of its {tally.last_output} completion tokens went to the model's reasoning "
        "before it answered (raise max_tokens, or lower RoleSpec.reasoning's effort)"
    )


def _truncated(request: StructuredRequest, name: str, raw: str, tally: _Tally) -> Truncated:
    return Truncated(
        f"the reply of model {request.model!r} was cut off by the token limit (finish_reason='length', "
        f"max_tokens={request.max_tokens}) before it was complete JSON for schema {name!r}{_reasoned(tally)}; "
        "raise RoleSpec.max_tokens or keep the reply short (LoopConfig.rationale_max_length)",
        schema_name=name,
        raw=raw,
        max_tokens=request.max_tokens,
    )


def _status_failure(model: str, response: httpx2.Response) -> AgentkitError:
    """The error of a reply with a status other than 2xx: `Throttled` for 429, else a `ProviderError`."""
    return status_failure(model, response, _STATUS_HINTS)


def _reasked(kwargs: dict[str, Any], mode: StructuredMode, choice: Any, invalid: Exception) -> dict[str, Any]:
    """The request again, with the rejected reply and what was wrong with it: in TOOLS mode the reply's calls, each
    answered by a tool message that carries the error; in the others the reply, then a user message with it."""
    message = getattr(choice, "message", None)
    calls = list(getattr(message, "tool_calls", None) or ())
    assistant: dict[str, Any] = {"role": "assistant", "content": getattr(message, "content", None) or ""}
    if getattr(message, "tool_calls", None) is not None:
        assistant["tool_calls"] = [
            {
                "id": call.id,
                "function": {"arguments": call.function.arguments, "name": call.function.name}
                if call.function is not None
                else None,
                "type": call.type,
            }
            for call in calls
        ]
    added: list[dict[str, Any]] = [assistant]
    if mode is StructuredMode.TOOLS:
        text = _REASK_TOOL.format(error=invalid)
        added.extend(
            {
                "role": "tool",
                "tool_call_id": call.id,
                "name": call.function.name if call.function else None,
                "content": text,
            }
            for call in calls
        )
        if not calls:
            added.append({"role": "user", "content": text})
    else:
        added.append({"role": "user", "content": _REASK_JSON.format(error=invalid)})
    return {**kwargs, "messages": [*kwargs["messages"], *added]}
