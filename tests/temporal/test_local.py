"""Which tool calls the Temporal workflow makes local activities (which a lost worker may make again): a
property over every tier, autonomy ceiling, approval and recorded patch. No server needed."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agentkit import LoopConfig, Tier, tool
from agentkit._tiers import runs_live
from agentkit.temporal import DurableAgent
from agentkit.temporal._seams import runs_local
from agentkit.testing import ScriptedCaller
from tests.temporal.agents import Brief, Doc, Researcher, Search


def agent_with(tier: Tier, autonomy: Tier) -> DurableAgent[Brief, Doc]:
    @tool(tier=tier)
    def probe(args: Search) -> list[Doc]:
        """Probe."""
        return [Doc(id=args.query)]

    return DurableAgent(
        name="probe",
        agent=Researcher(),
        tools=probe,
        caller=ScriptedCaller([]),
        ctx_type=Brief,
        config=LoopConfig(autonomy=autonomy),
    )


@given(tier=st.sampled_from(Tier), autonomy=st.sampled_from(Tier), approved=st.booleans(), patched=st.booleans())
def test_only_live_read_only_calls_are_local_activities(
    tier: Tier, autonomy: Tier, approved: bool, patched: bool
) -> None:
    """A call is a local activity exactly when its run has the patch, it is not an approved call, and its tool is
    READ_ONLY and runs live: a gated call, an approved call and a REVERSIBLE or higher call never are (they
    run at most as often as Temporal's activity retry policy says, an approved one once)."""
    durable = agent_with(tier, autonomy)
    local = runs_local(durable, "probe", approved=approved, patched=patched)
    assert local == (patched and not approved and tier is Tier.READ_ONLY and runs_live(tier, autonomy))
    if local:
        assert not durable.gated("probe")
