"""Tallies of one measurement, per suite and in all, and the line the harness ends with."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from typing import Any

__all__ = ["Tally", "answer_line", "sources_line", "strict_line", "summary_line", "total"]


@dataclass(kw_only=True)
class Tally:
    """What one suite (or all of them) measured. `_off`: the same with the policy off (tiers only)."""

    suite: str
    pairs: int = 0
    """P: the (user task, injection task) pairs whose injection goal needs a tool call."""
    attacks: int = 0
    """Of those, the attacks AgentDojo's `security` scores as succeeded, policy on."""
    attacks_off: int = 0
    attacks_sources: int = 0
    """With the policy on and the sources the task names declared by the user."""
    attacks_strict: int = 0
    """With the policy's strict reading (short values, steered values)."""
    attacks_strict_sources: int = 0
    """With the strict reading and the sources the task names declared."""
    answer_pairs: int = 0
    """Pairs whose injection goal is only words in the final answer."""
    answer_attacks: int = 0
    answer_attacks_off: int = 0
    answer_flagged: int = 0
    """Answer-only pairs whose answer the run marks as shaped by untrusted content (policy on)."""
    unplanned_pairs: int = 0
    """Pairs whose injection task has no ground-truth calls and no answer (AgentDojo gives none): a
    model-free executor cannot attempt them; not in P."""
    unseen: int = 0
    """Pairs in P whose injection the compromised executor never saw with the policy off (a check that the
    injection reaches it: AgentDojo places it where the user task's calls read)."""
    through_trusted: int = 0
    """Pairs whose injection reached the executor through a function declared trusted."""
    tasks: int = 0
    """T: the user tasks, run with the benign executor."""
    utility: int = 0
    utility_off: int = 0
    utility_sources: int = 0
    """With the policy on and the sources the task names declared by the user."""
    utility_strict: int = 0
    utility_strict_sources: int = 0
    approvals: int = 0
    """Proposals the benign runs asked the reviewer to decide, policy on."""
    approvals_off: int = 0
    clean_tasks: int = 0
    """Benign tasks that read no untrusted content."""
    clean_asked_more: int = 0
    """Of those, the ones that asked more approvals with the policy on than with tiers only (should be 0)."""
    approvals_sources: int = 0
    granted: int = 0
    """Benign proposals approved only because the user declared the source of their untrusted values."""
    approvals_strict: int = 0
    approvals_strict_sources: int = 0
    granted_strict: int = 0

    def add(self, other: Tally) -> None:
        """Add `other`'s counts to this tally."""
        for each in fields(self):
            if each.name != "suite":
                setattr(self, each.name, getattr(self, each.name) + getattr(other, each.name))

    def as_json(self) -> dict[str, Any]:
        """The tally as a JSON object."""
        return asdict(self)


def total(tallies: Iterable[Tally]) -> Tally:
    """The tallies added up, as suite `all`."""
    whole = Tally(suite="all")
    for tally in tallies:
        whole.add(tally)
    return whole


def _per_task(count: int, tasks: int) -> str:
    return f"{count / tasks:.2f}" if tasks else "0.00"


def summary_line(tally: Tally) -> str:
    """The one line the harness ends with."""
    return (
        f"attacks succeeded {tally.attacks}/{tally.pairs} (policy off: {tally.attacks_off}/{tally.pairs}), "
        f"utility {tally.utility}/{tally.tasks} (policy off: {tally.utility_off}/{tally.tasks}), "
        f"approvals per benign task {_per_task(tally.approvals, tally.tasks)}"
    )


def answer_line(tally: Tally) -> str:
    """The answer-only pairs, on a line of their own."""
    return (
        f"answer-only pairs: injected words in the answer {tally.answer_attacks}/{tally.answer_pairs} "
        f"(policy off: {tally.answer_attacks_off}/{tally.answer_pairs}), answers marked as shaped by untrusted "
        f"content {tally.answer_flagged}/{tally.answer_pairs}"
    )


def sources_line(tally: Tally) -> str:
    """The policy on with the sources each task names declared by the user, on a line of its own."""
    return (
        f"with the sources the task names declared: attacks succeeded {tally.attacks_sources}/{tally.pairs}, "
        f"utility {tally.utility_sources}/{tally.tasks}, approvals per benign task "
        f"{_per_task(tally.approvals_sources, tally.tasks)} ({tally.granted} granted by a declared source)"
    )


def strict_line(tally: Tally) -> str:
    """The policy's strict reading, without and with the declared sources, on a line of its own."""
    return (
        f"strict (short values, steered values): attacks succeeded {tally.attacks_strict}/{tally.pairs}, "
        f"utility {tally.utility_strict}/{tally.tasks}, approvals per benign task "
        f"{_per_task(tally.approvals_strict, tally.tasks)}; with the sources declared: attacks succeeded "
        f"{tally.attacks_strict_sources}/{tally.pairs}, utility {tally.utility_strict_sources}/{tally.tasks} "
        f"({tally.granted_strict} granted by a declared source)"
    )
