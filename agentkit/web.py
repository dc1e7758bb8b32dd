"""Watch a run as it happens: its events as Server-Sent Events, over an ASGI app (Starlette).

`RunFeed` is an observer that keeps each run's events in their JSON form (`event.to_json()`);
`create_app(feed)` serves them: `GET /runs/{run_id}/events` streams a run's events with `id:` lines, and a
client that reconnects with `Last-Event-ID` (an `EventSource` does it by itself) goes on after the last event
it has, so nothing is lost, even when it reconnects after the run ended; `GET /runs/{run_id}` is a page that
shows the run (rounds, rationale, calls, results, proposals) in the browser. With `start=`, `POST /runs`
starts a run. With `journal=`, a run the journal holds is followed from its state there (`JournalFeed`):
a run executed elsewhere (a worker, a resumed leg, a process gone since) is served by any process, its
events numbered alike by all of them and across its legs. Install the extra: `pip install 'agentkit[web]'`.

```python
feed = RunFeed()
app = create_app(feed, start=lambda body, observer: run_tool_loop(caller, agent, tools, body, observer=observer))
```
"""

from __future__ import annotations

from agentkit._web._app import RETRY_MS, Start, create_app
from agentkit._web._feed import RunFeed
from agentkit._web._journal import FeedRead, JournalFeed

__all__ = ["RETRY_MS", "FeedRead", "JournalFeed", "RunFeed", "Start", "create_app"]
