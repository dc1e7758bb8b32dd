"""Standing grants on the journal (both backends): a matching proposal is approved by ``grant:<id>`` as it is
recorded, counts one use, runs once; concurrent proposers never take a grant beyond its uses."""

from __future__ import annotations

import asyncio
import json
import math
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agentkit import ProposedAction, Tier, UsageError
from agentkit._cli import main
from agentkit.decisions import Equals, Grant, PathPrefix, Range
from agentkit.journal import (
    GrantState,
    Journal,
    JournalError,
    ProposalState,
    TransitionRefused,
    UnknownId,
    open_journal,
)
from tests.support import Deleter, PathArgs, Payments, Recording, Transfer, proposed, small_payments


def grant(**changes: Any) -> Grant:
    return small_payments(**({"max_uses": 3} | changes))


def transfer(run_id: str, amount: int = 10) -> ProposedAction[Transfer]:
    return ProposedAction.create(
        tool_name="transfer",
        tier=Tier.IRREVERSIBLE,
        args=Transfer(account="acme", amount=amount),
        round=1,
        run_id=run_id,
    )


async def test_a_matching_proposal_is_approved_by_the_grant_and_runs_once(journal: Journal) -> None:
    """Recorded, it is approved by grant:<id> (one use counted); execute runs it once; others wait."""
    kept = await journal.grant(grant(), tool=Payments())
    assert (kept.uses, kept.state) == (0, GrantState.LIVE)
    matched = await journal.propose(transfer("a"))
    outside = await journal.propose(transfer("b", amount=500))
    assert (matched.state, matched.approved_by) == (ProposalState.APPROVED, f"grant:{kept.id}")
    assert outside.state is ProposalState.PENDING
    [_, moved] = await journal.history(matched.id)
    assert (moved.actor, moved.note) == (f"grant:{kept.id}", "small payments to acme")
    tool = Payments()
    assert (await journal.execute(matched.id, tool)).ok
    with pytest.raises(TransitionRefused):
        await journal.execute(matched.id, tool)
    assert tool.calls == [Transfer(account="acme", amount=10)]
    [listed] = await journal.grants()
    assert (listed.id, listed.uses) == (kept.id, 1)


@pytest.mark.parametrize("why", ["spent", "expired", "revoked"])
async def test_a_spent_expired_or_revoked_grant_leaves_the_proposal_waiting(journal: Journal, why: str) -> None:
    """Past its uses, after its expiry, or once revoked, a grant approves nothing: the proposal is pending."""
    past = datetime.now(UTC) - timedelta(seconds=1)
    kept = await journal.grant(grant(max_uses=1) if why != "expired" else grant(expires_at=past), tool=Payments())
    if why == "spent":
        assert (await journal.propose(transfer("first"))).state is ProposalState.APPROVED
    if why == "revoked":
        revoked = await journal.revoke_grant(kept.id, "ops", "no longer needed")
        assert (revoked.state, revoked.revoked_by) == (GrantState.REVOKED, "ops")
    assert (await journal.propose(transfer("later"))).state is ProposalState.PENDING
    [listed] = await journal.grants()
    assert (
        listed.state is {"spent": GrantState.SPENT, "expired": GrantState.EXPIRED, "revoked": GrantState.REVOKED}[why]
    )


async def test_bad_grant_changes_are_refused(journal: Journal) -> None:
    """A grant that does not fit its tool, a second grant of one id, an unknown or revoked id: nothing changes."""
    with pytest.raises(UsageError, match="'colour', which Transfer"):
        await journal.grant(grant(where={"colour": Equals(value="red")}), tool=Payments())
    with pytest.raises(UsageError, match="allow_irreversible=True"):
        await journal.grant(grant(allow_irreversible=False), tool=Payments())
    with pytest.raises(UsageError, match="is for tool 'transfer', not 'delete'"):
        await journal.grant(grant(), tool=Recording("delete", Tier.IRREVERSIBLE))
    assert await journal.grants() == []
    kept = await journal.grant(grant(), tool=Payments())
    with pytest.raises(Exception, match="already holds a grant"):
        await journal.grant(grant(id=kept.id), tool=Payments())
    with pytest.raises(UnknownId):
        await journal.revoke_grant("nope", "ops", "x")
    await journal.revoke_grant(kept.id, "ops", "x")
    with pytest.raises(TransitionRefused, match="already revoked"):
        await journal.revoke_grant(kept.id, "eve", "again")


def newer_body(id: str = "newer0000001", *, body_id: str | None = None) -> str:
    """A grant as a newer agentkit might store it: a constraint kind this version does not know."""
    body = json.loads(grant(id=body_id or id, max_uses=1).model_dump_json())
    body["where"] = {"amount": {"kind": "glob", "pattern": "1*"}}
    return json.dumps(body)


def store_row(journal: Journal, id: str, body: str) -> None:
    """Insert a grant row by hand, as another agentkit (or a person) might."""
    with journal._tx(write=True) as db:
        db.execute(
            "INSERT INTO agentkit_grants (id, tool_name, body, max_uses, uses, granted_at) VALUES (?, ?, ?, 1, 0, ?)",
            (id, "transfer", body, db.to_db_time(datetime.now(UTC))),
        )


async def test_a_grant_row_this_version_cannot_read_is_listed_unreadable_and_can_be_revoked(journal: Journal) -> None:
    """A row with a constraint kind this version does not know: listed (with the others) as unreadable, why
    named; it approves nothing, its stand-in allows nothing; revoke_grant revokes it."""
    kept = await journal.grant(grant(), tool=Payments())
    store_row(journal, "newer0000001", newer_body())
    sound, newer = await journal.grants()
    assert (sound.id, sound.state) == (kept.id, GrantState.LIVE)
    assert (newer.id, newer.state, newer.uses) == ("newer0000001", GrantState.UNREADABLE, 0)
    assert newer.unreadable is not None
    assert newer.unreadable.startswith("grant 'newer0000001' cannot be read: where.amount: Input tag 'glob'")
    assert not newer.grant.live(datetime.now(UTC), 0)
    assert (await journal.propose(transfer("big", amount=100))).state is ProposalState.PENDING
    revoked = await journal.revoke_grant("newer0000001", "ops", "a kind we do not run")
    assert (revoked.state, revoked.revoked_by, revoked.unreadable) == (GrantState.REVOKED, "ops", newer.unreadable)
    assert [(r.id, r.state) for r in await journal.grants()] == [
        (kept.id, GrantState.LIVE),
        ("newer0000001", GrantState.REVOKED),
    ]


async def test_a_grant_row_whose_body_names_another_grant_is_unreadable_and_approves_nothing(journal: Journal) -> None:
    """A row whose stored grant has another id is not applied under either id: a use would count on another row."""
    body = json.loads(grant(id="elsewhere", max_uses=1).model_dump_json())
    store_row(journal, "copied", json.dumps(body))
    assert (await journal.propose(transfer("a"))).state is ProposalState.PENDING
    [listed] = await journal.grants()
    assert (listed.id, listed.state) == ("copied", GrantState.UNREADABLE)
    assert "its body is grant 'elsewhere'" in (listed.unreadable or "")


@pytest.mark.parametrize(
    "rule",
    [
        Equals.model_construct(kind="equals", value=math.inf),
        Range.model_construct(kind="range", min=None, max=math.inf),
    ],
)
async def test_a_grant_that_would_not_read_back_as_given_is_refused_and_nothing_is_stored(
    journal: Journal, rule: Any
) -> None:
    """A grant made around validation (`model_copy(update=...)`) with infinity would read back as null, or not at
    all: the journal refuses it, and keeps nothing."""
    unchecked = grant().model_copy(update={"where": {"amount": rule}})
    with pytest.raises(JournalError, match="read"):
        await journal.grant(unchecked, tool=Payments())
    assert await journal.grants() == []


async def test_eight_concurrent_proposers_never_take_a_grant_beyond_its_uses(journal_url: str) -> None:
    """Eight processes' journals record matching proposals at once: exactly three are approved; workers run three."""
    setup = open_journal(journal_url)
    try:
        kept = await setup.grant(grant(max_uses=3), tool=Payments())
        journals = [open_journal(journal_url) for _ in range(8)]
        try:
            recorded = await asyncio.gather(*(j.propose(transfer(f"run-{n}")) for n, j in enumerate(journals)))
            tool = Payments()
            reports = await asyncio.gather(*(j.work([tool], until_empty=True) for j in journals))
        finally:
            for opened in journals:
                await opened.close()
        assert sum(r.state is ProposalState.APPROVED for r in recorded) == 3
        assert sum(report.executed for report in reports) == 3
        assert len(tool.calls) == 3
        [listed] = await setup.grants()
        assert (listed.id, listed.uses, listed.state) == (kept.id, 3, GrantState.SPENT)
        assert len(await setup.pending()) == 5
    finally:
        await setup.close()


async def test_a_path_grant_lets_a_worker_run_inside_its_folder_and_never_dot_dot_out(journal: Journal) -> None:
    """The reported case: a grant on /srv/data/ kept in the journal, a worker running what it approves;
    /srv/data/../../etc/passwd (and its encoded spellings) stays pending and no worker runs it."""
    tool = Deleter()
    data = PathPrefix(prefix="/srv/data/")
    kept = await journal.grant(
        Grant.of(tool, where={"path": data}, max_uses=5, allow_irreversible=True, granted_by="ops", reason="data"),
        tool=tool,
    )
    climbs = ["/srv/data/../../etc/passwd", "/srv/data/%2e%2e/%2e%2e/etc/passwd", "/srv/data/..\\..\\etc"]
    held = [await journal.propose(proposed(path)) for path in climbs]
    inside = await journal.propose(proposed("/srv/data/old.csv"))
    assert [record.state for record in held] == [ProposalState.PENDING] * len(climbs)
    assert (inside.state, inside.approved_by) == (ProposalState.APPROVED, f"grant:{kept.id}")
    await journal.work([tool], until_empty=True)
    assert tool.calls == [PathArgs(path="/srv/data/old.csv")]
    [listed] = await journal.grants()
    assert listed.uses == 1
    assert Grant.model_validate_json(listed.grant.model_dump_json()).where == {"path": data}


TOOLS = "tests.support:Payments"


def test_cli_grants_add_list_revoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`agentkit grants add` keeps a grant checked against the tool; `list` shows it; `revoke` ends it."""
    url = str(tmp_path / "journal.db")
    asyncio.run(_create(url))
    add = ["grants", "add", "--db", url, "--tools", "tests.journal.test_grants:TOOLSET", "--tool", "transfer"]
    rules = ["--equals", "account=acme", "--range", "amount=:50", "--max-uses", "2", "--allow-irreversible"]
    assert main([*add, *rules, "--by", "ops", "--reason", "small"]) == 0
    made = capsys.readouterr().out
    assert made.startswith("granted ")
    id = made.split()[1].rstrip(":")
    assert 'transfer where account = "acme", amount in [-, 50.0], irreversible allowed' in made
    assert main(["grants", "list", "--db", url]) == 0
    listed = capsys.readouterr().out
    [row, _, note] = listed.splitlines()[1:]
    assert row.split()[:3] == [id, "live", "0/2"]
    assert note == f"a cell ending in … is cut short: agentkit grants show ID --db {url} prints a grant in full"
    assert main(["grants", "revoke", id, "--db", url, "--by", "ops", "--reason", "done"]) == 0
    assert "revoked" in capsys.readouterr().out


IRREVERSIBLE_ONCE = ["--max-uses", "1", "--allow-irreversible"]


@pytest.mark.parametrize(
    ("argv", "complaint"),
    [
        (["--tool", "transfer", "--equals", "colour=red", "--max-uses", "1"], "'colour', which Transfer"),
        (["--tool", "transfer", "--max-uses", "1"], "allow_irreversible=True"),
        (["--tool", "wire", "--max-uses", "1"], "no tool 'wire'"),
        (["--tool", "transfer", "--range", "amount=x:1", "--max-uses", "1"], "--range takes FIELD=MIN:MAX"),
        (["--tool", "transfer", "--allow-irreversible"], "--max-uses N or --unlimited"),
        (
            ["--tool", "transfer", "--equals", "amount=5", "--range", "amount=0:1000", *IRREVERSIBLE_ONCE],
            "--range 'amount=0:1000': field 'amount' already has a constraint (--equals 'amount=5')",
        ),
        (
            ["--tool", "delete", "--path-prefix", "path=/srv/data", "--path-prefix", "path=/", *IRREVERSIBLE_ONCE],
            "--path-prefix 'path=/': field 'path' already has a constraint (--path-prefix 'path=/srv/data')",
        ),
        (["--tool", "transfer", "--range", "amount=:inf", *IRREVERSIBLE_ONCE], "its ends are finite numbers"),
        (["--tool", "transfer", "--range", "amount=nan:5", *IRREVERSIBLE_ONCE], "its ends are finite numbers"),
        (["--tool", "transfer", "--equals", "amount=Infinity", *IRREVERSIBLE_ONCE], "NaN and infinity have no JSON"),
        (["--tool", "transfer", "--equals", "amount=-1e999", *IRREVERSIBLE_ONCE], "NaN and infinity have no JSON"),
        (["--tool", "transfer", "--one-of", "amount=[1, NaN]", *IRREVERSIBLE_ONCE], "NaN and infinity have no JSON"),
    ],
)
def test_cli_bad_grant_exits_1_and_stores_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], complaint: str
) -> None:
    """A grant on a field the args lack, of an irreversible tool without the flag, two constraints on one field, NaN
    or infinity, or malformed: exit 1, with one line saying why."""
    url = str(tmp_path / "journal.db")
    asyncio.run(_create(url))
    base = ["grants", "add", "--db", url, "--tools", "tests.journal.test_grants:TOOLSET", "--by", "ops"]
    assert main([*base, "--reason", "r", *argv]) == 1
    [error] = capsys.readouterr().err.splitlines()
    assert complaint in error
    assert main(["grants", "list", "--db", url]) == 0
    assert "no grants" in capsys.readouterr().out


def test_cli_path_prefix_is_a_path_grant_and_prefix_says_it_compares_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--path-prefix` keeps a PathPrefix (shown as a path with no '..'); `--prefix` output warns it compares text."""
    url = str(tmp_path / "journal.db")
    asyncio.run(_create(url))
    add = ["grants", "add", "--db", url, "--tools", "tests.journal.test_grants:TOOLSET", "--tool", "delete"]
    rest = ["--max-uses", "1", "--allow-irreversible", "--by", "ops", "--reason", "data"]
    assert main([*add, "--path-prefix", "path=/srv/data/", "--resolve-symlinks", *rest]) == 0
    path_out = capsys.readouterr().out
    assert """delete where path is a path inside "/srv/data/" (no '..', symlinks resolved)""" in path_out
    assert "note:" not in path_out
    assert main([*add, "--prefix", "path=/srv/data/", *rest]) == 0
    text_out = capsys.readouterr().out
    assert 'path starts with the text "/srv/data/"' in text_out
    assert "--prefix compares strings" in text_out
    assert "use --path-prefix" in text_out
    assert main([*add, "--path-prefix", "path=/srv/../etc", *rest]) == 1
    assert "--path-prefix 'path=/srv/../etc': a path prefix is a POSIX folder" in capsys.readouterr().err
    assert main([*add, "--prefix", "path=/srv/", "--resolve-symlinks", *rest]) == 1
    assert "--resolve-symlinks goes with --path-prefix" in capsys.readouterr().err
    assert main(["grants", "list", "--db", url]) == 0
    assert len(capsys.readouterr().out.splitlines()[1:3]) == 2


def test_cli_grants_show_prints_in_full_two_grants_the_list_cuts_alike(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two grants that differ past a listing cell's width: the cells end in an ellipsis, a note says so, and
    `grants show ID` prints each constraint in full; an unknown id exits 1."""
    url = str(tmp_path / "journal.db")
    asyncio.run(_create(url))
    add = ["grants", "add", "--db", url, "--tools", "tests.journal.test_grants:TOOLSET", "--tool", "delete"]
    rest = [*IRREVERSIBLE_ONCE, "--by", "ops", "--reason", "data"]
    folders = ["/srv/data/reports/quarterly/archive/one", "/srv/data/reports/quarterly/archive/two"]
    ids = []
    for folder in folders:
        assert main([*add, "--path-prefix", f"path={folder}", *rest]) == 0
        ids.append(capsys.readouterr().out.split()[1].rstrip(":"))
    assert main(["grants", "list", "--db", url]) == 0
    lines = capsys.readouterr().out.splitlines()
    [first, second] = [line.split("  ops  ")[1] for line in lines[1:3]]
    assert first == second
    assert first.split()[-2].endswith("…")
    assert lines[-1].startswith("a cell ending in … is cut short: agentkit grants show ID")
    for id, folder in zip(ids, folders, strict=True):
        assert main(["grants", "show", id, "--db", url]) == 0
        shown = capsys.readouterr().out.splitlines()
        assert shown[:3] == [f"id:        {id}", "state:     live", "tool:      delete"]
        assert f"""allows:    path is a path inside "{folder}" (no '..')""" in shown
        assert "uses:      0/1" in shown
    assert main(["grants", "show", "nosuch", "--db", url]) == 1
    assert "no grant 'nosuch'" in capsys.readouterr().err


def test_cli_grants_list_shows_an_unreadable_row_and_revoke_revokes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A row this version cannot read: `list` exits 0 with it marked unreadable (allows "?", never "any args") and
    why below, the others as usual; `show` says so; `revoke` revokes it."""
    url = str(tmp_path / "journal.db")
    asyncio.run(_create(url))
    add = ["grants", "add", "--db", url, "--tools", "tests.journal.test_grants:TOOLSET", "--tool", "transfer"]
    assert main([*add, "--range", "amount=:5", *IRREVERSIBLE_ONCE, "--by", "ops", "--reason", "small"]) == 0
    sound = capsys.readouterr().out.split()[1].rstrip(":")
    with sqlite3.connect(url) as conn:
        conn.execute(
            "INSERT INTO agentkit_grants (id, tool_name, body, max_uses, uses, granted_at) VALUES (?, ?, ?, 1, 0, ?)",
            ("newer0000001", "transfer", newer_body(), datetime.now(UTC).isoformat()),
        )
    assert main(["grants", "list", "--db", url]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert err == ""
    assert [line.split()[:4] for line in lines[1:3]] == [
        [sound, "live", "0/1", "-"],
        ["newer0000001", "unreadable", "0/?", "?"],
    ]
    assert lines[2].split()[5] == "?"
    assert "any args" not in out
    assert lines[4].startswith("unreadable: grant 'newer0000001' cannot be read: where.amount: Input tag 'glob'")
    assert main(["grants", "show", "newer0000001", "--db", url]) == 0
    shown = capsys.readouterr().out
    assert "allows:    ? (this version cannot read what it allows; it approves nothing here)" in shown
    assert main(["grants", "revoke", "newer0000001", "--db", url, "--by", "ops", "--reason", "unknown kind"]) == 0
    assert capsys.readouterr().out == "revoked newer0000001 (by ops: unknown kind)\n"
    assert main(["grants", "list", "--db", url]) == 0
    assert capsys.readouterr().out.splitlines()[2].split()[:2] == ["newer0000001", "revoked"]


TOOLSET = [Payments(), Deleter()]


async def _create(url: str) -> None:
    journal = open_journal(url)
    await journal.close()
