"""OpenAI's strict mode through the wire: the schema rewrite, checked by FakeOpenAIServer's strict-mode rules."""

from __future__ import annotations

import enum
from typing import Any, Literal

import jsonschema
import pytest
from pydantic import BaseModel, ConfigDict, Field

from agentkit import (
    LoopConfig,
    Outcome,
    Prompt,
    RetryPolicy,
    RoleSpec,
    StructuredRequest,
    Tier,
    ToolRoundInfo,
    UsageError,
    run_tool_loop,
    tool,
)
from agentkit._step import build_step_model
from agentkit.errors import StructuredOutputError
from agentkit.providers import openai as openai_provider
from agentkit.providers._strict import strict_schema
from agentkit.providers.openai import OpenAICaller, StructuredMode, _plan
from agentkit.testing import FakeOpenAIServer, FakeReply, call_step, done_step

FAST = LoopConfig(retry=RetryPolicy(wait_initial=0, wait_max=0))
STRICT_MODES = [StructuredMode.JSON_SCHEMA, StructuredMode.TOOLS]


class Query(BaseModel):
    query: str
    limit: int = Field(default=5, ge=1, description="How many results.")


class Score(BaseModel):
    score: int


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Inner(BaseModel):
    tags: list[str] = Field(min_length=1, max_length=3)
    when: str = Field(json_schema_extra={"format": "date-time"})


class Rich(BaseModel):
    name: str = Field(min_length=2, max_length=20)
    color: Color
    kind: Literal["a", "b"] = "a"
    inner: Inner = Field(description="Nested, described: inlined in strict mode.")
    maybe: Inner | None = None
    note: str | None = None
    link: str = Field(default="x", json_schema_extra={"format": "uri"})


class Node(BaseModel):
    name: str
    children: list[Node] = []


class Loose(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str


class Labels(BaseModel):
    labels: dict[str, str]


@tool(tier=Tier.READ_ONLY)
def search(args: Query) -> list[str]:
    """Search the corpus."""
    return [f"doc:{args.query}:{args.limit}"]


@tool(tier=Tier.READ_ONLY)
def lookup(args: Score) -> list[str]:
    """Look a score up."""
    return [f"score:{args.score}"]


class Searcher:
    def role(self) -> RoleSpec:
        return RoleSpec(model="gpt-test", max_tokens=300)

    def render(self, ctx: str, info: ToolRoundInfo[str]) -> Prompt:
        return Prompt(system="You search a corpus.", dynamic=f"{ctx}; seen {info.prior_results}")


def request() -> StructuredRequest:
    return StructuredRequest(system="Answer.", dynamic="the text", model="gpt-test")


def sent_schema(body: dict[str, Any]) -> dict[str, Any]:
    if "response_format" in body:
        spec = body["response_format"]["json_schema"]
        assert spec["strict"] is True
        return dict(spec["schema"])
    function = body["tools"][0]["function"]
    assert function["strict"] is True
    return dict(function["parameters"])


@pytest.mark.parametrize("mode", STRICT_MODES)
async def test_strict_multi_tool_step_is_accepted_by_openai_rules(
    server: FakeOpenAIServer, mode: StructuredMode
) -> None:
    """A multi-tool step (a discriminated union, args with defaults) goes out strict and passes the strict check."""
    server.add(call_step(Score(score=3), tool="lookup"), done_step())
    async with OpenAICaller(base_url=server.base_url, mode=mode, strict=True) as caller:
        result = await run_tool_loop(caller, Searcher(), [search, lookup], "score 3", FAST)
    assert result.outcome is Outcome.APPLIED, result.error
    assert result.items == ["score:3"]
    schema = sent_schema(server.requests[0])
    for refused in ("oneOf", "discriminator", "default"):
        assert refused not in str(schema)
    [query] = [node for node in schema_objects(schema) if set(node.get("properties", ())) == {"query", "limit"}]
    assert query["required"] == ["query", "limit"]


def schema_objects(node: Any) -> list[dict[str, Any]]:
    """Every object in ``node``, nested ones included (a model used once is written in place, not in $defs)."""
    if isinstance(node, list):
        return [found for value in node for found in schema_objects(value)]
    if not isinstance(node, dict):
        return []
    return [node, *(found for value in node.values() for found in schema_objects(value))]


@pytest.mark.parametrize("mode", STRICT_MODES)
@pytest.mark.parametrize("tools", [[search], [search, lookup]], ids=["one tool", "two tools"])
async def test_strict_step_schema_on_the_wire_cannot_express_an_invalid_step(
    server: FakeOpenAIServer, mode: StructuredMode, tools: list[Any]
) -> None:
    """The strict step schema sent passes OpenAI's rules and admits no step that validation refuses."""
    server.add(done_step())
    async with OpenAICaller(base_url=server.base_url, mode=mode, strict=True) as caller:
        result = await run_tool_loop(caller, Searcher(), tools if len(tools) > 1 else tools[0], "q", FAST)
    assert result.outcome is Outcome.SILENT, result.error
    validator = jsonschema.Draft202012Validator(sent_schema(server.requests[0]))
    args = {"query": "x", "limit": 5}
    call = args if len(tools) == 1 else {"tool": "search", "args": args}
    assert validator.is_valid({"rationale": "", "decision": {"done": True}})
    assert validator.is_valid({"rationale": "", "decision": {"done": False, "call": call}})
    assert not validator.is_valid({"rationale": "", "decision": {"done": False, "call": None}})
    assert not validator.is_valid({"rationale": "", "decision": {"done": False}})


@pytest.mark.parametrize("mode", STRICT_MODES)
@pytest.mark.parametrize("model", [Rich, Node, Loose, build_step_model(Query, rationale_max_length=40)])
async def test_strict_schema_of_any_expressible_model_passes_and_round_trips(
    server: FakeOpenAIServer, mode: StructuredMode, model: type[BaseModel]
) -> None:
    """Defaults, nullable and nested models, enums, recursion: the strict schema passes, its instance validates."""
    async with OpenAICaller(base_url=server.base_url, mode=mode, strict=True) as caller:
        completion = await caller.complete(request(), model)
    assert isinstance(completion.value, model)
    assert completion.usage.requests == 1  # the unscripted reply is an instance of the strict schema, and it validated


async def test_strict_mode_keeps_optional_fields_nullable_and_defaulted_fields_typed(server: FakeOpenAIServer) -> None:
    """An ``X | None`` field stays a union with null; a field with a default is required with its own type."""
    async with OpenAICaller(base_url=server.base_url, strict=True) as caller:
        await caller.complete(request(), Rich)
    schema = sent_schema(server.requests[0])
    assert schema["required"] == list(Rich.model_fields)
    assert {"type": "null"} in schema["properties"]["note"]["anyOf"]
    assert schema["properties"]["kind"] == {"enum": ["a", "b"], "title": "Kind", "type": "string"}
    assert "format" not in schema["properties"]["link"]  # "uri" is not a strict-mode format
    assert schema["properties"]["inner"]["description"].startswith("Nested")


async def test_strict_schema_leaves_validation_to_the_real_model(server: FakeOpenAIServer) -> None:
    """A constraint strict mode cannot carry (``maxLength``) is still enforced: the reply is re-asked."""
    server.add({"name": "x" * 30, "color": "red", "kind": "a", "inner": {"tags": ["t"], "when": "now"}})
    async with OpenAICaller(base_url=server.base_url, strict=True) as caller:
        completion = await caller.complete(request(), Rich)
    assert "maxLength" not in str(sent_schema(server.requests[0]))
    assert "at most 20 characters" in server.requests[1]["messages"][-1]["content"]
    assert isinstance(completion.value, Rich)
    assert completion.usage.requests == 2


async def test_strict_schema_is_built_once_per_model(server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rewrite runs once per (model, mode), not per call."""

    class Once(BaseModel):
        text: str = ""

    built: list[str] = []

    def counting(schema: Any, name: str) -> dict[str, Any]:
        built.append(name)
        return strict_schema(schema, name)

    monkeypatch.setattr(openai_provider, "strict_schema", counting)
    async with OpenAICaller(base_url=server.base_url, strict=True) as caller:
        for _ in range(3):
            await caller.complete(request(), Once)
    assert built == ["Once"]
    assert _plan(Once, StructuredMode.JSON_SCHEMA, True) is _plan(Once, StructuredMode.JSON_SCHEMA, True)
    assert [body["response_format"]["json_schema"]["strict"] for body in server.requests] == [True] * 3


@pytest.mark.parametrize("model", [Labels, build_step_model(Labels)])
async def test_schema_strict_mode_cannot_express_is_a_usage_error(
    server: FakeOpenAIServer, model: type[BaseModel]
) -> None:
    """A free-form ``dict`` field cannot be strict: a UsageError names the field and the fix, before any request."""
    async with OpenAICaller(base_url=server.base_url, strict=True) as caller:
        with pytest.raises(UsageError, match=r"labels.*dict.*strict=False"):
            await caller.complete(request(), model)
    assert server.requests == []


@pytest.mark.parametrize(
    ("base_url", "strict"),
    [("https://api.openai.com/v1", True), ("http://127.0.0.1:8000/v1", False), ("https://llm.example.com/v1", False)],
)
def test_strict_is_on_by_default_for_openai_only(base_url: str, strict: bool) -> None:
    """``strict=None`` asks for strict mode on api.openai.com, and not on servers that may refuse or ignore it."""
    assert OpenAICaller(base_url=base_url, api_key="k").strict is strict
    assert OpenAICaller(base_url=base_url, api_key="k", strict=not strict).strict is (not strict)


@pytest.mark.parametrize("mode", STRICT_MODES)
async def test_without_strict_the_schema_goes_out_as_pydantic_wrote_it(
    server: FakeOpenAIServer, mode: StructuredMode
) -> None:
    """Off strict mode (local servers), no flag is sent and constraints such as ``maxLength`` reach the server."""
    async with OpenAICaller(base_url=server.base_url, mode=mode) as caller:
        await caller.complete(request(), Rich)
    body = server.requests[0]
    spec = body["response_format"]["json_schema"] if "response_format" in body else body["tools"][0]["function"]
    assert "strict" not in spec
    assert '"maxLength": 20' in str(spec).replace("'", '"')


async def test_strict_reply_cut_short_is_still_an_error(server: FakeOpenAIServer) -> None:
    """Strict mode changes the request only: a truncated reply is still a StructuredOutputError."""
    server.add(FakeReply.truncated())
    async with OpenAICaller(base_url=server.base_url, strict=True) as caller:
        with pytest.raises(StructuredOutputError, match="cut off"):
            await caller.complete(request(), Rich)


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "object", "properties": {"q": True}}, r"field 'q' is a value of any type \(true\)"),
        ({"type": "object", "properties": {"q": False}}, r"field 'q' is a schema no value matches \(false\)"),
        ({"type": "object", "properties": {"q": {"type": "array", "items": True}}}, r"field 'q\[\]' is a value of any"),
        ({"type": "object", "properties": {"q": {"anyOf": [False, False]}}}, r"field 'q' is a schema no value"),
        ({"type": "object", "properties": {"q": {"type": "string", "allOf": [False]}}}, r"field 'q' is a schema no"),
    ],
)
def test_a_boolean_subschema_strict_mode_cannot_express_is_a_usage_error_naming_the_field(
    schema: dict[str, Any], message: str
) -> None:
    """``true`` (any value) and ``false`` (no value) have no strict form: a UsageError names the field, no crash."""
    with pytest.raises(UsageError, match=message):
        strict_schema(schema, "loose")


def test_boolean_subschemas_strict_mode_can_express_are_rewritten() -> None:
    """A ``false`` variant adds nothing to a union and is dropped; ``true`` takes nothing from an intersection."""
    schema = {
        "type": "object",
        "properties": {"a": {"anyOf": [False, {"type": "null"}]}, "b": {"type": "string", "allOf": [True]}},
    }
    assert strict_schema(schema, "bools") == {
        "type": "object",
        "properties": {"a": {"anyOf": [{"type": "null"}]}, "b": {"type": "string"}},
        "required": ["a", "b"],
        "additionalProperties": False,
    }
