"""assert_type checks for the events' JSON form, the SSE app and the closing round's reason (mypy only)."""

from __future__ import annotations

from typing import assert_type

from pydantic import BaseModel, JsonValue
from starlette.applications import Starlette

from agentkit import PriorCall, StopReason, ToolRoundInfo, events
from agentkit.errors import ReportedError
from agentkit.journal import Journal
from agentkit.web import RETRY_MS, FeedRead, JournalFeed, RunFeed, Start, create_app
from tests.typing.models import Doc


def json_form(event: events.Event, call: events.ToolCallStarted) -> None:
    assert_type(event.to_json(), str)
    assert_type(event.seq, int)
    assert_type(event.round, int)
    assert_type(events.parse_event(event.to_json()), events.Event)
    assert_type(events.parse_event(b"{}"), events.Event)
    assert_type(events.EVENT_SCHEMA, dict[str, JsonValue])
    assert_type(call.count, int)
    assert_type(call.label, str)
    assert_type(call.args, BaseModel)
    args = events.EventArgs()
    assert_type(args, events.EventArgs)
    error = ReportedError("boom", type_name="ToolError")
    assert_type(error.type_name, str)


def closing(info: ToolRoundInfo[Doc]) -> None:
    assert_type(info.closed_by, StopReason | None)
    assert_type(info.repeated, PriorCall[Doc] | None)


async def web(start: Start) -> None:
    feed = RunFeed(max_runs=10)
    assert_type(create_app(feed), Starlette)
    assert_type(create_app(feed, start=start, ping=5.0), Starlette)
    assert_type(RETRY_MS, int)
    assert_type(feed.ended("r"), bool)
    assert_type(feed.count("r"), int)
    async for number, text in feed.events("r", after=3):
        assert_type(number, int)
        assert_type(text, str)


async def journaled(journal: Journal) -> None:
    assert_type(create_app(journal=journal, poll=0.1), Starlette)
    feed = JournalFeed(journal, poll=0.1)
    read = await feed.read("r")
    assert_type(read, FeedRead)
    assert_type(read.texts, tuple[str, ...])
    assert_type(read.ended, bool)
    async for number, text in feed.events("r", after=3):
        assert_type(number, int)
        assert_type(text, str)
