"""The state's values made the fast way are the values pydantic makes: same fields, order, JSON and digests."""

from __future__ import annotations

import hashlib
import math
from decimal import Decimal
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from agentkit import LoopConfig, Outcome, Prompt, StopReason, Tier
from agentkit._cost import ModelPrice, Prices
from agentkit._session import prompt_digest
from agentkit._state import (
    DecisionEntry,
    EndEntry,
    RoundEntry,
    RoundOutcome,
    RunCheckpoint,
    _content,
    _head,
    chained,
    json_text,
    made,
    tool_entry,
)
from agentkit._trust import Trust
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
        "media": st.lists(st.text(max_size=8), max_size=2).map(tuple),
        "cached_input_tokens": st.integers(0, 10**6),
        "cache_write_tokens": st.integers(0, 10**6),
        "reasoning_tokens": st.integers(0, 10**6),
        "by_model": maybe_str,
        "reasoning": maybe_text,
        "untrusted": st.booleans(),
        "from_untrusted": st.tuples(text),
    },
)
decision_fields = st.fixed_dictionaries(
    {"round": st.integers(1, 100), "call_digest": st.text(), "approved": st.booleans(), "by": text},
    optional={
        "reason": text,
        "batch": maybe_str,
        "args": maybe_str,
        "amended": st.tuples(text),
        "elapsed": seconds,
        "untrusted": st.booleans(),
    },
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


any_float = st.floats(allow_nan=True, allow_infinity=True)


def dumped_content(entry: RoundEntry | DecisionEntry | EndEntry) -> str:
    """What an entry's digest covers, the way it was first defined: `json_text` of its JSON dump."""
    exclude = {"digest"}
    if isinstance(entry, RoundEntry):
        # each field recorded later than the first states is left out while empty (so old states still verify)
        later = (
            "trace",
            "reasoning",
            "cached_input_tokens",
            "cache_write_tokens",
            "reasoning_tokens",
            "media",
            "by_model",
        )
        exclude |= {name for name in later if getattr(entry, name) in (None, 0, ())}
        if entry.position is None:
            exclude.add("position")
    if isinstance(entry, DecisionEntry) and entry.args is None:
        exclude |= {"args", "amended"}
    if not isinstance(entry, EndEntry) and not entry.untrusted:
        exclude.add("untrusted")  # provenance is left out where there is none, as entries were before it
    if isinstance(entry, RoundEntry) and not entry.from_untrusted:
        exclude.add("from_untrusted")
    return json_text(entry.model_dump(mode="json", exclude=exclude))


@given(
    fields=round_fields,
    decision=decision_fields,
    end=end_fields,
    floats=st.tuples(any_float, any_float, any_float),
    validated=st.booleans(),
)
def test_an_entrys_digested_content_is_json_text_of_its_dump(
    fields: dict[str, Any], decision: dict[str, Any], end: dict[str, Any], floats: tuple[float, ...], validated: bool
) -> None:
    """The digest writes an entry field by field: byte for byte what `json_text` makes of its JSON dump, for
    every text (lone surrogates, NUL, U+FFFF), every float (NaN, infinities, -0.0) and every tier and enum."""
    rounds = {**fields, "llm_seconds": floats[0], "tool_seconds": floats[1], "elapsed": floats[2]}
    entries: list[RoundEntry | DecisionEntry | EndEntry] = [
        made(RoundEntry, **rounds),
        made(DecisionEntry, **{**decision, "tool_seconds": floats[0]}),
        made(EndEntry, **{**end, "elapsed": floats[1]}),
    ]
    for entry in entries:
        if validated and all(map(math.isfinite, floats)):  # a JSON round trip, as a loaded state's entries
            entry = type(entry).model_validate_json(entry.model_dump_json())
        assert _content(entry) == dumped_content(entry)


def test_an_entry_holding_a_value_not_of_its_fields_type_is_digested_through_its_dump() -> None:
    """A value of another type (an int where a float belongs, a str subclass) takes the dump's path, so the
    digest is still the dump's."""

    class Name(str):
        pass

    odd: list[RoundEntry | DecisionEntry | EndEntry] = [
        made(RoundEntry, round=1, outcome=RoundOutcome.RAN, elapsed=2),
        made(RoundEntry, round=1, outcome=RoundOutcome.RAN, rationale=Name("why")),
        made(DecisionEntry, round=1, call_digest="d", approved=True, by="ops", amended=["field"]),
    ]
    for entry in odd:
        assert _content(entry) == dumped_content(entry)


@given(
    run_id=text,
    parent=maybe_text,
    same=maybe_text,
    forked_at=st.none() | st.integers(0, 10**9),
    max_rounds=st.none() | st.integers(1, 100),
    deadline=st.none() | st.floats(min_value=0.001, max_value=1e6),
    loaded=st.booleans(),
    priced=st.sampled_from([None, "table", "budget"]),
    trust=st.sampled_from([None, Trust.TRUSTED, Trust.UNTRUSTED]),
    egress=st.sampled_from([None, False, True]),
)
def test_a_states_digested_header_is_json_text_of_its_dump(
    run_id: str,
    parent: str | None,
    same: str | None,
    forked_at: int | None,
    max_rounds: int | None,
    deadline: float | None,
    loaded: bool,
    priced: str | None,
    trust: Trust | None,
    egress: bool | None,
) -> None:
    """The header's digest is written part by part (the config's and tools' text kept per object): byte for
    byte `json_text` of its JSON dump (less `same`, and the config's `prices` and `cost_budget`, when they are
    `None`, `repeat_exempt` when empty, and a tool's `trust` and `egress` when unrecorded or at the defaults,
    as headers were digested before they were recorded), for a fresh state and for one read back."""
    search = tool_entry("search", Tier.READ_ONLY, Query, trust=trust, egress=egress)
    tools = (search, tool_entry("delete", Tier.IRREVERSIBLE, Query))
    prices = Prices({"m": ModelPrice(input=Decimal("0.5"), output=Decimal(2))}) if priced else None
    budget = Decimal("0.10") if priced == "budget" else None
    config = LoopConfig(max_rounds=max_rounds, deadline=deadline, prices=prices, cost_budget=budget)
    state = RunCheckpoint.start(run_id, config, tools, same=same, parent=parent, forked_at=forked_at)
    if loaded:
        state = RunCheckpoint.model_validate_json(state.model_dump_json())
    left_out: dict[str, Any] = dict.fromkeys({"entries", "digest"} | ({"same"} if same is None else set()), True)
    unset = {name for name, value in (("prices", prices), ("cost_budget", budget)) if value is None}
    left_out["config"] = dict.fromkeys({"repeat_exempt"} | unset, True)  # fields added since, at their defaults
    defaults = {"trust"} if trust in (None, Trust.TRUSTED) else set()
    defaults |= {"egress"} if egress in (None, False) else set()
    left_out["tools"] = {0: defaults, 1: {"trust", "egress"}}
    for _ in range(2):  # the second time from the kept texts
        assert _head(state) == json_text(state.model_dump(mode="json", exclude=left_out))
    state.verify()


def test_a_state_made_without_its_config_gets_the_default_one() -> None:
    """A field with a default factory that `made` is not given gets a fresh default, as with model_construct."""
    same_value(made(RunCheckpoint, run_id="r"), RunCheckpoint.model_construct(run_id="r"))


@given(system=text, dynamic=text)
def test_a_prompts_digest_is_that_of_json_text_of_its_two_parts(system: str, dynamic: str) -> None:
    """A round's prompt digest (what a replay compares a request by) is written without the general encoder:
    still the SHA-256 of `json_text` of the pair, for any text."""
    expected = hashlib.sha256(json_text([system, dynamic]).encode()).hexdigest()
    assert prompt_digest(Prompt(system=system, dynamic=dynamic)) == expected
