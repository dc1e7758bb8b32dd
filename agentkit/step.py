"""``ToolStep``, the one structured reply the executor gives each round, and its schema builder."""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Sequence
from typing import Annotated, Any, Generic, Literal, TypeVar, Union

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

__all__ = ["ToolCall", "ToolStep", "build_step_model", "schema_name"]

Args = TypeVar("Args", bound=BaseModel)

STEP_MODEL_CACHE_SIZE = 256
"""Step models (and their call models) kept built, most recently used first. Bounded, so that an
application that defines tools per request (a new args type or name each run) keeps flat memory;
a long-lived tool set is rebuilt only if more than this many other sets were used since."""

VALID_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
"""OpenAI's rule for function and schema names, which tool names follow too."""
_NAME_BAD_CHARS = re.compile(r"[^a-zA-Z0-9_-]+")


def schema_name(raw: str) -> str:
    """A name valid for OpenAI functions and JSON schemas (``^[a-zA-Z0-9_-]{1,64}$``).

    Characters outside the set become ``_``; a name longer than 64 characters keeps its head and
    gains a short hash of the whole, so two long names stay distinct.
    """
    if VALID_NAME.match(raw):
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


class ToolStep(BaseModel, Generic[Args]):
    """The executor's reply each round: stop, or call a tool.

    ``rationale`` comes first so that constrained decoding makes a small model reason before it
    decides. ``done=False`` without a ``call`` is invalid and goes back to the model as a
    validation error.
    """

    model_config = ConfigDict(extra="forbid", json_schema_extra=_require_every_field)

    rationale: str = Field(default="", description="Why this step: what is known, what is missing.")
    done: bool = Field(description="true when the gathered results are enough (or nothing is needed).")
    call: Args | None = Field(default=None, description="The tool call to make when done is false.")

    @model_validator(mode="after")
    def _call_unless_done(self) -> ToolStep[Args]:
        if not self.done and self.call is None:
            raise ValueError("a step with done=false must carry a call; set done=true to stop")
        return self

    @classmethod
    def model_parametrized_name(cls, params: tuple[Any, ...]) -> str:
        parts = [getattr(p, "__name__", None) or repr(p) for p in params]
        return schema_name("ToolStep_" + "_".join(parts))


class ToolCall(BaseModel):
    """Base of the wire shape of a call in a multi-tool step: ``{"tool": name, "args": {...}}``."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@functools.lru_cache(maxsize=STEP_MODEL_CACHE_SIZE)
def _call_model(tool_name: str, args_type: type[BaseModel]) -> type[ToolCall]:
    model: type[ToolCall] = create_model(
        schema_name(f"Call_{tool_name}"),
        __base__=ToolCall,
        tool=(Literal[tool_name], Field(description="The tool to call.")),  # type: ignore[arg-type]  # a Literal built at run time
        args=(args_type, Field(description="The tool's arguments.")),
    )
    return model


@functools.lru_cache(maxsize=STEP_MODEL_CACHE_SIZE)
def build_step_model(
    tools: tuple[tuple[str, type[BaseModel]], ...] | type[BaseModel],
    *,
    rationale_max_length: int | None = None,
) -> type[ToolStep[Any]]:
    """The step model for one tool's args type, or for a set of ``(name, args_type)`` pairs.

    A single args type gives ``ToolStep[Args]`` (the call is the bare args object); a tuple of
    pairs, even of one, gives a step whose call is ``{"tool": name, "args": {...}}``, discriminated
    by ``tool``. Built once per distinct input and cached, so a loop never rebuilds schemas per
    round.
    """
    base: type[ToolStep[Any]]
    if isinstance(tools, tuple):
        calls = tuple(_call_model(name, args) for name, args in tools)
        union: Any = calls[0] if len(calls) == 1 else Union[calls]  # noqa: UP007  # a runtime tuple of types
        call_type = Annotated[union, Field(discriminator="tool")]
        base = ToolStep[call_type]
        base_name = "ToolStep_" + "_".join(name for name, _ in tools)
    else:
        base = ToolStep[tools]  # type: ignore[valid-type]  # the args type is a run-time value
        base_name = base.__name__
    if rationale_max_length is None and not isinstance(tools, tuple):
        return base
    return create_model(
        schema_name(base_name if rationale_max_length is None else f"{base_name}_short"),
        __base__=base,
        rationale=(
            str,
            Field(
                default="",
                max_length=rationale_max_length,
                description="Why this step: what is known, what is missing.",
            ),
        ),
    )


def step_call_parts(call: BaseModel) -> tuple[str | None, BaseModel]:
    """Split a validated call into (tool name for a multi-tool call, args)."""
    if isinstance(call, ToolCall):
        args = call.args  # type: ignore[attr-defined]  # every ToolCall subclass declares it
        tool_name = call.tool  # type: ignore[attr-defined]  # every ToolCall subclass declares it
        assert isinstance(args, BaseModel)
        assert isinstance(tool_name, str)
        return tool_name, args
    return None, call


def step_tool_names(tools: Sequence[tuple[str, type[BaseModel]]]) -> list[str]:
    """The tool names of a multi-tool step, in order."""
    return [name for name, _ in tools]
