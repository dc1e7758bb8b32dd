"""The web inbox as an ASGI app (Starlette): pending proposals, their history, and a reviewer's decisions.

Routes (every one needs a reviewer's token: the `agentkit_inbox` cookie, which signing in sets,
or an `Authorization: Bearer` header):

- `GET /?token=...` and `GET|POST /signin`: signing in with the printed link, in two steps (`_signin`):
  the token becomes the cookie only through the inbox's own `/signin`, and never replaces another
  reviewer's cookie unless that reviewer confirms. These need the link's token, not the cookie.
- `GET /`: the page; `GET /stamp`: a digest of every proposal's state, which the page's
  script polls to reload itself when another reviewer or a worker acted.
- `POST /proposals/{id}/{decision}`: one decision (`DECISIONS`: approve, reject with a reason,
  or amend the args and approve), under a CSRF token.
- `GET /static/inbox.js` and `/static/inbox.css`: the only script and style the page runs.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

import jinja2
from starlette.applications import Starlette
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from agentkit._inbox_web._security import SECURITY_HEADERS, Csrf, Reviewers, SecurityHeaders
from agentkit._inbox_web._signin import COOKIE, SignIn
from agentkit._proposals import CallSeen
from agentkit._state import DecisionEntry, RoundOutcome, RunCheckpoint
from agentkit._state import RoundEntry as StateRound
from agentkit.errors import AgentkitError, ApprovalError, UsageError
from agentkit.journal import Journal, ProposalRecord, ProposalState, Transition, UnknownId

__all__ = ["AMEND_PREFIX", "COOKIE", "DECISIONS", "create_app"]

DECIDED_SHOWN = 20
"""How many decided proposals the page lists, newest first."""

_STATIC = {"inbox.js": "text/javascript", "inbox.css": "text/css"}

_SURROGATE = re.compile("[\ud800-\udfff]")
_LINE_BREAK = re.compile("[\r\n]")

AMEND_PREFIX = "arg."
"""The amend form's field for an argument NAME is `arg.NAME`, holding its value as the page shows it."""

Decision = Callable[[Journal, str, str, FormData], Awaitable[ProposalRecord]]
"""One decision a form posts: `(journal, proposal id, reviewer, form) -> the proposal after it`.

The reviewer is the one the request's token names, so each decision gives it both as the name and as
the identity the inbox vouches for (`verified_as`): `Transition.verified` is the token's reviewer,
and a journal that requires verified approvers accepts it."""


async def _approve(journal: Journal, id: str, reviewer: str, form: FormData) -> ProposalRecord:
    return await journal.approve(id, reviewer, verified_as=reviewer)


async def _reject(journal: Journal, id: str, reviewer: str, form: FormData) -> ProposalRecord:
    reason = form.get("reason")
    return await journal.reject(id, reviewer, reason if isinstance(reason, str) else "", verified_as=reviewer)


async def _amend(journal: Journal, id: str, reviewer: str, form: FormData) -> ProposalRecord:
    """Approve with the args the reviewer changed: each `arg.NAME` field whose text is neither the proposed value's
    nor what a browser sends back for the field left as shown."""
    record = await journal.get(id)
    shown = dict(_args(record))
    changes: dict[str, Any] = {}
    for key, text in form.multi_items():
        name = key.removeprefix(AMEND_PREFIX)
        if key == name or not isinstance(text, str) or _untouched(text, shown.get(name)):
            continue
        if isinstance(record.args.get(name), str):
            changes[name] = text
            continue
        try:
            changes[name] = json.loads(text)
        except (ValueError, RecursionError) as error:  # nested deeper than Python recurses: not a value either
            raise UsageError(
                f"argument {name!r}: {text!r} is not a JSON value ({error}); write it as JSON, e.g. 3, true, "
                '["a", "b"] or {"k": 1}'
            ) from None
    return await journal.approve(id, reviewer, args=changes or None, verified_as=reviewer)


def _untouched(posted: str, shown: str | None) -> bool:
    """Whether an amend field came back as the page showed it: as the value's text (a script posting it), or as a
    browser sends back a one-line field it showed that text in, which no reviewer can tell from the text itself."""
    return shown is not None and posted in (shown, _as_sent(shown))


def _as_sent(shown: str) -> str:
    """What a browser posts for an `<input type="text">` whose value is `shown`, left alone: the page carries a lone
    surrogate as U+FFFD (`_writable`), HTML's parser reads a NUL in an attribute as U+FFFD, and a one-line field
    drops every CR and LF from its value."""
    return _LINE_BREAK.sub("", _writable(shown).replace("\0", "\ufffd"))


DECISIONS: Mapping[str, Decision] = {"approve": _approve, "reject": _reject, "amend": _amend}
"""The decisions the page's forms post, by the last part of their path: each is one function above,
and a new kind of decision is one more function here and one more form in the template."""


@dataclass(frozen=True, kw_only=True, slots=True)
class _Returned:
    """What one earlier call of a proposal's evidence returned, as the run's state holds it."""

    call: CallSeen
    items: list[str]
    """Each item as text: a string as it is, anything else as indented JSON."""


@dataclass(frozen=True, kw_only=True, slots=True)
class _Card:
    """One proposal as the page shows it."""

    record: ProposalRecord
    args: list[tuple[str, str]]
    """Each argument's name and its value as text (a string as it is, anything else as JSON)."""
    history: list[Transition]
    returned: list[_Returned]
    """The items of each call of the evidence that ran, from the run's state in the journal."""
    unseen: str | None = None
    """Why the calls' items are not shown (the journal holds no state for the run), else `None`."""


_Batches = dict[int, str]
"""The batches of a run's calls by round (each as the state's JSON text of the items)."""


def create_app(
    journal: Journal,
    reviewers: Reviewers,
    *,
    poll: float = 2.0,
    csrf_max_age: float = 3600.0,
    clock: Callable[[], float] = time.time,
) -> Starlette:
    """The inbox over `journal` for `reviewers`.

    Args:
        journal: The journal whose proposals are shown and decided (the caller opens and closes it).
        reviewers: Who may use it; a decision records the reviewer's name.
        poll: Seconds between the page's looks for changes.
        csrf_max_age: Seconds a page's forms stay valid; an older form is refused as stale.
        clock: Seconds since the epoch, for the CSRF tokens' age.
    """
    inbox = _Inbox(journal, reviewers, Csrf(max_age=csrf_max_age, clock=clock), poll)
    routes = [
        Route("/", inbox.page, methods=["GET"]),
        Route("/signin", inbox.sign_in.answer, methods=["GET", "POST"]),
        Route("/stamp", inbox.stamp, methods=["GET"]),
        Route("/static/{name}", inbox.static, methods=["GET"]),
        Route("/proposals/{id}/{decision}", inbox.decide, methods=["POST"]),
    ]
    app = Starlette(routes=routes, exception_handlers={500: _failed})
    app.add_middleware(SecurityHeaders)
    return app


async def _failed(request: Request, error: Exception) -> Response:
    # Starlette answers a failure from outside every middleware added to the app, SecurityHeaders included.
    return PlainTextResponse(
        "500: the inbox failed on this request; its log says why", status_code=500, headers=SECURITY_HEADERS
    )


class _Unauthorised(Exception):
    pass


class _Inbox:
    def __init__(self, journal: Journal, reviewers: Reviewers, csrf: Csrf, poll: float) -> None:
        self._journal = journal
        self._reviewers = reviewers
        self._csrf = csrf
        self._poll_ms = max(int(poll * 1000), 100)
        self._templates = jinja2.Environment(
            loader=jinja2.PackageLoader("agentkit._inbox_web", "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        self.sign_in = SignIn(reviewers, csrf, self._page)

    def _reviewer(self, request: Request) -> str:
        token = request.cookies.get(COOKIE)
        scheme, _, bearer = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer":
            token = bearer.strip()
        name = self._reviewers.named(token)
        if name is None:
            raise _Unauthorised
        return name

    async def page(self, request: Request) -> Response:
        given = request.query_params.get("token")
        if given is not None:
            if self._reviewers.named(given) is None:
                return _refused()
            # Trade the token in the URL for a cookie through /signin, and drop it from the address bar and history.
            return self.sign_in.link(request, given)
        try:
            reviewer = self._reviewer(request)
        except _Unauthorised:
            return _refused()
        return await self._render(reviewer, error=None, status=200)

    async def stamp(self, request: Request) -> Response:
        try:
            self._reviewer(request)
        except _Unauthorised:
            return _refused()
        return PlainTextResponse(await self._journal._read(self._journal._inbox_stamp))

    async def static(self, request: Request) -> Response:
        try:
            self._reviewer(request)
        except _Unauthorised:
            return _refused()
        name = request.path_params["name"]
        if name not in _STATIC:
            return PlainTextResponse("not found", status_code=404)
        body = resources.files("agentkit._inbox_web").joinpath("static", name).read_bytes()
        return Response(body, media_type=_STATIC[name])

    async def decide(self, request: Request) -> Response:
        try:
            reviewer = self._reviewer(request)
        except _Unauthorised:
            return _refused()
        decision = DECISIONS.get(request.path_params["decision"])
        if decision is None:
            return PlainTextResponse("not found", status_code=404)
        form = await request.form()
        csrf = form.get("csrf")
        why = self._csrf.refusal(csrf if isinstance(csrf, str) else "", reviewer)
        if why is not None:
            return await self._render(reviewer, error=f"Nothing changed: {why}.", status=403)
        try:
            await decision(self._journal, request.path_params["id"], reviewer, form)
        except AgentkitError as error:
            return await self._render(reviewer, error=f"Nothing changed: {error}.", status=_status_of(error))
        return RedirectResponse("/", status_code=303)

    async def _render(self, reviewer: str, *, error: str | None, status: int) -> Response:
        # The stamp first: a change made while the page is read shows, and the next look reloads it once more.
        stamp = await self._journal._read(self._journal._inbox_stamp)
        pending = await self._journal.proposals(state=ProposalState.PENDING)
        decided = await self._journal._read(self._journal._decided, DECIDED_SHOWN)
        runs: dict[str, _Batches | str] = {}
        context: dict[str, Any] = {
            "reviewer": reviewer,
            "csrf": self._csrf.issue(reviewer),
            "where": self._journal.where,
            "pending": [await self._card(p, runs) for p in pending],
            "decided": [await self._card(p, runs) for p in decided],
            "error": error,
            "stamp": stamp,
            "poll_ms": self._poll_ms,
        }
        return self._page("inbox.html", context, status)

    def _page(self, template: str, context: Mapping[str, Any], status: int) -> Response:
        html = self._templates.get_template(template).render(context)
        return HTMLResponse(_writable(html), status_code=status)

    async def _card(self, record: ProposalRecord, runs: dict[str, _Batches | str]) -> _Card:
        """The proposal's card; `runs` keeps each run's batches (or why there are none) for the page's other cards."""
        if record.unreadable:
            return _Card(record=record, args=[], history=[], returned=[])
        history = await self._journal.history(record.id)
        calls = [c for c in record.evidence.calls if c.ran] if record.evidence is not None else []
        if not calls:
            return _Card(record=record, args=_args(record), history=history, returned=[])
        if record.run_id not in runs:
            runs[record.run_id] = await self._batches(record.run_id)
        batches = runs[record.run_id]
        if isinstance(batches, str):
            return _Card(record=record, args=_args(record), history=history, returned=[], unseen=batches)
        returned = [_Returned(call=c, items=_items(batches[c.round])) for c in calls if c.round in batches]
        return _Card(record=record, args=_args(record), history=history, returned=returned)

    async def _batches(self, run_id: str) -> _Batches | str:
        """The batches of the run's calls that ran, by round, from its state; else why the journal has none."""
        try:
            state = await self._journal.state(run_id)
        except AgentkitError as error:  # not recorded here, or unreadable: the proposal can still be decided
            return f"the items are not shown: {error}"
        return _batches(state)


def _status_of(error: AgentkitError) -> int:
    """The HTTP status of a decision the journal refused (it changed nothing)."""
    if isinstance(error, UsageError | ApprovalError):
        return 400  # a rejection without a reason, an amendment that is not JSON or does not validate
    if isinstance(error, UnknownId):
        return 404
    return 409  # decided already (TransitionRefused), or a row the journal cannot read


def _refused() -> Response:
    return PlainTextResponse(
        "401: this inbox needs a reviewer's token: open the URL `agentkit inbox` printed (…/?token=...), "
        "or send Authorization: Bearer TOKEN",
        status_code=401,
        headers={"www-authenticate": "Bearer"},
    )


def _args(record: ProposalRecord) -> list[tuple[str, str]]:
    data = record.args
    return [
        (name, value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True))
        for name, value in sorted(data.items())
    ]


def _batches(state: RunCheckpoint) -> _Batches:
    """Each call's batch by its round: a call that ran in its round, or an approved proposal that ran."""
    batches: _Batches = {}
    for entry in state.entries:
        match entry:
            case StateRound(outcome=RoundOutcome.RAN, batch=str() as batch) | DecisionEntry(batch=str() as batch):
                batches[entry.round] = batch
    return batches


def _items(batch: str) -> list[str]:
    """A batch's items as the page shows them: a string as it is, anything else as indented JSON."""
    values: list[Any] = json.loads(batch)
    return [v if isinstance(v, str) else json.dumps(v, indent=2, ensure_ascii=False) for v in values]


def _writable(text: str) -> str:
    """`text` as a UTF-8 page can carry it: each lone surrogate as U+FFFD. A journal keeps any text exactly, and one
    model-written field (args, rationale, task, item, note) holding a surrogate would otherwise fail the whole page."""
    return _SURROGATE.sub("\ufffd", text)
