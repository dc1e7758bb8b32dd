"""docs/observability.md against real runs: the trace it shows is one a run exports, and its attribute table
lists exactly the attributes each span kind carries (Temporal's spans are checked in
``tests/temporal/test_otel.py``)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode, Tracer

from agentkit import (
    AfterProposal,
    LoopConfig,
    RoleSpec,
    StopReason,
    Tier,
    approve,
    resume_tool_loop,
    run_tool_loop,
    run_tool_loop_tiered,
    tool,
)
from agentkit.errors import Throttled
from agentkit.journal import JournalObserver, open_journal
from agentkit.otel import OTelObserver
from agentkit.provenance import ProvenancePolicy, Trust
from agentkit.providers.openai import OpenAICaller
from agentkit.testing import FakeOpenAIServer, FakeReply, ScriptedCaller, call_step, done_step
from tests.observe.support import (  # noqa: F401  # the fixture telemetry
    CONFIG,
    DOCS,
    Telemetry,
    TracedTransport,
    attrs,
    docs_section,
    documented_attributes,
    hanging,
    kind_of,
    parent_of,
    planted_run,
    span_id,
    telemetry_fixture,
    undocumented,
)
from tests.support import Doc, Finder, Query, search


@pytest.fixture(name="traced_caller")
async def traced_caller_fixture(server: FakeOpenAIServer, telemetry: Telemetry) -> AsyncIterator[OpenAICaller]:
    """An ``OpenAICaller`` on the fake server whose HTTP requests make spans of their own."""
    async with httpx2.AsyncClient(transport=TracedTransport(telemetry.tracer)) as http:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="unused", http_client=http)
        yield OpenAICaller(client, max_reasks=0)


class Documented(Finder):
    """The executor of the documented trace: every request setting set."""

    def role(self) -> RoleSpec:
        return RoleSpec(
            model="gpt-4.1-mini",
            fallback_model="gpt-4.1",
            temperature=0.0,
            max_tokens=400,
            seed=1,
            prompt_type="finder",
        )


def corpus_tools(traced: Tracer) -> list[Any]:
    """The documented run's tools: a search and an irreversible delete, each making a span of its own."""

    @tool(tier=Tier.READ_ONLY)
    def search(args: Query) -> list[Doc]:
        """Search the corpus."""
        with traced.start_as_current_span("corpus.query"):
            return [Doc(id=f"{args.query}-1"), Doc(id=f"{args.query}-2")]

    @tool(tier=Tier.IRREVERSIBLE)
    def delete(args: Query) -> list[Doc]:
        """Delete a document."""
        with traced.start_as_current_span("corpus.delete"):
            return [Doc(id=args.query)]

    return [search, delete]


async def documented_run(caller: OpenAICaller, fake: FakeOpenAIServer, watcher: OTelObserver, traced: Tracer) -> None:
    """The run of the docs' trace: a retried 503, a tool that makes its own span, a proposal; then, approved,
    the resumed leg runs the call and finishes."""
    tools = corpus_tools(traced)
    fake.add(
        FakeReply.error(503),
        FakeReply.value(call_step(Query(query="otel"), tool="search")),
        FakeReply.value(call_step(Query(query="otel-1"), tool="delete")),
    )
    result = await run_tool_loop_tiered(caller, Documented(), tools, "ctx", CONFIG, observer=watcher)
    assert result.stop_reason is StopReason.PROPOSED
    approval = approve(result.proposed[0], approved_by="ops@example.com")
    fake.add(FakeReply.value(done_step("deleted")))
    checkpoint = result.checkpoint
    resumed = await resume_tool_loop(caller, Documented(), tools, "ctx", checkpoint, [approval], observer=watcher)
    assert resumed.stop_reason is StopReason.EXECUTOR_DONE


async def journaled_arc(tmp_path: Path, watcher: OTelObserver, traced: Tracer) -> None:
    """The arc on a journal: proposed, approved in the inbox, forked, and both resumed."""
    journal = open_journal(str(tmp_path / f"arc-{watcher.capture_content}.db"))
    tools = corpus_tools(traced)
    script = [call_step(Query(query="a"), tool="search"), call_step(Query(query="a-1"), tool="delete")]
    with JournalObserver(journal) as recorder:
        first = await run_tool_loop_tiered(
            ScriptedCaller(script), Documented(), tools, "ctx", CONFIG, observer=[recorder, watcher]
        )
    [pending] = await journal.pending()
    await journal.approve(pending.id, "ops")
    fork = await journal.fork(first.run_id, at_round=1)
    await journal.resume(fork, ScriptedCaller([done_step()]), Documented(), tools, "ctx", observer=watcher)
    await journal.resume(first.run_id, ScriptedCaller([done_step()]), Documented(), tools, "ctx", observer=watcher)
    await journal.close()


async def steered_run(watcher: OTelObserver) -> None:
    """Under `ProvenancePolicy(steered=True)`: an untrusted read, a trusted one, then a removal of what the trusted
    one returned, a proposal whose value is marked steered."""

    @tool(tier=Tier.READ_ONLY, trust=Trust.UNTRUSTED)
    def inbox(args: Query) -> list[Doc]:
        """Mail someone else wrote."""
        return [Doc(id="mail")]

    @tool(tier=Tier.READ_ONLY)
    def lookup(args: Query) -> list[Doc]:
        """The user's own records."""
        return [Doc(id=f"found-{args.query}")]

    @tool(tier=Tier.IRREVERSIBLE)
    def remove(args: Query) -> list[Doc]:
        """Remove a record."""
        return [Doc(id=args.query)]

    script = [
        call_step(Query(query="a"), tool="inbox"),
        call_step(Query(query="bravo"), tool="lookup"),
        call_step(Query(query="found-bravo"), tool="remove"),
    ]
    config = LoopConfig(provenance=ProvenancePolicy(steered=True), after_proposal=AfterProposal.STOP)
    tools = [inbox, lookup, remove]
    await run_tool_loop_tiered(ScriptedCaller(script), Documented(), tools, "ctx", config, observer=watcher)


SHOWN = {
    "invoke_agent": ("gen_ai.provider.name", "agentkit.continues.round", "agentkit.outcome", "agentkit.stop_reason"),
    "agentkit.round": ("agentkit.round", "agentkit.proposal.tool_name"),
    "chat": (
        "agentkit.attempts",
        "gen_ai.response.finish_reasons",
        "gen_ai.usage.input_tokens",
        "gen_ai.usage.output_tokens",
    ),
    "execute_tool": (
        "gen_ai.tool.type",
        "agentkit.tier",
        "agentkit.approved",
        "agentkit.approval.approved_by",
        "agentkit.batch_size",
    ),
    "agentkit.attempt": ("agentkit.attempt", "error.type"),
    "agentkit.proposal": ("agentkit.proposal.tool_name", "agentkit.proposal.tier"),
    "link": ("agentkit.link", "agentkit.round"),
    "POST": ("http.response.status_code",),
}
"""What the docs' tree shows of each span, event and link (by the first word of its name): what does not vary by run."""


def rendered(spans: tuple[ReadableSpan, ...]) -> str:
    """The spans as trees (children, events and links in time order), with the attributes that do not vary by run."""

    def shown(name: str, attributes: Any) -> str:
        keys = SHOWN.get(name.split(" ")[0], ())
        values = {key: attributes[key] for key in keys if attributes and key in attributes}
        text = " ".join(f"{key}={','.join(map(str, v)) if isinstance(v, tuple) else v}" for key, v in values.items())
        return f"{name}  {text}".rstrip()

    children: dict[int | None, list[ReadableSpan]] = {}
    for span in spans:
        children.setdefault(parent_of(span), []).append(span)
    lines: list[str] = []

    def walk(span: ReadableSpan, prefix: str, last: bool, top: bool) -> None:
        status = "  [ERROR]" if span.status.status_code is StatusCode.ERROR else ""
        lines.append(
            ("" if top else prefix + ("└── " if last else "├── ")) + shown(span.name, span.attributes) + status
        )
        inner = "" if top else prefix + ("    " if last else "│   ")
        items: list[tuple[int, ReadableSpan | str]] = [(c.start_time or 0, c) for c in children.get(span_id(span), [])]
        items += [(span.start_time or 0, "⤷ " + shown("link", link.attributes)) for link in span.links]
        items += [(e.timestamp, "· " + shown(e.name, e.attributes)) for e in span.events]
        items.sort(key=lambda item: item[0])
        for index, (_, item) in enumerate(items):
            end = index == len(items) - 1
            if isinstance(item, str):
                lines.append(inner + ("└── " if end else "├── ") + item)
            else:
                walk(item, inner, end, False)

    for root in sorted(children.get(None, []), key=lambda s: s.start_time or 0):
        walk(root, "", True, True)
    return "\n".join(lines)


async def test_docs_show_a_real_trace(
    traced_caller: OpenAICaller, server: FakeOpenAIServer, telemetry: Telemetry
) -> None:
    """The span trees in docs/observability.md are the ones a real run and its resumed leg export (regenerated
    on request)."""
    await documented_run(traced_caller, server, telemetry.observer(), telemetry.tracer)
    tree = "```text\n" + rendered(telemetry.spans()) + "\n```\n"
    if os.environ.get("AGENTKIT_REGENERATE_DOCS"):
        text = DOCS.read_text(encoding="utf-8")
        start, end = "<!-- span-tree:start -->\n", "<!-- span-tree:end -->"
        head, tail = text[: text.index(start) + len(start)], text[text.index(end) :]
        DOCS.write_text(head + tree + tail, encoding="utf-8")
    assert docs_section("span-tree") == tree


async def test_every_span_attribute_is_the_documented_one(
    traced_caller: OpenAICaller, server: FakeOpenAIServer, telemetry: Telemetry, tmp_path: Path
) -> None:
    """Across runs covering every path (the journaled arc, a fork, timeouts and retries included), each span kind
    carries exactly the attributes the docs' table lists."""
    table = documented_attributes()
    seen: dict[tuple[str, str], set[bool]] = {}
    for capture in (False, True):
        telemetry.exporter.clear()
        observer = telemetry.observer(capture_content=capture)
        await documented_run(traced_caller, server, observer, telemetry.tracer)
        await planted_run(traced_caller, server, observer)
        await journaled_arc(tmp_path, observer, telemetry.tracer)
        await steered_run(observer)
        await run_tool_loop(ScriptedCaller([Throttled()]), Finder(), search, "ctx", CONFIG, observer=observer)
        await run_tool_loop(
            ScriptedCaller([done_step()]), Finder(), search, "c", LoopConfig(max_rounds=None), observer=observer
        )
        await run_tool_loop(
            ScriptedCaller([call_step(Query(query="a"))]),
            Finder(),
            hanging,
            "c",
            LoopConfig(tool_timeout=0.01),
            observer=observer,
        )
        task = asyncio.create_task(
            run_tool_loop(ScriptedCaller([call_step(Query(query="a"))]), Finder(), hanging, "c", observer=observer)
        )
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        spans = telemetry.spans()
        assert undocumented(spans, table) == []
        for span in spans:
            kind = kind_of(span)
            if kind is not None:
                for key in attrs(span):
                    seen.setdefault((kind, key), set()).add(capture)
    for entry, recorded in table.items():
        if entry[0] == "durable run":
            continue  # a Temporal client's span: checked in tests/temporal/test_otel.py
        assert entry in seen, f"{entry} is documented but was never recorded"
        if "capture_content" in recorded:
            assert seen[entry] == {True}, f"{entry} was recorded without capture_content"
