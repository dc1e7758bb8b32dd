"""Every text field of the journal round-trips exactly, on SQLite and on PostgreSQL.

PostgreSQL text cannot hold NUL, and no UTF-8 database can hold a lone surrogate (which is how
Python carries bytes that were not UTF-8, after ``surrogateescape``). The journal stores any text
losslessly on both backends: these tests write such text into every text column there is and
read it back.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel

from agentkit import (
    AfterProposal,
    LoopConfig,
    ProposedAction,
    Tier,
    ToolRetry,
    run_tool_loop_tiered,
    tool,
)
from agentkit._observe import Observer, dispatch
from agentkit._proposals import call_digest, canonical_json
from agentkit._tools import FunctionTool
from agentkit.events import Event, RunAborted, RunFinished, RunStarted
from agentkit.journal import Journal, JournalObserver, ProposalState, RunState, SQLiteJournal
from agentkit.journal._sql import from_stored, to_stored
from agentkit.testing import ScriptedCaller, call_step
from tests.support import Executor, expire_lease

NOT_UTF8 = b"caf\xe9 \xff\xfe".decode("utf-8", "surrogateescape")
"""Latin-1 bytes read as UTF-8 with ``surrogateescape``: lone low surrogates."""

HOSTILE = {
    "nul": "before\x00after\x00",
    "lone-surrogates": "high \ud800 low \udfff pair-halves \udbff\udc00",
    "not-utf8": NOT_UTF8,
    "escape-lookalike": "\uffff0000 \uffff \\u0000 \\x00",
    "mixed": "\x00" + NOT_UTF8 + "\ud83d" + "\uffff" + "😀 ü",
}
"""Text no backend stores as is, each in its own kind; ``mixed`` has all of them at once."""


@pytest.fixture(params=sorted(HOSTILE))
def text(request: pytest.FixtureRequest) -> str:
    value: str = HOSTILE[request.param]
    return value


class Args(BaseModel):
    text: str


def hostile_tool(name: str, outcome: str, text: str, *, tier: Tier = Tier.IRREVERSIBLE) -> FunctionTool[Args, str]:
    """A tool that returns its text in a batch, raises it, or refuses the call with it."""

    @tool(tier=tier, name=name)
    def act(args: Args) -> list[str]:
        if outcome == "raise":
            raise RuntimeError(text)
        if outcome == "retry":
            raise ToolRetry(text)
        return [args.text, text]

    return act


def action(text: str, *, tool_name: str = "act", round: int = 1) -> ProposedAction[Args]:
    return ProposedAction[Args].create(
        tool_name=tool_name, tier=Tier.IRREVERSIBLE, args=Args(text=text), rationale=text, round=round, run_id=text
    )


def test_stored_text_is_unchanged_unless_a_backend_cannot_hold_it() -> None:
    """Plain text (any Unicode but NUL, surrogates and U+FFFF) is stored as is; the rest comes back exactly."""
    for plain in ("", "plain", "ü😀\n\t\\u0000", "\ufffe"):
        assert to_stored(plain) == plain
    for value in HOSTILE.values():
        stored = to_stored(value)
        assert "\x00" not in stored
        stored.encode("utf-8")  # no lone surrogate left
        assert from_stored(stored) == value


def test_the_digest_of_args_holding_lone_surrogates_is_computed() -> None:
    """A call whose args hold text that is not UTF-8 gets a digest (text that is UTF-8 keeps its digest)."""
    known = "07e90fbd81d1f1a98af1d4fc31d66bb375afe93232baafccc057fac0b5c8f9cd"
    assert call_digest("act", Args(text="plain ü")) == known
    assert call_digest("act", Args(text=NOT_UTF8)) != call_digest("act", Args(text="caf? ??"))


async def test_a_proposal_keeps_every_text_field_exactly(journal: Journal, text: str) -> None:
    """Tool name, args, rationale, run id, approver, claimer, batch and every transition come back as given."""
    proposed = action(text, tool_name=f"act{text}")
    record = await journal.propose(proposed, proposed_by=f"by {text}")
    assert (record.tool_name, record.args, record.rationale, record.run_id) == (
        f"act{text}",
        {"text": text},
        text,
        text,
    )
    assert record.args_as(Args) == Args(text=text)
    assert record.digest == proposed.digest
    assert [p.id for p in await journal.pending()] == [record.id]
    # The same call proposed again is the same entry: the stored text compares equal in SQL.
    assert (await journal.propose(proposed)).id == record.id

    executed = action(text)
    id = (await journal.propose(executed)).id
    await journal.approve(id, f"alice {text}")
    execution = await journal.execute(id, hostile_tool("act", "return", text), worker=f"worker {text}")
    assert execution.ok
    done = await journal.get(id)
    assert done.state is ProposalState.EXECUTED
    assert (done.approved_by, done.claimed_by) == (f"alice {text}", f"worker {text}")
    assert done.batch_json is not None
    assert done.batch_size == 2
    history = await journal.history(id)
    assert [t.actor for t in history] == [f"run:{text}", f"alice {text}", f"worker {text}", f"worker {text}"]


@pytest.mark.parametrize("outcome", ["raise", "retry"])
async def test_a_failed_execution_keeps_its_error_text_exactly(journal: Journal, text: str, outcome: str) -> None:
    """A tool error or refusal holding any text ends the proposal failed (never stuck executing), text intact."""
    id = (await journal.propose(action(text))).id
    await journal.approve(id, "alice")
    execution = await journal.execute(id, hostile_tool("act", outcome, text))
    assert execution.error is not None
    failed = await journal.get(id)
    assert failed.state is ProposalState.FAILED
    assert failed.error == str(execution.error)
    assert failed.error is not None
    assert text in failed.error
    assert (await journal.history(id))[-1].note == failed.error


async def test_rejections_and_resolutions_keep_their_text_exactly(journal: Journal, text: str) -> None:
    """Who rejected and why, who resolved and the note: stored and read back exactly."""
    rejected = (await journal.propose(action(text, round=1))).id
    record = await journal.reject(rejected, f"bob {text}", f"because {text}")
    assert (record.rejected_by, record.reason) == (f"bob {text}", f"because {text}")
    assert (await journal.history(rejected))[-1].note == f"because {text}"

    abandoned = (await journal.propose(action(text, round=2))).id
    await journal.approve(abandoned, "alice")
    # Claim it without running anything, as a worker that died would have.
    journal._claim(abandoned, hostile_tool("act", "return", text), f"gone {text}")
    expire_lease(journal, abandoned)
    assert (await journal.get(abandoned)).claimed_by == f"gone {text}"
    resolved = await journal.resolve(abandoned, f"carol {text}", ProposalState.FAILED, f"checked {text}")
    assert (resolved.resolved_by, resolved.note) == (f"carol {text}", f"checked {text}")
    assert resolved.error == f"resolved by carol {text}: checked {text}"


class Agent(Executor[str]):
    """An executor whose class name is ordinary; its model name holds the hostile text."""

    def __init__(self, model: str) -> None:
        super().__init__(model, system="act")


def run_script(text: str) -> ScriptedCaller:
    """Refused once, propose once, then call a tool that raises: NUL reaches rationale and args through JSON."""
    # JSON from a model can carry NUL and U+FFFF, never a lone surrogate: the tools' errors carry those.
    wire = "model: " + "".join(c for c in text if not "\ud800" <= c <= "\udfff")
    return ScriptedCaller(
        [
            call_step(Args(text=wire), tool="refuse", rationale=wire),
            call_step(Args(text=wire + "!"), tool="propose", rationale=wire),
            call_step(Args(text=wire + "?"), tool="explode", rationale=wire),
        ]
    )


def run_tools(text: str) -> list[FunctionTool[Args, str]]:
    refuse = hostile_tool("refuse", "retry", text, tier=Tier.READ_ONLY)
    explode = hostile_tool("explode", "raise", text, tier=Tier.READ_ONLY)
    propose = hostile_tool("propose", "return", text)
    return [refuse, propose, explode]


class Capture(Observer):
    def __init__(self) -> None:
        self.events: list[Event] = []

    def on_event(self, event: Event) -> None:
        self.events.append(event)


@pytest.fixture
def observer(journal: Journal) -> Iterator[JournalObserver]:
    with JournalObserver(journal) as opened:
        yield opened


async def test_a_run_keeps_every_text_field_exactly(journal: Journal, observer: JournalObserver, text: str) -> None:
    """Model name, rationales, args, a tool's refusal and error: in the run, its rounds and its proposal, intact."""
    config = LoopConfig(after_proposal=AfterProposal.CONTINUE)
    result = await run_tool_loop_tiered(
        run_script(text), Agent(f"model {text}"), run_tools(text), None, config, observer=observer
    )
    assert result.error is not None
    assert observer.failures == 0, observer.last_error
    run = await journal.run(result.run_id)
    assert run.state is RunState.FINISHED
    assert run.model == f"model {text}"
    assert run.error == str(result.error)
    assert text in (run.error or "")
    rounds = await journal.rounds(result.run_id)
    assert [r.rationale for r in rounds] == [rec.rationale for rec in result.trace]
    assert [r.observation for r in rounds] == [rec.observation for rec in result.trace]
    assert [r.error for r in rounds] == [rec.error for rec in result.trace]
    assert rounds[0].observation is not None
    assert text in rounds[0].observation
    [pending] = await journal.pending()
    assert (pending.rationale, pending.args) == (result.proposed[0].rationale, result.proposed[0].args.model_dump())


async def test_an_unfinished_run_rebuilt_from_events_keeps_its_text(
    journal: Journal, observer: JournalObserver, text: str
) -> None:
    """The rounds of a run without a recorded end, rebuilt from the event log, keep every text exactly."""
    capture = Capture()
    config = LoopConfig(after_proposal=AfterProposal.CONTINUE)
    result = await run_tool_loop_tiered(
        run_script(text), Agent(f"model {text}"), run_tools(text), None, config, observer=capture
    )
    for event in capture.events:
        if not isinstance(event, RunFinished):
            dispatch((observer,), event)
    assert observer.flush(timeout=30)
    assert observer.failures == 0, observer.last_error
    run = await journal.run(result.run_id)
    assert (run.state, run.model) == (RunState.UNFINISHED, f"model {text}")
    rounds = await journal.rounds(result.run_id)
    assert not rounds[0].from_trace
    assert [r.observation for r in rounds[:1]] == [result.trace[0].observation]
    assert [r.error for r in rounds[2:3]] == [result.trace[2].error]
    assert [r.args_json for r in rounds[:3]] == [
        None if rec.call is None else canonical_json(rec.call) for rec in result.trace[:3]
    ]


def test_text_that_is_not_utf8_in_a_sqlite_file_is_read_not_refused(tmp_path: Path) -> None:
    """A row whose text is not UTF-8 (written by other code) reads back as surrogate-escaped text."""
    path = tmp_path / "j.db"
    SQLiteJournal(path)._close()
    with sqlite3.connect(path) as db:
        db.execute(
            "INSERT INTO agentkit_runs (id, agent, model, config, started_at) "
            "VALUES ('raw', CAST(X'616ce9' AS TEXT), 'm', '{}', '2024-05-01T09:30:00.000000+00:00')"
        )
    journal = SQLiteJournal(path, create=False)
    [run] = journal._runs()
    assert run.agent == b"al\xe9".decode("utf-8", "surrogateescape")
    journal._close()


class Hostile(Exception):
    """An error whose text is the hostile text."""


async def test_a_run_row_keeps_its_id_agent_model_tools_and_error_exactly(journal: Journal, text: str) -> None:
    """A run's id, agent, model, tool names and abort error, written from events, come back exactly."""
    run_id = f"run {text}"
    journal.record(RunStarted(run_id=run_id, agent=f"agent {text}", model=f"model {text}", tools=(text,), max_rounds=2))
    journal.record(RunAborted(run_id=run_id, error=Hostile(text)))
    run = await journal.run(run_id)
    assert (run.id, run.agent, run.model, run.config["tools"]) == (run_id, f"agent {text}", f"model {text}", [text])
    assert (run.state, run.error) == (RunState.ABORTED, f"aborted: Hostile: {text}")
    assert [r.id for r in await journal.runs()] == [run_id]
