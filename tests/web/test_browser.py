"""The SSE app in a real browser: headless Chromium follows a streamed run with `EventSource`.

The run streams its steps from `FakeOpenAIServer` (paced chunks), so the page shows each rationale growing,
then the call, its result and the proposal. The server is taken down while the run goes on and brought back
on the same port: the browser reconnects by itself with `Last-Event-ID` and gets every event it missed,
none twice. Without Chromium the tests skip, except under ``AGENTKIT_REQUIRE_BROWSER=1`` (CI).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from agentkit.journal import Journal
from agentkit.testing import FakeOpenAIServer, FakeReply
from tests.inbox.support import chromium
from tests.web.support import RATIONALES, WAIT, WebServer, approve_and_resume, proposed_run, read_stream, wire_steps

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

pytest.importorskip("sse_starlette", reason="the web extra is not installed")


@pytest.fixture
def web(server: FakeOpenAIServer) -> Iterator[WebServer]:
    for step in wire_steps():
        server.add(FakeReply.value(step, chunk_chars=4, pace=0.02))
    with WebServer(model_url=server.base_url) as running:
        yield running


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    with chromium() as driver:
        yield driver


def wait_until(browser: WebDriver, script: str) -> object:
    """Wait until `script` (a JavaScript expression) is truthy in the page; its value."""
    from selenium.webdriver.support.wait import WebDriverWait

    return WebDriverWait(browser, WAIT).until(lambda driver: driver.execute_script(f"return {script}"))


def text(browser: WebDriver, css: str) -> str:
    from selenium.webdriver.common.by import By

    found: str = browser.find_element(By.CSS_SELECTOR, css).text
    return found


def test_the_page_shows_the_run_as_it_streams_and_a_reconnect_loses_nothing(web: WebServer, browser: WebDriver) -> None:
    """The page shows round 1's rationale grow delta by delta, then its call running; with the server down the
    run goes on, and once it is back the page reconnects and shows the result, round 2 and the proposal, having
    received every event exactly once."""
    run_id = web.start()
    browser.get(f"{web.base}/runs/{run_id}")
    wait_until(browser, "document.querySelector('#round-1 .call.running') !== null")
    assert text(browser, "#round-1 .rationale") == RATIONALES[0]
    assert int(str(wait_until(browser, "document.querySelector('#round-1 .rationale').dataset.updates"))) > 1
    assert text(browser, "#round-1 .call .label") == "Running search"

    web.stop()
    wait_until(browser, "document.getElementById('status').textContent === 'reconnecting'")
    web.release()
    deadline = time.monotonic() + WAIT
    while not web.ended(run_id):
        assert time.monotonic() < deadline, "the run did not end"
        time.sleep(0.05)
    web.serve()

    wait_until(browser, "document.body.dataset.closed === 'true'")
    assert text(browser, "#round-1 .call .result") == "1 result"
    assert text(browser, "#round-1 .call .label") == "search"
    assert text(browser, "#round-2 .rationale") == RATIONALES[1]
    assert "Proposed: mail" in text(browser, "#round-2 .proposal")
    assert "Ended: applied" in text(browser, "#ending")
    everything = list(range(web.count(run_id)))
    assert browser.execute_script("return window.agentkitReceived") == everything  # the server sent none twice
    assert browser.execute_script("return window.agentkitSeen") == everything


async def test_the_page_follows_a_run_from_its_journal(journal: Journal, journal_url: str, browser: WebDriver) -> None:
    """A run recorded through another journal handle, stopped at its proposal, then approved and resumed: the
    page shows both legs from the journal's events (the call and its result, the proposal, the approved call
    and the ending), each event received once, and stops."""
    run_id = await proposed_run(journal)
    await approve_and_resume(journal, run_id)
    with WebServer(journal_url=journal_url) as web:
        browser.get(f"{web.base}/runs/{run_id}")
        wait_until(browser, "document.body.dataset.closed === 'true'")
        _, everything = read_stream(web.base, f"/runs/{run_id}/events")
    assert text(browser, "#round-1 .rationale") == RATIONALES[0]
    assert text(browser, "#round-1 .call .result") == "1 result"
    assert "Proposed: mail" in text(browser, "#round-2 .proposal")
    assert text(browser, "#round-2 .call .result") == "1 result"  # the approved mail, run by the resumed leg
    assert "Ended: applied" in text(browser, "#ending")
    assert browser.execute_script("return window.agentkitReceived") == list(range(len(everything)))
