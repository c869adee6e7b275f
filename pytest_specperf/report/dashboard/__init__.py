"""`specperf dashboard`: a static HTML site of a store's histories, to look at a key's nights.

    specperf dashboard --store .specperf -o site/              a folder store, into site/
    specperf dashboard --store git:specperf-history --publish  onto the branch itself (GitHub Pages)

The pages: `index.html`, the summary (what regressed, what is suspect, which keys' gate cannot see a
change of the tolerance, and every key in a table, one row a key, found by name and sorted by
verdict in the browser), and `suite.html`, a panel per (server, workload, level), the real engine's
and the simulator's layers apart. A store of more runs than one page draws well (model.py
`PAGED_RUNS`) gets a page per key instead, `keys/<key>.html`, and `suite.html` lists them. What they
show is computed by the verdict engine the tests run (model.py); the charts are inline SVG drawn here
(svg.py), so the pages need no network and no other file (pages.py). A large store's keys are each read,
judged and drawn onto their pages by one of several processes (parallel.py, `make_site`).

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_specperf.common.jsonfile import atomic_write
from pytest_specperf.errors import SpecperfError
from pytest_specperf.report.dashboard.model import LAYER_TITLES, Dashboard, KeyView, assemble, build_dashboard, key_view
from pytest_specperf.report.dashboard.pages import KEYS_DIR, key_page_name, site_pages
from pytest_specperf.report.dashboard.parallel import key_pages, plan_of
from pytest_specperf.store import GitStore, Store
from pytest_specperf.store.file import FileStore
from pytest_specperf.store.records import StoredBaseline
from pytest_specperf.verdict.checks import Limits

__all__ = ["Dashboard", "build_dashboard", "build_views", "make_site", "run", "write_site"]

#: Tells GitHub Pages to serve the files as they are (no Jekyll build of the branch).
NOJEKYLL = ".nojekyll"
#: Keys from which the keys are read, judged and drawn by several processes: a year of nights costs
#: about a tenth of a second of CPU a key (reading, the verdict engine's change points and outlier
#: rejection, its page); fewer keys are not worth starting processes for.
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


def write_site(
    dashboard: Dashboard, directory: Path, *, nojekyll: bool = False, key_pages: Sequence[Path] | None = None
) -> list[Path]:
    """Write the pages into `directory` (created if needed), each atomically, one at a time; the paths
    written. `key_pages`: the keys' pages were written already (`make_site`), these. Pages of keys no
    longer in the store are removed. A directory that cannot be written is one `SpecperfError` line
    naming it."""
    directory = _checked(directory)
    written: list[Path] = []
    try:
        for name, text in site_pages(dashboard, keys=key_pages is None):
            atomic_write(directory / name, text)
            written.append(directory / name)
        written += key_pages or ()
        if nojekyll:
            atomic_write(directory / NOJEKYLL, "")
        _remove_stale(directory / KEYS_DIR, set(written))
    except OSError as exc:
        raise _unwritable(directory, exc) from None
    return written


def _checked(directory: Path) -> Path:
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise SpecperfError(f"{directory}: not a directory; give -o a directory for the dashboard's pages")
    return directory


def _unwritable(directory: Path, exc: OSError) -> SpecperfError:
    return SpecperfError(
        f"{directory}: cannot write the dashboard ({exc.strerror or exc}); give -o a directory you can write"
    )


@dataclass(frozen=True)
class SiteSpec:
    """What the pages say beside the histories: their title, the store as the user wrote it, the tolerances."""

    title: str
    location: str
    limits: Limits


def make_site(
    store: Store, directory: Path, spec: SiteSpec, *, nojekyll: bool = False, workers: int | None = None
) -> tuple[Dashboard, list[Path]]:
    """Read the store, judge every key and write the site into `directory`; the dashboard as the summary
    shows it, and the paths written. A store of `PARALLEL_KEYS` histories or more in files (a folder or a
    git store) is paged, and each of `workers` processes makes its own keys' views and pages
    (parallel.py); a smaller store, or one that is not in files, is read whole and drawn here."""
    count = workers if workers is not None else min(os.cpu_count() or 1, MAX_WORKERS)
    files = _files_of(store)
    paths = files.history_paths() if files is not None else []
    if files is not None and len(paths) >= PARALLEL_KEYS:
        directory = _checked(directory)
        newest = [files.newest(path) for path in paths]
        plan = plan_of(paths, newest, **_named(spec))
        try:
            views, _ = key_pages(files, paths, directory, plan, workers=count)
        except OSError as exc:
            raise _unwritable(directory, exc) from None
        made = assemble(views, **_named(spec))
        if made.paged:
            pages = [directory / key_page_name(view) for view in made.keys]
            return made, write_site(made, directory, nojekyll=nojekyll, key_pages=pages)
    made = assemble(build_views(_entries(store), spec.limits, workers=count), **_named(spec))
    return made, write_site(made, directory, nojekyll=nojekyll)


def _named(spec: SiteSpec) -> dict[str, Any]:
    return {"title": spec.title, "location": spec.location, "limits": spec.limits}


def _files_of(store: Store) -> FileStore | None:
    """The store's histories as files, read by path (a folder store, a git store's work tree), or None."""
    if isinstance(store, FileStore):
        return store
    if isinstance(store, GitStore):
        store.prepare()
        return FileStore(store.root)
    return None


def _entries(store: Store) -> list[StoredBaseline]:
    entries = store.entries()
    if not entries:
        raise SpecperfError(
            f"{store.location}: no stored histories to show (a store keeps <server>/<workload>-c<level>.jsonl, "
            "the simulator's under sim/; record some with pytest --specperf-record)"
        )
    return entries


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
    spec = SiteSpec(args.title or store.title, location, limits)
    site = _Site(lambda directory, nojekyll: make_site(store, directory, spec, nojekyll=nojekyll))
    if args.publish:
        files = _files_of(store)
        if not (files.history_paths() if files is not None else store.entries()):
            _entries(store)  # says that the store holds nothing, before anything is published
        for line in store.publish_files(site.write_into):
            print(line)
    if args.output is not None:
        written = site.write(args.output)
        made = site.dashboard
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
    """The dashboard, made where it is first written (its keys' pages are written as they are made):
    published at a git store's root, made again from the branch after another job's push, and copied
    from the latest into the output folder."""

    make: Callable[[Path, bool], tuple[Dashboard, list[Path]]]
    made: tuple[Dashboard, list[Path]] | None = None
    at: Path = field(default_factory=Path)

    @property
    def dashboard(self) -> Dashboard:
        assert self.made is not None
        return self.made[0]

    def write_into(self, root: Path) -> str:
        """Make the pages at `root` (from the histories there); the commit's subject."""
        self.made, self.at = self.make(root, True), root
        keys = len(self.dashboard.keys)
        return (
            f"specperf: dashboard of {keys} key{'s' if keys != 1 else ''}, newest run {self.dashboard.newest_run[:10]}"
        )

    def write(self, directory: Path) -> list[Path]:
        """Make the pages in `directory`, or copy them there where they were made already."""
        if self.made is None:
            self.made = self.make(directory, False)
            return self.made[1]
        directory = _checked(directory)
        written = [directory / path.relative_to(self.at) for path in self.made[1]]
        try:
            for source, target in zip(self.made[1], written, strict=True):
                atomic_write(target, source.read_text(encoding="utf-8"))
            _remove_stale(directory / KEYS_DIR, set(written))
        except OSError as exc:
            raise _unwritable(directory, exc) from None
        return written
