"""The web inbox over plain HTTP, served by uvicorn over a real journal (SQLite and PostgreSQL): headers,
tokens, CSRF, escaping, and decisions refused with nothing changed. The browser tests are in
``tests/inbox/test_browser.py``; ``agentkit inbox`` itself in ``tests/cli/test_inbox_cli.py``."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator

import pytest

from agentkit._inbox_web import _app
from agentkit._inbox_web._app import DECIDED_SHOWN
from agentkit._inbox_web._security import SECURITY_HEADERS
from agentkit.decisions import CallSeen, Evidence
from agentkit.journal import Journal, ProposalState, TransitionRefused
from tests.inbox.support import ALICE, BOB, InboxServer, as_a_browser_posts, csrf_of

pytest.importorskip("starlette", reason="the inbox extra is not installed")

HOSTILE = '<script>window.pwned=1</script><img src=x onerror="window.pwned=2">'
SEARCHED = CallSeen(round=1, tool_name="search", digest="a" * 64, ran=True, item_ids=("search:1", "search:2"))
REFUSED = CallSeen(round=2, tool_name="delete", digest="b" * 64, ran=False)
EVIDENCE = Evidence(rounds=(1, 2), calls=(SEARCHED, REFUSED))


def section(page: str, id: str) -> str:
    """The part of ``page`` that shows proposal ``id``."""
    found = re.search(rf'<section class="proposal [a-z]+" id="p-{re.escape(id)}".*?</section>', page, re.DOTALL)
    assert found is not None, f"the page does not show proposal {id}"
    return found.group(0)


def cells(part: str, row: str) -> list[dict[str, str]]:
    """Each ``<tr class=row>`` in ``part`` as its cells' text by their class (tags dropped, entities kept)."""
    return [
        {
            name: re.sub(r"<[^>]*>", "", text).strip()
            for name, text in re.findall(r'<td class="([a-z]+)">(.*?)</td>', tr, re.DOTALL)
        }
        for tr in re.findall(rf'<tr class="{row}">(.*?)</tr>', part, re.DOTALL)
    ]


@pytest.fixture
def server(journal_url: str) -> Iterator[InboxServer]:
    with InboxServer(journal_url) as running:
        yield running


def test_every_response_carries_a_csp_without_inline_script(server: InboxServer) -> None:
    """The page, its script and a refusal all carry a CSP that allows only the inbox's own script and style."""
    with server.client() as http, server.client(None) as anonymous:
        responses = [http.get("/"), http.get("/static/inbox.js"), anonymous.get("/"), http.get("/nowhere")]
    for response in responses:
        csp = response.headers["content-security-policy"]
        assert "script-src 'self'" in csp
        assert "style-src 'self'" in csp
        assert "default-src 'none'" in csp
        assert "frame-ancestors 'none'" in csp
        assert "unsafe-inline" not in csp
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "no-referrer"
    assert [r.status_code for r in responses] == [200, 200, 401, 404]


def test_the_page_holds_no_inline_script_or_style(server: InboxServer) -> None:
    """The page loads its script and style from the inbox; it has no inline script, handler or style."""
    server.propose("ops@example.com")
    with server.client() as http:
        page = http.get("/").text
    assert re.findall(r"<script[^>]*>", page) == ['<script src="/static/inbox.js" defer>']
    assert "style=" not in page
    assert "<style" not in page
    assert re.search(r"\son[a-z]+=", page) is None


def test_a_request_without_a_token_is_refused_and_changes_nothing(server: InboxServer) -> None:
    """Without a token, or with a wrong one, every route answers 401 and no decision is made."""
    id = server.propose("ops@example.com")
    with server.client() as http:
        csrf = csrf_of(http.get("/").text)
    for token in (None, "not-a-reviewer-token-at-all", ALICE[:-1]):
        with server.client(token) as stranger:
            assert stranger.get("/").status_code == 401
            assert stranger.get("/stamp").status_code == 401
            assert stranger.get("/static/inbox.js").status_code == 401
            assert stranger.get("/?token=wrong-token-0123456789").status_code == 401
            refused = stranger.post(f"/proposals/{id}/approve", data={"csrf": csrf})
            assert refused.status_code == 401
            assert "needs a reviewer's token" in refused.text
    assert server.get(id).state is ProposalState.PENDING
    assert len(server.history(id)) == 1


def test_approve_records_the_reviewer_that_the_token_names(server: InboxServer) -> None:
    """A form posted with bob's token approves the proposal as ``bob``."""
    id = server.propose("ops@example.com")
    with server.client(BOB) as http:
        response = http.post(f"/proposals/{id}/approve", data={"csrf": csrf_of(http.get("/").text)})
    assert response.status_code == 303
    record = server.get(id)
    assert (record.state, record.approved_by) == (ProposalState.APPROVED, "bob")
    assert server.history(id)[-1].actor == "bob"


def test_reject_records_the_reason(server: InboxServer) -> None:
    """A rejection keeps the reviewer's reason."""
    id = server.propose("ops@example.com")
    with server.client() as http:
        csrf = csrf_of(http.get("/").text)
        response = http.post(f"/proposals/{id}/reject", data={"csrf": csrf, "reason": "not this week"})
        assert response.status_code == 303
        assert "rejected by alice: not this week" in http.get("/").text
    record = server.get(id)
    assert (record.state, record.rejected_by, record.reason) == (ProposalState.REJECTED, "alice", "not this week")


def test_a_stale_csrf_token_is_refused_with_nothing_changed(server: InboxServer) -> None:
    """A form shown longer ago than the CSRF tokens' lifetime is refused (403) and the proposal stays pending."""
    id = server.propose("ops@example.com")
    with server.client() as http:
        csrf = csrf_of(http.get("/").text)
        server.clock.now += 3601
        refused = http.post(f"/proposals/{id}/approve", data={"csrf": csrf})
        assert refused.status_code == 403
        assert "this form is stale" in refused.text
        assert http.post(f"/proposals/{id}/approve", data={"csrf": csrf_of(refused.text)}).status_code == 303
    assert [t.to_state for t in server.history(id)] == [ProposalState.PENDING, ProposalState.APPROVED]


@pytest.mark.parametrize("csrf", [None, "", "garbage", "1000000.0123abcd"])
def test_a_form_without_a_valid_csrf_token_is_refused(server: InboxServer, csrf: str | None) -> None:
    """A form with no CSRF token, or one this inbox did not sign, changes nothing."""
    id = server.propose("ops@example.com")
    with server.client() as http:
        refused = http.post(f"/proposals/{id}/reject", data={"reason": "x"} | ({} if csrf is None else {"csrf": csrf}))
    assert refused.status_code == 403
    assert "Nothing changed" in refused.text
    assert server.get(id).state is ProposalState.PENDING


def test_a_csrf_token_shown_to_another_reviewer_is_refused(server: InboxServer) -> None:
    """A token from alice's page does not protect a form bob posts."""
    id = server.propose("ops@example.com")
    with server.client(ALICE) as alice, server.client(BOB) as bob:
        csrf = csrf_of(alice.get("/").text)
        assert bob.post(f"/proposals/{id}/approve", data={"csrf": csrf}).status_code == 403
    assert server.get(id).state is ProposalState.PENDING


def test_deciding_twice_is_refused_as_in_the_cli(server: InboxServer) -> None:
    """A second decision on a decided proposal is refused (409) with the journal's reason; one approval stays."""
    id = server.propose("ops@example.com")
    with server.client(ALICE) as alice, server.client(BOB) as bob:
        alice_csrf, bob_csrf = csrf_of(alice.get("/").text), csrf_of(bob.get("/").text)
        assert alice.post(f"/proposals/{id}/approve", data={"csrf": alice_csrf}).status_code == 303
        again = bob.post(f"/proposals/{id}/approve", data={"csrf": bob_csrf})
        late = bob.post(f"/proposals/{id}/reject", data={"csrf": bob_csrf, "reason": "late"})
    assert again.status_code == 409
    assert f"cannot approve proposal {id!r}: it is approved" in again.text.replace("&#39;", "'")
    assert late.status_code == 303  # an approved call may still be rejected before it runs, as in the CLI
    assert [(t.to_state, t.actor) for t in server.history(id)][1:] == [
        (ProposalState.APPROVED, "alice"),
        (ProposalState.REJECTED, "bob"),
    ]


def test_a_rejection_without_a_reason_is_refused(server: InboxServer) -> None:
    """Rejecting needs a reason: an empty or blank one is refused (400) and the proposal stays pending."""
    id = server.propose("ops@example.com")
    with server.client() as http:
        csrf = csrf_of(http.get("/").text)
        for reason in ("", "   "):
            refused = http.post(f"/proposals/{id}/reject", data={"csrf": csrf, "reason": reason})
            assert refused.status_code == 400
            assert "reason must be a non-empty string" in refused.text
    assert server.get(id).state is ProposalState.PENDING


def test_an_unknown_proposal_or_decision_is_refused(server: InboxServer) -> None:
    """A form for a proposal the journal lacks is 404, as is a decision the inbox does not offer."""
    id = server.propose("ops@example.com")
    with server.client() as http:
        csrf = csrf_of(http.get("/").text)
        assert http.post("/proposals/nope/approve", data={"csrf": csrf}).status_code == 404
        assert http.post(f"/proposals/{id}/execute", data={"csrf": csrf}).status_code == 404
        assert http.get("/static/../_app.py").status_code == 404
    assert server.get(id).state is ProposalState.PENDING


def test_model_written_text_is_escaped_in_the_page(server: InboxServer) -> None:
    """Rationale and args holding markup appear as escaped text, never as tags."""
    server.propose(to=HOSTILE, rationale=HOSTILE, body=HOSTILE)
    with server.client() as http:
        page = http.get("/").text
    assert "<script>window" not in page
    assert "<img" not in page
    escaped = "&lt;script&gt;window.pwned=1&lt;/script&gt;&lt;img src=x onerror=&#34;window.pwned=2&#34;&gt;"
    assert page.count(escaped) == 5  # the rationale, two args, and their two fields in the amend form


def test_the_stamp_changes_when_a_worker_or_another_reviewer_acts(server: InboxServer) -> None:
    """``/stamp``, which the page polls, changes when a proposal arrives or is decided elsewhere."""
    with server.client() as http:
        empty = http.get("/stamp").text
        id = server.propose("ops@example.com")
        proposed = http.get("/stamp").text

        async def approve(journal: Journal) -> None:
            await journal.approve(id, "carol")

        server.run(approve)
        approved = http.get("/stamp").text
        assert http.get("/stamp").text == approved
    assert len({empty, proposed, approved}) == 3


def test_the_page_shows_every_pending_proposal_and_the_newest_decided_ones(server: InboxServer) -> None:
    """With more decided proposals than the page shows (``DECIDED_SHOWN``), the page holds every pending one and
    the decided ones proposed last, newest first; the oldest decided one is left out."""
    ids = [server.propose(f"user{n}@example.com") for n in range(DECIDED_SHOWN + 2)]

    async def decide(journal: Journal) -> None:
        for id in ids[:-1]:
            await journal.reject(id, "carol", reason="not now")

    server.run(decide)
    with server.client() as http:
        page = http.get("/").text
    shown = re.findall(r'<section class="proposal [a-z]+" id="p-([^"]+)"', page)
    assert shown == [ids[-1], *reversed(ids[1:-1])]


def test_the_stamp_counts_changes_without_listing_the_proposals(server: InboxServer) -> None:
    """``/stamp``, which every open page asks for every ``poll`` seconds, does not read the proposals (their
    number only grows): it stays the same while nothing changes, and changes with each proposal and decision."""

    async def unlisted(journal: Journal) -> None:
        def refuse(*args: object, **kwargs: object) -> None:
            raise AssertionError("the stamp listed the proposals")

        vars(journal)["_proposals"] = refuse  # the stamp must not call it

    server.run(unlisted)
    seen = []
    with server.client() as http:
        for n in range(3):
            seen.append(http.get("/stamp").text)
            assert http.get("/stamp").text == seen[-1]
            id = server.propose(f"user{n}@example.com")
            seen.append(http.get("/stamp").text)

            async def approve(journal: Journal, id: str = id) -> None:
                await journal.approve(id, "carol")

            server.run(approve)
    assert len(set(seen)) == len(seen)


def test_amend_approves_the_changed_args_with_their_lineage(server: InboxServer) -> None:
    """The amend form approves the args as changed (text as it is, other values as JSON), recording who changed what."""
    id = server.propose("all@example.com", body="hi")
    with server.client(BOB) as http:
        csrf = csrf_of(http.get("/").text)
        form = {"csrf": csrf, "arg.to": "team@example.com", "arg.copies": "3", "arg.body": "hi"}
        assert http.post(f"/proposals/{id}/amend", data=form).status_code == 303
    record = server.get(id)
    assert record.state is ProposalState.APPROVED
    assert record.args == {"to": "team@example.com", "copies": 3, "body": "hi"}
    assert (record.approved_by, record.amended_by, record.amended_fields) == ("bob", "bob", ("copies", "to"))
    assert record.original_args_json == '{"body":"hi","copies":1,"to":"all@example.com"}'


def test_an_amend_form_that_changes_nothing_approves_the_call_as_proposed(server: InboxServer) -> None:
    """Posting the amend form as shown approves the proposed call, with no amendment recorded."""
    id = server.propose("all@example.com")
    with server.client() as http:
        form = {"csrf": csrf_of(http.get("/").text), "arg.to": "all@example.com", "arg.copies": "1", "arg.body": ""}
        assert http.post(f"/proposals/{id}/amend", data=form).status_code == 303
    record = server.get(id)
    assert (record.state, record.amended_by, record.original_args_json) == (ProposalState.APPROVED, None, None)


@pytest.mark.parametrize("body", ["Hi team,\nthe release is Friday.\r\n-- bot", "one\rtwo\0\n", "\n"])
def test_an_untouched_multi_line_field_beside_an_edited_one_is_not_amended(server: InboxServer, body: str) -> None:
    """A browser posts a one-line field holding a multi-line text without its line breaks (and a NUL as U+FFFD); left
    untouched beside an edited field, it is not amended: only the edited field is."""
    id = server.propose("all@example.com", body=body)
    with server.client() as http:
        page = http.get("/").text
        form = as_a_browser_posts(page, id) | {"csrf": csrf_of(page), "arg.to": "team@example.com"}
        assert form["arg.body"] != body  # what the browser sends is not the value: no line breaks
        assert http.post(f"/proposals/{id}/amend", data=form).status_code == 303
    record = server.get(id)
    assert record.args == {"to": "team@example.com", "body": body, "copies": 1}
    assert (record.state, record.amended_fields) == (ProposalState.APPROVED, ("to",))


def test_an_untouched_field_holding_a_lone_surrogate_is_not_amended(server: InboxServer) -> None:
    """A lone surrogate, which the page carries as U+FFFD and a browser posts back so, is no change of the field."""
    id = server.propose("all@example.com", body="caf\udce9 menu")
    with server.client() as http:
        page = http.get("/").text
        form = as_a_browser_posts(page, id) | {"csrf": csrf_of(page), "arg.copies": "2"}
        assert form["arg.body"] == "caf\ufffd menu"
        assert http.post(f"/proposals/{id}/amend", data=form).status_code == 303
    record = server.get(id)
    assert (record.args["body"], record.args["copies"], record.amended_fields) == ("caf\udce9 menu", 2, ("copies",))


def test_an_edited_multi_line_field_is_amended_to_what_was_posted(server: InboxServer) -> None:
    """A multi-line field the reviewer did change is amended to the text posted, as any other edit."""
    id = server.propose("all@example.com", body="line one\nline two")
    with server.client() as http:
        page = http.get("/").text
        form = as_a_browser_posts(page, id) | {"csrf": csrf_of(page), "arg.body": "line one, line 2"}
        assert http.post(f"/proposals/{id}/amend", data=form).status_code == 303
    record = server.get(id)
    assert (record.args["body"], record.amended_fields) == ("line one, line 2", ("body",))


@pytest.mark.parametrize(
    ("field", "text", "message"),
    [
        ("arg.copies", "many", "argument 'copies': 'many' is not a JSON value"),
        ("arg.copies", '"many"', "copies"),
        ("arg.bogus", "1", "bogus"),
        ("arg.copies", "[" * 50_000, "argument 'copies': '[[[["),
        # past the recursion limit of most processes (the message then says it is not JSON); the 400 is the point
        ("arg.copies", "[" * 5_000 + "]" * 5_000, "copies"),
    ],
    ids=["not-json", "wrong-type", "no-such-field", "nested-unclosed", "nested-deeper-than-python-recurses"],
)
def test_an_amendment_that_does_not_validate_is_refused_with_nothing_changed(
    server: InboxServer, field: str, text: str, message: str
) -> None:
    """An amended value that is not JSON, does not validate as the args type, or names no field is refused (400)."""
    id = server.propose("all@example.com")
    with server.client() as http:
        refused = http.post(f"/proposals/{id}/amend", data={"csrf": csrf_of(http.get("/").text), field: text})
    assert refused.status_code == 400
    assert "Nothing changed" in refused.text
    assert message in refused.text.replace("&#39;", "'")
    record = server.get(id)
    assert (record.state, record.args["copies"], record.amended_by) == (ProposalState.PENDING, 1, None)
    assert len(server.history(id)) == 1


def test_amending_a_decided_proposal_is_refused(server: InboxServer) -> None:
    """An amendment of a proposal another reviewer already approved is refused (409); the approved call stays."""
    id = server.propose("all@example.com")
    with server.client(ALICE) as alice, server.client(BOB) as bob:
        bob_csrf = csrf_of(bob.get("/").text)
        assert alice.post(f"/proposals/{id}/approve", data={"csrf": csrf_of(alice.get("/").text)}).status_code == 303
        refused = bob.post(f"/proposals/{id}/amend", data={"csrf": bob_csrf, "arg.to": "x@example.com"})
    assert refused.status_code == 409
    record = server.get(id)
    assert (record.args["to"], record.approved_by, record.amended_by) == ("all@example.com", "alice", None)


def test_the_page_shows_a_pending_proposals_evidence_by_reference(server: InboxServer) -> None:
    """Each earlier call the executor had seen is a row: its round, tool, whether it ran, item ids and digest."""
    id = server.propose("ops@example.com", rationale="search:2 lists them", evidence=EVIDENCE)
    with server.client() as http:
        shown = section(http.get("/").text, id)
    assert '<pre class="rationale">search:2 lists them</pre>' in shown
    assert "rounds before it: 1, 2; 2 earlier calls" in shown
    assert cells(shown, "call") == [
        {"round": "1", "tool": "search", "ran": "ran", "items": "search:1, search:2", "digest": "a" * 12},
        {"round": "2", "tool": "delete", "ran": "did not run", "items": "-", "digest": "b" * 12},
    ]
    assert f'title="{"a" * 64}"' in shown  # the whole digest names the call in the run's journal


def test_a_proposal_without_evidence_says_it_was_not_recorded(server: InboxServer) -> None:
    """A proposal recorded without evidence shows that, and no table of calls."""
    id = server.propose("ops@example.com")
    with server.client() as http:
        shown = section(http.get("/").text, id)
    assert '<p class="rounds">not recorded</p>' in shown
    assert 'class="calls"' not in shown
    assert 'class="task"' not in shown


def test_model_written_evidence_is_escaped_in_the_page(server: InboxServer) -> None:
    """Item ids and a tool name holding markup show as escaped text, never as tags."""
    hostile = CallSeen(round=1, tool_name=HOSTILE, digest="c" * 64, ran=True, item_ids=(HOSTILE, "ok:1"))
    id = server.propose("ops@example.com", evidence=Evidence(rounds=(1,), calls=(hostile,)))
    with server.client() as http:
        page = http.get("/").text
    assert "<script>window" not in page
    assert "<img" not in page
    [row] = cells(section(page, id), "call")
    assert (html.unescape(row["tool"]), html.unescape(row["items"])) == (HOSTILE, f"{HOSTILE}, ok:1")


def test_the_page_shows_the_runs_task_and_the_text_of_the_items_the_evidence_names(server: InboxServer) -> None:
    """A proposal of a run the journal recorded shows the run's task, and each item its earlier calls returned as
    readable JSON: what a reviewer needs to judge the call, not only ids."""
    id = server.record_run("Find the passage that calls Pluto a planet.", "Pluto is the ninth planet.")
    with server.client() as http:
        shown = section(http.get("/").text, id)
    assert '<pre class="task">Find the passage that calls Pluto a planet.</pre>' in shown
    assert cells(shown, "call")[0]["items"] == "p:1"
    [returned] = re.findall(r'<details class="returned" data-round="1" open>(.*?)</details>', shown, re.DOTALL)
    assert "round 1: find returned 1 item</summary>" in returned
    items = [html.unescape(item) for item in re.findall(r'<pre class="item">(.*?)</pre>', returned, re.DOTALL)]
    assert items == ['{\n  "id": "p:1",\n  "text": "Pluto is the ninth planet."\n}']


def test_a_task_and_items_holding_markup_are_shown_escaped(server: InboxServer) -> None:
    """A task and an item's text holding ``<script>`` and ``<img onerror>`` show as the text they are, never as tags."""
    id = server.record_run(f"task {HOSTILE}", HOSTILE)
    with server.client() as http:
        page = http.get("/").text
    assert "<script>window" not in page
    assert "<img" not in page
    shown = section(page, id)
    [task] = re.findall(r'<pre class="task">(.*?)</pre>', shown, re.DOTALL)
    [item] = re.findall(r'<pre class="item">(.*?)</pre>', shown, re.DOTALL)
    assert html.unescape(task) == f"task {HOSTILE}"
    assert json.loads(html.unescape(item))["text"] == HOSTILE


def test_items_of_a_run_the_journal_does_not_hold_are_said_to_be_missing(server: InboxServer) -> None:
    """A proposal whose evidence names calls of a run this journal never recorded shows its ids and why no items
    are shown, and no task; it can still be decided."""
    id = server.propose("ops@example.com", evidence=EVIDENCE)
    with server.client() as http:
        shown = section(http.get("/").text, id)
        decided = http.post(f"/proposals/{id}/approve", data={"csrf": csrf_of(http.get("/").text)})
    assert '<pre class="task">not recorded</pre>' in shown
    [unseen] = re.findall(r'<p class="unseen">(.*?)</p>', shown, re.DOTALL)
    assert unseen.startswith("the items are not shown: ")
    assert "&#39;r1&#39;" in unseen
    assert 'class="returned"' not in shown
    assert decided.status_code == 303


def test_an_inbox_decision_records_the_tokens_reviewer_as_verified(server: InboxServer) -> None:
    """Approve, reject and amend through the inbox record the token's reviewer as the verified identity."""
    approved, rejected, amended = (server.propose(f"{n}@example.com") for n in ("a", "r", "m"))
    with server.client(BOB) as bob, server.client(ALICE) as alice:
        assert bob.post(f"/proposals/{approved}/approve", data={"csrf": csrf_of(bob.get("/").text)}).status_code == 303
        form = {"csrf": csrf_of(alice.get("/").text), "reason": "no"}
        assert alice.post(f"/proposals/{rejected}/reject", data=form).status_code == 303
        form = {"csrf": csrf_of(bob.get("/").text), "arg.copies": "2"}
        assert bob.post(f"/proposals/{amended}/amend", data=form).status_code == 303
    decided = [server.history(id)[-1] for id in (approved, rejected, amended)]
    assert [(t.to_state, t.actor, t.verified) for t in decided] == [
        (ProposalState.APPROVED, "bob", "bob"),
        (ProposalState.REJECTED, "alice", "alice"),
        (ProposalState.APPROVED, "bob", "bob"),
    ]


def test_the_history_shows_the_name_given_and_the_verified_identity(server: InboxServer) -> None:
    """Each decision's row shows who it names and who was verified: the token's reviewer, or the journal's user."""
    id = server.propose("ops@example.com")

    async def carol_approves(journal: Journal) -> None:
        await journal.approve(id, "carol")  # outside the inbox: the journal vouches with its own user

    with server.client(BOB) as bob:
        form = {"csrf": csrf_of(bob.get("/").text), "reason": "late"}
        server.run(carol_approves)
        assert bob.post(f"/proposals/{id}/reject", data=form).status_code == 303
        shown = section(bob.get("/").text, id)
    journal_user = server.history(id)[1].verified
    assert journal_user not in (None, "carol")
    rows = re.findall(r'<td class="by">(.*?)</td>\s*<td class="verified">(.*?)</td>', shown)
    assert rows == [("run:r1", "-"), ("carol", journal_user), ("bob", "bob")]
    assert "<th>by</th><th>verified</th>" in shown


def test_a_journal_requiring_verified_approvers_accepts_the_inbox_reviewer(server: InboxServer) -> None:
    """Under ``require_verified_approvers``, an inbox decision passes (its reviewer is verified by the token)
    while a decision naming someone the journal cannot vouch for is refused."""
    id, other = server.propose("ops@example.com"), server.propose("all@example.com")

    async def require(journal: Journal) -> None:
        await journal.require_verified_approvers()

    async def carol_approves(journal: Journal) -> None:
        await journal.approve(other, "carol")

    server.run(require)
    with pytest.raises(TransitionRefused, match="requires the name given to be the identity it can verify"):
        server.run(carol_approves)
    with server.client(BOB) as bob:
        assert bob.post(f"/proposals/{id}/approve", data={"csrf": csrf_of(bob.get("/").text)}).status_code == 303
    assert (server.get(id).state, server.get(other).state) == (ProposalState.APPROVED, ProposalState.PENDING)
    assert server.history(id)[-1].verified == "bob"


def test_the_page_shows_where_a_proposals_values_came_from_escaped(server: InboxServer) -> None:
    """A proposal whose address first appeared in untrusted content says so, by field and source, and held by
    the policy; the value (written by a third party) shows as escaped text."""
    from agentkit.provenance import ArgOrigin, CallProvenance, Origin

    origin = Origin(round=1, tool_name="read_inbox", digest="d" * 64)
    marked = ArgOrigin(path="to", value=HOSTILE, origin=origin)
    provenance = CallProvenance(untrusted=(origin,), from_untrusted=(marked,), held=True)
    id = server.propose("ops@example.com", evidence=Evidence(rounds=(1,), provenance=provenance))
    with server.client() as http:
        page = http.get("/").text
    shown = section(page, id)
    assert '<div class="provenance tainted">' in shown
    assert "untrusted content read before this call: round 1 read_inbox" in shown
    assert "held by the provenance policy" in shown
    assert "first appeared in untrusted content (round 1 read_inbox), not in the task" in shown
    assert "<script>window" not in page
    clean = server.propose("bob@example.com", evidence=Evidence(rounds=(1,), provenance=CallProvenance()))
    with server.client() as http:
        assert "no untrusted content was read before this call" in section(http.get("/").text, clean)


def test_the_page_shows_a_steered_value_as_read_after_untrusted_content(server: InboxServer) -> None:
    """A value marked steered says which trusted read it came from, and that untrusted content preceded it."""
    from agentkit.provenance import ArgOrigin, CallProvenance, Origin

    untrusted = Origin(round=1, tool_name="read_inbox", digest="d" * 64)
    hotels = Origin(round=2, tool_name="list_hotels", digest="e" * 64)
    marked = ArgOrigin(path="hotel", value="Luxury Palace", origin=hotels, steered=True)
    provenance = CallProvenance(untrusted=(untrusted,), from_untrusted=(marked,))
    id = server.propose("ops@example.com", evidence=Evidence(rounds=(2,), provenance=provenance))
    with server.client() as http:
        shown = section(http.get("/").text, id)
    assert '<li class="mark steered">' in shown
    assert "first appeared in a trusted result read after untrusted content (round 2 list_hotels)" in shown


def test_a_lone_surrogate_in_a_pending_or_decided_proposal_shows_as_u_fffd(server: InboxServer) -> None:
    """A lone surrogate (which a journal keeps exactly) in the args, rationale or note of a pending and of a decided
    proposal shows as U+FFFD; the page, and a refusal shown on it, still load for every reviewer."""
    pending = server.propose("pending\udcff@example.com", rationale="why \udcff pending", body="\ud800")
    decided = server.propose("decided\udc80@example.com", rationale="why \udc80 decided")

    async def reject(journal: Journal) -> None:
        await journal.reject(decided, "carol", "not \udc80 this")

    server.run(reject)
    with server.client(ALICE) as alice, server.client(BOB) as bob:
        page = alice.get("/")
        assert bob.get("/").status_code == 200
        refused = alice.post(f"/proposals/{decided}/reject", data={"csrf": csrf_of(page.text), "reason": "again"})
    assert page.status_code == 200
    assert refused.status_code == 409
    assert "Nothing changed" in refused.text
    shown, done = section(page.text, pending), section(page.text, decided)
    assert "pending\ufffd@example.com" in shown
    assert "why \ufffd pending" in shown
    assert "decided\ufffd@example.com" in done
    assert "why \ufffd decided" in done
    assert "not \ufffd this" in done
    assert section(refused.text, pending) == shown


def test_a_request_that_fails_answers_500_with_the_security_headers(
    server: InboxServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A handler that raises is answered 500 with every header the inbox sends, and without the error's text."""

    async def fail(*args: object) -> None:
        raise RuntimeError("the secret cause")

    monkeypatch.setitem(_app.DECISIONS, "approve", fail)
    id = server.propose("ops@example.com")
    with server.client() as http:
        failed = http.post(f"/proposals/{id}/approve", data={"csrf": csrf_of(http.get("/").text)})
    assert failed.status_code == 500
    assert {name: failed.headers.get(name) for name in SECURITY_HEADERS} == dict(SECURITY_HEADERS)
    assert "secret cause" not in failed.text
    assert server.get(id).state is ProposalState.PENDING
