"""The nightly recipe (docs/recipes.md), dashboard included: two nights recorded onto the suite's `specperf-history`
branch by real pytest sessions on the simulator, then `specperf dashboard --store git:specperf-history
--publish` in the checkout puts the pages on that branch (GitHub Pages serves its root)."""

from __future__ import annotations

import re
from pathlib import Path

from gitrepos import git
from plugin_suites import ONE_MEASURED_TEST

from pytest_specperf.cli import main as specperf

BRANCH = "specperf-history"
#: the recipes page's nightly job runs this after recording (and it must say so)
COMMAND = ["dashboard", "--store", f"git:{BRANCH}", "--publish", "-o", "site"]
RECIPES = Path(__file__).resolve().parents[2] / "docs" / "recipes.md"
#: where runs go, not what they say: the stored-history checks cannot fail a night here
LENIENT = f'store = "git:{BRANCH}"\nmax_regression = 0.9\nmax_regression_accept_length = 0.9\n'


def test_nights_recorded_on_the_branch_are_published_there_as_a_dashboard(make_suite, tmp_path: Path, capsys) -> None:
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "--quiet", "--bare", str(remote))
    suite = make_suite(ONE_MEASURED_TEST, extra=LENIENT)
    checkout = suite.pytester.path
    git(checkout, "init", "--quiet")
    git(checkout, "add", ".")
    git(checkout, "commit", "--quiet", "-m", "the suite")
    git(checkout, "remote", "add", "origin", str(remote))
    for _ in range(2):
        suite.run("--specperf-record", subprocess=True).assert_outcomes(passed=1)  # its own process, as in CI

    assert f"run: specperf {' '.join(COMMAND)}" in RECIPES.read_text()
    assert specperf(COMMAND) == 0
    out = capsys.readouterr().out
    assert re.search(rf"git:{BRANCH}: pushed 'specperf: dashboard of 2 keys, newest run [-\d]+' as commit ", out), out
    assert git(remote, "ls-tree", "--name-only", BRANCH).splitlines() == [
        ".gitignore",
        ".nojekyll",
        "fingerprints",  # each distinct fingerprint once, the histories refer to it by digest
        "index.html",
        "setups",  # what a key's nights share, once
        "sim",
        "suite.html",
    ]
    page = git(remote, "show", f"{BRANCH}:suite.html")
    panel = r'<article class="panel[^"]*" id="[^"]+" data-key="([^"]+)" data-layer="sim" data-runs="(\d+)"'
    panels = re.findall(panel, page)
    assert sorted(panels) == [("eagle3-5step/default/c1", "2"), ("plain/default/c1", "2")]
    assert (checkout / "site" / "suite.html").read_text() == page + "\n"  # the local copy is the published one
    # the checkout itself is untouched: no branch of ours, no work tree left, nothing tracked changed
    assert len(git(checkout, "for-each-ref", "refs/heads").splitlines()) == 1
    assert len(git(checkout, "worktree", "list").splitlines()) == 1
    assert all(line.startswith("?? ") for line in git(checkout, "status", "--porcelain").splitlines())
