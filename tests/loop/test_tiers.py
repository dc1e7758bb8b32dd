"""Tiers: the ordering, the floor policy, and parsing that fails closed."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentkit import AutonomyRung, Tier, max_rung_for, parse_tier
from agentkit._tiers import runs_live
from agentkit.errors import TierParseError


def test_tiers_are_ordered_with_stable_values() -> None:
    """Tier values are stable integers, ordered from harmless to permanent."""
    assert [t.value for t in Tier] == [0, 1, 2, 3]
    assert Tier.READ_ONLY < Tier.REVERSIBLE < Tier.EXTERNAL_REVERSIBLE < Tier.IRREVERSIBLE


@pytest.mark.parametrize(
    ("tier", "rung"),
    [
        (Tier.READ_ONLY, AutonomyRung.AUTO),
        (Tier.REVERSIBLE, AutonomyRung.AUTO),
        (Tier.EXTERNAL_REVERSIBLE, AutonomyRung.ASK),
        (Tier.IRREVERSIBLE, AutonomyRung.ASK),
    ],
)
def test_floor_policy_asks_for_external_and_irreversible(tier: Tier, rung: AutonomyRung) -> None:
    """Read-only and reversible may auto-run; external-reversible and irreversible always ask."""
    assert max_rung_for(tier) is rung


@pytest.mark.parametrize(
    ("text", "tier"),
    [
        ("read_only", Tier.READ_ONLY),
        ("Read-Only", Tier.READ_ONLY),
        ("readonly", Tier.READ_ONLY),
        ("REVERSIBLE", Tier.REVERSIBLE),
        ("external reversible", Tier.EXTERNAL_REVERSIBLE),
        ("Tier.IRREVERSIBLE", Tier.IRREVERSIBLE),
        (" 2 ", Tier.EXTERNAL_REVERSIBLE),
        ("0", Tier.READ_ONLY),
    ],
)
def test_known_tier_text_parses(text: str, tier: Tier) -> None:
    """Names in any case and separator, and the integer values, parse without error."""
    assert parse_tier(text) == (tier, None)


@pytest.mark.parametrize("text", ["", "safe", "read", "7", "-1", "reversable", "Tier."])
def test_unknown_tier_text_fails_closed(text: str) -> None:
    """Unrecognised text gives IRREVERSIBLE together with an error naming the choices."""
    tier, error = parse_tier(text)
    assert tier is Tier.IRREVERSIBLE
    assert isinstance(error, TierParseError)
    assert "Tier.READ_ONLY" in str(error)


@given(st.text())
def test_parse_tier_never_grants_autonomy_to_unrecognised_text(text: str) -> None:
    """For any text, either it parsed cleanly or the tier is IRREVERSIBLE."""
    tier, error = parse_tier(text)
    assert error is None or tier is Tier.IRREVERSIBLE


def test_gate_helpers_fail_closed_on_non_tiers() -> None:
    """A raw int or None is never treated as an auto-run tier."""
    assert max_rung_for(0) is AutonomyRung.ASK  # type: ignore[arg-type]  # the point of the test
    assert runs_live(0, Tier.IRREVERSIBLE) is False  # type: ignore[arg-type]  # the point of the test
    assert runs_live(Tier.READ_ONLY, None) is False  # type: ignore[arg-type]  # the point of the test
    assert runs_live(Tier.READ_ONLY, Tier.READ_ONLY) is True
    assert runs_live(Tier.IRREVERSIBLE, Tier.IRREVERSIBLE) is False
