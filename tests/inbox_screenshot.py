"""The web inbox's picture in ``docs/human-in-the-loop.md``, taken with the browser tests' own tooling.

    python -m tests.inbox_screenshot docs/inbox.png

It serves the inbox over a fresh SQLite journal holding three proposals (one of them with markup in
its rationale, which shows as text; one with the evidence its executor had seen), has alice
approve one in headless Chromium, opens another's amend form, and saves the page.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from agentkit.decisions import CallSeen, Evidence
from tests.inbox_support import ALICE, InboxServer, chromium

SEEN = Evidence(
    rounds=(1, 2),
    calls=(
        CallSeen(
            round=1, tool_name="search", digest="5b0c1e9a2f47" + "0" * 52, ran=True, item_ids=("search:1", "search:2")
        ),
        CallSeen(round=2, tool_name="read_sheet", digest="9d41a7c03e6b" + "0" * 52, ran=True, item_ids=("sheet:q3",)),
    ),
)
"""What the first proposal's executor had seen, as references."""

PROPOSALS = [
    ("finance@example.com", "Q3 figures attached.", "The quarterly figures are final; finance asked for them today."),
    ("all@example.com", "We ship on Monday.", "Announce the release."),
    ("ops@example.com", "<b>urgent</b>", 'The model wrote markup: <img src=x onerror="alert(1)"> shows as text.'),
]


def main(path: str) -> None:
    with tempfile.TemporaryDirectory() as folder, InboxServer(str(Path(folder) / "journal.db")) as server:
        ids = [
            server.propose(to, body=body, rationale=why, evidence=SEEN if n == 0 else None)
            for n, (to, body, why) in enumerate(PROPOSALS)
        ]
        with chromium(width=1000, height=1850) as driver:
            from selenium.webdriver.common.by import By

            driver.get(f"{server.base}/?token={ALICE}")
            driver.find_element(By.CSS_SELECTOR, f"#p-{ids[1]} form.approve button").click()
            driver.find_element(By.CSS_SELECTOR, f"#p-{ids[1]}.decided")
            driver.find_element(By.CSS_SELECTOR, f"#p-{ids[1]} details").click()
            driver.find_element(By.CSS_SELECTOR, f"#p-{ids[0]} details.amend summary").click()
            driver.save_screenshot(path)


if __name__ == "__main__":
    main(sys.argv[1])
