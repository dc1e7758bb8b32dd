"""`ProposedAction`: a call the loop did not run because its tier needs a human."""

from __future__ import annotations

import hashlib
import json
import math
import re
import typing
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar, overload

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agentkit._tiers import Tier
from agentkit._tools import AnyTool, ContextTool, Tool
from agentkit._trust import CallProvenance
from agentkit.errors import UsageError

__all__ = [
    "CallSeen",
    "Evidence",
    "ProposedAction",
    "call_digest",
    "canonical_json",
    "load_proposal",
    "task_text",
    "text_digest",
    "validate_args",
]

Args = TypeVar("Args", bound=BaseModel)
Narrowed = TypeVar("Narrowed", bound=BaseModel)


def canonical_json(args: BaseModel) -> str:
    """The arguments as the digest sees them: JSON with keys sorted, no whitespace, UTF-8 text.

    Two calls with equal arguments give equal text, so stored arguments can be compared with the
    validated ones character for character.
    """
    return _CANONICAL.encode(args.model_dump(mode="json"))


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
"""`json.dumps` with `canonical_json`'s options, made once (a journaled run writes every call's arguments)."""


_SURROGATE = re.compile("[\ud800-\udfff]")


def validate_args(args_type: type[Args], args_json: str) -> Args:
    """Validate args from their JSON text (`canonical_json`), lone surrogates included.

    The JSON parser refuses lone surrogates, which `canonical_json` writes as they are; for those
    (rare) args the data `json.loads` gives is validated instead, as a tool call's args are.
    """
    if _SURROGATE.search(args_json) is None:
        return args_type.model_validate_json(args_json)
    return args_type.model_validate(json.loads(args_json))


def call_digest(tool_name: str, args: BaseModel) -> str:
    """SHA-256 of the tool name and the canonical JSON of the arguments (`canonical_json`).

    The same call always has the same digest, and any change to the name or to one argument
    changes it. Text that is not UTF-8 (lone surrogates, as `surrogateescape` makes of bytes)
    is hashed as its `surrogatepass` bytes; UTF-8 text hashes as before.
    """
    return text_digest(tool_name, canonical_json(args))


def text_digest(tool_name: str, canonical: str) -> str:
    """`call_digest` of a call whose arguments' `canonical_json` is `canonical` (text the run already has)."""
    return hashlib.sha256(f"{tool_name}\n{canonical}".encode("utf-8", "surrogatepass")).hexdigest()


class CallSeen(BaseModel):
    """One earlier call of the run, as a proposal's evidence refers to it (a reference, not a copy)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    round: int
    tool_name: str
    digest: str
    """`call_digest` of the call: it names the call in the run's state and journal."""
    ran: bool
    """It ran and returned a batch (else it was proposed, refused, or retried)."""
    item_ids: tuple[str, ...] = ()
    """The ids of the items it returned (their `id`, or the item type's `cite_key` field), where they have one."""


TASK_LIMIT = 4000
"""The most characters of a run's task that a proposal's evidence keeps (`Evidence.task`)."""


class Evidence(BaseModel):
    """What the executor had seen when it proposed a call: the run's task, and the rounds and calls before
    it, by reference."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rounds: tuple[int, ...] = ()
    """The rounds before the proposing one."""
    calls: tuple[CallSeen, ...] = ()
    """The earlier calls the executor was shown, in order."""
    task: str | None = None
    """The run's ctx as text, what the run was asked: a `str` ctx as it is, a pydantic model's as its JSON
    (a `SecretStr` field masked), at most 4000 characters (a longer one cut, ending in an ellipsis). `None`:
    a ctx of another type (which may hold the tools' clients and credentials), or a proposal recorded
    before it was kept."""
    provenance: CallProvenance | None = None
    """Whether untrusted content had entered the run before the call, which of its results, and which
    argument values first appeared in them (`None`: the run had no `ProvenancePolicy`, or the proposal
    was recorded before provenance)."""


def task_text(ctx: object) -> str | None:
    """A run's ctx as its proposals' evidence keeps it: a `str` as it is (a lone surrogate as U+FFFD), a
    pydantic model as its JSON (a `SecretStr` field masked), at most `TASK_LIMIT` characters (a longer one
    cut, ending in an ellipsis).

    Any other ctx gives `None`: a dataclass or a mapping may hold clients and credentials for the tools,
    which a journal must not keep, so only what is plainly the run's data is written.
    """
    if isinstance(ctx, BaseModel):
        try:
            text = ctx.model_dump_json()
        except ValueError:  # a model holding what JSON cannot carry (a client, with arbitrary_types_allowed)
            return None
    elif isinstance(ctx, str):
        text = _SURROGATE.sub("\ufffd", ctx)  # shown, never compared: a stored proposal's JSON cannot hold one
    else:
        return None
    return text if len(text) <= TASK_LIMIT else text[: TASK_LIMIT - 1] + "\u2026"


class ProposedAction(BaseModel, Generic[Args]):
    """A call above the autonomy ceiling, returned for a human to approve; frozen and JSON round-trippable."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool_name: str
    """The tool the executor wanted to call."""
    tier: Tier
    """The tool's declared tier."""
    args: Args
    """The validated arguments of the call."""
    rationale: str = ""
    """The executor's stated reason."""
    round: int
    """The round the call was made in."""
    run_id: str = ""
    """The run that proposed it."""
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    """When it was proposed (UTC)."""
    digest: str
    """`call_digest(tool_name, args)`: an approval approves exactly this call."""
    evidence: Evidence | None = None
    """What the executor had seen when it proposed the call (`None`: not recorded)."""

    @model_validator(mode="before")
    @classmethod
    def _needs_args_type(cls, data: Any) -> Any:
        # The bare class would "load" any args as an empty BaseModel, losing the call.
        if not cls.__pydantic_generic_metadata__["args"]:
            raise ValueError(
                "load a proposal with its args type: ProposedAction[YourArgs].model_validate_json(...), "
                "or ProposedAction.load(data, tools) to take the type from the tool it names"
            )
        return data

    @classmethod
    def create(
        cls,
        *,
        tool_name: str,
        tier: Tier,
        args: Args,
        rationale: str = "",
        round: int,
        run_id: str = "",
        evidence: Evidence | None = None,
    ) -> ProposedAction[Args]:
        """Build a proposal and compute its digest (on the bare class, typed by the args given)."""
        _check_round_trip(tool_name, args)
        model = cls
        if not cls.__pydantic_generic_metadata__["args"]:
            # mypy types cls as type[ProposedAction[Args]], already parametrised, so refuses to index it.
            model = cls[type(args)]  # type: ignore[index]  # parametrise the bare class by the args' run-time type
        return model(
            tool_name=tool_name,
            tier=tier,
            args=args,
            rationale=rationale,
            round=round,
            run_id=run_id,
            digest=call_digest(tool_name, args),
            evidence=evidence,
        )

    def narrow(self, tool: Tool[Narrowed, Any] | ContextTool[Narrowed, Any, Any]) -> ProposedAction[Narrowed] | None:
        """This proposal typed by `tool`'s args, if it is a call of `tool`; else `None`.

        A proposal from a multi-tool loop is a `ProposedAction[BaseModel]`; `narrow` gives the
        type checker (and you) the one tool's args type, so the approval it leads to can only be
        executed with that tool:

        ```python
        for proposal in result.proposed:
            if (deletion := proposal.narrow(delete_file)) is not None:
                deletion.args.path  # typed as the tool's args
        ```

        The proposal itself is returned when its args already are of the tool's `args_type`;
        args of another model (a proposal reloaded without its type) are validated into a copy
        that keeps the digest, so `approve` still checks it against the call.

        Raises:
            UsageError: the proposal names `tool` but its args do not validate as its args type.
        """
        if self.tool_name != tool.name:
            return None
        args_type = tool.args_type
        if isinstance(self.args, args_type):
            return typing.cast("ProposedAction[Narrowed]", self)
        try:
            args = args_type.model_validate(self.args.model_dump(mode="json"))
        except ValueError as invalid:
            raise UsageError(
                f"proposal for {self.tool_name!r} does not hold {args_type.__name__} args: {invalid}"
            ) from invalid
        fields = {name: getattr(self, name) for name in type(self).model_fields if name != "args"}
        return ProposedAction[args_type](args=args, **fields)  # type: ignore[valid-type]  # a run-time type

    @overload
    @staticmethod
    def load(
        data: str | bytes, tools: Tool[Narrowed, Any] | ContextTool[Narrowed, Any, Any]
    ) -> ProposedAction[Narrowed]: ...
    @overload
    @staticmethod
    def load(data: str | bytes, tools: Sequence[AnyTool]) -> ProposedAction[BaseModel]: ...
    @staticmethod
    def load(data: str | bytes, tools: AnyTool | Sequence[AnyTool]) -> ProposedAction[Any]:
        """Reload a stored proposal (its JSON) with its args typed by the tool it names.

        `ProposedAction[YourArgs].model_validate_json` does this for one args type; a proposal from a
        multi-tool loop names its tool, and this picks that tool's `args_type`.

        Raises:
            UsageError: the proposal names a tool that is not among `tools`.
            pydantic.ValidationError: the data is not a proposal, or its args do not validate.
        """
        return load_proposal(data, tools)

    def digest_matches(self) -> bool:
        """Whether `digest` still matches the tool name and args (they were not altered)."""
        return call_digest(self.tool_name, self.args) == self.digest


def finite(value: object) -> bool:
    """Whether a JSON-mode dump (`model_dump(mode="json")`) holds no NaN or infinite number: what no stored
    proposal can carry, JSON having no such number."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(finite(inner) for inner in value.values())
    if isinstance(value, list | tuple):
        return all(finite(inner) for inner in value)
    return True


def _check_round_trip(tool_name: str, args: BaseModel) -> None:
    """Refuse args whose canonical JSON does not validate back to an equal value.

    The digest covers the canonical JSON; what runs is rebuilt from it. Args that do not survive
    the trip (a field left out of the dump, a serializer that loses data) could run as a call
    other than the one a human approved.
    """
    try:
        again = validate_args(type(args), canonical_json(args))
    except ValueError as invalid:
        raise UsageError(
            f"the args of the call to {tool_name!r} ({type(args).__name__}) do not validate from their own JSON, "
            f"so the call cannot be proposed: {invalid}"
        ) from invalid
    if again != args:
        raise UsageError(
            f"the args of the call to {tool_name!r} ({type(args).__name__}) change in a JSON round trip "
            "(a field left out of the dump, or a lossy serializer), so an approval could not cover the call; "
            "make the args type round-trip exactly"
        )


class _Named(BaseModel):
    tool_name: str


@overload
def load_proposal(data: str | bytes, tools: Tool[Args, Any] | ContextTool[Args, Any, Any]) -> ProposedAction[Args]: ...
@overload
def load_proposal(data: str | bytes, tools: Sequence[AnyTool]) -> ProposedAction[BaseModel]: ...
def load_proposal(data: str | bytes, tools: AnyTool | Sequence[AnyTool]) -> ProposedAction[Any]:
    """Reload a stored proposal with its args typed by the tool it names.

    `ProposedAction[YourArgs].model_validate_json` does this for one args type; a proposal from a
    multi-tool loop names its tool, and this picks that tool's `args_type`.

    Raises:
        UsageError: the proposal names a tool that is not among `tools`.
        pydantic.ValidationError: the data is not a proposal, or its args do not validate.
    """
    candidates = list(tools) if isinstance(tools, Sequence) else [tools]
    by_name = {candidate.name: candidate for candidate in candidates}
    named = _Named.model_validate_json(data)
    found = by_name.get(named.tool_name)
    if found is None:
        raise UsageError(
            f"stored proposal names tool {named.tool_name!r}, which is not among {sorted(by_name)}; "
            "pass the tool set it was proposed with"
        )
    return ProposedAction[found.args_type].model_validate_json(data)  # type: ignore[name-defined]  # a run-time type
