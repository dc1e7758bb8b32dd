"""The SSE app over a journal: a journaled run's events derived from its state, followed by any process.

The runs are recorded through the test's journal handle (`journal`, on SQLite and PostgreSQL); the app reads
them through a handle of its own, as a process that did not run them would.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Iterator

import httpx2 as httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentkit import LoopConfig, RepeatPolicy, Tier, run_once, run_tool_loop, tool
from agentkit._state import RunCheckpoint
from agentkit._web._journal import derived_events
from agentkit.errors import ToolError
from agentkit.events import EVENT_SCHEMA, RunFinished, RunStarted, parse_event
from agentkit.journal import Journal, JournalObserver, RunRecord, UnknownId, open_journal
from agentkit.testing import ScriptedCaller, call_step, done_step
from agentkit.web import JournalFeed
from tests.support import NO_WAIT, Classifier, Doc, Executor, Label, Query, Recorder
from tests.web.support import WAIT, WebServer, approve_and_resume, proposed_run, read_stream, resume_with

pytest.importorskip("sse_starlette", reason="the web extra is not installed")


@pytest.fixture
def web(journal_url: str) -> Iterator[WebServer]:
    with WebServer(journal_url=journal_url) as running:
        yield running


def _checked(messages: list[tuple[str, str]], run_id: str) -> list[str]:
    """The kinds of `messages`, having checked that each is an event's JSON form (as EVENT_SCHEMA describes it,
    read back by parse_event) of the run, whose `seq` is its message's id."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(EVENT_SCHEMA)
    kinds: list[str] = []
    for id, data in messages:
        validator.validate(json.loads(data))
        event = parse_event(data)
        assert event.to_json() == data
        assert (event.run_id, str(event.seq)) == (run_id, id)
        kinds.append(event.kind)
    return kinds


async def test_a_run_journaled_elsewhere_is_followed_and_a_reconnect_after_a_restart_loses_nothing(
    journal: Journal, web: WebServer
) -> None:
    """A run recorded by another journal handle is followed over HTTP while it runs; the app goes down and comes
    back meanwhile, and a client that reconnects with the Last-Event-ID it had gets every later event, once."""
    gate = asyncio.Event()
    running = asyncio.create_task(proposed_run(journal, gate))
    run_id = ""
    while not run_id:  # the run's start is recorded before its first round
        await asyncio.sleep(0.01)
        run_id = next((run.id for run in await journal.runs()), "")
    async with (
        httpx.AsyncClient(base_url=web.base, timeout=WAIT) as client,
        client.stream("GET", f"/runs/{run_id}/events") as reply,
    ):
        assert reply.status_code == 200
        lines = reply.aiter_lines()
        first = await anext(line async for line in lines if line.startswith("data:"))
    assert parse_event(first.removeprefix("data:").strip()).kind == "run_start"
    assert not running.done()  # it waits in its search: the client was following a live run

    await asyncio.to_thread(web.stop)
    gate.set()
    await running
    await asyncio.to_thread(web.serve)

    status, rest = await asyncio.to_thread(read_stream, web.base, f"/runs/{run_id}/events", last_event_id="0")
    _, everything = await asyncio.to_thread(read_stream, web.base, f"/runs/{run_id}/events")
    assert status == 200
    assert rest == everything[1:]
    assert [id for id, _ in everything] == [str(n) for n in range(len(everything))]
    kinds = _checked(everything, run_id)
    round_1 = ["rationale_delta", "tool_call", "tool_result"]
    assert kinds == ["run_start", *round_1, "rationale_delta", "proposal", "run_end"]
    for last in range(len(everything) - 1):
        _, after = await asyncio.to_thread(read_stream, web.base, f"/runs/{run_id}/events", last_event_id=str(last))
        assert after == everything[last + 1 :]


async def test_a_resumed_runs_events_keep_one_increasing_seq_across_legs(journal: Journal, web: WebServer) -> None:
    """A resumed run's second leg goes on numbering after its first: the first leg's events read the same as
    before, and a client that had the first leg's last event gets the second leg from the next number."""
    run_id = await proposed_run(journal)
    _, first_leg = await asyncio.to_thread(read_stream, web.base, f"/runs/{run_id}/events")
    await approve_and_resume(journal, run_id)
    last = first_leg[-1][0]
    _, second_leg = await asyncio.to_thread(read_stream, web.base, f"/runs/{run_id}/events", last_event_id=last)
    _, everything = await asyncio.to_thread(read_stream, web.base, f"/runs/{run_id}/events")
    assert everything == first_leg + second_leg
    assert [int(id) for id, _ in everything] == list(range(len(everything)))
    kinds = _checked(everything, run_id)
    assert kinds.count("run_start") == kinds.count("run_end") == 2
    resumed = parse_event(second_leg[0][1])
    assert resumed.kind == "run_start"
    assert resumed.continues is not None
    assert [(d.tool_name, d.approved, d.by) for d in resumed.continues.decisions] == [("mail", True, "ops@example.com")]
    assert _checked(second_leg, run_id)[1:3] == ["tool_call", "tool_result"]  # the approved mail ran


async def test_an_ended_journaled_run_answers_no_content_once_sent_in_full(journal: Journal, web: WebServer) -> None:
    """Once a journaled run ended and the client has its last event, a reconnect is answered 204; a client one
    event short gets that event; a run the journal never saw is 404."""
    run_id = await proposed_run(journal)
    _, everything = await asyncio.to_thread(read_stream, web.base, f"/runs/{run_id}/events")
    last = len(everything) - 1
    assert await asyncio.to_thread(read_stream, web.base, f"/runs/{run_id}/events", last_event_id=str(last)) == (
        204,
        [],
    )
    one_short = await asyncio.to_thread(read_stream, web.base, f"/runs/{run_id}/events", last_event_id=str(last - 1))
    assert one_short == (200, everything[-1:])
    assert (await asyncio.to_thread(read_stream, web.base, "/runs/nope/events"))[0] == 404
    with httpx.Client(base_url=web.base) as client:
        assert client.get(f"/runs/{run_id}").status_code == 200  # the page of a run only the journal holds


async def test_an_event_id_past_a_journaled_runs_events_is_refused_at_once(journal: Journal, web: WebServer) -> None:
    """A Last-Event-ID past the events the journal holds of a run, going on or ended, is answered 400 at once
    (the journal says how many events the run has so far), not with a silent stream."""
    gate = asyncio.Event()
    running = asyncio.create_task(proposed_run(journal, gate))
    run_id = ""
    while not run_id:
        await asyncio.sleep(0.01)
        run_id = next((run.id for run in await journal.runs()), "")
    async with httpx.AsyncClient(base_url=web.base, timeout=WAIT) as client:
        reply = await client.get(f"/runs/{run_id}/events", headers={"last-event-id": "500"})
        assert reply.status_code == 400
        assert "past the events" in reply.text
        assert not running.done()
        gate.set()
        await running
        _, everything = await asyncio.to_thread(read_stream, web.base, f"/runs/{run_id}/events")
        past = await client.get(f"/runs/{run_id}/events", params={"after": str(len(everything))})
        assert past.status_code == 400


async def test_every_read_of_a_journaled_run_begins_with_the_events_of_the_earlier_reads(journal: Journal) -> None:
    """The events derived from a run's state as it grows, leg after leg, always begin with those derived before:
    an event's number means the same event in every read."""
    feed = JournalFeed(journal)
    with pytest.raises(UnknownId):
        await feed.read("nope")
    run_id = await proposed_run(journal)
    first = await feed.read(run_id)
    assert first.ended
    await approve_and_resume(journal, run_id)
    second = await feed.read(run_id)
    assert second.texts[: len(first.texts)] == first.texts
    assert len(second.texts) > len(first.texts)
    assert second.ended
    streamed = [(number, text) async for number, text in feed.events(run_id, after=len(first.texts) - 1)]
    assert streamed == list(enumerate(second.texts))[len(first.texts) :]


@functools.cache
def _recorded() -> tuple[RunRecord, RunCheckpoint]:
    """A run of two legs (a search, a proposal; approved, then a search and done) as a journal records it."""

    async def record() -> tuple[RunRecord, RunCheckpoint]:
        journal = open_journal(":memory:", in_memory=True)
        try:
            run_id = await proposed_run(journal)
            await approve_and_resume(journal, run_id)
            return await journal.run(run_id), await journal.state(run_id)
        finally:
            await journal.close()

    return asyncio.run(record())


@given(cut=st.integers(min_value=0, max_value=20))
def test_the_events_of_any_prefix_of_a_state_are_the_first_events_of_the_whole(cut: int) -> None:
    """For a run's state cut after any of its entries, the events derived are the first events derived from
    the whole state: numbers never move as the state grows."""
    record, state = _recorded()
    whole = [event.to_json() for event in derived_events(record, state)]
    part = [
        event.to_json() for event in derived_events(record, state.model_copy(update={"entries": state.entries[:cut]}))
    ]
    assert whole[: len(part)] == part
    assert len(part) < len(whole) or cut >= len(state.entries)


async def test_a_journaled_run_without_state_is_served_as_its_start_and_its_end(journal: Journal) -> None:
    """A run the journal holds no state for (a single shot) gives its start, then, once it ended, its end as
    the journal recorded it: outcome, stop reason, rounds."""
    with JournalObserver(journal) as observer:
        result = await run_once(
            ScriptedCaller([{"label": "billing"}]), Classifier(), "text", schema=Label, observer=observer
        )
    read = await JournalFeed(journal).read(result.run_id)
    events = [parse_event(text) for text in read.texts]
    assert read.ended
    assert [event.kind for event in events] == ["run_start", "run_end"]
    end = events[-1]
    assert isinstance(end, RunFinished)
    assert (end.result.outcome, end.result.stop_reason, end.result.rounds) == (
        result.outcome,
        result.stop_reason,
        result.rounds,
    )


_SHARED = ("run_start", "tool_call", "tool_result", "proposal", "degeneration", "run_end")
"""The kinds of event both a live run and its journal give (the journal has no deltas, model calls or round starts)."""


def _comparable(texts: list[str]) -> list[dict[str, object]]:
    """The events of the shared kinds, without what only the process that ran them knows: the numbering (each
    counts its own), the caller, the time a call took, the classes of errors."""
    kept = []
    for text in texts:
        data = json.loads(text)
        if data["kind"] not in _SHARED:
            continue
        for field in ("seq", "caller", "seconds"):
            data.pop(field, None)
        if isinstance(data.get("error"), dict):
            data["error"] = data["error"]["message"]
        if data["kind"] == "run_end":
            data["result"]["error"] = (data["result"]["error"] or {}).get("message")
        kept.append(data)
    return kept


@pytest.mark.parametrize("ending", ["stalemate", "tool_error"])
async def test_the_events_derived_from_the_journal_are_the_live_runs_own(journal: Journal, ending: str) -> None:
    """A run's events derived from its journal match, field by field, those its observers got live (of the kinds
    the journal records): a refused repeat and a stalemate, a call that ran, a tool that failed, the ending."""

    @tool(tier=Tier.READ_ONLY)
    def search(args: Query) -> list[Doc]:
        """Search."""
        if args.query == "broken":
            raise ToolError("the index is down", tool_name="search")
        return [Doc(id=args.query), Doc(id="more")]

    steps = [call_step(Query(query="a"), tool=search, rationale="look")]
    if ending == "stalemate":
        steps += [call_step(Query(query="a"), tool=search, rationale="again")] * 2  # refused once, then a stalemate
    else:
        steps += [call_step(Query(query="broken"), tool=search, rationale="break")]
    config = LoopConfig(retry=NO_WAIT, on_repeat=RepeatPolicy.REFUSE, repeat_refusals=1)
    live = Recorder()
    with JournalObserver(journal) as observer:
        result = await run_tool_loop(
            ScriptedCaller(steps), Executor[Doc](), [search], "ctx", config, observer=[observer, live]
        )
    read = await JournalFeed(journal).read(result.run_id)
    _checked([(str(n), text) for n, text in enumerate(read.texts)], result.run_id)
    derived = _comparable(list(read.texts))
    assert derived == _comparable([event.to_json() for event in live.events])
    kinds = [data["kind"] for data in derived]
    if ending == "stalemate":
        assert kinds == ["run_start", "tool_call", "tool_result", "degeneration", "degeneration", "run_end"]
    else:
        assert kinds == ["run_start", "tool_call", "tool_result", "tool_call", "tool_result", "run_end"]


async def test_a_rejected_proposal_is_the_resumed_legs_decision_and_nothing_runs(journal: Journal) -> None:
    """A run resumed after its proposal was rejected: its second leg starts with that decision (as the live leg's
    start has it), no call of the rejected tool follows, and the leg's events match the live leg's."""
    run_id = await proposed_run(journal)
    first = await JournalFeed(journal).read(run_id)
    [pending] = await journal.pending()
    await journal.reject(pending.id, "ops@example.com", "not today")
    live = Recorder()
    await resume_with(journal, run_id, ScriptedCaller([done_step()]), observer=live)
    read = await JournalFeed(journal).read(run_id)
    second = list(read.texts[len(first.texts) :])
    assert _comparable(second) == _comparable([event.to_json() for event in live.events])
    start = parse_event(second[0])
    assert isinstance(start, RunStarted)
    assert start.continues is not None
    assert [(d.tool_name, d.approved, d.by) for d in start.continues.decisions] == [("mail", False, "ops@example.com")]
    assert [parse_event(text).kind for text in second] == ["run_start", "run_end"]


def test_a_call_a_standing_grant_approved_shows_as_the_call_that_ran_not_as_a_proposal() -> None:
    """A proposal a standing grant approved at once (its decision follows it in the same round) is shown as the call
    that ran, with its result, as the live run shows it: no proposal awaits anyone."""
    from agentkit import Outcome, StopReason
    from agentkit._state import DecisionEntry, EndEntry, RoundEntry, RoundOutcome
    from agentkit.journal import RunState

    args = '{"to":"team@example.com"}'
    proposed = RoundEntry(
        round=1, outcome=RoundOutcome.PROPOSED, tool="mail", tier=Tier.IRREVERSIBLE, args=args, call_digest="d"
    )
    granted = DecisionEntry(round=1, call_digest="d", approved=True, by="grant:g1", batch='["sent"]')
    state = RunCheckpoint.start("r", LoopConfig(), ())
    for entry in (proposed, granted, EndEntry(stop_reason=StopReason.EXECUTOR_DONE, outcome=Outcome.APPLIED)):
        state = state.appended(entry)
    record = RunRecord(id="r", state=RunState.FINISHED, agent="A", model="m", config={}, started_at=None)
    events = derived_events(record, state)
    assert [event.kind for event in events] == ["run_start", "tool_call", "tool_result", "run_end"]
    assert [parse_event(event.to_json()).seq for event in events] == [0, 1, 2, 3]
    without_grant = derived_events(record, state.model_copy(update={"entries": state.entries[:1]}))
    assert [event.kind for event in without_grant] == ["run_start", "proposal"]  # a decision yet to come
