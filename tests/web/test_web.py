"""The SSE app over HTTP: a run's events as Server-Sent Events with ids, resumed from Last-Event-ID."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx2 as httpx
import pytest

from agentkit.events import parse_event
from tests.web.support import WAIT, WebServer, read_stream

pytest.importorskip("sse_starlette", reason="the web extra is not installed")


@pytest.fixture
def server() -> Iterator[WebServer]:
    with WebServer() as running:
        yield running


def _finished(server: WebServer) -> str:
    run_id = server.start()
    server.release()
    assert read_stream(server.base, f"/runs/{run_id}/events")[0] == 200
    assert server.ended(run_id)
    return run_id


def test_a_run_is_served_as_server_sent_events_numbered_from_zero(server: WebServer) -> None:
    """Every event of a run comes as one message whose id is its number and whose data is its JSON form,
    from run_start to run_end; the stream ends with the run."""
    run_id = _finished(server)
    status, messages = read_stream(server.base, f"/runs/{run_id}/events")
    assert status == 200
    assert [id for id, _ in messages] == [str(n) for n in range(server.count(run_id))]
    kinds = [parse_event(data).kind for _, data in messages]
    assert kinds[0] == "run_start"
    assert kinds[-1] == "run_end"
    assert {"tool_call", "tool_result", "proposal"} <= set(kinds)
    assert all(json.loads(data)["run_id"] == run_id for _, data in messages)


def test_a_reconnect_with_last_event_id_goes_on_after_that_event(server: WebServer) -> None:
    """A client that reconnects with Last-Event-ID gets exactly the events after it: none lost, none twice."""
    run_id = _finished(server)
    _, everything = read_stream(server.base, f"/runs/{run_id}/events")
    _, rest = read_stream(server.base, f"/runs/{run_id}/events", last_event_id="3")
    assert rest == everything[4:]


def test_a_reconnect_after_the_last_event_of_an_ended_run_gets_no_content(server: WebServer) -> None:
    """Once a run ended and the client has its last event, a reconnect is answered 204, which stops an
    EventSource from reconnecting again."""
    run_id = _finished(server)
    last = str(server.count(run_id) - 1)
    status, messages = read_stream(server.base, f"/runs/{run_id}/events", last_event_id=last)
    assert (status, messages) == (204, [])


def test_a_stream_follows_a_run_while_it_runs(server: WebServer) -> None:
    """A client connected while the run waits in its tool gets the rest of the events as they happen."""
    run_id = server.start()
    with (
        httpx.Client(base_url=server.base, timeout=WAIT) as client,
        client.stream("GET", f"/runs/{run_id}/events") as reply,
    ):
        lines = reply.iter_lines()
        seen: list[str] = []
        for line in lines:
            if line.startswith("data:"):
                seen.append(parse_event(line.removeprefix("data:").strip()).kind)
                if seen[-1] == "tool_call":
                    break
        assert not server.ended(run_id)
        server.release()
        for line in lines:
            if line.startswith("data:"):
                seen.append(parse_event(line.removeprefix("data:").strip()).kind)
    assert seen[0] == "run_start"
    assert seen[-1] == "run_end"
    assert "tool_result" in seen


def test_unknown_runs_and_bad_event_ids_are_refused(server: WebServer) -> None:
    """A run the feed never saw is 404; a Last-Event-ID that is not a number is 400."""
    run_id = _finished(server)
    assert read_stream(server.base, "/runs/nope/events")[0] == 404
    assert read_stream(server.base, f"/runs/{run_id}/events", last_event_id="x")[0] == 400
    with httpx.Client(base_url=server.base) as client:
        assert client.get("/runs/nope").status_code == 404
        page = client.get(f"/runs/{run_id}")
        assert page.status_code == 200
        assert "script-src" not in page.headers["content-security-policy"]
        assert "default-src 'self'" in page.headers["content-security-policy"]
        assert client.get("/static/watch.js").headers["content-type"].startswith("text/javascript")
        assert client.get("/static/../web.py").status_code == 404


def test_an_event_id_past_a_running_runs_events_is_refused_at_once(server: WebServer) -> None:
    """A Last-Event-ID (or ?after=) past the events of a run still going is answered 400 at once, saying so, not
    with a stream that stays silent until the run ends; the same id for an ended run is refused too."""
    run_id = server.start()
    past = str(server.count(run_id) + 5)
    with httpx.Client(base_url=server.base, timeout=WAIT) as client:
        reply = client.get(f"/runs/{run_id}/events", headers={"last-event-id": past})
        assert reply.status_code == 400
        assert "past the events" in reply.text
        assert client.get(f"/runs/{run_id}/events", params={"after": past}).status_code == 400
    assert not server.ended(run_id)
    server.release()
    assert read_stream(server.base, f"/runs/{run_id}/events")[0] == 200
    assert read_stream(server.base, f"/runs/{run_id}/events", last_event_id=str(server.count(run_id)))[0] == 400


@pytest.mark.parametrize("given", ["1_0", "+2", " 3", "3 ", "-2", "1.5", "0x1", "\u0663"])
def test_an_event_id_that_is_not_ascii_digits_is_refused(server: WebServer, given: str) -> None:
    """Only ASCII digits (or -1, none yet) are an event number: what Python's int() would also take (underscores,
    a sign, spaces, digits of other scripts) is answered 400, as ?after= and as a header."""
    run_id = _finished(server)
    with httpx.Client(base_url=server.base, timeout=WAIT) as client:
        assert client.get(f"/runs/{run_id}/events", params={"after": given}).status_code == 400
        if given.isascii() and given == given.strip():  # a header's own spaces are HTTP's, not part of its value
            assert client.get(f"/runs/{run_id}/events", headers={"last-event-id": given}).status_code == 400
    assert read_stream(server.base, f"/runs/{run_id}/events", last_event_id="-1")[1]


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("text/plain", b'{"task":"wire money","x":"="}'),  # what a cross-site form with enctype=text/plain sends
        ("application/x-www-form-urlencoded", b"task=wire+money"),
        (
            "multipart/form-data; boundary=b",
            b'--b\r\nContent-Disposition: form-data; name="task"\r\n\r\nx\r\n--b--\r\n',
        ),
        (None, b""),  # a cross-site fetch without a body
        ("application/jsonp", b"{}"),
    ],
    ids=["text-plain", "form-urlencoded", "multipart", "none", "not-quite-json"],
)
def test_a_run_is_not_started_from_a_body_not_sent_as_json(
    server: WebServer, content_type: str | None, body: bytes
) -> None:
    """POST /runs refuses (415) a body sent as anything but application/json, which a page on another site can post
    without a CORS preflight; no run starts. The same body sent as JSON starts one."""
    headers = {"origin": "https://elsewhere.example"} | ({} if content_type is None else {"content-type": content_type})
    with httpx.Client(base_url=server.base, timeout=WAIT) as client:
        refused = client.post("/runs", content=body, headers=headers)
        assert refused.status_code == 415
        assert "application/json" in refused.text
        assert server.bodies == []
        sent = client.post(
            "/runs", content=b'{"task":"x"}', headers={"content-type": "Application/JSON; charset=utf-8"}
        )
    assert sent.status_code == 201
    assert server.bodies == [{"task": "x"}]
    assert sent.json()["run_id"] in server.feed


def test_a_json_body_nested_past_what_python_parses_is_refused_with_400(server: WebServer) -> None:
    """A body nested deeper than Python's parser goes is not JSON to the app: 400, no run, no 500."""
    with httpx.Client(base_url=server.base, timeout=WAIT) as client:
        refused = client.post("/runs", content=b"[" * 50_000, headers={"content-type": "application/json"})
    assert refused.status_code == 400
    assert server.bodies == []
