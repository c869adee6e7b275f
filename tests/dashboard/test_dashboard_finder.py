"""The summary page in headless Chromium, used as a person uses it: type part of a key's name into the
finder, sort a table by verdict with its header's button, follow a key's link to its page.

Once on the page `specperf dashboard` writes for a small store (every panel on `suite.html`), once on
a summary of 1,000 keys (the rich store's views copied under 1,000 names, a page per key): typed text
and clicks go through Chromium's input events, as a keyboard and a mouse send them.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from browser import Browser
from histories import rich_store

from pytest_specperf.cli import main as specperf
from pytest_specperf.report.dashboard.model import Dashboard, build_dashboard
from pytest_specperf.report.dashboard.pages import key_page, key_page_name, summary_page
from pytest_specperf.verdict.checks import Limits
from pytest_specperf.verdict.verdicts import SEVERITY

KEYS = 1000
ROWS = """JSON.stringify(Array.from(document.querySelectorAll("table.keys")[%d].tBodies[0].rows)
  .filter(row => !row.hidden).map(row => [row.dataset.key, row.cells[1].textContent]))"""


def type_into_finder(browser: Browser, text: str) -> None:
    browser.evaluate('document.getElementById("find").focus()')
    browser.call("Input.insertText", {"text": text}, session=browser.session)


def click(browser: Browser, selector: str) -> None:
    """A left click at the middle of the element (of its first line, for a link that wraps), as the mouse
    sends it."""
    box = json.loads(
        browser.evaluate(f"""JSON.stringify((() => {{
      const element = document.querySelector('{selector}');
      element.scrollIntoView({{block: "center"}});
      const r = element.getClientRects()[0];
      return {{x: r.left + r.width / 2, y: r.top + r.height / 2}};
    }})())""")
    )
    for kind in ("mousePressed", "mouseReleased"):
        event = {"type": kind, "x": box["x"], "y": box["y"], "button": "left", "clickCount": 1}
        browser.call("Input.dispatchMouseEvent", event, session=browser.session)


def rows(browser: Browser, table: int) -> list[list[str]]:
    return json.loads(browser.evaluate(ROWS % table))


def rank(verdict: str) -> int:
    return [v.value for v in SEVERITY].index(verdict)


def test_a_key_is_found_by_name_and_the_table_sorted_by_verdict(browser: Browser, tmp_path: Path) -> None:
    store = rich_store(tmp_path / ".specperf")
    assert specperf(["dashboard", "--store", str(store.root), "-o", str(tmp_path / "site")]) == 0
    page = tmp_path / "site" / "index.html"
    loaded = browser.open(page)
    assert loaded.errors == [] and loaded.requests == [page.resolve().as_uri()]
    sim = 1  # the engine's table first, then the simulator's
    assert browser.evaluate('document.getElementById("shown").textContent') == "5 keys"

    type_into_finder(browser, "STEP/chat")  # any part of the name, in any case
    assert [key for key, _ in rows(browser, sim)] == ["eagle3-2step/chat/c1", "eagle3-5step/chat/c1"]
    assert rows(browser, 0) == []
    assert browser.evaluate('document.getElementById("shown").textContent') == "2 of 5 keys"

    browser.evaluate('(f => { f.value = ""; f.dispatchEvent(new Event("input")); })(document.getElementById("find"))')
    click(browser, "table.keys:nth-of-type(2) th:nth-child(2) button")
    # the worst first, in the words the terminal and the summary's cards use
    assert rows(browser, sim)[:2] == [["eagle3-5step/chat/c1", "REGRESSION"], ["eagle3-2step/chat/c1", "SUSPECT"]]
    verdicts = [verdict for _, verdict in rows(browser, sim)]
    assert verdicts == sorted(verdicts, key=rank)
    click(browser, "table.keys:nth-of-type(2) th:nth-child(2) button")
    assert [verdict for _, verdict in rows(browser, sim)][-2:] == ["SUSPECT", "REGRESSION"]
    assert browser.loaded().errors == []


@pytest.fixture(scope="module")
def thousand(tmp_path_factory: pytest.TempPathFactory) -> Dashboard:
    """The rich store's views under 1,000 names: a summary of 1,000 rows, a page per key."""
    store = rich_store(tmp_path_factory.mktemp("rich") / ".specperf")
    base = build_dashboard(store.entries(), title="rich", location="rich", limits=Limits(0.05, 0.02, 0.0))
    views = []
    for i in range(KEYS):
        view = base.keys[i % len(base.keys)]
        name = f"{view.key.server}-{i:04d}"
        views.append(dataclasses.replace(view, key=dataclasses.replace(view.key, server=name)))
    board = dataclasses.replace(base, keys=tuple(views))
    assert board.paged
    return board


def test_a_summary_of_1000_keys_finds_a_key_and_opens_its_page(
    browser: Browser, thousand: Dashboard, tmp_path: Path
) -> None:
    page = tmp_path / "index.html"
    page.write_text(summary_page(thousand))
    wanted = next(v for v in thousand.keys if v.key.server.endswith("-0421"))
    (tmp_path / key_page_name(wanted)).parent.mkdir()
    (tmp_path / key_page_name(wanted)).write_text(key_page(thousand, wanted, note=""))
    loaded = browser.open(page)
    assert loaded.errors == [] and loaded.requests == [page.resolve().as_uri()]
    assert browser.evaluate('document.getElementById("shown").textContent') == f"{KEYS} keys"

    type_into_finder(browser, "-0421/")
    found = rows(browser, 0) + rows(browser, 1)
    assert found == [[wanted.key.label, wanted.verdict.value]]
    assert browser.evaluate('document.getElementById("shown").textContent') == f"1 of {KEYS} keys"
    browser.events.clear()  # the summary's own load is not the key page's
    click(browser, f'a[href="{key_page_name(wanted)}"]')
    browser.wait_for(lambda e: e.get("method") == "Page.loadEventFired")
    panels = json.loads(
        browser.evaluate(
            'JSON.stringify(Array.from(document.querySelectorAll("article.panel")).map(p => p.dataset.key))'
        )
    )
    assert panels == [wanted.key.label]

    browser.open(page)
    click(browser, "table.keys:nth-of-type(2) th:nth-child(2) button")
    verdicts = [verdict for _, verdict in rows(browser, 1)]
    assert len(verdicts) == len(thousand.layer("sim")) and verdicts == sorted(verdicts, key=rank)
    assert verdicts[0] == "REGRESSION" and verdicts.count("REGRESSION") == len(
        [v for v in thousand.regressed if v.layer == "sim"]
    )
    assert browser.loaded().errors == []
