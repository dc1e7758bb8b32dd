"""The workflow's seams, in workflow code: the model caller (each attempt a local activity, or an
activity of its own in a run recorded before model calls were local), the tools (a live READ_ONLY
call a local activity, since it may run again; any other call, an approved one included, an activity of
its own) and the standing grants (an activity that asks the worker's `Grants`). Deterministic: they
schedule activities and read their recorded results, nothing else."""

from __future__ import annotations

import contextlib
import contextvars
import json
from collections.abc import Iterator, Mapping, Sequence
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, TypeAdapter
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, FailureError

from agentkit._codec import item_type_of
from agentkit._grants import Grant, untrusted_marks
from agentkit._invoke import Relayed
from agentkit._observe import ModelCall as Asked
from agentkit._observe import Observer, ToolInvocation
from agentkit._proposals import ProposedAction
from agentkit._state import RunCheckpoint, json_text
from agentkit._structured import Completion, StructuredRequest
from agentkit._tiers import Tier
from agentkit._trust import Trust, declared_egress, declared_trust
from agentkit._usage import usage_of_counts
from agentkit.errors import ProviderError, ToolError, ToolRetry, ToolTimeout
from agentkit.temporal._activities import (
    _ENVELOPE,
    GRANT_ACTIVITY,
    MODEL_ACTIVITY,
    REQUEST,
    TOOL_ACTIVITY,
    decode_error,
)
from agentkit.temporal._agent import DurableAgent
from agentkit.temporal._values import GrantAsk, GrantReply, ModelCall, ModelReply, ToolCallInput, ToolReply

ONCE = RetryPolicy(maximum_attempts=1)
_REPORT_GRACE = timedelta(seconds=5)
"""How much longer than `LoopConfig.tool_timeout` a tool attempt has, for the activity to report its timeout."""


class OutcomeLost(ToolError):
    """An approved call's activity ended without an outcome (its worker was lost); never re-run."""


class InFlight(Observer):
    """The call the run makes now, as the loop core shows it to its observers (run id, round, approval):
    what the activities are told of it, for the worker's observers. Deterministic like the rest of the
    workflow: it records, it never acts.

    The call is held in a context variable: the calls of a step of several (`LoopConfig.max_calls_per_step`)
    run at once, each in a task of its own, and each tool's activity must be told its own call.
    """

    sees_calls = False

    @property
    def call(self) -> Asked | ToolInvocation | None:
        """The call the task at hand makes now (`None`: none)."""
        return _IN_FLIGHT.get()

    @contextlib.contextmanager
    def around(self, call: Asked | ToolInvocation) -> Iterator[None]:
        token = _IN_FLIGHT.set(call)
        try:
            yield
        finally:
            _IN_FLIGHT.reset(token)


_IN_FLIGHT: contextvars.ContextVar[Asked | ToolInvocation | None] = contextvars.ContextVar(
    "agentkit_temporal_in_flight", default=None
)


class Carried:
    """How many bytes of Temporal's payload limit a run's items take, as the run takes them in.

    A durable run's outcome holds its items twice (as items, and in its state as each batch's JSON
    text), and a leg that waits for people carries its state into the next; one payload must hold
    each (`ActivityPolicy.payload_limit`). A batch that would take the items past the limit, less
    an eighth kept for the rest of the state, is refused as it comes in: the run ends with a
    `ToolError` naming the sizes, with every item taken in before, and can still finish (a workflow
    task whose payload is too large is retried by Temporal forever, running its model calls and
    reads again each time). Deterministic: sizes of recorded values.
    """

    def __init__(self, limit: int, checkpoint: RunCheckpoint | None, *, enforced: bool) -> None:
        self.limit, self.enforced = limit, enforced
        self.room = limit - limit // 8
        """Bytes the run's items may take in all."""
        self.taken = 0
        if checkpoint is not None:
            for entry in checkpoint.entries:
                batch = getattr(entry, "batch", None)
                if batch is not None:
                    self.taken += _cost(batch)

    def take(self, tool_name: str, batch: Sequence[Any]) -> None:
        """Count `batch` (the tool activity's reply, JSON values) in, or refuse it (`ToolError`)."""
        cost = _cost(json_text(list(batch)))
        if self.enforced and self.taken + cost > self.room:
            raise ToolError(
                f"tool {tool_name!r} returned a batch that takes {cost:,} bytes of the run's Temporal payloads; with "
                f"the {self.taken:,} its items take already, the run could no longer wait or finish within "
                f"{self.room:,} bytes (ActivityPolicy.payload_limit {self.limit:,}, less an eighth for the rest of its "
                "state). The call ran; its batch is not kept. Return fewer or smaller items (a reference to where the "
                "data is), or raise the server's limit.blobSize.error and payload_limit together",
                tool_name=tool_name,
            )
        self.taken += cost


def _cost(batch_text: str) -> int:
    """What a batch, as its state's JSON text (ASCII), adds to a run's outcome: the items, at most as long
    as the text, and the text itself quoted in the state."""
    return len(batch_text) + len(json.dumps(batch_text))


class ActivityCaller:
    """The model seam in workflow code: one activity per attempt."""

    def __init__(self, agent: str, durable: DurableAgent[Any, Any], in_flight: InFlight, *, local: bool) -> None:
        self.agent, self.policy, self.in_flight, self.local = agent, durable.policy, in_flight, local

    def _check_media(self, dumped: Mapping[str, Any]) -> None:
        """A request whose images and documents (their bytes in base64) outgrow one payload is refused before it is
        scheduled: its activity could not start, and a workflow task that fails is retried forever."""
        size = len(json.dumps(dumped, separators=(",", ":")).encode())
        payload = self.policy.payload_limit
        limit = payload - _ENVELOPE
        if size > limit:
            raise ProviderError(
                f"the prompt's images and documents take the model call's request to {size:,} bytes as JSON, more "
                f"than one Temporal payload holds ({limit:,}: ActivityPolicy.payload_limit {payload:,}"
                f", less {_ENVELOPE:,} for what surrounds it); it is not sent. Give large images by URL "
                "(ImagePart(url=...): the URL travels, bytes travel in base64 in every round's request), or raise the "
                "server's limit.blobSize.error and payload_limit together",
                transient=False,
            )

    async def complete(self, request: StructuredRequest, schema: type[Any]) -> Completion[Any]:
        asked = self.in_flight.call
        dumped = REQUEST.dump_python(request, mode="json")
        if request.parts:
            self._check_media(dumped)
        call = ModelCall(
            agent=self.agent,
            schema_name=schema.__name__,
            request=dumped,
            run_id=workflow.info().workflow_id,
            round=asked.round if isinstance(asked, Asked) else 0,
            role=asked.role if isinstance(asked, Asked) else "executor",
        )
        try:
            reply = await self.attempt(call)
        except FailureError as failed:
            # An activity's failure comes as an ActivityError whose cause is the activity's own; a local
            # activity's as that failure itself.
            cause = failed.cause if isinstance(failed, ActivityError) else failed
            if isinstance(cause, ApplicationError):
                raise decode_error(cause) from None
            # The attempt timed out (or, as an activity of its own, its worker died and stopped heartbeating):
            # a transient failure, which generate_structured retries (on any worker) and fails over like any other.
            raise ProviderError(f"model call lost: {cause or failed}", transient=True) from None
        return Completion(
            value=schema.model_validate(reply.value),
            usage=usage_of_counts(reply),
            model=reply.model,
            response_id=reply.response_id,
            finish_reasons=reply.finish_reasons,
            reasoning=reply.reasoning,
        )

    async def attempt(self, call: ModelCall) -> ModelReply:
        """One attempt: a local activity, or (a run recorded before `_LOCAL_MODEL`) an activity of its own.

        A local activity runs on the worker playing the workflow task, and its reply is recorded with the
        task's commands (those that schedule the round's tool call), so a round costs one workflow task,
        not two. It does not heartbeat; the workflow task stands in for it: the worker keeps the task alive
        while the model answers, and a worker lost mid-call loses the task, which Temporal gives to another
        worker once the task's timeout has passed (10 s by default, after up to 5 s on the lost worker's
        sticky queue); that worker replays the run and asks the model again, once. A reply that never
        comes ends the attempt at `model_timeout`, as before.
        """
        if self.local:
            reply: ModelReply = await workflow.execute_local_activity(
                MODEL_ACTIVITY,
                call,
                result_type=ModelReply,
                start_to_close_timeout=self.policy.model_timeout,
                retry_policy=ONCE,
            )
        else:
            reply = await workflow.execute_activity(
                MODEL_ACTIVITY,
                call,
                result_type=ModelReply,
                start_to_close_timeout=self.policy.model_timeout,
                heartbeat_timeout=self.policy.heartbeat,
                retry_policy=ONCE,
            )
        return reply


class ActivityGrants:
    """The run's standing grants in workflow code: each proposal's grant is the answer of the grant activity
    (`Activities.use_grant`, on a worker, which holds `DurableAgent.grants` and counts the use). Its answer is
    in the run's history, so a replay reads it and counts nothing; a retry is asked under the call's key and
    counts nothing either. An ask that fails approves nothing: the proposal waits for a person."""

    def __init__(self, agent: str, policy_timeout: timedelta) -> None:
        self.agent, self.timeout = agent, policy_timeout

    async def __call__(self, proposal: ProposedAction[Any]) -> Grant | None:
        ask = GrantAsk(
            agent=self.agent,
            tool_name=proposal.tool_name,
            tier=proposal.tier,
            args=proposal.args.model_dump(mode="json"),
            run_id=workflow.info().workflow_id,
            round=proposal.round,
            digest=proposal.digest,
            from_untrusted=untrusted_marks(proposal),
        )
        try:
            reply: GrantReply = await workflow.execute_activity(
                GRANT_ACTIVITY,
                ask,
                result_type=GrantReply,
                start_to_close_timeout=self.timeout,
                retry_policy=RetryPolicy(maximum_attempts=3),
            )
        except ActivityError:
            return None  # fail closed: without an answer, a person decides
        return reply.grant


class ActivityTool:
    """A tool in workflow code: its name, description, args type, tier and item type are the real
    tool's; its call is an activity (retried per policy when it runs live, once when approved), or a
    local activity when it runs live and is READ_ONLY (`attempt`)."""

    def __init__(
        self,
        agent: str,
        durable: DurableAgent[Any, Any],
        name: str,
        lost: list[str],
        in_flight: InFlight,
        carried: Carried,
        *,
        local: bool,
    ) -> None:
        real = durable.box.tools[name]
        self.agent, self.durable, self.lost, self.in_flight, self.local = agent, durable, lost, in_flight, local
        self.carried = carried
        self.name: str = real.name
        self.description: str = real.description
        self.args_type: type[BaseModel] = real.args_type
        self.tier: Tier = real.tier
        self.trust: Trust = declared_trust(real)
        """The real tool's trust and egress: the workflow's loop keeps the run's taint by them."""
        self.egress: bool = declared_egress(real)
        self.result_type = item_type_of(real)
        self.items: TypeAdapter[list[Any]] = TypeAdapter(list[self.result_type])  # type: ignore[name-defined]  # a run-time type

    async def call(self, args: BaseModel) -> Sequence[Any]:
        invoked = self.in_flight.call
        approval = invoked.approval if isinstance(invoked, ToolInvocation) else None
        call = ToolCallInput(
            agent=self.agent,
            tool_name=self.name,
            args=args.model_dump(mode="json"),
            run_id=workflow.info().workflow_id,
            round=invoked.round if isinstance(invoked, ToolInvocation) else 0,
            approved_by=approval.approved_by if approval is not None else None,
            digest=approval.digest if approval is not None else None,
        )
        gated = self.durable.gated(self.name)
        local = runs_local(self.durable, self.name, approved=approval is not None, patched=self.local)
        try:
            reply = await self.attempt(call, gated=gated, local=local)
        except FailureError as failed:
            # As for a model call: an activity's failure is the cause of its ActivityError.
            cause = failed.cause if isinstance(failed, ActivityError) else failed
            if isinstance(cause, ApplicationError) and cause.type == "ToolRetry":
                # A tool activity of an earlier agentkit reported a ToolRetry as its failure (histories
                # recorded then replay the same way): the call's observation, as it is now.
                raise ToolRetry(cause.message) from None
            # The call's error as it is (the activity's invoke worded it), not as the stand-in's failure.
            raise Relayed(self.failure(cause or failed, gated)) from None
        if reply.observation is not None:
            raise ToolRetry(reply.observation)
        try:
            self.carried.take(self.name, reply.batch)
        except ToolError as refused:
            raise Relayed(refused) from None
        return self.items.validate_python(reply.batch)

    async def attempt(self, call: ToolCallInput, *, gated: bool, local: bool) -> ToolReply:
        """The call's activity: once when it is gated (approved), else retried per the policy; a local
        activity when it may run again (`DurableAgent.rerunnable`: live and READ_ONLY, not approved).

        A local activity runs on the worker playing the workflow task, and its batch is recorded with the
        task's commands, beside the model reply that asked for it. It does not heartbeat: each attempt is
        bounded by its `start_to_close_timeout` (`ActivityPolicy.tool_timeout`, or `LoopConfig.tool_timeout`
        plus 5 s), and the attempts by `ActivityPolicy.tool_attempts` (no `schedule_to_close_timeout`), while
        the worker keeps the workflow task alive. A worker lost mid-call loses the task: once its timeout
        has passed (10 s by default), another worker replays the run from its last completed task and makes
        that task's model calls and reads again, which READ_ONLY allows.
        """
        policy = self.durable.policy
        timeout = policy.tool_timeout
        if self.durable.config.tool_timeout is not None:
            # The activity's own invoke enforces the tool timeout (ToolTimeout, as in-process); Temporal's
            # gives it a little longer, so that its report arrives.
            timeout = min(timeout, timedelta(seconds=self.durable.config.tool_timeout) + _REPORT_GRACE)
        retry = ONCE
        if not gated:
            retry = RetryPolicy(
                maximum_attempts=policy.tool_attempts,
                initial_interval=policy.retry_initial,
                non_retryable_error_types=["ToolResultInvalid"],
            )
        if local:
            reply: ToolReply = await workflow.execute_local_activity(
                TOOL_ACTIVITY, call, result_type=ToolReply, start_to_close_timeout=timeout, retry_policy=retry
            )
        else:
            reply = await workflow.execute_activity(
                TOOL_ACTIVITY,
                call,
                result_type=ToolReply,
                start_to_close_timeout=timeout,
                heartbeat_timeout=policy.heartbeat,
                retry_policy=retry,
            )
        return reply

    def failure(self, cause: BaseException, gated: bool) -> ToolError:
        """The error a failed tool activity stands for: the one its `invoke` reported (`ToolTimeout`
        or `ToolError`, with the in-process message), or the activity's own failure."""
        if isinstance(cause, ApplicationError):
            if cause.type == "ToolTimeout":
                return ToolTimeout(cause.message, tool_name=self.name)
            if cause.type in ("ToolError", "ToolResultInvalid", "ToolResultTooLarge"):
                return ToolError(cause.message, tool_name=self.name)
            return ToolError(f"tool {self.name!r} activity failed: {cause.type}: {cause.message}", tool_name=self.name)
        if gated:
            # At most once: the call may or may not have taken effect, and it is never re-run.
            self.lost.append(self.name)
            return OutcomeLost(
                f"the outcome of the approved call to {self.name!r} is unknown: its activity ended without one "
                f"({cause}); it is not re-run",
                tool_name=self.name,
            )
        return ToolError(f"tool {self.name!r} activity failed: {cause}", tool_name=self.name)


def runs_local(durable: DurableAgent[Any, Any], tool_name: str, *, approved: bool, patched: bool) -> bool:
    """Whether a call of `tool_name` is a local activity: in a run recorded with the local-reads patch, a
    call that runs live (never an approved one) of a READ_ONLY tool (`DurableAgent.rerunnable`), which a
    lost worker may make again. Every other call is an activity of its own."""
    return patched and not approved and durable.rerunnable(tool_name)
