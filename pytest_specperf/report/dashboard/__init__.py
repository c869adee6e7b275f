"""`specperf dashboard`: a static HTML site of a store's histories, to look at a key's nights.

    specperf dashboard --store .specperf -o site/              a folder store, into site/
    specperf dashboard --store git:specperf-history --publish  onto the branch itself (GitHub Pages)

Two pages: `index.html`, the summary (what regressed, what is suspect, which keys' gate cannot see a
change of the tolerance, and every key in a table), and `suite.html`, a panel per (server, workload,
level), the real engine's and the simulator's layers apart. What they show is computed by the
verdict engine the tests run (model.py); the charts are inline SVG drawn here (svg.py), so the pages
need no network and no other file (pages.py).

`--publish` writes the site at the root of a git store's branch, beside the histories, commits it and
pushes, like a recording session does: when another job pushed first, its runs are fetched and the
site is made again from them. GitHub Pages can then serve the branch's root.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pytest_specperf.common.jsonfile import atomic_write
from pytest_specperf.errors import SpecperfError
from pytest_specperf.report.dashboard.model import LAYER_TITLES, Dashboard, build_dashboard
from pytest_specperf.report.dashboard.pages import SUITE, SUMMARY, suite_page, summary_page
from pytest_specperf.store import Store
from pytest_specperf.verdict.checks import Limits

__all__ = ["Dashboard", "build_dashboard", "run", "write_site"]

#: Tells GitHub Pages to serve the files as they are (no Jekyll build of the branch).
NOJEKYLL = ".nojekyll"


def write_site(dashboard: Dashboard, directory: Path, *, nojekyll: bool = False) -> list[Path]:
    """Write the pages into `directory` (created if needed), each atomically; the paths written.
    A directory that cannot be written is one `SpecperfError` line naming it."""
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise SpecperfError(f"{directory}: not a directory; give -o a directory for the dashboard's pages")
    pages = {SUMMARY: summary_page(dashboard), SUITE: suite_page(dashboard)}
    if nojekyll:
        pages[NOJEKYLL] = ""
    try:
        for name, text in pages.items():
            atomic_write(directory / name, text)
    except OSError as exc:
        raise SpecperfError(
            f"{directory}: cannot write the dashboard ({exc.strerror or exc}); give -o a directory you can write"
        ) from None
    return [directory / name for name in pages if name != NOJEKYLL]


def run(args: argparse.Namespace, store: Store, *, location: str) -> int:
    """Build the dashboard of an opened (prepared) store and write it, publish it, or both; `location` is
    the store as the user wrote it, which the pages name."""
    limits = Limits.tolerating(args.max_regression, args.max_regression_accept_length)
    title = args.title or store.title

    def build() -> Dashboard:
        entries = store.entries()
        if not entries:
            raise SpecperfError(
                f"{store.location}: no stored histories to show (a store keeps <server>/<workload>-c<level>.jsonl, "
                "the simulator's under sim/; record some with pytest --specperf-record)"
            )
        return build_dashboard(entries, title=title, location=location, limits=limits)

    site = _Site(build, build())
    if args.publish:
        for line in store.publish_files(site.write_into):
            print(line)
    if args.output is not None:
        made = site.made
        written = write_site(made, args.output)
        layers = ", ".join(f"{LAYER_TITLES[layer].lower()}: {len(made.layer(layer))}" for layer in made.layers)
        print(f"wrote the dashboard of {len(made.keys)} keys ({layers}) to {args.output}:")
        for path in written:
            print(f"  {path}")
    return 0


@dataclass
class _Site:
    """The dashboard to publish: as first built, and made again from the branch after another job's push."""

    build: Callable[[], Dashboard]
    made: Dashboard
    writes: int = 0

    def write_into(self, root: Path) -> str:
        """Write the pages at `root`; the commit's subject."""
        if self.writes:
            self.made = self.build()
        self.writes += 1
        write_site(self.made, root, nojekyll=True)
        keys = len(self.made.keys)
        return f"specperf: dashboard of {keys} key{'s' if keys != 1 else ''}, newest run {self.made.newest_run[:10]}"
