"""`ToolStep`, the one structured reply the executor gives each round, and its schema builder.

The JSON schema a model is asked to follow ties `done` and `call` together, so that a
constrained decoder (llama.cpp, vLLM, OpenAI's strict mode) cannot write a step that validation
refuses: after `rationale` comes a `decision`, one of `{"done": true}` and
`{"done": false, "call": {...}}` (one such variant per tool):

```python
{"rationale": "...", "decision": {"done": false, "call": {"query": "tiers"}}}
```

The root stays an object, as OpenAI's strict subset requires, and the union is an `anyOf`. The
validated value is still a flat `ToolStep` (`rationale`, `done`, `call`), and the flat
shape (`{"done": false, "call": {...}}`) is accepted as input too.

A model reads the schema, and pays for its bytes, every round, so it says each thing once and
briefly: the `decision`'s description says in a few words when to stop (the variants describe none
of their fields, which would repeat per tool, and the `anyOf` spells out each variant's shape), no
node has a title but the root (the schema's name), the step's fields carry no defaults (every one
is required), a `const` carries no `type`, and a model used once is written where it is used, not
in `$defs` behind a `$ref` (only a model used twice, or recursive, stays there). Of the step's own
objects only the done variant says `additionalProperties: false`: that is what keeps
`{"done": true, "call": ...}` out of the schema. Every other one is closed all the same, by
validation (`extra="forbid"`), by the constrained decoders (llama.cpp and vLLM's xgrammar write no
key a schema's `properties` does not declare), and in OpenAI's strict mode by its rewrite
(`agentkit.providers._strict`), which closes every object. A tool's args object says
`additionalProperties` where its own model does (`extra="forbid"`), as before.
"""

from __future__ import annotations

import functools
import hashlib
import operator
import re
import types
import typing
from collections.abc import Sequence
from typing import Annotated, Any, ClassVar, Generic, Literal, TypeVar, Union

from pydantic import BaseModel, ConfigDict, Field, GetJsonSchemaHandler, create_model, model_validator
from pydantic.json_schema import DEFAULT_REF_TEMPLATE, GenerateJsonSchema, JsonSchemaMode, JsonSchemaValue
from pydantic_core import CoreSchema

from agentkit._cache import kept_on

__all__ = ["ToolCall", "ToolStep", "build_step_model", "schema_name"]

Args = TypeVar("Args", bound=BaseModel)

VALID_NAME = re.compile(r"\A[a-zA-Z0-9_-]{1,64}\Z")
"""OpenAI's rule for function and schema names, which tool names follow too. Use `fullmatch`: with
`match` and `$`, a name with a trailing newline (`"wipe\\n"`) would pass."""
_NAME_BAD_CHARS = re.compile(r"[^a-zA-Z0-9_-]+")


def schema_name(raw: str) -> str:
    """A name valid for OpenAI functions and JSON schemas (`^[a-zA-Z0-9_-]{1,64}$`).

    Characters outside the set become `_`; a name longer than 64 characters keeps its head and
    gains a short hash of the whole, so two long names stay distinct.
    """
    if VALID_NAME.fullmatch(raw):
        return raw
    cleaned = _NAME_BAD_CHARS.sub("_", raw).strip("_") or "schema"
    if len(cleaned) <= 64:
        return cleaned
    digest = hashlib.sha256(raw.encode()).hexdigest()[:10]
    return f"{cleaned[:53]}_{digest}"


def _require_every_field(schema: dict[str, Any]) -> None:
    # A field with a default is optional in the JSON schema, and constrained decoding lets a
    # model skip it: a small model then never writes its rationale and decides blind. The schema
    # the model sees requires every field; validation keeps the Python defaults.
    schema["required"] = list(schema.get("properties", {}))


def _require_every_field_unclosed(schema: dict[str, Any]) -> None:
    # Closed by validation (extra="forbid"), by constrained decoders and by the strict rewrite, not by
    # 28 bytes a round (see the module docstring); only the done variant says it (`_ClosedWire`).
    _require_every_field(schema)
    schema.pop("additionalProperties", None)


_DECISION_KEYS = frozenset({"done", "call", "calls", "answer"})


class ToolStep(BaseModel, Generic[Args]):
    """The executor's reply each round: stop, or call a tool.

    `rationale` comes first so that constrained decoding makes a small model reason before it
    decides. `done=False` without a `call` is invalid and goes back to the model as a
    validation error. The JSON schema is the wire shape (see the module docstring), in which that
    step cannot be written at all.
    """

    model_config = ConfigDict(extra="forbid", json_schema_extra=_require_every_field)

    _calls_first: ClassVar[bool] = False
    """A step that cannot be done: the run must call a tool first (`LoopConfig.min_calls`)."""
    _max_calls: ClassVar[int] = 1
    """How many calls one step may carry (`LoopConfig.max_calls_per_step`); above 1 they come as `calls`."""

    rationale: str = Field(default="", description="What is known, what is missing.")
    done: bool = Field(description="true when the gathered results are enough (or nothing is needed).")
    call: Args | None = Field(default=None, description="The tool call to make when done is false.")

    @model_validator(mode="before")
    @classmethod
    def _flatten_decision(cls, data: Any) -> Any:
        """The wire shape `{"rationale", "decision": {"done", "call"}}` as the flat fields."""
        if not isinstance(data, dict) or "decision" not in data:
            return data
        decision = data["decision"]
        if not isinstance(decision, dict):
            raise ValueError('"decision" must be an object: {"done": true} to stop, or {"done": false, "call": {...}}')
        flat = {key: value for key, value in data.items() if key != "decision"}
        for key, value in decision.items():
            if key not in _DECISION_KEYS or key in flat:
                raise ValueError(f"unexpected key {key!r} in the decision; it holds only {sorted(_DECISION_KEYS)}")
            flat[key] = value
        return flat

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler, /) -> JsonSchemaValue:
        wire = _wire_model(cls)
        if wire is None:
            return handler(core_schema)
        schema = handler(wire.__pydantic_core_schema__)
        if "$ref" in schema:
            # A recursive model among the calls or the answer puts every model in $defs and leaves the
            # root a bare reference; the root must stay an object (OpenAI, instructor's TOOLS mode).
            # Unused, the step's own definition then drops out of $defs.
            schema = dict(handler.resolve_ref_schema(schema))
        return schema

    @classmethod
    def model_json_schema(
        cls,
        by_alias: bool | None = None,
        ref_template: str = DEFAULT_REF_TEMPLATE,
        schema_generator: type[GenerateJsonSchema] = GenerateJsonSchema,
        mode: JsonSchemaMode = "validation",
        *,
        union_format: Literal["any_of", "primitive_type_array"] = "any_of",
    ) -> dict[str, Any]:
        """The wire schema (see the module docstring), written for the model that reads it: no titles
        but the root's, which is the schema's name (a title repeats its field's or model's name), and
        no `type` beside a `const` (the value says it). A model pays for every byte of the schema,
        every round."""
        schema = super().model_json_schema(by_alias, ref_template, schema_generator, mode, union_format=union_format)
        if _wire_model(cls) is None:
            return schema
        compact: dict[str, Any] = _inline_used_once(_for_the_model(schema, root=True))
        return compact

    @model_validator(mode="after")
    def _call_unless_done(self) -> ToolStep[Args]:
        fields = type(self).model_fields
        if self.done and type(self)._calls_first:
            raise ValueError('a tool call comes first: this round cannot be done; reply {"done": false, "call": ...}')
        several = self.__dict__.get("calls")  # a field of steps of several calls only (no AttributeError raised)
        if several is not None and self.call is not None:
            raise ValueError('a step carries its calls in "calls" only; leave "call" out')
        if not self.done and self.call is None and not several:
            if not _members(fields["call"].annotation):
                raise ValueError("this round allows no tool call; set done=true and give the answer")
            raise ValueError("a step with done=false must carry a call; set done=true to stop")
        if self.done and "answer" in fields and getattr(self, "answer", None) is None:
            raise ValueError("a step with done=true must carry the answer")
        return self

    def step_calls(self) -> tuple[Args, ...]:
        """The calls this step makes, in its order: none for a done step, one, or up to
        `LoopConfig.max_calls_per_step` of them."""
        if self.done:
            return ()
        several: Sequence[Args] | None = self.__dict__.get("calls")
        if several:
            return tuple(several)
        return () if self.call is None else (self.call,)

    @classmethod
    def model_parametrized_name(cls, params: tuple[Any, ...]) -> str:
        parts = [getattr(p, "__name__", None) or repr(p) for p in params]
        return schema_name("ToolStep_" + "_".join(parts))


_STEP_BASE: type[ToolStep[Any]] = ToolStep[Any]
"""The base of every step model the loop builds: parametrised once, each tool set's model a concrete subclass."""


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra=_require_every_field_unclosed)


class _ClosedWire(BaseModel):
    """The done variant: closed in the schema too, so that a done step with a call is not in it."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_require_every_field)


_SCHEMA_MAPS = frozenset({"properties", "$defs", "definitions", "patternProperties", "dependentSchemas"})
"""Keywords whose value maps names to schemas."""
_SCHEMA_LISTS = frozenset({"anyOf", "oneOf", "allOf", "prefixItems"})
"""Keywords whose value is a list of schemas."""
_SCHEMA_ONE = frozenset({"items", "additionalProperties", "not", "contains", "propertyNames", "if", "then", "else"})
"""Keywords whose value is one schema."""


def _for_the_model(node: Any, *, root: bool = False) -> Any:
    """A JSON schema without the keywords that tell a model nothing: every `title` (but the root's,
    the schema's name), and the `type` beside a `const`.

    Only schema positions are walked, so a property, a default or an enum value named `title`
    stays as it is. What the schema admits does not change.
    """
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if (key == "title" and not root) or (key == "type" and "const" in node):
            continue
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: _for_the_model(sub) for name, sub in value.items()}
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [_for_the_model(sub) for sub in value]
        elif key in _SCHEMA_ONE:
            out[key] = _for_the_model(value)
        else:
            out[key] = value
    return out


def _references(node: Any, counts: dict[str, int]) -> dict[str, int]:
    """How many times each `$ref` target occurs in `node`, added to `counts`."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            counts[ref] = counts.get(ref, 0) + 1
        for value in node.values():
            _references(value, counts)
    elif isinstance(node, list):
        for value in node:
            _references(value, counts)
    return counts


def _inline_used_once(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with each definition that one `$ref` uses written in its place, and dropped from `$defs`.

    A definition used twice stays (inlined, it would be sent twice), and so does one whose only use
    is inside itself (a recursive model): its `$ref` stays, as strict mode allows. What the schema
    admits does not change: a `$ref`'s sibling keywords (a field's description) stay beside the
    inlined definition, and win over its own.
    """
    defs = schema.get("$defs")
    if not isinstance(defs, dict) or not defs:
        return schema
    counts = _references(schema, {})
    prefix = "#/$defs/"

    def once(ref: str) -> bool:
        return counts.get(ref) == 1 and ref.startswith(prefix) and isinstance(defs.get(ref[len(prefix) :]), dict)

    def walk(node: Any, within: frozenset[str]) -> Any:
        if isinstance(node, list):
            return [walk(value, within) for value in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if not (isinstance(ref, str) and once(ref) and ref not in within):
            return {key: walk(value, within) for key, value in node.items()}
        siblings = {key: walk(value, within) for key, value in node.items() if key != "$ref"}
        target: dict[str, Any] = walk(defs[ref[len(prefix) :]], within | {ref})
        return {**target, **siblings}

    out: dict[str, Any] = walk({key: value for key, value in schema.items() if key != "$defs"}, frozenset())
    kept: dict[str, Any] = {}
    needed = list(_references(out, {}))
    while needed:
        ref = needed.pop()
        name = ref[len(prefix) :]
        if ref.startswith(prefix) and name in defs and name not in kept:
            kept[name] = walk(defs[name], frozenset({ref}))
            needed += _references(kept[name], {})
    if kept:
        out["$defs"] = {name: kept[name] for name in defs if name in kept}
    return out


def _members(annotation: Any) -> list[Any]:
    """The types a field annotation admits, unions and `Annotated` unpacked, `None` left out."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _members(typing.get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        return [member for arg in typing.get_args(annotation) for member in _members(arg)]
    return [] if annotation is None or annotation is type(None) else [annotation]


def _union(*members: Any) -> Any:
    """`A | B | ...` built with `|`: `typing.Union[...]` would keep each union in typing's own cache
    (128 of them), and with it the models of the last 128 tool sets made per request."""
    return functools.reduce(operator.or_, members)


def _wire_model(step: type[ToolStep[Any]]) -> type[BaseModel] | None:
    """The schema a model is asked to follow for `step`: a `decision` that is done or one tool's call.

    `None` for a step whose call type is not concrete (`ToolStep` itself, unparametrised). Built
    once per step model and kept on it.
    """
    return kept_on(step, "wire", lambda: _build_wire_model(step))


def _build_wire_model(step: type[ToolStep[Any]]) -> type[BaseModel] | None:
    fields = step.model_fields
    calls = _members(fields["call"].annotation)
    if any(not (isinstance(call, type) and issubclass(call, BaseModel)) for call in calls):
        return None
    answer = fields.get("answer")
    answers = _members(answer.annotation) if answer is not None else []
    variants: list[Any] = [] if step._calls_first else [_done_variant(answers[0] if answers else None)]
    if step._max_calls > 1 and calls:
        variants.append(_calls_variant(tuple(calls), step._max_calls))
    else:
        variants += [_call_variant(call) for call in calls]
    decision: Any = _union(*variants)
    # The anyOf spells out each variant's shape; the description only says when to stop, briefly.
    described = "Done once the results suffice, else a tool call."
    if step._calls_first:
        described = "A tool call comes first."
    elif len(variants) == 1:
        described = "Done: no more calls."
    rationale = fields["rationale"]
    # required in the wire schema anyway (``_require_every_field``), so its default would only be bytes
    bounded: Any = Annotated[str, *rationale.metadata] if rationale.metadata else str
    model: type[BaseModel] = create_model(
        step.__name__,
        __base__=_Wire,
        rationale=(bounded, Field(description=rationale.description)),
        decision=(decision, Field(description=described)),
    )
    return model


# The variants describe none of their fields: the decision's description says what each one is, once,
# where a description per variant field would repeat it for every tool.
def _done_variant(answer: type[Any] | None) -> type[BaseModel]:
    # Kept on the answer type (the plain variant on _ClosedWire), so it goes when a per-request answer type goes.
    return kept_on(_ClosedWire if answer is None else answer, ("done", answer), lambda: _build_done_variant(answer))


def _build_done_variant(answer: type[Any] | None) -> type[BaseModel]:
    done: Any = (Literal[True], ...)
    if answer is None:
        return create_model("StepDone", __base__=_ClosedWire, done=done)
    model: type[BaseModel] = create_model(
        schema_name(f"StepDone_{getattr(answer, '__name__', 'answer')}"),
        __base__=_ClosedWire,
        done=done,
        answer=(answer, Field(description="The final answer, from what the tools returned.")),
    )
    return model


def _call_variant(call: type[BaseModel]) -> type[BaseModel]:
    return kept_on(call, "call variant", lambda: _build_call_variant(call))


def _build_call_variant(call: type[BaseModel]) -> type[BaseModel]:
    model: type[BaseModel] = create_model(
        schema_name(f"StepCall_{call.__name__}"),
        __base__=_Wire,
        done=(Literal[False], ...),
        call=(call, ...),
    )
    return model


def _calls_variant(calls: tuple[type[BaseModel], ...], most: int) -> type[BaseModel]:
    return kept_on(calls[0], ("calls variant", calls, most), lambda: _build_calls_variant(calls, most))


def _build_calls_variant(calls: tuple[type[BaseModel], ...], most: int) -> type[BaseModel]:
    # One variant for any mix of the tools: an array of 1..most calls, each one tool's (a bounded array, so
    # a constrained decoder cannot write more calls than the step may carry).
    names = "_".join(call.__name__ for call in calls)
    items: Any = list[_union(*calls)]  # type: ignore[misc]  # a union built at run time
    model: type[BaseModel] = create_model(
        schema_name(f"StepCalls{most}_{names}"),
        __base__=_Wire,
        done=(Literal[False], ...),
        calls=(items, Field(min_length=1, max_length=most)),
    )
    return model


class ToolCall(BaseModel):
    """Base of the wire shape of a call in a multi-tool step: `{"tool": name, "args": {...}}`."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class _WireCall(ToolCall):
    """The calls a step is built with: closed by validation, not in the schema (see the module docstring)."""

    model_config = ConfigDict(json_schema_extra=_require_every_field_unclosed)


def _call_model(tool_name: str, args_type: type[BaseModel]) -> type[ToolCall]:
    return kept_on(args_type, ("call", tool_name), lambda: _build_call_model(tool_name, args_type))


def _build_call_model(tool_name: str, args_type: type[BaseModel]) -> type[ToolCall]:
    model: type[ToolCall] = create_model(
        schema_name(f"Call_{tool_name}"),
        __base__=_WireCall,
        tool=(Literal[tool_name], ...),  # type: ignore[arg-type]  # a Literal built at run time
        args=(args_type, ...),
    )
    return model


StepTools = tuple[tuple[str, type[BaseModel]], ...] | type[BaseModel]
"""What a step model is built for: one tool's args type, or a set of `(name, args_type)` pairs."""


def build_step_model(
    tools: StepTools,
    *,
    rationale_max_length: int | None = None,
    answer: type[Any] | None = None,
    closing: bool = False,
    calls_first: bool = False,
    max_calls: int = 1,
) -> type[ToolStep[Any]]:
    """The step model for one tool's args type, or for a set of `(name, args_type)` pairs.

    A single args type gives a `ToolStep` whose call is the bare args object; a tuple of pairs,
    even of one, gives a step whose call is `{"tool": name, "args": {...}}`, discriminated by
    `tool`. With `answer`, a done step carries `answer`, validated as that type (and
    required); with `closing` too, the step allows no call at all: only done with the answer.
    With `calls_first`, the step cannot be done at all: only a call (`LoopConfig.min_calls`).
    With `max_calls` above 1, a step that calls carries 1 to `max_calls` calls, as `calls`
    (`LoopConfig.max_calls_per_step`); 1 gives the one-call step, schema and all, as before.

    Built once per distinct input, so a loop never rebuilds schemas per round, and kept on a type
    it is built from (`agentkit._cache.kept_on`): on `answer` when there is one (a citing answer
    restricted to this round's ids is a type of its own, and its step models go with it), else on
    the (first) args type, so the step models of tools made per request go with their args types.
    Each is a concrete subclass of `ToolStep[Any]`, never a parametrisation of `ToolStep` per
    tool set, which pydantic would keep in its own cache.
    """
    owner: object = tools
    if answer is not None:
        owner = answer
    elif isinstance(tools, tuple):
        owner = tools[0][1] if tools else ToolStep
    key: tuple[Any, ...] = ("step", tools, rationale_max_length, answer, closing, calls_first)
    if max_calls != 1:
        key += (max_calls,)
    return kept_on(
        owner, key, lambda: _build_step_model(tools, rationale_max_length, answer, closing, calls_first, max_calls)
    )


def _build_step_model(
    tools: StepTools,
    rationale_max_length: int | None,
    answer: type[Any] | None,
    closing: bool,
    calls_first: bool,
    max_calls: int,
) -> type[ToolStep[Any]]:
    if calls_first:
        plain = build_step_model(tools, rationale_max_length=rationale_max_length, max_calls=max_calls)
        calling = typing.cast(
            "type[ToolStep[Any]]", create_model(schema_name(f"{plain.__name__}_call"), __base__=plain)
        )
        calling._calls_first = True
        return calling
    if answer is not None:
        plain = build_step_model(tools, rationale_max_length=rationale_max_length, max_calls=max_calls)
        return _answer_step(plain, answer, closing)
    described = "The tool call to make when done is false."
    calls: list[type[BaseModel]]
    if isinstance(tools, tuple):
        calls = [_call_model(name, args) for name, args in tools]
        call = Field(default=None, discriminator="tool", description=described)
        label = "ToolStep_" + "_".join(name for name, _ in tools)
    else:
        calls, call, label = [tools], Field(default=None, description=described), f"ToolStep_{tools.__name__}"
    fields: dict[str, Any] = {"call": (_union(*calls, None), call)}
    if rationale_max_length is not None:
        label += "_short"
        fields["rationale"] = (
            str,
            Field(
                default="",
                max_length=rationale_max_length,
                description="What is known, what is missing.",
            ),
        )
    if max_calls > 1:
        label += f"_x{max_calls}"
        one: Any = _union(*calls)
        if isinstance(tools, tuple) and len(calls) > 1:
            one = Annotated[one, Field(discriminator="tool")]
        fields["calls"] = (
            list[one] | None,
            Field(
                default=None,
                min_length=1,
                max_length=max_calls,
                description="The tool calls to make when done is false.",
            ),
        )
    model: type[ToolStep[Any]] = create_model(schema_name(label), __base__=_STEP_BASE, **fields)
    model._max_calls = max_calls
    return model


def _answer_step(base: type[ToolStep[Any]], answer: type[Any], closing: bool) -> type[ToolStep[Any]]:
    fields: dict[str, Any] = {
        "answer": (_union(answer, None), Field(default=None, description="The final answer, given with done=true."))
    }
    if closing:
        fields["call"] = (None, Field(default=None, description="No call: this round only gives the answer."))
        if base._max_calls > 1:
            fields["calls"] = (None, Field(default=None, description="No call: this round only gives the answer."))
    name = f"{base.__name__}_{getattr(answer, '__name__', 'answer')}{'_closing' if closing else ''}"
    model: type[ToolStep[Any]] = create_model(schema_name(name), __base__=base, **fields)
    return model


def step_answer(step: ToolStep[Any]) -> Any:
    """The answer a done step carries (`None` for a step model without an answer)."""
    return getattr(step, "answer", None)


def step_call_parts(call: BaseModel) -> tuple[str | None, BaseModel]:
    """Split a validated call into (tool name for a multi-tool call, args)."""
    if isinstance(call, ToolCall):
        args = call.args  # type: ignore[attr-defined]  # every ToolCall subclass declares it
        tool_name = call.tool  # type: ignore[attr-defined]  # every ToolCall subclass declares it
        assert isinstance(args, BaseModel)
        assert isinstance(tool_name, str)
        return tool_name, args
    return None, call


def call_shape(schema: type[BaseModel]) -> Literal["args", "named"] | None:
    """How a step model's call is written: the bare args (one tool), `{"tool", "args"}` (a list of
    tools); `None` for a schema that is not a step, or a step that allows no call."""
    field = schema.model_fields.get("call") if issubclass(schema, ToolStep) else None
    members = _members(field.annotation) if field is not None else []
    if not members:
        return None
    named = any(isinstance(member, type) and issubclass(member, ToolCall) for member in members)
    return "named" if named else "args"


def step_tool_names(tools: Sequence[tuple[str, type[BaseModel]]]) -> list[str]:
    """The tool names of a multi-tool step, in order."""
    return [name for name, _ in tools]
