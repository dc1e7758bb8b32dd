"""LoopConfig and RetryPolicy refuse nonsense when built, naming the field and what it accepts."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentkit import LoopConfig, RetryPolicy, Tier, UsageError

NOT_WHOLE = [True, False, 2.5, "3", b"3", math.nan, [], 0, -1]
NOT_SECONDS = [True, math.nan, math.inf, -math.inf, "10", 0, -0.5, []]


@pytest.mark.parametrize("field", ["max_rounds", "token_budget", "degeneration_window", "rationale_max_length"])
@pytest.mark.parametrize("value", NOT_WHOLE, ids=repr)
def test_whole_number_fields_refuse_bools_fractions_strings_and_nan(field: str, value: object) -> None:
    """A count field takes only an int >= 1: bools, fractions, strings, NaN and non-positives are refused."""
    settings: dict[str, Any] = {field: value}
    with pytest.raises(UsageError, match=rf"LoopConfig\.{field} must be an int >= 1.*got"):
        LoopConfig(**settings)


@pytest.mark.parametrize("field", ["deadline", "tool_timeout"])
@pytest.mark.parametrize("value", NOT_SECONDS, ids=repr)
def test_second_fields_refuse_nan_infinity_bools_and_strings(field: str, value: object) -> None:
    """A time field takes only a finite number of seconds > 0 (or None): NaN, inf, bools, strings are refused."""
    settings: dict[str, Any] = {field: value}
    with pytest.raises(UsageError, match=rf"LoopConfig\.{field} must be a finite number of seconds > 0"):
        LoopConfig(**settings)


@pytest.mark.parametrize(
    ("field", "value"), [("autonomy", 1), ("autonomy", "REVERSIBLE"), ("retry", None), ("after_proposal", "stop!")]
)
def test_policy_fields_refuse_other_types(field: str, value: object) -> None:
    """autonomy, retry and after_proposal take only their own types."""
    settings: dict[str, Any] = {field: value}
    with pytest.raises(UsageError, match=rf"LoopConfig\.{field} must be"):
        LoopConfig(**settings)


@given(st.one_of(st.none(), st.integers(min_value=1)), st.one_of(st.none(), st.floats(min_value=1e-6, max_value=1e9)))
def test_valid_values_are_kept_as_given(rounds: int | None, seconds: float | None) -> None:
    """Any int >= 1 and any finite positive number of seconds (or None) is accepted unchanged."""
    config = LoopConfig(max_rounds=rounds, token_budget=rounds, deadline=seconds, tool_timeout=seconds)
    assert (config.max_rounds, config.token_budget, config.deadline, config.tool_timeout) == (
        rounds,
        rounds,
        seconds,
        seconds,
    )
    assert config.autonomy is Tier.REVERSIBLE


@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(), st.booleans(), st.text()))
def test_any_deadline_is_either_a_usable_number_or_a_usage_error(value: object) -> None:
    """Whatever is given as a deadline, the config either holds a finite positive number or refuses it."""
    try:
        config = LoopConfig(deadline=value)  # type: ignore[arg-type]  # the point of the test
    except UsageError:
        return
    assert isinstance(config.deadline, int | float)
    assert not isinstance(config.deadline, bool)
    assert math.isfinite(config.deadline)
    assert config.deadline > 0


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"primary_attempts": True}, "primary_attempts"),
        ({"primary_attempts": 0}, "primary_attempts"),
        ({"fallback_attempts": -1}, "fallback_attempts"),
        ({"fallback_attempts": 1.5}, "fallback_attempts"),
        ({"wait_initial": math.nan}, "wait_initial"),
        ({"wait_max": math.inf}, "wait_max"),
        ({"wait_max": "1"}, "wait_max"),
    ],
)
def test_retry_policy_refuses_nonsense(settings: dict[str, Any], field: str) -> None:
    """RetryPolicy refuses bools and fractions as attempt counts and NaN, infinity or text as waits."""
    with pytest.raises(UsageError, match=rf"RetryPolicy\.{field} must be"):
        RetryPolicy(**settings)
