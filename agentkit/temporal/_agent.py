"""`DurableAgent`: what a Temporal worker serves and a client starts, under one name."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from functools import cached_property
from typing import Any, Generic, TypeVar

from pydantic import TypeAdapter

from agentkit._agent import ToolAgent
from agentkit._codec import Codec, item_type_of
from agentkit._config import LoopConfig
from agentkit._grants import Grants
from agentkit._structured import StructuredCaller
from agentkit._tiers import Tier, runs_live
from agentkit._toolbox import Toolbox
from agentkit._tools import Tool, declared_tier, takes_ctx
from agentkit.errors import UsageError
from agentkit.temporal._spec import AgentSpec

__all__ = ["ActivityPolicy", "DurableAgent"]

Ctx = TypeVar("Ctx")
R = TypeVar("R")

_LEAST_PAYLOAD = 64 * 1024
"""The smallest `ActivityPolicy.payload_limit`: room for a run's state and outcome besides its items."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ActivityPolicy:
    """How the workflow schedules its activities.

    Model calls are one attempt per local activity, run by the worker that plays the round's workflow
    task (`generate_structured` in the workflow retries and fails over, with workflow timers between
    attempts; `Throttled` is never retried). Live tool
    calls (tiers the config runs without approval: READ_ONLY, REVERSIBLE) are retried by Temporal
    up to `tool_attempts`; approved calls of gated tiers get exactly one attempt, never retried. A live
    READ_ONLY call is a local activity, like a model attempt; any other call is an activity of its own.
    """

    model_timeout: timedelta = timedelta(minutes=2)
    """`start_to_close_timeout` of one model attempt (a local activity: the worker keeps the workflow task
    alive while it waits)."""
    tool_timeout: timedelta = timedelta(minutes=5)
    """`start_to_close_timeout` of one tool attempt. `LoopConfig.tool_timeout` is enforced within
    the attempt, as in-process (`ToolTimeout`); the attempt then has at most that plus 5 s. It is what
    bounds a READ_ONLY call's attempt, a local activity that does not heartbeat (no
    `schedule_to_close_timeout`: the attempts bound the rest)."""
    tool_attempts: int = 3
    """Attempts of a live (READ_ONLY / REVERSIBLE) tool call; a `ToolRetry` is never retried."""
    retry_initial: timedelta = timedelta(seconds=1)
    """First backoff between two attempts of a live tool call."""
    heartbeat: timedelta | None = timedelta(seconds=10)
    """Heartbeat timeout of tool activities (the worker heartbeats while the tool runs), so a dead worker's
    call is noticed in this long rather than at its `start_to_close_timeout`: a lost live tool call is
    then retried (on another worker), and a lost approved call is an unknown outcome. `None`: no
    heartbeat. A model attempt and a live READ_ONLY call are local activities, which do not heartbeat: a
    worker lost mid-call loses the workflow task it runs in, and another worker asks again once the task
    times out (10 s by default). The activities of runs recorded before they were local heartbeat on this."""
    payload_limit: int = 2 * 1024 * 1024
    """The most bytes one Temporal payload may hold: the server's `limit.blobSize.error` (2 MiB by default;
    raise both together). A run carries its items in payloads (a tool's batch, the state of a leg that
    waits, the run's outcome, which holds its items and its state), so a tool batch that would take a run
    past it ends the run with a `ToolError` naming the sizes, the items taken in before kept, instead of a
    workflow task that Temporal retries forever. See `docs/temporal.md` ("What a run can carry")."""

    def __post_init__(self) -> None:
        limit = self.payload_limit
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < _LEAST_PAYLOAD:
            raise UsageError(
                f"payload_limit must be an integer of at least {_LEAST_PAYLOAD} bytes (Temporal's is 2 MiB); "
                f"got {limit!r}"
            )


@dataclass(frozen=True, kw_only=True)
class DurableAgent(Generic[Ctx, R]):
    """An agent, its tools and its config, served by Temporal workers under `name`.

    The workflow plays the rounds (`agent.render` runs in workflow code, so it must be
    deterministic: no clock, no I/O); the model calls go through `caller` and the tool calls
    through the tools, each as an activity on a worker. Every process that serves the agent builds
    the same `DurableAgent` (import it from one module); a process that only starts runs and reads
    their results may use its `spec` (an `AgentSpec`) instead.

    Raises:
        UsageError: a tool whose items cannot round-trip through JSON (their type travels between
            processes), a tool that takes the run's ctx, a `LoopConfig.deadline` (use the
            workflow's execution timeout), a `LoopConfig.stream` (no delta crosses from the model
            activity into the workflow; `OpenAICaller(stream=True)` or `AnthropicCaller(stream=True)` streams
            inside the activity), or
            grants that do not fit the tools (`Grant.check`).
    """

    name: str
    """The name runs are started under; unique among a worker's agents."""
    agent: ToolAgent[Ctx, Any, R]
    """The executor."""
    tools: Tool[Any, R] | Sequence[Tool[Any, R]]
    """One tool (the bare-args wire shape) or a list of them (discriminated by tool name)."""
    caller: StructuredCaller
    """The model seam the worker's model activity uses (the workflow never touches it)."""
    ctx_type: Any
    """The type `ctx` is validated as when it reaches the workflow (a pydantic model, `str`...)."""
    config: LoopConfig = field(default_factory=LoopConfig)
    policy: ActivityPolicy = field(default_factory=ActivityPolicy)
    grants: Grants | None = None
    """Standing grants, held and counted by the worker process: a proposal one of them matches is approved
    by it (`grant:<id>`) and runs in its round, as `run_tool_loop_tiered(..., grants=...)` does. The
    workflow asks an activity (`agentkit.use_grant`), whose answer its history keeps: a replay never
    counts a use again, and a retried ask counts none. Each worker process counts its own uses."""

    def __post_init__(self) -> None:
        if self.config.deadline is not None:
            raise UsageError(
                f"durable agent {self.name!r}: LoopConfig.deadline is measured on one process's clock; on Temporal "
                "bound a run with start(..., execution_timeout=...) instead"
            )
        if self.config.stream:
            raise UsageError(
                f"durable agent {self.name!r}: LoopConfig.stream cannot stream a durable run's steps: the model "
                "call is an activity whose reply enters the workflow whole, so no delta can cross into it (the "
                "run's events come from its history); to stream on the wire inside the activity, give the agent "
                "OpenAICaller(stream=True) or AnthropicCaller(stream=True), which returns the complete step"
            )
        for candidate in self.box.tools.values():
            if takes_ctx(candidate):
                raise UsageError(
                    f"durable agent {self.name!r}: tool {candidate.name!r} takes the run's ctx, which a tool "
                    "activity on another worker does not have (the ctx is a value in the workflow's history, "
                    "not the object a ctx tool shares across rounds); give it its clients through the "
                    "worker's process instead (a closure or a module-level object)"
                )
        Codec(self.box.tools)  # every tool's items must round-trip: they cross process boundaries
        if self.grants is not None:
            self.grants.check(self.box.tools)
        self.ctx_adapter.json_schema()

    @cached_property
    def box(self) -> Toolbox:
        return Toolbox.build(self.tools, self.config)

    @cached_property
    def spec(self) -> AgentSpec[Ctx, R]:
        """What a client needs of this agent: its name, ctx type and item type (`DurableRuns.start` takes
        either; a client process can build the spec alone, without the agent's caller and tools)."""
        return AgentSpec[Ctx, R](name=self.name, ctx_type=self.ctx_type, item_type=self.item_type)

    @cached_property
    def ctx_adapter(self) -> TypeAdapter[Any]:
        return self.spec.ctx_adapter

    @cached_property
    def item_type(self) -> Any:
        """The items' type: the tools' one item type, or the union of theirs."""
        kinds = list(dict.fromkeys(item_type_of(t) for t in self.box.tools.values()))
        return kinds[0] if len(kinds) == 1 else typing.Union[tuple(kinds)]  # noqa: UP007  # built at run time

    def workflow_config(self) -> LoopConfig:
        """The config the workflow runs the core with: the tool timeout is enforced per activity
        attempt by the activity, not by a workflow timer around all attempts."""
        return dataclasses.replace(self.config, tool_timeout=None)

    def gated(self, tool_name: str) -> bool:
        """Whether calls of this tool run only once approved (so run once, never retried)."""
        tier = declared_tier(self.box.tools[tool_name])
        return tier is None or not runs_live(tier, self.config.autonomy)

    def rerunnable(self, tool_name: str) -> bool:
        """Whether a live call of this tool may run again unasked: it is READ_ONLY and runs live, so the
        workflow makes it a local activity (a worker lost before the workflow task completes makes it again).
        An approved call never is one, whatever its tool's tier."""
        return declared_tier(self.box.tools[tool_name]) is Tier.READ_ONLY and not self.gated(tool_name)


def agents_by_name(
    agents: DurableAgent[Any, Any] | Sequence[DurableAgent[Any, Any]],
) -> dict[str, DurableAgent[Any, Any]]:
    """The agents keyed by name; two of one name are a wiring mistake."""
    listed = [agents] if isinstance(agents, DurableAgent) else list(agents)
    named: dict[str, DurableAgent[Any, Any]] = {}
    for one in listed:
        if not isinstance(one, DurableAgent):
            raise UsageError(f"expected DurableAgent values; got {type(one).__name__}")
        if one.name in named:
            raise UsageError(f"two durable agents are named {one.name!r}; give each its own name")
        named[one.name] = one
    if not named:
        raise UsageError("no durable agents given")
    return named
