"""Program gating: check a whole program of calls from a model before any of it runs.

Some models plan in one go: they emit a list of calls (`[{"tool": ..., "args": {...}}, ...]`)
instead of one call per round. Here the calls are made against declared capabilities:

1. `CapabilitySet.render()` writes the model-facing list from the declarations (sorted,
   stable), so no prompt ever describes a capability by hand;
2. `gate_program` verifies the **whole** program first (an unknown capability, invalid args or
   a missing tier rejects all of it, so nothing is half-applied), then splits it by tier into
   `plan.apply` (may run live under the ceiling) and `plan.propose` (`ProposedAction`
   values for a human, the same type the tiered loop returns, approved with `approve`);
3. `apply_plan` runs `plan.apply` only, in order, past failures, and reports every error.

A program written after the model read untrusted content (`gate_program(..., untrusted=True)`) is
gated as a loop's `ProvenancePolicy` gates a run once untrusted content has entered it: by
default, egress calls and everything above `READ_ONLY` are proposed, not applied.

Capabilities are tools: a `Capability` is a `Tool` (usable in every loop), and a
`CapabilitySet` takes any `Tool`, `@tool` ones included. A capability that can never run
live (external-reversible, irreversible) is propose-only: it is declared without a handler, so no
code path here can run it. Approved proposals run through `execute_approved` with a real
`Tool`. `apply_plan` runs each call through the same admission and invocation as the loop.
"""

from __future__ import annotations

import inspect
import json
import typing
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Never, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentkit._invoke import admit, check_ctx, invoke, missing_tier, refused
from agentkit._proposals import ProposedAction, finite
from agentkit._tiers import AutonomyRung, Tier, max_rung_for, runs_live, tier_choices
from agentkit._tools import (
    NO_CTX,
    ContextTool,
    Tool,
    args_type_of,
    check_args_type,
    check_name,
    declared_tier,
    wants_ctx,
)
from agentkit._trust import ProvenancePolicy, Trust, check_declarations, held_by_policy
from agentkit.errors import AgentkitError, ProgramError, UsageError

__all__ = [
    "ApplyReport",
    "CallResult",
    "Capability",
    "CapabilitySet",
    "Plan",
    "PlannedCall",
    "ProgramCall",
    "ProgramError",
    "ProgramIssue",
    "apply_plan",
    "capability",
    "gate_program",
    "propose_only",
]

Args = TypeVar("Args", bound=BaseModel)
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)

Handler = Callable[[Args], Sequence[R]] | Callable[[Args], Awaitable[Sequence[R]]]
"""What applies a capability's call: a sync or async function returning a batch."""

_PROVENANCE = ProvenancePolicy()
"""The policy a program written after untrusted content is gated by, unless another is given (the loop's default)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Capability(Generic[Args, R_co]):
    """One thing a program may ask for: a name, a description, a tier and typed args; a `Tool`.

    `handler` applies the call; a capability without one is propose-only. A capability whose
    tier can never run live (external-reversible, irreversible) must be propose-only. `trust` and
    `egress` are declared as on a `@tool` (see docs/provenance.md); a capability made from another
    tool (an MCP tool) carries that tool's over (`trust=t.trust, egress=t.egress`).

    Raises:
        UsageError: a missing or non-`Tier` tier, a bad name, a non-pydantic `args_type`, a
            `trust` that is not a `Trust`, an `egress` that is not a bool, or a handler on a
            capability that can never run live.
    """

    name: str
    """The name the model calls it by (`^[a-zA-Z0-9_-]{1,64}$`)."""
    description: str
    """What it does, for the model."""
    tier: Tier
    """How reversible its effect is; there is no default."""
    args_type: type[Args]
    """The pydantic model of its arguments."""
    handler: Handler[Args, R_co] | None = None
    """Applies a call; `None` makes the capability propose-only."""
    trust: Trust = Trust.TRUSTED
    """What its results are: the user's own data, or text a third party can write (see `ProvenancePolicy`)."""
    egress: bool = False
    """It sends data out (an email, an HTTP request, a post, a share, an invite)."""

    def __post_init__(self) -> None:
        check_name(self.name, "capability")
        if declared_tier(self) is None:
            raise UsageError(str(missing_tier(self.name)))
        check_declarations(self.trust, self.egress, "Capability")
        if not (inspect.isclass(self.args_type) and issubclass(self.args_type, BaseModel)):
            raise UsageError(f"capability {self.name!r} needs a pydantic args_type; got {self.args_type!r}")
        if self.handler is not None and wants_ctx(self.handler):
            raise UsageError(
                f"capability {self.name!r}: its handler takes a second parameter (the run's ctx), which a Capability "
                "never passes; make a capability that needs the run's ctx with @tool (apply_plan(plan, ctx=...))"
            )
        if self.handler is not None and max_rung_for(self.tier) is AutonomyRung.ASK:
            raise UsageError(
                f"capability {self.name!r} is Tier.{self.tier.name}, which never runs live, so it cannot have a "
                "handler; declare it propose-only (handler=None) and run approved calls with execute_approved"
            )

    @property
    def propose_only(self) -> bool:
        """Whether the capability has no handler (its calls can only be proposed)."""
        return self.handler is None

    async def call(self, args: Args) -> Sequence[R_co]:
        """Apply the call with the handler (the `Tool` method, so a capability runs anywhere a tool does).

        Raises:
            UsageError: the capability is propose-only; its calls run only through `execute_approved`
                with a real tool.
        """
        if self.handler is None:
            raise UsageError(f"capability {self.name!r} is propose-only: it has no handler to run")
        batch: Any = self.handler(args)
        if inspect.isawaitable(batch):
            batch = await batch
        return typing.cast("Sequence[R_co]", batch)


def propose_only(
    name: str,
    *,
    description: str,
    tier: Tier,
    args_type: type[Args],
    trust: Trust = Trust.TRUSTED,
    egress: bool = False,
) -> Capability[Args, Never]:
    """Declare a capability without a handler: its calls can only ever be proposed.

    Typed as producing no items, so it joins a `CapabilitySet` of any result type.
    """
    return Capability(name=name, description=description, tier=tier, args_type=args_type, trust=trust, egress=egress)


def capability(
    *,
    tier: Tier,
    name: str | None = None,
    description: str | None = None,
    trust: Trust = Trust.TRUSTED,
    egress: bool = False,
) -> Callable[[Handler[Args, R]], Capability[Args, R]]:
    """Turn a typed function `(args: Args) -> Sequence[R]` (sync or async) into a `Capability`.

    Like `@tool`: the name comes from the function, the description from its docstring, the
    args type from its first parameter's annotation; `tier` is required, and `trust` and
    `egress` are declared as on a `@tool`.
    """
    if not isinstance(tier, Tier):
        raise UsageError(f"@capability(tier=...) needs a Tier, got {tier!r}; choose one of {tier_choices()}")
    check_declarations(trust, egress, "@capability")

    def wrap(fn: Handler[Args, R]) -> Capability[Args, R]:
        fn_name = getattr(fn, "__name__", "capability")
        return Capability(
            name=name or fn_name,
            description=description or inspect.cleandoc(fn.__doc__ or "") or fn_name,
            tier=tier,
            args_type=args_type_of(fn, "@capability"),
            handler=fn,
            trust=trust,
            egress=egress,
        )

    return wrap


class CapabilitySet(Generic[R]):
    """The capabilities a program may use, validated once and rendered for the model.

    A capability is any `Tool`: a `Capability`, or a `@tool` function (one that takes the
    run's ctx too; `apply_plan` then needs `ctx=`).

    Raises:
        UsageError: no capabilities, two with the same name, something that is not a tool, or an
            args type that leaves a field out of its dump (an approval could not cover the call).
    """

    def __init__(self, *capabilities: Tool[Any, R] | ContextTool[Any, R, Any]) -> None:
        self._by_name: dict[str, Tool[Any, R] | ContextTool[Any, R, Any]] = {}
        for declared in capabilities:
            if not callable(getattr(declared, "call", None)):
                raise UsageError(f"{declared!r} is not a Tool; declare it with Capability(...), @capability or @tool")
            check_name(declared.name, "capability")
            if declared.name in self._by_name:
                raise UsageError(f"two capabilities are named {declared.name!r}; names must be unique in a set")
            if inspect.isclass(declared.args_type) and issubclass(declared.args_type, BaseModel):
                check_args_type(declared.name, declared.args_type)
            self._by_name[declared.name] = declared
        if not self._by_name:
            raise UsageError("a CapabilitySet needs at least one Capability")

    def __iter__(self) -> Iterator[Tool[Any, R] | ContextTool[Any, R, Any]]:
        return iter(self._by_name.values())

    def __len__(self) -> int:
        return len(self._by_name)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def get(self, name: str) -> Tool[Any, R] | ContextTool[Any, R, Any] | None:
        """The capability called `name`, if there is one."""
        return self._by_name.get(name)

    @property
    def names(self) -> list[str]:
        """The capability names, sorted."""
        return sorted(self._by_name)

    def render(
        self,
        *,
        ceiling: Tier | None = None,
        untrusted: bool = False,
        provenance: ProvenancePolicy | None = _PROVENANCE,
    ) -> str:
        """The model-facing list of capabilities, sorted by name, byte-stable across calls.

        Each entry gives the name, the tier, the description and the args' JSON schema (compact,
        keys sorted). With `ceiling`, each entry also says whether its calls run at once or
        wait for approval, so the model can plan for it; pass the `untrusted` and `provenance`
        the program will be gated with (`gate_program`), so that it says what that gate does.
        """
        _check_provenance(untrusted, provenance)
        entries = []
        for name in self.names:
            declared = self._by_name[name]
            declared_or_none = declared_tier(declared)
            # Tier.READ_ONLY is 0, so only an explicit None check tells "no tier" from "read-only".
            tier = Tier.IRREVERSIBLE if declared_or_none is None else declared_or_none
            when = ""
            if ceiling is not None:
                live = _runs_live(declared, tier, ceiling, untrusted, provenance)
                when = "; runs at once" if live else "; needs human approval"
            description = " ".join(declared.description.split())
            schema = json.dumps(
                _without_titles(declared.args_type.model_json_schema()), sort_keys=True, separators=(",", ":")
            )
            entries.append(f"- {name} ({tier.name.lower()}{when}): {description}\n  args: {schema}")
        return "\n".join(entries)


def _check_provenance(untrusted: object, provenance: object) -> None:
    if not isinstance(untrusted, bool):
        raise UsageError(f"untrusted must be True or False, got {untrusted!r}")
    if provenance is not None and not isinstance(provenance, ProvenancePolicy):
        raise UsageError(f"provenance must be a ProvenancePolicy or None, got {provenance!r}")


def _runs_live(
    declared: object, tier: Tier, ceiling: Tier, untrusted: bool, provenance: ProvenancePolicy | None
) -> bool:
    """Whether a call may run live: its tier under `ceiling`, and not held by `provenance` (the loop's one rule)."""
    return runs_live(tier, ceiling) and not held_by_policy(declared, tier, provenance, untrusted)


def _without_titles(schema: Any) -> Any:
    """Drop pydantic's `title` keywords (noise for the model); keep fields that are named title."""
    if isinstance(schema, list):
        return [_without_titles(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    cleaned: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in ("properties", "$defs") and isinstance(value, dict):
            cleaned[key] = {name: _without_titles(sub) for name, sub in value.items()}
        else:
            cleaned[key] = _without_titles(value)
    return cleaned


class ProgramCall(BaseModel):
    """One call of a program, as the model emits it: `{"tool": name, "args": {...}}`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool: str = Field(description="The capability to call.")
    args: dict[str, Any] = Field(default_factory=dict, description="The capability's arguments.")
    rationale: str = Field(default="", description="Why this call.")


@dataclass(frozen=True, kw_only=True, slots=True)
class ProgramIssue:
    """Why one call of a program was not acceptable."""

    index: int
    """The call's position in the program, from 0."""
    tool_name: str | None
    """The capability it named, when it named one."""
    message: str
    """What is wrong and how to fix it (suitable to show the model)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PlannedCall:
    """A verified call that may run live."""

    index: int
    """The call's position in the program, from 0."""
    tool_name: str
    """The capability to call."""
    tier: Tier
    """The capability's tier when the program was gated."""
    args: BaseModel
    """The validated arguments."""
    rationale: str = ""
    """The model's stated reason."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Plan(Generic[R]):
    """A gated program: what may run live, what needs a human, or why it was rejected."""

    apply: tuple[PlannedCall, ...] = ()
    """Calls that may run live, in program order (empty when rejected)."""
    propose: tuple[ProposedAction[BaseModel], ...] = ()
    """Calls that need approval, in program order (empty when rejected)."""
    issues: tuple[ProgramIssue, ...] = ()
    """Every problem found; any problem rejects the whole program."""
    ceiling: Tier
    """The autonomy ceiling the program was gated under."""
    untrusted: bool = False
    """The program was written after the model read untrusted content: `provenance` holds calls too."""
    provenance: ProvenancePolicy | None = _PROVENANCE
    """What still runs live when `untrusted` (`None`: tiers alone)."""
    run_id: str = ""
    """Stamped on the proposals."""
    capabilities: CapabilitySet[R] = field(repr=False, compare=False)
    """The set the program was verified against (`apply_plan` runs its handlers)."""

    @property
    def rejected(self) -> bool:
        """Whether the program was rejected as a whole."""
        return bool(self.issues)

    def error(self) -> ProgramError | None:
        """The rejection as one error listing every issue, or `None`."""
        if not self.issues:
            return None
        lines = "; ".join(f"call {issue.index}: {issue.message}" for issue in self.issues)
        return ProgramError(f"program rejected, nothing applied: {lines}", issues=self.issues)

    def raise_for_error(self) -> Plan[R]:
        """Raise the rejection as a `ProgramError`; otherwise return the plan itself."""
        error = self.error()
        if error is not None:
            raise error
        return self


def gate_program(
    calls: Sequence[ProgramCall | Mapping[str, Any]],
    ceiling: Tier,
    *,
    capabilities: CapabilitySet[R],
    untrusted: bool = False,
    provenance: ProvenancePolicy | None = _PROVENANCE,
    run_id: str | None = None,
    round: int = 1,
) -> Plan[R]:
    """Verify a whole program, then split it by tier into calls to apply and calls to propose.

    Every call is checked before any is sorted: an unknown capability, args that do not validate,
    a capability with no tier (or one no call may be admitted to), or a proposal that could not be
    stored and approved exactly (args holding NaN or Infinity, or changed by a JSON round trip)
    rejects the **whole** program (`plan.issues` lists every problem; `plan.apply` and
    `plan.propose` are empty). A verified call goes to `plan.apply` when its tier is at or below
    `ceiling` and may auto-run at all, and `provenance` does not hold it; otherwise it becomes a
    `ProposedAction` in `plan.propose`.

    Args:
        calls: The program: `ProgramCall` values, or mappings of the same shape.
        ceiling: The highest tier allowed to run live (external-reversible and irreversible never do).
        capabilities: The declared capabilities.
        untrusted: The model had read untrusted content (a web page, an email, a result of a tool
            declared `Trust.UNTRUSTED`) when it wrote the program. Then `provenance` holds calls as
            a loop's policy does once untrusted content has entered its run: by default, egress
            calls and everything above `READ_ONLY` are proposed.
        provenance: What still runs live when `untrusted` (`LoopConfig.provenance`'s policy);
            `None` gates by tiers alone.
        run_id: Stamped on the proposals; a fresh id when omitted.
        round: Stamped on the proposals (the model turn that produced the program).

    Raises:
        UsageError: `ceiling` is not a `Tier`, `untrusted` not a bool, or `provenance` not a
            `ProvenancePolicy` or `None`.
    """
    if not isinstance(ceiling, Tier):
        raise UsageError(f"ceiling must be a Tier, got {ceiling!r}; choose one of {tier_choices()}")
    _check_provenance(untrusted, provenance)
    run_id = run_id or uuid.uuid4().hex
    apply: list[PlannedCall] = []
    propose: list[ProposedAction[Any]] = []
    issues: list[ProgramIssue] = []
    for index, raw in enumerate(calls):
        checked = _verify(index, raw, capabilities)
        if isinstance(checked, ProgramIssue):
            issues.append(checked)
        elif _runs_live(capabilities.get(checked.tool_name), checked.tier, ceiling, untrusted, provenance):
            apply.append(checked)
        else:
            proposal = _proposal(checked, run_id=run_id, round=round)
            if isinstance(proposal, ProgramIssue):
                issues.append(proposal)
            else:
                propose.append(proposal)
    if issues:
        apply, propose = [], []
    return Plan(
        apply=tuple(apply),
        propose=tuple(propose),
        issues=tuple(issues),
        ceiling=ceiling,
        untrusted=untrusted,
        provenance=provenance,
        run_id=run_id,
        capabilities=capabilities,
    )


def _verify(index: int, raw: object, capabilities: CapabilitySet[Any]) -> PlannedCall | ProgramIssue:
    try:
        call = raw if isinstance(raw, ProgramCall) else ProgramCall.model_validate(raw)
    except ValidationError as invalid:
        message = f'not a call of the shape {{"tool": name, "args": {{...}}}}: {_errors(invalid)}'
        return ProgramIssue(index=index, tool_name=None, message=message)
    declared = capabilities.get(call.tool)
    if declared is None:
        message = f"unknown capability {call.tool!r}; choose one of {capabilities.names}"
        return ProgramIssue(index=index, tool_name=call.tool, message=message)
    try:
        # What apply_plan and approval would refuse (no tier, a renamed tool, an args type that
        # leaves a field out of its dump) is found now, before any call of the program runs.
        tier = admit(declared, name=call.tool)
    except AgentkitError as refusal:
        return ProgramIssue(index=index, tool_name=call.tool, message=str(refusal))
    try:
        # An argument the capability does not declare would be dropped silently; refuse it, unless
        # the args model says for itself what to do with extra data.
        extra = None if "extra" in declared.args_type.model_config else "forbid"
        args = declared.args_type.model_validate(call.args, extra=extra)
    except ValidationError as invalid:
        return ProgramIssue(index=index, tool_name=call.tool, message=f"invalid args: {_errors(invalid)}")
    return PlannedCall(index=index, tool_name=call.tool, tier=tier, args=args, rationale=call.rationale)


def _proposal(call: PlannedCall, *, run_id: str, round: int) -> ProposedAction[Any] | ProgramIssue:
    """The call as a proposal, or why it cannot be one: a proposal is stored as JSON and approved by
    its digest, so its args must survive the trip exactly."""
    try:
        if not finite(call.args.model_dump(mode="json")):
            raise UsageError(
                "its args hold NaN or Infinity, which a stored proposal cannot carry (JSON has no such number); "
                "use a finite number"
            )
        # As the loop builds its proposals: typed by the args' own model, so they dump (and store) whole.
        return ProposedAction[Any].create(
            tool_name=call.tool_name,
            tier=call.tier,
            args=call.args,
            rationale=call.rationale,
            round=round,
            run_id=run_id,
        )
    except ValueError as unfit:  # UsageError from the round-trip check, or a serializer that fails
        return ProgramIssue(index=call.index, tool_name=call.tool_name, message=f"cannot be proposed: {unfit}")


def _errors(invalid: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(part) for part in error['loc']) or '(root)'}: {error['msg']}" for error in invalid.errors()
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class CallResult(Generic[R]):
    """What became of one applied call."""

    call: PlannedCall
    """The call."""
    batch: Sequence[R] = ()
    """What its handler returned (empty on error)."""
    error: AgentkitError | None = None
    """Why it did not run or failed, if it did not succeed."""

    @property
    def ok(self) -> bool:
        """Whether the call ran and succeeded."""
        return self.error is None


@dataclass(frozen=True, kw_only=True, slots=True)
class ApplyReport(Generic[R]):
    """What `apply_plan` did: one result per call of `plan.apply`, and every error."""

    results: tuple[CallResult[R], ...] = ()
    """One per call of `plan.apply`, in order."""
    rejection: ProgramError | None = None
    """Set when the plan was rejected (then nothing ran)."""

    @property
    def items(self) -> list[R]:
        """Every successful call's batch, concatenated in order."""
        return [item for result in self.results for item in result.batch]

    @property
    def errors(self) -> list[AgentkitError]:
        """Every error: the rejection, or each failed call's, in order."""
        found: list[AgentkitError] = [self.rejection] if self.rejection is not None else []
        return found + [result.error for result in self.results if result.error is not None]

    @property
    def ok(self) -> bool:
        """Whether every call ran and succeeded (and the plan was not rejected)."""
        return not self.errors


async def apply_plan(plan: Plan[R], *, ctx: object = NO_CTX) -> ApplyReport[R]:
    """Run `plan.apply` in order with each capability's handler; never `plan.propose`.

    A failing call does not stop the rest; each call's outcome is in the report. A call is re-
    checked before it runs, so a hand-made or altered plan cannot run more than its tiers allow:
    a call that is unknown to the set, no longer runs live under `plan.ceiling`, is held by
    `plan.provenance` (a plan gated `untrusted`), is refused admission (its capability renamed or
    its tier removed), has args of the wrong type or has no handler is an error, never run and
    never skipped silently.

    Args:
        plan: From `gate_program`.
        ctx: The run's ctx, for capabilities that take one (`@tool` functions with a ctx
            parameter); the others ignore it. Its type is checked at run time only here.

    Raises:
        UsageError: a capability that `plan.apply` calls takes the run's ctx and no `ctx` was
            given (a wiring mistake); raised before any call runs.
    """
    rejection = plan.error()
    if rejection is not None:
        return ApplyReport(rejection=rejection)
    for call in plan.apply:
        declared = plan.capabilities.get(call.tool_name)
        if declared is not None:
            check_ctx(declared, ctx)
    results = [await _apply_one(call, plan, ctx) for call in plan.apply]
    return ApplyReport(results=tuple(results))


async def _apply_one(call: PlannedCall, plan: Plan[R], ctx: object) -> CallResult[R]:
    name = call.tool_name
    declared = plan.capabilities.get(name)
    try:
        if declared is None:
            raise refused(name, "unknown capability: it is not in the plan's set")
        tier = admit(declared, name=name)
        if not runs_live(tier, plan.ceiling):
            raise refused(name, f"it is Tier.{tier.name} and may not run live under Tier.{plan.ceiling.name}")
        if held_by_policy(declared, tier, plan.provenance, plan.untrusted):
            raise refused(name, "the program was written after untrusted content and the provenance policy holds it")
        if not isinstance(call.args, declared.args_type):
            raise refused(name, f"its args are {type(call.args).__name__}, not {declared.args_type.__name__}")
        if isinstance(declared, Capability) and declared.handler is None:
            raise refused(name, "the capability has no handler (it is propose-only); propose the call instead")
    except AgentkitError as refusal:  # a refusal, or what admit raises (a renamed tool): this call's error
        return CallResult(call=call, error=refusal)
    outcome = await invoke(declared, call.args, ctx=ctx)
    failure = outcome.failure()
    if failure is not None:
        return CallResult(call=call, error=failure)
    return CallResult(call=call, batch=outcome.batch)
