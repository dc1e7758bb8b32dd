"""Each tool's args and items to and from the state's JSON text, through the tools' declared types.

A tool's item type is read from its `result_type` attribute when it has one; else from the return
annotation of its `@tool` function or of its `call` method (`list[Doc]` means `Doc`).
"""

from __future__ import annotations

import inspect
import json
import typing
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel, JsonValue, TypeAdapter, ValidationError

from agentkit._cache import kept_on, weak_cache
from agentkit._proposals import ProposedAction
from agentkit._state import RoundEntry, json_text
from agentkit._tools import AnyTool, ContextFunctionTool, FunctionTool
from agentkit.errors import ResumeRefused, UsageError

__all__ = ["Codec", "Unencodable", "item_type_of", "proposal_of"]


class Unencodable(ValueError):
    """A batch that is not of its tool's declared item type (or whose items JSON cannot carry)."""


def item_type_of(tool: AnyTool) -> object:
    """The type of one item a tool returns, as the tool declares it; `None` when it declares none.

    Read from the tool's `result_type` attribute when it has one; else from the return annotation
    of a `FunctionTool`'s (or `ContextFunctionTool`'s) function, or of the tool's `call` method: `list[Doc]`,
    `Sequence[Doc]` or `tuple[Doc, ...]` all mean `Doc`.
    """
    declared = getattr(tool, "result_type", None)
    if declared is not None:
        return declared
    target: Any = tool.fn if isinstance(tool, FunctionTool | ContextFunctionTool) else getattr(type(tool), "call", None)
    if target is None:
        return None
    return _declared_item(target)


@weak_cache
def _declared_item(target: Any) -> object:
    """The item type `target`'s return annotation declares (read once per function, for as long as it lives)."""
    try:
        returned = typing.get_type_hints(target).get("return")
    except Exception:  # an annotation that cannot be resolved declares nothing usable
        return None
    origin = typing.get_origin(returned)
    args = typing.get_args(returned)
    if origin in (list, tuple, Sequence, typing.get_origin(Sequence[Any])) and args:
        return args[0]
    return None


class Codec:
    """The tools' args and batches as `json_text` and back.

    `strict`: every tool's items must round-trip (a run whose state must resume: it may stop at a
    proposal, or an observer keeps its state); a tool whose items cannot is refused when the codec
    is made, and a batch of another type is the tool's error. Otherwise a tool whose items JSON
    cannot carry has its batches left out of the state (`encode_batch` returns `None`), and such
    a state cannot resume.
    """

    def __init__(self, tools: Mapping[str, AnyTool], *, strict: bool = True) -> None:
        self.strict = strict
        self.args: dict[str, type[BaseModel]] = {}
        self.items: dict[str, TypeAdapter[list[Any]] | None] = {}
        self.models: dict[str, type[BaseModel]] = {}
        """The tools whose item type is a model class: their items need no validation to be dumped."""
        for name, candidate in tools.items():
            self.args[name] = candidate.args_type
            item = item_type_of(candidate)
            try:
                self.items[name] = _adapter(name, item)
            except UsageError:
                if strict:
                    raise
                self.items[name] = None
            if inspect.isclass(item) and issubclass(item, BaseModel):
                self.models[name] = item

    def encode_args(self, args: BaseModel) -> str:
        return json_text(args.model_dump(mode="json"))

    def encode_batch(self, tool_name: str, batch: Sequence[Any]) -> str | None:
        """The batch as `json_text`; `None` when the tool's items cannot be kept (a lenient codec).

        Raises:
            Unencodable: an item not of the declared type, with a strict codec.
        """
        adapter, model = self.items[tool_name], self.models.get(tool_name)
        if adapter is None:
            return None
        checked = list(batch)
        try:
            if model is None or not all(isinstance(item, model) for item in checked):
                checked = adapter.validate_python(checked, strict=True)  # instances pass as they are
            dumped: list[JsonValue] = adapter.dump_python(checked, mode="json", warnings="error")
        except (ValueError, TypeError) as wrong:
            if self.strict:
                raise Unencodable(str(wrong)) from wrong
            return None
        return json_text(dumped)

    def decode_batch(self, tool_name: str, batch: str) -> list[Any]:
        adapter = self.items[tool_name]
        if adapter is None:
            raise ResumeRefused(
                f"tool {tool_name!r} declares no item type JSON can carry, so its batches were not kept and the run "
                "cannot go on from its state; give it a `result_type` (or annotate its return as list[YourItem])"
            )
        return adapter.validate_python(json.loads(batch))

    def decode_args(self, tool_name: str, args: str) -> BaseModel:
        return self.args[tool_name].model_validate(json.loads(args))


def decoded_args(codec: Codec, tool_name: str, args: str) -> BaseModel:
    """The args of a stored call, validated as the tool's args type; args that no longer validate are refused."""
    try:
        return codec.decode_args(tool_name, args)
    except (ValueError, ValidationError) as invalid:
        raise ResumeRefused(
            f"args stored for tool {tool_name!r} no longer validate as {codec.args[tool_name].__name__}: {invalid}"
        ) from invalid


def decoded_batch(codec: Codec, tool_name: str, batch: str) -> list[Any]:
    """The batch of a stored call, validated as the tool's item type; refused like `decoded_args`."""
    try:
        return codec.decode_batch(tool_name, batch)
    except (ValueError, ValidationError) as invalid:
        raise ResumeRefused(
            f"the items of tool {tool_name!r} in the state no longer validate as its item type: {invalid}"
        ) from invalid


def _adapter_for(item: Any) -> TypeAdapter[list[Any]]:
    """A batch's adapter (kept on the item type); its JSON schema is built once to prove JSON can carry the type."""
    adapter: TypeAdapter[list[Any]] = kept_on(item, "batch adapter", lambda: _new_adapter(item))
    return adapter


def _new_adapter(item: Any) -> TypeAdapter[list[Any]]:
    adapter: TypeAdapter[list[Any]] = TypeAdapter(list[item])
    adapter.json_schema()
    return adapter


def _adapter(tool_name: str, item: object) -> TypeAdapter[list[Any]]:
    why = ""
    if item is None:
        why = "declares no item type (give it a `result_type`, or annotate its return as list[YourItem])"
    elif item is Any or item is object or isinstance(item, typing.TypeVar):
        why = f"declares its items as {item!r}, which JSON cannot give back"
    else:
        try:
            adapter = _adapter_for(item)
        except Exception as error:
            name = item.__name__ if inspect.isclass(item) else repr(item)
            why = f"returns {name} items, which cannot round-trip through JSON ({type(error).__name__})"
        else:
            return adapter
    raise UsageError(
        f"tool {tool_name!r} {why}; a tiered run that may stop at a proposal keeps a checkpoint of its items"
    )


def proposal_of(entry: RoundEntry, args: BaseModel, run_id: str) -> ProposedAction[Any]:
    """The `ProposedAction` a `PROPOSED` round entry records (its args decoded)."""
    assert entry.tool is not None
    assert entry.tier is not None
    assert entry.call_digest is not None
    model: Any = ProposedAction[type(args)]  # type: ignore[misc]  # parametrised by the run-time type
    return typing.cast(
        "ProposedAction[Any]",
        model(
            tool_name=entry.tool,
            tier=entry.tier,
            args=args,
            rationale=entry.rationale,
            round=entry.round,
            run_id=run_id,
            created_at=datetime.fromisoformat(entry.proposed_at or "1970-01-01T00:00:00+00:00"),
            digest=entry.call_digest,
        ),
    )
