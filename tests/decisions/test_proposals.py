"""ProposedAction and call_digest: a proposal names exactly one call, survives storage, and shows tampering."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest
from pydantic import BaseModel, ValidationError

from agentkit import ProposedAction, Tier, UsageError, tool
from agentkit._proposals import call_digest, load_proposal
from tests.support import search


class Inner(BaseModel):
    tags: list[str]
    weight: float = 1.0


class PathArgs(BaseModel):
    path: str
    recursive: bool = False
    inner: Inner | None = None


@tool(tier=Tier.IRREVERSIBLE)
def delete(args: PathArgs) -> Sequence[str]:
    """Delete a path."""
    return [args.path]


def proposal() -> ProposedAction[PathArgs]:
    return ProposedAction[PathArgs].create(
        tool_name="delete",
        tier=Tier.IRREVERSIBLE,
        args=PathArgs(path="/tmp/a", inner=Inner(tags=["x", "é"])),
        rationale="stale",
        round=2,
        run_id="run-1",
    )


def test_digest_is_sha256_of_name_and_canonical_json() -> None:
    """The digest format is fixed (stored approvals depend on it): sha256 of name, newline, sorted compact JSON."""
    args = PathArgs(path="/ü", inner=Inner(tags=["b", "a"]))
    canonical = '{"inner":{"tags":["b","a"],"weight":1.0},"path":"/ü","recursive":false}'
    expected = hashlib.sha256(("delete\n" + canonical).encode()).hexdigest()
    assert call_digest("delete", args) == expected


def test_digest_ignores_field_order_and_construction() -> None:
    """The same call built two ways has one digest."""
    a = PathArgs(path="/a", recursive=True)
    b = PathArgs.model_validate_json(json.dumps({"recursive": True, "path": "/a"}))
    assert call_digest("delete", a) == call_digest("delete", b)


@pytest.mark.parametrize(
    ("tool_name", "args"),
    [
        ("remove", PathArgs(path="/tmp/a", inner=Inner(tags=["x", "é"]))),
        ("delete", PathArgs(path="/tmp/b", inner=Inner(tags=["x", "é"]))),
        ("delete", PathArgs(path="/tmp/a", recursive=True, inner=Inner(tags=["x", "é"]))),
        ("delete", PathArgs(path="/tmp/a", inner=Inner(tags=["é", "x"]))),
        ("delete", PathArgs(path="/tmp/a", inner=Inner(tags=["x", "é"], weight=2))),
    ],
)
def test_any_change_to_name_or_args_changes_the_digest(tool_name: str, args: PathArgs) -> None:
    """Changing the tool name or any (nested) argument changes the digest."""
    original = PathArgs(path="/tmp/a", inner=Inner(tags=["x", "é"]))
    assert call_digest(tool_name, args) != call_digest("delete", original)


def test_create_computes_the_digest() -> None:
    """ProposedAction.create stamps the digest of its own tool name and args."""
    made = proposal()
    assert made.digest == call_digest("delete", made.args)
    assert made.digest_matches()
    assert made.created_at.tzinfo is UTC


def test_proposal_round_trips_through_json() -> None:
    """ProposedAction[A].model_validate_json(p.model_dump_json()) == p, typed args, tier and time included."""
    made = proposal()
    reloaded = ProposedAction[PathArgs].model_validate_json(made.model_dump_json())
    assert reloaded == made
    assert isinstance(reloaded.args, PathArgs)
    assert isinstance(reloaded.args.inner, Inner)
    assert reloaded.tier is Tier.IRREVERSIBLE
    assert reloaded.created_at == made.created_at
    assert reloaded.digest_matches()


def test_proposal_is_frozen() -> None:
    """No field of a proposal can be reassigned."""
    made = proposal()
    with pytest.raises(ValidationError, match="frozen"):
        made.args = PathArgs(path="/etc")  # type: ignore[misc]  # the assignment under test


def test_proposal_refuses_unknown_fields() -> None:
    """Stored data with an unexpected field does not load as a proposal."""
    data = json.loads(proposal().model_dump_json()) | {"approved": True}
    with pytest.raises(ValidationError, match="approved"):
        ProposedAction[PathArgs].model_validate(data)


def test_digest_matches_detects_args_mutated_in_place() -> None:
    """Mutating the (unfrozen) args model after proposing shows as a digest mismatch."""
    made = proposal()
    made.args.path = "/etc"
    assert not made.digest_matches()


def test_digest_matches_detects_a_copy_with_other_args() -> None:
    """A copy with swapped args but the old digest does not match."""
    made = proposal()
    swapped = made.model_copy(update={"args": PathArgs(path="/")})
    assert not swapped.digest_matches()


def test_digest_matches_detects_edited_stored_json() -> None:
    """Editing stored JSON's args leaves a proposal whose digest no longer matches."""
    data = json.loads(proposal().model_dump_json())
    data["args"]["path"] = "/"
    assert not ProposedAction[PathArgs].model_validate(data).digest_matches()


def test_load_proposal_types_args_by_the_named_tool() -> None:
    """load_proposal picks the args type of the tool the proposal names, from a set of tools."""
    made = proposal()
    reloaded = load_proposal(made.model_dump_json(), [search, delete])
    assert reloaded == made
    assert isinstance(reloaded.args, PathArgs)
    assert load_proposal(made.model_dump_json(), delete) == made


def test_load_proposal_refuses_a_tool_outside_the_set() -> None:
    """A stored proposal naming a tool that is not given is a UsageError naming it."""
    with pytest.raises(UsageError, match=r"'delete'.*search"):
        load_proposal(proposal().model_dump_json(), [search])


def test_load_proposal_refuses_args_that_do_not_validate() -> None:
    """Args that do not fit the named tool's args type fail validation."""
    data = json.loads(proposal().model_dump_json())
    data["args"] = {"query": "x"}
    with pytest.raises(ValidationError, match="path"):
        load_proposal(json.dumps(data), [search, delete])


def test_created_at_is_kept_when_given() -> None:
    """An explicit creation time (a reloaded proposal's) is kept as is."""
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    data = json.loads(proposal().model_dump_json()) | {"created_at": when.isoformat()}
    assert ProposedAction[PathArgs].model_validate(data).created_at == when


def test_loading_with_the_bare_class_fails_loudly() -> None:
    """The unparametrised class cannot type the args, so loading with it is refused with the fix."""
    with pytest.raises(ValidationError, match=r"ProposedAction\.load\(data, tools\)"):
        ProposedAction.model_validate_json(proposal().model_dump_json())
