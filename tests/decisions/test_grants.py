"""Standing grants in process: a matching proposal is approved by ``grant:<id>``, counts one use and runs once."""

from __future__ import annotations

import asyncio
import math
import os
import posixpath
import unicodedata
import urllib.parse
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from agentkit import LoopConfig, ProposedAction, RetryPolicy, StopReason, Tier, UsageError, run_tool_loop_tiered
from agentkit._state import DecisionEntry
from agentkit.decisions import Equals, Grant, Grants, OneOf, PathPrefix, Prefix, Range
from agentkit.events import iter_tool_loop_tiered
from agentkit.testing import ScriptedCaller, call_step, done_step
from tests.support import Deleter, Doc, Executor, PathArgs, Payments, Recording, Transfer
from tests.support import small_payments as grant

NO_WAIT = LoopConfig(retry=RetryPolicy(wait_initial=0, wait_max=0))


class ExternalPayments(Payments):
    tier = Tier.EXTERNAL_REVERSIBLE


def transfer(amount: int, account: str = "acme", tier: Tier = Tier.IRREVERSIBLE) -> ProposedAction[Transfer]:
    return ProposedAction.create(
        tool_name="transfer", tier=tier, args=Transfer(account=account, amount=amount), round=1
    )


@pytest.mark.parametrize(
    ("rule", "value", "allowed"),
    [
        (Equals(value=1), 1, True),
        (Equals(value=1), True, False),
        (Equals(value=1), 1.0, False),
        (OneOf(values=("a", "b")), "b", True),
        (OneOf(values=("a", "b")), "c", False),
        (Prefix(prefix="/tmp/"), "/tmp/x", True),
        (Prefix(prefix="/tmp/"), "/etc/x", False),
        (Prefix(prefix="/tmp/"), 5, False),
        (Prefix(prefix="/tmp/"), "/tmp/../etc/passwd", True),  # text, not a path: PathPrefix is for paths
        (Range(min=0, max=10), 10, True),
        (Range(min=0, max=10), 10.5, False),
        (Range(max=10), True, False),
        (Range(min=0), "3", False),
    ],
)
def test_each_constraint_allows_exactly_its_values(rule: Any, value: object, allowed: bool) -> None:
    """Equals and OneOf compare as JSON (1 is not true nor 1.0); Prefix takes text; Range takes numbers only."""
    assert rule.allows(value) is allowed


def test_a_grant_matches_its_tool_and_every_constrained_field() -> None:
    """A call of the tool whose constrained fields all pass matches; any one field outside does not."""
    given_grant = grant()
    assert given_grant.matches(transfer(50))
    assert not given_grant.matches(transfer(51))
    assert not given_grant.matches(transfer(5, account="eve"))
    assert not grant(allow_irreversible=False).matches(transfer(5))
    assert grant(allow_irreversible=False).matches(transfer(5, tier=Tier.EXTERNAL_REVERSIBLE))


@pytest.mark.parametrize(
    ("changes", "complaint"),
    [
        ({"tool_name": " "}, "names the tool"),
        ({"granted_by": ""}, "who gave it"),
        ({"reason": ""}, "why"),
        ({"max_uses": 0}, "greater than or equal to 1"),
        ({"expires_at": datetime(2030, 1, 1)}, "time zone"),
        ({"where": {"amount": {"kind": "range"}}}, "needs min, max or both"),
        ({"where": {"account": {"kind": "prefix", "prefix": ""}}}, "a prefix is not empty"),
    ],
)
def test_an_incomplete_grant_is_refused(changes: dict[str, Any], complaint: str) -> None:
    """A grant without a tool, a granter or a reason, or with a bad limit or constraint, does not validate."""
    with pytest.raises(ValidationError, match=complaint):
        grant(**changes)


def test_a_grant_is_checked_against_its_tool() -> None:
    """Grant.of refuses a field the args type lacks and an irreversible tool without allow_irreversible."""
    tool = Payments()
    with pytest.raises(UsageError, match="'colour', which Transfer"):
        Grant.of(tool, where={"colour": Equals(value="red")}, max_uses=1, granted_by="ops", reason="r")
    with pytest.raises(UsageError, match="only with allow_irreversible=True"):
        Grant.of(tool, max_uses=1, granted_by="ops", reason="r")
    with pytest.raises(UsageError, match="names the tool"):
        Grant.of(type("Nameless", (Payments,), {"name": ""})(), max_uses=1, granted_by="ops", reason="r")
    made = Grant.of(ExternalPayments(), where={"amount": Range(max=5)}, max_uses=1, granted_by="ops", reason="r")
    assert Grant.model_validate_json(made.model_dump_json()) == made


@pytest.mark.parametrize(
    "make",
    [
        lambda: Equals(value=math.inf),
        lambda: Equals(value={"limits": [1, math.nan]}),
        lambda: OneOf(values=(1, -math.inf)),
        lambda: Range(min=math.nan, max=5),
        lambda: Range(max=math.inf),
        lambda: Range(min=-math.inf),
        lambda: grant(where={"amount": {"kind": "range", "max": math.inf}}),
        lambda: Grant.model_validate_json(grant().model_dump_json().replace('"max":50.0', '"max":Infinity')),
    ],
)
def test_a_constraint_refuses_nan_and_infinity(make: Any) -> None:
    """NaN and infinity, which JSON cannot hold (a journal would keep them as null), are refused as a constraint
    is made, however it is made, saying why."""
    with pytest.raises(ValidationError, match="NaN and infinity have no JSON form"):
        make()


def test_a_revoked_grant_cannot_be_added_again_with_fresh_uses() -> None:
    """Revoked, a grant's id does not come back: adding it again is refused, so max_uses=1 never approves twice."""
    given_grant = grant(max_uses=1)
    grants = Grants([given_grant])
    assert grants.use(transfer(5)) == given_grant
    grants.revoke(given_grant.id)
    with pytest.raises(UsageError, match="was revoked, and a revoked grant does not come back"):
        grants.add(given_grant)
    with pytest.raises(UsageError, match="already revoked"):
        grants.revoke(given_grant.id)
    assert (list(grants), grants.use(transfer(5)), grants.uses(given_grant.id)) == ([], None, 1)


async def test_a_loop_refuses_grants_that_do_not_fit_its_tools_before_any_model_call() -> None:
    """A grant constraining a field its tool lacks is a UsageError when the loop is made; no model call."""
    caller = ScriptedCaller([])
    bad = Grants([grant(where={"colour": Equals(value="red")})])
    with pytest.raises(UsageError, match="'colour'"):
        await run_tool_loop_tiered(caller, Executor[Doc](), Payments(), "ctx", NO_WAIT, grants=bad)
    assert caller.requests == []


async def run(tool: Payments, grants: Grants, *amounts: int) -> Any:
    steps = [call_step(Transfer(account="acme", amount=a)) for a in amounts]
    caller = ScriptedCaller([*steps, done_step()])
    return await run_tool_loop_tiered(caller, Executor[Doc](), tool, "ctx", NO_WAIT, grants=grants)


async def test_a_granted_call_runs_once_in_its_round_recorded_as_the_grant() -> None:
    """The matching call runs in the round that proposed it, approved by grant:<id>; one use counted."""
    tool, grants = Payments(), Grants([grant()])
    result = await run(tool, grants, 30)
    assert tool.calls == [Transfer(account="acme", amount=30)]
    assert (result.stop_reason, result.proposed, result.items) == (
        StopReason.EXECUTOR_DONE,
        [],
        [Doc(id="paid 30 to acme")],
    )
    [decision] = [e for e in result.checkpoint.entries if isinstance(e, DecisionEntry)]
    [held] = grants
    assert (decision.approved, decision.by) == (True, f"grant:{held.id}")
    assert grants.uses(held.id) == 1
    result.checkpoint.verify()


async def test_a_streamed_run_takes_grants_as_a_run_does() -> None:
    """iter_tool_loop_tiered takes grants= (every tiered entry point takes the one set of options): the granted call
    runs in its round, one use counted."""
    tool, grants = Payments(), Grants([grant()])
    caller = ScriptedCaller([call_step(Transfer(account="acme", amount=30)), done_step()])
    async with iter_tool_loop_tiered(caller, Executor[Doc](), tool, "ctx", NO_WAIT, grants=grants) as stream:
        kinds = [event.kind async for event in stream]
    assert kinds
    assert tool.calls == [Transfer(account="acme", amount=30)]
    assert (stream.result.stop_reason, stream.result.items) == (StopReason.EXECUTOR_DONE, [Doc(id="paid 30 to acme")])
    [held] = grants
    assert grants.uses(held.id) == 1


async def test_a_call_outside_the_grant_waits_for_a_human() -> None:
    """A call whose args the grant does not allow is proposed; nothing runs and no use is counted."""
    tool, grants = Payments(), Grants([grant()])
    result = await run(tool, grants, 500)
    assert (tool.calls, result.stop_reason, [p.args.amount for p in result.proposed]) == (
        [],
        StopReason.PROPOSED,
        [500],
    )
    assert grants.uses(next(iter(grants)).id) == 0


@pytest.mark.parametrize("why", ["spent", "expired", "revoked"])
async def test_a_spent_expired_or_revoked_grant_leaves_the_proposal_waiting(why: str) -> None:
    """Past its uses, after its expiry, or revoked, a grant approves nothing: the call is proposed."""
    tool = Payments()
    past = datetime.now(UTC) - timedelta(seconds=1)
    given_grant = grant(max_uses=1) if why == "spent" else grant(expires_at=past) if why == "expired" else grant()
    grants = Grants([given_grant])
    if why == "spent":
        await run(tool, grants, 10)
    if why == "revoked":
        grants.revoke(given_grant.id)
    tool.calls.clear()
    result = await run(tool, grants, 20)
    assert (tool.calls, result.stop_reason) == ([], StopReason.PROPOSED)


async def test_concurrent_runs_never_use_a_grant_beyond_its_uses() -> None:
    """Eight runs sharing one grant of three uses: exactly three calls run, five wait."""
    tool, grants = Payments(), Grants([grant(max_uses=3)])
    results = await asyncio.gather(*(run(tool, grants, 10 + n) for n in range(8)))
    assert len(tool.calls) == 3
    assert sum(r.stop_reason is StopReason.PROPOSED for r in results) == 5
    assert grants.uses(next(iter(grants)).id) == 3


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(uses=st.integers(min_value=1, max_value=4), amounts=st.lists(st.integers(0, 100), min_size=1, max_size=6))
async def test_granted_calls_run_exactly_once_and_never_beyond_the_grant(uses: int, amounts: list[int]) -> None:
    """Whatever the calls, each granted call runs once, only calls the grant allows run, and at most max_uses."""
    tool, grants = Payments(), Grants([grant(max_uses=uses)])
    proposed = 0
    for amount in amounts:
        result = await run(tool, grants, amount)
        proposed += len(result.proposed)
    allowed = [a for a in amounts if a <= 50][:uses]
    assert [c.amount for c in tool.calls] == allowed
    assert proposed == len(amounts) - len(allowed)


async def test_an_external_reversible_call_may_be_granted_without_the_irreversible_flag() -> None:
    """A grant without allow_irreversible approves an EXTERNAL_REVERSIBLE call: it runs once."""
    tool, grants = ExternalPayments(), Grants([grant(allow_irreversible=False)])
    result = await run(tool, grants, 20)
    assert (tool.calls, result.proposed) == ([Transfer(account="acme", amount=20)], [])


async def test_a_loop_refuses_a_grant_of_an_irreversible_tool_without_the_flag() -> None:
    """Granting an IRREVERSIBLE tool without allow_irreversible=True is a UsageError before any model call."""
    caller = ScriptedCaller([])
    with pytest.raises(UsageError, match="only with allow_irreversible=True"):
        await run_tool_loop_tiered(
            caller, Executor[Doc](), Payments(), "ctx", NO_WAIT, grants=Grants([grant(allow_irreversible=False)])
        )
    assert caller.requests == []


DATA = PathPrefix(prefix="/srv/data/")


@pytest.mark.parametrize(
    "path",
    [
        "/srv/data/report.csv",
        "/srv/data",
        "/srv/data/",
        "/srv/data/./a/b",
        "/srv/data//a///b/",
        "///srv/data/a",
        "/srv/data/a\\b",  # a backslash is a character of a POSIX name
        "/srv/data/100%",
        "/srv/data/...",
        "/srv/data/cafe\u0301",
    ],
)
def test_a_path_prefix_allows_paths_inside_its_folder(path: str) -> None:
    """A path inside the folder, the folder itself, `.` and doubled separators included, is allowed."""
    assert DATA.allows(path)


@pytest.mark.parametrize(
    "path",
    [
        "/srv/data/../../etc/passwd",
        "/srv/data/a/../b",  # inside by its text, yet a/.. is elsewhere when a is a symlink
        "/srv/data/..",
        "/srv/database/x",
        "/srv/dat",
        "/srv/data/x\x00",
        "srv/data/x",
        "./srv/data/x",
        "//srv/data/x",
        "",
        "/srv/data/%2e%2e/%2e%2e/etc/passwd",
        "/srv/data/%2E%2E%2F%2E%2E%2Fetc",
        "/srv/data/%252e%252e/x",
        "/srv/data/%00",
        "/srv/data/..\\..\\etc\\passwd",
        "/srv/data/\uff0e\uff0e/x",  # fullwidth full stops
        "/srv/data/\u2025/x",  # two dot leader
        "/srv/data/\u2024\u2024/x",  # one dot leaders
        "/srv/data/\ufe52\ufe52/x",  # small full stops
        "/srv/data/..\uff0fetc",  # fullwidth solidus
        "/srv/data/..\u2215etc",  # division slash
        "/srv/data/..\u2044etc",  # fraction slash
        "/srv/data/\u3002\u3002/x",  # ideographic full stops
        "/srv/data/%EF%BC%8E%EF%BC%8E/x",  # fullwidth full stops, percent-encoded
    ],
)
def test_a_path_prefix_refuses_paths_that_climb_out_or_could_be_read_so(path: str) -> None:
    """`..`, NUL, another folder, a relative or `//` path, and `..` spelt encoded, with backslashes or look-alikes."""
    assert not DATA.allows(path)


def test_a_path_prefix_refuses_what_is_not_text() -> None:
    """A number, a list or None is no path: refused."""
    assert not any(DATA.allows(value) for value in (5, ["/srv/data/x"], None, b"/srv/data/x"))


def test_a_relative_path_prefix_allows_relative_paths_only() -> None:
    """A relative prefix allows relative paths under it; an absolute path is refused."""
    rule = PathPrefix(prefix="data")
    assert rule.allows("data/x")
    assert rule.allows("./data/x")
    assert not rule.allows("/data/x")
    assert not rule.allows("data/../x")
    assert not rule.allows("database")


@pytest.mark.parametrize(
    ("fields", "complaint"),
    [
        ({"prefix": ""}, "POSIX folder"),
        ({"prefix": "/srv/../etc"}, "POSIX folder"),
        ({"prefix": "/srv/\x00"}, "POSIX folder"),
        ({"prefix": "//srv"}, "POSIX folder"),
        ({"prefix": "/srv/my%20data"}, "written plainly"),
        ({"prefix": "C:\\data"}, "written plainly"),
        ({"prefix": "/srv/\uff44ata"}, "written plainly"),
        ({"prefix": "data", "resolve_symlinks": True}, "absolute prefix"),
        ({"prefix": "/srv", "kind": "path"}, "kind"),
        ({"prefix": "/srv", "follow": True}, "follow"),
    ],
)
def test_a_path_prefix_that_could_be_misread_is_refused(fields: dict[str, Any], complaint: str) -> None:
    """A prefix with `..`, NUL, `//`, percent, backslash or look-alikes, or an unknown field, does not validate."""
    with pytest.raises(ValidationError, match=complaint):
        PathPrefix.model_validate(fields)


def test_a_grant_with_a_path_prefix_round_trips_as_json() -> None:
    """Stored as data, a PathPrefix grant reads back equal, and still refuses `..`."""
    made = Grant.of(
        Deleter(),
        where={"path": PathPrefix(prefix="/srv/data", resolve_symlinks=True)},
        max_uses=1,
        allow_irreversible=True,
        granted_by="ops",
        reason="data files",
    )
    again = Grant.model_validate_json(made.model_dump_json())
    assert again == made
    assert isinstance(again.where["path"], PathPrefix)
    assert not again.where["path"].allows("/srv/data/../etc")


def test_resolve_symlinks_refuses_a_link_inside_that_points_outside(tmp_path: Path) -> None:
    """With resolve_symlinks, a path through a link to outside the folder is refused; without it, allowed."""
    folder, outside = tmp_path / "data", tmp_path / "secret"
    folder.mkdir()
    outside.mkdir()
    (folder / "ok.txt").write_text("x")
    (folder / "link").symlink_to(outside)
    (folder / "back").symlink_to(folder / "ok.txt")
    strict = PathPrefix(prefix=str(folder), resolve_symlinks=True)
    assert strict.allows(f"{folder}/ok.txt")
    assert strict.allows(f"{folder}/back")
    assert strict.allows(f"{folder}/new")
    assert not strict.allows(f"{folder}/link/key")
    assert not strict.allows(f"{folder}/link")
    assert PathPrefix(prefix=str(folder)).allows(f"{folder}/link/key")


@pytest.mark.parametrize("separator", ["/", "\\", "%2f", "%252f", "\uff0f", "\u2215", "\u2044"])
def test_resolve_symlinks_refuses_a_link_out_however_a_layer_below_reads_the_path(
    tmp_path: Path, separator: str
) -> None:
    """`link<sep>key` is a name inside to POSIX, and `link/key` to a layer that takes <sep> for a separator: the real
    path of every reading the lexical check considers must lie inside, so a link out is refused under each."""
    folder, outside = tmp_path / "data", tmp_path / "secret"
    folder.mkdir()
    outside.mkdir()
    (outside / "key").write_text("s")
    (folder / "link").symlink_to(outside)
    strict = PathPrefix(prefix=str(folder), resolve_symlinks=True)
    assert not strict.allows(f"{folder}/link{separator}key")
    assert strict.allows(f"{folder}/plain{separator}key")


def test_resolve_symlinks_checks_the_real_path_of_the_prefix_too(tmp_path: Path) -> None:
    """A prefix that is itself a link is compared by its real path: paths through it are inside."""
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "alias").symlink_to(real)
    rule = PathPrefix(prefix=str(tmp_path / "alias"), resolve_symlinks=True)
    assert rule.allows(f"{tmp_path}/alias/x")
    assert not rule.allows(f"{tmp_path}/realx")


def _inside(path: str, root: str) -> bool:
    normal = posixpath.normpath(path)
    return normal == root or normal.startswith(root.rstrip("/") + "/")


PATH_TEXT = st.lists(
    st.sampled_from(
        [
            "/",
            "/",
            ".",
            "..",
            "a",
            "data",
            "srv",
            "\\",
            "%",
            "2e",
            "2E",
            "2f",
            "25",
            "%2e",
            "%2f",
            "\x00",
            "\uff0e",
            "\uff0f",
            "\u2024",
            "\u2025",
            "\u2215",
            "\u3002",
            "\ufe52",
            "e\u0301",
            "\uff3c",
            "%EF%BC%8E",
        ]
    ),
    max_size=14,
).map("".join)


@settings(max_examples=2000, deadline=None)
@given(tail=PATH_TEXT, lead=st.sampled_from(["/srv/data/", "/srv/data", "/srv/", "/", "", "//", "/srv/data/../"]))
def test_no_path_a_path_prefix_allows_lies_outside_it_however_it_is_read(lead: str, tail: str) -> None:
    """Whatever the text: if PathPrefix allows it, it, normalised, lies in the folder, and so does every reading
    of it (backslashes as separators, percent-decoded twice, NFKC-folded), and it holds no NUL."""
    path = lead + tail
    if not DATA.allows(path):
        return
    decoded = urllib.parse.unquote(urllib.parse.unquote(path))
    readings = [path, path.replace("\\", "/"), decoded, unicodedata.normalize("NFKC", path)]
    readings.append(unicodedata.normalize("NFKC", decoded).replace("\\", "/"))
    assert all("\x00" not in form and _inside(form, "/srv/data") for form in readings), readings


SEPARATORS = ["/", "/", "\\", "%2f", "%252F", "\uff0f", "\u2215", "\u2044", "\u29f8"]


@settings(max_examples=300, deadline=None)
@given(
    tail=st.lists(
        st.tuples(st.sampled_from(["a", "b", "link", "..", ".", ""]), st.sampled_from(SEPARATORS)), max_size=6
    ).map(lambda parts: "".join(name + sep for name, sep in parts))
)
def test_no_path_resolve_symlinks_allows_resolves_outside_the_folder(tmp_path_factory: Any, tail: str) -> None:
    """On a real tree with links out and back in, every path allowed with resolve_symlinks resolves inside, as
    written and as a layer below may read it (backslash, percent-decoded, look-alike slashes as separators)."""
    base = Path(os.path.realpath(tmp_path_factory.mktemp("tree")))
    folder = base / "data"
    (folder / "a").mkdir(parents=True)
    (base / "out").mkdir()
    (folder / "link").symlink_to(base / "out")
    (folder / "a" / "b").symlink_to(folder / "a")
    path = f"{folder}/{tail}"
    if PathPrefix(prefix=str(folder), resolve_symlinks=True).allows(path):
        read = unicodedata.normalize("NFKC", urllib.parse.unquote(urllib.parse.unquote(path)))
        for slash in ("\\", "\u2215", "\u2044", "\u29f8"):
            read = read.replace(slash, "/")
        assert _inside(os.path.realpath(path), str(folder))
        assert _inside(os.path.realpath(read), str(folder)), read


def deletes(*paths: str) -> ScriptedCaller:
    return ScriptedCaller([*(call_step(PathArgs(path=p)) for p in paths), done_step()])


async def test_a_path_grant_runs_a_path_inside_and_proposes_one_that_climbs_out() -> None:
    """In a run, a PathPrefix grant approves a delete inside its folder; `/srv/data/../../etc/passwd` waits."""
    tool = Recording("delete", Tier.IRREVERSIBLE, PathArgs)
    rule = PathPrefix(prefix="/srv/data/")
    made = Grant.of(tool, where={"path": rule}, max_uses=5, allow_irreversible=True, granted_by="ops", reason="data")
    grants = Grants([made])
    inside = await run_tool_loop_tiered(
        deletes("/srv/data/old.csv"), Executor[Doc](), tool, "ctx", NO_WAIT, grants=grants
    )
    outside = await run_tool_loop_tiered(
        deletes("/srv/data/../../etc/passwd"), Executor[Doc](), tool, "ctx", NO_WAIT, grants=grants
    )
    assert inside.proposed == []
    assert [p.args for p in outside.proposed] == [PathArgs(path="/srv/data/../../etc/passwd")]
    assert tool.calls == [PathArgs(path="/srv/data/old.csv")]
    assert grants.uses(made.id) == 1
