"""`ScriptedCaller`: the test double for the structured-call seam, scripted reply by reply."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, overload

from pydantic import BaseModel, ValidationError
from pydantic_core import to_json

from agentkit._step import call_shape
from agentkit._structured import Completion, StructuredRequest
from agentkit._text import TextCompletion
from agentkit._usage import Usage
from agentkit.errors import AgentkitError, ScriptExhausted, StructuredOutputError, UsageError

__all__ = ["ScriptExhausted", "ScriptedCaller", "ScriptedReply", "call_step", "calls_step", "done_step"]

if TYPE_CHECKING:
    from agentkit._tools import AnyTool, ContextTool, Tool

M = TypeVar("M", bound=BaseModel)
A = TypeVar("A", bound=BaseModel)


@dataclass(frozen=True, kw_only=True, slots=True)
class ScriptedReply:
    """A scripted reply with its own usage and model name."""

    value: BaseModel | Mapping[str, Any] | str | BaseException
    """What the reply is: a model instance, a dict, raw JSON text, or an exception to raise."""
    usage: Usage = field(default_factory=lambda: Usage(requests=1))
    """The usage this reply reports."""
    model: str | None = None
    """The model that answered; the request's model when omitted."""
    reasoning: str | None = None
    """The reasoning the model wrote before its reply, as a server that returns it reports it."""


Step = BaseModel | Mapping[str, Any] | str | BaseException | ScriptedReply | TextCompletion


class ScriptedCaller:
    """A `StructuredCaller` that replays a script, one entry per call.

    Each entry is a model instance, a dict or raw JSON text (all validated against the requested
    schema exactly as a real reply is, so an invalid entry fails validation), an exception to
    raise, or a `ScriptedReply`. Every request is recorded in `requests`, including those
    whose entry is an exception. Each call reports `Usage(requests=1)` unless scripted otherwise.

    It is also a `TextCaller`: for `complete_text` a `str` entry is the prose reply as-is
    (empty included), a `TextCompletion` is returned unchanged, and exceptions raise.
    """

    def __init__(self, steps: Iterable[Step] = ()) -> None:
        self._script: deque[Step] = deque(steps)
        self.requests: list[StructuredRequest] = []
        """Every request made, in order."""

    def add(self, *steps: Step) -> None:
        """Append entries to the script."""
        self._script.extend(steps)

    @property
    def remaining(self) -> int:
        """Entries not yet used."""
        return len(self._script)

    def assert_complete(self) -> None:
        """Fail when entries of the script were never used."""
        if self._script:
            raise AssertionError(
                f"{len(self._script)} scripted repl{'y' if len(self._script) == 1 else 'ies'} never used"
            )

    async def complete(self, request: StructuredRequest, schema: type[M]) -> Completion[M]:
        """Validate the next entry against `schema` and return it (or raise it)."""
        self.requests.append(request)
        if not self._script:
            raise ScriptExhausted(
                f"the script ran dry at request {len(self.requests)} ({schema.__name__}); add more replies"
            )
        entry = self._script.popleft()
        if isinstance(entry, TextCompletion):
            raise UsageError(
                f"request {len(self.requests)} asked for {schema.__name__} but the script has a text reply"
            )
        return structured_answer(entry, request, schema)

    async def complete_text(self, request: StructuredRequest) -> TextCompletion:
        """Return the next entry as a prose reply (`TextCaller`): a `str` is the text as-is."""
        self.requests.append(request)
        if not self._script:
            raise ScriptExhausted(f"the script ran dry at request {len(self.requests)} (text); add more replies")
        entry = self._script.popleft()
        at = len(self.requests)
        return text_answer(
            entry,
            request,
            lambda kind: (
                f"request {at} asked for text but the script has {kind}; "
                "script a str (or a ScriptedReply of one) for a text reply"
            ),
        )


def structured_answer(entry: Step, request: StructuredRequest, schema: type[M]) -> Completion[M]:
    """A script entry (or a function's answer) as a validated reply, or the exception it holds, raised."""
    assert not isinstance(entry, TextCompletion)
    reply = entry if isinstance(entry, ScriptedReply) else ScriptedReply(value=entry)
    raise_if_exception(reply)
    assert not isinstance(reply.value, BaseException)
    value = validate_reply(reply.value, schema, reply.usage)
    return Completion(value=value, usage=reply.usage, model=reply.model or request.model, reasoning=reply.reasoning)


def text_answer(entry: Step, request: StructuredRequest, refusal: Callable[[str], str]) -> TextCompletion:
    """A script entry (or a function's answer) as a prose reply; anything but text is a `UsageError`."""
    if isinstance(entry, TextCompletion):
        return entry
    reply = entry if isinstance(entry, ScriptedReply) else ScriptedReply(value=entry)
    raise_if_exception(reply)
    if not isinstance(reply.value, str):
        raise UsageError(refusal(type(reply.value).__name__))
    return TextCompletion(text=reply.value, usage=reply.usage, model=reply.model or request.model)


def raise_if_exception(reply: ScriptedReply) -> None:
    if isinstance(reply.value, BaseException):
        if isinstance(reply.value, AgentkitError) and reply.value.usage is None:
            reply.value.usage = reply.usage
        raise reply.value


def validate_reply(value: BaseModel | Mapping[str, Any] | str, schema: type[M], usage: Usage) -> M:
    # Every entry goes through JSON validation, as a real reply's text does: a dict or an instance
    # that only Python-mode validation would accept fails here as it would on the wire.
    raw = value if isinstance(value, str) else to_json(value).decode()
    try:
        return schema.model_validate_json(raw)
    except ValidationError as invalid:
        if isinstance(value, _NamedCallStep) and call_shape(schema) == "args":
            raise _single_tool_mistake(value.tool) from invalid
        error = StructuredOutputError(
            f"reply does not match schema {schema.__name__}: {invalid}", schema_name=schema.__name__, raw=raw
        )
        error.usage = usage
        raise error from invalid


@overload
def call_step(args: A, *, tool: Tool[A, Any] | ContextTool[A, Any, Any], rationale: str = "") -> dict[str, Any]: ...
@overload
def call_step(
    args: BaseModel | Mapping[str, Any], *, tool: str | None = None, rationale: str = ""
) -> dict[str, Any]: ...
def call_step(
    args: BaseModel | Mapping[str, Any], *, tool: AnyTool | str | None = None, rationale: str = ""
) -> dict[str, Any]:
    """A scripted step that calls a tool; name the `tool` when the loop has a set of tools.

    Pass the tool object itself (`tool=search`) so that a misspelt name is a `NameError` and
    args of another tool's type a type error; a name (`tool="search"`) is still accepted, for
    tools made at run time. A step with `tool=` scripted for a loop given a single tool (whose
    step carries the bare args) is a wiring mistake: the run raises a `UsageError` that says so.
    """
    payload = args.model_dump(mode="json") if isinstance(args, BaseModel) else dict(args)
    name = tool if tool is None or isinstance(tool, str) else tool.name
    if name is None:
        return {"rationale": rationale, "done": False, "call": payload}
    return _NamedCallStep(name, {"rationale": rationale, "done": False, "call": {"tool": name, "args": payload}})


def calls_step(*calls: Mapping[str, Any], rationale: str = "") -> dict[str, Any]:
    """A scripted step that makes several calls at once (`LoopConfig.max_calls_per_step` above 1): each
    one a `call_step(...)`, in the step's order.

    Example:
        >>> calls_step(call_step(Query(query="a")), call_step(Query(query="b")))
    """
    return {"rationale": rationale, "done": False, "calls": [dict(one)["call"] for one in calls]}


class _NamedCallStep(dict[str, Any]):
    """A `call_step(..., tool=name)` entry: a plain step dict that remembers it named its tool, so that
    one scripted for a loop given a single tool is reported as the wiring mistake it is."""

    __slots__ = ("tool",)

    def __init__(self, tool: str, step: dict[str, Any]) -> None:
        super().__init__(step)
        self.tool = tool


def _single_tool_mistake(tool: str) -> UsageError:
    return UsageError(
        f"the script calls call_step(..., tool={tool!r}), the step of a loop given a list of tools "
        '({"tool": ..., "args": ...}), but this loop was given a single tool, whose step carries the bare '
        f"args: write call_step(args) without tool=, or give the loop a list of tools ([{tool}])"
    )


def done_step(rationale: str = "", *, answer: BaseModel | Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A scripted step that stops the loop; with `answer`, it carries the final answer (`answer=` runs)."""
    step: dict[str, Any] = {"rationale": rationale, "done": True, "call": None}
    if answer is not None:
        step["answer"] = answer.model_dump(mode="json") if isinstance(answer, BaseModel) else dict(answer)
    return step
