"""The web inbox's picture in ``docs/human-in-the-loop.md``, taken with the browser tests' own tooling.

    python -m tests.inbox.screenshot docs/inbox.png

It serves the inbox over a fresh SQLite journal holding three proposals (one of them with markup in
its rationale, which shows as text; one of a recorded run, with its task and the passage its
executor had found), has alice approve one in headless Chromium, opens another's amend form, and
saves the page.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from tests.inbox.support import ALICE, InboxServer, Mail, chromium

TASK = "Send finance the final Q3 figures they asked for today."
"""The first proposal's run: its task, and the passage its search found."""
FOUND = "Q3 figures, final: revenue 4.2 M EUR, costs 3.1 M EUR (signed off by the board on 3 October)."

PROPOSALS = [
    ("all@example.com", "We ship on Monday.", "Announce the release."),
    ("ops@example.com", "<b>urgent</b>", 'The model wrote markup: <img src=x onerror="alert(1)"> shows as text.'),
]


def main(path: str) -> None:
    with tempfile.TemporaryDirectory() as folder, InboxServer(str(Path(folder) / "journal.db")) as server:
        mail = Mail(to="finance@example.com", body="Q3 figures attached.")
        ids = [server.record_run(TASK, FOUND, mail=mail, rationale="p:1 holds the final figures finance asked for.")]
        ids += [server.propose(to, body=body, rationale=why) for to, body, why in PROPOSALS]
        with chromium(width=1000, height=2000) as driver:
            from selenium.webdriver.common.by import By

            driver.implicitly_wait(15)  # the link's page moves on to /signin, then to the inbox, by itself
            driver.get(f"{server.base}/?token={ALICE}")
            driver.find_element(By.CSS_SELECTOR, f"#p-{ids[1]} form.approve button").click()
            driver.find_element(By.CSS_SELECTOR, f"#p-{ids[1]}.decided")
            driver.find_element(By.CSS_SELECTOR, f"#p-{ids[1]} details.history").click()
            driver.find_element(By.CSS_SELECTOR, f"#p-{ids[0]} details.amend summary").click()
            driver.save_screenshot(path)


if __name__ == "__main__":
    main(sys.argv[1])
