"""A lean OpenAI-compatible chat-completions server for the benchmark, on loopback.

It runs in its own process (``python -m benchmarks.server``) so that its CPU time is measured
apart from the client's, and it is the same server, doing the same work per request, for every
contender. It speaks plain HTTP/1.1 with keep-alive on an ``asyncio.Protocol`` (no framework), and
plays the model of ``benchmarks.scenario``.

Endpoints:
    ``POST .../chat/completions``: the model.
    ``POST /reset``: forget the statistics (the harness calls it before each sample).
    ``GET /stats``: requests, bytes, per-run correctness and this process's CPU time, as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import resource
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from benchmarks import scenario

_STEP_FIELDS = b'"done"'


@dataclass
class Stats:
    """What the server saw since the last reset."""

    requests: int = 0
    body_bytes: int = 0
    header_bytes: int = 0
    response_bytes: int = 0
    searches_asked: int = 0
    finals: int = 0
    bad_requests: int = 0
    runs: dict[bytes, list[int]] = field(default_factory=dict)
    """Per run: the number of searches each of its requests showed, in order."""

    def reset(self) -> None:
        self.__init__()  # type: ignore[misc]  # dataclass defaults are the empty state

    def summary(self) -> dict[str, Any]:
        expected = list(range(scenario.ROUNDS))
        wrong = {rid.decode(): seen for rid, seen in self.runs.items() if seen != expected}
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return {
            "requests": self.requests,
            "body_bytes": self.body_bytes,
            "header_bytes": self.header_bytes,
            "response_bytes": self.response_bytes,
            "searches_asked": self.searches_asked,
            "finals": self.finals,
            "bad_requests": self.bad_requests,
            "runs": len(self.runs),
            "correct_runs": len(self.runs) - len(wrong),
            "wrong_runs": dict(list(wrong.items())[:5]),
            "cpu_seconds": usage.ru_utime + usage.ru_stime,
        }


STATS = Stats()


def _completion(model: str, message: dict[str, Any], finish: str, body_len: int) -> dict[str, Any]:
    return {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1700000000,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": {"prompt_tokens": body_len // 4, "completion_tokens": 20, "total_tokens": body_len // 4 + 20},
    }


def _tool_call(run_id: bytes, done: int, name: str, arguments: str) -> dict[str, Any]:
    call = {
        "id": f"call_{run_id.decode()}_{done}",
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def reply(body: bytes) -> dict[str, Any]:
    """The model's reply to one chat-completions request body."""
    request = json.loads(body)
    found = scenario.RUN_ID.search(body)
    if found is None:
        raise ValueError("no run id in the request; the question must carry run-<16 hex>")
    run_id = found.group(1)
    done = scenario.searches_seen(body, run_id)
    STATS.runs.setdefault(run_id, []).append(done)
    finished = done >= scenario.SEARCHES
    if finished:
        STATS.finals += 1
    else:
        STATS.searches_asked += 1
    model = request.get("model", scenario.MODEL)
    names = [tool["function"]["name"] for tool in request.get("tools") or ()]
    query = scenario.next_query(run_id, done)
    if "search" in names:
        if not finished:
            return _completion(
                model, _tool_call(run_id, done, "search", json.dumps({"query": query})), "tool_calls", len(body)
            )
        answer = scenario.final_answer(done).model_dump_json()
        others = [name for name in names if name != "search"]
        if others:
            return _completion(model, _tool_call(run_id, done, others[0], answer), "tool_calls", len(body))
        return _completion(model, {"role": "assistant", "content": answer}, "stop", len(body))
    step = json.dumps(
        {
            "rationale": "enough found" if finished else "need more results",
            "done": finished,
            "call": None if finished else {"query": query},
        }
    )
    if names:
        return _completion(model, _tool_call(run_id, done, names[0], step), "tool_calls", len(body))
    if b"```json" in body and _STEP_FIELDS in body:
        step = f"```json\n{step}\n```"
    return _completion(model, {"role": "assistant", "content": step}, "stop", len(body))


class Handler(asyncio.Protocol):
    """One HTTP/1.1 keep-alive connection."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while self._handle_one():
            pass

    def _handle_one(self) -> bool:
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return False
        head = bytes(self.buffer[:end])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        if len(self.buffer) < end + 4 + length:
            return False
        body = bytes(self.buffer[end + 4 : end + 4 + length])
        del self.buffer[: end + 4 + length]
        method, path = head.split(b" ", 2)[:2]
        self._respond(method, path, head, body)
        return True

    def _respond(self, method: bytes, path: bytes, head: bytes, body: bytes) -> None:
        status, payload = 200, b""
        if path.endswith(b"/chat/completions"):
            STATS.requests += 1
            STATS.body_bytes += len(body)
            STATS.header_bytes += len(head) + 4
            try:
                payload = json.dumps(reply(body)).encode()
            except Exception as error:
                STATS.bad_requests += 1
                status, payload = 400, json.dumps({"error": {"message": str(error), "type": "bad_request"}}).encode()
            STATS.response_bytes += len(payload)
        elif path == b"/stats":
            payload = json.dumps(STATS.summary()).encode()
        elif path == b"/reset" and method == b"POST":
            STATS.reset()
            payload = b"{}"
        else:
            status, payload = 404, b'{"error": {"message": "not found"}}'
        reason = {200: b"OK", 400: b"Bad Request", 404: b"Not Found"}[status]
        assert self.transport is not None
        self.transport.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
            % (status, reason, len(payload), payload)
        )


@contextlib.contextmanager
def in_thread() -> Iterator[str]:
    """The server on an event loop of its own in a thread of this process, for the block; yields its base URL.

    For a comparison with a test server that runs in the test's process (``FakeOpenAIServer``): both
    then share this process's CPU and interpreter with the client alike.
    """
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    bound: list[asyncio.Server] = []

    def run() -> None:
        asyncio.set_event_loop(loop)
        bound.append(loop.run_until_complete(loop.create_server(Handler, "127.0.0.1", 0)))
        ready.set()
        loop.run_forever()
        bound[0].close()
        loop.run_until_complete(bound[0].wait_closed())
        loop.close()

    thread = threading.Thread(target=run, name="bench-server", daemon=True)
    thread.start()
    ready.wait()
    try:
        yield f"http://127.0.0.1:{bound[0].sockets[0].getsockname()[1]}/v1"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join()


async def serve(host: str, port: int) -> None:
    """Serve until cancelled; print the bound port on stdout once listening."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Handler, host, port, backlog=4096)
    bound = server.sockets[0].getsockname()[1]
    print(bound, flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    """``python -m benchmarks.server [--port N]``: serve on 127.0.0.1 until stdin closes or a signal."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=0)
    options = parser.parse_args()
    try:
        asyncio.run(serve("127.0.0.1", options.port))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
