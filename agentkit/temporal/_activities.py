"""The activities: one model attempt (a local activity), one tool call (a local activity when it is a live
READ_ONLY call), and the ask for a standing grant of a proposal (`DurableAgent.grants`). They run on
workers, outside the workflow.

Errors cross back as `ApplicationError` values whose `type` names the agentkit error and whose
details carry its fields, so the workflow rebuilds the same error (`decode_error`) and the loop core
treats it exactly as in-process.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, JsonValue, TypeAdapter
from temporalio import activity
from temporalio.exceptions import ApplicationError

from agentkit._codec import Codec
from agentkit._invoke import invoke
from agentkit._observe import ApprovedCall, Observer, ToolInvocation, observed, wrapping
from agentkit._observe import ModelCall as Asked
from agentkit._proposals import Evidence, ProposedAction
from agentkit._structured import StructuredRequest
from agentkit._trust import CallProvenance
from agentkit._usage import USAGE_COUNTS, Usage, usage_counts, written_counts
from agentkit.errors import AgentkitError, ProviderError, ToolError
from agentkit.temporal._agent import DurableAgent
from agentkit.temporal._errors import error_fields, error_kind, rebuild_error
from agentkit.temporal._values import GrantAsk, GrantReply, ModelCall, ModelReply, ToolCallInput, ToolReply, ToolSet

MODEL_ACTIVITY = "agentkit.model_call"
TOOL_ACTIVITY = "agentkit.tool_call"
RECORD_TOOLS = "agentkit.record_tools"
GRANT_ACTIVITY = "agentkit.use_grant"

REQUEST = TypeAdapter(StructuredRequest)

_ENVELOPE = 16 * 1024
"""Bytes of a payload kept for what surrounds a tool's batch (the reply's fields, a local activity's marker)."""


_DEPTH = 190
"""Deepest nesting of a tool item or a model step (the value itself is 1) that a payload carries: the JSON
parser that reads payloads stops at 201 levels, and what holds the value (a reply, a run's outcome, the
state a query returns) takes up to four of them."""


def _carried(values: Sequence[object] | Mapping[str, object]) -> tuple[int, str | None]:
    """The size in bytes of `values` (a batch, or a step) in a payload (compact UTF-8 JSON, as the payload
    converter writes it), and what a payload
    cannot carry exactly, if anything: a lone surrogate (UTF-8 has none; the payload could not be
    written), a float that is not finite (written as `null`), or nesting deeper than `_DEPTH` (the
    payload could not be read back)."""
    try:
        text = json.dumps(values, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return 0, "a lone surrogate in its text, which UTF-8 cannot encode"
    except ValueError:
        return 0, "a float that is not finite (NaN or infinity), which JSON writes as null"
    except RecursionError:
        return 0, f"values nested deeper than {_DEPTH} levels"
    # Cheap first: fewer brackets than the limit cannot nest that deep.
    if text.count("[") + text.count("{") > _DEPTH and _deepest(values) > _DEPTH + (not isinstance(values, Mapping)):
        return 0, f"values nested deeper than {_DEPTH} levels"
    return size, None


def _deepest(value: object) -> int:
    """How deep JSON `value` nests (a scalar is 0, `[]` is 1), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children)
    return deepest


_MODEL_ERRORS = frozenset({"Throttled", "Truncated", "StructuredOutputError", "ProviderError"})
"""The errors a model attempt reports as themselves; any other is the attempt's `ProviderError`."""


def encode_error(error: AgentkitError) -> ApplicationError:
    """An agentkit error as a non-retryable activity failure the workflow can rebuild: its type's name, its
    message, and as details its usage and its own fields (`_errors`)."""
    usage = getattr(error, "usage", None) or Usage(requests=1)
    counts = written_counts(usage)
    details: dict[str, JsonValue] = {**counts, **error_fields(error)}
    return ApplicationError(str(error), details, type=error_kind(error), non_retryable=True)


def decode_error(failure: ApplicationError) -> AgentkitError:
    """The agentkit error a model activity reported (`encode_error`); anything else is a provider failure."""
    raw = failure.details[0] if failure.details else {}
    details: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    usage = Usage(**{name: int(details.get(name, 1 if name == "requests" else 0)) for name in USAGE_COUNTS})
    if failure.type not in _MODEL_ERRORS:
        return ProviderError(f"model activity failed: {failure.message}", usage=usage)
    fields = {k: v for k, v in details.items() if k not in USAGE_COUNTS}
    return rebuild_error(failure.type or "", failure.message, fields, usage=usage)


class Activities:
    """The activities of one worker, over its agents (their callers and their real tools), each call inside
    the worker's observers' `around` (an `OTelObserver`'s `chat` and `execute_tool` spans, under the
    activity's own when temporalio's tracing interceptor runs)."""

    def __init__(self, agents: Mapping[str, DurableAgent[Any, Any]], observers: tuple[Observer, ...] = ()) -> None:
        self.agents = dict(agents)
        self.observers = observers
        self.codecs = {name: Codec(agent.box.tools) for name, agent in self.agents.items()}

    def _agent(self, name: str) -> DurableAgent[Any, Any]:
        agent = self.agents.get(name)
        if agent is None:
            raise ApplicationError(
                f"this worker serves no durable agent named {name!r} (it serves {sorted(self.agents)})",
                type="UnknownAgent",
                non_retryable=True,
            )
        return agent

    @activity.defn(name=MODEL_ACTIVITY)
    async def model_call(self, call: ModelCall) -> ModelReply:
        """One attempt of the model call the workflow's `generate_structured` asked for."""
        agent = self._agent(call.agent)
        schema = agent.box.step_model
        if schema.__name__ != call.schema_name:
            raise ApplicationError(
                f"agent {call.agent!r} asks with schema {schema.__name__!r}, the workflow with {call.schema_name!r}: "
                "the worker and the workflow run different tool sets",
                type="SchemaMismatch",
                non_retryable=True,
            )
        request = REQUEST.validate_python(call.request)
        # Run as a local activity (no heartbeat timeout, so no heartbeats: the workflow task it runs in stands
        # in for them). As the activity of a run recorded before, it heartbeats while the model answers: a
        # worker that dies mid-call is noticed after the policy's heartbeat timeout, not the model timeout.
        beating = asyncio.create_task(_heartbeat(activity.info().heartbeat_timeout))
        asked = Asked(run_id=call.run_id, round=call.round, role=call.role, request=request, caller=agent.caller)
        try:
            completion = await observed(self.observers, asked, agent.caller.complete(request, schema))
        except AgentkitError as error:
            raise encode_error(error) from error
        finally:
            beating.cancel()
        value: BaseModel = completion.value
        dumped = value.model_dump(mode="json")
        limit = agent.policy.payload_limit - _ENVELOPE
        size, lossy = _carried(dumped)
        if lossy is not None:
            raise encode_error(
                ProviderError(
                    f"the model's reply holds {lossy}: a Temporal payload cannot carry it as it is, so it is not kept",
                    usage=completion.usage,
                )
            )
        if size > limit:
            # Its reply could not be recorded: a workflow task that Temporal would retry forever, asking again.
            raise encode_error(
                ProviderError(
                    f"the model's reply takes {size:,} bytes as JSON, more than one Temporal payload holds "
                    f"({limit:,}: ActivityPolicy.payload_limit {agent.policy.payload_limit:,}, less {_ENVELOPE:,} for "
                    "what surrounds it); it is not kept. Bound the reply (the role's max_tokens), or raise the "
                    "server's limit.blobSize.error and payload_limit together",
                    usage=completion.usage,
                )
            )
        return ModelReply(
            value=dumped,
            **usage_counts(completion.usage),
            model=completion.model,
            response_id=completion.response_id,
            finish_reasons=completion.finish_reasons,
            reasoning=completion.reasoning,
        )

    @activity.defn(name=TOOL_ACTIVITY)
    async def tool_call(self, call: ToolCallInput) -> ToolReply:
        """One call of a real tool, through `invoke` as in-process (its own copy of the args, the
        config's tool timeout, `ToolRetry` as the observation), with heartbeats while it runs as an
        activity of its own (as a local activity it has no heartbeat timeout: its workflow task stands in).

        The tool's failure is raised as a retryable `ApplicationError` (Temporal retries a live
        call per the policy) whose `type` names the error and whose message is the in-process one;
        a batch that is not of the tool's item type is not retried (`ToolResultInvalid`).
        """
        agent = self._agent(call.agent)
        codec = self.codecs[call.agent]
        tool = agent.box.tools.get(call.tool_name)
        if tool is None:
            raise ApplicationError(f"agent {call.agent!r} has no tool {call.tool_name!r}", non_retryable=True)
        args = codec.args[call.tool_name].model_validate(call.args)
        beating = asyncio.create_task(_heartbeat(activity.info().heartbeat_timeout))
        approval = None
        if call.approved_by is not None:
            approval = ApprovedCall(approved_by=call.approved_by, digest=call.digest or "")
        invoked = ToolInvocation(run_id=call.run_id, round=call.round, tool=tool, args=args, approval=approval)
        try:
            outcome = await invoke(
                tool, args, limit=agent.config.tool_timeout, around=wrapping(self.observers, invoked)
            )
        finally:
            beating.cancel()
        if outcome.error is not None:
            raise ApplicationError(str(outcome.error), type=type(outcome.error).__name__) from outcome.error
        try:
            encoded = codec.encode_batch(call.tool_name, outcome.batch)
        except (ValueError, TypeError) as wrong:
            error = ToolError(
                f"tool {call.tool_name!r} returned an item that is not of its declared item type: {wrong}",
                tool_name=call.tool_name,
            )
            raise ApplicationError(str(error), type="ToolResultInvalid", non_retryable=True) from wrong
        assert encoded is not None  # a durable agent's codec is strict: every tool's items round-trip
        limit = agent.policy.payload_limit - _ENVELOPE
        batch = json.loads(encoded)
        size, lossy = _carried(batch)
        if lossy is not None:
            error = ToolError(
                f"tool {call.tool_name!r} returned items holding {lossy}: a Temporal payload cannot carry them as they "
                "are. The call ran; its batch is not kept. Keep such values out of the items (text as valid Unicode, "
                "a missing number as None)",
                tool_name=call.tool_name,
            )
            raise ApplicationError(str(error), type="ToolResultInvalid", non_retryable=True)
        if size > limit:
            # Its reply could not be recorded: a workflow task (or an activity) that Temporal would retry forever.
            error = ToolError(
                f"tool {call.tool_name!r} returned a batch of {size:,} bytes as JSON, more than one Temporal payload "
                f"holds ({limit:,}: ActivityPolicy.payload_limit {agent.policy.payload_limit:,}, less {_ENVELOPE:,} "
                "for the reply around it). The call ran; its batch is not kept. Return fewer or smaller items (a "
                "reference to where the data is), or raise the server's limit.blobSize.error and payload_limit "
                "together",
                tool_name=call.tool_name,
            )
            raise ApplicationError(str(error), type="ToolResultTooLarge", non_retryable=True)
        return ToolReply(batch=batch, observation=outcome.observation)

    @activity.defn(name=GRANT_ACTIVITY)
    async def use_grant(self, ask: GrantAsk) -> GrantReply:
        """The agent's first live grant that matches the proposal, its use counted once under the call's key
        (run, round, digest): a retry of this activity answers the same grant and counts nothing more."""
        agent = self._agent(ask.agent)
        tool = agent.box.tools.get(ask.tool_name)
        if agent.grants is None or tool is None:
            return GrantReply()
        args = self.codecs[ask.agent].args[ask.tool_name].model_validate(ask.args)
        # The argument values that came from untrusted content travel with the ask: without them a grant could
        # approve what the provenance policy would not.
        evidence = (
            Evidence(provenance=CallProvenance(from_untrusted=ask.from_untrusted)) if ask.from_untrusted else None
        )
        proposal = ProposedAction[Any].create(
            tool_name=ask.tool_name, tier=ask.tier, args=args, round=ask.round, run_id=ask.run_id, evidence=evidence
        )
        return GrantReply(grant=agent.grants.use(proposal, key=f"{ask.run_id}/{ask.round}/{ask.digest}"))


@activity.defn(name=RECORD_TOOLS)
async def record_tools(tools: ToolSet) -> ToolSet:
    """Give back the tool set the workflow recorded, run as a local activity: its result is kept in the
    run's history, so a replay reads the tool set the run first ran with, not the replaying worker's."""
    return tools


async def _heartbeat(every_timeout: Any) -> None:
    if every_timeout is None:
        return
    every = max(every_timeout.total_seconds() / 3, 0.05)
    while True:
        activity.heartbeat()
        await asyncio.sleep(every)
