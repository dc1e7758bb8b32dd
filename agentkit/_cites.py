"""`Cites[Item]`: an answer field that cites items the run retrieved, by their key.

In the step schema the model sees, a citing field is restricted to the ids of the items retrieved
so far (an `enum`), so a constrained decoder cannot cite a passage the run never saw, and any
other reply that does is refused by validation and asked again. `result.cited()` resolves an
answer's citations to the items.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Sequence
from typing import Annotated, Any, Literal, TypeVar, Union

from pydantic import BaseModel, Field, create_model
from typing_extensions import TypeAliasType

from agentkit._cache import kept_on, weak_cache
from agentkit.errors import UsageError

__all__ = ["CITED_MODEL_CACHE_SIZE", "Citing", "Cites", "citing", "resolve_citations"]

Item = TypeVar("Item")

CITED_MODEL_CACHE_SIZE = 64
"""Answer models restricted to one set of ids that one answer type keeps built (on itself), most
recent first. Bounded: the ids change from round to round and from run to run, and memory must
stay flat; an answer type made per request takes its restricted models with it."""

DEFAULT_KEY = "id"


Cites = TypeAliasType("Cites", Annotated[str, Item], type_params=(Item,))
"""The id of an `Item` the run retrieved: an answer field typed `Cites[Passage]` (or
`list[Cites[Passage]]`, or either `| None`) may name only items the run's tools returned.

The value is a `str` (to a type checker too). The id is the item's `id` field (a field, a
property or a mapping key); an item type whose key is another field says so with a class
attribute `cite_key = "doc_id"`.

Example:
    >>> class Answer(BaseModel):
    ...     passage_id: Cites[Passage]
    ...     answer: str
    >>> result = await run_tool_loop(caller, agent, search, question, answer=Answer)
    >>> [p.text for p in result.cited()]
"""


@dataclasses.dataclass(frozen=True, slots=True)
class Citing:
    """One field of an answer type that cites items."""

    field: str
    item_type: Any
    key: str
    many: bool
    """A list of citations rather than one."""
    optional: bool


def _cited_type(annotation: Any) -> Any | None:
    """The item type of a bare `Cites[Item]` annotation, else `None`."""
    if typing.get_origin(annotation) is Cites:
        return typing.get_args(annotation)[0]
    return None


def _unwrap(annotation: Any) -> tuple[Any, bool]:
    """The annotation without `| None` (and whether it had it)."""
    origin = typing.get_origin(annotation)
    if origin is Union or origin is types.UnionType:
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(members) == 1 and len(members) < len(typing.get_args(annotation)):
            return members[0], True
    return annotation, False


def _key_of(item_type: Any) -> str:
    key = getattr(item_type, "cite_key", DEFAULT_KEY)
    return key if isinstance(key, str) else DEFAULT_KEY


def _has_key(item_type: Any, key: str) -> bool:
    """The item type has a field (or property) `key`: a model's, a dataclass's or an annotated class's."""
    if isinstance(getattr(item_type, key, None), property):
        return True
    if isinstance(item_type, type) and issubclass(item_type, BaseModel):
        return key in item_type.model_fields
    if dataclasses.is_dataclass(item_type):
        return key in {f.name for f in dataclasses.fields(item_type)}
    return isinstance(item_type, type) and key in typing.get_type_hints(item_type)


@weak_cache
def citing(answer: type[Any]) -> tuple[Citing, ...]:
    """The fields of `answer` that cite items (none for an answer that is not a model).

    Raises:
        UsageError: a citing field whose item type has no key field, naming both; `Cites` in a
            place other than a field, a list of them, or either `| None`.
    """
    if not (isinstance(answer, type) and issubclass(answer, BaseModel)):
        return ()
    found: list[Citing] = []
    for name, info in answer.model_fields.items():
        bare, optional = _unwrap(info.annotation)
        many = False
        item_type = _cited_type(bare)
        if item_type is None and typing.get_origin(bare) in (list, tuple, Sequence):
            inner = typing.get_args(bare)
            if len(inner) == 1 or (len(inner) == 2 and inner[1] is Ellipsis):
                item_type, many = _cited_type(inner[0]), True
        if item_type is None:
            if "Cites[" in repr(info.annotation):
                raise UsageError(
                    f"{answer.__name__}.{name}: Cites goes directly on a field, in a list, or either with | None; "
                    f"got {info.annotation!r}"
                )
            continue
        key = _key_of(item_type)
        if not _has_key(item_type, key):
            raise UsageError(
                f"{answer.__name__}.{name} cites {getattr(item_type, '__name__', item_type)!r} items by their "
                f"{key!r} field, but {getattr(item_type, '__name__', item_type)} has no field {key!r} (give it one, "
                "or name its key with a class attribute cite_key)"
            )
        found.append(Citing(name, item_type, key, many, optional))
    return tuple(found)


def item_id(item: object, key: str) -> str | None:
    """An item's key, as text (`None` when it has none)."""
    value = item.get(key) if isinstance(item, dict) else getattr(item, key, None)
    return None if value is None else str(value)


def retrieved_ids(items: Sequence[object], fields: Sequence[Citing]) -> tuple[str, ...]:
    """The distinct ids of `items` that the citing fields may name, in the order first retrieved."""
    keys = tuple(dict.fromkeys(f.key for f in fields))
    ids: dict[str, None] = {}
    for item in items:
        for key in keys:
            found = item_id(item, key)
            if found is not None:
                ids.setdefault(found)
    return tuple(ids)


def restricted(answer: type[BaseModel], ids: tuple[str, ...]) -> type[BaseModel] | None:
    """`answer` with its citing fields restricted to `ids`; `None` when a required citation
    has nothing to name (no id retrieved yet): no answer can be given. Kept on `answer`."""
    return kept_on(answer, ("cited", ids), lambda: _restricted(answer, ids), size=CITED_MODEL_CACHE_SIZE)


def _restricted(answer: type[BaseModel], ids: tuple[str, ...]) -> type[BaseModel] | None:
    fields = citing(answer)
    if not ids and any(not f.optional and not f.many for f in fields):
        return None
    overrides: dict[str, Any] = {}
    for f in fields:
        info = answer.model_fields[f.field]
        extra: dict[str, Any] = {}
        typed: Any
        if f.many:
            typed = list[Literal[ids]] if ids else list[str]  # type: ignore[valid-type]  # a Literal built at run time
            if not ids:
                extra["max_length"] = 0  # nothing retrieved: the only list to give is empty
        else:
            typed = Literal[ids] if ids else None  # None: optional, and nothing to name
        if f.optional and typed is not None:
            typed = typed | None
        default: Any = ... if info.is_required() else info.default
        overrides[f.field] = (typed, Field(default, description=info.description, **extra))
    model: type[BaseModel] = create_model(answer.__name__, __base__=answer, **overrides)
    return model


def as_answer(value: Any, answer: type[Any]) -> Any:
    """A value validated by a restricted model, as the run's own answer type."""
    if isinstance(value, BaseModel) and type(value) is not answer and isinstance(value, answer):
        return answer.model_validate(value.model_dump())
    return value


def resolve_citations(answer: object, items: Sequence[Any]) -> list[Any]:
    """The items an answer cites, in the order it cites them, each once."""
    if not isinstance(answer, BaseModel):
        return []
    fields = citing(type(answer))
    by_key: dict[tuple[str, str], Any] = {}
    for f in fields:
        for item in items:
            found = item_id(item, f.key)
            if found is not None:
                by_key.setdefault((f.key, found), item)
    out: dict[int, Any] = {}
    for f in fields:
        value = getattr(answer, f.field)
        for cited in (value or []) if f.many else ([] if value is None else [value]):
            item = by_key.get((f.key, str(cited)))
            if item is not None:
                out.setdefault(id(item), item)
    return list(out.values())
