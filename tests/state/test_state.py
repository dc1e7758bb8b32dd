"""The run's state as one value: entries appended with chained digests, one fold, and a lossless JSON round trip
for any text, float or nesting a run accepted."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, JsonValue

from agentkit import (
    Completion,
    LoopConfig,
    RunCheckpoint,
    StopReason,
    StructuredRequest,
    Tier,
    Usage,
    approve,
    resume_tool_loop,
    run_tool_loop,
    run_tool_loop_tiered,
    tool,
)
from agentkit._outcome import Outcome
from agentkit._state import (
    STATE_VERSION,
    DecisionEntry,
    EndEntry,
    RoundEntry,
    RoundOutcome,
    _content,
    json_text,
    tool_entry,
)
from agentkit.errors import ResumeRefused
from agentkit.testing import ScriptedCaller, call_step, done_step
from tests.support import Executor, PathArgs, Query, Target, rechained

M = TypeVar("M", bound=BaseModel)

TEXT = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=12)
"""Any text at all: lone surrogates, NUL, U+FFFF, astral characters."""
FLOATS = st.floats(allow_nan=True, allow_infinity=True)


def rounds(texts: list[str], floats: list[float]) -> list[RoundEntry | DecisionEntry | EndEntry]:
    """Entries of a run: a call that ran, a proposal and its decision, and an end, carrying the given values."""
    batch = json_text([{"text": t, "score": f} for t, f in zip(texts, floats, strict=False)])
    text = "".join(texts)
    return [
        RoundEntry(
            round=1,
            outcome=RoundOutcome.RAN,
            tool="search",
            args=json_text({"query": text}),
            batch=batch,
            rationale=text,
        ),
        RoundEntry(
            round=2,
            outcome=RoundOutcome.PROPOSED,
            tool="wipe",
            tier=Tier.IRREVERSIBLE,
            args=json_text({"path": text}),
            observation=text,
            call_digest="d" * 64,
            model=text,
        ),
        DecisionEntry(round=2, call_digest="d" * 64, approved=False, by=text, reason=text, observation=text),
        EndEntry(stop_reason=StopReason.EXECUTOR_DONE, outcome=Outcome.SILENT, error=text, elapsed=1.5),
    ]


TOOL_SET = (tool_entry("search", Tier.READ_ONLY, Query), tool_entry("wipe", Tier.IRREVERSIBLE, Target))
"""The tool set of the states ``state_of`` builds (the tools ``rounds`` calls)."""


def state_of(entries: list[RoundEntry | DecisionEntry | EndEntry], run_id: str = "run-1") -> RunCheckpoint:
    state = RunCheckpoint.start(run_id, LoopConfig(), TOOL_SET)
    for entry in entries:
        state = state.appended(entry)
    return state


@settings(max_examples=60, deadline=None)
@given(texts=st.lists(TEXT, min_size=1, max_size=4), floats=st.lists(FLOATS, min_size=1, max_size=4))
def test_any_state_round_trips_through_json_exactly_and_verifies(texts: list[str], floats: list[float]) -> None:
    """Whatever text (surrogates, NUL, U+FFFF) and floats (NaN, infinities) a state holds, its JSON reads back
    to an equal value whose digests check out."""
    state = state_of(rounds(texts, floats))
    again = RunCheckpoint.model_validate_json(state.model_dump_json())
    assert again == state
    again.verify()
    first = again.entries[0]
    assert isinstance(first, RoundEntry)
    assert len(json.loads(first.batch or "")) == min(len(texts), len(floats))  # the batch text is JSON Python reads


def test_entries_built_without_validation_digest_as_validated_ones() -> None:
    """The loop makes entries with ``model_construct`` (its own values); their digests are a validated entry's."""
    built = RoundEntry.model_construct(round=1, outcome=RoundOutcome.RAN, tool="t", args="{}", batch="[]", tier=Tier(0))
    checked = RoundEntry.model_validate(built.model_dump(mode="json"))
    assert state_of([built]).digest == state_of([checked]).digest


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("rationale", "edited"),
        ("batch", '[{"score":null,"text":"a"}]'),
        ("requests", 9),
        ("tier", 0),
        ("outcome", "retried"),
        ("elapsed", 7.0),
        ("by_model", '{"gpt-4o":{"input_tokens":9,"output_tokens":0,"requests":1}}'),
    ],
)
def test_an_edit_to_an_entry_is_refused_naming_it(field: str, value: Any) -> None:
    """Any field of any entry changed in the JSON: the state no longer verifies, and the error names the entry."""
    state = state_of(rounds(["a"], [math.inf]))
    data = json.loads(state.model_dump_json())
    data["entries"][0][field] = value
    edited = RunCheckpoint.model_validate(data)
    with pytest.raises(ResumeRefused, match="from entry 0 on"):
        edited.verify()


def test_a_rounds_media_digests_are_sealed_and_a_round_without_media_digests_as_before() -> None:
    """A round of text only digests without a ``media`` key (states written before it verify); a round's media
    digests are part of its digest, so editing one in the JSON is refused."""
    plain = RoundEntry(round=1, outcome=RoundOutcome.DONE)
    assert "media" not in _content(plain)
    later = {"trace", "media", "cached_input_tokens", "cache_write_tokens", "reasoning_tokens", "reasoning", "by_model"}
    unrecorded = {"digest", "untrusted", "from_untrusted", "position", *later}  # provenance, too, left out when none
    assert _content(plain) == json_text(plain.model_dump(mode="json", exclude=unrecorded))
    seen = RoundEntry(round=1, outcome=RoundOutcome.DONE, media=("image:image/png:" + "a" * 64,))
    assert _content(seen) != _content(plain)
    data = json.loads(state_of([seen]).model_dump_json())
    data["entries"][0]["media"] = ["image:image/png:" + "b" * 64]
    with pytest.raises(ResumeRefused, match="from entry 0 on"):
        RunCheckpoint.model_validate(data).verify()


def test_an_edit_from_null_to_infinity_is_seen() -> None:
    """A NaN item stored as ``NaN`` (not ``null``): editing it to ``1e999`` (infinity) changes the digest."""
    state = state_of(rounds(["a"], [math.nan]))
    data = json.loads(state.model_dump_json())
    assert "NaN" in data["entries"][0]["batch"]
    data["entries"][0]["batch"] = data["entries"][0]["batch"].replace("NaN", "1e999")
    with pytest.raises(ResumeRefused, match="does not match its digests"):
        RunCheckpoint.model_validate(data).verify()


def test_a_state_resealed_by_hand_that_decides_nothing_is_refused() -> None:
    """A decision entry for a call no entry proposed, sealed with fresh digests: it does not hold together."""
    stray = DecisionEntry(round=5, call_digest="e" * 64, approved=True, by="x")
    with pytest.raises(ResumeRefused, match="decides a call of round 5 that no entry before it proposes"):
        state_of([*rounds(["a"], [1.0])[:1], stray]).verify()


def test_a_state_resealed_by_hand_with_a_call_to_a_tool_the_run_never_had_is_refused() -> None:
    """A proposal of a tool outside the run's tool set, sealed with fresh digests: refused as a state that does not
    hold together (it used to raise ``KeyError`` when the resumed run read its args)."""
    stray = RoundEntry(
        round=1,
        outcome=RoundOutcome.PROPOSED,
        tool="format_disk",
        tier=Tier.IRREVERSIBLE,
        args=json_text({"path": "/"}),
        call_digest="e" * 64,
    )
    with pytest.raises(ResumeRefused, match="call to 'format_disk', which is not in the run's tool set"):
        state_of([stray]).verify()


def test_a_state_of_another_version_is_refused_naming_both_versions() -> None:
    """A state written by another agentkit: reading it back names its version and the one this agentkit reads."""
    data = json.loads(state_of(rounds(["a"], [1.0])).model_dump_json())
    data["version"] = 1
    data["calls"] = []  # a version 1 checkpoint's field
    with pytest.raises(ValueError, match=f"schema version 1 .*reads version {STATE_VERSION}"):
        RunCheckpoint.model_validate(data)


def test_the_fold_reads_calls_pending_proposals_and_usage_from_the_entries() -> None:
    """What the entries add up to: the calls with their decisions, nothing pending once decided, the end."""
    progress = state_of(rounds(["a"], [1.0])).progress
    assert [(c.tool, c.ran, c.proposed, c.observation) for c in progress.calls] == [
        ("search", True, False, None),
        ("wipe", False, False, "a"),
    ]
    assert progress.pending == ()
    assert progress.ended is not None
    assert (progress.rounds, progress.elapsed) == (2, 1.5)


class Score(BaseModel):
    name: str
    value: float


class Nested(BaseModel):
    data: JsonValue


def deep(depth: int) -> JsonValue:
    value: JsonValue = "leaf"
    for _ in range(depth):
        value = [value]
    return value


@tool(tier=Tier.READ_ONLY)
def score(args: PathArgs) -> list[Score]:
    """Score a path."""
    return [Score(name="nan", value=math.nan), Score(name="inf", value=math.inf), Score(name="-inf", value=-math.inf)]


@tool(tier=Tier.READ_ONLY)
def tree(args: PathArgs) -> list[Nested]:
    """A deeply nested item."""
    return [Nested(data=deep(250))]


calls: list[str] = []


@tool(tier=Tier.IRREVERSIBLE)
def remove(args: PathArgs) -> list[Score]:
    """Remove a path."""
    calls.append(args.path)
    return [Score(name=args.path, value=0.0)]


class InProcess:
    """A caller whose replies are validated as Python values (an in-process model, say): unlike JSON, they may
    carry a lone surrogate, as a file name read with ``surrogateescape`` does."""

    def __init__(self, steps: list[dict[str, Any]]) -> None:
        self.steps = steps

    async def complete(self, request: StructuredRequest, schema: type[M]) -> Completion[M]:
        return Completion(value=schema.model_validate(self.steps.pop(0)), usage=Usage(requests=1), model="m")


async def stopped(first: Any) -> tuple[InProcess, Any]:
    caller = InProcess([first, call_step(PathArgs(path="b\udcffd"), tool="remove"), done_step()])
    result = await run_tool_loop_tiered(caller, Executor[Any](), [score, tree, remove], "ctx")
    assert result.stop_reason is StopReason.PROPOSED
    return caller, result


@pytest.mark.parametrize("first", ["score", "tree"])
async def test_a_run_that_took_in_hostile_values_resumes_from_its_json(first: str) -> None:
    """Non-finite floats in items, a lone surrogate in args (a file name decoded with surrogateescape) and an item
    nested 250 deep: the run's state survives ``model_dump_json`` / ``model_validate_json``, and the run resumes from
    it with exactly those values; the approved call runs once with its args as proposed."""
    calls.clear()
    caller, result = await stopped(call_step(PathArgs(path="a"), tool=first))
    again = RunCheckpoint.model_validate_json(result.checkpoint.model_dump_json())
    assert again == result.checkpoint
    approval = approve(result.proposed[0], approved_by="ops")
    resumed = await resume_tool_loop(caller, Executor[Any](), [score, tree, remove], "ctx", again, [approval])
    assert resumed.stop_reason is StopReason.EXECUTOR_DONE
    assert calls == ["b\udcffd"]
    kept = resumed.items[:-1]
    if first == "score":
        assert [s.name for s in kept] == ["nan", "inf", "-inf"]
        assert math.isnan(kept[0].value)
        assert [s.value for s in kept[1:]] == [math.inf, -math.inf]
    else:
        assert kept == [Nested(data=deep(250))]


async def test_every_loop_result_carries_its_state() -> None:
    """A plain run's result has its state too: every round recorded, the end, and it verifies."""
    caller = ScriptedCaller([call_step(PathArgs(path="a")), done_step()])
    result = await run_tool_loop(caller, Executor[Any](), score, "ctx")
    result.checkpoint.verify()
    assert [getattr(e, "outcome", None) for e in result.checkpoint.entries] == [
        RoundOutcome.RAN,
        RoundOutcome.DONE,
        Outcome.APPLIED,
    ]
    assert result.checkpoint.finished


def test_a_state_resealed_with_another_elapsed_time_verifies() -> None:
    """``rechained`` (the tests' hand edit with fresh digests) makes a state whose digests check out."""
    state = state_of(rounds(["a"], [1.0]))
    rechained(state, entry=3, elapsed=99.0).verify()


VERSION_2 = Path(__file__).with_name("version2_state.json")
"""A state an agentkit of state schema version 2 wrote (before provenance): a search, then a proposed delete."""


async def test_a_version_2_state_still_verifies_and_resumes_without_a_provenance_policy() -> None:
    """A state written before provenance reads, verifies (its digests unchanged) and resumes as it ran: without a
    policy, its result recording none, the entries it appends chained to its own."""
    from agentkit import reject, resume_tool_loop
    from agentkit._codec import Codec
    from agentkit._runner import pending_proposals
    from agentkit.testing import ScriptedCaller, done_step
    from tests.support import Executor, delete, search

    state = RunCheckpoint.model_validate_json(VERSION_2.read_text())
    state.verify()
    assert (state.version, state.config.provenance) == (2, None)
    [(_, proposal)] = pending_proposals(state, Codec({"search": search, "delete": delete}))
    assert proposal.tool_name == "delete"
    result = await resume_tool_loop(
        ScriptedCaller([done_step()]),
        Executor(),
        [search, delete],
        "find and delete",
        state,
        [reject(proposal, rejected_by="ops", reason="no")],
    )
    assert result.provenance is None
    assert result.checkpoint.version == 2
    result.checkpoint.verify()
