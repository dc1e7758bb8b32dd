"""What the SSE app's tests share: the app over a `RunFeed`, served by uvicorn on a loopback port from a thread
of its own (a server that can be stopped and started again on the same port while its runs go on), and a
tiered run it starts whose search waits for the test to let it finish."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx2 as httpx

from agentkit import AfterProposal, LoopConfig, Observer, StructuredCaller, Tier, run_tool_loop_tiered, tool
from agentkit.events import RunEnding
from agentkit.journal import Journal, JournalObserver, open_journal
from agentkit.providers.openai import OpenAICaller
from agentkit.testing import ScriptedCaller, call_step, done_step
from agentkit.web import RunFeed, create_app
from tests.support import NO_WAIT, Doc, Executor, Mail, Query

T = TypeVar("T")

WAIT = 15.0
"""Seconds a wait may take before the test fails (never a measured time)."""

POLL = 0.02
"""Seconds between the app's reads of the journal while a journaled run goes on."""

RATIONALES = ("Nothing is known yet; I look up the release date.", "The date is found; I mail it to the team.")


class WebServer:
    """`create_app(feed, start=...)` served by uvicorn on a free loopback port, from a thread of its own.

    `POST /runs` starts the run `start_run` makes: a search (which waits for `release()`), then a mail
    (irreversible: a proposal ends the run). `stop()` and `serve()` take the server down and up again on
    the same port; the event loop, the feed and the runs go on meanwhile.
    """

    def __init__(self, *, model_url: str | None = None, journal_url: str | None = None) -> None:
        self.feed = RunFeed()
        self.bodies: list[object] = []
        """The body of each run `POST /runs` started, in order."""
        self._journal_url = journal_url
        """A journal to follow runs from (`create_app(journal=...)`), opened by the server itself: another handle
        than the one that records the runs, as in another process."""
        self._journal: Journal | None = None
        self._model_url = model_url
        """A model server to stream the steps from (`FakeOpenAIServer`); without one, the steps are scripted."""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        probe = socket.create_server(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self.base = f"http://127.0.0.1:{self.port}"
        self._gate: asyncio.Event | None = None
        self._server: Any = None
        self._serving: asyncio.Task[None] | None = None

    def __enter__(self) -> WebServer:
        self._thread.start()
        self._gate = self.run(_event)
        if self._journal_url is not None:
            self._journal = open_journal(self._journal_url)
        self.serve()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
        self.run(_cancel_the_rest)  # what outlives the server: a run still waiting, sse-starlette's watcher
        if self._journal is not None:
            self.run(self._journal.close)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(WAIT)
        self._loop.close()

    def run(self, work: Callable[[], Awaitable[T]]) -> T:
        """`work()` on the server's loop; its result."""
        return asyncio.run_coroutine_threadsafe(_call(work), self._loop).result(WAIT)

    def serve(self) -> None:
        """Start serving (again) on the port."""
        import uvicorn

        started = threading.Event()

        class Server(uvicorn.Server):
            async def startup(self, sockets: list[socket.socket] | None = None) -> None:
                await super().startup(sockets)
                started.set()

        app = create_app(self.feed, journal=self._journal, poll=POLL, start=self._start)
        config = uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1)
        self._server = Server(config)

        async def begin() -> None:
            listening = socket.create_server(("127.0.0.1", self.port))
            self._serving = asyncio.create_task(self._server.serve(sockets=[listening]))

        self.run(begin)
        if not started.wait(WAIT):
            raise RuntimeError("the SSE app did not start")

    def stop(self) -> None:
        """Stop serving: open streams are closed, the port is let go; the runs go on."""
        self._server.should_exit = True

        async def stopped() -> None:
            assert self._serving is not None
            await self._serving

        self.run(stopped)

    def release(self) -> None:
        """Let the waiting search finish."""
        gate = self._gate
        assert gate is not None
        self._loop.call_soon_threadsafe(gate.set)

    def start(self) -> str:
        """`POST /runs`: a run started; its id."""
        with httpx.Client(base_url=self.base) as client:
            reply = client.post("/runs", json={"task": "When is the release?"})
        assert reply.status_code == 201, reply.text
        run_id: str = reply.json()["run_id"]
        return run_id

    def ended(self, run_id: str) -> bool:
        async def ended() -> bool:
            return self.feed.ended(run_id)

        return self.run(ended)

    def count(self, run_id: str) -> int:
        async def count() -> int:
            return self.feed.count(run_id)

        return self.run(count)

    async def _start(self, body: object, observer: Observer) -> object:
        assert self._gate is not None
        self.bodies.append(body)
        if self._model_url is None:
            return await start_run(ScriptedCaller(script()), self._gate, observer)
        async with OpenAICaller(base_url=self._model_url, stream=True) as caller:
            return await start_run(caller, self._gate, observer)


def wire_steps() -> list[dict[str, Any]]:
    """The run's two steps as a model server writes them (`FakeReply.value`)."""
    return [
        {
            "rationale": RATIONALES[0],
            "decision": {"done": False, "call": {"tool": "search", "args": {"query": "release date"}}},
        },
        {
            "rationale": RATIONALES[1],
            "decision": {"done": False, "call": {"tool": "mail", "args": {"to": "team@example.com"}}},
        },
    ]


def script() -> list[dict[str, Any]]:
    """The run's two steps: a search, then a mail (a proposal: it ends the run)."""
    return [
        call_step(Query(query="release date"), tool="search", rationale=RATIONALES[0]),
        call_step(Mail(to="team@example.com"), tool="mail", rationale=RATIONALES[1]),
    ]


async def start_run(caller: StructuredCaller, gate: asyncio.Event, observer: Observer) -> object:
    @tool(tier=Tier.READ_ONLY)
    async def search(args: Query) -> list[Doc]:
        """Search."""
        await gate.wait()
        return [Doc(id="release:2026-12-10")]

    @tool(tier=Tier.IRREVERSIBLE)
    def mail(args: Mail) -> list[Doc]:
        """Mail (never runs live)."""
        raise AssertionError("an irreversible call ran")

    config = LoopConfig(retry=NO_WAIT, after_proposal=AfterProposal.STOP)
    return await run_tool_loop_tiered(caller, Executor[Doc](), [search, mail], "ctx", config, observer=observer)


async def proposed_run(journal: Journal, gate: asyncio.Event | None = None) -> str:
    """A run recorded in `journal`: a search, then a mail (a proposal: the run stops at it); its id."""
    if gate is None:
        gate = asyncio.Event()
        gate.set()
    with JournalObserver(journal) as observer:
        result = await start_run(ScriptedCaller(script()), gate, observer)
    assert isinstance(result, RunEnding)
    return result.run_id


async def approve_and_resume(journal: Journal, run_id: str) -> None:
    """The run's proposal approved, and the run resumed: it searches again, then says done."""
    [pending] = await journal.pending()
    await journal.approve(pending.id, "ops@example.com")
    caller = ScriptedCaller([call_step(Query(query="more"), tool="search"), done_step()])
    await resume_with(journal, run_id, caller)


async def resume_with(
    journal: Journal, run_id: str, caller: ScriptedCaller, *, observer: Observer | None = None
) -> None:
    """`journal.resume` of a run `start_run` began, with its tools (here the mail runs, once approved)."""

    @tool(tier=Tier.READ_ONLY)
    async def search(args: Query) -> list[Doc]:
        """Search."""
        return [Doc(id="release:2026-12-10")]

    @tool(tier=Tier.IRREVERSIBLE)
    def mail(args: Mail) -> list[Doc]:
        """Mail."""
        return [Doc(id="mailed")]

    await journal.resume(run_id, caller, Executor[Doc](), [search, mail], "ctx", observer=observer)


async def _cancel_the_rest() -> None:
    current = asyncio.current_task()
    rest = [task for task in asyncio.all_tasks() if task is not current]
    for task in rest:
        task.cancel()
    await asyncio.gather(*rest, return_exceptions=True)


async def _event() -> asyncio.Event:
    return asyncio.Event()


async def _call(work: Callable[[], Awaitable[T]]) -> T:
    return await work()


def read_stream(base: str, path: str, *, last_event_id: str | None = None) -> tuple[int, list[tuple[str, str]]]:
    """`GET path` as an SSE client: the status and the `(id, data)` of every message until the stream ends."""
    headers = {"accept": "text/event-stream"}
    if last_event_id is not None:
        headers["last-event-id"] = last_event_id
    messages: list[tuple[str, str]] = []
    with httpx.Client(base_url=base, timeout=WAIT) as client, client.stream("GET", path, headers=headers) as reply:
        if reply.status_code != 200:
            return reply.status_code, messages
        fields: dict[str, str] = {}
        for line in reply.iter_lines():
            if not line:
                if "data" in fields:
                    messages.append((fields.get("id", ""), fields["data"]))
                fields = {}
                continue
            name, _, value = line.partition(":")
            if name:
                fields[name] = value.removeprefix(" ")
    return 200, messages
