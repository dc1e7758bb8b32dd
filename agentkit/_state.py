"""A run's state as one frozen value: its header (run id, config, tools) and a log of entries, appended.

A run appends one entry per model round (`RoundEntry`: the step, the call and what came of it,
usage and time), one per decision on a proposal (`DecisionEntry`) and one at each end of a leg
(`EndEntry`). Nothing is ever rewritten: a resumed run goes on appending to the state it loaded,
and storage writes only the entries it has not written yet. Everything else a run needs to go on
(its calls and batches, the pending proposals, the repeat window, usage, rounds, the running
summary) is folded from the entries by `fold`, the one function that reads them.

Each entry carries a chained digest: the SHA-256 of the previous digest (the header's for the
first entry) and the entry's canonical JSON. Appending costs the size of the entry, not of the
run, and `verify` proves the whole log unaltered.

Every value is JSON-native. Data from the model and the tools (args, batches, answers) is kept as
canonical JSON *text* (`json_text`: sorted keys, ASCII, non-finite floats as `NaN` and
`Infinity`), so a state survives any JSON round trip losslessly however deep the items nest or
whatever floats and strings they hold; free text (observations, names, reasons) is `Text`, which
writes a lone surrogate or a NUL losslessly in JSON (`agentkit._lossless`).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import json
import json.encoder
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from agentkit._cache import kept_on, value_cache
from agentkit._config import AfterProposal, LoopConfig, RepeatPolicy
from agentkit._context import ContextWindow, Summarizer
from agentkit._cost import Prices, inherited_prices
from agentkit._degeneration import same_args
from agentkit._lossless import Text, to_stored
from agentkit._outcome import Outcome, StopReason
from agentkit._structured import RetryPolicy
from agentkit._tiers import AutonomyRung, Tier
from agentkit._trust import ProvenancePolicy, Trust
from agentkit._usage import Usage
from agentkit.errors import ResumeRefused

__all__ = [
    "READ_VERSIONS",
    "STATE_VERSION",
    "CallView",
    "CheckpointConfig",
    "CheckpointContext",
    "DecisionEntry",
    "EndEntry",
    "Entry",
    "Progress",
    "RoundEntry",
    "RoundOutcome",
    "RunCheckpoint",
    "ToolEntry",
    "args_schema_digest",
    "comparator_name",
    "json_text",
]

STATE_VERSION = 3
"""The state schema this agentkit writes; it reads it and `READ_VERSIONS`, and refuses any other. Version 3
records provenance (`RoundEntry.untrusted`, `RoundEntry.from_untrusted`, `DecisionEntry.untrusted`,
`CheckpointConfig.provenance`); a version 2 state has none of it, and is read, verified and resumed as it
was written (its runs had no provenance policy, and go on without one)."""

READ_VERSIONS = frozenset({2, STATE_VERSION})
"""The state schema versions this agentkit reads."""

_FROZEN = ConfigDict(frozen=True, extra="forbid")

_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=True)
_MAKE_C_ENCODER: Any = getattr(json.encoder, "c_make_encoder", None)
_CANONICAL_CHUNKS: Any = (
    None
    if _MAKE_C_ENCODER is None
    else _MAKE_C_ENCODER(
        None, _CANONICAL.default, json.encoder.encode_basestring_ascii, None, ":", ",", True, False, True
    )
)
"""`_CANONICAL`'s C encoder, made once (`encode` makes one per call) and without the circular-reference
check, which keeps no state between calls: a JSON value has no cycles (one that had would end in
`RecursionError`, never loop)."""


def json_text(value: object) -> str:
    """`value` (JSON values) as canonical JSON text: sorted keys, no whitespace, ASCII only.

    Lone surrogates are escaped (`\\udc80`) and non-finite floats written as `NaN` and
    `Infinity`, which `json.loads` reads back as they were: nothing is lost.
    """
    if _CANONICAL_CHUNKS is None or isinstance(value, str):  # a string is written by encode's own path
        return _CANONICAL.encode(value)
    return "".join(_CANONICAL_CHUNKS(value, 0))


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def _unset(value: object) -> bool:
    return value is None


class ToolEntry(BaseModel):
    """One tool of a run's set, as the run records it: its name, its tier, the shape of its args, and its
    provenance declarations (the trust of its results, whether it sends data out)."""

    model_config = _FROZEN
    name: Text
    tier: Tier | None
    """The declared tier; `None`: the tool declares none (it never runs)."""
    args: str
    """SHA-256 of the args type's JSON schema (sorted keys): a change of fields, types or constraints shows."""
    trust: Trust | None = Field(default=None, exclude_if=_unset)
    """The trust the tool declares (`declared_trust`); `None`: not recorded (a state written before it was),
    and then not compared when the run goes on. Left out of the header's digest when `None` or
    `Trust.TRUSTED`, so a run of tools that declare the defaults digests as it did before it was recorded."""
    egress: bool | None = Field(default=None, exclude_if=_unset)
    """Whether the tool declares egress (`declared_egress`); `None`: not recorded, as `trust`. Left out of the
    header's digest when `None` or `False`."""

    def unrecorded(self) -> set[str]:
        """The fields left out of the header's digest: those added since, unrecorded or at the value a tool
        that declares nothing has. Removing one from a stored state by hand goes unseen by the digests, and
        only stops that declaration from being compared; changing one to another value does not."""
        left_out = set()
        if self.trust is None or self.trust is Trust.TRUSTED:
            left_out.add("trust")
        if self.egress is None or self.egress is False:
            left_out.add("egress")
        return left_out


class CheckpointContext(BaseModel):
    """The run's `ContextWindow`: its bounds as data; of a summarizer, only its name.

    A function cannot round-trip through JSON, so a resumed run is given the summarizer again
    (`resume_tool_loop(..., summarize=...)`); its name is kept to refuse a resume without it, with
    one where the run had none, or with a function of another name.
    """

    model_config = _FROZEN
    last: int | None = None
    max_chars: int | None = None
    max_tokens: int | None = None
    chars_per_token: float = 4.0
    summarize: Text | None = None
    """The summarizer's `module.qualname`; `None`: the run had none."""

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
    """A function's `module.qualname` (its `repr` for a callable object without them)."""
    module = getattr(function, "__module__", None)
    qualname = getattr(function, "__qualname__", None) or getattr(type(function), "__qualname__", None)
    if module is None or qualname is None:
        return repr(function)
    return f"{module}.{qualname}"


def comparator_name(same: object) -> str | None:
    """What a run's state records of its repeat comparator (`same=`): its `function_name`; `None` for the
    default (none given, or `same_args` itself)."""
    return None if same is None or same is same_args else function_name(same)


class CheckpointConfig(BaseModel):
    """The fields of the run's `LoopConfig` (retry policy included)."""

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
    min_calls: int = 0
    closing_round: bool = True
    retry: dict[str, float]
    context: CheckpointContext | None = None
    """The run's `ContextWindow`; `None`: the executor was shown every earlier call."""
    prices: dict[str, Any] | None = None
    """The run's price table (`Prices.to_json`). Left out of the header's digest when `None`, as is
    `cost_budget`, so a state recorded before they were is digested as it was."""
    cost_budget: str | None = None
    """The run's budget in money, as the decimal's text."""
    provenance: CheckpointProvenance | None = None
    """The run's `ProvenancePolicy`; `None`: none (off, or a state written before provenance). Left out of
    the header's digest when `None`, as headers were digested before it was recorded."""
    repeat_exempt: tuple[Text, ...] = ()
    """`LoopConfig.repeat_exempt`, sorted. Left out of the header's digest when empty."""
    max_calls_per_step: int = 1
    max_parallel_calls: int | None = None

    @model_serializer(mode="wrap")
    def _as_before(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Without the fields of several calls per step at their defaults: a state of a one-call run is written,
        and its header digested, as before they existed."""
        dumped: dict[str, Any] = handler(self)
        for name, default in _CALLS_DEFAULTS:
            if dumped.get(name, default) == default:
                dumped.pop(name, None)
        return dumped

    def unrecorded(self) -> set[str]:
        """The fields left out of the header's digest: those added since, at the value a state without
        them means."""
        left_out = {name for name in ("prices", "cost_budget") if getattr(self, name) is None}
        if self.provenance is None:
            left_out.add("provenance")
        if not self.repeat_exempt:
            left_out.add("repeat_exempt")
        return left_out

    @classmethod
    def of(cls, config: LoopConfig) -> CheckpointConfig:
        """The config's fields (once per config: a service runs many runs with one; the value is frozen)."""
        return _config_record(config)

    def rebuild(self, summarize: Summarizer | None = None) -> LoopConfig:
        """The `LoopConfig` again, with `summarize` as its context window's summarizer."""
        apart = {"retry", "context", "prices", "cost_budget", "provenance", "repeat_exempt"}
        fields = self.model_dump(exclude=apart)
        retry = {name: int(value) if name.endswith("_attempts") else value for name, value in self.retry.items()}
        context = None if self.context is None else self.context.rebuild(summarize)
        prices = None if self.prices is None else Prices.from_json(self.prices)
        budget = None if self.cost_budget is None else Decimal(self.cost_budget)
        provenance = None if self.provenance is None else self.provenance.rebuild()
        return LoopConfig(
            **fields,
            retry=RetryPolicy(**retry),  # type: ignore[arg-type]  # ints stored as float read back as ints
            context=context,
            prices=prices,
            cost_budget=budget,
            provenance=provenance,
            repeat_exempt=frozenset(self.repeat_exempt),
        )


_CALLS_DEFAULTS = (("max_calls_per_step", 1), ("max_parallel_calls", None))


def _off(value: bool) -> bool:
    return value is False


class CheckpointProvenance(BaseModel):
    """The run's `ProvenancePolicy`, field by field. `short_values` and `steered` came later: a state without
    them was recorded by a run that had neither, and goes on without them; each is written only when on."""

    model_config = _FROZEN
    ceiling: Tier
    egress: AutonomyRung
    min_match: int
    short_values: bool = Field(default=False, exclude_if=_off)
    steered: bool = Field(default=False, exclude_if=_off)

    def rebuild(self) -> ProvenancePolicy:
        return ProvenancePolicy(**dict(self))


@value_cache(maxsize=64)
def _config_record(config: LoopConfig) -> CheckpointConfig:
    # `stream` is how a leg shows its steps, not what the run does: it is not recorded (a state reads the same
    # either way, and its digests stay those of states recorded before streaming existed)
    apart = ("retry", "context", "prices", "cost_budget", "stream", "provenance", "repeat_exempt")
    fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.name not in apart}
    context = None if config.context is None else CheckpointContext.of(config.context)
    prices = None if config.prices is None else config.prices.to_json()
    budget = None if config.cost_budget is None else str(config.cost_budget)
    policy = config.provenance
    provenance = None
    if policy is not None:
        provenance = CheckpointProvenance(**dataclasses.asdict(policy))
    return CheckpointConfig(
        **fields,
        retry=dataclasses.asdict(config.retry),
        context=context,
        prices=prices,
        cost_budget=budget,
        provenance=provenance,
        repeat_exempt=tuple(sorted(config.repeat_exempt)),
    )


class RoundOutcome(enum.StrEnum):
    """What came of one model round."""

    FAILED = "failed"
    """No step: the model call failed, was cut off by the deadline, or the executor's render raised."""
    DONE = "done"
    """The executor said done (with its answer, if the run has an answer type)."""
    RAN = "ran"
    """The tool ran and returned a batch."""
    RETRIED = "retried"
    """The tool raised `ToolRetry`: its message is the call's observation."""
    REFUSED = "refused"
    """The call repeated an earlier one and was not run (`RepeatPolicy.REFUSE`)."""
    PROPOSED = "proposed"
    """The call was above the autonomy ceiling: a proposal, not run."""
    ENDED = "ended"
    """The call ended the run without joining it: a stalemate, a refusal (no tier, not allowed live),
    a tool that failed, or the repeat comparator that raised."""


class RoundEntry(BaseModel):
    """One model round: the step, the call and what came of it, usage and time."""

    model_config = _FROZEN
    kind: Literal["round"] = "round"
    round: int
    outcome: RoundOutcome
    closing: bool = False
    """The closing round of a run with an answer type (no call allowed)."""
    model: Text = ""
    """The model that answered (the fallback's name when it did)."""
    rationale: Text = ""
    tool: Text | None = None
    tier: Tier | None = None
    args: str | None = None
    """The call's args, as `json_text`."""
    answer: str | None = None
    """The done step's answer, as `json_text` (`None`: none given)."""
    batch: str | None = None
    """`RAN`: the batch, as `json_text` of the items' JSON values."""
    observation: Text | None = None
    repeats: int | None = None
    """`REFUSED`: the round whose call this one repeats."""
    proposed_at: str | None = None
    """`PROPOSED`: when (ISO 8601, UTC)."""
    call_digest: str | None = None
    """`PROPOSED`: `call_digest(tool, args)`, what a decision binds to."""
    error: Text | None = None
    """The error that ended the run in this round."""
    summary: Text | None = None
    """The context window's running summary, when this round's window made a new one."""
    summarized: int | None = None
    """How many of the oldest calls that summary covers."""
    prompt: str | None = None
    """SHA-256 of the prompt the executor rendered (system and dynamic), for replays."""
    schema_digest: str | None = None
    """SHA-256 of the step schema the model was asked to follow, for replays."""
    media: tuple[str, ...] = ()
    """The images and documents of the prompt, in order, each as `kind:media_type:sha256` (by digest, never
    by bytes), so that a replay tells a changed image from the same one. Left out of the digest when empty."""
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    """Of `input_tokens`, read from the prompt cache. Left out of the digest when 0, as are the other detail
    counts and `reasoning` when `None`, so a state written before they were recorded still verifies."""
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    by_model: str | None = None
    """A round that asked several models (a fallback after a failed primary, a summarizer on a model of its own):
    its usage split by the model asked, as `json_text` of `{model: counts}`, so each share is priced at its own
    model's price. `None` for a round of one model (priced at `model`); left out of the digest then."""
    reasoning: Text | None = None
    """The reasoning the model wrote before its step, when the server returned it."""
    llm_seconds: float = 0.0
    tool_seconds: float = 0.0
    elapsed: float = 0.0
    """The run's time so far (every leg), at this entry: the deadline goes on from it."""
    position: int | None = None
    """In a step of several calls (`LoopConfig.max_calls_per_step`): this call's place in the step, from 0. The
    calls are recorded as each finishes and read back in the step's order. `None` for a one-call step; left out
    of the digest then, as rounds were digested before it existed."""
    trace: str | None = None
    """The W3C `traceparent` of the round's span, from a tracing observer (`Observer.traceparent`), so
    that a later leg of the run, or a fork of it, links to it. Left out of the digest when `None`."""
    untrusted: bool = False
    """`RAN` or `RETRIED`: the tool declares `Trust.UNTRUSTED`, so its result brought untrusted content into
    the run (recorded under a `ProvenancePolicy`). Left out of the digest when `False`."""
    from_untrusted: tuple[Text, ...] = ()
    """The call's args (dotted paths) whose values first appeared in untrusted content (or, under
    `ProvenancePolicy.steered`, in a trusted result read after it). Left out of the digest when empty."""
    digest: str = ""
    """SHA-256 of the previous entry's digest (the header's, first) and this entry's content."""


class DecisionEntry(BaseModel):
    """A decision on a pending proposal, and what came of it: the approved call's batch, or what the
    executor is told instead (the rejection, or a human's account of a call whose outcome was lost)."""

    model_config = _FROZEN
    kind: Literal["decision"] = "decision"
    round: int
    """The proposal's round."""
    call_digest: str
    """The proposal's digest: the call decided."""
    approved: bool
    by: Text
    reason: Text = ""
    batch: str | None = None
    """The approved call ran: its batch, as `json_text`."""
    observation: Text | None = None
    error: Text | None = None
    """The approved call failed: the run ended with this error."""
    tool_seconds: float = 0.0
    elapsed: float = 0.0
    args: str | None = None
    """The approver amended the call: the args that ran, as `json_text` (`None`: the call ran as
    proposed). Left out of the digest when `None`."""
    amended: tuple[Text, ...] = ()
    """The args fields the approver changed."""
    untrusted: bool = False
    """The approved call's tool declares `Trust.UNTRUSTED`: its result brought untrusted content into the
    run. Left out of the digest when `False`."""
    digest: str = ""


class EndEntry(BaseModel):
    """The end of a leg of the run: why, and how. A leg stopped at a proposal goes on after its decisions."""

    model_config = _FROZEN
    kind: Literal["end"] = "end"
    stop_reason: StopReason
    outcome: Outcome
    error: Text | None = None
    elapsed: float = 0.0
    digest: str = ""


Entry = Annotated[RoundEntry | DecisionEntry | EndEntry, Field(discriminator="kind")]


@dataclass(frozen=True, kw_only=True, slots=True)
class CallView:
    """One call of the run as the state records it (JSON values), for `ToolRoundInfo.prior_calls`."""

    round: int
    tool: str
    args: str
    ran: bool = False
    """The tool ran and returned a batch."""
    batch: str | None = None
    """The batch, when the call ran (`None` too when the tool's items could not be kept: see `Codec`)."""
    observation: str | None = None
    proposed: bool = False
    """An undecided proposal."""
    repeats: int | None = None
    counted: bool = True
    """The call joined the repeat window (a refused repeat does not)."""
    entry: int = 0
    """The index of the entry that made the call."""
    amended: tuple[str, ...] = ()
    """The args fields an approver changed before the call ran (`args` are then the amended ones)."""
    position: int = 0
    """The call's place in its step (`RoundEntry.position`; 0 for a one-call step)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Progress:
    """What the entries add up to: everything a run needs to go on, folded once."""

    calls: tuple[CallView, ...] = ()
    """Every call, in order, as it stands now (a decided proposal with its batch or observation)."""
    pending: tuple[RoundEntry, ...] = ()
    """The proposals awaiting a decision, in order."""
    rounds: int = 0
    usage: Usage = field(default_factory=Usage)
    largest_round_tokens: int = 0
    elapsed: float = 0.0
    refusals: int = 0
    """Repeats refused so far (`RepeatPolicy.REFUSE`)."""
    summary: str | None = None
    summarized: int = 0
    ended: EndEntry | None = None
    """The last leg's end, when nothing came after it."""
    answer: str | None = None
    """The answer of the latest done round, as `json_text`."""


def fold(entries: Iterable[RoundEntry | DecisionEntry | EndEntry]) -> Progress:
    """The one reading of a state's entries: what they add up to."""
    calls: list[CallView] = []
    pending: dict[tuple[int, str], tuple[int, RoundEntry]] = {}
    """Each undecided proposal by (round, digest): its index in `calls`, and its entry."""
    rounds = requests = input_tokens = output_tokens = largest = refusals = summarized = 0
    cached = written = reasoned = 0
    elapsed, summary, ended, answer = 0.0, None, None, None
    placed = False
    for index, entry in enumerate(entries):
        ended, elapsed = None, entry.elapsed
        if isinstance(entry, EndEntry):
            ended = entry
        elif isinstance(entry, DecisionEntry):
            decided = pending.pop((entry.round, entry.call_digest), None)
            if decided is not None:
                at = decided[0]
                ran = entry.batch is not None
                calls[at] = dataclasses.replace(
                    calls[at],
                    proposed=False,
                    ran=ran,
                    batch=entry.batch,
                    observation=entry.observation,
                    args=calls[at].args if entry.args is None else entry.args,
                    amended=entry.amended,
                )
        else:
            rounds = max(rounds, entry.round)
            requests += entry.requests
            input_tokens += entry.input_tokens
            output_tokens += entry.output_tokens
            cached += entry.cached_input_tokens
            written += entry.cache_write_tokens
            reasoned += entry.reasoning_tokens
            largest = max(largest, entry.input_tokens + entry.output_tokens)
            if entry.summary is not None:
                summary, summarized = entry.summary, entry.summarized or 0
            if entry.outcome is RoundOutcome.DONE:
                answer = entry.answer
            view = call_of(entry, index)
            if view is not None:
                placed = placed or view.position > 0
                refusals += entry.outcome is RoundOutcome.REFUSED
                if entry.outcome is RoundOutcome.PROPOSED:
                    assert entry.call_digest is not None
                    pending[(entry.round, entry.call_digest)] = (len(calls), entry)
                calls.append(view)
    if placed:
        # A step's calls are recorded as each finishes; they are read in the step's order (a stable sort: the
        # calls of one-call steps, each alone in its round, stay where they are).
        calls.sort(key=_step_order)
    usage = Usage(
        requests=requests,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cached_input_tokens=cached,
        cache_write_tokens=written,
        reasoning_tokens=reasoned,
    )
    return Progress(
        calls=tuple(calls),
        pending=tuple(entry for _, entry in pending.values()),
        rounds=rounds,
        usage=usage,
        largest_round_tokens=largest,
        elapsed=elapsed,
        refusals=refusals,
        summary=summary,
        summarized=summarized,
        ended=ended,
        answer=answer,
    )


_CALLS = frozenset({RoundOutcome.RAN, RoundOutcome.RETRIED, RoundOutcome.REFUSED, RoundOutcome.PROPOSED})
"""The round outcomes whose call joins the run (the executor is shown it): the others end the run."""


def call_of(entry: RoundEntry, index: int) -> CallView | None:
    """The call a round entry adds to the run; `None` for a round that adds none."""
    if entry.outcome not in _CALLS:
        return None
    assert entry.tool is not None
    assert entry.args is not None
    return CallView(
        round=entry.round,
        tool=entry.tool,
        args=entry.args,
        ran=entry.outcome is RoundOutcome.RAN,
        batch=entry.batch if entry.outcome is RoundOutcome.RAN else None,
        observation=entry.observation,
        proposed=entry.outcome is RoundOutcome.PROPOSED,
        repeats=entry.repeats,
        counted=entry.outcome is not RoundOutcome.REFUSED,
        entry=index,
        position=entry.position or 0,
    )


def _step_order(call: CallView) -> tuple[int, int]:
    return call.round, call.position


class RunCheckpoint(BaseModel):
    """A run's state: everything needed to continue it, as one frozen, JSON-native value.

    Every loop's result carries one (`result.checkpoint`). A run that stopped at a proposal, or
    whose process died between rounds (its journal keeps the state), continues from it; a finished
    run's state records how it went. Build one only through a run, or read one back with
    `model_validate_json`: a state whose entries do not reproduce their digests, or of another
    `version`, is refused before anything runs.
    """

    model_config = _FROZEN

    version: int = STATE_VERSION
    """The state schema version."""
    run_id: Text = ""
    """The run, as stamped on its events and proposals; a resumed run keeps it (`""`: no run recorded)."""
    config: CheckpointConfig = Field(default_factory=lambda: CheckpointConfig.of(LoopConfig()))
    """The run's `LoopConfig`, field by field; a resumed run goes on under it."""
    tools: tuple[ToolEntry, ...] = ()
    """The tool set's names, tiers, args schemas and provenance declarations, in order; going on with another set
    is refused."""
    same: Text | None = None
    """The repeat comparator's (`same=`) `module.qualname`; `None`: the default, args compared by value. A
    function cannot round-trip through JSON, so a resumed run is given it again; going on with another
    comparator, or without it, is refused. Left out of the header's digest when `None`, as headers were
    digested before it was recorded."""
    parent: Text | None = None
    """The run this one was forked from."""
    forked_at: int | None = None
    """The parent's round this run was forked after."""
    entries: tuple[Entry, ...] = ()
    """What happened, in order: rounds, decisions, ends."""
    digest: str = ""
    """The last entry's chained digest (the header's when there is none)."""

    @model_validator(mode="before")
    @classmethod
    def _of_this_version(cls, data: Any) -> Any:
        # A state of another version is refused by what names the problem, not by its first unknown field.
        if isinstance(data, Mapping) and data.get("version", STATE_VERSION) not in READ_VERSIONS:
            raise ValueError(
                f"a state of schema version {data.get('version')!r} (run {data.get('run_id')!r}); this agentkit reads "
                f"version {STATE_VERSION}"
            )
        return data

    @classmethod
    def start(
        cls,
        run_id: str,
        config: LoopConfig | CheckpointConfig,
        tools: Sequence[ToolEntry],
        *,
        same: str | None = None,
        parent: str | None = None,
        forked_at: int | None = None,
    ) -> RunCheckpoint:
        """The state of a run that has done nothing yet (`same`: its repeat comparator's `comparator_name`)."""
        record = config if isinstance(config, CheckpointConfig) else CheckpointConfig.of(config)
        header = made(
            cls,
            version=STATE_VERSION,
            run_id=run_id,
            config=record,
            tools=tuple(tools),
            same=same,
            parent=parent,
            forked_at=forked_at,
            entries=(),
            digest="",
        )
        return header._with(digest=header.head_digest())

    def head_digest(self) -> str:
        """The digest of the header: version, run id, config, tools, repeat comparator and lineage."""
        return _sha256(_head(self))

    def appended(self, entry: RoundEntry | DecisionEntry | EndEntry) -> RunCheckpoint:
        """This state with `entry` appended, its digest chained to the last one."""
        digest = chained(self.digest, entry)
        sealed = _copied(entry, {"digest": digest})
        return self._with(entries=(*self.entries, sealed), digest=digest)

    def _with(self, **changes: Any) -> RunCheckpoint:
        """A copy with `changes` (values of the fields' types), made afresh: nothing folded from this
        state (`progress`) carries over, as it would with `model_copy`."""
        return _copied(self, changes, drop="progress")  # the cached fold of this state's entries, not of the copy's

    def forked(self, run_id: str, *, at_round: int, config: LoopConfig | None = None) -> RunCheckpoint:
        """A new run's state: this run's up to round `at_round`, under `run_id`, its parent recorded.

        The fork keeps the rounds up to `at_round` and the decisions on their proposals (a call that
        ran is inherited as done: resuming the fork never runs it again), and leaves out this run's
        ends, so it goes on from there. A proposal of those rounds that this state does not hold
        decided stops the fork at it again: it is the same call, and `journal.fork` gives the fork the
        run's inbox entry for it (decided once, run at most once, its recorded outcome inherited), never
        a new one. `config` replaces the run's config, except that a config without a `ProvenancePolicy` keeps
        the run's: a fork keeps its parent's taint.

        Raises:
            UsageError: `at_round` is not a round this run reached (`0` forks before round 1).
        """
        from agentkit.errors import UsageError

        if isinstance(at_round, bool) or not isinstance(at_round, int) or not 0 <= at_round <= self.rounds:
            raise UsageError(
                f"run {self.run_id!r} reached round {self.rounds}; fork it at a round from 0 to {self.rounds}, "
                f"not {at_round!r}"
            )
        proposed = {
            (e.round, e.call_digest)
            for e in self.entries
            if isinstance(e, RoundEntry) and e.round <= at_round and e.outcome is RoundOutcome.PROPOSED
        }
        record = self.config if config is None else CheckpointConfig.of(config)
        if record.provenance is None and self.config.provenance is not None:
            # A fork keeps its parent's taint, and so the policy that enforces it: a config without one keeps the run's.
            record = record.model_copy(update={"provenance": self.config.provenance})
        if record.prices is not None and self.config.prices is not None:
            # The rounds a fork inherits keep their models' prices: a new table adds to the run's, never reprices it.
            record = record.model_copy(update={"prices": inherited_prices(self.config.prices, record.prices)})
        state = RunCheckpoint.start(run_id, record, self.tools, same=self.same, parent=self.run_id, forked_at=at_round)
        for entry in self.entries:
            if (isinstance(entry, RoundEntry) and entry.round <= at_round) or (
                isinstance(entry, DecisionEntry) and (entry.round, entry.call_digest) in proposed
            ):
                state = state.appended(entry)
        if state.progress.pending:
            elapsed = state.progress.elapsed
            state = state.appended(EndEntry(stop_reason=StopReason.PROPOSED, outcome=Outcome.APPLIED, elapsed=elapsed))
        return state

    def verify(self) -> None:
        """Refuse a state of another version, or one whose header or entries do not reproduce their digests.

        Raises:
            ResumeRefused: naming the problem (and the entry, for an altered one); nothing ran.
        """
        if self.version not in READ_VERSIONS:
            raise ResumeRefused(
                f"the state of run {self.run_id!r} has schema version {self.version}; this agentkit reads "
                f"version {STATE_VERSION}. Nothing ran"
            )
        digest = self.head_digest()
        for index, entry in enumerate(self.entries):
            digest = chained(digest, entry)
            if entry.digest != digest:
                raise ResumeRefused(
                    f"the state of run {self.run_id!r} does not match its digests from entry {index} on ({entry.kind}"
                    f"{f' of round {entry.round}' if not isinstance(entry, EndEntry) else ''}): edited by hand, "
                    "damaged, or not this run's; nothing ran"
                )
        if self.digest != digest:
            raise ResumeRefused(
                f"the state of run {self.run_id!r} does not match its digest (edited by hand, or damaged); nothing ran"
            )
        problem = _inconsistency(self.entries, frozenset(t.name for t in self.tools))
        if problem is not None:
            raise ResumeRefused(f"the state of run {self.run_id!r} does not hold together: {problem}; nothing ran")

    @functools.cached_property
    def progress(self) -> Progress:
        """What the entries add up to (folded once per state value)."""
        return fold(self.entries)

    @property
    def finished(self) -> bool:
        """The run ended for a reason other than a proposal (or records no run): there is nothing to resume."""
        return self._finished(len(self.entries))

    def _finished(self, upto: int) -> bool:
        """`finished` of the state's first `upto` entries."""
        last = self.entries[upto - 1] if upto else None
        return not self.run_id or (isinstance(last, EndEntry) and last.stop_reason is not StopReason.PROPOSED)

    def resumable_after(self, stored: int, was: bool) -> bool:
        """`not finished and resumable`, given `was`, its value for the first `stored` entries: from the
        entries after them wherever that tells, so that a journal's write reads the round, not the run."""
        if self.finished:
            return False
        if stored and not was:
            # The earlier entries ended (entries after an end: what they were is not enough), or a call among
            # them ran whose batch could not be kept.
            return self.resumable if self._finished(stored) else False
        return all(
            e.batch is not None for e in self.entries[stored:] if e.kind == "round" and e.outcome is RoundOutcome.RAN
        )

    @property
    def stop_reason(self) -> StopReason | None:
        """Why the run's latest leg ended; `None` while it runs (or when its process died mid-run)."""
        ended = self.progress.ended
        return None if ended is None else ended.stop_reason

    @property
    def rounds(self) -> int:
        """Rounds used so far."""
        return self.progress.rounds

    @property
    def usage(self) -> Usage:
        """Model usage so far, every leg."""
        return self.progress.usage

    @property
    def resumable(self) -> bool:
        """Every batch the run gathered is kept (a tool whose items JSON cannot carry leaves its out)."""
        return all(call.batch is not None for call in self.progress.calls if call.ran)

    @property
    def proposals(self) -> tuple[RoundEntry, ...]:
        """The proposals awaiting a decision (each a `PROPOSED` round entry)."""
        return self.progress.pending


_Made = typing.TypeVar("_Made", bound=BaseModel)
_set = object.__setattr__


def made(cls: type[_Made], **values: Any) -> _Made:
    """`cls.model_construct(**values)` for values the run made itself, each of its field's type: the same
    value (its fields in their declared order, the defaults of those not given), made without
    `model_construct`'s pass over every field's alias, default and validation settings, which costs more
    than the rest of recording a round. For the state's own models: no private attributes, no extras."""
    template, factories = _template(cls)
    fields = {**template, **values}
    for name, factory in factories:
        if name not in values:
            fields[name] = factory()
    return _made(cls, fields, set(values))


def _copied(value: _Made, changes: Mapping[str, Any], *, drop: str | None = None) -> _Made:
    """`value.model_copy(update=changes)` (a shallow copy), without `drop` (a cached property's value)."""
    fields = {**value.__dict__, **changes}
    if drop is not None:
        fields.pop(drop, None)
    return _made(type(value), fields, value.__pydantic_fields_set__ | changes.keys())


def _made(cls: type[_Made], fields: dict[str, Any], fields_set: set[str]) -> _Made:
    value = cls.__new__(cls)
    _set(value, "__dict__", fields)
    _set(value, "__pydantic_fields_set__", fields_set)
    _set(value, "__pydantic_extra__", None)
    _set(value, "__pydantic_private__", None)
    return value


@functools.cache
def _template(cls: type[BaseModel]) -> tuple[dict[str, Any], tuple[tuple[str, Callable[[], Any]], ...]]:
    """Each field of `cls` in order, with its default (`None` for a required one, which `made` is given, and
    for one with a default factory, which `made` calls when it is not given), and those factories."""
    if cls.__private_attributes__ or cls.model_config.get("extra") == "allow":  # pragma: no cover - a wiring mistake
        raise TypeError(f"{cls.__name__} has private attributes or extras; build it with model_construct")
    fields = cls.model_fields
    template = {name: None if f.is_required() or f.default_factory else f.get_default() for name, f in fields.items()}
    factories = tuple((name, f.default_factory) for name, f in fields.items() if f.default_factory is not None)
    return template, typing.cast("tuple[tuple[str, Callable[[], Any]], ...]", factories)


def _inconsistency(entries: Sequence[RoundEntry | DecisionEntry | EndEntry], tools: frozenset[str]) -> str | None:
    """What does not hold together in a log whose digests check out (one sealed by hand) over the run's `tools`;
    `None`: nothing."""
    pending: set[tuple[int, str | None]] = set()
    last = 0
    for index, entry in enumerate(entries):
        if isinstance(entry, RoundEntry):
            if entry.round < last:
                return f"entry {index} is round {entry.round}, after round {last}"
            last = entry.round
            if entry.outcome is RoundOutcome.PROPOSED:
                if entry.tool is None or entry.args is None or entry.tier is None or entry.call_digest is None:
                    return f"entry {index} proposes a call without its tool, args, tier or digest"
                pending.add((entry.round, entry.call_digest))
            elif entry.outcome in _CALLS and (entry.tool is None or entry.args is None):
                return f"entry {index} records a call without its tool or args"
            if entry.outcome in _CALLS and entry.tool not in tools:
                return f"entry {index} records a call to {entry.tool!r}, which is not in the run's tool set"
        elif isinstance(entry, DecisionEntry):
            if (entry.round, entry.call_digest) not in pending:
                return f"entry {index} decides a call of round {entry.round} that no entry before it proposes"
            pending.discard((entry.round, entry.call_digest))
    return None


_UNDIGESTED = frozenset({"digest"})
_UNAMENDED = frozenset({"args", "amended"})
_UNPLACED = frozenset({"position"})


def _round_exclusions(entry: RoundEntry) -> frozenset[str]:
    """What a round's digest leaves out: its digest, and each field recorded later than the first states were
    while it holds its empty value (so that an old state, read with the defaults, digests as it was written)."""
    fields = entry.__dict__
    return _excluded(tuple(_empty(fields[name]) for name in _LATER_ROUND_FIELDS))


def _empty(value: object) -> bool:
    return value is None or value == () or (type(value) is int and value == 0)


_LATER_ROUND_FIELDS = (
    "trace",
    "cached_input_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "reasoning",
    "media",
    "by_model",
)
"""A round's fields that later versions record, each left out of its digest while `None` (0 for a count, `()`
for the media)."""


@functools.cache
def _excluded(empty: tuple[bool, ...]) -> frozenset[str]:
    return _UNDIGESTED | {name for name, left in zip(_LATER_ROUND_FIELDS, empty, strict=True) if left}


_TRUSTED = frozenset({"untrusted"})
_UNMARKED = frozenset({"from_untrusted"})


def chained(previous: str, entry: RoundEntry | DecisionEntry | EndEntry) -> str:
    """The digest of `entry` after the entry (or header) whose digest is `previous`.

    A round recorded without a tracer is digested without its `trace`, as rounds were before it existed.
    """
    return _sha256(f"{previous}\n{_content(entry)}")


def _content(entry: RoundEntry | DecisionEntry | EndEntry) -> str:
    """What `chained` digests of `entry`: `json_text` of its JSON dump, less its digest (and what it leaves out)."""
    exclude = _UNDIGESTED
    if isinstance(entry, RoundEntry):
        exclude = _round_exclusions(entry)
        if entry.position is None:
            exclude = exclude | _UNPLACED  # a call of a one-call step digests as calls did before steps of several
    if isinstance(entry, DecisionEntry) and entry.args is None:
        exclude = exclude | _UNAMENDED  # a decision without an amendment digests as decisions did before amendments
    if not isinstance(entry, EndEntry):
        # An entry without provenance digests as entries did before it was recorded (a version 2 state verifies).
        if not entry.untrusted:
            exclude = exclude | _TRUSTED
        if isinstance(entry, RoundEntry) and not entry.from_untrusted:
            exclude = exclude | _UNMARKED
    fast = _fast_content(entry, exclude)
    if fast is not None:
        return fast
    return json_text(entry.model_dump(mode="json", exclude=set(exclude)))


_ascii = json.encoder.encode_basestring_ascii
_INFINITY = float("inf")


def _float_text(value: float) -> str:
    """A float as `json_text` writes it (`NaN` and `Infinity` included)."""
    if value != value:
        return "NaN"
    if value == _INFINITY:
        return "Infinity"
    if value == -_INFINITY:
        return "-Infinity"
    return float.__repr__(value)


def _plain_text(value: object) -> str | None:
    return _ascii(value) if type(value) is str else "null" if value is None else None


def _free_text(value: object) -> str | None:
    return _ascii(to_stored(value)) if type(value) is str else "null" if value is None else None


def _whole(value: object) -> str | None:
    return int.__repr__(value) if type(value) is int else "null" if value is None else None


def _real(value: object) -> str | None:
    return _float_text(value) if type(value) is float else None


def _truth(value: object) -> str | None:
    return "true" if value is True else "false" if value is False else None


def _tuple_of(part: Callable[[str], str]) -> Callable[[object], str | None]:
    """The writer of a tuple of `str`, each part written by `part`."""

    def written(value: object) -> str | None:
        if type(value) is not tuple or any(type(item) is not str for item in value):
            return None
        return f"[{','.join(map(part, value))}]"

    return written


_texts = _tuple_of(lambda part: _ascii(to_stored(part)))
"""A tuple of `Text`: each part stored losslessly (`to_stored`), as its dump writes it."""
_plain_texts = _tuple_of(_ascii)
"""A tuple of plain `str` (a round's media), written as its dump writes it."""


def _member(kind: type[enum.Enum]) -> Callable[[object], str | None]:
    def written(value: object) -> str | None:
        if value is None:
            return "null"
        if type(value) is not kind:
            return None
        raw = value.value
        return _ascii(raw) if type(raw) is str else int.__repr__(raw) if type(raw) is int else None

    return written


_Writer = Callable[[object], "str | None"]


def _writers() -> dict[type[BaseModel], dict[str, _Writer]]:
    """How each field of each entry model is written in its digested content, where its value is of the field's
    own type (a value of any other type is digested through its JSON dump: see `_fast_content`)."""
    rounds: dict[str, _Writer] = {
        "kind": _plain_text,
        "round": _whole,
        "outcome": _member(RoundOutcome),
        "closing": _truth,
        "model": _free_text,
        "rationale": _free_text,
        "tool": _free_text,
        "tier": _member(Tier),
        "args": _plain_text,
        "answer": _plain_text,
        "batch": _plain_text,
        "observation": _free_text,
        "repeats": _whole,
        "proposed_at": _plain_text,
        "call_digest": _plain_text,
        "error": _free_text,
        "summary": _free_text,
        "summarized": _whole,
        "prompt": _plain_text,
        "schema_digest": _plain_text,
        "media": _plain_texts,
        "requests": _whole,
        "input_tokens": _whole,
        "output_tokens": _whole,
        "cached_input_tokens": _whole,
        "cache_write_tokens": _whole,
        "reasoning_tokens": _whole,
        "by_model": _plain_text,
        "reasoning": _free_text,
        "llm_seconds": _real,
        "tool_seconds": _real,
        "elapsed": _real,
        "position": _whole,
        "trace": _plain_text,
        "untrusted": _truth,
        "from_untrusted": _texts,
        "digest": _plain_text,
    }
    decisions: dict[str, _Writer] = {
        "kind": _plain_text,
        "round": _whole,
        "call_digest": _plain_text,
        "approved": _truth,
        "by": _free_text,
        "reason": _free_text,
        "batch": _plain_text,
        "observation": _free_text,
        "error": _free_text,
        "tool_seconds": _real,
        "elapsed": _real,
        "args": _plain_text,
        "amended": _texts,
        "untrusted": _truth,
        "digest": _plain_text,
    }
    ends: dict[str, _Writer] = {
        "kind": _plain_text,
        "stop_reason": _member(StopReason),
        "outcome": _member(Outcome),
        "error": _free_text,
        "elapsed": _real,
        "digest": _plain_text,
    }
    return {RoundEntry: rounds, DecisionEntry: decisions, EndEntry: ends}


@functools.cache
def _plan(kind: type[BaseModel], exclude: frozenset[str]) -> tuple[tuple[str, str, _Writer], ...]:
    """Each digested field of `kind` in `json_text`'s order (sorted), with its key as written and its writer."""
    writers = _WRITERS[kind]
    if set(writers) != set(kind.model_fields):  # pragma: no cover - a field added to an entry without a writer
        raise TypeError(f"{kind.__name__}'s fields and the digest's writers for them differ")
    return tuple((name, f"{_ascii(name)}:", writers[name]) for name in sorted(writers) if name not in exclude)


def _head(state: RunCheckpoint) -> str:
    """What `head_digest` digests: `json_text` of the state's JSON dump less its entries and digest (and less
    `same` when it is `None`: a header without a comparator digests as headers did before it was recorded).

    Written part by part where each part holds a value of its field's type; the config's and each tool's
    text are kept for the objects a service's runs share (`_shared_text`)."""
    written = [_whole(state.forked_at), _free_text(state.parent), _free_text(state.run_id), _whole(state.version)]
    same = _free_text(state.same)
    if type(state.config) is not CheckpointConfig or type(state.tools) is not tuple or None in written or same is None:
        left_out: dict[str, Any] = dict.fromkeys(
            ("entries", "digest") if state.same is not None else ("entries", "digest", "same"), True
        )
        if isinstance(state.config, CheckpointConfig) and state.config.unrecorded():
            left_out["config"] = state.config.unrecorded()
        declared = {i: t.unrecorded() for i, t in enumerate(state.tools) if isinstance(t, ToolEntry) and t.unrecorded()}
        if declared:
            left_out["tools"] = declared
        return json_text(state.model_dump(mode="json", exclude=left_out))
    forked_at, parent, run_id, version = written
    tools = ",".join(_shared_text(tool) for tool in state.tools)
    comparator = "" if state.same is None else f'"same":{same},'
    return (
        f'{{"config":{_shared_text(state.config)},"forked_at":{forked_at},"parent":{parent},"run_id":{run_id},'
        f'{comparator}"tools":[{tools}],"version":{version}}}'
    )


_SHARED_TEXTS: dict[int, tuple[BaseModel, str]] = {}
"""`json_text` of recent configs and tool entries, by identity (each kept alive by its entry here)."""
_SHARED_SIZE = 256


def _shared_text(value: BaseModel) -> str:
    """`json_text` of a frozen config or tool entry's JSON dump, worked out once per object while it is recent."""
    found = _SHARED_TEXTS.get(id(value))
    if found is not None and found[0] is value:
        return found[1]
    # A config or tool entry digests without the fields added since, where it holds what a state without them means.
    left_out = value.unrecorded() if isinstance(value, CheckpointConfig | ToolEntry) else None
    text = json_text(value.model_dump(mode="json", exclude=left_out or None))
    if len(_SHARED_TEXTS) >= _SHARED_SIZE:
        _SHARED_TEXTS.clear()
    _SHARED_TEXTS[id(value)] = (value, text)
    return text


def _fast_content(entry: BaseModel, exclude: frozenset[str]) -> str | None:
    """`json_text(entry.model_dump(mode="json", exclude=exclude))`, written field by field where every field
    holds a value of its own type (as every entry the run makes or validates does); `None` otherwise."""
    fields = entry.__dict__
    parts = []
    for name, key, write in _plan(type(entry), exclude):
        written = write(fields[name])
        if written is None:
            return None
        parts.append(key + written)
    return "{" + ",".join(parts) + "}"


def tool_entry(
    name: str, tier: Tier | None, args_type: type[BaseModel], *, trust: Trust | None = None, egress: bool | None = None
) -> ToolEntry:
    """The record of one tool (made once per tool, and kept on its args type: a service runs many runs over
    the same tools, and tools made per request go with their args types). `trust` and `egress`: what the tool
    declares (`None`: not recorded)."""
    key = ("tool entry", name, tier, trust, egress)
    return kept_on(args_type, key, lambda: _tool_entry(name, tier, args_type, trust, egress))


def _tool_entry(
    name: str, tier: Tier | None, args_type: type[BaseModel], trust: Trust | None, egress: bool | None
) -> ToolEntry:
    return ToolEntry(name=name, tier=tier, args=args_schema_digest(args_type), trust=trust, egress=egress)


def args_schema_digest(args_type: type[BaseModel]) -> str:
    """SHA-256 of the args type's JSON schema (sorted keys), kept on the type: what a run's tool set and a
    journal's proposal record of the args' shape."""
    return kept_on(args_type, ("args schema",), lambda: _sha256(json_text(args_type.model_json_schema())))


_WRITERS = _writers()
