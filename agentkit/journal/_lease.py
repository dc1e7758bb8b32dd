"""The one lease mechanism: a hold renewed every third of its lease by a thread of its own.

Every hold the journal takes (a recorder's or a resumer's on a run, a worker's claim on a proposal)
is renewed this way, never from the event loop: a sync tool that blocks the loop for longer than
the lease does not lose the hold, so no second process can take over a run, or a claim, that is
still alive.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Self

if TYPE_CHECKING:
    from agentkit.journal._contract import Journal
    from agentkit.journal._records import Hold

__all__ = ["DEFAULT_LEASE", "Holds", "Renewal", "check_lease"]

logger = logging.getLogger("agentkit.journal")

DEFAULT_LEASE = timedelta(seconds=30)
"""How long a hold stays valid unless its holder renews it; the holder renews it every third of that.

A holder that dies (SIGKILL, power loss, a lost network) stops renewing, and its hold runs out:
a run then shows as crashed and can be resumed, a claim shows in `stuck()`.
"""


def check_lease(lease: object) -> timedelta:
    """A lease as a `timedelta`: a positive `timedelta`, or a positive number of seconds (as the CLI takes).

    Raises:
        UsageError: anything else, naming what was given.
    """
    from agentkit.errors import UsageError

    if isinstance(lease, timedelta):
        if lease > timedelta(0):
            return lease
    elif isinstance(lease, int | float) and not isinstance(lease, bool) and lease > 0 and lease < float("inf"):
        return timedelta(seconds=lease)
    raise UsageError(f"lease must be a positive timedelta or a positive number of seconds; got {lease!r}")


class Renewal:
    """Renew a hold every third of `lease` on a daemon thread, until stopped or the hold is gone.

    `renew` runs on that thread (a blocking database call); it returns `False` once the hold is
    no longer this holder's, and renewing stops. A failed renewal is logged and tried again at the
    next beat: a lost database shows as an expired lease.
    """

    def __init__(self, renew: Callable[[], bool], lease: timedelta, *, name: str = "hold") -> None:
        self.renew, self.lease, self.name = renew, lease, name
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Self:
        if self._thread is None:
            self._thread = threading.Thread(target=self._beat, name=f"agentkit-lease-{self.name}", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop renewing (the hold then runs out unless released). It does not wait: a renewal under way
        ends on its own, and renews nothing once the hold was released."""
        self._stop.set()

    def _beat(self) -> None:
        every = self.lease.total_seconds() / 3
        while not self._stop.wait(every):
            try:
                if not self.renew():
                    return
            except Exception as error:
                logger.warning("could not renew the %s's lease (tried again in %.3gs): %s", self.name, every, error)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()


class Holds:
    """The runs one recorder holds, and the renewal thread that keeps their hold (one statement for all).

    A run is held from its start (or from the moment `journal.resume` claimed it with this
    recorder's `token`) until its end; `stop` ends the renewal.
    """

    def __init__(self, journal: Journal, lease: timedelta, *, holder: str, token: str) -> None:
        from agentkit.journal._records import Hold

        self.journal, self.lease, self.holder, self.token = journal, lease, holder, token
        self._hold = Hold(holder=holder, token=token, lease=lease)
        self._runs: set[str] = set()
        self._lock = threading.Lock()
        self._renewal: Renewal | None = None
        self._stopped = False

    def hold(self) -> Hold:
        """What a write that starts a run takes the run's hold with (`Journal.record_all(..., hold=)`)."""
        return self._hold

    def add(self, run_id: str) -> None:
        """Hold `run_id` from now on (its renewal starts with the first run held)."""
        with self._lock:
            self._runs.add(run_id)
            if self._renewal is None and not self._stopped:
                self._renewal = Renewal(self._renew, self.lease, name="recorder").start()

    def discard(self, run_id: str) -> None:
        """The run ended: its hold is released with its end, and renewed no more."""
        with self._lock:
            self._runs.discard(run_id)

    def stop(self) -> None:
        with self._lock:
            self._stopped, renewal = True, self._renewal
        if renewal is not None:
            renewal.stop()

    def _renew(self) -> bool:
        with self._lock:
            if self._stopped:
                return False
            runs = tuple(self._runs)
        if runs:
            try:
                self.journal.hold_runs(runs, holder=self.holder, token=self.token, lease=self.lease)
            except Exception as error:  # tried again at the next beat; a lost database shows as an expired lease
                logger.warning(
                    "journal %s: could not renew the hold on %d run(s): %s", self.journal.where, len(runs), error
                )
        return True
