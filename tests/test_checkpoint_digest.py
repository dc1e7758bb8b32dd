"""A checkpoint's digest text, put together field by field, is exactly the sorted JSON pydantic gives.

``RunCheckpoint`` writes its content text by hand (a journaled run seals one per round), so these
tests hold it to the definition: the SHA-256 of ``model_dump(mode="json")`` without the digest,
as ``json.dumps`` writes it with sorted keys, for any content a checkpoint can hold.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import JsonValue

from agentkit import LoopConfig, StopReason, Tier
from agentkit.checkpoint import (
    CheckpointCall,
    CheckpointConfig,
    CheckpointProposal,
    CheckpointTool,
    DigestMemo,
    RunCheckpoint,
    config_parts,
    sealed_text,
    tool_part,
)
from agentkit.context import ContextWindow


def reference_text(checkpoint: RunCheckpoint) -> str:
    content = checkpoint.model_dump(mode="json", exclude={"digest"})
    return json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def reference_digest(checkpoint: RunCheckpoint) -> str:
    return hashlib.sha256(reference_text(checkpoint).encode("utf-8", "surrogatepass")).hexdigest()


text = st.text(max_size=12)
scalars: st.SearchStrategy[JsonValue] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63),
    st.floats(allow_nan=False, allow_infinity=False),
    text,
)
json_values: st.SearchStrategy[JsonValue] = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)
args = st.dictionaries(text, json_values, max_size=3)
tiers = st.sampled_from(list(Tier))

calls = st.builds(
    CheckpointCall,
    round=st.integers(min_value=1, max_value=50),
    tool_name=text,
    args=args,
    batch=st.lists(json_values, max_size=3),
    observation=st.none() | text,
    proposed=st.booleans(),
    ran=st.booleans(),
)
proposals = st.builds(
    CheckpointProposal,
    tool_name=text,
    tier=tiers,
    args=args,
    rationale=text,
    round=st.integers(min_value=1, max_value=50),
    run_id=text,
    created_at=st.datetimes(timezones=st.just(UTC)),
    digest=st.text(alphabet="0123456789abcdef", min_size=64, max_size=64),
)
loop_configs = st.builds(
    LoopConfig,
    max_rounds=st.none() | st.integers(min_value=1, max_value=100),
    token_budget=st.none() | st.integers(min_value=1, max_value=10**6),
    deadline=st.none() | st.floats(min_value=0.5, max_value=1e4),
    autonomy=tiers,
    context=st.none() | st.builds(ContextWindow, last=st.integers(min_value=1, max_value=9)),
)
configs = loop_configs.map(CheckpointConfig.of)
checkpoints = st.builds(
    RunCheckpoint,
    run_id=text,
    finished=st.booleans(),
    stop_reason=st.none() | st.sampled_from(list(StopReason)),
    config=configs,
    tools=st.lists(st.builds(CheckpointTool, name=text, tier=st.none() | tiers), max_size=3).map(tuple),
    rounds=st.integers(min_value=0, max_value=100),
    requests=st.integers(min_value=0, max_value=100),
    input_tokens=st.integers(min_value=0, max_value=10**9),
    output_tokens=st.integers(min_value=0, max_value=10**9),
    largest_round_tokens=st.integers(min_value=0, max_value=10**6),
    seconds=st.floats(min_value=0, max_value=1e6),
    calls=st.lists(calls, max_size=4).map(tuple),
    recent=st.lists(st.tuples(text, args), max_size=3).map(tuple),
    recent_rounds=st.lists(st.integers(min_value=1, max_value=50), max_size=3).map(tuple),
    refusals=st.integers(min_value=0, max_value=5),
    context_summary=st.none() | text,
    context_summarized=st.integers(min_value=0, max_value=9),
    proposals=st.lists(proposals, max_size=2).map(tuple),
)


@settings(max_examples=150, deadline=None)
@given(checkpoint=checkpoints)
def test_the_digest_is_the_sha256_of_pydantic_s_sorted_json_for_any_content(checkpoint: RunCheckpoint) -> None:
    sealed = checkpoint.sealed()
    assert sealed.digest == reference_digest(checkpoint)
    assert sealed.content_digest() == sealed.digest
    # The text handed to the journal reads back as the same checkpoint, which verifies.
    stored = sealed_text(sealed)
    assert stored is not None
    again = RunCheckpoint.model_validate_json(stored)
    assert again == sealed
    again.verify()


@settings(max_examples=60, deadline=None)
@given(first=checkpoints, extra=st.lists(calls, min_size=1, max_size=3))
def test_a_memo_kept_across_a_run_s_checkpoints_gives_the_same_digests(
    first: RunCheckpoint, extra: list[CheckpointCall]
) -> None:
    """Parts that carry over (calls, config, tools) come from the memo; the digest is the one made afresh."""
    memo = DigestMemo()
    assert first.sealed(memo).digest == reference_digest(first)
    later = first.model_copy(update={"calls": (*first.calls, *extra), "rounds": first.rounds + 1})
    assert later.sealed(memo).digest == reference_digest(later)
    # As a run takes them: changes applied to its template and sealed in one copy.
    changed = first._sealed_with({"calls": (*first.calls, *extra), "rounds": first.rounds + 1}, memo)
    assert changed == later.sealed()


def test_the_digest_text_covers_every_field_but_the_digest() -> None:
    """A field added to ``RunCheckpoint`` must be added to the hand-written text too (this fails until it is)."""
    checkpoint = RunCheckpoint()
    written = json.loads(checkpoint._content_text(None))
    assert list(written) == sorted(RunCheckpoint.model_fields.keys() - {"digest"})


def test_calls_built_without_validation_digest_like_validated_ones() -> None:
    """The loop records calls with ``model_construct`` from JSON values; their text is the validated call's."""
    values: dict[str, Any] = {
        "round": 2,
        "tool_name": "search",
        "args": {"query": "café", "limit": 3, "ratio": 0.1},
        "batch": [{"id": "doc-1", "score": 1.5, "tags": ["a", "b"]}],
        "observation": None,
        "proposed": False,
        "ran": True,
    }
    built = RunCheckpoint(calls=(CheckpointCall.model_construct(**values),)).sealed()
    validated = RunCheckpoint(calls=(CheckpointCall(**values),)).sealed()
    memo = DigestMemo()
    recorded = RunCheckpoint(calls=(memo.call(**values),)).sealed(memo)  # its text made with the record
    assert built.digest == validated.digest == recorded.digest == reference_digest(validated)


@settings(max_examples=100, deadline=None)
@given(call=calls)
def test_a_call_recorded_through_the_memo_digests_as_pydantic_s_json(call: CheckpointCall) -> None:
    memo = DigestMemo()
    recorded = memo.call(**call.model_dump())
    checkpoint = RunCheckpoint(calls=(recorded,), finished=False)
    assert checkpoint.sealed(memo).digest == reference_digest(checkpoint)


def test_a_seconds_value_given_as_an_integer_digests_as_the_float_it_reads_back_as() -> None:
    """``seconds`` is a float: an int put there by hand is written as the float JSON gives back, so it verifies."""
    sealed = RunCheckpoint().model_copy(update={"seconds": 61}).sealed()
    stored = sealed_text(sealed)
    assert stored is not None
    RunCheckpoint.model_validate_json(stored).verify()


def test_proposal_timestamps_digest_as_pydantic_writes_them() -> None:
    created = datetime(2026, 12, 1, 5, 37, 30, 123456, tzinfo=UTC) + timedelta(microseconds=1)
    proposal = CheckpointProposal(
        tool_name="delete", tier=Tier.IRREVERSIBLE, args={"id": "x"}, round=1, created_at=created, digest="0" * 64
    )
    checkpoint = RunCheckpoint(proposals=(proposal,), finished=False)
    assert checkpoint.sealed().digest == reference_digest(checkpoint)


def test_non_finite_floats_beside_unstorable_text_seal_and_read_back() -> None:
    """An arg holding inf beside a lone surrogate seals (inf written as null, as in pydantic's JSON) and verifies."""
    call = CheckpointCall(round=1, tool_name="probe", args={"x": float("inf"), "note": "a\ud800b"}, ran=False)
    sealed = RunCheckpoint(calls=(call,), finished=False).sealed()
    stored = sealed_text(sealed)
    assert stored is not None
    assert '"x":null' in stored
    again = RunCheckpoint.model_validate(json.loads(stored))
    again.verify()


@settings(max_examples=40, deadline=None)
@given(config=loop_configs, names=st.lists(st.sampled_from(["search", "fetch", "write"]), min_size=1, max_size=3))
def test_parts_made_once_per_process_digest_like_parts_made_afresh(config: LoopConfig, names: list[str]) -> None:
    """A run's config and tools come with their texts from a per-process cache (``config_parts``, ``tool_part``);
    a checkpoint sealed with them has the digest of pydantic's sorted JSON, run after run."""
    for run in ("first", "second"):
        memo = DigestMemo()
        made, text = config_parts(config)
        memo.know(made, text)
        tools = []
        for name in dict.fromkeys(names):
            tool, tool_text = tool_part(name, Tier.READ_ONLY)
            memo.know(tool, tool_text)
            tools.append(tool)
        template = RunCheckpoint.model_construct(run_id=run, config=made, tools=tuple(tools))
        sealed = template._sealed_with({"finished": False, "rounds": 1}, memo)
        assert sealed.digest == reference_digest(sealed)
        RunCheckpoint.model_validate_json(sealed_text(sealed) or "").verify()
