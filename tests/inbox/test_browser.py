"""The web inbox in a real browser: headless Chromium (Debian's, driven by Selenium through its chromedriver).

Each test serves the inbox over a real journal and clicks through the page as a reviewer does; the
approved call then runs through ``journal.work``, counted by the tool itself. Without Chromium the
tests skip, except under ``AGENTKIT_REQUIRE_BROWSER=1`` (CI), where they fail.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from agentkit.decisions import CallSeen, Evidence
from agentkit.journal import Journal, ProposalState
from tests.inbox.support import ALICE, BOB, InboxServer, OtherSite, chromium

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

pytest.importorskip("starlette", reason="the inbox extra is not installed")

HOSTILE = '<script>window.pwned=1</script><img src=x onerror="window.pwned=2">'
WAIT = 15.0
"""Seconds a wait for the page may take before the test fails (never a measured time)."""


@pytest.fixture
def server(journal_url: str) -> Iterator[InboxServer]:
    with InboxServer(journal_url) as running:
        yield running


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    with chromium() as driver:
        yield driver


def signed_out(browser: WebDriver, server: InboxServer) -> WebDriver:
    # Selenium deletes the cookies of the page shown: show one of the inbox's host first (a test may end elsewhere).
    browser.get(f"{server.base}/stamp")
    browser.delete_all_cookies()
    return browser


def signed_in(browser: WebDriver, server: InboxServer, token: str = ALICE) -> WebDriver:
    signed_out(browser, server).get(f"{server.base}/?token={token}")
    wait_for(browser, "#reviewer")
    return browser


def wait_until(browser: WebDriver, url: str) -> None:
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.wait import WebDriverWait

    WebDriverWait(browser, WAIT).until(expected_conditions.url_to_be(url))


def wait_for(browser: WebDriver, css: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.wait import WebDriverWait

    WebDriverWait(browser, WAIT).until(expected_conditions.presence_of_element_located((By.CSS_SELECTOR, css)))


def text_of(browser: WebDriver, css: str) -> str:
    from selenium.webdriver.common.by import By

    text: str = browser.find_element(By.CSS_SELECTOR, css).text
    return text


def click(browser: WebDriver, css: str) -> None:
    from selenium.webdriver.common.by import By

    browser.find_element(By.CSS_SELECTOR, css).click()


def test_approve_in_the_browser_and_the_call_runs_once(server: InboxServer, browser: WebDriver) -> None:
    """Approve clicked in the page approves as the token's reviewer; workers then run the call exactly once."""
    id = server.propose("ops@example.com", rationale="the weekly report is due")
    page = signed_in(browser, server)
    assert text_of(page, f"#p-{id} .rationale") == "the weekly report is due"
    click(page, f"#p-{id} form.approve button")
    wait_for(page, f"#p-{id}.decided")
    sent: list[str] = []
    assert server.work(sent).executed == 1
    assert server.work(sent).claimed == 0
    assert sent == ["ops@example.com"]
    done = server.get(id)
    assert (done.state, done.approved_by) == (ProposalState.EXECUTED, "alice")


def test_the_evidence_and_the_verified_reviewer_render_in_the_browser(server: InboxServer, browser: WebDriver) -> None:
    """A pending proposal shows the calls its executor had seen; once approved, its history shows who was verified."""
    seen = CallSeen(round=1, tool_name="search", digest="a" * 64, ran=True, item_ids=("search:1",))
    id = server.propose("ops@example.com", rationale="search:1 says so", evidence=Evidence(rounds=(1,), calls=(seen,)))
    page = signed_in(browser, server)
    from selenium.webdriver.common.by import By

    row = [cell.text for cell in page.find_elements(By.CSS_SELECTOR, f"#p-{id} .evidence tr.call td")]
    assert row == ["1", "search", "ran", "search:1", "a" * 12]
    click(page, f"#p-{id} form.approve button")
    wait_for(page, f"#p-{id}.decided")
    click(page, f"#p-{id} details.history summary")
    by = [cell.text for cell in page.find_elements(By.CSS_SELECTOR, f"#p-{id} .history td.by")]
    verified = [cell.text for cell in page.find_elements(By.CSS_SELECTOR, f"#p-{id} .history td.verified")]
    assert (by, verified) == (["run:r1", "alice"], ["-", "alice"])


def test_the_runs_task_and_the_items_text_render_in_the_browser_and_run_nothing(
    server: InboxServer, browser: WebDriver
) -> None:
    """A proposal of a recorded run shows its task and the text of the item its search returned, markup in
    either shown as literal text that runs nothing, while the inbox's own script runs."""
    id = server.record_run(f"Delete the wrong passage. {HOSTILE}", f"Pluto is the ninth planet. {HOSTILE}")
    page = signed_in(browser, server)
    wait_for(page, "body[data-following=yes]")
    assert page.execute_script("return window.pwned === undefined")
    assert text_of(page, f"#p-{id} pre.task") == f"Delete the wrong passage. {HOSTILE}"
    assert text_of(page, f"#p-{id} details.returned summary") == "round 1: find returned 1 item"
    item = json.loads(text_of(page, f"#p-{id} details.returned pre.item"))
    assert item == {"id": "p:1", "text": f"Pluto is the ninth planet. {HOSTILE}"}
    from selenium.webdriver.common.by import By

    assert page.find_elements(By.CSS_SELECTOR, "main img, main script") == []


def test_reject_in_the_browser_records_the_reason_and_nothing_runs(server: InboxServer, browser: WebDriver) -> None:
    """Reject with a reason typed in the page: the proposal is rejected by the reviewer and never runs."""
    id = server.propose("everyone@example.com")
    page = signed_in(browser, server)
    from selenium.webdriver.common.by import By

    page.find_element(By.CSS_SELECTOR, f"#p-{id} form.reject textarea").send_keys("too many recipients")
    click(page, f"#p-{id} form.reject button")
    wait_for(page, f"#p-{id}.decided .reason")
    assert text_of(page, f"#p-{id} .reason") == "rejected by alice: too many recipients"
    sent: list[str] = []
    assert server.work(sent).claimed == 0
    assert sent == []
    done = server.get(id)
    assert (done.state, done.rejected_by, done.reason) == (ProposalState.REJECTED, "alice", "too many recipients")


def test_amend_in_the_browser_and_the_amended_call_runs_once(server: InboxServer, browser: WebDriver) -> None:
    """Amend and approve in the page: a worker runs the amended call once, never the proposed one, with its lineage."""
    id = server.propose("everyone@example.com", rationale="tell the team")
    page = signed_in(browser, server)
    from selenium.webdriver.common.by import By

    click(page, f"#p-{id} details.amend summary")
    to = page.find_element(By.CSS_SELECTOR, f"#p-{id} form.amend input[name='arg.to']")
    to.clear()
    to.send_keys("team@example.com")
    click(page, f"#p-{id} form.amend button")
    wait_for(page, f"#p-{id}.decided .amended")
    assert text_of(page, f"#p-{id} .amended").startswith("amended by alice (to); proposed as ")
    sent: list[str] = []
    assert server.work(sent).executed == 1
    assert server.work(sent).claimed == 0
    assert sent == ["team@example.com"]
    done = server.get(id)
    assert (done.state, done.approved_by, done.amended_by, done.amended_fields) == (
        ProposalState.EXECUTED,
        "alice",
        "alice",
        ("to",),
    )
    assert done.args["to"] == "team@example.com"


def test_amending_one_field_in_the_browser_leaves_an_untouched_multi_line_field_as_proposed(
    server: InboxServer, browser: WebDriver
) -> None:
    """Amend `to` beside a body of several lines (and a NUL), which its one-line field shows and posts without its
    line breaks: only `to` is amended, and the body stays as proposed."""
    body = "Hi team,\nthe release is Friday.\r\n-- bot\0"
    id = server.propose("everyone@example.com", body=body)
    page = signed_in(browser, server)
    from selenium.webdriver.common.by import By

    click(page, f"#p-{id} details.amend summary")
    shown = page.find_element(By.CSS_SELECTOR, f"#p-{id} form.amend input[name='arg.body']").get_attribute("value")
    assert shown == "Hi team,the release is Friday.-- bot\ufffd"
    to = page.find_element(By.CSS_SELECTOR, f"#p-{id} form.amend input[name='arg.to']")
    to.clear()
    to.send_keys("team@example.com")
    click(page, f"#p-{id} form.amend button")
    wait_for(page, f"#p-{id}.decided .amended")
    done = server.get(id)
    assert (done.args["to"], done.args["body"], done.amended_fields) == ("team@example.com", body, ("to",))


def test_a_hostile_rationale_and_args_execute_nothing(server: InboxServer, browser: WebDriver) -> None:
    """Markup in a rationale and in args shows as literal text and runs nothing, while the inbox's own script runs."""
    id = server.propose(HOSTILE, rationale=HOSTILE, body=HOSTILE)
    page = signed_in(browser, server)
    # The inbox's script marks the page once it runs: scripts do run here, so an injected one would.
    wait_for(page, "body[data-following=yes]")
    assert page.execute_script("return document.readyState") == "complete"
    assert page.execute_script("return window.pwned === undefined")
    assert text_of(page, f"#p-{id} .rationale") == HOSTILE
    from selenium.webdriver.common.by import By

    cells = [cell.text for cell in page.find_elements(By.CSS_SELECTOR, f"#p-{id} td.value")]
    assert cells == [HOSTILE, "1", HOSTILE]
    amend = page.find_element(By.CSS_SELECTOR, f"#p-{id} form.amend input[name='arg.to']")
    assert amend.get_attribute("value") == HOSTILE
    assert page.find_elements(By.CSS_SELECTOR, "main img, main script") == []


def test_the_page_follows_a_decision_made_elsewhere(server: InboxServer, browser: WebDriver) -> None:
    """When another reviewer decides a shown proposal, the page shows it decided without a reload by hand."""
    id = server.propose("ops@example.com")
    page = signed_in(browser, server)
    wait_for(page, "body[data-following=yes]")

    async def bob_approves(journal: Journal) -> None:
        await journal.approve(id, "bob")

    server.run(bob_approves)
    wait_for(page, f"#p-{id}.decided")
    assert page.find_elements("css selector", f"#p-{id} form") == []


def test_the_printed_link_followed_from_another_site_opens_the_inbox_at_once(
    server: InboxServer, browser: WebDriver
) -> None:
    """The printed link followed from another site's page opens the inbox on the first try, its address without the
    token; the tab's history goes back to that site, not to the token's address, and no request sent the token
    as its Referer."""
    server.propose("ops@example.com", rationale="the weekly report is due")
    page = signed_out(browser, server)
    with OtherSite(f"{server.base}/?token={ALICE}") as site:
        page.get(site.url)
        click(page, "#go")
        wait_for(page, "#reviewer")
        assert text_of(page, "#reviewer") == "alice"
        assert text_of(page, ".rationale") == "the weekly report is due"
        assert page.current_url == f"{server.base}/"
        page.back()
        wait_until(page, site.url)
    assert [r for r in server.requests if ALICE in r.get("referer", "")] == []
    assert [r[":path"] for r in server.requests if ALICE in r[":query"]] == ["/"]


def test_a_link_from_another_site_holding_another_reviewers_token_asks_before_switching(
    server: InboxServer, browser: WebDriver
) -> None:
    """Alice, signed in, follows a link from another site that holds bob's token: the inbox asks whether to switch
    and stays hers until she confirms; her confirming makes it bob's."""
    page = signed_in(browser, server, ALICE)
    with OtherSite(f"{server.base}/?token={BOB}") as site:
        page.get(site.url)
        click(page, "#go")
        wait_for(page, "form.switch")
        assert (text_of(page, "#signed-in-as"), text_of(page, "#link-for")) == ("alice", "bob")
        page.get(f"{server.base}/")
        wait_for(page, "#reviewer")
        assert text_of(page, "#reviewer") == "alice"
        page.get(site.url)
        click(page, "#go")
        wait_for(page, "form.switch")
        click(page, "form.switch button[value=switch]")
        wait_for(page, "#reviewer")
        assert text_of(page, "#reviewer") == "bob"


def test_a_browser_without_the_token_is_refused(server: InboxServer, browser: WebDriver) -> None:
    """Opening the inbox without a token (or with a wrong one) shows the refusal and no proposal."""
    server.propose("ops@example.com", rationale="secret plans")
    signed_out(browser, server)
    for url in (f"{server.base}/", f"{server.base}/?token=wrong-token-0123456789"):
        browser.get(url)
        assert "needs a reviewer's token" in text_of(browser, "body")
        assert "secret plans" not in browser.page_source


def test_a_stale_form_is_refused_in_the_browser_with_nothing_changed(server: InboxServer, browser: WebDriver) -> None:
    """A form left open past the CSRF tokens' lifetime is refused: the page says so and the proposal stays pending."""
    id = server.propose("ops@example.com")
    page = signed_in(browser, server)
    server.clock.now += 3601
    click(page, f"#p-{id} form.approve button")
    wait_for(page, "#error")
    assert "this form is stale" in text_of(page, "#error")
    assert server.get(id).state is ProposalState.PENDING


@pytest.mark.parametrize(("required", "outcome"), [(True, pytest.fail.Exception), (False, pytest.skip.Exception)])
def test_a_missing_chromium_fails_under_require_browser_and_skips_otherwise(
    monkeypatch: pytest.MonkeyPatch, required: bool, outcome: type[BaseException]
) -> None:
    """Without Chromium the browser tests skip, except under ``AGENTKIT_REQUIRE_BROWSER=1`` (CI), where they fail."""
    from tests.inbox import support

    monkeypatch.setattr(support, "CHROMIUM", "/nonexistent/chromium")
    monkeypatch.setattr(support, "REQUIRE_BROWSER", required)
    with pytest.raises(outcome, match="missing /nonexistent/chromium"):
        support.browser_or_skip()
