"""``benchmarks.temporal_rounds --compare``: the ratios files docs/temporal.md's Performance section quotes
(through ``benchmarks/publish.py``'s temporal-change blocks, which ``tests/docs/test_published_figures.py`` checks)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"


def test_compare_gives_each_figure_after_against_before() -> None:
    """``benchmarks.temporal_rounds --compare`` sets each figure two results files hold side by side, with its
    ratio after / before (the ratios the section quotes come from such a file)."""
    from benchmarks.temporal_rounds import change_markdown, compare

    before = RESULTS / "temporal-rounds-before-reads-2026-12-02.json"
    after = RESULTS / "temporal-rounds-after-reads-2026-12-02.json"
    rows = {row["figure"]: row for row in compare(before, after)["figures"]}
    assert (rows["concurrent.runs_per_s"]["before"], rows["concurrent.runs_per_s"]["after"]) == (3.0, 8.13)
    assert rows["concurrent.runs_per_s"]["ratio"] == round(8.13 / 3.0, 2)
    assert rows["temporal_history.workflow_tasks"]["ratio"] == round(1 / 9, 2)
    table = change_markdown({**compare(before, after), "date": "2026-12-02"})
    assert "| 1,000 concurrent runs: runs/s | 3.0 | 8.13 | 2.71 |" in table
