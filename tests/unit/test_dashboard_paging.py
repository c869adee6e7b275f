"""The dashboard at a team's scale, as pages: 1,000 keys by 365 nights give a first page of one row per
key within 2 MB, a page per key with the key's whole year, and an index of those pages.

The nights are a real SGLang night (tests/data/real-nights/sglang-cpu-spec: the reference `plain` and
the speculative `ngram` of one session, with their rounds and fingerprints) repeated with seeded
noise; two keys are built by the verdict engine (`build_dashboard`) and their views stand for the
store's 1,000 keys (the summary reads each view alone, so a copy costs what a key of its own costs).
Pure: no process, no file written.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
import re
from pathlib import Path

import pytest

from pytest_specperf.measure.fingerprint import Fingerprint
from pytest_specperf.measure.records import Measurement, MeasurementKey
from pytest_specperf.report.dashboard.model import PAGED_RUNS, Dashboard, build_dashboard
from pytest_specperf.report.dashboard.pages import (
    CARD_ITEMS,
    KEYS_DIR,
    SUITE,
    SUMMARY,
    key_page,
    site_pages,
    suite_page,
    summary_page,
)
from pytest_specperf.store.records import Provenance, StoredBaseline, StoredRun, Summary
from pytest_specperf.verdict.checks import Limits

NIGHT = Path(__file__).resolve().parents[1] / "data" / "real-nights" / "sglang-cpu-spec" / "night1-report.json"
LIMITS = Limits.tolerating(0.05, 0.02)
NIGHTS = 365
KEYS = 1000
MIB = 2**20


def real(server: str) -> Measurement:
    report = json.loads(NIGHT.read_text())
    row = next(m for m in report["measurements"] if m["server"] == server)
    return Measurement.from_dict(row, fingerprint=Fingerprint.from_dict(row["fingerprint"]))


def history(template: Measurement, nights: int, rng: random.Random, *, refused_tonight: bool) -> StoredBaseline:
    """`nights` nights of `template`, each night's rounds scaled by a seeded level and round noise; the
    newest night 10% slower and refused (a REGRESSION night) when asked."""
    runs = []
    for night in range(nights):
        level = rng.gauss(1.0, 0.015) * (0.9 if refused_tonight and night == nights - 1 else 1.0)
        rounds = [
            dataclasses.replace(r, output_throughput=r.output_throughput * level * rng.gauss(1.0, 0.004))
            for r in template.rounds
        ]
        measurement = dataclasses.replace(template, rounds=rounds)
        created = f"2026-{1 + night // 31 % 12:02d}-{1 + night % 28:02d}T02:00:00+00:00"
        provenance = Provenance(created, None, "gpu-node-1", "0", f"night-{night:03d}", f"run-{night:05d}")
        status = "refused" if refused_tonight and night == nights - 1 else "accepted"
        runs.append(StoredRun(measurement, Summary.of(measurement), provenance, 0, status))
    newest = runs[-1]
    return StoredBaseline(newest.measurement, newest.summary, newest.provenance, Path("x.jsonl"), tuple(runs))


def board_of(nights: int) -> Dashboard:
    rng = random.Random(20261204)
    entries = [
        history(real("plain"), nights, rng, refused_tonight=False),
        history(real("ngram"), nights, rng, refused_tonight=True),
    ]
    return build_dashboard(entries, title="nightly", location="git:specperf-history", limits=LIMITS)


@pytest.fixture(scope="module")
def year() -> Dashboard:
    """1,000 keys of 365 nights: the reference's view and the refused key's, each for half the keys."""
    base = board_of(NIGHTS)
    assert [v.status for v in base.keys] == ["accepted", "refused"]
    views = [
        dataclasses.replace(base.keys[i % 2], key=MeasurementKey(f"server-{i % 2}-{i // 8:03d}", "chat", 1 << i % 4))
        for i in range(KEYS)
    ]
    return dataclasses.replace(base, keys=tuple(views))


def test_the_first_page_is_one_row_per_key_within_2_mb(year: Dashboard) -> None:
    assert year.paged and sum(len(v.runs) for v in year.keys) == KEYS * NIGHTS
    page = summary_page(year)
    assert len(page.encode()) <= 2 * MIB, f"{len(page.encode()) / MIB:.2f} MiB"
    rows = re.findall(r'<tr data-key="([^"]+)"><td data-v="[^"]+"><a href="([^"]+)">', page)
    assert len(rows) == KEYS
    assert all(href == f"{KEYS_DIR}/engine-{key.replace('/', '-')}.html" for key, href in rows)
    # the verdict words the terminal uses, sortable by their precedence; the cards name the first keys
    assert page.count('<span class="verdict REGRESSION">REGRESSION</span>') == len(year.regressed) == KEYS // 2
    assert page.count('<span class="verdict PASS">PASS</span>') == KEYS // 2
    bad = page[page.index('data-list="bad"') : page.index('data-list="warn"')]
    assert bad.count("<li><a href=") == CARD_ITEMS
    assert f"and {KEYS // 2 - CARD_ITEMS} more: sort the table below by verdict" in bad
    assert page.count('<svg class="trend"') == KEYS  # a trend of the newest nights, not the year
    assert page.count("<polyline") == KEYS and "<circle" in page


def test_each_key_has_a_page_with_its_whole_year_and_the_suite_page_indexes_them(year: Dashboard) -> None:
    names = [name for name, _ in itertools.islice(site_pages(year), 3)]  # made one at a time
    assert names == [SUMMARY, SUITE, f"{KEYS_DIR}/{year.keys[0].anchor}.html"]
    page = key_page(year, year.keys[1], note="")
    assert len(page.encode()) <= 2 * MIB
    assert page.count("<article class=") == 1 and f'data-runs="{NIGHTS}"' in page
    assert page.count('class="point') >= 3 * NIGHTS  # throughput, TPOT, accept length: every night
    assert 'href="../index.html"' in page and 'href="../suite.html"' in page
    index = suite_page(year)
    assert len(index.encode()) <= 2 * MIB and "<article" not in index
    assert len(re.findall(rf'<li><a href="{KEYS_DIR}/[^"]+\.html">', index)) == KEYS


def test_a_small_store_keeps_every_panel_on_one_page() -> None:
    small = board_of(PAGED_RUNS // 2 // 10)
    assert not small.paged
    assert [name for name, _ in site_pages(small)] == [SUMMARY, SUITE]
    assert suite_page(small).count("<article class=") == 2
    assert f'<a href="{SUITE}#{small.keys[1].anchor}">' in summary_page(small)
