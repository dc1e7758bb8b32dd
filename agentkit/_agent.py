"""The executor seam: `ToolAgent`, the `Prompt` it renders and the `ToolRoundInfo` it sees."""

# Annotations are evaluated, not postponed: pydantic reads the round infos' (their JSON form in `RoundStarted`)
# where their module is reported as `agentkit`, which does not hold the names they use.

from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Annotated, Any, Generic, Protocol, TypeVar

from pydantic import BaseModel

from agentkit._context import Omitted
from agentkit._jsonform import NOT_READ, JsonArgs, Unwritten
from agentkit._media import PromptPart, split_parts
from agentkit._outcome import StopReason
from agentkit._proposals import ProposedAction
from agentkit._reasoning import JsonData, Reasoning, check_extra_body, check_reasoning
from agentkit.errors import UsageError

__all__ = ["PriorCall", "Prompt", "RoleSpec", "RoundInfo", "ToolAgent", "ToolRoundInfo"]

Ctx = TypeVar("Ctx")
Ctx_contra = TypeVar("Ctx_contra", contravariant=True)
Args_co = TypeVar("Args_co", bound=BaseModel, covariant=True)
R = TypeVar("R")


@dataclass(frozen=True, kw_only=True, slots=True)
class Prompt:
    """A rendered prompt, split so that provider prompt caching works."""

    system: str
    """Stable rules and instructions: byte-identical across rounds and runs."""
    dynamic: str = ""
    """This run's data: the request, prior results, where the round sits in the budget. With `parts`, its
    text view (filled in from them when left empty): each image or document a bracketed placeholder with
    its digest, for code that reads the prompt as text."""
    parts: tuple[PromptPart, ...] = ()
    """The dynamic part with images and documents: text, `ImagePart`s and `DocumentPart`s in reading order
    (adjacent strings merged). Sent in place of `dynamic` by callers that send images. Parts of text only
    are joined into `dynamic`, so a prompt of text only is the string it always was."""

    def __post_init__(self) -> None:
        if self.parts:
            dynamic, parts = split_parts(self.dynamic, self.parts)
            object.__setattr__(self, "dynamic", dynamic)
            object.__setattr__(self, "parts", parts)


@dataclass(frozen=True, kw_only=True, slots=True)
class RoleSpec:
    """Which model plays the executor, and how it is asked."""

    model: str
    """The primary model."""
    fallback_model: str | None = None
    """Asked once after the primary's attempts fail (never after a throttle)."""
    temperature: float | None = None
    """Sampling temperature; `None` leaves the server's default."""
    max_tokens: int | None = None
    """Completion token limit per call. A reply cut off by it is a `Truncated` error, never parsed.
    `None` (the default) sends no limit, so the server's own applies: agentkit sets no default cap,
    since a cap too low for the model or the schema fails the call (docs: Providers, Truncation)."""
    fallback_max_tokens: int | None = None
    """Completion token limit on the fallback model; `None`: the same as `max_tokens`. Only a
    fallback whose limit differs is asked after a reply is cut off by the token limit."""
    prompt_type: str = ""
    """A label for this role's prompt, carried into requests, traces and logs."""
    seed: int | None = None
    """Sampling seed, for servers that honour one."""
    reasoning: Reasoning | None = None
    """How much a reasoning model thinks (`Reasoning`: an effort level or off, and a thinking budget);
    `None` (the default) sends nothing, so the server's default applies."""
    extra_body: Mapping[str, JsonData] | None = None
    """Provider parameters agentkit has no field for, merged into the top level of each request body
    (e.g. vLLM's `{"chat_template_kwargs": {"enable_thinking": False}}`); a key the caller sets itself
    is overridden by it, except the schema's part of the request, which it may not name."""

    def __post_init__(self) -> None:
        _check_role(self)


def _check_role(role: RoleSpec) -> None:
    """Check a role's `reasoning` and `extra_body`, and keep a copy of `extra_body` that its giver cannot change."""
    if role.reasoning is not None:
        check_reasoning(role.reasoning)
    if role.extra_body is not None:
        check_extra_body(role.extra_body, "RoleSpec.extra_body")
        object.__setattr__(role, "extra_body", _json_copy(role.extra_body, "RoleSpec.extra_body"))


def _json_copy(value: JsonData, where: str) -> Any:
    """A copy of a checked JSON value down to its leaves, every mapping's keys `str` (`json.dumps` would turn an
    int key into a string silently), so that changing the value given changes nothing sent later."""
    if isinstance(value, Mapping):
        copy: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise UsageError(
                    f"{where} must hold JSON values only (dicts of str at every level): key {key!r} "
                    f"({type(key).__name__}) is not a str; write it as a string"
                )
            copy[key] = _json_copy(item, f"{where}[{key!r}]")
        return copy
    if isinstance(value, list | tuple):
        return type(value)(_json_copy(item, f"{where}[{index}]") for index, item in enumerate(value))
    return value


@dataclass(frozen=True, kw_only=True, slots=True)
class PriorCall(Generic[R]):
    """One call the executor made in an earlier round, and what came of it."""

    round: int
    """The round of the call."""
    tool_name: str
    """The tool called."""
    args: JsonArgs
    """The call's arguments."""
    batch: Sequence[R] = ()
    """What the tool returned (empty when it did not run)."""
    observation: str | None = None
    """The tool's `ToolRetry` message, or the note that the call was proposed for approval."""
    proposed: bool = False
    """The call was above the autonomy ceiling and awaits a human."""
    repeats: int | None = None
    """The round whose call this one repeated, when the loop refused it (`RepeatPolicy.REFUSE`):
    it did not run; that round's results answer it."""
    amended: tuple[str, ...] = ()
    """The args fields a human changed before approving the call: `args` are the amended args, the
    call that ran; the call as proposed did not run (and proposing it again proposes a call the
    human already changed)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolRoundInfo(Generic[R]):
    """What the executor sees when it renders a round."""

    round: int
    """This round, from 1."""
    max_rounds: int | None
    """The ceiling; `None` when the caller asked for unlimited rounds."""
    is_final_round: bool
    """No call after this round's will run: commit to what you have."""
    prior_results: Annotated[tuple[Sequence[R], ...], NOT_READ, Unwritten] = ()
    """One batch per executed call, in order (those within `LoopConfig.context`, when it is set).
    Not in an event's JSON form, nor are `prior_calls` and `proposals`: earlier events said them."""
    prior_calls: Annotated[tuple[PriorCall[R], ...], NOT_READ, Unwritten] = ()
    """Every earlier call with its batch or observation, in order (the latest ones, when
    `LoopConfig.context` bounds them; see `omitted`)."""
    proposals: Annotated[tuple[ProposedAction[Any], ...], NOT_READ, Unwritten] = ()
    """Calls proposed so far (with `AfterProposal.CONTINUE`)."""
    omitted: Omitted = field(default_factory=Omitted)
    """How many of the oldest calls `LoopConfig.context` left out of `prior_calls` and
    `prior_results` this round (all zero without a bound), with their summary if one is kept."""
    closing_round: bool = False
    """The closing round of a run with an answer schema: the tools have stopped (round ceiling,
    budget or stalemate), no call can be made, and the step must be done with the answer."""
    closed_by: StopReason | None = None
    """On the closing round, why the tools stopped: `StopReason.ROUND_CEILING`, `BUDGET_EXHAUSTED` or
    `DEGENERATION` (`repeated` is then the call that repeated)."""
    repeated: PriorCall[R] | None = None
    """On the closing round after a stalemate, the call that repeated an earlier one (`repeats` names that
    call's round); it did not run."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RoundInfo:
    """What a single-shot or pair executor sees when it renders its prompt."""

    round: int
    """This round, from 1 (a single shot is round 1 of 1)."""
    max_rounds: int
    """The ceiling: 1 for `run_once`, `PairConfig.max_rounds` for `pair`."""
    is_final_round: bool
    """No review follows this round's draft: commit to your best answer."""
    feedback: str | None = None
    """The verifier's objection to the previous draft (`pair` revisions only)."""
    previous: JsonArgs | None = None
    """The previous draft the feedback is about (`pair` revisions only)."""


class ToolAgent(Protocol[Ctx_contra, Args_co, R]):
    """The executor: names its model and renders each round's prompt. It does no I/O."""

    def role(self) -> RoleSpec:
        """The model and settings for the executor's structured call."""
        ...

    def render(self, ctx: Ctx_contra, info: ToolRoundInfo[R]) -> Prompt:
        """Build the round's prompt from the caller's context and the results so far."""
        ...


ASKING: ContextVar[ToolRoundInfo[Any] | None] = ContextVar("agentkit_round", default=None)
"""The round a tool loop is asking the model about, while it asks (its executor's `ToolRoundInfo`); `None`
outside one. A test double (`FunctionCaller`) reads it to answer from the round rather than the prompt."""
