"""Traces of the whole arc, on real journals (SQLite and PostgreSQL): propose, approve, resume, execute.

The approved call has its ``execute_tool`` span wherever it runs (a resumed run, ``execute_approved``,
``journal.execute``, a worker), saying who approved it; the resumed leg carries the first leg's
``gen_ai.conversation.id`` and links to the round it continues; a fork links to its parent; and the
metrics count what happened.
"""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.trace import Tracer

from agentkit import (
    LoopConfig,
    Prompt,
    RoleSpec,
    StopReason,
    Tier,
    Tool,
    ToolRoundInfo,
    approve,
    execute_approved,
    resume_tool_loop,
    run_tool_loop_tiered,
    tool,
)
from agentkit.journal import Journal, JournalObserver, ProposalState
from agentkit.testing import ScriptedCaller, call_step, done_step
from tests.observe.support import Telemetry, attrs, parent_of, span_id, telemetry_fixture, trace_id  # noqa: F401  # a fixture
from tests.support import Query, Target, corpus_search

TRACERS: list[Tracer] = []
"""The test's tracer, for the tools' own spans."""


@pytest.fixture(autouse=True)
def _tracer(telemetry: Telemetry) -> None:
    TRACERS[:] = [telemetry.tracer]


@tool(tier=Tier.IRREVERSIBLE)
async def wipe(args: Target) -> list[str]:
    """Delete a path for good."""
    with TRACERS[0].start_as_current_span("storage.delete"):
        return [f"wiped {args.path}"]


TOOLS: list[Tool[Any, str]] = [corpus_search, wipe]


class Planner:
    """An executor whose render does I/O of its own (a span), as fetching a template would."""

    def role(self) -> RoleSpec:
        return RoleSpec(model="planner")

    def render(self, ctx: str, info: ToolRoundInfo[str]) -> Prompt:
        with TRACERS[0].start_as_current_span("template.fetch"):
            return Prompt(system="plan", dynamic=f"{ctx} round {info.round}")


def first_leg() -> ScriptedCaller:
    return ScriptedCaller(
        [call_step(Query(query="old"), tool="search"), call_step(Target(path="/srv/old"), tool="wipe", rationale="old")]
    )


async def proposed(journal: Journal, telemetry: Telemetry) -> str:
    """A journaled, traced run that searches, then proposes a wipe; its id."""
    with JournalObserver(journal) as recorder:
        result = await run_tool_loop_tiered(
            first_leg(), Planner(), TOOLS, "clean", observer=[recorder, telemetry.observer()]
        )
    assert result.stop_reason is StopReason.PROPOSED
    return result.run_id


def point_attributes(telemetry: Telemetry, metric: str) -> list[dict[str, Any]]:
    return [dict(point.attributes or {}) for point in telemetry.points(metric)]


async def test_the_arc_on_a_journal_is_one_conversation_of_linked_traces(
    journal: Journal, telemetry: Telemetry
) -> None:
    """Propose, approve, resume: the resumed leg shares the conversation id and links to the proposing round; the
    approved call's span, under the resumed run, says who approved which proposal; its tool's own span nests
    under it; the metrics count the proposal, the decision and each model call."""
    run_id = await proposed(journal, telemetry)
    [pending] = await journal.pending()
    await journal.approve(pending.id, "ops@example.com")
    result = await journal.resume(
        run_id, ScriptedCaller([done_step("freed")]), Planner(), TOOLS, "clean", observer=telemetry.observer()
    )
    assert result.stop_reason is StopReason.EXECUTOR_DONE
    assert (await journal.get(pending.id)).state is ProposalState.EXECUTED

    first, second = telemetry.named("invoke_agent")
    assert attrs(first)["gen_ai.conversation.id"] == attrs(second)["gen_ai.conversation.id"] == run_id
    proposing = next(r for r in telemetry.named("agentkit.round") if attrs(r).get("agentkit.proposal.tool_name"))
    assert trace_id(proposing) == trace_id(first)
    [link] = second.links
    assert link.context.span_id == span_id(proposing)
    assert link.context.trace_id == trace_id(first)
    assert dict(link.attributes or {}) == {"agentkit.link": "resume", "agentkit.run_id": run_id, "agentkit.round": 2}
    assert attrs(second)["agentkit.continues.round"] == 2

    [approved] = telemetry.named("execute_tool wipe")
    assert parent_of(approved) == span_id(second)
    assert (
        attrs(approved).items()
        >= {
            "agentkit.approved": True,
            "agentkit.approval.approved_by": "ops@example.com",
            "agentkit.proposal.id": pending.id,
            "agentkit.tier": "IRREVERSIBLE",
            "gen_ai.tool.call.id": f"{run_id}:2",
            "gen_ai.conversation.id": run_id,
            "agentkit.round": 2,
            "agentkit.batch_size": 1,
        }.items()
    )
    assert "agentkit.proposal.digest" not in attrs(approved)  # content: only with capture_content
    [delete] = telemetry.named("storage.delete")
    assert parent_of(delete) == span_id(approved)

    # The run's own code (render) runs inside its round's span, in both legs.
    rounds = {span_id(r) for r in telemetry.named("agentkit.round")}
    fetches = telemetry.named("template.fetch")
    assert len(fetches) == 3
    assert all(parent_of(f) in rounds for f in fetches)

    # The state keeps each round's span context: what the resumed leg linked to.
    state = await journal.state(run_id)
    traced = [e.trace for e in state.entries if e.kind == "round"]
    assert len(traced) == 3
    assert all(traced)

    assert point_attributes(telemetry, "agentkit.proposals") == [
        {"gen_ai.tool.name": "wipe", "agentkit.tier": "IRREVERSIBLE"}
    ]
    [decided] = telemetry.points("agentkit.decisions")
    assert decided.value == 1
    assert dict(decided.attributes or {}) == {
        "agentkit.decision": "approved",
        "gen_ai.tool.name": "wipe",
        "agentkit.tier": "IRREVERSIBLE",
    }
    [duration] = telemetry.points("gen_ai.client.operation.duration")
    assert duration.count == 3
    assert dict(duration.attributes or {}) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "_OTHER",
        "gen_ai.request.model": "planner",
        "gen_ai.response.model": "planner",
    }


async def test_a_rejection_is_counted_and_runs_nothing(journal: Journal, telemetry: Telemetry) -> None:
    """A rejected proposal: no execute_tool span for it; the decision is counted as rejected."""
    run_id = await proposed(journal, telemetry)
    [pending] = await journal.pending()
    await journal.reject(pending.id, "bob", "still in use")
    await journal.resume(
        run_id, ScriptedCaller([done_step()]), Planner(), TOOLS, "clean", observer=telemetry.observer()
    )
    assert telemetry.named("execute_tool wipe") == []
    [decided] = telemetry.points("agentkit.decisions")
    assert dict(decided.attributes or {})["agentkit.decision"] == "rejected"


async def test_a_worker_gives_the_approved_call_its_span(journal: Journal, telemetry: Telemetry) -> None:
    """A journal worker runs the approved call: its span says who approved which proposal, under the span
    current in the worker; the resumed run uses the recorded batch and runs the call no second time."""
    run_id = await proposed(journal, telemetry)
    [pending] = await journal.pending()
    await journal.approve(pending.id, "ops")
    with telemetry.tracer.start_as_current_span("worker.poll") as poll:
        report = await journal.work([wipe], until_empty=True, observer=telemetry.observer())
    assert report.executed == 1
    [approved] = telemetry.named("execute_tool wipe")
    assert parent_of(approved) == poll.get_span_context().span_id
    assert attrs(approved)["agentkit.approval.approved_by"] == "ops"
    assert attrs(approved)["agentkit.proposal.id"] == pending.id
    assert attrs(approved)["gen_ai.conversation.id"] == run_id
    [delete] = telemetry.named("storage.delete")
    assert parent_of(delete) == span_id(approved)

    await journal.resume(
        run_id, ScriptedCaller([done_step()]), Planner(), TOOLS, "clean", observer=telemetry.observer()
    )
    assert len(telemetry.named("execute_tool wipe")) == 1


async def test_journal_execute_gives_the_approved_call_its_span(journal: Journal, telemetry: Telemetry) -> None:
    """``journal.execute(..., observer=)``: the approved call's span, with capture on, carries the digest too."""
    await proposed(journal, telemetry)
    [pending] = await journal.pending()
    await journal.approve(pending.id, "ops")
    await journal.execute(pending.id, wipe, observer=telemetry.observer(capture_content=True))
    [approved] = telemetry.named("execute_tool wipe")
    assert attrs(approved)["agentkit.proposal.digest"] == pending.digest
    assert attrs(approved)["gen_ai.tool.call.arguments"] == '{"path":"/srv/old"}'


async def test_a_fork_links_to_the_round_of_its_parent_it_was_forked_at(journal: Journal, telemetry: Telemetry) -> None:
    """``journal.fork`` then resume: the fork's first leg links to its parent's round 1 and names its parent."""
    run_id = await proposed(journal, telemetry)
    fork_id = await journal.fork(run_id, at_round=1)
    await journal.resume(
        fork_id, ScriptedCaller([done_step()]), Planner(), TOOLS, "clean", observer=telemetry.observer()
    )
    parent_round = next(r for r in telemetry.named("agentkit.round") if attrs(r)["agentkit.round"] == 1)
    fork = next(s for s in telemetry.named("invoke_agent") if attrs(s)["agentkit.run_id"] == fork_id)
    assert attrs(fork)["gen_ai.conversation.id"] == fork_id
    assert attrs(fork)["agentkit.fork.parent"] == run_id
    [link] = fork.links
    assert link.context.span_id == span_id(parent_round)
    assert dict(link.attributes or {}) == {"agentkit.link": "fork", "agentkit.run_id": run_id, "agentkit.round": 1}


async def test_in_process_resume_and_execute_approved_trace_the_approved_call(telemetry: Telemetry) -> None:
    """``resume_tool_loop``: the approved call's span is under the resumed run; ``execute_approved`` outside a run
    gives it a span under the current one."""
    config = LoopConfig()
    first = await run_tool_loop_tiered(first_leg(), Planner(), TOOLS, "c", config, observer=telemetry.observer())
    [proposal] = first.proposed
    approval = approve(proposal, approved_by="alice")
    resumed = await resume_tool_loop(
        ScriptedCaller([done_step()]),
        Planner(),
        TOOLS,
        "c",
        first.checkpoint,
        [approval],
        observer=telemetry.observer(),
    )
    assert resumed.stop_reason is StopReason.EXECUTOR_DONE
    second = telemetry.named("invoke_agent")[1]
    [approved] = telemetry.named("execute_tool wipe")
    assert parent_of(approved) == span_id(second)
    assert attrs(approved)["agentkit.approval.approved_by"] == "alice"
    assert "agentkit.proposal.id" not in attrs(approved)  # no journal holds it

    telemetry.exporter.clear()
    again = approve(proposal, approved_by="carol")
    with telemetry.tracer.start_as_current_span("request") as request:
        assert await execute_approved(again, wipe, observer=telemetry.observer()) == ["wiped /srv/old"]
    [approved] = telemetry.named("execute_tool wipe")
    assert parent_of(approved) == request.get_span_context().span_id
    assert attrs(approved)["agentkit.approval.approved_by"] == "carol"
    assert attrs(approved)["gen_ai.tool.call.id"] == f"{first.run_id}:2"
