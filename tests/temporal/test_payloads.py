"""What a durable run can carry in Temporal's payloads, on a real dev server: a tool batch or a model reply
larger than one payload, batches that together would outgrow the run's outcome, a state too large to finish
or wait in, and values a payload cannot carry exactly (a NaN, a lone surrogate, deep nesting). Each ends the
run at once, saying why, with nothing run again (before, a workflow task whose payload was too large was
retried forever, asking the model and running the read again each time)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from pydantic import BaseModel, JsonValue
from temporalio.client import WorkflowFailureError, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError, TerminatedError

from agentkit import LoopConfig, Outcome, Prompt, RoleSpec, StopReason, Tier, ToolRoundInfo, tool
from agentkit._structured import Completion, StructuredCaller, StructuredRequest
from agentkit._usage import Usage
from agentkit.errors import ProviderError, ToolError, UsageError
from agentkit.prompting import ImagePart
from agentkit.providers.openai import OpenAICaller
from agentkit.temporal import ActivityPolicy, DurableAgent, RunStatus
from agentkit.temporal._activities import _carried
from agentkit.temporal._values import ToolReply
from tests.media_support import PNG
from tests.temporal.agents import DONE, Brief, until
from tests.temporal.support import BOUND, TemporalTest, patches

pytestmark = pytest.mark.slow

M = TypeVar("M", bound=BaseModel)

SMALL = 64 * 1024
"""The smallest payload limit a policy takes: small batches then show the limits without megabytes."""


class Fetch(BaseModel):
    kib: int
    """How many KiB of text the page holds."""
    odd: str = ""
    """What the page holds that a payload cannot carry exactly: "nan" (its score), "surrogate" (in its text)."""


class Page(BaseModel):
    id: str
    text: str
    score: float = 1.0
    tree: JsonValue = None


def nested(depth: int) -> JsonValue:
    """Lists nested `depth` deep."""
    tree: JsonValue = []
    for _ in range(depth - 1):
        tree = [tree]
    return tree


class Reader:
    """Renders the round and the ids fetched so far (never the text, so the prompt stays small)."""

    def role(self) -> RoleSpec:
        return RoleSpec(model="m")

    def render(self, ctx: Brief, info: ToolRoundInfo[Page]) -> Prompt:
        fetched = [page.id for call in info.prior_calls for page in call.batch]
        return Prompt(system="read", dynamic=f"{ctx.topic} round {info.round}: {fetched}")


class Surrogate:
    """A caller whose step holds a lone surrogate in its rationale, made as a value (no JSON on the way)."""

    def __init__(self) -> None:
        self.asked = 0

    async def complete(self, request: StructuredRequest, schema: type[M]) -> Completion[M]:
        self.asked += 1
        step = schema.model_validate({**DONE, "rationale": "half \udc80 a pair"})
        return Completion(value=step, usage=Usage(requests=1), model="m")


Reader_ = Callable[..., DurableAgent[Brief, Page]]

LONG = "r" * (30 * 1024)
"""A rationale a model reply carries (well under the payload limit), three of which outgrow `SMALL`."""


@pytest.fixture(name="reader")
async def reader_fixture(temporal: TemporalTest) -> AsyncIterator[Reader_]:
    """Makes durable agents whose one tool returns a page of `kib` KiB, counting its calls in `fetched`."""
    callers: list[OpenAICaller] = []

    def make(
        fetched: list[int],
        *,
        limit: int | None = None,
        tier: Tier = Tier.READ_ONLY,
        publish: bool = False,
        caller: StructuredCaller | None = None,
    ) -> DurableAgent[Brief, Page]:
        @tool(tier=tier)
        async def fetch(args: Fetch) -> list[Page]:
            """Fetch a page."""
            fetched.append(args.kib)
            text = "x" * (args.kib * 1024) + ("\udc80" if args.odd == "surrogate" else "")
            score = float("nan") if args.odd == "nan" else 1.0
            # A page's tree, 189 deep, takes its batch 191 deep: the deepest carried. One level more is refused.
            tree = nested(190) if args.odd == "deep" else nested(189) if args.odd == "nested" else None
            return [Page(id=f"page-{len(fetched)}", text=text, score=score, tree=tree)]

        @tool(tier=Tier.IRREVERSIBLE, name="publish")
        async def publish_(args: Fetch) -> list[Page]:
            """Publish a page."""
            fetched.append(-args.kib)
            return []

        policy = ActivityPolicy() if limit is None else ActivityPolicy(payload_limit=limit)
        if caller is None:
            callers.append(OpenAICaller(base_url=temporal.fake.base_url, api_key="k"))
        return DurableAgent(
            name="reader",
            agent=Reader(),
            tools=[fetch, publish_] if publish else fetch,
            caller=caller or callers[-1],
            ctx_type=Brief,
            config=LoopConfig(max_rounds=6),
            policy=policy,
        )

    yield make
    for caller in callers:
        await caller.aclose()


def read(kib: int, *, tool: str | None = None, odd: str = "", rationale: str = "fetch") -> dict[str, Any]:
    """The model's step fetching a page of `kib` KiB (calling `tool` by name, for an agent of several)."""
    args: dict[str, Any] = {"kib": kib, "odd": odd}
    return {"done": False, "call": args if tool is None else {"tool": tool, "args": args}, "rationale": rationale}


async def failure_of(temporal: TemporalTest, run_id: str) -> ApplicationError:
    with pytest.raises(WorkflowFailureError) as failed:
        await asyncio.wait_for(temporal.runs.get("reader", run_id).result(), BOUND)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError)
    return cause


async def test_a_batch_larger_than_a_payload_ends_the_run_once_keeping_the_items_before(
    temporal: TemporalTest, reader: Reader_
) -> None:
    """Under the server's own 2 MiB limit: a READ_ONLY read (a local activity) returns 3 MiB. The run ends at
    once with a ToolError naming the size and the limit, the items of the round before kept; the read ran
    once and the model was asked twice (before, the workflow task failed and was retried forever)."""
    fetched: list[int] = []
    durable = reader(fetched)
    temporal.fake.add(read(1), read(3 * 1024), DONE)
    async with temporal.worker(durable):
        result = await asyncio.wait_for((await temporal.runs.start(durable, Brief(topic="t"))).result(), BOUND)
    assert (result.outcome, result.stop_reason, result.rounds) == (Outcome.ERROR, StopReason.TOOL_ERROR, 2)
    assert isinstance(result.error, ToolError)
    assert "returned a batch of 3,145,7" in str(result.error)
    assert "ActivityPolicy.payload_limit 2,097,152" in str(result.error)
    assert [page.id for page in result.items] == ["page-1"]
    assert fetched == [1, 3 * 1024]
    assert len(temporal.fake.requests) == 2


async def test_an_approved_call_whose_batch_is_too_large_ran_once_and_is_not_run_again(
    temporal: TemporalTest, reader: Reader_
) -> None:
    """An IRREVERSIBLE call, approved, returns more than a payload holds (an activity of its own, one
    attempt). The run ends with the ToolError saying that the call ran; it is not run again."""
    fetched: list[int] = []
    durable = reader(fetched, limit=SMALL, tier=Tier.IRREVERSIBLE)
    temporal.fake.add(read(80), DONE)
    async with temporal.worker(durable):
        handle = await temporal.runs.start(durable, Brief(topic="t"))
        [proposal] = (await until(handle, RunStatus.WAITING)).pending
        await handle.approve(proposal, by="alice")
        result = await asyncio.wait_for(handle.result(), BOUND)
    assert (result.outcome, result.stop_reason) == (Outcome.ERROR, StopReason.TOOL_ERROR)
    assert "The call ran; its batch is not kept" in str(result.error)
    assert result.items == []
    assert fetched == [80]


async def test_batches_that_together_would_outgrow_the_outcome_end_the_run_keeping_the_first(
    temporal: TemporalTest, reader: Reader_
) -> None:
    """Each batch fits a payload, but the outcome holds the items twice (as items and in the state): the
    batch that would take them past the limit is refused as it comes in, and the run finishes with the
    items before it and an error naming both sizes. Its history replays without a determinism error."""
    fetched: list[int] = []
    durable = reader(fetched, limit=SMALL)
    temporal.fake.add(read(20), read(21), DONE)
    async with temporal.worker(durable):
        handle = await temporal.runs.start(durable, Brief(topic="t"))
        result = await asyncio.wait_for(handle.result(), BOUND)
    await temporal.replay(await temporal.history(handle.run_id), agents=[durable])  # the refusal replays as it ran
    assert (result.outcome, result.stop_reason, result.rounds) == (Outcome.ERROR, StopReason.TOOL_ERROR, 2)
    assert "with the 4" in str(result.error)
    assert "the run could no longer wait or finish" in str(result.error)
    assert [page.id for page in result.items] == ["page-1"]
    assert fetched == [20, 21]


async def test_an_outcome_too_large_for_a_payload_fails_the_run_saying_so(
    temporal: TemporalTest, reader: Reader_
) -> None:
    """A state that outgrows a payload by its rounds' text (three long rationales, each reply well within a
    payload; not items): the run cannot return its outcome, and fails at once with PayloadTooLarge naming the
    size, not retried."""
    fetched: list[int] = []
    durable = reader(fetched, limit=SMALL)
    temporal.fake.add(read(1, rationale=LONG), read(2, rationale=LONG), {**DONE, "rationale": LONG})
    async with temporal.worker(durable):
        run_id = (await temporal.runs.start(durable, Brief(topic="t"))).run_id
        cause = await failure_of(temporal, run_id)
        state = await temporal.runs.state(run_id)
    assert (cause.type, cause.non_retryable) == ("PayloadTooLarge", True)
    assert "cannot carry its outcome" in cause.message
    assert "ActivityPolicy.payload_limit" in cause.message
    assert state.status is RunStatus.FAILED
    assert len(temporal.fake.requests) == 3
    assert fetched == [1, 2]


def before_the_budget() -> WorkflowHistory:
    """A run of ``reader`` recorded by the code before the payload budget: a READ_ONLY read of 40 KiB, then
    done, on a worker without `payload_limit` (its outcome holds the page twice, over `SMALL`)."""
    path = Path(__file__).resolve().parent / "histories" / "outcome-before-payload-budget.json"
    return WorkflowHistory.from_json("outcome-before-payload-budget", path.read_text())


async def test_a_run_recorded_before_the_payload_budget_replays_as_it_ran(
    temporal: TemporalTest, reader: Reader_
) -> None:
    """A run recorded before payloads were counted (no agentkit-payload-budget patch in its history) that
    finished with an outcome larger than the replaying worker's payload limit (as on a server whose
    limit.blobSize.error was raised): it replays as it ran, without a determinism error. Before, the check
    on the outcome's size ran on replay too, and failed the run its history says completed."""
    history = before_the_budget()
    assert "agentkit-payload-budget" not in patches(history)
    [completed] = [e for e in history.events if e.HasField("workflow_execution_completed_event_attributes")]
    [outcome] = completed.workflow_execution_completed_event_attributes.result.payloads
    assert outcome.ByteSize() > SMALL
    await temporal.replay(history, agents=[reader([], limit=SMALL)])


async def test_a_state_too_large_to_wait_in_fails_the_run_saying_so(temporal: TemporalTest, reader: Reader_) -> None:
    """The same for a run that stops at a proposal: its state, carried into the leg that waits, outgrows a
    payload; the run fails naming it instead of retrying the task forever. The proposed call never ran."""
    fetched: list[int] = []
    durable = reader(fetched, limit=SMALL, publish=True)
    temporal.fake.add(
        read(1, tool="fetch", rationale=LONG),
        read(2, tool="fetch", rationale=LONG),
        read(3, tool="publish", rationale=LONG),
    )
    async with temporal.worker(durable):
        run_id = (await temporal.runs.start(durable, Brief(topic="t"))).run_id
        cause = await failure_of(temporal, run_id)
    assert cause.type == "PayloadTooLarge"
    assert "cannot carry its state into its next leg" in cause.message
    assert fetched == [1, 2]


async def test_a_model_reply_larger_than_a_payload_ends_the_run_asking_once(
    temporal: TemporalTest, reader: Reader_
) -> None:
    """A reply the model made too large to record (a rationale of 3 MiB, against the server's own limit) ends
    the run with a ProviderError naming the size, LLM_ERROR, the model asked once (before, the workflow task
    failed and was retried forever, asking the model again each time)."""
    fetched: list[int] = []
    durable = reader(fetched)
    temporal.fake.add({**DONE, "rationale": "r" * (3 * 1024 * 1024)})
    async with temporal.worker(durable):
        result = await asyncio.wait_for((await temporal.runs.start(durable, Brief(topic="t"))).result(), BOUND)
    assert (result.outcome, result.stop_reason) == (Outcome.ERROR, StopReason.LLM_ERROR)
    assert isinstance(result.error, ProviderError)
    assert "the model's reply takes 3,145,7" in str(result.error)
    assert len(temporal.fake.requests) == 1
    assert fetched == []


async def test_replies_that_together_outgrow_a_workflow_task_fail_the_run_at_once(
    temporal: TemporalTest, reader: Reader_
) -> None:
    """Three model replies of 1.5 MiB each, every one under the payload limit, asked in one workflow task (each
    a local activity, recorded as a marker in the task's completion): the completion outgrows the server's
    4 MiB gRPC limit, and the server terminates the run at once (GrpcMessageTooLarge), the model asked three
    times and each read run once, not a task retried forever."""
    fetched: list[int] = []
    durable = reader(fetched)
    huge = "r" * (1536 * 1024)
    temporal.fake.add(read(1, rationale=huge), read(2, rationale=huge), {**DONE, "rationale": huge})
    async with temporal.worker(durable):
        run_id = (await temporal.runs.start(durable, Brief(topic="t"))).run_id
        with pytest.raises(WorkflowFailureError) as failed:
            await asyncio.wait_for(temporal.runs.get("reader", run_id).result(), BOUND)
    cause = failed.value.cause
    assert isinstance(cause, TerminatedError)
    assert cause.message == "GrpcMessageTooLarge"
    assert len(temporal.fake.requests) == 3
    assert fetched == [1, 2]


@pytest.mark.parametrize(
    ("odd", "named"),
    [
        ("nan", "a float that is not finite (NaN or infinity)"),
        ("surrogate", "a lone surrogate in its text"),
        ("deep", "values nested deeper than 190 levels"),
    ],
)
async def test_items_a_payload_cannot_carry_exactly_end_the_run_once(
    temporal: TemporalTest, reader: Reader_, odd: str, named: str
) -> None:
    """A NaN score (a payload writes it as null), a lone surrogate (a payload cannot be written with it) or
    lists nested one level past the limit (a payload cannot be read back: its parser stops at 201) in items:
    refused as they come in, the run ending TOOL_ERROR with the items before it and an error naming the value;
    the read ran once. Before, a lone surrogate failed each attempt's reply, so the tool ran three times; a NaN
    came back as null and failed to validate; the nested batch failed the workflow task, forever. Lists nested
    to the limit (round 1) are carried: in the outcome, in the state a query returns, and on replay."""
    fetched: list[int] = []
    durable = reader(fetched)
    temporal.fake.add(read(1, odd="nested"), read(2, odd=odd), DONE)
    async with temporal.worker(durable):
        handle = await temporal.runs.start(durable, Brief(topic="t"))
        result = await asyncio.wait_for(handle.result(), BOUND)
        state = await temporal.runs.state(handle.run_id)
    await temporal.replay(await temporal.history(handle.run_id), agents=[durable])
    assert state.outcome is not None
    assert [Page.model_validate(item).tree for item in state.outcome.items] == [nested(189)]
    assert (result.outcome, result.stop_reason, result.rounds) == (Outcome.ERROR, StopReason.TOOL_ERROR, 2)
    assert f"returned items holding {named}" in str(result.error)
    assert [page.id for page in result.items] == ["page-1"]
    assert fetched == [1, 2]


async def test_a_model_reply_with_a_lone_surrogate_ends_the_run_asking_once(
    temporal: TemporalTest, reader: Reader_
) -> None:
    """A step holding a lone surrogate (from a caller that makes one: OpenAICaller's JSON parsing re-asks for
    such a reply) cannot be recorded in a payload: the run ends LLM_ERROR naming it after one attempt, instead
    of a lost model call retried and failed over."""
    fetched: list[int] = []
    script = Surrogate()
    durable = reader(fetched, caller=script)
    async with temporal.worker(durable):
        result = await asyncio.wait_for((await temporal.runs.start(durable, Brief(topic="t"))).result(), BOUND)
    assert (result.outcome, result.stop_reason) == (Outcome.ERROR, StopReason.LLM_ERROR)
    assert "the model's reply holds a lone surrogate in its text" in str(result.error)
    assert script.asked == 1
    assert fetched == []


@pytest.mark.parametrize("limit", [SMALL - 1, 0, True, 2.5])
def test_a_payload_limit_below_the_least_is_refused(limit: Any) -> None:
    with pytest.raises(UsageError, match="payload_limit must be an integer of at least 65536 bytes"):
        ActivityPolicy(payload_limit=limit)


@pytest.mark.parametrize("text", ["plain", "caf\u00e9 \u6f22\u5b57 \U0001f600"])
def test_a_batch_is_measured_as_its_payload_writes_it(text: str) -> None:
    """The size a tool's batch (or a model's step) is checked at is the bytes the payload converter writes
    for it, compact UTF-8 JSON, less only the reply's few bytes around it. Before, it was measured with a
    space after each comma and colon, and a batch of many small items counted up to half again its size."""
    batch: list[JsonValue] = [{"id": f"p{i}", "n": i, "tags": ["a", text], "sub": {"k": None}} for i in range(500)]
    [payload] = pydantic_data_converter.payload_converter.to_payloads([ToolReply(batch=batch, observation=None)])
    size, lossy = _carried(batch)
    assert lossy is None
    assert 0 < len(payload.data) - size < 64


class Viewer(Reader):
    """`Reader`, with an image of `kib` KiB after its text."""

    def __init__(self, kib: int) -> None:
        self.image = ImagePart(data=PNG + b"\0" * (kib * 1024), media_type="image/png")

    def render(self, ctx: Brief, info: ToolRoundInfo[Page]) -> Prompt:
        return Prompt(system="read", parts=(super().render(ctx, info).dynamic, self.image))


def viewer(
    temporal: TemporalTest, caller: OpenAICaller, kib: int, limit: int | None = None
) -> DurableAgent[Brief, Page]:
    @tool(tier=Tier.READ_ONLY)
    async def fetch(args: Fetch) -> list[Page]:
        """Fetch a page."""
        return [Page(id="page", text="x")]

    return DurableAgent(
        name="reader",
        agent=Viewer(kib),
        tools=fetch,
        caller=caller,
        ctx_type=Brief,
        config=LoopConfig(max_rounds=3),
        policy=ActivityPolicy() if limit is None else ActivityPolicy(payload_limit=limit),
    )


async def test_a_prompts_image_reaches_the_model_through_the_model_activity(temporal: TemporalTest) -> None:
    """On Temporal the prompt's image travels in the model activity's request (base64) and is sent as an image_url
    part, every round."""
    async with OpenAICaller(base_url=temporal.fake.base_url, api_key="k") as caller:
        durable = viewer(temporal, caller, kib=1)
        temporal.fake.add(read(1), DONE)
        async with temporal.worker(durable):
            result = await asyncio.wait_for((await temporal.runs.start(durable, Brief(topic="t"))).result(), BOUND)
    assert (result.stop_reason, result.rounds) == (StopReason.EXECUTOR_DONE, 2)
    for request in temporal.fake.requests:
        [user] = [m for m in request["messages"] if m["role"] == "user"]
        assert [part["type"] for part in user["content"]] == ["text", "image_url"]


async def test_a_prompts_images_too_large_for_a_payload_end_the_run_before_asking(temporal: TemporalTest) -> None:
    """An image that takes the request past the payload limit is refused before the activity is scheduled: the
    run ends LLM_ERROR with a ProviderError naming the sizes and the URL alternative, the model never asked."""
    async with OpenAICaller(base_url=temporal.fake.base_url, api_key="k") as caller:
        durable = viewer(temporal, caller, kib=80, limit=SMALL)
        async with temporal.worker(durable):
            result = await asyncio.wait_for((await temporal.runs.start(durable, Brief(topic="t"))).result(), BOUND)
    assert (result.outcome, result.stop_reason) == (Outcome.ERROR, StopReason.LLM_ERROR)
    assert isinstance(result.error, ProviderError)
    assert "images and documents take the model call's request to" in str(result.error)
    assert "ImagePart(url=...)" in str(result.error)
    assert temporal.fake.requests == []
