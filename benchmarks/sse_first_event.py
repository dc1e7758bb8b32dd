"""How soon a browser sees a streamed step: the model server's first byte to the first `RationaleDelta` an
`EventSource` client receives from the SSE app (`agentkit.web`).

``python -m benchmarks.sse_first_event [--runs 30] [--out DIR]``

One process holds the model server (``agentkit.testing.FakeOpenAIServer``, streaming each reply in chunks of
8 characters at once, with no pacing) and the SSE app (``create_app`` under uvicorn, on its own event loop
in a thread); a loopback relay between the caller and the model server notes the wall-clock time at which
the first byte of each reply passes it (a fresh connection per run, so its first byte is the reply's). The
client is headless Chromium (the system's, through its chromedriver): for each run it opens an
`EventSource` on the run's events and notes, in epoch milliseconds (`performance.timeOrigin +
performance.now()`), when the first `rationale_delta` message arrives. The model server holds each reply
back (``FakeReply(delay=...)``) until the browser is connected, so the figure is the time from the
server's first byte to the browser's first delta: the caller's parsing of the stream, the loop, the event's
JSON form, the SSE write and the browser's parse. A run whose browser was not yet connected when the first
byte passed is not counted (the file says how many were left out).

Writes ``sse-first-event-<date>.json`` and ``.md`` (with the date, the machine and its load) to ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import socket
import statistics
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpx2 as httpx
from pydantic import BaseModel

from agentkit import LoopConfig, Observer, Prompt, RoleSpec, Tier, ToolRoundInfo, run_tool_loop, tool
from agentkit.providers.openai import OpenAICaller
from agentkit.testing import FakeOpenAIServer, FakeReply
from agentkit.web import RunFeed, create_app
from benchmarks import harness

T = TypeVar("T")

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
HOLD = 0.4
"""Seconds the model server holds each reply back, so that the browser is connected before its first byte."""
RATIONALE = "Nothing is known yet, so I answer from what the request says and stop here."
STEP = {"rationale": RATIONALE, "decision": {"done": True}}
LISTEN = """
window.firstDelta = null; window.connectedAt = null;
const source = new EventSource(arguments[0]);
window.benchSource = source;
source.onmessage = (message) => {
  const now = performance.timeOrigin + performance.now();
  const kind = JSON.parse(message.data).kind;
  if (kind === "run_start" && window.connectedAt === null) window.connectedAt = now;
  if (kind === "rationale_delta" && window.firstDelta === null) { window.firstDelta = now; source.close(); }
};
"""


class Relay:
    """A loopback TCP relay to `target`; `first_byte` is the wall-clock time (seconds since the epoch) at which
    the first byte from the target passed it on the latest connection."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.first_byte: float | None = None
        self.port = 0

    async def start(self) -> None:
        server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        self.first_byte = None

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter, downstream: bool) -> None:
            while (data := await source.read(65536)) and not sink.is_closing():
                if downstream and self.first_byte is None:
                    self.first_byte = time.time()
                sink.write(data)
                await sink.drain()
            sink.close()

        with contextlib.suppress(asyncio.CancelledError):  # the benchmark's end cancels a relay still open
            await asyncio.gather(pipe(reader, up_writer, False), pipe(up_reader, writer, True), return_exceptions=True)


class _Agent:
    def role(self) -> RoleSpec:
        return RoleSpec(model="bench")

    def render(self, ctx: str, info: ToolRoundInfo[str]) -> Prompt:
        return Prompt(system="Answer.", dynamic=ctx)


class _Query(BaseModel):
    query: str


@tool(tier=Tier.READ_ONLY, name="search")
def _search(args: _Query) -> list[str]:
    """Never called: the step is done at once."""
    return []


class Serving:
    """The SSE app and the relay, on an event loop in a thread of their own."""

    def __init__(self, model: FakeOpenAIServer) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        host, port = model.base_url.removeprefix("http://").split("/")[0].split(":")
        self.relay = Relay((host, int(port)))
        self.feed = RunFeed()
        self.base = ""
        self.server: Any = None

    def run(self, work: Callable[[], Awaitable[T]]) -> T:
        return asyncio.run_coroutine_threadsafe(work(), self.loop).result(60)

    async def _start_run(self, body: object, observer: Observer) -> object:
        url = f"http://127.0.0.1:{self.relay.port}/v1"
        async with OpenAICaller(base_url=url, stream=True) as caller:
            return await run_tool_loop(caller, _Agent(), _search, "q", LoopConfig(), observer=observer)

    def __enter__(self) -> Serving:
        import uvicorn

        self.thread.start()
        self.run(self.relay.start)
        listening = socket.create_server(("127.0.0.1", 0))
        self.base = f"http://127.0.0.1:{listening.getsockname()[1]}"
        app = create_app(self.feed, start=self._start_run)
        config = uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1)
        started = threading.Event()

        class Server(uvicorn.Server):
            async def startup(self, sockets: list[socket.socket] | None = None) -> None:
                await super().startup(sockets)
                started.set()

        self.server = Server(config)
        self.loop.call_soon_threadsafe(lambda: self.loop.create_task(self.server.serve(sockets=[listening])))
        if not started.wait(30):
            raise RuntimeError("the SSE app did not start")
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.server.should_exit = True
        time.sleep(1.5)
        self.run(_cancel_the_rest)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


async def _cancel_the_rest() -> None:
    current = asyncio.current_task()
    rest = [task for task in asyncio.all_tasks() if task is not current]
    for task in rest:
        task.cancel()
    await asyncio.gather(*rest, return_exceptions=True)


@contextmanager
def chromium() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-extensions"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def _wait(driver: Any, script: str) -> Any:
    deadline = time.monotonic() + 30
    while (value := driver.execute_script(f"return {script}")) is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the page never had {script}")
        time.sleep(0.005)
    return value


def measure(runs: int) -> dict[str, Any]:
    samples: list[float] = []
    late = 0
    with FakeOpenAIServer() as model, Serving(model) as serving, chromium() as driver:
        driver.get(f"{serving.base}/static/watch.css")  # any page of the app's origin
        for _ in range(runs + 1):  # the first is a warm-up, not counted
            model.add(FakeReply.value(STEP, chunk_chars=8, delay=HOLD))
            with httpx.Client(base_url=serving.base) as client:
                run_id = client.post("/runs", json={}).json()["run_id"]
            driver.execute_script(LISTEN, f"/runs/{run_id}/events")
            first_delta = float(_wait(driver, "window.firstDelta")) / 1000
            connected = float(_wait(driver, "window.connectedAt")) / 1000
            first_byte = serving.relay.first_byte
            assert first_byte is not None
            if connected > first_byte:
                late += 1
                continue
            samples.append((first_delta - first_byte) * 1000)
    counted = samples[1:] if len(samples) > runs else samples
    ordered = sorted(counted)
    return {
        "runs": runs,
        "left_out_late": late,
        "samples_ms": counted,
        "median_ms": statistics.median(counted),
        "p90_ms": ordered[max(0, int(len(ordered) * 0.9) - 1)],
        "min_ms": ordered[0],
        "max_ms": ordered[-1],
        "chunk_chars": 8,
        "client": "headless Chromium EventSource",
    }


def markdown(report: dict[str, Any]) -> str:
    env = report["environment"]
    return (
        f"# SSE: the model server's first byte to the browser's first RationaleDelta ({env['date']})\n\n"
        f"Median {report['median_ms']:.2f} ms, p90 {report['p90_ms']:.2f} ms over {len(report['samples_ms'])} runs "
        f"({report['left_out_late']} left out: the browser connected after the first byte).\n\n"
        f"`{report['command']}` on {env['machine']} at commit `{env['commit']}`.\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--out", type=Path, default=harness.RESULTS)
    args = parser.parse_args()
    if shutil.which(CHROMIUM) is None or shutil.which(CHROMEDRIVER) is None:
        raise SystemExit(f"needs {CHROMIUM} and {CHROMEDRIVER} (apt-get install chromium chromium-driver)")
    env = harness.environment()
    report = measure(args.runs)
    env["load_after"] = os.getloadavg()
    report = {"environment": env, "command": f"python -m benchmarks.sse_first_event --runs {args.runs}", **report}
    print(json.dumps({k: v for k, v in report.items() if k != "samples_ms"}))
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"sse-first-event-{env['date'][:10]}"
    (args.out / f"{stem}.json").write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    (args.out / f"{stem}.md").write_text(markdown(report), encoding="utf-8")


if __name__ == "__main__":
    main()
