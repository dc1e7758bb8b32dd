"""The web inbox's safety invariants (hypothesis, over real HTTP): for any sequence of forms posted and workers
run, the call runs at most once, and only after a reviewer's valid approval (amended or not) that no rejection
overtook, as approved; any task or item text is shown as the text it is, never as markup; and an amend field a
browser posts back as shown is never amended, whatever text it holds."""

from __future__ import annotations

import html
import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agentkit.journal import ProposalState
from tests.inbox.support import ALICE, BOB, InboxServer, as_a_browser_posts, csrf_of

pytest.importorskip("starlette", reason="the inbox extra is not installed")

pytestmark = pytest.mark.slow

ACTIONS = [
    "approve alice",
    "approve bob",
    "amend alice",
    "reject alice",
    "reject bob",
    "approve stale",
    "amend anonymous",
    "work",
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InboxServer]:
    path: Path = tmp_path_factory.mktemp("inbox") / "journal.db"
    with InboxServer(str(path)) as running:
        yield running


def expected(state: ProposalState, action: str) -> tuple[int, ProposalState]:
    """The status a form gets and the state after it, as the journal's lifecycle allows."""
    verb, who = action.split()
    if who == "anonymous":
        return 401, state
    if who == "stale":
        return 403, state
    if verb in ("approve", "amend"):
        return (303, ProposalState.APPROVED) if state is ProposalState.PENDING else (409, state)
    if state in (ProposalState.PENDING, ProposalState.APPROVED):
        return 303, ProposalState.REJECTED
    return 409, state


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(actions=st.lists(st.sampled_from(ACTIONS), max_size=8))
def test_any_sequence_of_decisions_runs_the_call_at_most_once_and_only_when_approved(
    server: InboxServer, actions: list[str]
) -> None:
    """Whatever reviewers post (twice, late, stale, without a token) and whenever workers run, the call runs once
    exactly when an approval stood when a worker looked, and never otherwise."""
    to = f"{uuid.uuid4().hex}@example.com"
    recipient = to

    id = server.propose(to)
    sent: list[str] = []
    with server.client(ALICE) as alice, server.client(BOB) as bob, server.client(None) as anonymous:
        stale = csrf_of(alice.get("/").text)
        server.clock.now += 3601
        forms = {"alice": (alice, csrf_of(alice.get("/").text)), "bob": (bob, csrf_of(bob.get("/").text))}
        forms |= {"stale": (alice, stale), "anonymous": (anonymous, stale)}
        state = ProposalState.PENDING
        for action in actions:
            if action == "work":
                server.work(sent)
                state = ProposalState.EXECUTED if state is ProposalState.APPROVED else state
                continue
            verb, who = action.split()
            http, csrf = forms[who]
            status, state_after = expected(state, action)
            form = {"csrf": csrf, "reason": "no", "arg.to": f"amended-{to}"}
            response = http.post(f"/proposals/{id}/{verb}", data=form)
            assert response.status_code == status, action
            if verb == "amend" and status == 303:
                recipient = f"amended-{to}"
            state = state_after
    server.work(sent)
    final = ProposalState.EXECUTED if state is ProposalState.APPROVED else state
    assert server.get(id).state is final
    assert sent == ([recipient] if final is ProposalState.EXECUTED else [])


def shown(page: str, id: str, kind: str) -> list[str]:
    """The texts of proposal ``id``'s ``<pre class=kind>`` elements, unescaped."""
    found = re.search(rf'<section class="proposal [a-z]+" id="p-{re.escape(id)}".*?</section>', page, re.DOTALL)
    assert found is not None, f"the page does not show proposal {id}"
    return [html.unescape(text) for text in re.findall(rf'<pre class="{kind}">(.*?)</pre>', found.group(0), re.DOTALL)]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(task=st.text(min_size=1), text=st.text(st.characters(exclude_categories=())))
@example(task='<script>alert("t")</script>', text="<b>a\udc80</b> &amp;")
def test_any_task_or_item_text_is_shown_as_the_text_it_is(server: InboxServer, task: str, text: str) -> None:
    """Whatever a run's task and a tool's item hold (markup, quotes, entities, a lone surrogate), the page shows
    exactly that text: escaped, so it is never markup, and a lone surrogate as U+FFFD."""
    id = server.record_run(task, text)
    with server.client(ALICE) as alice:
        page = alice.get("/").text
        assert alice.post(f"/proposals/{id}/reject", data={"csrf": csrf_of(page), "reason": "seen"}).status_code == 303
    [item] = shown(page, id, "item")
    assert shown(page, id, "task") == [task]
    assert json.loads(item) == {"id": "p:1", "text": re.sub("[\ud800-\udfff]", "\ufffd", text)}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.text(st.characters(exclude_categories=())))
@example(body="Hi,\r\nsee \udc80 below\n\0")
def test_any_text_left_as_shown_in_the_amend_form_is_not_amended(server: InboxServer, body: str) -> None:
    """Whatever a text argument holds (line breaks, a NUL, a lone surrogate, markup), posting the amend form as a
    browser does with only another field edited amends that field alone; the text stays as proposed."""
    id = server.propose(f"{uuid.uuid4().hex}@example.com", body=body)
    with server.client(ALICE) as alice:
        page = alice.get("/").text
        form = as_a_browser_posts(page, id) | {"csrf": csrf_of(page), "arg.copies": "2"}
        assert alice.post(f"/proposals/{id}/amend", data=form).status_code == 303
    record = server.get(id)
    assert (record.args["body"], record.args["copies"], record.amended_fields) == (body, 2, ("copies",))
