"""The performance figures on the README and in docs/performance.md: each from a results file, none typed by hand."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchmarks import publish

RESULTS = publish.ROOT / "benchmarks" / "results"
LATEST = {
    "contenders": "benchmarks/results/latest.json",
    "contenders-short": "benchmarks/results/latest.json",
    "targets": "benchmarks/results/latest.json",
    "loop-alone": "benchmarks/results/latest.json",
    "imports": "benchmarks/results/latest.json",
    "fake-server": "benchmarks/results/fake-server-latest.json",
    "prompt-tokens": "benchmarks/results/prompt-tokens-latest.json",
}
"""The results file each kind of block must quote: the latest of its benchmark."""
FIGURE = re.compile(r"\d[\d,.]*\s?(?:ms|µs|us|s|MiB|KiB|GiB|MB|KB|kB|bytes|\u00d7|x|%)(?![\w])|\u00d7\s?\d")
"""A measured figure: a number with a unit of time, size or ratio (a count such as "4 rounds" is not one)."""


def page_text(page: str) -> str:
    return (publish.ROOT / page).read_text(encoding="utf-8")


def performance_prose(page: str) -> str:
    """The page's text about performance (the README's Performance section), with its figures blocks taken out."""
    text = page_text(page)
    if page == "README.md":
        found = re.search(r"^## Performance\n(.*?)(?=^## )", text, re.DOTALL | re.MULTILINE)
        assert found is not None, "the README has a Performance section"
        text = found.group(1)
    return publish.BLOCK.sub("", text)


@pytest.mark.parametrize("page", publish.PAGES)
def test_every_figures_block_is_what_its_results_file_gives(page: str) -> None:
    """Each block holds exactly its renderer's text of the results file it names (python -m benchmarks.publish)."""
    assert publish.blocks(page, page_text(page)), f"{page} publishes no figures"
    stale = publish.stale(page)
    assert not stale, f"{page}: stale figures {[b.kind for b in stale]}; run python -m benchmarks.publish"


@pytest.mark.parametrize("page", publish.PAGES)
def test_the_pages_quote_the_latest_results(page: str) -> None:
    """Every block of a kind that has a latest results file quotes that file (the before side of a change aside)."""
    for block in publish.blocks(page, page_text(page)):
        if block.kind in LATEST:
            assert block.files == (LATEST[block.kind],), (page, block.kind, block.files)
        else:
            assert block.kind == "change"
            assert block.files[-1] == "benchmarks/results/latest.json"


def test_latest_is_the_newest_dated_run_of_the_benchmark() -> None:
    """latest.json is the dated results file of its own date, and no dated run of the benchmark is newer."""
    latest = json.loads((RESULTS / "latest.json").read_text(encoding="utf-8"))
    day = latest["environment"]["date"][:10]
    assert json.loads((RESULTS / f"{day}.json").read_text(encoding="utf-8")) == latest
    dated = sorted(path.stem for path in RESULTS.glob("????-??-??.json"))
    assert dated[-1] == day
    for kind in ("fake-server", "prompt-tokens"):
        other = json.loads((RESULTS / f"{kind}-latest.json").read_text(encoding="utf-8"))
        assert (RESULTS / f"{kind}-{other['environment']['date'][:10]}.json").exists()


def quoted_files() -> list[str]:
    return sorted({file for page in publish.PAGES for b in publish.blocks(page, page_text(page)) for file in b.files})


@pytest.mark.parametrize("path", quoted_files())
def test_each_quoted_results_file_records_when_where_and_under_what_load(path: str) -> None:
    """A results file carries the date, the machine and its load average before and after the run."""
    environment = json.loads((publish.ROOT / path).read_text(encoding="utf-8"))["environment"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", environment["date"])
    assert environment["machine"]
    assert len(environment["load_before"]) == 3
    assert len(environment["load_after"]) == 3


@pytest.mark.parametrize("page", publish.PAGES)
def test_no_figure_on_a_performance_page_is_typed_by_hand(page: str) -> None:
    """Outside the generated blocks a page states no measured time, size or ratio."""
    typed = [match.group() for match in FIGURE.finditer(performance_prose(page))]
    assert not typed, f"{page}: figures typed by hand (put them in a figures block): {typed}"


def test_a_figure_typed_by_hand_is_caught() -> None:
    """The check would see the figures a page used to type by hand."""
    for figure in ("3.40 ms", "1.38x", "\u00d7 2", "1.2\u00d7", "338 MiB", "57 µs", "2,271 bytes", "40 ms", "27%"):
        assert FIGURE.search(f"it took {figure} per round"), figure
    for count in ("4 model round trips", "1,000 concurrent runs", "three searches", "Python 3.11", "15 repeats"):
        assert not FIGURE.search(count), count


def test_publish_rewrites_a_stale_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A block whose text is not its results file's is rewritten from it, and the rest of the page is kept."""
    page = tmp_path / "page.md"
    opening = "<!-- figures: loop-alone from benchmarks/results/latest.json -->"
    page.write_text(f"intro\n{opening}\nold figures\n<!-- end figures -->\nend\n", encoding="utf-8")
    monkeypatch.setattr(publish, "ROOT", tmp_path)
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "benchmarks" / "results" / "latest.json").write_text(
        (RESULTS / "latest.json").read_text(encoding="utf-8"), encoding="utf-8"
    )
    assert publish.stale("page.md")
    assert publish.publish("page.md")
    assert not publish.stale("page.md")
    text = page.read_text(encoding="utf-8")
    assert text.startswith(f"intro\n{opening}\n")
    assert text.endswith("<!-- end figures -->\nend\n")
    assert "old figures" not in text
