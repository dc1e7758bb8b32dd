"""docs/temporal.md's Performance section quotes its results files: every measured figure in it is in a
results file the section names (``tests/test_published_figures.py`` checks the README and
docs/performance.md, not this page)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
FIGURE = re.compile(r"(?<![\w.-])\d[\d,]*\.\d+")
"""A measured figure: a number with a fraction (a count such as "1,000 concurrent runs" is not one)."""
NAMED = re.compile(r"`(?:benchmarks/results/)?(temporal-rounds-[\w.-]+?)\.md`")


def performance_section() -> str:
    text = (ROOT / "docs" / "temporal.md").read_text(encoding="utf-8")
    found = re.search(r"^## Performance\n(.*?)(?=^## )", text, re.DOTALL | re.MULTILINE)
    assert found is not None, "docs/temporal.md has a Performance section"
    return found.group(1)


def unquoted(section: str) -> list[str]:
    """The figures of ``section`` that none of the results files it names holds."""
    quoted = " ".join((RESULTS / f"{name}.md").read_text(encoding="utf-8") for name in NAMED.findall(section))
    held = set(FIGURE.findall(quoted))
    return [figure for figure in FIGURE.findall(section) if figure not in held]


def test_every_figure_of_the_temporal_performance_section_is_in_a_results_file_it_names() -> None:
    """Each figure with a fraction in the section is written in a results file the section names."""
    section = performance_section()
    assert NAMED.findall(section), "the section names no results file"
    assert unquoted(section) == []


def test_a_figure_no_named_results_file_holds_is_caught() -> None:
    """A figure typed by hand, or one from a results file the section does not name, is reported."""
    named = "`benchmarks/results/temporal-rounds-before-2026-12-01.md`"
    assert unquoted(f"{named}: 186.9 ms a round") == []
    assert unquoted(f"{named}: 186.8 ms a round, 1.74x faster") == ["186.8", "1.74"]
    assert unquoted("186.9 ms a round") == ["186.9"]


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
