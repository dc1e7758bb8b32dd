"""`open_journal`: a journal from a path or a URL, on the backend it names."""

from __future__ import annotations

import os

from agentkit.errors import UsageError
from agentkit.journal._store import Journal

__all__ = ["Journal", "open_journal"]

_POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def open_journal(
    url: str | os.PathLike[str],
    *,
    create: bool = True,
    in_memory: bool = False,
    require_verified_approver: bool = False,
) -> Journal:
    """Open the journal at `url`: a `postgresql://` URL, or else the path of a SQLite file.

    Args:
        url: Where the journal lives. An empty path is refused, and so is `":memory:"` unless
            `in_memory=True` says that a journal lost on close is what you want.
        create: Create the database's schema (and a SQLite file) when missing; `False` refuses
            instead, as the command line does.
        in_memory: Open SQLite's `":memory:"` database (`url` must be `":memory:"`).
        require_verified_approver: This client refuses a person's decision whose name is not the
            identity the journal can vouch for (PostgreSQL's `session_user`, the OS user with SQLite);
            `journal.require_verified_approvers()` makes every client do so.

    Raises:
        UsageError: an empty path, or `":memory:"` without `in_memory=True`.
        JournalUnavailable: see `SQLiteJournal` and `PostgresJournal`.
    """
    target = os.fspath(url)
    if isinstance(target, str) and target.startswith(_POSTGRES_SCHEMES):
        if in_memory:
            raise UsageError("in_memory=True is for SQLite's ':memory:' database, not a PostgreSQL URL")
        from agentkit.journal._postgres import PostgresJournal

        opened: Journal = PostgresJournal(target, create=create)
    else:
        from agentkit.journal._sqlite import SQLiteJournal

        opened = SQLiteJournal(target, create=create, in_memory=in_memory)
    if require_verified_approver:
        opened.require_verified_approver = True
    return opened
