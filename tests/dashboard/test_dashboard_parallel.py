"""A large store's dashboard, its keys each read, judged and drawn onto its own page by the process that
made its view (report/dashboard/parallel.py): the site is byte for byte the one a single process makes
from every whole history (`entries`, `build_dashboard`, `write_site`), whether one process or several
make it, when a history's last line is not its newest run, and when a git store's site is published and
written to a folder by one command.

The stores are seeded (tests/dashboard/histories.py): both layers, segments, refused and suspect nights,
an outlier, a step, a drift, fingerprint drift and a second server start, so every part of a page is drawn.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from gitrepos import git
from histories import rich_store
from test_dashboard import BRANCH, git_store, recorded

from pytest_specperf.cli import main as specperf
from pytest_specperf.measure.records import MeasurementKey
from pytest_specperf.report import dashboard
from pytest_specperf.report.dashboard import SiteSpec, make_site, model, parallel, write_site
from pytest_specperf.report.dashboard.model import build_dashboard
from pytest_specperf.store.file import FileStore
from pytest_specperf.store.parts import history_files
from pytest_specperf.verdict.checks import Limits

LIMITS = Limits(0.05, 0.02, 0.0)
SPEC = SiteSpec("rich", "rich store", LIMITS)
KEYS = 5


def pages(site: Path) -> dict[str, str]:
    """Every page of a site, by its name relative to the site."""
    return {str(page.relative_to(site)): page.read_text(encoding="utf-8") for page in sorted(site.rglob("*.html"))}


def one_process(store: FileStore, site: Path) -> dict[str, str]:
    """The site as one process makes it from every whole history, as every store was drawn before."""
    write_site(build_dashboard(store.entries(), title=SPEC.title, location=SPEC.location, limits=LIMITS), site)
    return pages(site)


@pytest.fixture
def large(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The rich store's keys and runs count as a large store's: paged, each key's page made where its view
    is. Counts the rounds of pages made (`parallel._made`): one, or two when the plan made from the
    histories' newest lines was not the histories' own."""
    monkeypatch.setattr(model, "PAGED_RUNS", 10)
    monkeypatch.setattr(dashboard, "PARALLEL_KEYS", 2)
    rounds: list[int] = []
    made = parallel._made

    def counted(*args: object, **kwargs: object) -> object:
        rounds.append(1)
        return made(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(parallel, "_made", counted)
    return rounds


@pytest.mark.parametrize("workers", [1, 2])
def test_pages_made_where_the_keys_views_are_are_those_of_the_whole_histories(
    tmp_path: Path, large: list[int], workers: int
) -> None:
    store = rich_store(tmp_path / ".specperf")
    expected = one_process(store, tmp_path / "one")
    made, written = make_site(store, tmp_path / "site", SPEC, workers=workers)
    assert pages(tmp_path / "site") == expected
    assert len(expected) == 2 + KEYS and len(written) == len(expected) and large == [1]
    # what the parent holds of a key: its newest run without its rounds, and the count of its runs
    whole = build_dashboard(store.entries(), title=SPEC.title, location=SPEC.location, limits=LIMITS)
    assert [(v.key, v.run_count) for v in made.keys] == [(v.key, len(v.runs)) for v in whole.keys]
    assert all(len(v.runs) == 1 and not v.runs[0].measurement.rounds for v in made.keys)


def test_a_history_whose_last_line_repeats_an_earlier_run_is_drawn_from_its_newest_run(
    tmp_path: Path, large: list[int]
) -> None:
    """The store's newest run is plain/sweep/c2's 18th night; its history's last line becomes a copy of its
    first (a run appended twice is kept once, where it first stands). The newest lines then name another
    newest run than the histories hold, so the pages are made again with what the processes read."""
    store = rich_store(tmp_path / ".specperf")
    sweep = history_files(store.path_for(MeasurementKey("plain", "sweep", 2), simulated=True))[-1]
    with sweep.open("a", encoding="utf-8") as handle:
        handle.write(sweep.read_text(encoding="utf-8").splitlines(keepends=True)[0])
    expected = one_process(store, tmp_path / "one")
    assert "newest run 2026-11-18 02:10 UTC" in expected["index.html"]
    make_site(store, tmp_path / "site", SPEC, workers=2)
    assert pages(tmp_path / "site") == expected
    assert large == [1, 1]


def test_a_store_of_many_short_histories_keeps_its_panels_on_one_page(
    tmp_path: Path, large: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keys enough for processes but runs too few for pages per key: `suite.html` holds every panel, drawn
    from the whole histories, and the keys' pages made meanwhile are removed."""
    monkeypatch.setattr(model, "PAGED_RUNS", 1000)
    store = rich_store(tmp_path / ".specperf")
    expected = one_process(store, tmp_path / "one")
    made, _ = make_site(store, tmp_path / "site", SPEC, workers=2)
    assert not made.paged and pages(tmp_path / "site") == expected and list(expected) == ["index.html", "suite.html"]


def test_a_published_site_is_the_one_written_to_the_output_folder(
    tmp_path: Path, large: list[int], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--publish -o DIR`: the pages made at the branch's root are copied to DIR, not made twice."""
    monkeypatch.setattr(model, "PAGED_RUNS", 5)
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "--quiet", "--bare", str(remote))
    for number, server in enumerate(("plain", "eagle3-5step", "eagle3-2step")):
        recorded(remote, tmp_path, MeasurementKey(server, "chat", 1), f"job{number}")
    site = tmp_path / "site"
    assert specperf(["dashboard", "--store", f"git:{remote}#{BRANCH}", "--publish", "-o", str(site)]) == 0
    out = capsys.readouterr().out
    assert f"  {site}/keys/: 3 pages, one per key\n" in out and large == [1]
    branch = git_store(remote, tmp_path / "work-check")
    branch.prepare()
    try:
        assert pages(site) == pages(branch.root) and len(pages(site)) == 2 + 3
    finally:
        branch.close()
