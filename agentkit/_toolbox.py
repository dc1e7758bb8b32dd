"""`Toolbox`: a run's tools, validated once, with their step models built once; and the gate by tier."""

from __future__ import annotations

import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

from agentkit._admission import tool_entries
from agentkit._cites import Citing, citing, restricted, retrieved_ids
from agentkit._config import AfterProposal, LoopConfig
from agentkit._state import ToolEntry
from agentkit._step import ToolStep, build_step_model, step_call_parts
from agentkit._tiers import Tier, runs_live
from agentkit._tools import AnyTool, Tool, declared_tier, validate_tool_names
from agentkit._trust import Trust, declared_trust, held_by_policy
from agentkit.errors import UsageError

if typing.TYPE_CHECKING:
    from agentkit._provenance import Tracker

__all__ = ["Toolbox", "Verdict", "gate", "may_stop_at_a_proposal"]

Verdict = Literal["run", "propose", "no_tier"]


def gate(tool: Tool[Any, Any], config: LoopConfig, provenance: Tracker | None = None) -> tuple[Verdict, Tier]:
    """Decide by declared tier, and by the run's provenance, whether a call runs live, becomes a proposal,
    or is refused.

    The tier (and the tool's trust and egress) are read from the tool at the moment of the call, never
    cached, so nothing set on the tool after wiring can slip a call past the gate. A call the tier lets
    run live becomes a proposal all the same once untrusted content has entered the run and the
    `ProvenancePolicy` holds it (`Tracker.held`).
    """
    tier = declared_tier(tool)
    if tier is None:
        return "no_tier", Tier.IRREVERSIBLE
    if runs_live(tier, config.autonomy) and (provenance is None or not provenance.held(tool, tier)):
        return "run", tier
    return "propose", tier


def may_stop_at_a_proposal(tools: dict[str, Tool[Any, Any]], config: LoopConfig) -> bool:
    """The run may stop at a proposal (and so must be resumable): `AfterProposal.STOP` and a tool
    whose tier does not run live, or that the provenance policy may hold once a tool declared
    untrusted has returned something."""
    tiers = [declared_tier(candidate) for candidate in tools.values()]
    gated = any(tier is not None and not runs_live(tier, config.autonomy) for tier in tiers)
    if (
        not gated
        and config.provenance is not None
        and any(declared_trust(t) is Trust.UNTRUSTED for t in tools.values())
    ):
        gated = any(
            tier is not None and held_by_policy(candidate, tier, config.provenance, tainted=True)
            for candidate, tier in zip(tools.values(), tiers, strict=True)
        )
    return config.after_proposal is AfterProposal.STOP and gated


@dataclass(frozen=True, slots=True)
class Toolbox:
    """The tools of one run, validated once, with their step models built once (those that depend on
    what the run retrieved are built per set of ids, and cached)."""

    tools: dict[str, Tool[Any, Any]]
    step_model: type[ToolStep[Any]]
    single: Tool[Any, Any] | None
    closing_model: type[ToolStep[Any]] | None = None
    """With an answer schema: the closing round's step, which allows no call (`None` otherwise)."""
    answer: type[Any] | None = None
    calls_first: type[ToolStep[Any]] | None = None
    """With `LoopConfig.min_calls`: the step that cannot be done, asked until enough calls ran."""
    min_calls: int = 0
    citing: tuple[Citing, ...] = ()
    """The answer's fields that cite retrieved items (`Cites`): restricted each round to their ids."""
    spec: Any = None
    bound: int | None = None
    max_calls: int = 1
    """How many calls a step may carry (`LoopConfig.max_calls_per_step`)."""

    @classmethod
    def build(
        cls, tool_or_tools: AnyTool | Sequence[AnyTool], config: LoopConfig, answer: type[Any] | None = None
    ) -> Toolbox:
        # A tool that takes the run's ctx is kept beside the others: what the loop reads of a tool
        # (name, tier, args type) is the same, and ``invoke`` calls it with the ctx.
        single: Tool[Any, Any] | None
        if callable(getattr(tool_or_tools, "call", None)):
            single, tools = typing.cast("Tool[Any, Any]", tool_or_tools), [typing.cast("Tool[Any, Any]", tool_or_tools)]
        elif isinstance(tool_or_tools, Sequence) and not isinstance(tool_or_tools, str | bytes):
            single, tools = None, [typing.cast("Tool[Any, Any]", t) for t in tool_or_tools]
        else:
            raise UsageError(
                "tools must be one Tool or a list or tuple of them (their order is the schema's order); "
                f"got a {type(tool_or_tools).__name__}"
            )
        validate_tool_names(tools)
        spec: tuple[tuple[str, type[BaseModel]], ...] | type[BaseModel]
        spec = single.args_type if single is not None else tuple((t.name, t.args_type) for t in tools)
        bound, most = config.rationale_max_length, config.max_calls_per_step
        step_model = build_step_model(spec, rationale_max_length=bound, answer=answer, max_calls=most)
        closing = None
        if answer is not None:
            closing = build_step_model(spec, rationale_max_length=bound, answer=answer, closing=True, max_calls=most)
        cites = citing(answer) if answer is not None else ()
        first = None
        if config.min_calls or cites:
            first = build_step_model(spec, rationale_max_length=bound, calls_first=True, max_calls=most)
        return cls(
            {t.name: t for t in tools},
            step_model,
            single,
            closing,
            answer,
            first,
            config.min_calls,
            cites,
            spec,
            bound,
            most,
        )

    def step_for(self, executed: int, items: Sequence[Any], *, closing: bool = False) -> type[ToolStep[Any]] | None:
        """The step to ask for this round, given how many calls ran and the items so far: done is left
        out until `min_calls` calls ran, and a citing answer may name only the items' ids. `None`:
        a closing round that cannot be asked (too few calls, or a required citation with nothing to cite)."""
        plain = self.closing_model if closing else self.step_model
        if plain is None or (executed >= self.min_calls and not self.citing):
            return plain
        if executed < self.min_calls:
            return None if closing else self.calls_first
        assert self.answer is not None
        answer = restricted(self.answer, retrieved_ids(items, self.citing))
        if answer is None:
            return None if closing else self.calls_first
        return build_step_model(
            self.spec, rationale_max_length=self.bound, answer=answer, closing=closing, max_calls=self.max_calls
        )

    def entries(self) -> tuple[ToolEntry, ...]:
        """The tool set as the run's state records it (tiers, trust and egress read now)."""
        return tool_entries(self.tools)

    def resolve(self, call: BaseModel) -> tuple[Tool[Any, Any], BaseModel]:
        name, args = step_call_parts(call)
        if self.single is not None:
            return self.single, args
        assert name is not None
        return self.tools[name], args
