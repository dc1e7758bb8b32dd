"""What the journal's test modules share: changing the database behind the journal's back."""

from __future__ import annotations

from agentkit.journal import Journal


def raw_sql(journal: Journal, sql: str) -> None:
    """Change the database behind the journal's back (as a tamperer or a newer agentkit would)."""
    with journal._tx(write=True) as db:
        db.execute(sql)
