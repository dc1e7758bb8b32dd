"""An amendment made on the journal: the stored call, changed by its approver, validated as its args type.

The journal holds args as JSON; the args type they are validated as is the one the proposing process
used (`ProposalRecord.args_type`, `module:qualname`), given again (`args_type=`), or the type of
a value given as the amended args. The type's JSON schema must have the digest the proposal recorded
(`ProposalRecord.args_schema`), and the stored call must reproduce its digest as that type, before it
is amended: an amendment never validates against a schema other than the call's.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from agentkit._approval import amended
from agentkit._naming import resolve
from agentkit._proposals import ProposedAction, canonical_json
from agentkit._state import args_schema_digest
from agentkit.errors import ApprovalError, DigestMismatch
from agentkit.journal._records import ProposalRecord

__all__ = ["amendment_sets", "type_name"]


def type_name(args_type: type[BaseModel]) -> str:
    """`module:qualname`: how a proposal row names its args type."""
    return f"{args_type.__module__}:{args_type.__qualname__}"


def amendment_sets(
    record: ProposalRecord,
    args: BaseModel | Mapping[str, Any],
    args_type: type[BaseModel] | None,
    amended_by: str,
) -> tuple[dict[str, object], tuple[str, ...]]:
    """The columns an amended approval writes, and the fields that changed (none: the args are the proposed ones).

    Raises:
        ApprovalError: the args type cannot be found, is not the call's, or the amended args do not
            validate as it; nothing changed.
        DigestMismatch: the stored args do not reproduce the proposal's digest as that type.
    """
    chosen = args_type or (type(args) if isinstance(args, BaseModel) else _imported(record))
    if record.args_type is not None and type_name(chosen) != record.args_type:
        raise ApprovalError(
            f"proposal {record.id!r} was proposed with args of {record.args_type}, not {type_name(chosen)}; "
            "amend it with the tool's own args type. Nothing changed",
            tool_name=record.tool_name,
        )
    _check_schema(record, chosen, given=args_type is not None or isinstance(args, BaseModel))
    action = _stored_call(record, chosen)
    changed, amendment = amended(action, args, amended_by=amended_by)
    if amendment is None:
        return {}, ()
    sets: dict[str, object] = {
        "args": canonical_json(changed.args),
        "digest": changed.digest,
        "original_args": record.args_json,
        "original_digest": record.digest,
        "amended_by": amended_by,
        "amended_fields": json.dumps(list(amendment.fields)),
    }
    return sets, amendment.fields


def _check_schema(record: ProposalRecord, args_type: type[BaseModel], *, given: bool) -> None:
    """Refuse `args_type` unless its JSON schema is the one the call was proposed with (by digest)."""
    if record.args_schema is None:
        raise ApprovalError(
            f"proposal {record.id!r} does not record its args schema (it was proposed by an earlier agentkit), "
            "so amended args cannot be validated as exactly the tool's; approve it as proposed, or reject it and "
            "propose the call again. Nothing changed",
            tool_name=record.tool_name,
        )
    fix = (
        "approve it as proposed, reject it and propose the call again, or amend it from code with the tool's "
        "own args type (`journal.approve(id, by, args=..., args_type=tool.args_type)`). Nothing changed"
    )
    digest = args_schema_digest(args_type)
    if digest != record.args_schema:
        where = "given" if given else "imported here"
        raise ApprovalError(
            f"proposal {record.id!r} was proposed with args whose JSON schema has digest {record.args_schema}; "
            f"{type_name(args_type)} as {where} has another schema (digest {digest}): the tool's args type was "
            "made at run time (a Literal of ids, say) or its code changed, so the amended args cannot be validated "
            f"as the tool's; {fix}",
            tool_name=record.tool_name,
        )


def _stored_call(record: ProposalRecord, args_type: type[BaseModel]) -> ProposedAction[Any]:
    """The stored call as a proposal of `args_type`, checked against its digest."""
    try:
        args = record.args_as(args_type)
    except ValidationError as invalid:
        raise ApprovalError(
            f"proposal {record.id!r}: its stored args do not validate as {args_type.__name__}, so it cannot be "
            f"amended as one ({invalid.error_count()} errors); nothing changed",
            tool_name=record.tool_name,
        ) from invalid
    action = ProposedAction.create(
        tool_name=record.tool_name,
        tier=record.tier,
        args=args,
        rationale=record.rationale,
        round=record.round,
        run_id=record.run_id,
    )
    if action.digest != record.digest or canonical_json(args) != record.args_json:
        raise DigestMismatch(
            f"proposal {record.id!r}: its stored args do not reproduce the digest that was proposed as "
            f"{args_type.__name__} (another type, or altered); nothing changed",
            id=record.id,
            tool_name=record.tool_name,
        )
    return action


def _imported(record: ProposalRecord) -> type[BaseModel]:
    """The args type the row names, imported; refused with the fix when it cannot be."""
    fix = "pass args_type= (or the amended args as a value of the tool's args type)"
    if record.args_type is None:
        raise ApprovalError(
            f"proposal {record.id!r} does not record its args type (it was proposed by an earlier agentkit); "
            f"{fix}. Nothing changed",
            tool_name=record.tool_name,
        )
    try:
        found = resolve(record.args_type)
    except (ValueError, ImportError, AttributeError) as missing:
        raise ApprovalError(
            f"proposal {record.id!r}: its args type {record.args_type} cannot be imported here ({missing}); "
            f"run where the tool's code is importable, or {fix}. Nothing changed",
            tool_name=record.tool_name,
        ) from missing
    if not (inspect.isclass(found) and issubclass(found, BaseModel)):
        raise ApprovalError(
            f"proposal {record.id!r}: {record.args_type} is not a pydantic model; {fix}. Nothing changed",
            tool_name=record.tool_name,
        )
    return found
