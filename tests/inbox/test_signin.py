"""Signing in to the web inbox with the link ``agentkit inbox`` prints (``/?token=...``), over plain HTTP: the token
becomes a cookie only through the inbox's own ``/signin``, which a link from another site cannot reach with the
browser's cookies, and never replaces another reviewer's cookie without that reviewer's confirmed form. The same in
Chromium, with the link on another site, is in ``tests/inbox/test_browser.py``."""

from __future__ import annotations

from collections.abc import Iterator

import httpx2 as httpx
import pytest

from tests.inbox.support import ALICE, BOB, InboxServer, csrf_of

pytest.importorskip("starlette", reason="the inbox extra is not installed")

SESSION = "agentkit_inbox"
PENDING = "agentkit_inbox_signin"
BROWSER = {"accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}
"""What a browser asks for when it follows a link."""


@pytest.fixture
def server(journal_url: str) -> Iterator[InboxServer]:
    with InboxServer(journal_url) as running:
        yield running


def cookies(*pairs: tuple[str, str]) -> dict[str, str]:
    """A ``cookie`` header holding each ``(name, value)``."""
    return {"cookie": "; ".join(f"{name}={value}" for name, value in pairs)}


def set_cookies(response: httpx.Response) -> dict[str, str]:
    """Each cookie the response sets, by name: its whole ``set-cookie`` line."""
    return {line.partition("=")[0]: line for line in response.headers.get_list("set-cookie")}


def confirm_page(server: InboxServer, signed_in: str, link: str) -> httpx.Response:
    """What ``/signin`` shows a browser signed in with ``signed_in`` that followed a link holding ``link``."""
    with server.client(None) as http:
        return http.get("/signin", headers=BROWSER | cookies((SESSION, signed_in), (PENDING, link)))


def test_a_browser_following_the_link_gets_a_page_that_moves_on_to_signin(server: InboxServer) -> None:
    """A browser's ``/?token=...`` gets a page (no redirect) that moves on to ``/signin`` by itself, so the next
    request is the inbox's own and carries its SameSite=Strict cookies; the token waits in a strict cookie for
    ``/signin`` only, and neither the page nor its address for the next request holds it."""
    with server.client(None) as http:
        response = http.get("/", params={"token": ALICE}, headers=BROWSER | {"sec-fetch-site": "cross-site"})
    assert response.status_code == 200
    assert '<meta http-equiv="refresh" content="0; url=/signin">' in response.text
    assert '<a href="/signin"' in response.text
    assert ALICE not in response.text
    assert response.headers["referrer-policy"] == "no-referrer"
    [pending] = set_cookies(response).values()
    assert pending.startswith(f"{PENDING}={ALICE};")
    for attribute in ("HttpOnly", "Path=/signin", "SameSite=strict", "Max-Age="):
        assert attribute in pending


def test_signin_trades_the_pending_token_for_the_session_cookie(server: InboxServer) -> None:
    """With no reviewer signed in, ``/signin`` sets the token as the HttpOnly, SameSite=Strict session cookie, drops
    the pending one and redirects to ``/``, which then shows the inbox to that reviewer."""
    with server.client(None) as http:
        response = http.get("/signin", headers=BROWSER | cookies((PENDING, BOB)))
        assert response.status_code == 303
        assert response.headers["location"] == "/"
        set = set_cookies(response)
        assert set[SESSION].startswith(f"{SESSION}={BOB};")
        for attribute in ("HttpOnly", "Path=/", "SameSite=strict"):
            assert attribute in set[SESSION]
        assert "Max-Age=0" in set[PENDING]
        page = http.get("/", headers=cookies((SESSION, BOB)))
    assert '<strong id="reviewer">bob</strong>' in page.text


def test_the_same_reviewers_link_signs_in_again_without_asking(server: InboxServer) -> None:
    """Alice, signed in, following her own link again goes straight to the inbox."""
    response = confirm_page(server, ALICE, ALICE)
    assert response.status_code == 303
    assert set_cookies(response)[SESSION].startswith(f"{SESSION}={ALICE};")


def test_a_link_with_another_reviewers_token_leaves_the_signed_in_reviewer_and_asks(server: InboxServer) -> None:
    """Signed in as alice, a link holding bob's token sets no session cookie: ``/signin`` asks alice whether to
    switch to bob, and until she does the inbox is still hers."""
    with server.client(None) as http:
        link = http.get("/", params={"token": BOB}, headers=BROWSER | cookies((SESSION, ALICE)))
        assert SESSION not in set_cookies(link)
        asked = confirm_page(server, ALICE, BOB)
        assert asked.status_code == 200
        assert SESSION not in set_cookies(asked)
        assert '<strong id="signed-in-as">alice</strong>' in asked.text
        assert '<strong id="link-for">bob</strong>' in asked.text
        assert '<form method="post" action="/signin" class="switch">' in asked.text
        assert BOB not in asked.text
        page = http.get("/", headers=cookies((SESSION, ALICE)))
    assert '<strong id="reviewer">alice</strong>' in page.text


def test_switching_takes_the_confirm_forms_post_with_its_csrf_token(server: InboxServer) -> None:
    """The confirm page's switch, posted with its CSRF token, makes bob's token the session cookie."""
    csrf = csrf_of(confirm_page(server, ALICE, BOB).text)
    with server.client(None) as http:
        form = {"csrf": csrf, "choice": "switch", "to": "bob"}
        response = http.post("/signin", data=form, headers=cookies((SESSION, ALICE), (PENDING, BOB)))
    assert response.status_code == 303
    assert response.headers["location"] == "/"
    set = set_cookies(response)
    assert set[SESSION].startswith(f"{SESSION}={BOB};")
    assert "Max-Age=0" in set[PENDING]


def test_a_switch_confirmed_for_one_reviewer_never_signs_in_another(journal_url: str) -> None:
    """Alice confirms switching to bob; if another link (carol's) replaced the waiting token before she clicked,
    the switch is refused (409) and shown again for carol: the form names whom it confirms."""
    carol = "carol-token-0123456789abcdef"
    with InboxServer(journal_url, tokens={"alice": ALICE, "bob": BOB, "carol": carol}) as server:
        csrf = csrf_of(confirm_page(server, ALICE, BOB).text)
        with server.client(None) as http:
            form = {"csrf": csrf, "choice": "switch", "to": "bob"}
            response = http.post("/signin", data=form, headers=cookies((SESSION, ALICE), (PENDING, carol)))
    assert response.status_code == 409
    assert SESSION not in set_cookies(response)
    assert '<strong id="link-for">carol</strong>' in response.text
    assert "Nothing changed" in response.text


@pytest.mark.parametrize("csrf", [None, "", "garbage", "bob's"])
def test_a_switch_without_the_confirm_pages_csrf_token_is_refused(server: InboxServer, csrf: str | None) -> None:
    """A switch posted without a CSRF token, with one this inbox did not sign, or with one shown to bob is refused
    (403): alice stays signed in."""
    bobs = csrf_of(confirm_page(server, BOB, ALICE).text)
    form = {"choice": "switch"} | ({} if csrf is None else {"csrf": bobs if csrf == "bob's" else csrf})
    with server.client(None) as http:
        response = http.post("/signin", data=form, headers=cookies((SESSION, ALICE), (PENDING, BOB)))
    assert response.status_code == 403
    assert "Nothing changed" in response.text
    assert SESSION not in set_cookies(response)


def test_staying_keeps_the_reviewer_and_forgets_the_link(server: InboxServer) -> None:
    """The confirm page's stay keeps alice's session cookie and drops the pending token."""
    csrf = csrf_of(confirm_page(server, ALICE, BOB).text)
    with server.client(None) as http:
        form = {"csrf": csrf, "choice": "stay"}
        response = http.post("/signin", data=form, headers=cookies((SESSION, ALICE), (PENDING, BOB)))
    assert response.status_code == 303
    set = set_cookies(response)
    assert SESSION not in set
    assert "Max-Age=0" in set[PENDING]


def test_signin_without_the_pending_cookie_changes_nothing(server: InboxServer) -> None:
    """``/signin`` reached without the pending cookie, as a request from another site arrives (its strict cookies
    left behind), redirects to ``/`` and sets no cookie."""
    with server.client(None) as http:
        for response in (
            http.get("/signin", headers=BROWSER),
            http.post("/signin", data={"choice": "switch"}, headers=BROWSER),
            http.get("/signin", headers=cookies((PENDING, "not-a-reviewer-token-at-all"))),
        ):
            assert (response.status_code, response.headers["location"]) == (303, "/")
            assert SESSION not in set_cookies(response)


def test_a_client_that_does_not_ask_for_html_follows_redirects_to_the_inbox(server: InboxServer) -> None:
    """A script with a cookie jar that follows redirects is led from ``/?token=...`` through ``/signin`` to the
    inbox, signed in as the token's reviewer."""
    with httpx.Client(base_url=server.base, follow_redirects=True) as http:
        page = http.get("/", params={"token": BOB})
    assert [(r.status_code, r.headers["location"]) for r in page.history] == [(303, "/signin"), (303, "/")]
    assert page.status_code == 200
    assert '<strong id="reviewer">bob</strong>' in page.text


def test_a_client_holding_another_reviewers_cookie_is_asked_too(server: InboxServer) -> None:
    """A script whose cookie jar holds alice's session is not switched to bob silently either: it ends on the
    confirm page, its cookie still alice's."""
    with httpx.Client(base_url=server.base, follow_redirects=True) as http:
        http.get("/", params={"token": ALICE})
        asked = http.get("/", params={"token": BOB})
        assert '<strong id="link-for">bob</strong>' in asked.text
        assert http.cookies[SESSION] == ALICE
        assert '<strong id="reviewer">alice</strong>' in http.get("/").text
