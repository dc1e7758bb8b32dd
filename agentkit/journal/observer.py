"""``JournalObserver``: writes every run, round and proposal to a journal as the run happens."""

from __future__ import annotations

import logging

from agentkit.events import Event
from agentkit.journal._contract import Journal
from agentkit.observe import Observer

__all__ = ["JournalObserver"]

logger = logging.getLogger("agentkit.journal")


class JournalObserver(Observer):
    """An observer that records each event of a run in a journal before the run goes on.

    Each hook writes synchronously, in one transaction, so a crash loses at most the event in
    flight. A failed write never changes the run: it is logged (logger ``agentkit.journal``) and
    counted in ``failures``.

    Example:
        >>> journal = SQLiteJournal("agentkit-journal.db")
        >>> result = await run_tool_loop_tiered(caller, agent, tools, ctx, observer=JournalObserver(journal))
    """

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        """Where the events go."""
        self.failures = 0
        """Events that could not be written."""
        self.last_error: Exception | None = None
        """The most recent write failure."""

    def on_event(self, event: Event) -> None:
        """Record the event (every kind: start, rounds, calls, proposals, the end or an abort)."""
        try:
            self.journal.record(event)
        except Exception as error:
            self.failures += 1
            self.last_error = error
            logger.warning(
                "journal %s: could not record the %s event of run %s (%d failed so far): %s",
                self.journal.where,
                event.kind,
                event.run_id,
                self.failures,
                error,
            )
