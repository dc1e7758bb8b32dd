"""The picture of a run followed in the browser in ``docs/streaming.md``, taken with the browser tests' own tooling.

    python -m tests.web.screenshot docs/streaming.png

It serves the SSE app (``agentkit.web``) over a run that streams its steps from ``FakeOpenAIServer``: a search,
then a mail, which becomes a proposal. Headless Chromium opens the run's page while round 1's search waits,
the search is let go, and the page is saved once the run has ended.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from agentkit.testing import FakeOpenAIServer, FakeReply
from tests.inbox.support import chromium
from tests.web.support import WAIT, WebServer, wire_steps


def main(path: str) -> None:
    with FakeOpenAIServer() as model:
        for step in wire_steps():
            model.add(FakeReply.value(step, chunk_chars=4, pace=0.02))
        with WebServer(model_url=model.base_url) as web, chromium(width=900, height=760) as driver:
            run_id = web.start()
            driver.get(f"{web.base}/runs/{run_id}")
            _wait(lambda: bool(driver.execute_script("return document.querySelector('.call.running') !== null")))
            web.release()
            _wait(lambda: driver.execute_script("return document.body.dataset.closed") == "true")
            driver.save_screenshot(path)


def _wait(done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError("the page did not get there")
        time.sleep(0.05)


if __name__ == "__main__":
    main(sys.argv[1])
