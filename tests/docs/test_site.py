"""The built docs site, as a reader's browser shows it: the API reference, one page per public module.

The site is built once per session with ``mkdocs build --strict`` and served on loopback; each page
is loaded in headless Chromium through Selenium and the system chromedriver. Without mkdocs,
Selenium or Chromium these tests skip, except where ``AGENTKIT_REQUIRE_BROWSER=1`` says the machine
must have them (CI): there a missing piece is a failure.
"""

from __future__ import annotations

import ast
import functools
import http.server
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

from tests.support import http_server

pytestmark = pytest.mark.slow

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

ROOT = Path(__file__).resolve().parents[2]
API_DIR = ROOT / "docs" / "api"
# The public modules (DESIGN.md's layout, agentkit/__init__.py's docstring), each with its own page.
PUBLIC_MODULES = (
    "agentkit",
    "agentkit.errors",
    "agentkit.events",
    "agentkit.testing",
    "agentkit.providers",
    "agentkit.providers.openai",
    "agentkit.providers.anthropic",
    "agentkit.providers.local",
    "agentkit.journal",
    "agentkit.temporal",
    "agentkit.mcp",
    "agentkit.otel",
    "agentkit.program",
    "agentkit.prompting",
    "agentkit.decisions",
    "agentkit.provenance",
    "agentkit.evals",
    "agentkit.web",
)
DIRECTIVE = re.compile(r"^::: (?P<module>[\w.]+)\s*$", re.MULTILINE)
API_PAGES = sorted(API_DIR.glob("*.md"))
# What a page may weigh as HTML: the single API page was 1.4 MB, and showed a blank frame for 15 s. The
# signatures with their types, each linked to its entry, brought the top-level page from 351 KB to 458 KB.
PAGE_BUDGET = 500_000
VIEWPORT = (1280, 900)
# Exactly two backticks: reStructuredText's literal markup, shown raw. A fence's three are content.
RST_LITERAL = re.compile(r"(?<!`)``(?!`)")


def _missing(reason: str) -> NoReturn:
    if os.environ.get("AGENTKIT_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{reason} (AGENTKIT_REQUIRE_BROWSER=1)")
    pytest.skip(reason)


def _url_path(page: Path) -> str:
    return "api/" if page.stem == "index" else f"api/{page.stem}/"


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if importlib.util.find_spec("mkdocs") is None:
        _missing("mkdocs is not installed (the 'docs' extra)")
    site_dir = tmp_path_factory.mktemp("site")
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )
    assert build.returncode == 0, build.stderr
    return site_dir


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="session")
def base_url(site: Path) -> Iterator[str]:
    with http_server(functools.partial(_QuietHandler, directory=str(site))) as base:
        yield f"{base}/"


@pytest.fixture(scope="session")
def browser() -> Iterator[WebDriver]:
    if importlib.util.find_spec("selenium") is None:
        _missing("selenium is not installed (the 'test' extra)")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    chromedriver = shutil.which("chromedriver")
    if chromium is None or chromedriver is None:
        _missing("Chromium and chromedriver are not installed (apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(argument)
    options.add_argument(f"--window-size={VIEWPORT[0]},{VIEWPORT[1]}")
    driver = webdriver.Chrome(options=options, service=Service(chromedriver))
    driver.set_page_load_timeout(120)
    try:
        yield driver
    finally:
        driver.quit()


def _load(browser: WebDriver, url: str) -> None:
    """Load ``url`` (the driver waits for its load event), then wait for its first contentful paint.

    A page that never paints its content fails here, by the wait's timeout: no time is asserted.
    """
    from selenium.webdriver.support.wait import WebDriverWait

    browser.get(url)
    WebDriverWait(browser, 60).until(
        lambda driver: driver.execute_script(
            "return performance.getEntriesByType('paint').some(p => p.name === 'first-contentful-paint')"
        )
    )
    shown = browser.execute_script(
        "const box = document.querySelector('article h1').getBoundingClientRect();"
        "return [document.readyState, box.height > 0 && box.top < window.innerHeight];"
    )
    assert shown == ["complete", True]


def _public_names(module: str) -> list[str]:
    """The ``__all__`` of ``module``, read from its source (importing it would need every extra)."""
    spec = importlib.util.find_spec(module)
    assert spec is not None
    assert spec.origin is not None
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            names: list[str] = ast.literal_eval(node.value)
            return names
    raise AssertionError(f"{module} has no __all__")


def page_modules(page: Path) -> list[str]:
    """The modules a page documents: its directives, less those of one of their members (a class shown with
    its inherited members, say), each of which must belong to a module the page documents."""
    named = DIRECTIVE.findall(page.read_text(encoding="utf-8"))
    modules = [name for name in named if not any(name.startswith(f"{other}.") for other in named)]
    assert all(any(name.startswith(f"{m}.") for m in modules) for name in named if name not in modules), named
    return modules


def test_every_public_module_has_its_own_api_page() -> None:
    """Each public module is documented on a page of its own, and no page documents a private one."""
    documented = {page.stem: page_modules(page) for page in API_PAGES}
    assert documented.pop("index") == []
    assert sorted(module for modules in documented.values() for module in modules) == sorted(PUBLIC_MODULES)
    assert all(len(modules) == 1 for modules in documented.values()), documented


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_api_page_documents_every_public_name(site: Path, module: str) -> None:
    """Every name in a public module's ``__all__`` has its entry on that module's page."""
    [page] = [page for page in API_PAGES if page_modules(page) == [module]]
    html = (site / _url_path(page) / "index.html").read_text(encoding="utf-8")
    missing = [name for name in _public_names(module) if f'id="{module}.{name}"' not in html]
    assert missing == []


@pytest.mark.parametrize("page", API_PAGES, ids=lambda page: page.stem)
def test_api_page_stays_under_its_weight_budget(site: Path, page: Path) -> None:
    """Each API page is under 500 KB of HTML (the single page was 1.4 MB)."""
    size = (site / _url_path(page) / "index.html").stat().st_size
    assert size < PAGE_BUDGET, f"{page.name}: {size} bytes"


@pytest.mark.parametrize("page", API_PAGES, ids=lambda page: page.stem)
def test_api_page_shows_no_escaped_pipe(browser: WebDriver, base_url: str, page: Path) -> None:
    """A `|` in a table's code (`Schema | None`) shows as a pipe, not as a backslash and a pipe."""
    _load(browser, base_url + _url_path(page))
    text: str = browser.execute_script("return document.querySelector('article').innerText")
    assert "\\|" not in text


@pytest.mark.parametrize("page", API_PAGES, ids=lambda page: page.stem)
def test_api_page_renders_docstrings_as_markdown(browser: WebDriver, base_url: str, page: Path) -> None:
    """No reStructuredText shows raw: no paragraph ends in `::`, no literal in double backticks."""
    _load(browser, base_url + _url_path(page))
    paragraphs: list[str] = browser.execute_script(
        "return [...document.querySelectorAll('article p, article li, article td')].map(e => e.innerText)"
    )
    assert [p for p in paragraphs if re.search(r"::\s*$", p)] == []
    text: str = browser.execute_script("return document.querySelector('article').innerText")
    assert RST_LITERAL.findall(text) == []


# Each code block's right edge, whether it shows all it holds, and whether it can scroll.
_BLOCKS = """
const width = document.documentElement.clientWidth;
return [document.documentElement.scrollWidth <= width, [...document.querySelectorAll('article pre > code')].map(e => ({
    text: e.innerText,
    inside: e.getBoundingClientRect().right <= width,
    fits: e.scrollWidth <= e.clientWidth,
    scrolls: ['auto', 'scroll'].includes(getComputedStyle(e).overflowX),
    copy: !!e.parentElement.querySelector('.md-clipboard') &&
        getComputedStyle(e.parentElement.querySelector('.md-clipboard')).display !== 'none',
}))];
"""


@pytest.mark.parametrize("page", API_PAGES, ids=lambda page: page.stem)
def test_api_page_code_blocks_fit_the_viewport_or_scroll(browser: WebDriver, base_url: str, page: Path) -> None:
    """No block reaches past the viewport, and a block wider than its column scrolls inside itself."""
    _load(browser, base_url + _url_path(page))
    page_fits, blocks = browser.execute_script(_BLOCKS)
    assert page_fits
    assert [b["text"][:60] for b in blocks if not b["inside"] or not (b["fits"] or b["scrolls"])] == []


def test_error_tree_shows_whole_without_scrolling(browser: WebDriver, base_url: str) -> None:
    """The error tree on agentkit.errors' page wraps to its column: none of it is hidden to the right."""
    _load(browser, base_url + "api/errors/")
    _, blocks = browser.execute_script(_BLOCKS)
    [tree] = [b for b in blocks if b["text"].startswith("AgentkitError ")]
    assert tree["fits"], tree


def test_journal_lifecycle_diagram_fits_and_has_no_copy_button(browser: WebDriver, base_url: str) -> None:
    """The proposal lifecycle diagram fits its column whole, with no copy button over its text."""
    _load(browser, base_url + "journal/")
    _, blocks = browser.execute_script(_BLOCKS)
    [diagram] = [b for b in blocks if "│ pending │" in b["text"]]
    assert diagram["fits"], diagram
    assert not diagram["copy"], diagram


@pytest.mark.parametrize("page", API_PAGES, ids=lambda page: page.stem)
def test_api_page_shows_type_aliases_by_name(browser: WebDriver, base_url: str, page: Path) -> None:
    """A type alias (``Cites``) shows by name, not as the ``TypeAliasType(...)`` call that makes it."""
    _load(browser, base_url + _url_path(page))
    text: str = browser.execute_script("return document.querySelector('article').innerText")
    assert "TypeAliasType(" not in text
    if page.stem == "agentkit":
        assert "Cites[Item] = Annotated[str, Item]" in text


# The signatures of the page's callables (an attribute's "signature" is its value: a long string cannot break),
# and the names of the functions shown without a signature block.
_SIGNATURES = """
return [
    [...document.querySelectorAll('article .doc-signature')].filter(e => !e.closest('.doc-attribute'))
        .map(e => e.innerText),
    [...document.querySelectorAll('article .doc-function')].filter(e => !e.querySelector('.doc-signature'))
        .map(e => e.querySelector('.doc-heading').id),
];
"""
SIGNATURE_WIDTH = 88
"""mkdocs.yml's ``line_length``: the width ruff formats each signature to."""


@pytest.mark.parametrize("page", [page for page in API_PAGES if page.stem != "index"], ids=lambda page: page.stem)
def test_api_page_signatures_are_formatted(browser: WebDriver, base_url: str, page: Path) -> None:
    """Each callable's signature is a block of its own under its heading, formatted to the line length (one
    parameter a line where the whole does not fit)."""
    _load(browser, base_url + _url_path(page))
    signatures, unsigned = browser.execute_script(_SIGNATURES)
    assert unsigned == []
    assert [line for s in signatures for line in s.splitlines() if len(line) > SIGNATURE_WIDTH] == []


def test_a_loop_signature_spells_out_its_options(browser: WebDriver, base_url: str) -> None:
    """``run_tool_loop_tiered`` shows each of its keyword options as a parameter of its own, with its type, and
    not the ``**options`` they are written as once."""
    _load(browser, base_url + "api/agentkit/")
    signature: str = browser.execute_script(
        "return document.getElementById('agentkit.run_tool_loop_tiered').nextElementSibling.innerText"
    )
    lines = [line.strip() for line in signature.splitlines()]
    assert lines[0] == "run_tool_loop_tiered("
    for option in ("*,", "same: SameFunc[Args] | None = None,", "grants: Grants | None = None,"):
        assert option in lines, signature
    assert "**options" not in signature
