"""The SSE app: a run's events as Server-Sent Events, a page that shows them, and runs started over HTTP.

Routes:

- `GET /runs/{run_id}/events`: the run's events, one SSE message each: `id:` its number in the run, `data:`
  its JSON form; from the journal (`JournalFeed`) for a run the app's journal holds, else from the feed
  (`RunFeed`). A reconnecting client's `Last-Event-ID` header (or `?after=N`) resumes after that event, so
  nothing is lost or repeated; once the run ended and every event was sent, a reconnect gets
  `204 No Content`, which tells an `EventSource` to stop. An id past the run's events so far (one the app
  never sent) is answered `400` at once, as an id that is not a number is.
- `GET /runs/{run_id}`: a page that follows the run in the browser (its script reads the events above).
- `POST /runs` (when the app was given `start`): starts a run from the request's JSON body; answers
  `201` with the run's id and where its events and page are. A body sent as anything but `application/json`
  is refused (`415`): a page on another site can post a form or a plain `fetch` here without asking, but not
  JSON, which needs a CORS preflight that this app does not answer. The app authenticates nobody.

sse-starlette writes the stream (framing, keep-alive pings, the client going away); the app decides what
is sent from where.
"""

from __future__ import annotations

import asyncio
import html
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import resources
from typing import TYPE_CHECKING, Any

from pydantic import JsonValue
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from agentkit._events import Event, RunStarted
from agentkit._observe import Observer
from agentkit._web._feed import RunFeed
from agentkit._web._journal import JournalFeed
from agentkit.errors import ResumeRefused, UnknownId

if TYPE_CHECKING:
    from agentkit.journal import Journal

__all__ = ["RETRY_MS", "Start", "create_app"]

Start = Callable[[JsonValue, Observer], Awaitable[object]]
"""How the app starts a run: `start(body, observer)` runs it with `observer` (the feed, and what the app needs
to learn the run's id) given as its observer, from the JSON `body` a `POST /runs` sent."""

RETRY_MS: int = 1000
"""How long a client waits before it reconnects (sent as the stream's `retry:`)."""

_STATIC = {"watch.js": "text/javascript", "watch.css": "text/css"}
_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def create_app(
    feed: RunFeed | None = None,
    *,
    journal: Journal | None = None,
    poll: float = 0.5,
    start: Start | None = None,
    ping: float = 15.0,
) -> Starlette:
    """The ASGI app that serves the runs `feed` observes, and those `journal` holds, as Server-Sent Events
    (see the module docstring).

    Args:
        feed: The runs' events: give the same `RunFeed` to each run as its observer (default: a new one).
        journal: Where journaled runs are followed from: a run it holds is served from its state there
            (`JournalFeed`), wherever it runs (this process, a worker, a resumed leg, a process gone since),
            numbered the same by every process that serves it; the feed serves the runs it does not hold.
        poll: Seconds between reads of the journal while a journaled run goes on.
        start: How `POST /runs` starts a run; without it, the app only follows runs started elsewhere
            (on the same event loop: the app's server's, for the feed's runs).
        ping: Seconds between keep-alive comments on a quiet stream.
    """
    followed = None if journal is None else JournalFeed(journal, poll=poll)
    app = _Routes(RunFeed() if feed is None else feed, followed, start, ping)
    routes = [
        Route("/runs/{run_id}/events", app.events),
        Route("/runs/{run_id}", app.page),
        Route("/static/{name}", app.static),
    ]
    if start is not None:
        routes.append(Route("/runs", app.begin, methods=["POST"]))
    return Starlette(routes=routes)


class _Routes:
    def __init__(self, feed: RunFeed, journal: JournalFeed | None, start: Start | None, ping: float) -> None:
        self.feed, self.journal, self.start, self.ping = feed, journal, start, ping
        self.tasks: set[asyncio.Task[object]] = set()
        """The runs `POST /runs` started (held, so that none is collected while it runs)."""

    async def events(self, request: Request) -> Response:
        run_id, feed = request.path_params["run_id"], self.feed
        after = _after(request)
        try:
            journaled = await self.journaled(run_id)
        except ResumeRefused as unreadable:
            return PlainTextResponse(f"run {run_id!r} cannot be followed from the journal: {unreadable}", 500)
        if journaled is None and run_id not in feed:
            return PlainTextResponse(f"no run {run_id!r} here", status_code=404)
        if after is None:
            return PlainTextResponse(
                "Last-Event-ID (or ?after=) is an event number: a whole number in ASCII digits, or -1 for none", 400
            )
        ended, count = (feed.ended(run_id), feed.count(run_id)) if journaled is None else journaled
        if after >= count:  # no client was sent it: waiting for it would hold the stream open, silent
            return PlainTextResponse(
                f"Last-Event-ID (or ?after=) {after} is past the events of run {run_id!r}: it has "
                f"{count} {'in all' if ended else 'so far'}, numbered from 0; reconnect with the last id you got",
                400,
            )
        if ended and after == count - 1:
            return Response(status_code=204)  # all sent: an EventSource stops reconnecting on 204
        if journaled is None or self.journal is None:
            events = feed.events(run_id, after=after)
        else:
            events = self.journal.events(run_id, after=after)
        return EventSourceResponse(_stream(events), ping=self.ping, headers=_HEADERS)

    async def journaled(self, run_id: str) -> tuple[bool, int] | None:
        """Whether the run is over and how many events it has, as the journal holds it (every process that serves
        it numbers its events alike, so it comes before the feed); `None`: no journal, or it does not hold the run."""
        if self.journal is None:
            return None
        try:
            read = await self.journal.read(run_id)
        except UnknownId:
            return None
        return read.ended, len(read.texts)

    async def page(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        if run_id not in self.feed and not await self.holds(run_id):
            return PlainTextResponse(f"no run {run_id!r} here", status_code=404)
        return HTMLResponse(_page(run_id), headers=_HEADERS)

    async def holds(self, run_id: str) -> bool:
        if self.journal is None:
            return False
        try:
            await self.journal.journal.run(run_id)
        except UnknownId:
            return False
        return True

    async def static(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in _STATIC:
            return PlainTextResponse("not found", status_code=404)
        text = resources.files("agentkit._web").joinpath("static", name).read_text(encoding="utf-8")
        return Response(text, media_type=_STATIC[name], headers=_HEADERS)

    async def begin(self, request: Request) -> Response:
        assert self.start is not None
        media_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
        if media_type != "application/json":
            sent = f"as {media_type!r}" if media_type else "without a Content-Type"
            return PlainTextResponse(
                f"POST /runs takes a JSON body sent as Content-Type: application/json; this one came {sent}",
                status_code=415,
            )
        try:
            body: JsonValue = json.loads(await request.body() or b"null")
        except (ValueError, RecursionError):  # not JSON, or nested past what Python parses
            return PlainTextResponse("the body is not JSON", status_code=400)
        first = _FirstRun(self.feed)
        task: asyncio.Task[object] = asyncio.create_task(_run(self.start, body, first), name="agentkit-web-run")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        waiting: list[asyncio.Future[Any]] = [first.started, task]
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        if not first.started.done() or first.started.cancelled():  # the run ended (or raised) before it started
            error = None if not task.done() or task.cancelled() else task.exception()
            return PlainTextResponse(f"the run did not start: {error!r}", status_code=500)
        run_id = first.started.result()
        links = {"run_id": run_id, "events": f"runs/{run_id}/events", "page": f"runs/{run_id}"}
        return JSONResponse(links, status_code=201, headers={"Location": f"runs/{run_id}"})


async def _run(start: Start, body: JsonValue, observer: _FirstRun) -> object:
    try:
        return await start(body, observer)
    finally:
        if not observer.started.done():
            observer.started.cancel()


class _FirstRun(Observer):
    """The feed, plus the id of the first run it sees start (what `POST /runs` answers with)."""

    def __init__(self, feed: RunFeed) -> None:
        self.feed = feed
        self.started: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    def on_event(self, event: Event) -> None:
        self.feed.on_event(event)
        if isinstance(event, RunStarted) and not self.started.done():
            self.started.set_result(event.run_id)


async def _stream(events: AsyncIterator[tuple[int, str]]) -> AsyncIterator[ServerSentEvent]:
    first = True
    async for number, text in events:
        yield ServerSentEvent(text, id=str(number), retry=RETRY_MS if first else None)
        first = False


def _after(request: Request) -> int | None:
    """The last event the client has (`-1`: none yet); `None` when what it sent is not an event number: ASCII
    digits, or `-1` (Python's `int` would also take `1_0`, `+2`, ` 3` and digits of other scripts)."""
    given = request.headers.get("last-event-id") or request.query_params.get("after")
    if given is None or given == "":
        return -1
    if given == "-1":
        return -1
    if not _NUMBER.fullmatch(given):
        return None
    try:
        return int(given)
    except ValueError:  # more digits than Python converts: no run has that many events
        return None


_NUMBER = re.compile(r"[0-9]+")
"""An event number as a client sends it back: the `id:` the app wrote, decimal ASCII digits."""


def _page(run_id: str) -> str:
    return _PAGE.format(run=html.escape(run_id, quote=True))


_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>agentkit run {run}</title>
<link rel="stylesheet" href="../static/watch.css">
<script src="../static/watch.js" defer></script>
</head>
<body data-run="{run}">
<header><h1>Run <code id="run-id"></code></h1><p id="status" class="status">connecting</p></header>
<main id="rounds"></main>
<section id="ending" hidden></section>
</body>
</html>
"""
