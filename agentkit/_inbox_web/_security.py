"""Who may use the web inbox (tokens), forms that only its own pages can post (CSRF), and the headers.

Every text a model wrote is hostile: the templates escape it, and the headers below keep a page
from running anything but the inbox's own static script even if something slipped through.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Callable, Mapping

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentkit.errors import UsageError

__all__ = ["MIN_TOKEN_LENGTH", "SECURITY_HEADERS", "Csrf", "Reviewers", "SecurityHeaders", "new_token"]

MIN_TOKEN_LENGTH = 16
"""The shortest token `--token` accepts: a guessable token would open the inbox to anyone who can reach it."""

_NAME = re.compile(r"[^\s=][^=]*")

SECURITY_HEADERS: Mapping[str, str] = {
    # Only the inbox's own script and style run; no inline script or style, no plugins, no frames.
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    # The first page's URL carries the token: never send it on to another site.
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}


def new_token() -> str:
    """A fresh random token (32 URL-safe characters)."""
    return secrets.token_urlsafe(24)


class Reviewers:
    """Who may use the inbox: each reviewer's name and token; a decision records the name."""

    def __init__(self, tokens: Mapping[str, str]) -> None:
        """`tokens` maps each reviewer's name to their token.

        Raises:
            UsageError: no reviewer, a name that is empty or holds `=`, a token shorter than
                `MIN_TOKEN_LENGTH`, or one token given to two reviewers.
        """
        if not tokens:
            raise UsageError("the inbox needs at least one reviewer token (NAME=TOKEN)")
        for name, token in tokens.items():
            if not _NAME.fullmatch(name) or name != name.strip():
                raise UsageError(f"reviewer name {name!r}: give a non-empty name without '=' or surrounding spaces")
            if len(token) < MIN_TOKEN_LENGTH:
                raise UsageError(
                    f"the token of reviewer {name!r} has {len(token)} characters; give at least {MIN_TOKEN_LENGTH} "
                    "(or leave --token out and one is made)"
                )
        if len(set(tokens.values())) != len(tokens):
            raise UsageError("two reviewers share one token: give each reviewer their own, so a decision names who")
        self._tokens = [(name, token.encode()) for name, token in tokens.items()]

    @property
    def names(self) -> list[str]:
        """The reviewers' names, in the order given."""
        return [name for name, _ in self._tokens]

    def named(self, token: str | None) -> str | None:
        """The reviewer whose token this is, or `None`; compares with every token in constant time."""
        if not token:
            return None
        given = token.encode()
        found = None
        for name, known in self._tokens:
            if hmac.compare_digest(given, known):
                found = name
        return found


class Csrf:
    """CSRF tokens: signed with this server's secret, bound to one reviewer, valid for `max_age` seconds.

    A form posted with a token from another reviewer, from an earlier start of the server (another
    secret), or older than `max_age` is stale: it is refused and nothing changes.
    """

    def __init__(self, *, max_age: float, clock: Callable[[], float], secret: bytes | None = None) -> None:
        self._max_age = max_age
        self._clock = clock
        self._secret = secret if secret is not None else secrets.token_bytes(32)

    def issue(self, reviewer: str) -> str:
        """A token for the forms of a page shown to `reviewer`."""
        issued = str(int(self._clock()))
        return f"{issued}.{self._sign(reviewer, issued)}"

    def refusal(self, token: str, reviewer: str) -> str | None:
        """Why `token` does not protect a form posted by `reviewer`; `None` when it does."""
        issued, _, signature = token.partition(".")
        if not issued.isdigit() or not hmac.compare_digest(signature.encode(), self._sign(reviewer, issued).encode()):
            return "this form was not made by this inbox for you (or the inbox restarted since); reload the page"
        if self._clock() - int(issued) > self._max_age:
            return "this form is stale: it was shown too long ago; reload the page and decide again"
        return None

    def _sign(self, reviewer: str, issued: str) -> str:
        return hmac.new(self._secret, f"{reviewer}\n{issued}".encode(), hashlib.sha256).hexdigest()


class SecurityHeaders:
    """ASGI middleware: `SECURITY_HEADERS` on every response, refusals included. A 500 is sent from outside every
    middleware (Starlette's `ServerErrorMiddleware`), so the inbox's handler for it sends them itself."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.decode().lower() not in SECURITY_HEADERS]
                headers += [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
                message = {**message, "headers": headers}
            await send(message)

        await self._app(scope, receive, send_with_headers)
