"""`FunctionCaller`: the test double whose replies a function of the request computes."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeAlias, TypeVar

from pydantic import BaseModel

from agentkit._agent import ASKING, ToolRoundInfo
from agentkit._structured import Completion, StructuredRequest
from agentkit._text import TextCompletion
from agentkit._usage import Usage
from agentkit.errors import AgentkitError, UsageError
from agentkit.testing._scripted import ScriptedReply, structured_answer, text_answer

__all__ = ["Answer", "AnswerFunction", "FunctionCaller", "RoundAnswerFunction"]

M = TypeVar("M", bound=BaseModel)

Answer: TypeAlias = BaseModel | Mapping[str, Any] | str | ScriptedReply | TextCompletion
"""What the function returns for one request: what a `ScriptedCaller` script entry may be
(an exception is raised by the function rather than returned)."""

AnswerFunction: TypeAlias = Callable[[StructuredRequest, "type[BaseModel] | None"], Answer | Awaitable[Answer]]
"""The function: the request, and the schema asked for (`None` for a prose request)."""

RoundAnswerFunction: TypeAlias = Callable[
    [StructuredRequest, "type[BaseModel] | None", "ToolRoundInfo[Any] | None"], Answer | Awaitable[Answer]
]
"""A function that also gets the round being asked: the tool loop's `ToolRoundInfo` for this request (what the
executor was shown: prior calls and results, proposals, the round), or `None` outside a tool loop's round."""


class FunctionCaller:
    """A `StructuredCaller` (and `TextCaller`) that answers each request by calling a function.

    Where `ScriptedCaller` replays replies in a fixed order, `FunctionCaller` computes each
    from the request: the function gets the `StructuredRequest` and the schema asked for
    (`None` for `complete_text`), and returns (or, if it is async, resolves to) a dict, a
    model instance, raw JSON text, a `ScriptedReply` or a `TextCompletion`. A structured
    answer is validated against the schema through JSON, exactly as `ScriptedCaller` does, so
    an answer only Python-mode validation accepts fails as a real reply would. For a prose request
    a `str` is the text as is.

    An exception the function raises is the model call's failure, as a scripted exception is: an
    `AgentkitError` (`Throttled`, `Truncated`, `ProviderError`...) gets the usual retry and
    fallback treatment; any other exception becomes a `ProviderError` whose cause it is, and a
    `UsageError` escapes the run. Every request is recorded in `requests`, failed ones
    included, and each call reports `Usage(requests=1)` unless a `ScriptedReply` says otherwise.

    Raises:
        UsageError: at construction, for a function that cannot be called as ``function(request,
            schema)` (one of a single parameter, say); `*args`` is accepted.
    """

    def __init__(self, function: AnswerFunction | RoundAnswerFunction) -> None:
        if not callable(function):
            raise UsageError(f"FunctionCaller needs a function of (request, schema); got {function!r}")
        self._with_round = _check_parameters(function)
        self.function = function
        """The function that answers."""
        self.requests: list[StructuredRequest] = []
        """Every request made, in order."""
        self.rounds: list[ToolRoundInfo[Any] | None] = []
        """The round each request was made for (a tool loop's `ToolRoundInfo`; `None` outside one), in order."""

    async def complete(self, request: StructuredRequest, schema: type[M]) -> Completion[M]:
        """Validate the function's answer for `request` against `schema` and return it."""
        answer = await self._answer(request, schema)
        if isinstance(answer, TextCompletion):
            raise UsageError(
                f"the function answered request {len(self.requests)} ({schema.__name__}) with a TextCompletion; "
                "return a dict, a model instance or JSON text for a structured request"
            )
        return structured_answer(answer, request, schema)

    async def complete_text(self, request: StructuredRequest) -> TextCompletion:
        """Return the function's answer for `request` as a prose reply: a `str` is the text as is."""
        answer = await self._answer(request, None)
        at = len(self.requests)
        return text_answer(
            answer,
            request,
            lambda kind: (
                f"the function answered text request {at} with {kind}; "
                "return a str (or a ScriptedReply or TextCompletion of one) for a prose request"
            ),
        )

    async def _answer(self, request: StructuredRequest, schema: type[BaseModel] | None) -> Answer:
        self.requests.append(request)
        info = ASKING.get()
        self.rounds.append(info)
        try:
            if self._with_round:
                answer = typing.cast("RoundAnswerFunction", self.function)(request, schema, info)
            else:
                answer = typing.cast("AnswerFunction", self.function)(request, schema)
            if inspect.isawaitable(answer):
                answer = await answer
        except AgentkitError as error:
            if error.usage is None:
                error.usage = Usage(requests=1)
            raise
        if not isinstance(answer, BaseModel | Mapping | str | ScriptedReply | TextCompletion):
            raise UsageError(
                f"the function answered request {len(self.requests)} with {type(answer).__name__}; return a dict, "
                "a model instance, JSON text, a ScriptedReply or a TextCompletion (raise an exception to fail)"
            )
        return answer


def _check_parameters(function: Callable[..., Any]) -> bool:
    """Whether `function` takes the round too (`function(request, schema, info)`, three positional
    parameters); refuse one that cannot be called as `function(request, schema)` (`*args` can).

    Raises:
        UsageError: naming the function, its parameters and the fix.
    """
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # no signature to read (some builtins): it is judged when called
        return False
    try:
        signature.bind(None, None)
    except TypeError:
        try:
            signature.bind(None, None, None)
        except TypeError:
            pass
        else:
            return True  # (request, schema, info): it takes the round too
        name = getattr(function, "__qualname__", None) or repr(function)
        raise UsageError(
            f"FunctionCaller's function must take two positional parameters, (request, schema), or three, (request, "
            f"schema, info); {name}{signature} does not: add the schema parameter (None for a prose request), e.g. "
            "def answer(request: StructuredRequest, schema: type[BaseModel] | None) -> Answer"
        ) from None
    return False
