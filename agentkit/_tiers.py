"""Reversibility tiers: how much harm a tool can do, declared in code, never inferred."""

from __future__ import annotations

import enum
import re

from agentkit.errors import TierParseError

__all__ = ["AutonomyRung", "Tier", "max_rung_for", "parse_tier", "runs_live", "tier_choices"]


class Tier(enum.IntEnum):
    """A tool's reversibility, ordered from harmless to permanent.

    The integer values are stable so callers can map their own backend's enum onto them.
    """

    READ_ONLY = 0
    """Changes nothing."""
    REVERSIBLE = 1
    """Changes something this system can undo on its own."""
    EXTERNAL_REVERSIBLE = 2
    """Changes something outside (a message sent, a ticket filed) that can be undone by hand."""
    IRREVERSIBLE = 3
    """Cannot be undone (a deletion, a payment)."""


class AutonomyRung(enum.StrEnum):
    """Whether a call may run without a human."""

    AUTO = "auto"
    ASK = "ask"


def max_rung_for(tier: Tier) -> AutonomyRung:
    """The floor policy: the most autonomy a tier can ever be given.

    Read-only and reversible tools may auto-run; external-reversible and irreversible tools always
    need a human, whatever the caller's autonomy ceiling says.
    """
    if not isinstance(tier, Tier):
        return AutonomyRung.ASK  # anything that is not a declared Tier fails closed
    return AutonomyRung.AUTO if tier <= Tier.REVERSIBLE else AutonomyRung.ASK


def runs_live(tier: Tier, ceiling: Tier) -> bool:
    """The gate every path uses: at or below the caller's ceiling **and** allowed by the floor policy."""
    if not (isinstance(tier, Tier) and isinstance(ceiling, Tier)):
        return False  # a raw int or a missing tier never runs live
    return tier <= ceiling and max_rung_for(tier) is AutonomyRung.AUTO


def tier_choices() -> str:
    """The four tiers spelled out, for error messages."""
    return ", ".join(f"Tier.{t.name}" for t in Tier)


_SEPARATORS = re.compile(r"[\s\-]+")


def parse_tier(text: str) -> tuple[Tier, TierParseError | None]:
    """Read a tier from text (a config file, a database column), failing closed.

    Accepts the names in any case with `_`, `-` or spaces (`"read-only"`, `"Tier.IRREVERSIBLE"`)
    and the integer values. Anything else gives `Tier.IRREVERSIBLE` together with an error, so a
    typo can never make a tool auto-run.

    Returns:
        The tier, and `None` or the error explaining why the text fell back to irreversible.
    """
    key = _SEPARATORS.sub("_", text.strip()).upper().removeprefix("TIER.")
    if key.isascii() and key.isdigit() and int(key) in {t.value for t in Tier}:
        return Tier(int(key)), None
    if key in Tier.__members__:
        return Tier[key], None
    if key == "READONLY":
        return Tier.READ_ONLY, None
    error = TierParseError(f"unrecognised tier {text!r}; treated as Tier.IRREVERSIBLE. Choose one of {tier_choices()}")
    return Tier.IRREVERSIBLE, error
