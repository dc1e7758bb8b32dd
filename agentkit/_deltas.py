"""Streamed replies: how a caller that streams hands the text it has so far to the run, and how the run turns
it into events (`RationaleDelta`, `AnswerDelta`, `TextDelta`, `PartialDiscarded`).

The seam is a context variable, as for transcripts (`agentkit._transcript`): the run sets a `Listener`
around its model call, and a caller that streams (`OpenAICaller`, `AnthropicCaller`) reports each reply it starts
(`started`), the reply's text as it grows (`grew`), and a reply it rejects and asks again (`rejected`).
A caller that does not stream reports nothing, and the run gets the complete step as before. Without a
listener each report costs one context-variable read. `wanted` tells a caller whether the run asked for
streaming (`LoopConfig(stream=True)`), so a caller not set to stream streams for that run only. A run
sets a listener only when it has observers (an `iter_tool_loop` stream is one): a run nobody watches is
not streamed, since nobody would see its deltas.

The text of a structured reply is JSON that is not finished yet. It is read with pydantic's partial
JSON parser (`pydantic_core.from_json(..., allow_partial="trailing-strings")`, jiter's partial mode):
a string cut short is kept as far as it goes, an unfinished object keeps the members it has. The
answer so far is then validated against the run's answer type with pydantic's partial validation
(`experimental_allow_partial`): a model answer is checked as a model whose fields may all still be
missing, so what has arrived is validated as far as it goes, and a delta that does not validate
is not emitted (the next may). The complete step is validated exactly as a reply that did not
stream.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Annotated, Any, Protocol

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    PlainValidator,
    TypeAdapter,
    ValidationError,
    WrapValidator,
    create_model,
)
from pydantic.fields import FieldInfo
from pydantic_core import from_json

from agentkit._cache import kept_on
from agentkit._events import AnswerDelta, Event, PartialDiscarded, RationaleDelta, TextDelta

__all__ = ["Deltas", "Listener", "StepDeltas", "TextDeltas", "grew", "listening", "rejected", "started", "wanted"]

logger = logging.getLogger("agentkit.observe")


class Listener(Protocol):
    """What a streaming caller reports to: each reply it starts, and its text as it grows."""

    wanted: bool
    """The run asked for streaming: a caller streams for it even when it is not set to stream."""

    def started(self) -> None:
        """A new reply starts (the first, or a re-ask): whatever was streamed before it is void."""

    def grew(self, text: str) -> None:
        """The reply's text so far (a structured reply's JSON, or prose)."""

    def rejected(self, reason: str) -> None:
        """The reply did not validate and is asked again (within the attempt): what it streamed is void."""


_LISTENER: ContextVar[Listener | None] = ContextVar("agentkit_deltas", default=None)


def wanted() -> bool:
    """Whether the run asked its caller to stream (`LoopConfig(stream=True)`, `run_once_text(stream=True)`)."""
    listener = _LISTENER.get()
    return listener is not None and listener.wanted


def _report(call: Callable[[Listener], None]) -> None:
    """Hand a report to this context's listener, if any; a listener that raises is logged, never fails the call."""
    listener = _LISTENER.get()
    if listener is not None:
        try:
            call(listener)
        except Exception:
            logger.exception("a streaming listener failed; the call goes on")


def started() -> None:
    """Report that a new reply starts."""
    _report(lambda listener: listener.started())


def grew(text: str) -> None:
    """Report the reply's text so far."""
    _report(lambda listener: listener.grew(text))


def rejected(reason: str) -> None:
    """Report that the reply just read is rejected and asked again."""
    _report(lambda listener: listener.rejected(reason))


@contextlib.contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """Hand every streamed reply of this context (this task, and what it awaits) to `listener`."""
    token = _LISTENER.set(listener)
    try:
        yield
    finally:
        _LISTENER.reset(token)


class Deltas:
    """What a listener of one model call shares: the run, the round, the attempt, and whether anything streamed
    since the last reply started (then a failed reply is reported discarded)."""

    def __init__(self, emit: Callable[[Event], None], run_id: str, round: int, wanted: bool) -> None:
        self.emit = emit
        self.run_id = run_id
        self.round = round
        self.wanted = wanted
        self.attempt = 1
        self.pending = False
        """Deltas were emitted for the reply in flight, and it has not been accepted."""

    def started(self) -> None:
        if self.pending:
            self.discard("the reply was abandoned and asked again")
        self.reset()

    def rejected(self, reason: str) -> None:
        if self.pending:
            self.discard(reason)
        self.reset()

    def reset(self) -> None:
        """Forget the reply in flight (the next one starts afresh)."""

    def grew(self, text: str) -> None:
        """The reply's text so far: emit what it adds."""

    def finished(self, attempt: int, error: BaseException | None) -> None:
        """An attempt ended: a failed one voids what it streamed; the next attempt's deltas carry the next number."""
        if error is not None and self.pending:
            self.discard(str(error))
        self.pending = False
        self.attempt = attempt + 1
        self.reset()

    def discard(self, reason: str) -> None:
        self.pending = False
        self.emit(PartialDiscarded(run_id=self.run_id, round=self.round, attempt=self.attempt, reason=reason))


class StepDeltas(Deltas):
    """A structured step as it streams: its rationale (`RationaleDelta`) and its answer (`AnswerDelta`).

    Made per call by `StepDeltas.of(answer)` (the run's answer type, `None` for a run without one)."""

    partial: TypeAdapter[Any] | None = None

    def __init__(self, emit: Callable[[Event], None], run_id: str, round: int, wanted: bool) -> None:
        super().__init__(emit, run_id, round, wanted)
        self.rationale = ""
        self.answer: object = None

    @staticmethod
    def of(answer: type[Any] | None) -> type[StepDeltas]:
        """The listener class of steps whose answer is `answer` (made once per answer type)."""
        if answer is None:
            return StepDeltas
        return kept_on(answer, ("step deltas",), lambda: _step_deltas(answer))

    def reset(self) -> None:
        self.rationale = ""
        self.answer = None

    def grew(self, text: str) -> None:
        start = text.find("{")  # a fenced reply (MD_JSON) has prose before its JSON
        if start < 0:
            return
        text = _without_unfinished_number(text[start:] if start else text)
        try:
            value = from_json(text, allow_partial="trailing-strings")
        except ValueError:
            return  # not JSON (yet, or at all): validation of the complete reply says so
        if not isinstance(value, dict):
            return
        rationale = value.get("rationale")
        if isinstance(rationale, str) and len(rationale) > len(self.rationale) and rationale.startswith(self.rationale):
            delta = rationale[len(self.rationale) :]
            self.rationale = rationale
            self.pending = True
            event = RationaleDelta(
                run_id=self.run_id, round=self.round, attempt=self.attempt, text=rationale, delta=delta
            )
            self.emit(event)
        if self.partial is None:
            return
        decision = value.get("decision")
        holder = decision if isinstance(decision, dict) else value
        answer = holder.get("answer")
        if answer is None or answer == self.answer or (isinstance(answer, str | list | dict) and not answer):
            return  # nothing of it yet (an object or list just opened), or nothing new
        try:
            checked = self.partial.validate_python(answer, experimental_allow_partial="trailing-strings")
        except ValidationError:
            return  # not valid as far as it goes: the complete step's validation says why, if it stays so
        self.answer = answer
        self.pending = True
        partial: JsonValue = self.partial.dump_python(checked, mode="json", exclude_unset=True, by_alias=True)
        self.emit(AnswerDelta(run_id=self.run_id, round=self.round, attempt=self.attempt, partial=partial))


class TextDeltas(Deltas):
    """A prose reply as it streams (`TextDelta`)."""

    def __init__(self, emit: Callable[[Event], None], run_id: str, round: int, wanted: bool) -> None:
        super().__init__(emit, run_id, round, wanted)
        self.text = ""

    def reset(self) -> None:
        self.text = ""

    def grew(self, text: str) -> None:
        if len(text) <= len(self.text) or not text.startswith(self.text):
            return
        delta = text[len(self.text) :]
        self.text = text
        self.pending = True
        self.emit(TextDelta(run_id=self.run_id, round=self.round, attempt=self.attempt, text=text, delta=delta))


def _step_deltas(answer: type[Any]) -> type[StepDeltas]:
    return type("StepDeltas", (StepDeltas,), {"partial": partial_adapter(answer)})


def partial_adapter(answer: type[Any]) -> TypeAdapter[Any]:
    """How an answer so far is validated: a model answer as a model whose fields may all be missing (kept on
    the answer type, made once); any other type as it is, with pydantic's partial validation."""
    return kept_on(answer, ("partial answer",), lambda: TypeAdapter(_partial_type(answer)))


def _partial_type(answer: type[Any]) -> Any:
    """A model answer as a model whose fields may all be missing, each otherwise as declared (its alias, its
    constraints, its field validators, the model's config); any other type as it is. The model's own model
    validators and computed fields are left out: they read the whole answer, which a partial one is not (the
    complete step is validated against the answer type itself)."""
    if not (isinstance(answer, type) and issubclass(answer, BaseModel)):
        return answer
    checks: dict[str, list[Any]] = {name: [] for name in answer.model_fields}
    for decorator in answer.__pydantic_decorators__.field_validators.values():
        # the validator as its class binds it (so it still reads the answer type's own names), as a field's
        # functional validator: the form pydantic gives a validator that is not a method of the model
        check = _FUNCTIONAL[decorator.info.mode](decorator.func)
        for name in answer.model_fields if "*" in decorator.info.fields else decorator.info.fields:
            checks[name].append(check)
    fields: dict[str, Any] = {name: _optional(info, checks[name]) for name, info in answer.model_fields.items()}
    extra = "forbid" if answer.model_config.get("extra") == "forbid" else "ignore"
    # a default is never validated: a missing field stays missing (None) and is left out of the partial
    config = ConfigDict(**{**answer.model_config, "extra": extra, "validate_default": False})  # type: ignore[typeddict-item]  # a model's config is a ConfigDict
    partial: type[BaseModel] = create_model(f"Partial{answer.__name__}", __config__=config, **fields)
    return partial


_FUNCTIONAL: dict[str, Callable[[Any], Any]] = {
    "before": BeforeValidator,
    "after": AfterValidator,
    "wrap": WrapValidator,
    "plain": PlainValidator,
}
"""Each mode of a field validator, and the functional validator of that mode."""


def _optional(info: FieldInfo, checks: list[Any]) -> tuple[Any, FieldInfo]:
    """A field as `info` declares it (its annotation and metadata: alias, constraints, validators), its model's
    field validators (`checks`) after them, but not required: missing, it is `None`, and left out of the partial
    (`exclude_unset`)."""
    spec = info.asdict()
    metadata = [*spec["metadata"], *checks]
    # a type made at run time, as pydantic's create_model takes it: the field's type with its metadata
    annotation = Annotated[(spec["annotation"], *metadata)] if metadata else spec["annotation"]  # type: ignore[maybe-unrecognized-str-typeform]
    attributes = {**spec["attributes"], "default": None, "default_factory": None, "validate_default": False}
    return annotation, Field(**attributes)


_UNFINISHED_NUMBER = re.compile(r"(?<=[\s:,\[])-?(?:\d[\d.eE+-]*)?$")
"""A number at the very end of the text, after the delimiter before it: more digits may still come."""


def _without_unfinished_number(text: str) -> str:
    """`text` without a number it ends with: the partial parser takes `12` as a finished number where the reply
    may go on `3456`, so a number is read only once a later delimiter (`,`, `}`, `]`, a space) proves it
    complete. In a string the same cut only shortens its text so far, as a string cut short is anyway."""
    match = _UNFINISHED_NUMBER.search(text)
    return text[: match.start()] if match and match.start() < len(text) else text
