"""``ProposedAction``: a call the loop did not run because its tier needs a human."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from agentkit.tiers import Tier

__all__ = ["ProposedAction", "call_digest"]

Args = TypeVar("Args", bound=BaseModel)


def call_digest(tool_name: str, args: BaseModel) -> str:
    """SHA-256 of the tool name and the canonical JSON of the arguments.

    Canonical means keys sorted, no whitespace, UTF-8: the same call always has the same digest,
    and any change to the name or to one argument changes it.
    """
    canonical = json.dumps(args.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(f"{tool_name}\n{canonical}".encode()).hexdigest()


class ProposedAction(BaseModel, Generic[Args]):
    """A call above the autonomy ceiling, returned for a human to approve; frozen and JSON round-trippable."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool_name: str
    """The tool the executor wanted to call."""
    tier: Tier
    """The tool's declared tier."""
    args: Args
    """The validated arguments of the call."""
    rationale: str = ""
    """The executor's stated reason."""
    round: int
    """The round the call was made in."""
    run_id: str = ""
    """The run that proposed it."""
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    """When it was proposed (UTC)."""
    digest: str
    """``call_digest(tool_name, args)``: an approval approves exactly this call."""

    @classmethod
    def create(
        cls, *, tool_name: str, tier: Tier, args: Args, rationale: str = "", round: int, run_id: str = ""
    ) -> ProposedAction[Args]:
        """Build a proposal and compute its digest."""
        return cls(
            tool_name=tool_name,
            tier=tier,
            args=args,
            rationale=rationale,
            round=round,
            run_id=run_id,
            digest=call_digest(tool_name, args),
        )

    def digest_matches(self) -> bool:
        """Whether ``digest`` still matches the tool name and args (they were not altered)."""
        return call_digest(self.tool_name, self.args) == self.digest
