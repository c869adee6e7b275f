"""`specperf dashboard` without a browser: what it computes from a store, its bad input, and git stores
(read by URL, published onto the branch, published again after another job's push came first)."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest
from gitrepos import git
from histories import STEP_AT, Night, measurement, record, rich_store

from pytest_specperf.cli import build_parser
from pytest_specperf.cli import main as specperf
from pytest_specperf.config.location import StoreLocation
from pytest_specperf.measure.records import MeasurementKey
from pytest_specperf.report import dashboard
from pytest_specperf.report.dashboard import model
from pytest_specperf.report.dashboard.model import Dashboard, KeyView, assemble, build_dashboard
from pytest_specperf.report.dashboard.pages import suite_page, summary_page
from pytest_specperf.report.dashboard.svg import NEWEST_LABEL_HALF_WIDTH
from pytest_specperf.store import GitStore, open_store
from pytest_specperf.store.file import FileStore
from pytest_specperf.verdict.checks import Limits

BRANCH = "specperf-history"
LIMITS = Limits(0.05, 0.02, 0.0)


def view(board: Dashboard, label: str, layer: str = "sim") -> KeyView:
    return next(k for k in board.keys if k.key.label == label and k.layer == layer)


@pytest.fixture(scope="module")
def board(tmp_path_factory: pytest.TempPathFactory) -> Dashboard:
    store = rich_store(tmp_path_factory.mktemp("rich") / ".specperf")
    return build_dashboard(store.entries(), title="rich", location=str(store.root), limits=LIMITS)


def test_the_newest_night_decides_the_lists_and_the_gate_what_it_can_see(board: Dashboard) -> None:
    assert [k.key.label for k in board.regressed] == ["eagle3-5step/chat/c1"]
    assert [k.key.label for k in board.suspect] == ["eagle3-2step/chat/c1"]
    assert [(k.layer, k.key.label) for k in board.blind] == [("engine", "plain/code/c1"), ("sim", "plain/sweep/c2")]
    bimodal = view(board, "plain/code/c1", "engine").gate.blind
    assert bimodal[0].startswith("this key cannot show a 5% change: its run-to-run CV is ")
    assert bimodal[1].startswith("its run means fall into two groups (")
    stepped = view(board, "eagle3-5step/chat/c1")
    assert stepped.newest == {11, 12}  # tonight's two server starts
    night = stepped.gate.night
    assert night is not None and night.comparison is not None and night.comparison.starts == 2
    assert night.comparison.runs == STEP_AT  # the refused and suspect runs count in neither level nor spread
    assert view(board, "plain/chat/c1").gate.blind == ()


def test_changes_rejections_and_drift_are_the_engines(board: Dashboard) -> None:
    stepped = view(board, "eagle3-5step/chat/c1")
    change = stepped.change_in_force
    assert change is not None and (change.kind, change.run) == ("step", STEP_AT)
    assert change.sentence.startswith("eagle3-5step chat c1 throughput -")
    assert change.sentence.endswith("since the run of 2026-11-08 (commit 070abcd)")
    assert stepped.chart("output_throughput").level is not None
    drifting = view(board, "plain/sweep/c2").chart("output_throughput")
    # drawn, but not in force: the newest night's verdict names no change (it is MET, the drift's runs
    # being the level's own spread), and the dashboard says what the night said
    assert [(c.kind, c.run, c.end, c.in_force) for c in drifting.changes] == [("drift", 0, 17, False)]

    two = view(board, "eagle3-2step/chat/c1")
    rejected = [m.run for m in two.chart("output_throughput").points if m.rejected]
    assert rejected == [8]
    assert two.chart("output_throughput").points[8].rejected.startswith("rejected as an outlier: -5.9% against")
    assert two.segments == [(0, 0, 3), (1, 4, 12)]
    assert two.drift[9] == ("NCCL_ALGO: Ring → Tree",) and two.drift[10] == ()
    assert two.chart("speedup") is not None and len(two.chart("speedup").points) == 12  # tonight has no pair
    assert view(board, "plain/chat/c1").chart("speedup") is None


def test_a_night_with_nothing_before_it_in_its_segment_says_so(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    record(store, MeasurementKey("plain", "chat", 1), [Night(600.0), Night(600.0), Night(640.0, new_segment=True)])
    record(store, MeasurementKey("plain", "code", 1), [Night(600.0)])
    board = build_dashboard(store.entries(), title="t", location="t", limits=LIMITS)
    assert view(board, "plain/chat/c1").gate.why == (
        "the newest night starts a new segment (--specperf-update): nothing to judge it against yet"
    )
    assert view(board, "plain/code/c1").gate.why == "one night recorded: nothing to judge it against yet"


def test_views_computed_by_forked_processes_make_the_same_pages(tmp_path: Path) -> None:
    """A large store's views are computed by several processes (`build_views`); the pages are the same."""
    entries = rich_store(tmp_path / ".specperf").entries()
    serial = build_dashboard(entries, title="rich", location="rich", limits=LIMITS)
    views = dashboard.build_views(entries, LIMITS, workers=2, least=1)
    assert all(v.runs for v in views)  # the parent gives each view its runs back
    forked = assemble(views, title="rich", location="rich", limits=LIMITS)
    assert summary_page(forked) == summary_page(serial)
    assert suite_page(forked) == suite_page(serial)


def test_a_paged_site_has_a_page_per_key_and_drops_the_pages_it_no_longer_makes(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = rich_store(tmp_path / ".specperf")
    site = tmp_path / "site"
    monkeypatch.setattr(model, "PAGED_RUNS", 10)  # the rich store holds more runs: a page per key
    assert specperf(["dashboard", "--store", str(store.root), "-o", str(site)]) == 0
    assert capsys.readouterr().out.endswith(
        f"  {site}/index.html\n  {site}/suite.html\n  {site}/keys/: 5 pages, one per key\n"
    )
    pages = sorted(p.name for p in (site / "keys").iterdir())
    assert pages == sorted(
        f"{v.anchor}.html" for v in build_dashboard(store.entries(), title="t", location="t", limits=LIMITS).keys
    )
    suite = (site / "suite.html").read_text()
    assert "<article" not in suite and suite.count('<li><a href="keys/') == 5
    assert 'href="keys/sim-eagle3-5step-chat-c1.html"' in (site / "index.html").read_text()
    panel = (site / "keys" / "sim-eagle3-5step-chat-c1.html").read_text()
    assert panel.count("<article") == 1 and 'href="../index.html"' in panel

    monkeypatch.undo()  # one page of panels again: the keys' pages go
    assert specperf(["dashboard", "--store", str(store.root), "-o", str(site)]) == 0
    assert list((site / "keys").iterdir()) == []
    assert (site / "suite.html").read_text().count("<article") == 5


def test_names_are_escaped(tmp_path: Path) -> None:
    store = FileStore(tmp_path / ".specperf")
    record(store, MeasurementKey('<img src=x onerror="alert(1)">', "chat", 1), [Night(600.0)] * 3)
    assert specperf(["dashboard", "--store", str(store.root), "-o", str(tmp_path / "site")]) == 0
    for page in ("index.html", "suite.html"):
        text = (tmp_path / "site" / page).read_text()
        assert "<img" not in text and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--store", "{tmp}/nowhere", "-o", "{tmp}/site"], "{tmp}/nowhere: no such store directory ("),
        (["--store", "{tmp}/empty", "-o", "{tmp}/site"], "{tmp}/empty: no stored histories to show ("),
        (["--store", "{tmp}/store", "-o", "{tmp}/file/site"], "{tmp}/file/site: cannot write the dashboard (Not a"),
        (["--store", "{tmp}/store", "-o", "{tmp}/file"], "{tmp}/file: not a directory; give -o a directory"),
        (["--store", "{tmp}/store"], "dashboard: give -o DIR (where to write the pages), or --publish"),
        (["--store", "{tmp}/store", "--publish"], "{tmp}/store is a folder store: publishing writes onto a git "),
        (["--store", "{tmp}/store", "-o", "{tmp}/site", "--max-regression", "5"], "--max-regression: must be a "),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys, argv: list[str], message: str) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("not a folder")
    record(FileStore(tmp_path / "store"), MeasurementKey("plain", "chat", 1), [Night(600.0)])
    code = specperf(["dashboard", *(a.format(tmp=tmp_path) for a in argv)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"specperf: error: {message.format(tmp=tmp_path)}"), err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "site").exists()


# ---- git stores -----------------------------------------------------------------------------------


def git_store(remote: Path, work: Path) -> GitStore:
    store = open_store(StoreLocation.parse(f"git:{remote}#{BRANCH}", base=work.parent, where="store"), work_dir=work)
    assert isinstance(store, GitStore)
    return store


def recorded(remote: Path, tmp_path: Path, key: MeasurementKey, name: str) -> None:
    """One machine records three runs of `key` onto the branch, as a nightly job does."""
    store = git_store(remote, tmp_path / f"work-{name}")
    store.prepare()
    for night, level in enumerate((600.0, 603.0, 598.0)):
        run = measurement(key, [level, level * 1.002, level * 0.998], None, simulated=True, nccl="Ring")
        store.save(run, suite_dir=None, session=f"{name}{night}", new_segment=False)
    assert store.publish()[0].startswith(f"git:{remote}#{BRANCH}: pushed 3 runs as commit ")
    store.close()


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "--quiet", "--bare", str(bare))
    recorded(bare, tmp_path, MeasurementKey("plain", "chat", 1), "a")
    return bare


def test_a_git_store_is_read_by_url_and_published_onto_its_branch(remote: Path, tmp_path: Path, capsys) -> None:
    store = f"git:{remote}#{BRANCH}"
    assert specperf(["dashboard", "--store", store, "-o", str(tmp_path / "site")]) == 0
    assert "plain/chat/c1" in (tmp_path / "site" / "suite.html").read_text()
    runs_before = git(remote, "show", f"{BRANCH}:sim/plain/chat-c1.jsonl")

    assert specperf(["dashboard", "--store", store, "--publish"]) == 0
    out = capsys.readouterr().out
    head = git(remote, "rev-parse", BRANCH)
    newest = json.loads(runs_before.splitlines()[-1])["run"]["provenance"]["created"][:10]
    subject = f"specperf: dashboard of 1 key, newest run {newest}"
    assert git(remote, "log", "-1", "--format=%s", BRANCH) == subject
    assert f"git:{remote}#{BRANCH}: pushed {subject!r} as commit {head[:7]}" in out
    assert git(remote, "ls-tree", "--name-only", BRANCH).splitlines() == [
        ".gitignore",
        ".nojekyll",
        "fingerprints",
        "index.html",
        "setups",
        "sim",
        "suite.html",
    ]
    assert git(remote, "show", f"{BRANCH}:sim/plain/chat-c1.jsonl") == runs_before  # the runs are untouched
    assert "plain/chat/c1" in git(remote, "show", f"{BRANCH}:suite.html")
    # the store still reads as a store: the pages are not histories
    assert specperf(["history", "--store", store]) == 0 and "plain/chat/c1: 3 runs" in capsys.readouterr().out
    # nothing new to publish: no empty commit
    assert specperf(["dashboard", "--store", store, "--publish"]) == 0
    assert "nothing to publish" in capsys.readouterr().out and git(remote, "rev-parse", BRANCH) == head


def test_publishing_after_another_jobs_push_draws_its_runs_too(remote: Path, tmp_path: Path, capsys) -> None:
    ours = git_store(remote, tmp_path / "work-ours")
    ours.prepare()  # fetched: the branch holds plain/chat/c1 only
    recorded(remote, tmp_path, MeasurementKey("plain", "code", 1), "b")  # another job pushes meanwhile
    args = build_parser().parse_args(["dashboard", "--store", f"git:{remote}#{BRANCH}", "--publish"])
    try:
        assert dashboard.run(args, ours, location=args.store) == 0
    finally:
        ours.close()
    assert ", after 1 push(es) by other jobs came first" in capsys.readouterr().out
    page = git(remote, "show", f"{BRANCH}:suite.html")
    assert "plain/chat/c1" in page and "plain/code/c1" in page  # made again from the runs that came first
    assert git(remote, "log", "-1", "--format=%s", BRANCH).startswith("specperf: dashboard of 2 keys, newest run ")
    assert git(remote, "show", f"{BRANCH}:sim/plain/code-c1.jsonl")  # the other job's runs are kept


def test_specperf_history_pairs_speedups_within_a_layer(tmp_path: Path, capsys) -> None:
    """A store holding the simulator's and the GPU node's histories of one workload and level: each
    speedup is over the reference of its own layer (as in the dashboard), never over the other one."""
    store = FileStore(tmp_path / ".specperf")
    plain, eagle = MeasurementKey("plain", "chat", 1), MeasurementKey("eagle3-5step", "chat", 1)
    for simulated, scale in ((True, 10.0), (False, 1.0)):  # the simulator at time scale 0.1: 10x a real node
        record(store, plain, [Night(60.0 * scale)] * 3, simulated=simulated)
        record(store, eagle, [Night(72.0 * scale)] * 3, simulated=simulated)
    assert specperf(["history", "eagle3-5step/chat", "--store", str(tmp_path / ".specperf")]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.split()[:1] in (["1"], ["2"], ["3"])]
    speedups = [row[8] for row in rows]  # run, stored, commit, segment, status, tok/s, TPOT, τ, speedup
    assert len(speedups) == 6 and all(s.startswith(("1.1", "1.2")) for s in speedups), rows  # 72 / 60


def test_the_newest_label_stands_over_the_newest_point(board: Dashboard) -> None:
    """The label is centred over the ringed point (moved in only at the chart's edge), so it cannot read as
    naming the run before it."""
    page = suite_page(board)
    charts = re.findall(r"<svg class=\"chart\".*?</svg>", page, re.S)
    labelled = [c for c in charts if 'class="newest-label"' in c]
    assert labelled
    for chart in labelled:
        label_x = float(re.search(r'class="newest-label" x="([\d.]+)"', chart).group(1))
        ring_xs = [float(x) for x in re.findall(r'class="ring" cx="([\d.]+)"', chart)]
        width = float(re.search(r'viewBox="0 0 ([\d.]+) ', chart).group(1))
        assert 'text-anchor="middle">newest<' in chart
        assert label_x == min(ring_xs[-1], width - NEWEST_LABEL_HALF_WIDTH), chart[:200]


def test_a_regressed_key_says_why_in_its_notes_and_its_newest_points_tooltip(board: Dashboard) -> None:
    """The step of eagle3-5step: τ held at 2.1 and plain decoding at 630 tok/s in the same sessions, so
    the slower cycle is the drafting side's; the steady keys carry no explanation."""
    stepped = view(board, "eagle3-5step/chat/c1")
    why = stepped.gate.explanation
    assert why is not None and why.startswith("-") and "drafting" in why, why
    assert view(board, "plain/chat/c1").gate.explanation is None
    page = suite_page(board)
    panel = page[page.index(f'id="{stepped.anchor}"') :]
    panel = panel[: panel.index("</article>")]
    assert f'<li class="why">why: {html.escape(why)}</li>' in panel
    newest = max(stepped.newest)
    throughput = panel[panel.index("tok/s") :]  # the throughput chart comes first
    point = throughput[throughput.index(f'data-run="{newest}"') :]
    assert f"why: {html.escape(why)}" in point[: point.index("</title>")]
