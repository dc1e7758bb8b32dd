"""``RunCheckpoint``: a tiered run's state as a frozen value that round-trips through JSON.

Every ``TieredLoopResult`` carries one (``result.checkpoint``). A run that stopped at a proposal
(``StopReason.PROPOSED``) can be continued from it with ``resume_tool_loop`` once a human has
decided; any other run is finished and its checkpoint only records how it ended.

The checkpoint holds no caller, agent, tools or ctx: those are passed again on resume. Items and
args are stored as JSON and revalidated on resume through the tools' declared types (the args
model, and the item type: a tool's ``result_type`` attribute, else the return annotation of its
function or of its ``call`` method, ``list[Doc]`` meaning ``Doc``).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import json
import math
import typing
import weakref
from collections.abc import Mapping, Sequence
from datetime import datetime
from json.encoder import encode_basestring
from typing import Any

from pydantic import BaseModel, ConfigDict, JsonValue, TypeAdapter
from pydantic_core import PydanticSerializationError

from agentkit._cache import value_cache
from agentkit.config import AfterProposal, LoopConfig, RepeatPolicy
from agentkit.context import ContextWindow, Summarizer
from agentkit.errors import ResumeRefused, UsageError
from agentkit.outcome import StopReason
from agentkit.proposals import ProposedAction
from agentkit.structured import RetryPolicy
from agentkit.tiers import Tier, runs_live
from agentkit.tools import AnyTool, ContextFunctionTool, FunctionTool, Tool, declared_tier

if typing.TYPE_CHECKING:
    from agentkit.observe import Observer

__all__ = ["CHECKPOINT_VERSION", "RunCheckpoint", "item_type_of"]

CHECKPOINT_VERSION = 1
"""The checkpoint schema this agentkit writes and reads; a checkpoint of another version is refused."""

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class CheckpointTool(BaseModel):
    """One tool of the run's set, as the checkpoint pins it."""

    model_config = _FROZEN
    name: str
    tier: Tier | None


class CheckpointCall(BaseModel):
    """One call of the run and what came of it, as JSON."""

    model_config = _FROZEN
    round: int
    tool_name: str
    args: dict[str, JsonValue]
    batch: list[JsonValue] = []
    observation: str | None = None
    proposed: bool = False
    ran: bool = False


class CheckpointProposal(BaseModel):
    """A proposal awaiting a decision, as JSON (``ProposedAction`` with untyped args)."""

    model_config = _FROZEN
    tool_name: str
    tier: Tier
    args: dict[str, JsonValue]
    rationale: str = ""
    round: int
    run_id: str = ""
    created_at: datetime
    digest: str


class CheckpointContext(BaseModel):
    """The run's ``ContextWindow``: its bounds as data; of a summarizer, only its name.

    A function cannot round-trip through JSON, so a resumed run is given the summarizer again
    (``resume_tool_loop(..., summarize=...)``); its name is kept to refuse a resume without it, with
    one where the run had none, or with a function of another name.
    """

    model_config = _FROZEN
    last: int | None = None
    max_chars: int | None = None
    max_tokens: int | None = None
    chars_per_token: float = 4.0
    summarize: str | None = None
    """The summarizer's ``module.qualname``; ``None``: the run had none."""

    @classmethod
    def of(cls, window: ContextWindow) -> CheckpointContext:
        return cls(
            last=window.last,
            max_chars=window.max_chars,
            max_tokens=window.max_tokens,
            chars_per_token=window.chars_per_token,
            summarize=None if window.summarize is None else function_name(window.summarize),
        )

    def rebuild(self, summarize: Summarizer | None) -> ContextWindow:
        bounds = self.model_dump(exclude={"summarize"})
        return ContextWindow(**bounds, summarize=summarize)


def function_name(function: object) -> str:
    """A function's ``module.qualname`` (its ``repr`` for a callable object without them)."""
    module = getattr(function, "__module__", None)
    qualname = getattr(function, "__qualname__", None) or getattr(type(function), "__qualname__", None)
    if module is None or qualname is None:
        return repr(function)
    return f"{module}.{qualname}"


class CheckpointConfig(BaseModel):
    """The fields of the run's ``LoopConfig`` (retry policy included)."""

    model_config = _FROZEN
    max_rounds: int | None
    token_budget: int | None
    deadline: float | None
    tool_timeout: float | None
    autonomy: Tier
    after_proposal: AfterProposal
    degeneration_window: int
    rationale_max_length: int | None
    on_repeat: RepeatPolicy = RepeatPolicy.STOP
    repeat_refusals: int = 2
    closing_round: bool = True
    retry: dict[str, float]
    context: CheckpointContext | None = None
    """The run's ``ContextWindow``; ``None``: the executor was shown every earlier call."""

    @classmethod
    def of(cls, config: LoopConfig) -> CheckpointConfig:
        """The config's fields; made once per config (a service runs many runs with one; the value is frozen)."""
        return config_parts(config)[0]

    def rebuild(self, summarize: Summarizer | None = None) -> LoopConfig:
        """The ``LoopConfig`` again, with ``summarize`` as its context window's summarizer."""
        fields = self.model_dump(exclude={"retry", "context"})
        retry = {name: int(value) if name.endswith("_attempts") else value for name, value in self.retry.items()}
        context = None if self.context is None else self.context.rebuild(summarize)
        return LoopConfig(**fields, retry=RetryPolicy(**retry), context=context)  # type: ignore[arg-type]  # ints stored as float read back as ints


def _read_config(config: LoopConfig) -> CheckpointConfig:
    apart = ("retry", "context")
    fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.name not in apart}
    context = None if config.context is None else CheckpointContext.of(config.context)
    return CheckpointConfig(**fields, retry=dataclasses.asdict(config.retry), context=context)


@value_cache(maxsize=64)
def config_parts(config: LoopConfig) -> tuple[CheckpointConfig, str]:
    """The config's ``CheckpointConfig`` and its sorted JSON (its part of a checkpoint's digest text);
    made once per config (a service runs many runs with one; the value is frozen)."""
    made = _read_config(config)
    return made, _text(made, None)


@functools.lru_cache(maxsize=256)
def tool_part(name: str, tier: Tier | None) -> tuple[CheckpointTool, str]:
    """A tool's entry in a checkpoint and its sorted JSON; made once per tool (the value is frozen)."""
    made = CheckpointTool(name=name, tier=tier)
    return made, _text(made, None)


def _json_of(model: BaseModel, exclude: set[str] | None = None) -> Any:
    """The model as JSON values, as ``model_dump(mode="json")`` gives them."""
    # Read back from pydantic's JSON: faster for the JSON-valued fields.
    try:
        return json.loads(model.model_dump_json(exclude=exclude))
    except PydanticSerializationError:  # text with lone surrogates, which pydantic's JSON refuses
        return model.model_dump(mode="json", exclude=exclude)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


_TEXTS: dict[int, tuple[weakref.ref[RunCheckpoint], str]] = {}
"""The JSON of live sealed checkpoints, by ``id`` (each entry goes with its checkpoint)."""


_SORTED = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
"""``json.dumps`` with these options, made once (a journaled run's checkpoint is written every round)."""
_SORTED_FINITE = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _canonical(value: object) -> str:
    return _SORTED.encode(value)


def _json_text(value: Any) -> str:
    """Sorted JSON of a value made of JSON values, as pydantic's JSON would give it (a non-finite float: ``null``)."""
    try:
        return _SORTED_FINITE.encode(value)
    except ValueError:  # inf or nan somewhere: pydantic's JSON writes them as null
        return _canonical(_finite(value))


def _finite(value: Any) -> Any:
    """``value`` with each non-finite float replaced by ``None``."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, list | tuple):
        return [_finite(entry) for entry in value]
    if isinstance(value, dict):
        return {key: _finite(entry) for key, entry in value.items()}
    return value


class DigestMemo:
    """The sorted JSON of a run's checkpoint parts, each part made once (a journaled run checkpoints every round).

    A checkpoint's content text is put together from the texts of its fields; the calls, the config,
    the tools and the degeneration window's entries are the same objects from one checkpoint to the
    next, so each is serialised once, when it first appears.
    """

    def __init__(self) -> None:
        self._texts: dict[int, tuple[object, str]] = {}
        """By ``id``; the part is kept with its text, so its id cannot be reused by another object."""

    def call(self, **values: Any) -> CheckpointCall:
        """A call's record from values already of the fields' types (not validated: the loop's own JSON),
        its sorted JSON made at once (a journaled run records every call)."""
        record = CheckpointCall.model_construct(**values)
        self.text(record)
        return record

    def know(self, part: object, text: str) -> None:
        """Take ``text`` as the part's (made before, as ``text`` makes it: ``config_parts``)."""
        self._texts[id(part)] = (part, text)

    def text(self, part: object) -> str:
        """The part's JSON with sorted keys, as ``content_digest`` hashes it."""
        known = self._texts.get(id(part))
        if known is not None and known[0] is part:
            return known[1]
        text = _text(part, self)
        self._texts[id(part)] = (part, text)
        return text


def _scalar(value: object) -> str | None:
    """A JSON scalar's text as ``json.dumps`` writes pydantic's JSON of it; ``None`` for anything else."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):  # an IntEnum (``Tier``) is written as its number
        return int.__repr__(value)
    if isinstance(value, str):  # a StrEnum (``StopReason``) is written as its value
        return encode_basestring(value)  # what ``json.dumps(value, ensure_ascii=False)`` returns
    if isinstance(value, float):
        return float.__repr__(value) if math.isfinite(value) else "null"
    return None


_FIELDS_BY_NAME: dict[type[BaseModel], tuple[str, ...]] = {}
"""A part model's field names, sorted, for ``_text``."""


def _text(value: object, memo: DigestMemo | None) -> str:
    """``value``'s JSON with sorted keys, as ``json.dumps`` writes ``model_dump(mode="json")`` of it.

    Put together from its parts (a checkpoint part's fields, a tuple's entries), each through
    ``memo`` when one is given; JSON values (args, batches) are written by ``json.dumps``; any
    other model (a proposal, with its timestamp) goes through pydantic's JSON.
    """
    scalar = _scalar(value)
    if scalar is not None:
        return scalar
    if isinstance(value, tuple):
        parts = (memo.text(entry) if memo is not None else _text(entry, None) for entry in value)
        return f"[{','.join(parts)}]"
    if isinstance(value, list | dict):
        try:
            return _json_text(value)
        except TypeError:  # a list of parts (a copy made with ``model_copy(update=...)``)
            if isinstance(value, dict):
                raise
            return _text(tuple(value), memo)
    if isinstance(value, _PARTS):
        names = _FIELDS_BY_NAME.get(type(value))
        if names is None:
            names = _FIELDS_BY_NAME.setdefault(type(value), tuple(sorted(type(value).model_fields)))
        fields = value.__dict__
        return "{" + ",".join(f'"{name}":{_text(fields[name], None)}' for name in names) + "}"
    if isinstance(value, BaseModel):
        return _canonical(_json_of(value))
    raise TypeError(f"a checkpoint holds no {type(value).__name__} values")


class RunCheckpoint(BaseModel):
    """A tiered run's state: everything needed to continue it, and a digest over all of it.

    Build one only through a run (``result.checkpoint``) or ``model_validate_json``; a checkpoint
    whose content does not reproduce its ``digest``, or of another ``version``, is refused on resume.
    """

    model_config = _FROZEN

    version: int = CHECKPOINT_VERSION
    """The checkpoint schema version."""
    run_id: str = ""
    """The run, as stamped on its events and proposals; a resumed run keeps it."""
    finished: bool = True
    """The run ended for a reason other than ``PROPOSED``: there is nothing to resume."""
    stop_reason: StopReason | None = None
    """Why the run (its latest leg) ended; ``None`` on a result built by hand."""
    config: CheckpointConfig = _read_config(LoopConfig())
    """The run's ``LoopConfig``, field by field; a resumed run uses it again."""
    tools: tuple[CheckpointTool, ...] = ()
    """The tool set's names and tiers, in order; resuming with another set is refused."""
    rounds: int = 0
    """Rounds used so far."""
    requests: int = 0
    """Model requests made so far (``Usage.requests``)."""
    input_tokens: int = 0
    """Input tokens spent so far."""
    output_tokens: int = 0
    """Output tokens spent so far."""
    largest_round_tokens: int = 0
    """The largest round so far, in tokens (the budget's look-ahead)."""
    seconds: float = 0.0
    """Run time spent so far; the deadline continues from it (time waiting for a human does not count)."""
    calls: tuple[CheckpointCall, ...] = ()
    """Every call so far, in order, with its batch or observation (empty once finished)."""
    recent: tuple[tuple[str, dict[str, JsonValue]], ...] = ()
    """The degeneration window: the calls a new call is compared against."""
    recent_rounds: tuple[int, ...] = ()
    """The round of each call in ``recent`` (a refused repeat names the round that answers it)."""
    refusals: int = 0
    """Repeats refused so far under ``RepeatPolicy.REFUSE``."""
    context_summary: str | None = None
    """The running summary of the calls that left the context window (``ContextWindow.summarize``)."""
    context_summarized: int = 0
    """How many of the oldest calls that summary covers."""
    proposals: tuple[CheckpointProposal, ...] = ()
    """The proposals awaiting a decision, with their digests."""
    digest: str = ""
    """SHA-256 over everything above."""

    def content_digest(self, memo: DigestMemo | None = None) -> str:
        """The digest the content gives (equal to ``digest`` unless the checkpoint was altered).

        The SHA-256 of the content as JSON with sorted keys (so storage that reorders keys keeps it
        valid). ``memo`` keeps the JSON of the parts that carry over between checkpoints of one run
        (its calls, config, tools), which then only serialises what changed since the last one (the
        digest is the same).
        """
        return _sha256(self._content_text(memo))

    def _content_text(self, memo: DigestMemo | None) -> str:
        return _content_text_of(self.__dict__, memo)

    def sealed(self, memo: DigestMemo | None = None) -> RunCheckpoint:
        """This checkpoint with its digest set (``memo``: see ``content_digest``)."""
        return self._sealed_with({}, memo)

    def _sealed_with(self, changes: Mapping[str, Any], memo: DigestMemo | None = None) -> RunCheckpoint:
        """This checkpoint with ``changes`` made to its fields and its digest set, in one copy.

        ``changes`` are values already of the fields' types (not validated: a run passes its own
        state; a checkpoint read back is validated by ``model_validate_json``). A run takes its
        checkpoints this way from one made at its start (``memo``: see ``content_digest``).
        """
        text = _content_text_of({**self.__dict__, **changes}, memo)
        digest = _sha256(text)
        sealed = self.model_copy(update={**changes, "digest": digest})
        # Its JSON, digest added (key order does not matter to a reader), for ``sealed_text`` to hand out.
        key = id(sealed)
        _TEXTS[key] = (weakref.ref(sealed, lambda _: _TEXTS.pop(key, None)), f'{text[:-1]},"digest":"{digest}"}}')
        return sealed

    def verify(self) -> None:
        """Refuse a checkpoint of another version or one whose content does not match its digest.

        Raises:
            ResumeRefused: naming the problem.
        """
        if self.version != CHECKPOINT_VERSION:
            raise ResumeRefused(
                f"checkpoint of run {self.run_id!r} has schema version {self.version}; this agentkit reads "
                f"version {CHECKPOINT_VERSION}. Nothing ran"
            )
        if self.content_digest() != self.digest:
            raise ResumeRefused(
                f"checkpoint of run {self.run_id!r} does not match its digest (edited by hand, or damaged); nothing ran"
            )


def _content_text_of(f: Mapping[str, Any], memo: DigestMemo | None) -> str:
    """A checkpoint's content (its fields' values) as JSON with sorted keys, digest left out, put together
    field by field (see ``_text``)."""
    memo = DigestMemo() if memo is None else memo
    text = memo.text
    # Written out field by field, in sorted order: a journaled run makes one per round.
    # (tests/test_checkpoint_digest.py holds it to pydantic's JSON of the same checkpoint.)
    return (
        f'{{"calls":[{",".join(map(text, f["calls"]))}],"config":{text(f["config"])},'
        f'"context_summarized":{int.__repr__(f["context_summarized"])},'
        f'"context_summary":{_scalar(f["context_summary"])},"finished":{_scalar(f["finished"])},'
        f'"input_tokens":{int.__repr__(f["input_tokens"])},'
        f'"largest_round_tokens":{int.__repr__(f["largest_round_tokens"])},'
        f'"output_tokens":{int.__repr__(f["output_tokens"])},"proposals":[{",".join(map(text, f["proposals"]))}],'
        f'"recent":[{",".join(map(text, f["recent"]))}],'
        f'"recent_rounds":[{",".join(map(int.__repr__, f["recent_rounds"]))}],'
        f'"refusals":{int.__repr__(f["refusals"])},"requests":{int.__repr__(f["requests"])},'
        f'"rounds":{int.__repr__(f["rounds"])},"run_id":{_scalar(f["run_id"])},'
        f'"seconds":{_scalar(float(f["seconds"]))},"stop_reason":{_scalar(f["stop_reason"])},'
        f'"tools":[{",".join(map(text, f["tools"]))}],"version":{int.__repr__(f["version"])}}}'
    )


_PARTS = (CheckpointCall, CheckpointTool)
"""Models of JSON values and scalars only, whose text ``_text`` puts together field by field."""


def sealed_text(checkpoint: RunCheckpoint) -> str | None:
    """The JSON that sealing ``checkpoint`` made (``json.loads`` and validation read it back); ``None`` if none."""
    known = _TEXTS.get(id(checkpoint))
    return known[1] if known is not None and known[0]() is checkpoint else None


def item_type_of(tool: AnyTool) -> object:
    """The type of one item a tool returns, as the tool declares it; ``None`` when it declares none.

    Read from the tool's ``result_type`` attribute when it has one; else from the return annotation
    of a ``FunctionTool``'s (or ``ContextFunctionTool``'s) function, or of the tool's ``call`` method: ``list[Doc]``,
    ``Sequence[Doc]`` or ``tuple[Doc, ...]`` all mean ``Doc``.
    """
    declared = getattr(tool, "result_type", None)
    if declared is not None:
        return declared
    target: Any = tool.fn if isinstance(tool, FunctionTool | ContextFunctionTool) else getattr(type(tool), "call", None)
    if target is None:
        return None
    return _declared_item(target)


@value_cache(maxsize=256)
def _declared_item(target: Any) -> object:
    """The item type ``target``'s return annotation declares (read once per function: a run with a
    journal checks its tools' item types as it starts)."""
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
    """Each tool's args and items to and from JSON, through the tools' declared types."""

    def __init__(self, tools: Mapping[str, AnyTool]) -> None:
        self.args: dict[str, type[BaseModel]] = {}
        self.items: dict[str, TypeAdapter[list[Any]]] = {}
        self.models: dict[str, type[BaseModel]] = {}
        """The tools whose item type is a model class: their items need no validation to be dumped."""
        for name, candidate in tools.items():
            item = item_type_of(candidate)
            self.items[name] = _adapter(name, item)
            self.args[name] = candidate.args_type
            if inspect.isclass(item) and issubclass(item, BaseModel):
                self.models[name] = item

    @classmethod
    def needed(
        cls, tools: dict[str, Tool[Any, Any]], config: LoopConfig, observers: Sequence[Observer] = ()
    ) -> Codec | None:
        """A codec when the run may stop at a proposal (so may be resumed), else ``None``.

        That is: ``after_proposal`` is ``STOP`` and some tool's tier is above what runs live. Any
        other run gets one too when an observer takes checkpoints (``on_checkpoint``: the journal
        stores them to recover a crashed run) and its tools' items can round-trip through JSON;
        when they cannot, that run keeps no checkpoint and the observer gets none.

        Raises:
            UsageError: a tool whose items cannot round-trip through JSON, naming it and the type,
                in a run that may stop at a proposal.
        """
        from agentkit.observe import wants_checkpoints

        tiers = [declared_tier(candidate) for candidate in tools.values()]
        may_stop = any(tier is not None and not runs_live(tier, config.autonomy) for tier in tiers)
        if config.after_proposal is AfterProposal.STOP and may_stop:
            return cls(tools)
        if any(wants_checkpoints(observer) for observer in observers):
            try:
                return cls(tools)
            except UsageError:
                return None
        return None

    def encode_batch(self, tool_name: str, batch: Sequence[Any]) -> list[JsonValue]:
        """The batch as JSON. Raises ``ValueError`` for an item that is not of the declared type."""
        adapter, model = self.items[tool_name], self.models.get(tool_name)
        checked = list(batch)
        if model is None or not all(isinstance(item, model) for item in checked):
            checked = adapter.validate_python(checked, strict=True)  # instances pass as they are
        dumped: list[JsonValue] = adapter.dump_python(checked, mode="json", warnings="error")
        return dumped

    def decode_batch(self, tool_name: str, batch: list[JsonValue]) -> list[Any]:
        return self.items[tool_name].validate_python(batch)

    def decode_args(self, tool_name: str, args: dict[str, JsonValue]) -> BaseModel:
        return self.args[tool_name].model_validate(args)

    def decode_proposal(self, stored: CheckpointProposal) -> ProposedAction[Any]:
        data = stored.model_dump()
        data["args"] = self.decode_args(stored.tool_name, stored.args)
        return ProposedAction[self.args[stored.tool_name]].model_validate(data)  # type: ignore[name-defined]  # a run-time type


@value_cache(maxsize=256)
def _adapter_for(item: Any) -> TypeAdapter[list[Any]]:
    """A batch's adapter; its JSON schema is built once to prove JSON can carry the type."""
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
