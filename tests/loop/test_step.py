"""ToolStep: validation and schema names valid for OpenAI."""

from __future__ import annotations

import gc
import json
import re
import weakref
from typing import Any

import httpx2
import jsonschema
import openai
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, Field, ValidationError, create_model

from agentkit import Cites, StructuredRequest, ToolStep
from agentkit._cites import restricted
from agentkit._step import ToolCall, build_step_model, schema_name
from agentkit.errors import ProviderError
from agentkit.providers._strict import strict_schema
from agentkit.providers.openai import OpenAICaller
from agentkit.testing._fake_wire import check_strict_schema
from tests.support import Doc

OPENAI_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


class SearchArgs(BaseModel):
    query: str


class DeleteArgs(BaseModel):
    id: str


def test_not_done_without_call_is_invalid() -> None:
    """done=false with no call is a validation error whose text tells the model the fix."""
    with pytest.raises(ValidationError, match="must carry a call"):
        ToolStep[SearchArgs].model_validate({"done": False})


def test_done_without_call_is_valid() -> None:
    """done=true needs no call."""
    step = ToolStep[SearchArgs].model_validate({"done": True, "rationale": "enough"})
    assert step.done
    assert step.call is None


def test_call_is_validated_as_args_type() -> None:
    """The call is validated as the tool's args model."""
    step = ToolStep[SearchArgs].model_validate({"done": False, "call": {"query": "x"}})
    assert step.call == SearchArgs(query="x")
    with pytest.raises(ValidationError):
        ToolStep[SearchArgs].model_validate({"done": False, "call": {"q": "x"}})


def test_parametrised_schema_name_is_valid_for_openai() -> None:
    """ToolStep[Args]'s schema title is a valid OpenAI function name."""
    title = ToolStep[SearchArgs].model_json_schema()["title"]
    assert OPENAI_NAME.fullmatch(title)
    assert title == "ToolStep_SearchArgs"


def test_rationale_comes_before_the_decision_in_schema() -> None:
    """Reasoning is emitted before the decision under constrained decoding."""
    assert list(ToolStep[SearchArgs].model_json_schema()["properties"]) == ["rationale", "decision"]


STEP_SPECS = [
    pytest.param(SearchArgs, id="one tool"),
    pytest.param((("search", SearchArgs),), id="a set of one"),
    pytest.param((("search", SearchArgs), ("delete", DeleteArgs)), id="a set of two"),
]


@pytest.mark.parametrize("spec", STEP_SPECS)
def test_schema_cannot_express_a_step_without_a_call_unless_done(spec: Any) -> None:
    """No instance of the step schema is refused by validation: done=false without a call is outside it."""
    validator = jsonschema.Draft202012Validator(build_step_model(spec).model_json_schema())
    call: dict[str, Any] = {"query": "x"} if isinstance(spec, type) else {"tool": "search", "args": {"query": "x"}}
    assert validator.is_valid({"rationale": "", "decision": {"done": True}})
    assert validator.is_valid({"rationale": "", "decision": {"done": False, "call": call}})
    for refused in ({"done": False}, {"done": False, "call": None}, {"done": True, "call": call}, {"call": call}):
        assert not validator.is_valid({"rationale": "", "decision": refused}), refused
    assert not validator.is_valid({"rationale": "", "done": False, "call": None})


@pytest.mark.parametrize("spec", STEP_SPECS)
def test_every_decision_variant_is_done_or_one_tool_call(spec: Any) -> None:
    """The decision is an anyOf of a done variant and one call variant per tool, each fully required; the done
    variant is closed (a done step with a call is outside it), the call variants are closed by validation."""
    schema = build_step_model(spec).model_json_schema()
    variants = decision_variants(schema)
    tools = 1 if isinstance(spec, type) else len(spec)
    assert [v["properties"]["done"]["const"] for v in variants] == [True] + [False] * tools
    assert variants[0]["additionalProperties"] is False
    for variant in variants:
        assert variant["required"] == list(variant["properties"])
    assert schema["required"] == ["rationale", "decision"]


@pytest.mark.parametrize(
    "reply",
    [
        {"rationale": "r", "decision": {"done": False, "call": {"query": "x"}}},
        {"rationale": "r", "done": False, "call": {"query": "x"}},
    ],
    ids=["wire shape", "flat shape"],
)
def test_wire_and_flat_replies_validate_to_the_same_step(reply: dict[str, Any]) -> None:
    """The wire shape (a decision) and the flat shape both validate to the flat ToolStep."""
    step = ToolStep[SearchArgs].model_validate_json(json.dumps(reply))
    assert (step.rationale, step.done, step.call) == ("r", False, SearchArgs(query="x"))


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ({"decision": {"done": False}}, "must carry a call"),
        ({"decision": "done"}, "must be an object"),
        ({"decision": {"done": True, "rationale": "x"}}, "unexpected key 'rationale'"),
        ({"done": True, "decision": {"done": True}}, "unexpected key 'done'"),
    ],
)
def test_a_malformed_decision_is_refused_with_the_fix(reply: dict[str, Any], message: str) -> None:
    """A decision that is not one of the variants is a validation error that says what it may hold."""
    with pytest.raises(ValidationError, match=message):
        ToolStep[SearchArgs].model_validate(reply)


def test_multi_tool_step_is_discriminated_by_tool() -> None:
    """A set of tools gives a call shaped {"tool": name, "args": {...}}, validated per tool."""
    model = build_step_model((("search", SearchArgs), ("delete", DeleteArgs)))
    step = model.model_validate({"done": False, "call": {"tool": "delete", "args": {"id": "7"}}})
    assert isinstance(step.call, ToolCall)
    assert step.call.args == DeleteArgs(id="7")  # type: ignore[attr-defined]  # built at run time
    with pytest.raises(ValidationError):
        model.model_validate({"done": False, "call": {"tool": "delete", "args": {"query": "x"}}})
    with pytest.raises(ValidationError):
        model.model_validate({"done": False, "call": {"tool": "nope", "args": {}}})
    assert OPENAI_NAME.fullmatch(model.model_json_schema()["title"])


def test_single_tool_in_a_sequence_still_uses_the_tagged_shape() -> None:
    """A sequence of one tool uses the {"tool", "args"} wire shape."""
    model = build_step_model((("search", SearchArgs),))
    step = model.model_validate({"done": False, "call": {"tool": "search", "args": {"query": "x"}}})
    assert step.call.args == SearchArgs(query="x")  # type: ignore[union-attr]  # built at run time


def test_rationale_bound_appears_in_schema() -> None:
    """A rationale length bound becomes maxLength and is enforced."""
    model = build_step_model(SearchArgs, rationale_max_length=20)
    assert model.model_json_schema()["properties"]["rationale"]["maxLength"] == 20
    with pytest.raises(ValidationError):
        model.model_validate({"done": True, "rationale": "x" * 21})


def test_step_models_are_built_once() -> None:
    """The same tools give the same cached model, so no schema is rebuilt per round."""
    assert build_step_model(SearchArgs) is build_step_model(SearchArgs)
    pair = (("search", SearchArgs), ("delete", DeleteArgs))
    assert build_step_model(pair) is build_step_model(pair)


@given(st.text(min_size=0, max_size=200))
def test_schema_name_is_always_valid(raw: str) -> None:
    """Any raw name is turned into a valid OpenAI name."""
    assert OPENAI_NAME.fullmatch(schema_name(raw))


def test_a_trailing_newline_is_not_kept_in_a_schema_name() -> None:
    """A name that is valid but for a trailing newline is cleaned like any other invalid name."""
    assert schema_name("search\n") == "search"


def test_long_names_stay_distinct() -> None:
    """Two long names sharing a prefix keep distinct schema names."""
    a, b = schema_name("X" * 80 + "a"), schema_name("X" * 80 + "b")
    assert a != b
    assert len(a) <= 64


class Answer(BaseModel):
    """The final answer."""

    text: str


SCHEMA_SPECS = [
    *STEP_SPECS,
    pytest.param((SearchArgs, Answer, False), id="one tool, with an answer"),
    pytest.param(((("search", SearchArgs), ("delete", DeleteArgs)), Answer, True), id="a closing round of two tools"),
]


def step_schema(spec: Any) -> dict[str, Any]:
    if isinstance(spec, tuple) and len(spec) == 3 and isinstance(spec[2], bool):
        tools, answer, closing = spec
        schema: dict[str, Any] = build_step_model(tools, answer=answer, closing=closing).model_json_schema()
        return schema
    built: dict[str, Any] = build_step_model(spec, rationale_max_length=200).model_json_schema()
    return built


def schema_nodes(node: Any) -> list[dict[str, Any]]:
    """Every schema in ``node`` (itself, its properties, definitions, variants and items), not their values."""
    if not isinstance(node, dict):
        return []
    found = [node]
    for key in ("properties", "$defs"):
        for sub in node.get(key, {}).values():
            found += schema_nodes(sub)
    for sub in node.get("anyOf", []):
        found += schema_nodes(sub)
    for key in ("items", "additionalProperties"):
        found += schema_nodes(node.get(key))
    return found


@pytest.mark.parametrize("spec", SCHEMA_SPECS)
def test_each_description_in_the_step_schema_appears_once(spec: Any) -> None:
    """The step's fields are described once, not per decision variant: no description text repeats."""
    descriptions = [node["description"] for node in schema_nodes(step_schema(spec)) if "description" in node]
    assert len(descriptions) == len(set(descriptions)), descriptions
    schema = step_schema(spec)
    for variant in decision_variants(schema):
        assert all("description" not in variant["properties"][name] for name in ("done", "call") if name in variant)
    assert "description" in schema["properties"]["decision"]
    assert "description" in schema["properties"]["rationale"]


@pytest.mark.parametrize("spec", SCHEMA_SPECS)
def test_the_step_schema_has_no_titles_but_its_name_and_no_defaults(spec: Any) -> None:
    """Titles repeat names and the step's defaults are never used (every field is required): neither is sent."""
    schema = step_schema(spec)
    nodes = schema_nodes(schema)
    assert [node["title"] for node in nodes if "title" in node] == [schema["title"]]
    assert OPENAI_NAME.match(schema["title"])
    assert not [node for node in nodes if "default" in node]
    assert not [node for node in nodes if "const" in node and "type" in node]


@pytest.mark.parametrize("spec", SCHEMA_SPECS)
def test_the_step_schema_is_accepted_by_openais_strict_mode(spec: Any) -> None:
    """Rewritten into the strict subset, the compact step schema passes the strict-mode rules OpenAI applies."""
    schema = step_schema(spec)
    strict = strict_schema(schema, schema["title"])
    check_strict_schema(strict, "step", "response_format")  # raises RequestRejected where OpenAI answers 400
    done_values = [v for v in schema_nodes(strict) if "enum" in v and isinstance(v["enum"][0], bool)]
    assert done_values
    assert all(value["type"] == "boolean" for value in done_values)


@pytest.mark.parametrize("spec", SCHEMA_SPECS)
def test_the_compact_step_schema_still_refuses_a_step_without_a_call_unless_done(spec: Any) -> None:
    """Without titles, defaults and const types the schema admits exactly what it did: never done=false alone."""
    validator = jsonschema.Draft202012Validator(step_schema(spec))
    assert validator.is_valid({"rationale": "", "decision": {"done": True, **answer_of(spec)}})
    for refused in ({"done": False}, {"done": False, "call": None}, {"done": "true"}, {"done": 1}):
        assert not validator.is_valid({"rationale": "", "decision": refused}), refused


def decision_variants(schema: dict[str, Any]) -> list[dict[str, Any]]:
    """The decision's variants: each of its anyOf, or the decision itself (a closing round's one variant)."""
    decision = schema["properties"]["decision"]
    variants: list[dict[str, Any]] = decision.get("anyOf", [decision])
    return variants


def answer_of(spec: Any) -> dict[str, Any]:
    with_answer = isinstance(spec, tuple) and len(spec) == 3 and isinstance(spec[2], bool)
    return {"answer": {"text": "x"}} if with_answer else {}


@pytest.mark.parametrize("spec", STEP_SPECS)
def test_a_calls_first_step_schema_is_compact_strict_and_cannot_be_done(spec: Any) -> None:
    """Until ``min_calls`` calls ran the schema has no done variant; it is as compact as any step schema, passes
    the strict-mode rules, and still admits no step without a call."""
    schema = build_step_model(spec, calls_first=True).model_json_schema()
    nodes = schema_nodes(schema)
    assert [node["title"] for node in nodes if "title" in node] == [schema["title"]]
    assert not [node for node in nodes if "default" in node or ("const" in node and "type" in node)]
    descriptions = [node["description"] for node in nodes if "description" in node]
    assert len(descriptions) == len(set(descriptions)), descriptions
    check_strict_schema(strict_schema(schema, schema["title"]), "step", "response_format")
    validator = jsonschema.Draft202012Validator(schema)
    call: dict[str, Any] = {"query": "x"} if isinstance(spec, type) else {"tool": "search", "args": {"query": "x"}}
    assert validator.is_valid({"rationale": "", "decision": {"done": False, "call": call}})
    for refused in ({"done": True}, {"done": False}, {"done": False, "call": None}, {"done": True, "call": call}):
        assert not validator.is_valid({"rationale": "", "decision": refused}), refused


class Cited(BaseModel):
    """An answer that names its sources."""

    source: Cites[Doc]
    also: list[Cites[Doc]]


@pytest.mark.parametrize("ids", [("a-1",), ("a-1", "b-2")], ids=["one id", "two ids"])
def test_a_citing_answer_keeps_its_ids_in_the_compact_schema_and_in_strict_mode(ids: tuple[str, ...]) -> None:
    """The ids an answer may cite stay in the compact step schema (a ``const`` for one, an ``enum`` for more),
    strict mode accepts it with each one typed, and a citation of any other id is outside it."""
    answer = restricted(Cited, ids)
    assert answer is not None
    schema = build_step_model(SearchArgs, answer=answer).model_json_schema()
    nodes = schema_nodes(schema)
    allowed = [node.get("enum", [node.get("const")]) for node in nodes if "enum" in node or "const" in node]
    assert sum(1 for values in allowed if values == list(ids)) == 2  # source, and also's items
    strict = strict_schema(schema, schema["title"])
    check_strict_schema(strict, "step", "response_format")
    done = next(v for v in decision_variants(strict) if v["properties"]["done"]["enum"] == [True])
    cited = done["properties"]["answer"]["properties"]
    assert cited["source"] == cited["also"]["items"] == {"enum": list(ids), "type": "string"}
    validator = jsonschema.Draft202012Validator(schema)
    good = {"done": True, "answer": {"source": ids[-1], "also": list(ids)}}
    assert validator.is_valid({"rationale": "", "decision": good})
    for bad in ({"source": "z-9", "also": []}, {"source": ids[0], "also": ["z-9"]}):
        assert not validator.is_valid({"rationale": "", "decision": {"done": True, "answer": bad}}), bad


def test_step_models_are_concrete_and_go_with_their_args_type() -> None:
    """A step model is a concrete ToolStep subclass (no pydantic parametrisation per tool set), kept as long
    as its args type lives: once a per-request args type goes, its step models, wire schema included, go too."""
    made = create_model("Made", query=(str, ...))
    models = [build_step_model(made), build_step_model((("search", made),), rationale_max_length=20)]
    for model in models:
        assert issubclass(model, ToolStep)
        assert model.__pydantic_generic_metadata__["origin"] is None
        model.model_json_schema()
    gone: list[weakref.ref[Any]] = [weakref.ref(made), *(weakref.ref(model) for model in models)]
    del made, models, model
    gc.collect()
    assert [ref for ref in gone if ref() is not None] == []


@pytest.mark.parametrize("spec", SCHEMA_SPECS)
def test_a_model_used_once_is_written_in_place_not_behind_a_ref(spec: Any) -> None:
    """Each variant and args model of the step is used once, so the schema has no ``$defs`` and no ``$ref``."""
    text = json.dumps(step_schema(spec))
    assert "$defs" not in text
    assert "$ref" not in text


class Node(BaseModel):
    """A recursive args model: a tree of labels."""

    label: str
    children: list[Node]


def test_a_model_used_twice_or_recursive_stays_in_defs_and_the_schema_still_validates() -> None:
    """An args model two tools share is defined once and referenced twice; a recursive one keeps its reference;
    the schema resolves, passes the strict-mode rules, and admits and refuses what it did."""
    shared = build_step_model((("search", SearchArgs), ("find", SearchArgs))).model_json_schema()
    assert list(shared["$defs"]) == ["SearchArgs"]
    assert json.dumps(shared).count('"$ref": "#/$defs/SearchArgs"') == 2
    check_strict_schema(strict_schema(shared, shared["title"]), "step", "response_format")
    tree = build_step_model(Node).model_json_schema()
    assert list(tree["$defs"]) == ["Node"]
    check_strict_schema(strict_schema(tree, tree["title"]), "step", "response_format")
    validator = jsonschema.Draft202012Validator(tree)
    nested = {"label": "a", "children": [{"label": "b", "children": []}]}
    assert validator.is_valid({"rationale": "", "decision": {"done": False, "call": nested}})
    broken = {"label": "a", "children": [{"label": "b"}]}
    assert not validator.is_valid({"rationale": "", "decision": {"done": False, "call": broken}})


@pytest.mark.parametrize(
    "reply",
    [
        {"rationale": "", "decision": {"done": True}, "note": "x"},
        {"rationale": "", "decision": {"done": False, "call": {"tool": "search", "args": {"query": "x"}, "n": 1}}},
    ],
    ids=["beside the decision", "beside a named call"],
)
def test_a_key_the_step_does_not_declare_is_refused_by_validation(reply: dict[str, Any]) -> None:
    """The objects the schema leaves open (all but the done variant) are closed by validation."""
    with pytest.raises(ValidationError):
        build_step_model((("search", SearchArgs), ("delete", DeleteArgs))).model_validate(reply)


class DescribedSearch(BaseModel):
    """Arguments of the search tool."""

    query: str = Field(description="What to search for.")


class Fetch(BaseModel):
    """Arguments of the fetch tool."""

    id: str = Field(description="The id of the document to fetch.")


def raw_tools(tools: tuple[tuple[str, type[BaseModel]], ...]) -> bytes:
    """The ``tools`` array a raw tool-calling loop sends for ``tools``, as compact JSON."""
    functions = [
        {"type": "function", "function": {"name": name, "description": f"The {name} tool.", "parameters": schema}}
        for name, schema in ((name, args.model_json_schema()) for name, args in tools)
    ]
    return json.dumps(functions, separators=(",", ":")).encode()


async def sent_extra(spec: Any) -> bytes:
    """Everything but ``model`` and ``messages`` in the request the default mode sends for ``spec``."""
    seen: list[bytes] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        seen.append(request.content)
        return httpx2.Response(400, json={"error": {"message": "recorded"}})

    http = httpx2.AsyncClient(transport=httpx2.MockTransport(answer))
    client = openai.AsyncOpenAI(base_url="http://model.test/v1", api_key="k", max_retries=0, http_client=http)
    async with OpenAICaller(client, strict=False) as caller:
        with pytest.raises(ProviderError):
            await caller.complete(StructuredRequest(model="m", system="s", dynamic="d"), build_step_model(spec))
    await http.aclose()
    body = json.loads(seen[0])
    return json.dumps({k: v for k, v in body.items() if k not in ("model", "messages")}, separators=(",", ":")).encode()


@pytest.mark.parametrize(
    "tools",
    [(("search", DescribedSearch),), (("search", DescribedSearch), ("fetch", Fetch), ("delete", DeleteArgs))],
    ids=["one tool", "three tools"],
)
async def test_the_default_mode_sends_at_most_2_5x_the_bytes_of_a_raw_loops_tool_definitions(
    tools: tuple[tuple[str, type[BaseModel]], ...],
) -> None:
    """The step schema's request, all but model and messages, stays within 2.5x the raw loop's tools array."""
    spec: Any = tools[0][1] if len(tools) == 1 else tools
    assert len(await sent_extra(spec)) <= 2.5 * len(raw_tools(tools))


class Pointer(BaseModel):
    """Args whose field is named like a schema keyword."""

    ref: str = Field(alias="$ref")


def test_an_args_field_named_like_a_schema_keyword_stays_in_the_inlined_schema() -> None:
    """Writing models in place leaves a property named ``$ref`` as a property, not a reference."""
    schema = build_step_model(Pointer).model_json_schema()
    call = decision_variants(schema)[1]["properties"]["call"]
    assert call["properties"] == {"$ref": {"type": "string"}}
    validator = jsonschema.Draft202012Validator(schema)
    assert validator.is_valid({"rationale": "", "decision": {"done": False, "call": {"$ref": "x"}}})
