"""Approval: the one door through which a call above the autonomy ceiling runs.

A human approves a `ProposedAction` with `approve`; the `Approval` binds that person to the
exact call (the proposal's digest of tool name and canonical args). `execute_approved` runs the
call once and only once, and only if the tool, its tier and the args are still exactly what was
approved. `reject` records the other answer.

Example:
    >>> approval = approve(result.proposed[0], approved_by="ops@example.com")
    >>> batch = await execute_approved(approval, delete_file)
"""

from __future__ import annotations

import inspect
import json
import threading
import uuid
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar, overload

from pydantic import BaseModel

from agentkit._invoke import admit, check_ctx, invoke, missing_tier
from agentkit._observe import ApprovedCall, ObserverArg, ToolInvocation, observers_of, wrapping
from agentkit._proposals import ProposedAction, call_digest, canonical_json, validate_args
from agentkit._tiers import Tier
from agentkit._tools import NO_CTX, AnyTool, ContextTool, Tool
from agentkit.errors import ApprovalError, UsageError

__all__ = ["Amendment", "Approval", "ApprovalError", "Rejection", "amended", "approve", "execute_approved", "reject"]

Args = TypeVar("Args", bound=BaseModel)
R = TypeVar("R")
Ctx = TypeVar("Ctx")


class _Once:
    """The single-use state an `Approval` carries; claiming it is atomic across tasks and threads."""

    __slots__ = ("__weakref__", "_claimed", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._claimed = False

    def claim(self) -> bool:
        """Mark used; `True` only for the first caller."""
        with self._lock:
            if self._claimed:
                return False
            self._claimed = True
            return True

    @property
    def claimed(self) -> bool:
        return self._claimed

    def __copy__(self) -> _Once:
        return self  # every copy of an approval shares its one use

    def __deepcopy__(self, memo: dict[int, object]) -> _Once:
        return self


_ISSUED: weakref.WeakKeyDictionary[_Once, str] = weakref.WeakKeyDictionary()
"""The single-use states `approve` issued, each with the digest it was issued for."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Amendment(Generic[Args]):
    """How an approver changed a proposed call before approving it: the call that was proposed, and what changed.

    The approved call (`Approval.proposal`) is the amended one, with its own digest; the original
    never runs.
    """

    original: ProposedAction[Args]
    """The call as the executor proposed it."""
    amended_by: str
    """Who changed it (the approver)."""
    fields: tuple[str, ...]
    """The args fields whose values changed, sorted."""

    @property
    def original_digest(self) -> str:
        """The digest of the call as proposed (the pending proposal the decision settles)."""
        return self.original.digest


@dataclass(frozen=True, kw_only=True, slots=True)
class Approval(Generic[Args]):
    """A person's consent to run exactly one proposed call, exactly once.

    Made by `approve`, and only by it: `execute_approved` refuses an approval built by hand,
    one whose single-use state was replaced, and one pointed at another call than the one approved.
    Copies made with `dataclasses.replace` share the single-use state, so no copy of an approval
    can run a second time.
    """

    proposal: ProposedAction[Args]
    """The proposal that was approved."""
    approved_by: str
    """Who approved it."""
    digest: str
    """The proposal's digest when it was approved: the call that may run."""
    approved_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    """When it was approved (UTC)."""
    note: str = ""
    """The approver's comment."""
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    """A unique id for this approval."""
    amendment: Amendment[Args] | None = None
    """Set when the approver changed the args: `proposal` is then the amended call, and this says
    what was proposed and which fields changed."""
    _once: _Once = field(default_factory=_Once, repr=False, compare=False)

    @property
    def executed(self) -> bool:
        """Whether `execute_approved` has already used this approval (successfully or not)."""
        return self._once.claimed


@dataclass(frozen=True, kw_only=True, slots=True)
class Rejection(Generic[Args]):
    """A person's refusal of a proposed call; nothing runs."""

    proposal: ProposedAction[Args]
    """The proposal that was rejected."""
    rejected_by: str
    """Who rejected it."""
    digest: str
    """The proposal's digest when it was rejected."""
    reason: str = ""
    """Why, for the record (and for the executor, if the caller tells it)."""
    rejected_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    """When it was rejected (UTC)."""


def approve(
    proposal: ProposedAction[Args],
    *,
    approved_by: str,
    note: str = "",
    args: Args | Mapping[str, Any] | None = None,
) -> Approval[Args]:
    """Approve exactly this proposed call, or the call with the args an approver amended.

    Args:
        proposal: A proposal from a tiered loop or a gated program.
        approved_by: Who approves (a person or an account; must not be empty).
        note: A comment for the record.
        args: Amended args: a whole value of the proposal's args type, or a mapping of the fields to
            change (merged over the proposed args). The approved call is then the amended one, with
            its own digest; `approval.amendment` keeps the original and the fields that changed.
            The tool, and so the tier, stay the proposal's. Args equal to the proposed ones approve
            the call as proposed.

    Raises:
        UsageError: `approved_by` is empty.
        ApprovalError: the proposal's digest no longer matches its tool name and args (it was
            altered after it was proposed), so there is no exact call to approve; or the amended
            args name a field the args type lacks, or do not validate as it. Nothing is approved.
    """
    _check_person(approved_by, "approved_by")
    _check_intact(proposal)
    amendment = None
    if args is not None:
        proposal, amendment = amended(proposal, args, amended_by=approved_by)
    approval = Approval(
        proposal=proposal, approved_by=approved_by, digest=proposal.digest, note=note, amendment=amendment
    )
    _ISSUED[approval._once] = approval.digest
    return approval


def amended(
    proposal: ProposedAction[Args], args: BaseModel | Mapping[str, Any], *, amended_by: str
) -> tuple[ProposedAction[Args], Amendment[Args] | None]:
    """The proposal with amended args (its own digest) and the record of the change; `None`: nothing changed.

    Raises:
        ApprovalError: `args` is of another type than the proposal's args, names a field that type
            lacks, or does not validate as it (the error names the fields).
    """
    args_type = type(proposal.args)
    data = amended_data(proposal.tool_name, args_type, proposal.args.model_dump(mode="json"), args)
    try:
        value = validate_args(args_type, json.dumps(data, ensure_ascii=False))
    except ValueError as invalid:
        raise ApprovalError(
            f"the amended args of the call to {proposal.tool_name!r} do not validate as {args_type.__name__}; "
            f"nothing was approved: {invalid}",
            tool_name=proposal.tool_name,
        ) from invalid
    fields = changed_fields(proposal.args, value)
    if not fields:
        return proposal, None
    try:
        changed = ProposedAction.create(
            tool_name=proposal.tool_name,
            tier=proposal.tier,
            args=value,
            rationale=proposal.rationale,
            round=proposal.round,
            run_id=proposal.run_id,
            evidence=proposal.evidence,
        )
    except UsageError as lossy:
        raise ApprovalError(str(lossy), tool_name=proposal.tool_name) from lossy
    changed = changed.model_copy(update={"created_at": proposal.created_at})
    return changed, Amendment(original=proposal, amended_by=amended_by, fields=fields)


def amended_data(
    tool_name: str, args_type: type[BaseModel], proposed: Mapping[str, Any], args: BaseModel | Mapping[str, Any]
) -> dict[str, Any]:
    """The amended args as JSON data: a whole value of `args_type`, or `proposed` with the given fields replaced.

    Raises:
        ApprovalError: a value of another type, or a field `args_type` lacks (validation would drop it
            silently, and the approver would approve a call other than the one they wrote).
    """
    if isinstance(args, BaseModel):
        if type(args) is not args_type:
            raise ApprovalError(
                f"the amended args of the call to {tool_name!r} are a {type(args).__name__}, not the tool's "
                f"{args_type.__name__}; nothing was approved",
                tool_name=tool_name,
            )
        return args.model_dump(mode="json")
    if not isinstance(args, Mapping):
        raise ApprovalError(
            f"amended args are a {args_type.__name__} or a mapping of its fields; got {type(args).__name__}. "
            "Nothing was approved",
            tool_name=tool_name,
        )
    unknown = sorted(str(name) for name in args if name not in args_type.model_fields)
    if unknown:
        raise ApprovalError(
            f"the amended args of the call to {tool_name!r} name {', '.join(map(repr, unknown))}, which "
            f"{args_type.__name__} does not declare (its fields: {', '.join(sorted(args_type.model_fields))}); "
            "nothing was approved",
            tool_name=tool_name,
        )
    return {**proposed, **args}


def changed_fields(before: BaseModel, after: BaseModel) -> tuple[str, ...]:
    """The fields whose JSON values differ between two values of one args type, sorted."""
    old, new = before.model_dump(mode="json"), after.model_dump(mode="json")
    return tuple(sorted(name for name in old.keys() | new.keys() if old.get(name) != new.get(name)))


def reject(proposal: ProposedAction[Args], *, rejected_by: str, reason: str = "") -> Rejection[Args]:
    """Reject a proposed call; the returned `Rejection` is the record of it.

    Raises:
        UsageError: `rejected_by` is empty.
    """
    _check_person(rejected_by, "rejected_by")
    return Rejection(proposal=proposal, rejected_by=rejected_by, digest=proposal.digest, reason=reason)


@overload
async def execute_approved(
    approval: Approval[Args], tool: Tool[Args, R], *, ctx: object = ..., observer: ObserverArg = None
) -> Sequence[R]: ...
@overload
async def execute_approved(
    approval: Approval[Args], tool: ContextTool[Args, R, Ctx], *, ctx: Ctx, observer: ObserverArg = None
) -> Sequence[R]: ...
@overload
async def execute_approved(
    approval: Approval[BaseModel], tool: Tool[Any, R], *, ctx: object = ..., observer: ObserverArg = None
) -> Sequence[R]: ...
@overload
async def execute_approved(
    approval: Approval[BaseModel], tool: ContextTool[Any, R, Ctx], *, ctx: Ctx, observer: ObserverArg = None
) -> Sequence[R]: ...
@overload
async def execute_approved(
    approval: Approval[Any], tool: Tool[BaseModel, R], *, ctx: object = ..., observer: ObserverArg = None
) -> Sequence[R]: ...
@overload
async def execute_approved(
    approval: Approval[Any], tool: ContextTool[BaseModel, R, Ctx], *, ctx: Ctx, observer: ObserverArg = None
) -> Sequence[R]: ...
async def execute_approved(
    approval: Approval[Any],
    tool: Tool[Any, R] | ContextTool[Any, R, Any],
    *,
    ctx: object = NO_CTX,
    observer: ObserverArg = None,
) -> Sequence[R]:
    """Run an approved call, once; refuse anything that is not exactly what was approved.

    Typed: an approval of a one-tool proposal (`Approval[DeleteArgs]`) runs only with a tool of
    those args (`Tool[DeleteArgs, R]`) or with a tool that takes any model (`Tool[BaseModel, R]`),
    so passing another tool is a type error. An approval from a multi-tool loop is an
    `Approval[BaseModel]` and takes any tool, checked at run time; narrow its proposal first
    (`proposal.narrow(tool)`) to have the type checker link the two.

    The approval is spent as the call starts, whether the tool then succeeds or fails: an
    irreversible call may have half-happened, so a retry needs a new proposal and a new approval.

    A tool that takes the run's ctx (a `ContextTool`) needs `ctx=`: the run's ctx, or one
    built for this call (the run that proposed it may be long gone). It is typed like a loop's: a
    ctx of another type is a type error; without one the call is refused before anything runs.

    Args:
        approval: From `approve`.
        tool: The tool to run; its name and tier must be the proposal's (checked here, at run
            time, whatever the types said).
        ctx: The ctx for a tool that takes one; a tool that takes none ignores it.
        observer: Observers whose `around` wraps the call (an `OTelObserver`'s `execute_tool` span,
            which says who approved it); the call's `ToolInvocation` carries the approval.

    Returns:
        The tool's batch.

    Raises:
        UsageError: `tool` is not the tool the proposal names (or has no pydantic args type), or
            it takes the run's ctx and no `ctx` was given. The tool is not called and the
            approval stays unspent.
        MissingTierError: the tool declares no tier. The tool is not called.
        TierChanged: the tool declares a tier other than the one approved. The tool is not called.
        ApprovalError: the args were altered after approval, or this approval was already used.
            The tool is not called.
        ToolError: the tool raised (the original exception is its `__cause__`), returned
            something other than a batch, or raised `ToolRetry` (there is no next round to
            hear it).
    """
    proposal = approval.proposal
    if _ISSUED.get(approval._once) != approval.digest or proposal.digest != approval.digest:
        raise ApprovalError(
            f"approval {approval.id} for {proposal.tool_name!r} was not made by approve() for this call (built by "
            "hand, or altered after it was made); nothing ran. Approve the proposal with approve()",
            tool_name=proposal.tool_name,
        )
    admit(tool, name=proposal.tool_name, tier=proposal.tier)
    _check_args_schema(tool, proposal)
    check_ctx(tool, ctx)
    args = _args_to_run(tool, proposal)
    if call_digest(proposal.tool_name, args) != approval.digest:
        raise ApprovalError(
            f"the args of the call to {proposal.tool_name!r} changed after approval {approval.id}; "
            "nothing ran. Propose and approve the new call instead",
            tool_name=proposal.tool_name,
        )
    if not approval._once.claim():
        raise ApprovalError(
            f"approval {approval.id} for {proposal.tool_name!r} was already executed; an approval runs once",
            tool_name=proposal.tool_name,
        )
    approved = ApprovedCall(approved_by=approval.approved_by, digest=approval.digest)
    call = ToolInvocation(run_id=proposal.run_id, round=proposal.round, tool=tool, args=args, approval=approved)
    outcome = await invoke(tool, args, ctx=ctx, around=wrapping(observers_of(observer), call))
    failure = outcome.failure()
    if failure is not None:
        raise failure
    return outcome.batch


def _check_args_schema(tool: AnyTool, proposal: ProposedAction[Any]) -> None:
    """Refuse a tool whose args type has another JSON schema than the proposal's args: the call a person approved
    would mean something else now (a field added with a default, a field's meaning changed by an MCP server)."""
    from agentkit._state import args_schema_digest

    args_type = getattr(tool, "args_type", None)
    if not (inspect.isclass(args_type) and issubclass(args_type, BaseModel)):
        return  # refused as it is converted, naming the tool
    had, has = args_schema_digest(type(proposal.args)), args_schema_digest(args_type)
    if had != has:
        raise ApprovalError(
            f"the call to {proposal.tool_name!r} was proposed and approved with args whose JSON schema has digest "
            f"{had}; the tool's args type now has another ({has}), so the approved call would mean something else. "
            "Nothing ran; propose the call again with the tool as it is",
            tool_name=proposal.tool_name,
        )


def _args_to_run(tool: AnyTool, proposal: ProposedAction[Any]) -> BaseModel:
    """A private copy of the args, of the tool's args type, so nothing can change them mid-call."""
    args_type = getattr(tool, "args_type", None)
    if not (inspect.isclass(args_type) and issubclass(args_type, BaseModel)):
        raise UsageError(f"tool {proposal.tool_name!r} has no pydantic args_type; got {args_type!r}")
    args = proposal.args
    # The tool gets the args rebuilt from their canonical JSON, the very text the digest covers:
    # whatever a field left out of the dump held, the call that runs is the call that was approved.
    raw = canonical_json(args) if isinstance(args, BaseModel) else json.dumps(args, ensure_ascii=False)
    try:
        return validate_args(args_type, raw)
    except ValueError as invalid:
        raise ApprovalError(
            f"the approved args do not validate as {args_type.__name__} for {proposal.tool_name!r}: {invalid}",
            tool_name=proposal.tool_name,
        ) from invalid


def _check_intact(proposal: ProposedAction[Any]) -> None:
    if not isinstance(proposal.tier, Tier):
        raise missing_tier(proposal.tool_name)
    if not isinstance(proposal.args, BaseModel):
        raise ApprovalError(
            f"proposal for {proposal.tool_name!r} holds untyped args ({type(proposal.args).__name__}); reload it "
            "with ProposedAction[YourArgs].model_validate_json(...) or ProposedAction.load(data, tools)",
            tool_name=proposal.tool_name,
        )
    if not proposal.digest_matches():
        raise ApprovalError(
            f"proposal for {proposal.tool_name!r} does not match its digest (altered after it was proposed); "
            "refusing to approve it",
            tool_name=proposal.tool_name,
        )


def _check_person(who: str, parameter: str) -> None:
    if not isinstance(who, str) or not who.strip():
        raise UsageError(f"{parameter} must name who decided (a person or an account); got {who!r}")
