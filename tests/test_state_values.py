"""The state's values made the fast way are the values pydantic makes: same fields, order, JSON and digests."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from agentkit import LoopConfig, Outcome, StopReason, Tier
from agentkit._state import (
    DecisionEntry,
    EndEntry,
    RoundEntry,
    RoundOutcome,
    RunCheckpoint,
    chained,
    made,
    tool_entry,
)
from tests.support import Query

text = st.text(alphabet=st.characters(exclude_categories=()))
"""Free text (`Text` fields): every code point, lone surrogates and NUL included."""
maybe_text = st.none() | text
maybe_str = st.none() | st.text()
"""JSON text and digests (plain `str` fields)."""
seconds = st.floats(min_value=0, max_value=1e6)

round_fields = st.fixed_dictionaries(
    {"round": st.integers(1, 10**6), "outcome": st.sampled_from(RoundOutcome)},
    optional={
        "closing": st.booleans(),
        "model": text,
        "rationale": text,
        "tool": maybe_text,
        "tier": st.none() | st.sampled_from(Tier),
        "args": maybe_str,
        "batch": maybe_str,
        "observation": maybe_text,
        "repeats": st.none() | st.integers(1, 100),
        "call_digest": maybe_str,
        "error": maybe_text,
        "summary": maybe_text,
        "summarized": st.none() | st.integers(0, 100),
        "prompt": maybe_str,
        "requests": st.integers(0, 10),
        "input_tokens": st.integers(0, 10**6),
        "llm_seconds": seconds,
        "elapsed": seconds,
        "trace": maybe_str,
    },
)
decision_fields = st.fixed_dictionaries(
    {"round": st.integers(1, 100), "call_digest": st.text(), "approved": st.booleans(), "by": text},
    optional={"reason": text, "batch": maybe_str, "args": maybe_str, "amended": st.tuples(text), "elapsed": seconds},
)
end_fields = st.fixed_dictionaries(
    {"stop_reason": st.sampled_from(StopReason), "outcome": st.sampled_from(Outcome)},
    optional={"error": maybe_text, "elapsed": seconds},
)


def same_value(fast: Any, slow: Any) -> None:
    assert fast == slow
    assert list(fast.__dict__) == list(slow.__dict__)
    assert fast.__pydantic_fields_set__ == slow.__pydantic_fields_set__
    assert fast.model_dump_json() == slow.model_dump_json()


@given(fields=round_fields, previous=st.text(alphabet="0123456789abcdef", min_size=64, max_size=64))
def test_a_round_entry_made_is_the_one_model_construct_makes(fields: dict[str, Any], previous: str) -> None:
    """`made(RoundEntry, ...)` gives model_construct's value, so it digests and serialises the same."""
    fast, slow = made(RoundEntry, **fields), RoundEntry.model_construct(**fields)
    same_value(fast, slow)
    assert chained(previous, fast) == chained(previous, slow)


@given(decision=decision_fields, end=end_fields)
def test_decision_and_end_entries_made_are_the_ones_model_construct_makes(
    decision: dict[str, Any], end: dict[str, Any]
) -> None:
    """The same holds for the decision and end entries."""
    same_value(made(DecisionEntry, **decision), DecisionEntry.model_construct(**decision))
    same_value(made(EndEntry, **end), EndEntry.model_construct(**end))


@given(fields=st.lists(round_fields, max_size=4), run_id=text)
def test_an_appended_state_is_the_one_model_copy_makes(fields: list[dict[str, Any]], run_id: str) -> None:
    """Appending seals each entry and copies the state as `model_copy` would: same entries, digests and JSON."""
    tools = (tool_entry("search", Tier.READ_ONLY, Query),)
    state = slow = RunCheckpoint.start(run_id, LoopConfig(), tools)
    assert slow == RunCheckpoint.model_construct(**{**slow.__dict__})
    for entry in (made(RoundEntry, **f) for f in fields):
        state = state.appended(entry)
        sealed = entry.model_copy(update={"digest": chained(slow.digest, entry)})
        slow = slow.model_copy(update={"entries": (*slow.entries, sealed), "digest": sealed.digest})
        slow.__dict__.pop("progress", None)
        same_value(state.entries[-1], sealed)
        assert state.digest == slow.digest
    same_value(state, slow)
    assert "progress" not in state.__dict__
    digest = state.head_digest()
    for sealed_entry in state.entries:
        digest = chained(digest, sealed_entry)
        assert sealed_entry.digest == digest
    assert RunCheckpoint.model_validate_json(state.model_dump_json()) == state


def test_a_state_made_without_its_config_gets_the_default_one() -> None:
    """A field with a default factory that `made` is not given gets a fresh default, as with model_construct."""
    same_value(made(RunCheckpoint, run_id="r"), RunCheckpoint.model_construct(run_id="r"))
