"""The executor-verifier pair: draft, review, revise, within a small round ceiling.

`pair` is built from the single-shot atom: the executor is an `OnceAgent` asked once per
round through `generate_structured`; between rounds a pluggable `Verifier` approves the draft
or rejects it with feedback, which the executor sees in `RoundInfo.feedback`. The guarantees:

* the run always ends on an executor turn; the result is always an executor draft, and there
  is no field that could carry the verifier's text;
* the final permitted round's draft is not reviewed (nothing could act on the review);
* a revision materially unchanged despite feedback ends STALEMATE with that revision;
* a verifier failure discards the unverified draft (ERROR, never APPLIED).

A verifier grounded in rules or in execution (tests, a schema, a checker) is preferred. An
ungrounded critic played by the same model can talk a correct draft into a worse one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from pydantic import BaseModel, Field

from agentkit._agent import RoundInfo
from agentkit._degeneration import SameFunc, same_args
from agentkit._events import RoundStarted
from agentkit._invoke import describe
from agentkit._observe import Observer, ObserverArg, observers_of
from agentkit._once import OnceAgent, check_schema, is_material, no_value, once_as
from agentkit._outcome import Outcome, StopReason
from agentkit._results import RunEnding
from agentkit._session import Reply, RunSession, executor_failed, failure_reason
from agentkit._structured import RetryPolicy, StructuredCaller
from agentkit._usage import Usage
from agentkit.errors import AgentkitError, UsageError, VerifierError

__all__ = [
    "Critique",
    "LLMVerifier",
    "PairConfig",
    "PairResult",
    "Review",
    "RulesVerifier",
    "Verifier",
    "pair",
]

Ctx = TypeVar("Ctx")
V = TypeVar("V", bound=BaseModel)
V_co = TypeVar("V_co", bound=BaseModel, covariant=True)
V_contra = TypeVar("V_contra", bound=BaseModel, contravariant=True)

DEFAULT_PAIR_ROUNDS = 2


@dataclass(frozen=True, kw_only=True, slots=True)
class Review:
    """A verifier's judgement of one draft."""

    approved: bool
    """The draft may be returned as it is."""
    feedback: str = ""
    """What is wrong and how to fix it; shown to the executor, never returned to the caller."""
    usage: Usage = field(default_factory=Usage)
    """Model usage of the review (zero for a rules verifier); summed into the pair's usage."""


class Verifier(Protocol[V_contra]):
    """Judges an executor's draft: approve it, or reject it with feedback.

    A verifier that raises fails the run (`VERIFIER_ERROR`; `THROTTLED` for a `Throttled`,
    `MAX_TOKENS` for a `Truncated`)
    and the unverified draft is discarded; `UsageError` propagates as a wiring mistake.
    """

    async def review(self, draft: V_contra) -> Review:
        """Judge `draft`."""
        ...


class RulesVerifier(Generic[V]):
    """A verifier from a plain function `(draft) -> (ok, feedback)`; no model involved.

    Example:
        `RulesVerifier(lambda a: (a.total == sum(a.parts), "total must equal the sum of parts"))`
    """

    def __init__(self, check: Callable[[V], tuple[bool, str]]) -> None:
        self.check = check
        """The rule; its feedback is ignored when it approves."""

    async def review(self, draft: V) -> Review:
        """Apply the rule to `draft`."""
        ok, feedback = self.check(draft)
        return Review(approved=bool(ok), feedback="" if ok else feedback)


class Critique(BaseModel):
    """What an `LLMVerifier`'s critic replies."""

    feedback: str = Field(
        default="", description="What is wrong with the draft and how to fix it; empty when approving."
    )
    approve: bool = Field(description="true when the draft is correct and complete as it stands.")


class LLMVerifier(Generic[V]):
    """A verifier played by a model: `run_once` with a critic agent that renders the draft.

    The critic is an `OnceAgent` whose context is the draft; bind anything else it needs (the
    task, the sources to check against) when constructing it. Ground it: a critic that sees only
    the draft, played by the executor's own model, can make results worse. Prefer a
    `RulesVerifier` or an execution-based check where one exists.

    Its calls are reported to `observer` as runs of their own, their model calls under the role
    `"verifier"` (or the critic's `prompt_type`).
    """

    def __init__(
        self,
        caller: StructuredCaller,
        critic: OnceAgent[V],
        *,
        retry: RetryPolicy | None = None,
        observer: ObserverArg = None,
    ) -> None:
        self.caller = caller
        self.critic = critic
        self.retry = retry
        self.observer = observer

    async def review(self, draft: V) -> Review:
        """Ask the critic about `draft`.

        Raises:
            AgentkitError: the critic's call failed; the error's `usage` holds what it spent.
        """
        result = await once_as(
            "verifier", self.caller, self.critic, draft, schema=Critique, observer=self.observer, retry=self.retry
        )
        if result.value is None:
            assert result.error is not None
            raise result.error
        return Review(approved=result.value.approve, feedback=result.value.feedback, usage=result.usage)


@dataclass(frozen=True, kw_only=True, slots=True)
class PairConfig:
    """The ceiling and retry policy of a `pair` run."""

    max_rounds: int = DEFAULT_PAIR_ROUNDS
    """Executor turns at most (draft plus revisions); at least 2, since one round is a single shot."""
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    """Retry and fallback of each executor call (an `LLMVerifier` has its own)."""

    def __post_init__(self) -> None:
        if isinstance(self.max_rounds, bool) or not isinstance(self.max_rounds, int) or self.max_rounds < 2:
            raise UsageError(
                f"PairConfig.max_rounds must be an int >= 2 (a draft and at least one revision); got "
                f"{self.max_rounds!r}; for a single call use run_once"
            )


@dataclass(frozen=True, kw_only=True, slots=True)
class PairResult(RunEnding, Generic[V_co]):
    """The ending of `pair`: always returned, never raised; `value` is always an executor draft.

    `outcome` is APPLIED (or SILENT for a non-material draft), STALEMATE, or ERROR;
    `stop_reason` is `VERIFIER_APPROVED`, `ROUND_CEILING` (the last draft, unreviewed),
    `DEGENERATION`, `LLM_ERROR`, `VERIFIER_ERROR`, `THROTTLED` or `MAX_TOKENS` (the
    executor's or an `LLMVerifier`'s reply was cut off by the token limit). `usage` sums the
    executor's calls and the verifier's reviews; `rounds` counts executor turns.
    """

    value: V_co | None
    """The executor's last draft; `None` exactly when `outcome` is `Outcome.ERROR`."""
    reviews: int = 0
    """Verifier passes made (failed ones included)."""

    def unwrap(self) -> V_co:
        """The last draft, typed without `None`; raises `error` when the run ended in error.

        A draft is returned whether or not it was approved: check `approved` for that.
        """
        if self.value is None:
            raise no_value(self)
        return self.value

    @property
    def approved(self) -> bool:
        """The verifier approved `value` (a `ROUND_CEILING` draft was never reviewed)."""
        return self.stop_reason is StopReason.VERIFIER_APPROVED


def _verifier_failure(raised: Exception, verifier: object) -> AgentkitError:
    if isinstance(raised, AgentkitError):
        return raised
    wrapped = VerifierError(f"verifier {type(verifier).__name__} failed: {describe(raised)}")
    wrapped.__cause__ = raised
    return wrapped


async def pair(
    caller: StructuredCaller,
    executor: OnceAgent[Ctx],
    verifier: Verifier[V],
    ctx: Ctx,
    config: PairConfig | None = None,
    *,
    schema: type[V],
    same: SameFunc[V] | None = None,
    observer: ObserverArg = None,
) -> PairResult[V]:
    """Draft, review, revise: the executor drafts, the verifier gates, the executor revises.

    Each round the executor renders from `RoundInfo` (`feedback` and `previous` are set on
    revisions) and emits a `schema` value. A draft before the last round is reviewed: approved,
    the run ends `VERIFIER_APPROVED`; rejected, the executor revises. The last round's draft is
    returned unreviewed (`ROUND_CEILING`). Materiality (`is_material`) picks APPLIED or SILENT.

    Args:
        caller: The structured-call seam for the executor.
        executor: Drafts and revises.
        verifier: Approves or rejects each draft but the last.
        ctx: The caller's data for `executor.render`.
        config: Round ceiling (default 2) and retry; `PairConfig()` when omitted.
        schema: The pydantic model of the draft; the result's `value` is one.
        same: Whether two drafts are materially the same (default: equal values); a revision
            materially the same as an earlier draft ends the run STALEMATE.
        observer: One observer, several, or none (the executor's calls; see `LLMVerifier`).

    Raises:
        UsageError: `schema` is not a pydantic model, or another wiring mistake.
    """
    check_schema(schema, "pair")
    config = config or PairConfig()
    run = _PairRun(executor, schema, config, observers_of(observer), caller)
    async with run.session:
        return await _rounds(run, caller, verifier, ctx, same or same_args)


async def _rounds(
    run: _PairRun[Ctx, V], caller: StructuredCaller, verifier: Verifier[V], ctx: Ctx, compare: SameFunc[V]
) -> PairResult[V]:
    config = run.config
    drafts: list[V] = []
    feedback: str | None = None
    for round in range(1, config.max_rounds + 1):
        info = RoundInfo(
            round=round,
            max_rounds=config.max_rounds,
            is_final_round=round == config.max_rounds,
            feedback=feedback,
            previous=drafts[-1] if drafts else None,
        )
        reply = await run.draft(caller, ctx, info)
        if reply.value is None:
            assert reply.stop_reason is not None
            return run.finish(None, Outcome.ERROR, reply.stop_reason, reply.error)
        draft = reply.value
        try:
            repeated = any(compare(earlier, draft) for earlier in drafts)
        except Exception as raised:
            error = executor_failed("repeat comparator (same=)", raised)
            return run.finish(None, Outcome.ERROR, StopReason.EXECUTOR_ERROR, error)
        if repeated:
            return run.finish(draft, Outcome.STALEMATE, StopReason.DEGENERATION)
        drafts.append(draft)
        if info.is_final_round:
            return run.finish(draft, None, StopReason.ROUND_CEILING)
        review = await run.review(verifier, draft)
        if isinstance(review, AgentkitError):
            reason = failure_reason(review)
            reason = StopReason.VERIFIER_ERROR if reason is StopReason.LLM_ERROR else reason
            return run.finish(None, Outcome.ERROR, reason, review)
        if review.approved:
            return run.finish(draft, None, StopReason.VERIFIER_APPROVED)
        feedback = review.feedback
    raise AssertionError("unreachable: the final round always returns")


class _PairRun(Generic[Ctx, V]):
    """The state of one `pair` run: its session, usage and counts."""

    def __init__(
        self,
        executor: OnceAgent[Ctx],
        schema: type[V],
        config: PairConfig,
        observers: tuple[Observer, ...],
        caller: StructuredCaller,
    ) -> None:
        self.executor, self.schema, self.config = executor, schema, config
        role = executor.role()
        self.session = RunSession(observers, agent=executor, role=role, max_rounds=config.max_rounds, caller=caller)
        self.usage = Usage()
        self.rounds = 0
        self.reviews = 0

    async def draft(self, caller: StructuredCaller, ctx: Ctx, info: RoundInfo) -> Reply[V]:
        self.rounds = info.round
        self.session.emit(RoundStarted(run_id=self.session.run_id, info=info))
        render = self.executor.render
        reply = await self.session.ask(
            caller, lambda: render(ctx, info), self.schema, self.config.retry, round=info.round
        )
        self.usage += reply.usage
        return reply

    async def review(self, verifier: Verifier[V], draft: V) -> Review | AgentkitError:
        self.reviews += 1
        try:
            review = await verifier.review(draft)
        except UsageError:
            raise
        except Exception as raised:
            error = _verifier_failure(raised, verifier)
            self.usage += error.usage or Usage()
            return error
        if not isinstance(review, Review):
            raise UsageError(
                f"verifier {type(verifier).__name__}.review() returned a {type(review).__name__}, not a Review; "
                "return Review(approved=..., feedback=...)"
            )
        self.usage += review.usage
        return review

    def finish(
        self, value: V | None, outcome: Outcome | None, reason: StopReason, error: AgentkitError | None = None
    ) -> PairResult[V]:
        if outcome is None:
            outcome = Outcome.APPLIED if is_material(value) else Outcome.SILENT
        result = PairResult(
            value=value,
            outcome=outcome,
            stop_reason=reason,
            error=error,
            usage=self.usage,
            rounds=self.rounds,
            reviews=self.reviews,
            run_id=self.session.run_id,
        )
        return self.session.finish(result)
