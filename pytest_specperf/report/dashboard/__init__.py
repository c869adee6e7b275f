"""`specperf dashboard`: a static HTML site of a store's histories, to look at a key's nights.

    specperf dashboard --store .specperf -o site/              a folder store, into site/
    specperf dashboard --store git:specperf-history --publish  onto the branch itself (GitHub Pages)

The pages: `index.html`, the summary (what regressed, what is suspect, which keys' gate cannot see a
change of the tolerance, and every key in a table, one row a key, found by name and sorted by
verdict in the browser), and `suite.html`, a panel per (server, workload, level), the real engine's
and the simulator's layers apart. A store of more runs than one page draws well (model.py
`PAGED_RUNS`) gets a page per key instead, `keys/<key>.html`, and `suite.html` lists them. What they
show is computed by the verdict engine the tests run (model.py); the charts are inline SVG drawn here
(svg.py), so the pages need no network and no other file (pages.py).

`--publish` writes the site at the root of a git store's branch, beside the histories, commits it and
pushes, like a recording session does: when another job pushed first, its runs are fetched and the
site is made again from them. GitHub Pages can then serve the branch's root.
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_specperf.common.jsonfile import atomic_write
from pytest_specperf.errors import SpecperfError
from pytest_specperf.report.dashboard.model import LAYER_TITLES, Dashboard, KeyView, assemble, build_dashboard, key_view
from pytest_specperf.report.dashboard.pages import KEYS_DIR, site_pages
from pytest_specperf.store import Store
from pytest_specperf.store.records import StoredBaseline
from pytest_specperf.verdict.checks import Limits

__all__ = ["Dashboard", "build_dashboard", "build_views", "run", "write_site"]

#: Tells GitHub Pages to serve the files as they are (no Jekyll build of the branch).
NOJEKYLL = ".nojekyll"
#: Keys from which the views are computed by several processes: a year of nights costs the verdict
#: engine (change points, outlier rejection) about a tenth of a second of CPU a key; fewer keys are
#: not worth starting processes for.
PARALLEL_KEYS = 64
#: The most processes the views are computed by.
MAX_WORKERS = 8

#: What forked workers read: the parent's histories and limits, set only while a pool runs.
_SHARED: dict[str, Any] = {}


def build_views(
    entries: Sequence[StoredBaseline], limits: Limits, *, workers: int | None = None, least: int = PARALLEL_KEYS
) -> list[KeyView]:
    """Every key's view (`model.key_view`), by several processes for `least` keys or more. They are forked,
    so each reads the histories from the parent's memory, and hand back their views without the runs,
    which the parent holds: what travels back is the charts and the gate, not a year of rounds."""
    wanted = [index for index, entry in enumerate(entries) if entry.runs]
    count = workers if workers is not None else min(os.cpu_count() or 1, MAX_WORKERS)
    if count < 2 or len(wanted) < least or "fork" not in multiprocessing.get_all_start_methods():
        return [key_view(entries[index], entries, limits) for index in wanted]
    _SHARED.update(entries=entries, limits=limits)
    try:
        with ProcessPoolExecutor(count, mp_context=multiprocessing.get_context("fork")) as pool:
            light = list(pool.map(_view_without_runs, wanted, chunksize=max(1, len(wanted) // (4 * count))))
    finally:
        _SHARED.clear()
    return [dataclasses.replace(view, runs=entries[index].runs) for view, index in zip(light, wanted, strict=True)]


def _view_without_runs(index: int) -> KeyView:
    entries, limits = _SHARED["entries"], _SHARED["limits"]
    return dataclasses.replace(key_view(entries[index], entries, limits), runs=())


def write_site(dashboard: Dashboard, directory: Path, *, nojekyll: bool = False) -> list[Path]:
    """Write the pages into `directory` (created if needed), each atomically, one at a time; the paths
    written. Pages of keys no longer in the store are removed. A directory that cannot be written is
    one `SpecperfError` line naming it."""
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise SpecperfError(f"{directory}: not a directory; give -o a directory for the dashboard's pages")
    written: list[Path] = []
    try:
        for name, text in site_pages(dashboard):
            atomic_write(directory / name, text)
            written.append(directory / name)
        if nojekyll:
            atomic_write(directory / NOJEKYLL, "")
        _remove_stale(directory / KEYS_DIR, set(written))
    except OSError as exc:
        raise SpecperfError(
            f"{directory}: cannot write the dashboard ({exc.strerror or exc}); give -o a directory you can write"
        ) from None
    return written


def _remove_stale(keys: Path, written: set[Path]) -> None:
    """Remove the pages of `keys` (the folder of key pages) not written this time: keys gone from the
    store, or every one when the dashboard is no longer paged."""
    for page in keys.glob("*.html") if keys.is_dir() else ():
        if page not in written:
            page.unlink()


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
        return assemble(build_views(entries, limits), title=title, location=location, limits=limits)

    site = _Site(build, build())
    if args.publish:
        for line in store.publish_files(site.write_into):
            print(line)
    if args.output is not None:
        made = site.made
        written = write_site(made, args.output)
        layers = ", ".join(f"{LAYER_TITLES[layer].lower()}: {len(made.layer(layer))}" for layer in made.layers)
        print(f"wrote the dashboard of {len(made.keys)} keys ({layers}) to {args.output}:")
        pages = [path for path in written if path.parent != Path(args.output) / KEYS_DIR]
        for path in pages:
            print(f"  {path}")
        if len(written) > len(pages):
            print(f"  {args.output / KEYS_DIR}/: {len(written) - len(pages)} pages, one per key")
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
