"""Signing in with the link `agentkit inbox` prints (`/?token=...`): the token becomes the session cookie only
through the inbox's own `/signin`, and never replaces another reviewer's cookie unless that reviewer confirms.

The session cookie is SameSite=Strict, so a browser withholds it from a navigation that starts on another site,
and from every redirect of that navigation. `/?token=...` therefore only parks the token in a strict cookie of its
own (`PENDING`, sent to `/signin` alone) and answers a browser with a page that moves on to `/signin` itself: that
next request is the inbox's own, so the browser sends both cookies with it. `/signin` then sees who is signed in,
whichever site the link was on:

- nobody, or the link's own reviewer: the token becomes the session cookie, and on to `/`;
- another reviewer: a page asks that reviewer to stay or to switch, a form under their CSRF token, since a link
  holding someone else's token would otherwise record the reviewer's later decisions under that someone's name.

A request that reaches `/signin` from another site carries neither cookie, and changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from agentkit._inbox_web._security import Csrf, Reviewers

__all__ = ["COOKIE", "PENDING", "PENDING_MAX_AGE", "Page", "SignIn"]

COOKIE = "agentkit_inbox"
"""The cookie that carries a reviewer's token once signed in (HttpOnly, SameSite=Strict)."""

PENDING = "agentkit_inbox_signin"
"""The cookie that carries a link's token from `/?token=...` to `/signin` (HttpOnly, SameSite=Strict, path
`/signin`)."""

PENDING_MAX_AGE = 600
"""Seconds a link's token waits for `/signin` (a browser that does not follow the page's refresh waits for a
click)."""

Page = Callable[[str, Mapping[str, Any], int], Response]
"""`(template, its context, status) -> the page`, rendered as the inbox renders its own."""


class SignIn:
    """The two steps from a link's token to the session cookie: `link` for `/?token=...`, `answer` for `/signin`."""

    def __init__(self, reviewers: Reviewers, csrf: Csrf, page: Page) -> None:
        self._reviewers = reviewers
        self._csrf = csrf
        self._page = page

    def link(self, request: Request, token: str) -> Response:
        """`/?token=...` with a reviewer's token: park it for `/signin`, and send a browser on there by a page of the
        inbox's own (a redirect would still belong to the other site's navigation); a script is redirected."""
        response = (
            self._page("signing-in.html", {}, 200) if _asks_for_html(request) else RedirectResponse("/signin", 303)
        )
        response.set_cookie(PENDING, token, max_age=PENDING_MAX_AGE, path="/signin", httponly=True, samesite="strict")
        return response

    async def answer(self, request: Request) -> Response:
        """`/signin`: sign in as the parked token's reviewer, or ask the reviewer signed in already (GET), or do what
        they chose on that page's form (POST)."""
        token = request.cookies.get(PENDING)
        wanted = self._reviewers.named(token)
        if token is None or wanted is None:
            return RedirectResponse("/", status_code=303)
        current = self._reviewers.named(request.cookies.get(COOKIE))
        if current is None or current == wanted:
            return _signed_in(token)
        if request.method == "GET":
            return self._ask(current, wanted, error=None, status=200)
        form = await request.form()
        csrf = form.get("csrf")
        why = self._csrf.refusal(csrf if isinstance(csrf, str) else "", current)
        if why is not None:
            return self._ask(current, wanted, error=f"Nothing changed: {why}.", status=403)
        if form.get("choice") == "switch":
            if form.get("to") != wanted:  # another link replaced the one the page named: nobody confirmed this one
                error = f"Nothing changed: the link waiting to sign in is {wanted}'s, not the one you confirmed."
                return self._ask(current, wanted, error=error, status=409)
            return _signed_in(token)
        return _forget_link(RedirectResponse("/", status_code=303))

    def _ask(self, current: str, wanted: str, *, error: str | None, status: int) -> Response:
        context = {"current": current, "wanted": wanted, "csrf": self._csrf.issue(current), "error": error}
        return self._page("switch.html", context, status)


def _asks_for_html(request: Request) -> bool:
    """Whether the request asks for a page, as a browser following a link does."""
    return "text/html" in request.headers.get("accept", "")


def _signed_in(token: str) -> Response:
    response = RedirectResponse("/", status_code=303)
    response.set_cookie(COOKIE, token, httponly=True, samesite="strict", path="/")
    return _forget_link(response)


def _forget_link(response: Response) -> Response:
    response.delete_cookie(PENDING, path="/signin", httponly=True, samesite="strict")
    return response
