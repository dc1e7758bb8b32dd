"""`FakeOpenAIServer`: a real OpenAI-compatible HTTP server on loopback, for tests.

It speaks `POST /v1/chat/completions` in the wire format of the real API (usage block
included, streaming as server-sent events), validates requests the way a real server does
(a malformed message, an invalid function or schema name, or a schema marked `strict` that
breaks OpenAI's strict-mode rules is a 400), records every request
body, and answers from a script or, with nothing scripted, with a minimal instance of whatever
schema the request carries. Faults are scripted like replies: any HTTP status (with
`Retry-After`), a delay, a body dripped out one byte at a time, a body that is not JSON, a
reply cut off by the token limit, no choices, any usage counts (negative ones included). It is
standard library only: a `ThreadingHTTPServer` in a thread.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Literal, Self, TypedDict, Unpack

from pydantic import BaseModel

from agentkit.testing._fake_wire import (
    RequestRejected,
    auto_text,
    forced_tool,
    instance_of,
    schema_of,
    validate_request,
    wants_fence,
)

__all__ = ["FakeOpenAIServer", "FakeReply", "FakeServer", "ReplyOptions"]

ReplyKind = Literal["text", "value", "tool_call", "error", "malformed", "truncated", "no_choices", "auto"]


class ReplyOptions(TypedDict, total=False):
    """The options every `FakeReply` factory takes, so a misspelt one is a type error, not ignored."""

    delay: float
    """Seconds to wait before answering (a slow server, or a client timeout)."""
    drip: float
    """Seconds between bytes: the headers go at once, then the body one byte at a time (not for streams)."""
    pace: float
    """Seconds between a stream's chunks (a server that generates as it streams), for a request with
    `stream: true`; the first chunk goes with the headers."""
    chunk_chars: int | None
    """Characters of text (content or a call's arguments) per stream chunk; each text in three pieces
    when omitted."""
    prompt_tokens: int | None
    """`usage.prompt_tokens` to report; estimated from the request when omitted."""
    completion_tokens: int | None
    """`usage.completion_tokens` to report; estimated from the reply when omitted."""
    cached_tokens: int | None
    """`usage.prompt_tokens_details.cached_tokens` to report (prompt tokens read from the prompt cache)."""
    reasoning_tokens: int | None
    """`usage.completion_tokens_details.reasoning_tokens` to report (completion tokens spent reasoning)."""
    reasoning: str | None
    """The reasoning the model wrote, sent as the message's `reasoning_content` (as vLLM and DeepSeek send it)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class FakeReply:
    """One scripted answer of `FakeOpenAIServer`; build it with the class methods."""

    kind: ReplyKind
    """What the answer is."""
    body: str | None = None
    """The reply text, or the JSON of a value or of a tool call's arguments."""
    tool_name: str | None = None
    """The function called (`tool_call`); the request's forced tool when omitted."""
    more_arguments: tuple[str, ...] = ()
    """The arguments of further calls of the same function in the same reply (`tool_calls`)."""
    status: int = 200
    """The HTTP status of an `error`."""
    retry_after: str | None = None
    """The `Retry-After` header of an `error`, when set."""
    mid_stream: bool = False
    """An `error` reported in the stream after a 200 (to a request with `stream: true`), not as an HTTP status."""
    delay: float = 0.0
    """Seconds to wait before answering (a slow server, or a client timeout)."""
    drip: float = 0.0
    """Seconds between bytes: the headers go at once, then the body one byte at a time (not for streams).

    Each read then succeeds well within a per-read timeout, so only a bound on the whole request
    ends it."""
    pace: float = 0.0
    """Seconds between a stream's chunks (a server that generates as it streams), for a request with
    `stream: true`; the first chunk goes with the headers."""
    chunk_chars: int | None = None
    """Characters of text (content or a call's arguments) per stream chunk; each text in three pieces
    when omitted."""
    prompt_tokens: int | None = None
    """`usage.prompt_tokens` to report; estimated from the request when omitted."""
    completion_tokens: int | None = None
    """`usage.completion_tokens` to report; estimated from the reply when omitted."""
    cached_tokens: int | None = None
    """`usage.prompt_tokens_details.cached_tokens` to report; no details block when omitted."""
    reasoning_tokens: int | None = None
    """`usage.completion_tokens_details.reasoning_tokens` to report (and counted in an estimated
    `completion_tokens`, as a real server counts them); no details block when omitted."""
    reasoning: str | None = None
    """The reasoning the model wrote, sent as the message's `reasoning_content`; none when omitted."""

    @classmethod
    def text(cls, content: str, **options: Unpack[ReplyOptions]) -> FakeReply:
        """The assistant's message content, as is (plain text, or JSON that may be invalid)."""
        return cls(kind="text", body=content, **options)

    @classmethod
    def value(cls, value: Mapping[str, Any] | BaseModel, **options: Unpack[ReplyOptions]) -> FakeReply:
        """A JSON value, sent the way the request asks for it: a call of the forced tool, else content."""
        return cls(kind="value", body=_dump(value), **options)

    @classmethod
    def tool_call(
        cls, arguments: Mapping[str, Any] | BaseModel | str, *, name: str | None = None, **options: Unpack[ReplyOptions]
    ) -> FakeReply:
        """A tool call with these arguments (a string is sent as is, even if it is not JSON)."""
        body = arguments if isinstance(arguments, str) else _dump(arguments)
        return cls(kind="tool_call", body=body, tool_name=name, **options)

    @classmethod
    def tool_calls(
        cls,
        first: Mapping[str, Any] | BaseModel | str,
        *more: Mapping[str, Any] | BaseModel | str,
        name: str | None = None,
        **options: Unpack[ReplyOptions],
    ) -> FakeReply:
        """One reply with several calls of the function (`name=`, else the forced tool), in this order.

        A server that ignores `parallel_tool_calls: false` answers this way.
        """
        rest = tuple(arguments if isinstance(arguments, str) else _dump(arguments) for arguments in more)
        return replace(cls.tool_call(first, name=name, **options), more_arguments=rest)

    @classmethod
    def error(
        cls,
        status: int,
        *,
        retry_after: float | str | None = None,
        message: str | None = None,
        mid_stream: bool = False,
        **options: Unpack[ReplyOptions],
    ) -> FakeReply:
        """An HTTP error with the API's error body and an optional `Retry-After`.

        With `mid_stream=True`, a request with `stream: true` gets a 200 stream that starts the reply and then
        reports the error in the stream, as a server that fails while it generates does (an `error` chunk for
        OpenAI's format, an `error` event for Anthropic's); a request without `stream` gets the HTTP error.
        """
        header = None if retry_after is None else str(retry_after)
        return cls(kind="error", status=status, retry_after=header, body=message, mid_stream=mid_stream, **options)

    @classmethod
    def malformed(cls, **options: Unpack[ReplyOptions]) -> FakeReply:
        """A 200 whose body claims to be JSON and is not (to a request with `stream: true`, a stream whose
        chunk is not JSON)."""
        return cls(kind="malformed", **options)

    @classmethod
    def truncated(cls, content: str | None = None, **options: Unpack[ReplyOptions]) -> FakeReply:
        """A reply cut off by the token limit (`finish_reason: "length"`): half of the default reply."""
        return cls(kind="truncated", body=content, **options)

    @classmethod
    def no_choices(cls, **options: Unpack[ReplyOptions]) -> FakeReply:
        """A 200 whose `choices` list is empty."""
        return cls(kind="no_choices", **options)

    @classmethod
    def auto(cls, **options: Unpack[ReplyOptions]) -> FakeReply:
        """The unscripted answer (a minimal schema-valid instance), e.g. with a `delay`."""
        return cls(kind="auto", **options)


Scripted = FakeReply | str | Mapping[str, Any] | BaseModel


def _dump(value: Mapping[str, Any] | BaseModel) -> str:
    return value.model_dump_json() if isinstance(value, BaseModel) else json.dumps(value)


def _as_reply(entry: Scripted) -> FakeReply:
    if isinstance(entry, FakeReply):
        return entry
    if isinstance(entry, str):
        return FakeReply.text(entry)
    return FakeReply.value(entry)


class FakeServer:
    """What every fake model server of `agentkit.testing` shares: a real HTTP server on `127.0.0.1` (an
    ephemeral port) in a thread, the script of `FakeReply` answers (or `respond`), the recording of every
    request, and the faults (status, delay, drip, malformed body).

    A subclass serves one API: its route (`path`), its request checks (`check`, raising `RequestRejected`
    with the status a real server answers), its error bodies (`error_payload`) and its replies (`serve`).
    """

    path: str = ""
    """The one route served (`POST`)."""

    def check(self, body: object, headers: Mapping[str, str]) -> dict[str, Any]:
        """The request body if the real API takes it, else `RequestRejected` (with its status and message)."""
        raise NotImplementedError

    def error_payload(self, status: int, message: str, param: str | None = None) -> dict[str, Any]:
        """The body of an error reply, in the real API's format."""
        raise NotImplementedError

    def serve(self, handler: _Handler, request: dict[str, Any], reply: FakeReply, index: int) -> None:
        """Answer a valid request with the scripted reply, through `handler`'s `send_json`, `send_raw`."""
        raise NotImplementedError

    def __init__(
        self,
        replies: Iterable[Scripted] = (),
        *,
        respond: Callable[[dict[str, Any]], Scripted | None] | None = None,
    ) -> None:
        self._script: deque[FakeReply] = deque(_as_reply(entry) for entry in replies)
        self._respond = respond
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: _Httpd | None = None
        self._thread: threading.Thread | None = None
        self.requests: list[dict[str, Any]] = []
        """Every request body received, in order (rejected ones included; `{}` for a non-JSON body)."""
        self.request_bytes: list[int] = []
        """The size in bytes of each request body received, as sent on the wire (same order as `requests`)."""
        self.responses: list[dict[str, Any] | None] = []
        """The body answered to each request (the whole reply for a stream; `None` when malformed)."""
        self.max_concurrent = 0
        """The most chat-completion requests the server was handling at the same moment."""
        self._handling = 0
        self.errors: list[Exception] = []
        """What the server raised while handling a request (its traceback also goes to stderr).

        A client hanging up is not an error: it may close a connection whenever it likes.
        """

    def add(self, *replies: Scripted) -> None:
        """Append answers to the script, one per request to come."""
        with self._lock:
            self._script.extend(_as_reply(entry) for entry in replies)

    @property
    def handling(self) -> int:
        """Chat-completion requests being handled at this moment (a stream counts until its last chunk is sent)."""
        with self._lock:
            return self._handling

    @property
    def connections(self) -> int:
        """Connections the server has accepted so far (a client that keeps its connection alive opens one)."""
        httpd = self._httpd
        return 0 if httpd is None else httpd.accepted

    @property
    def remaining(self) -> int:
        """Scripted answers not yet used."""
        return len(self._script)

    def assert_no_errors(self) -> None:
        """Fail when the server raised while handling a request (the client saw a dropped connection)."""
        if self.errors:
            raise AssertionError(
                f"the fake server failed on {len(self.errors)} request(s), first with {self.errors[0]!r}; "
                "its traceback is on stderr, and the request is in .requests"
            )

    def assert_complete(self) -> None:
        """Fail when the server raised while handling a request, or when scripted answers were never used."""
        self.assert_no_errors()
        if self._script:
            raise AssertionError(f"{len(self._script)} scripted answer(s) of the fake server never used")

    @property
    def address(self) -> str:
        """The running server's address (`http://127.0.0.1:PORT`)."""
        if self._httpd is None:
            raise RuntimeError("the fake server is not running; use it as a context manager or call start()")
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> Self:
        """Start serving in a background thread."""
        if self._httpd is not None:
            raise RuntimeError("the fake server is already running")
        self._stopping.clear()
        httpd = _Httpd(("127.0.0.1", 0), _Handler)
        httpd.fake = self
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, end open connections and wait for the handler threads."""
        httpd, thread = self._httpd, self._thread
        if httpd is None or thread is None:
            return
        self._stopping.set()
        httpd.shutdown()
        httpd.close_connections()
        httpd.server_close()
        thread.join()
        self._httpd = self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        return self.start()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _next_reply(self, request: dict[str, Any]) -> FakeReply:
        if self._respond is not None:
            answer = self._respond(request)
            if answer is not None:
                return _as_reply(answer)
        with self._lock:
            return self._script.popleft() if self._script else FakeReply.auto()

    def _record(self, body: dict[str, Any], size: int) -> int:
        with self._lock:
            self.requests.append(body)
            self.request_bytes.append(size)
            self.responses.append(None)
            return len(self.requests) - 1

    @contextlib.contextmanager
    def _handling_one(self) -> Iterator[None]:
        with self._lock:
            self._handling += 1
            self.max_concurrent = max(self.max_concurrent, self._handling)
        try:
            yield
        finally:
            with self._lock:
                self._handling -= 1

    def _answered(self, index: int, payload: dict[str, Any] | None) -> None:
        with self._lock:
            self.responses[index] = payload

    def _failed(self, error: Exception) -> None:
        with self._lock:
            self.errors.append(error)

    def _wait(self, seconds: float) -> None:
        if seconds > 0:
            self._stopping.wait(seconds)


class FakeOpenAIServer(FakeServer):
    """An OpenAI-compatible chat-completions server on `127.0.0.1` (an ephemeral port).

    Use it as a context manager (`with` or `async with`) and point a client at
    `base_url`. Script answers with `add` (or the constructor): a `FakeReply`, a string
    (message content), or a dict or pydantic model (a value, sent as the forced tool's arguments
    or as content). Once the script is used up, each request gets a minimal instance of the
    schema it carries (booleans true, so a `ToolStep` says it is done).

    To serve several runs at once, answer as a function of the request instead: `respond` gets
    each valid request's body (a dict, as sent) and returns the answer, or `None` to take the next
    one from the script (then the minimal instance). It is called from the server's handler
    threads, possibly at the same time for concurrent requests; what it raises is recorded in
    `errors` and the client sees the connection dropped.

    Example:
        >>> with FakeOpenAIServer([FakeReply.error(429, retry_after=3)]) as server:
        ...     client = openai.AsyncOpenAI(base_url=server.base_url, api_key="x")  # doctest: +SKIP
    """

    path = "/v1/chat/completions"

    @property
    def base_url(self) -> str:
        """The OpenAI base URL of the running server (`http://127.0.0.1:PORT/v1`)."""
        return f"{self.address}/v1"

    def check(self, body: object, headers: Mapping[str, str]) -> dict[str, Any]:
        """The chat-completions request, or `RequestRejected` where a real server answers 400."""
        return validate_request(body)

    def error_payload(self, status: int, message: str, param: str | None = None) -> dict[str, Any]:
        """OpenAI's error body."""
        return _error_body(message, _ERROR_CODES.get(status, "server_error"), param)

    def serve(self, handler: _Handler, request: dict[str, Any], reply: FakeReply, index: int) -> None:
        """A chat completion (or its stream) for the scripted reply."""
        if reply.kind == "error":
            headers = {"retry-after": reply.retry_after} if reply.retry_after is not None else {}
            message = reply.body or f"fake server error {reply.status}"
            error = _error_body(message, _ERROR_CODES.get(reply.status, "server_error"))
            if reply.mid_stream and request.get("stream"):  # the reply starts, then the error comes as a chunk
                self._answered(index, error)
                answer = _compose(request, FakeReply.auto())
                first = next(iter(_chunks(request, answer, _completion(request, answer), None)))
                events = (f"data: {json.dumps(chunk)}\n\n".encode() for chunk in (first, error))
                handler.stream_events(events, reply.pace)
                return
            handler.send_json(reply.status, error, index, headers, drip=reply.drip)
            return
        if reply.kind == "malformed":
            if request.get("stream"):  # a stream whose one chunk is not JSON
                handler.send_raw(200, b'data: {"id": "chatcmpl-broken", "choices": [\n\ndata: [DONE]\n\n', _SSE)
            else:
                handler.send_raw(200, b'{"id": "chatcmpl-broken", "choices": [', "application/json", drip=reply.drip)
            return
        answer = _compose(request, reply)
        payload = _completion(request, answer)
        self._answered(index, payload)
        if request.get("stream"):
            chunks = _chunks(request, answer, payload, reply.chunk_chars)
            events = (f"data: {json.dumps(chunk)}\n\n".encode() for chunk in chunks)
            handler.stream_events(itertools.chain(events, [b"data: [DONE]\n\n"]), reply.pace)
            return
        handler.send_raw(200, json.dumps(payload).encode(), "application/json", drip=reply.drip)


# A client may close its connection at any moment: openai's stream closes it at "data: [DONE]", before
# the chunked body's last bytes are read, so the kernel resets it under the handler's next keep-alive read.
_HANGUPS = (ConnectionResetError, ConnectionAbortedError, BrokenPipeError)


class _Httpd(ThreadingHTTPServer):
    daemon_threads = False  # so server_close joins every handler thread: nothing outlives stop()
    fake: FakeServer

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(address, handler)
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        self.accepted = 0

    def track(self, connection: socket.socket, open_: bool) -> None:
        with self._connections_lock:
            if open_:
                self.accepted += 1
                self._connections.add(connection)
            else:
                self._connections.discard(connection)

    def handle_error(self, request: socket.socket | tuple[bytes, socket.socket], client_address: Any) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, _HANGUPS):
            return
        if isinstance(error, Exception):
            self.fake._failed(error)
        super().handle_error(request, client_address)  # stderr too, for a test that never asserts

    def close_connections(self) -> None:
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):  # the client may have closed it already
                connection.shutdown(socket.SHUT_RDWR)


@dataclass(frozen=True, kw_only=True, slots=True)
class _Answer:
    """The reply part of a chat completion, before it is framed as a body or a stream."""

    content: str | None = None
    tool_name: str | None = None
    arguments: str | None = None
    more_arguments: tuple[str, ...] = ()
    finish_reason: str = "stop"
    choices: bool = True
    usage: dict[str, Any] = field(default_factory=dict)
    reasoning: str | None = None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "FakeOpenAI/1"
    timeout = 30
    server: _Httpd
    # A reply is written to a buffer and sent in one write when the request is handled (its status line,
    # headers and body in one segment); what goes out in pieces (a stream's chunks, a dripped body) is
    # flushed piece by piece. TCP_NODELAY sends each write at once: with Nagle's algorithm, a write
    # that follows one still unacknowledged waits for the client's delayed ACK, about 40 ms a reply.
    wbufsize = -1
    disable_nagle_algorithm = True

    def setup(self) -> None:
        super().setup()
        self.server.track(self.connection, True)

    def finish(self) -> None:
        self.server.track(self.connection, False)
        super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        pass  # tests read requests from the recording, not from stderr

    def handle_expect_100(self) -> bool:
        answered = super().handle_expect_100()
        self.wfile.flush()  # the client waits for it before it sends the body
        return answered

    def do_GET(self) -> None:
        self.send_json(404, self.server.fake.error_payload(404, f"no route GET {self.path}"))

    def do_POST(self) -> None:
        with self.server.fake._handling_one():
            self._post()

    def _post(self) -> None:
        fake = self.server.fake
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        index = fake._record(body if isinstance(body, dict) else {}, len(raw))
        if self.path.rstrip("/") != fake.path:
            self.send_json(404, fake.error_payload(404, f"no route POST {self.path}"), index)
            return
        try:
            request = fake.check(body, {name.lower(): value for name, value in self.headers.items()})
        except RequestRejected as rejected:
            self.send_json(rejected.status, fake.error_payload(rejected.status, str(rejected), rejected.param), index)
            return
        reply = fake._next_reply(request)
        fake._wait(reply.delay)
        if fake._stopping.is_set():
            return
        fake.serve(self, request, reply, index)

    def stream_events(self, events: Iterable[bytes], pace: float = 0.0) -> None:
        """A 200 stream of server-sent events, each written as it is made (`pace` seconds apart), then the end of
        the chunked body."""
        fake = self.server.fake
        self.send_response(200)
        self.send_header("content-type", _SSE)
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for number, event in enumerate(events):
            if number and pace > 0:
                fake._wait(pace)
                if fake._stopping.is_set():
                    return
            self._write_chunk(event)
        self.wfile.write(b"0\r\n\r\n")

    def _write_chunk(self, data: bytes) -> None:
        # each event goes out as it is made (the first with the headers), as a streaming server sends them
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def send_json(
        self,
        status: int,
        payload: dict[str, Any],
        index: int | None = None,
        headers: Mapping[str, str] | None = None,
        *,
        drip: float = 0.0,
    ) -> None:
        """A JSON reply, recorded as the answer to request `index`."""
        if index is not None:
            self.server.fake._answered(index, payload)
        self.send_raw(status, json.dumps(payload).encode(), "application/json", headers, drip=drip)

    def send_raw(
        self,
        status: int,
        data: bytes,
        content_type: str,
        headers: Mapping[str, str] | None = None,
        *,
        drip: float = 0.0,
    ) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if drip <= 0:
            self.wfile.write(data)  # with the headers, in one write when the request is handled
            return
        fake = self.server.fake
        self.wfile.flush()  # the headers go at once, then the body one byte at a time
        for offset in range(len(data)):
            self.wfile.write(data[offset : offset + 1])
            self.wfile.flush()
            fake._wait(drip)
            if fake._stopping.is_set():
                return


_SSE = "text/event-stream"

_ERROR_CODES = {
    400: "invalid_request_error",
    401: "invalid_api_key",
    403: "permission_denied",
    404: "model_not_found",
    429: "rate_limit_exceeded",
}


def _error_body(message: str, code: str, param: str | None = None) -> dict[str, Any]:
    kind = "invalid_request_error" if code in ("invalid_request_error", "not_found", "model_not_found") else code
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _compose(request: dict[str, Any], reply: FakeReply) -> _Answer:
    """What the assistant says: the scripted reply, shaped to the request, with its usage."""
    forced = forced_tool(request)
    answer: _Answer
    if reply.kind == "text":
        answer = _Answer(content=reply.body or "")
    elif reply.kind == "tool_call":
        answer = _Answer(
            tool_name=reply.tool_name or forced or "tool",
            arguments=reply.body or "{}",
            more_arguments=reply.more_arguments,
        )
    elif reply.kind == "no_choices":
        answer = _Answer(choices=False)
    else:
        answer = _default(request, forced, reply.body if reply.kind == "value" else None)
        if reply.kind == "truncated":
            answer = _cut(answer, reply.body)
    if forced is None and answer.tool_name is not None and answer.finish_reason == "stop":
        answer = replace(answer, finish_reason="tool_calls")  # a forced call ends with "stop", as OpenAI's does
    prompt = reply.prompt_tokens if reply.prompt_tokens is not None else _estimate(json.dumps(request["messages"]))
    said = (answer.content or "") + (answer.arguments or "") + "".join(answer.more_arguments)
    hidden = reply.reasoning_tokens if isinstance(reply.reasoning_tokens, int) else 0
    completion = reply.completion_tokens if reply.completion_tokens is not None else _estimate(said) + max(hidden, 0)
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion}
    usage["total_tokens"] = prompt + completion
    if reply.cached_tokens is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": reply.cached_tokens}
    if reply.reasoning_tokens is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reply.reasoning_tokens}
    return replace(answer, usage=usage, reasoning=reply.reasoning)


def _default(request: dict[str, Any], forced: str | None, value_json: str | None) -> _Answer:
    schema = schema_of(request)
    if value_json is None:
        value_json = json.dumps(instance_of(schema)) if schema is not None else None
    if forced is not None:
        return _Answer(tool_name=forced, arguments=value_json or "{}")
    if value_json is None:
        return _Answer(content=auto_text(request))
    if wants_fence(request):
        return _Answer(content=f"```json\n{value_json}\n```")
    return _Answer(content=value_json)


def _cut(answer: _Answer, content: str | None) -> _Answer:
    if answer.tool_name is not None:
        arguments = answer.arguments or ""
        return replace(answer, arguments=arguments[: len(arguments) // 2], finish_reason="length")
    text = content if content is not None else (answer.content or "")[: len(answer.content or "") // 2]
    return replace(answer, content=text, finish_reason="length")


def _estimate(text: str) -> int:
    return max(1, math.ceil(len(text) / 4))


def _completion(request: dict[str, Any], answer: _Answer) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": answer.content, "refusal": None}
    if answer.reasoning is not None:
        message["reasoning_content"] = answer.reasoning
    if answer.tool_name is not None:
        message["tool_calls"] = [
            {"id": f"call_fake_{number}", "type": "function", "function": {"name": answer.tool_name, "arguments": text}}
            for number, text in enumerate(_call_arguments(answer))
        ]
    choices = [{"index": 0, "message": message, "logprobs": None, "finish_reason": answer.finish_reason}]
    return {
        "id": f"chatcmpl-fake-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request["model"],
        "system_fingerprint": "fp_fake",
        "choices": choices if answer.choices else [],
        "usage": answer.usage,
    }


def _call_arguments(answer: _Answer) -> list[str]:
    return [answer.arguments or "", *answer.more_arguments]


def _pieces(text: str, size: int | None) -> list[str]:
    size = size if size is not None else max(1, math.ceil(len(text) / 3))
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _chunks(
    request: dict[str, Any], answer: _Answer, payload: dict[str, Any], size: int | None
) -> Iterable[dict[str, Any]]:
    def chunk(choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        head = {key: payload[key] for key in ("id", "created", "model", "system_fingerprint")}
        return {**head, "object": "chat.completion.chunk", "choices": choices, **extra}

    def delta(part: dict[str, Any], finish: str | None = None) -> list[dict[str, Any]]:
        return [{"index": 0, "delta": part, "logprobs": None, "finish_reason": finish}]

    if answer.choices:
        yield chunk(delta({"role": "assistant", "content": "" if answer.tool_name is None else None}))
        for piece in _pieces(answer.reasoning, size) if answer.reasoning else ():
            yield chunk(delta({"reasoning_content": piece}))
        if answer.tool_name is not None:
            for index, text in enumerate(_call_arguments(answer)):
                for number, piece in enumerate(_pieces(text, size)):
                    call: dict[str, Any] = {"index": index, "function": {"arguments": piece}}
                    if number == 0:
                        call.update(id=f"call_fake_{index}", type="function")
                        call["function"]["name"] = answer.tool_name
                    yield chunk(delta({"tool_calls": [call]}))
        else:
            for piece in _pieces(answer.content or "", size):
                yield chunk(delta({"content": piece}))
        yield chunk(delta({}, answer.finish_reason))
    options = request.get("stream_options") or {}
    if options.get("include_usage"):
        yield chunk([], usage=answer.usage)
