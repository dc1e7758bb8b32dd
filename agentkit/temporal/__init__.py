"""Durable agents on Temporal (extra `temporal`): the tool loop as a workflow, over the same loop core.

- `DurableAgent`: an agent, its tools, its caller and config, served under a name; `AgentSpec`: what
  a client needs of it (name, ctx type, item type), without the caller or the tools.
- `build_worker` / `run_worker` (and `agentkit worker --temporal ADDRESS`): the workflow and
  its activities (one per model attempt, one per tool call) on a task queue.
- `DurableRuns`: the typed client: start runs, query their state or wait for one (`wait_for`),
  approve or reject proposals (a validated workflow Update bound to the proposal's digest), resolve a
  call whose outcome was lost, and get the typed result (its error rebuilt as an `AgentkitError`).

See docs/temporal.md.
"""

from agentkit.errors import RunEnded
from agentkit.temporal._agent import ActivityPolicy, DurableAgent
from agentkit.temporal._client import DurableResult, DurableRuns, RunHandle
from agentkit.temporal._spec import AgentSpec
from agentkit.temporal._values import (
    Decision,
    DecisionRecord,
    DurableOutcome,
    PendingProposal,
    Resolution,
    RunState,
    RunStatus,
    RunSummary,
)
from agentkit.temporal._worker import build_worker, connect, run_worker
from agentkit.temporal._workflow import WORKFLOW_NAME, workflow_for

__all__ = [
    "WORKFLOW_NAME",
    "ActivityPolicy",
    "AgentSpec",
    "Decision",
    "DecisionRecord",
    "DurableAgent",
    "DurableOutcome",
    "DurableResult",
    "DurableRuns",
    "PendingProposal",
    "Resolution",
    "RunEnded",
    "RunHandle",
    "RunState",
    "RunStatus",
    "RunSummary",
    "build_worker",
    "connect",
    "run_worker",
    "workflow_for",
]
