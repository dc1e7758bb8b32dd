"""The web inbox served for real (uvicorn on a loopback port, in a thread), and headless Chromium to drive it.

The server's event loop owns the journal; a test reaches the journal through ``InboxServer.run``,
which runs a coroutine on that loop, so a test acts as a worker or another reviewer would.
"""

from __future__ import annotations

import asyncio
import html
import http.server
import os
import re
import shutil
import socket
import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import httpx2 as httpx
import pytest
from pydantic import BaseModel

from agentkit import LoopConfig, ProposedAction, Tier, run_tool_loop_tiered, tool
from agentkit._tools import FunctionTool
from agentkit.decisions import Evidence
from agentkit.journal import Journal, JournalObserver, ProposalRecord, Transition, WorkReport, open_journal
from agentkit.testing import ScriptedCaller, call_step
from tests.support import NO_WAIT, Executor

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver
    from starlette.types import Receive, Scope, Send

T = TypeVar("T")

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
REQUIRE_BROWSER = os.environ.get("AGENTKIT_REQUIRE_BROWSER") == "1"
"""Set by CI: a missing Chromium is then a failure, never a silent skip."""

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdefgh"
TOKENS = {"alice": ALICE, "bob": BOB}


class Mail(BaseModel):
    to: str
    body: str = ""
    copies: int = 1


class Find(BaseModel):
    query: str


class Passage(BaseModel):
    id: str
    text: str


def find_tool(text: str) -> FunctionTool[Find, Passage]:
    """A READ_ONLY ``find`` whose one passage, ``p:1``, holds ``text``."""

    @tool(tier=Tier.READ_ONLY, name="find")
    def find(args: Find) -> list[Passage]:
        """Find passages."""
        return [Passage(id="p:1", text=text)]

    return find


def mail_tool(sent: list[str]) -> FunctionTool[Mail, str]:
    """An irreversible ``mail`` tool that counts its calls in ``sent``."""

    @tool(tier=Tier.IRREVERSIBLE, name="mail")
    def mail(args: Mail) -> list[str]:
        """Send a mail."""
        sent.append(args.to)
        return [args.to]

    return mail


async def propose_mail(
    journal: Journal,
    to: str,
    *,
    body: str = "",
    rationale: str = "",
    run_id: str = "r1",
    evidence: Evidence | None = None,
) -> str:
    """A pending ``mail`` proposal (with ``evidence``: what its executor had seen); its id."""
    action = ProposedAction[BaseModel].create(
        tool_name="mail",
        tier=Tier.IRREVERSIBLE,
        args=Mail(to=to, body=body),
        rationale=rationale,
        round=1,
        run_id=run_id,
        evidence=evidence,
    )
    return (await journal.propose(action)).id


def csrf_of(page: str) -> str:
    """The CSRF token of the first form in ``page``."""
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found is not None, "the page has no form"
    return found.group(1)


def as_a_browser_posts(page: str, id: str) -> dict[str, str]:
    """Proposal ``id``'s amend fields in ``page`` as a browser posts them when the reviewer leaves them as shown: HTML's
    parser reads a NUL in an attribute as U+FFFD, and a one-line text field drops every CR and LF from its value (the
    HTML standard's value sanitization for ``<input type=text>``)."""
    form = re.search(rf'<form method="post" action="/proposals/{re.escape(id)}/amend".*?</form>', page, re.DOTALL)
    assert form is not None, f"the page has no amend form for proposal {id}"
    fields = re.findall(r'<input type="text" id="[^"]*" name="(arg\.[^"]*)" value="([^"]*)">', form.group(0))
    return {name: re.sub("[\r\n]", "", html.unescape(value).replace("\0", "\ufffd")) for name, value in fields}


class Clock:
    """A clock the test moves: the CSRF tokens' age is read from it."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class InboxServer:
    """``agentkit inbox``'s app over the journal at ``url``, served by uvicorn on a free loopback port."""

    def __init__(
        self, url: str, *, tokens: Mapping[str, str] = TOKENS, poll: float = 0.2, csrf_max_age: float = 3600.0
    ) -> None:
        self.clock = Clock()
        self._url = url
        self._tokens = dict(tokens)
        self._poll = poll
        self._csrf_max_age = csrf_max_age
        self._socket = socket.create_server(("127.0.0.1", 0))
        self.base = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._server: Any = None
        self._failure: BaseException | None = None
        self.requests: list[Mapping[str, str]] = []
        """Each request the inbox answered: its headers, and its path and query as ``:path`` and ``:query``."""

    def __enter__(self) -> InboxServer:
        self._thread.start()
        if not self._started.wait(30) or self._failure is not None:
            raise RuntimeError(f"the inbox did not start: {self._failure!r}")
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.should_exit = True
        self._thread.join(30)

    def run(self, work: Callable[[Journal], Awaitable[T]]) -> T:
        """``work(journal)`` on the server's loop, as a worker or another reviewer acts; its result."""

        async def call() -> T:
            return await work(self._journal)

        return asyncio.run_coroutine_threadsafe(call(), self._loop).result(30)

    def propose(self, to: str, *, rationale: str = "", body: str = "", evidence: Evidence | None = None) -> str:
        """A pending ``mail`` proposal (``propose_mail``); its id."""

        async def put(journal: Journal) -> str:
            return await propose_mail(journal, to, rationale=rationale, body=body, evidence=evidence)

        return self.run(put)

    def record_run(self, task: str, text: str, *, mail: Mail | None = None, rationale: str = "p:1 is outdated") -> str:
        """A tiered run of ``task`` (its ctx), recorded in the journal: ``find`` runs live and returns a passage
        holding ``text``, then the executor proposes ``mail`` (to ops@example.com by default) with ``rationale``;
        the proposal's id."""
        script = [
            call_step(Find(query="pluto"), tool="find"),
            call_step(mail or Mail(to="ops@example.com"), tool="mail", rationale=rationale),
        ]

        async def run(journal: Journal) -> str:
            tools: list[FunctionTool[Any, Any]] = [find_tool(text), mail_tool([])]
            config = LoopConfig(retry=NO_WAIT)
            with JournalObserver(journal) as observer:
                result = await run_tool_loop_tiered(
                    ScriptedCaller(script), Executor[Any](), tools, task, config, observer=observer
                )
            [record] = [p for p in await journal.pending() if p.run_id == result.run_id]
            return record.id

        return self.run(run)

    def get(self, id: str) -> ProposalRecord:
        """The proposal as the journal holds it now."""

        async def get(journal: Journal) -> ProposalRecord:
            return await journal.get(id)

        return self.run(get)

    def history(self, id: str) -> list[Transition]:
        """The proposal's transitions."""

        async def read(journal: Journal) -> list[Transition]:
            return await journal.history(id)

        return self.run(read)

    def work(self, sent: list[str]) -> WorkReport:
        """A worker drains every approved ``mail`` call, as ``agentkit worker`` would; ``sent`` counts the calls."""

        async def drain(journal: Journal) -> WorkReport:
            return await journal.work([mail_tool(sent)], until_empty=True)

        return self.run(drain)

    def client(self, token: str | None = ALICE) -> httpx.Client:
        """An HTTP client that sends ``token`` as a bearer token (none: no token)."""
        headers = {"authorization": f"Bearer {token}"} if token is not None else {}
        return httpx.Client(base_url=self.base, headers=headers, follow_redirects=False)

    def _serve(self) -> None:
        import uvicorn

        from agentkit._inbox_web._app import create_app
        from agentkit._inbox_web._security import Reviewers

        async def serve() -> None:
            self._journal = open_journal(self._url)
            app = create_app(
                self._journal,
                Reviewers(self._tokens),
                poll=self._poll,
                csrf_max_age=self._csrf_max_age,
                clock=self.clock,
            )
            started = self._started
            requests = self.requests

            async def recorded(scope: Scope, receive: Receive, send: Send) -> None:
                if scope["type"] == "http":
                    headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
                    requests.append(headers | {":path": scope["path"], ":query": scope["query_string"].decode()})
                await app(scope, receive, send)

            class Server(uvicorn.Server):
                async def startup(self, sockets: list[socket.socket] | None = None) -> None:
                    await super().startup(sockets)
                    started.set()

            self._server = Server(uvicorn.Config(recorded, log_level="warning", lifespan="off"))
            try:
                await self._server.serve(sockets=[self._socket])
            finally:
                await self._journal.close()

        try:
            self._loop.run_until_complete(serve())
        except BaseException as failure:
            self._failure = failure
            self._started.set()
        finally:
            self._loop.close()


class OtherSite:
    """Another site, at ``http://127.0.0.2:PORT/`` (an address is a site of its own, so not the inbox's
    127.0.0.1): one page whose link ``#go`` leads to ``href``, as a chat app or a web mail client shows a link."""

    def __init__(self, href: str) -> None:
        page = f'<!doctype html><title>elsewhere</title><a id="go" href="{html.escape(href)}">the inbox</a>'.encode()

        class Page(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/html; charset=utf-8")
                self.send_header("content-length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.2", 0), Page)
        self.url = f"http://127.0.0.2:{self._server.server_address[1]}/"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> OtherSite:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(30)


def browser_or_skip() -> None:
    """Skip (or, under ``AGENTKIT_REQUIRE_BROWSER=1``, fail) without Selenium, Chromium or chromedriver."""
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if shutil.which(path) is None]
    try:
        import selenium  # noqa: F401
    except ModuleNotFoundError:
        missing.append("selenium (extra 'test')")
    if missing:
        why = f"missing {', '.join(missing)} (apt-get install chromium chromium-driver)"
        if REQUIRE_BROWSER:
            pytest.fail(f"AGENTKIT_REQUIRE_BROWSER=1 but {why}")
        pytest.skip(why)


@contextmanager
def chromium(*, width: int = 1100, height: int = 900) -> Iterator[WebDriver]:
    """Headless Chromium from the system, through the system's chromedriver: nothing is downloaded."""
    browser_or_skip()
    # With the driver's path given, Selenium never runs Selenium Manager, which would look for (and fetch) one.
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-extensions"):
        options.add_argument(flag)
    options.add_argument(f"--window-size={width},{height}")
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
