"""The dashboard in a real browser: headless Chromium loads the pages `specperf dashboard` wrote, from disk.

One browser serves the module's tests (browser.py drives it over the DevTools protocol). Each page
must load without an error or a warning in the console, request nothing but its own file, and show
what the store holds: a panel per key with a point per run, the step where the history has one, the
hover text of a run, the summary's lists; a screenshot is taken and its size checked.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from browser import Browser, png_size
from histories import STEP_AT, rich_store

from pytest_specperf.cli import main as specperf
from pytest_specperf.store.file import FileStore
from pytest_specperf.store.records import StoredBaseline, is_simulated

EXAMPLE_STORE = Path(__file__).resolve().parents[2] / "example_suite" / ".specperf"

PANELS = """JSON.stringify(Array.from(document.querySelectorAll("article.panel")).map(panel => ({
  key: panel.dataset.key, layer: panel.dataset.layer, runs: Number(panel.dataset.runs),
  points: Object.fromEntries(Array.from(panel.querySelectorAll("svg.chart")).map(
    chart => [chart.dataset.metric, chart.querySelectorAll(".point").length])),
  changes: Array.from(panel.querySelectorAll(".change")).map(c => c.dataset.kind + "@" + c.dataset.run),
})))"""


def expected_panels(entries: list[StoredBaseline]) -> dict[tuple[str, str], dict[str, int]]:
    """Per (layer, key): the runs each chart must show, counted from the store itself (a speedup needs
    the same layer's reference run of the same session)."""
    expected = {}
    for entry in entries:
        layer = "sim" if is_simulated(entry.fingerprint) else "engine"
        runs = entry.runs
        counts = {
            "output_throughput": len(runs),
            "mean_tpot_ms": len(runs),
            "accept_length": sum(1 for r in runs if r.measurement.samples("accept_length")),
        }
        reference = next(
            (
                e
                for e in entries
                if e.measurement.is_reference
                and e.measurement.key.workload == entry.measurement.key.workload
                and e.measurement.key.concurrency == entry.measurement.key.concurrency
                and is_simulated(e.fingerprint) == is_simulated(entry.fingerprint)
            ),
            None,
        )
        if reference is not None and not entry.measurement.is_reference:
            sessions = {r.provenance.session for r in reference.runs}
            counts["speedup"] = sum(1 for r in runs if r.provenance.session in sessions)
        expected[(layer, entry.measurement.key.label)] = {m: n for m, n in counts.items() if n}
    return expected


def shown_panels(browser: Browser) -> list[dict]:
    return json.loads(browser.evaluate(PANELS))


def assert_clean(loaded, page: Path) -> None:
    """No console error or warning, no exception, nothing requested beyond the page's own file."""
    assert loaded.errors == [], loaded.errors
    assert loaded.requests == [page.resolve().as_uri()], loaded.requests


@pytest.fixture(scope="module")
def rich_site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[StoredBaseline]]:
    root = tmp_path_factory.mktemp("rich")
    store = rich_store(root / ".specperf")
    assert specperf(["dashboard", "--store", str(store.root), "-o", str(root / "site")]) == 0
    return root / "site", store.entries()


def test_every_key_has_its_panel_its_points_and_its_step(browser: Browser, rich_site) -> None:
    site, entries = rich_site
    page = site / "suite.html"
    assert_clean(browser.open(page), page)
    panels = shown_panels(browser)
    shown = {(p["layer"], p["key"]): p["points"] for p in panels}
    assert shown == expected_panels(entries)
    assert all(p["runs"] == p["points"]["output_throughput"] for p in panels)
    changes = {p["key"]: p["changes"] for p in panels if p["layer"] == "sim"}
    assert changes["eagle3-5step/chat/c1"][:1] == [f"step@{STEP_AT}"]  # throughput's step, drawn first
    assert changes["plain/sweep/c2"][:1] == ["drift@0"]
    assert changes["plain/chat/c1"] == []  # a steady history: nothing drawn

    # the step's line lies between the last run before it and the first run after it, as drawn
    xs = json.loads(
        browser.evaluate("""JSON.stringify((() => {
      const chart = document.querySelector('#sim-eagle3-5step-chat-c1 svg[data-metric="output_throughput"]');
      const centre = e => { const r = e.getBoundingClientRect(); return r.left + r.width / 2; };
      return {line: centre(chart.querySelector(".change.step line")),
              points: Array.from(chart.querySelectorAll(".point .marker")).map(centre)};
    })())""")
    )
    assert xs["points"][STEP_AT - 1] < xs["line"] < xs["points"][STEP_AT]
    marks = browser.evaluate("""JSON.stringify(Array.from(document.querySelectorAll(
      '#sim-eagle3-5step-chat-c1 svg[data-metric="output_throughput"] .point')).map(p => p.getAttribute("class")))""")
    classes = json.loads(marks)
    assert sum("status-refused" in c for c in classes) == 5 and sum("status-suspect" in c for c in classes) == 1
    assert [i for i, c in enumerate(classes) if "newest" in c] == [11, 12]  # tonight: two server starts

    shot = browser.screenshot()
    assert png_size(shot) == (1280, 900) and len(shot) > 40_000  # a drawn page, not a blank one


def test_hovering_a_run_shows_its_commit_date_drift_and_status(browser: Browser, rich_site) -> None:
    site, _ = rich_site
    browser.open(site / "suite.html")
    selector = '#sim-eagle3-2step-chat-c1 svg[data-metric="output_throughput"] .point[data-run="9"] .marker'
    box = json.loads(
        browser.evaluate(f"""JSON.stringify((() => {{
      const marker = document.querySelector('{selector}');
      marker.scrollIntoView({{block: "center"}});
      const r = marker.getBoundingClientRect();
      return {{x: r.left + r.width / 2, y: r.top + r.height / 2}};
    }})())""")
    )
    browser.call(
        "Input.dispatchMouseEvent", {"type": "mouseMoved", "x": box["x"], "y": box["y"]}, session=browser.session
    )
    tip = json.loads(
        browser.evaluate(
            'JSON.stringify((t => ({hidden: t.hidden, text: t.innerText}))(document.querySelector(".tip")))'
        )
    )
    assert not tip["hidden"]
    text = tip["text"]
    assert text.startswith("run 10 of 13 · segment 1\n2026-11-10 02:10 UTC · commit 090abcd · host gpu-node-1\n")
    assert "fingerprint since the run before: NCCL_ALGO: Ring → Tree" in text
    assert "status: accepted: counts in the level and the spread; verdict passed" in text
    assert browser.loaded().errors == []


def test_the_summary_lists_what_regressed_what_is_suspect_and_what_the_gate_cannot_see(
    browser: Browser, rich_site
) -> None:
    site, _ = rich_site
    page = site / "index.html"
    assert_clean(browser.open(page), page)
    lists = json.loads(
        browser.evaluate("""JSON.stringify(Object.fromEntries(Array.from(
      document.querySelectorAll(".card")).map(card => [card.dataset.list,
        Array.from(card.querySelectorAll(":scope > ul > li > a")).map(a => a.textContent)])))""")
    )
    assert lists == {
        "bad": ["eagle3-5step/chat/c1"],
        "warn": ["eagle3-2step/chat/c1"],
        "blind": ["plain/code/c1", "plain/sweep/c2"],
    }
    targets = json.loads(
        browser.evaluate(
            "JSON.stringify(Array.from(document.querySelectorAll('a[href^=\"suite.html#\"]'))"
            ".map(a => a.hash.slice(1)))"
        )
    )
    browser.open(site / "suite.html")
    present = json.loads(
        browser.evaluate("JSON.stringify(Array.from(document.querySelectorAll('article.panel')).map(p => p.id))")
    )
    assert targets and set(targets) <= set(present)  # every link of the summary lands on a panel


def test_the_example_suites_dashboard_opens_with_a_panel_per_key(browser: Browser, tmp_path: Path) -> None:
    site = tmp_path / "site"
    assert specperf(["dashboard", "--store", str(EXAMPLE_STORE), "-o", str(site)]) == 0
    entries = FileStore(EXAMPLE_STORE).entries()
    for name in ("index.html", "suite.html"):
        assert_clean(browser.open(site / name), site / name)
    shown = {(p["layer"], p["key"]): p["points"] for p in shown_panels(browser)}
    assert shown == expected_panels(entries) and len(shown) == len(entries)
