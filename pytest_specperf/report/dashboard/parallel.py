"""A large store's key pages, made where the keys' views are: each process reads its own keys' histories,
computes their views, writes their pages (`keys/<key>.html`) and hands back a light view of each, what
the summary and `suite.html` need (its newest run, the newest nights of its throughput, its gate).

Why: a year of nights costs about as much to read and decode, to judge and to draw as a page; made in the
parent, reading and drawing stay serial however many processes judge, and the parent holds every year
of every key at once. A key's group (a reference's history and the keys whose speedup is over it) is
one task, so a reference is read once per group, not once per key.

A key's page says what the whole site holds (how many keys, the newest run, its layer's note) and its
speedup needs its reference's history: the parent learns them before any page is made from each
history's newest line (`FileStore.newest`), and checks them against the runs the processes read; where
they differ (a run appended twice, its second line last), the pages are made again from what was read.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import gc
import multiprocessing
import platform
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_specperf.common.jsonfile import atomic_write
from pytest_specperf.report.dashboard.model import Chart, KeyView, SiteHeader, key_view, layer_of
from pytest_specperf.report.dashboard.pages import key_page, key_page_name, layer_note
from pytest_specperf.report.dashboard.svg import TREND_NIGHTS
from pytest_specperf.store.file import FileStore
from pytest_specperf.store.records import StoredBaseline, StoredRun, reference_history
from pytest_specperf.verdict.checks import Limits


@dataclass(frozen=True)
class Plan:
    """What each key's page needs of the other keys: the site's header, each layer's note, and per
    history the index of its reference's (None for a reference, or a key without one)."""

    header: SiteHeader
    notes: Mapping[str, str]
    references: tuple[int | None, ...]

    def groups(self) -> list[tuple[int, ...]]:
        """The histories by their reference (a reference with the keys paired with it), in the store's order."""
        found: dict[int, list[int]] = {}
        for index, reference in enumerate(self.references):
            found.setdefault(index if reference is None else reference, []).append(index)
        return [tuple(group) for group in found.values()]


def plan_of(paths: Sequence[Path], newest: Sequence[StoredRun], *, title: str, location: str, limits: Limits) -> Plan:
    """The plan from each history's newest run: as `key_view` pairs a key with its reference
    (`reference_history` over every history) and as `Dashboard` makes its header and notes."""
    heads = [
        StoredBaseline(r.measurement, r.summary, r.provenance, p, (r,)) for p, r in zip(paths, newest, strict=True)
    ]
    position = {id(head): index for index, head in enumerate(heads)}
    references = []
    for head in heads:
        reference = reference_history(head, heads)
        references.append(None if reference is None else position[id(reference)])
    layers: dict[str, list[Any]] = {}
    for head in heads:
        layers.setdefault(layer_of(head), []).append(head.fingerprint)
    newest_run = max(r.provenance.created for r in newest)
    header = SiteHeader(title, location, len(heads), newest_run, limits)
    return Plan(header, {layer: layer_note(layer, prints) for layer, prints in layers.items()}, tuple(references))


#: What forked workers read: the store, its histories, the plan and the site's folder, set only while a pool runs.
_SHARED: dict[str, Any] = {}


def key_pages(
    files: FileStore, paths: Sequence[Path], directory: Path, plan: Plan, *, workers: int
) -> tuple[list[KeyView], Plan]:
    """Every history's light view, its page written into `directory` by `workers` forked processes (in
    this one below 2), and the plan its pages were made with: `plan`, or the one the histories' newest
    runs make where it was not that (then the pages are made again with it)."""
    views = _made(files, paths, directory, plan, workers)
    read = plan_of(
        paths,
        [v.runs[-1] for v in views],
        title=plan.header.title,
        location=plan.header.location,
        limits=plan.header.limits,
    )
    if read != plan:
        views = _made(files, paths, directory, read, workers)
    return views, read


def _made(files: FileStore, paths: Sequence[Path], directory: Path, plan: Plan, workers: int) -> list[KeyView]:
    groups = plan.groups()
    _SHARED.update(files=files, paths=paths, directory=directory, plan=plan)
    try:
        if workers < 2 or len(groups) < 2 or "fork" not in multiprocessing.get_all_start_methods():
            made = [_group(group) for group in groups]
        else:
            context = multiprocessing.get_context("fork")
            with ProcessPoolExecutor(workers, mp_context=context, initializer=_memory_kept) as pool:
                made = list(pool.map(_group, groups))
    finally:
        _SHARED.clear()
    views: list[KeyView | None] = [None] * len(paths)
    for group, group_views in zip(groups, made, strict=True):
        for index, view in zip(group, group_views, strict=True):
            views[index] = view
    return [view for view in views if view is not None]


#: glibc's `mallopt` parameters (malloc.h), and what a worker sets them to
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
_KEPT = {_M_MMAP_THRESHOLD: 64 * 2**20, _M_TRIM_THRESHOLD: 256 * 2**20, _M_TOP_PAD: 64 * 2**20}


def _memory_kept() -> None:
    """A worker keeps the memory it frees for its next key (glibc's allocator only). Why: a key's view
    allocates and frees arrays of a megabyte and more hundreds of times (the change-point search's
    tables), and glibc hands each back to the kernel and faults it in again: measured on 200 keys of a
    year, 3.2 s of the kernel's CPU time in 19 s, 0.85 s with the memory kept. A worker holds one group
    of keys at a time, so what it keeps is bounded."""
    if platform.libc_ver()[0] != "glibc":
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None)
        for option, value in _KEPT.items():
            libc.mallopt(option, value)


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """The cyclic garbage collector paused while a group is made. Why: a year of runs is half a million
    objects, none of them in a cycle (what a group drops is freed as it is dropped), and each automatic
    collection walks them all again: 40% of reading a history was such walks. It runs again after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _group(group: tuple[int, ...]) -> list[KeyView]:
    """A group's views, each key's page written as its view is made; the reference's history read once."""
    with _collector_paused():
        return _views_and_pages(group)


def _views_and_pages(group: tuple[int, ...]) -> list[KeyView]:
    files: FileStore = _SHARED["files"]
    paths: Sequence[Path] = _SHARED["paths"]
    directory: Path = _SHARED["directory"]
    plan: Plan = _SHARED["plan"]
    read: dict[int, StoredBaseline] = {}

    def history(index: int) -> StoredBaseline:
        if index not in read:
            read[index] = files.read(paths[index])
        return read[index]

    light = []
    for index in group:
        reference = plan.references[index]
        view = key_view(history(index), [history(reference)] if reference is not None else [], plan.header.limits)
        page = key_page(plan.header, view, plan.notes.get(view.layer, ""))
        atomic_write(directory / key_page_name(view), page)
        light.append(lightened(view))
        if reference is not None:
            read.pop(index)  # a key paired with a reference is no one's reference: only that one is kept
    return light


def lightened(view: KeyView) -> KeyView:
    """What the summary and `suite.html` show of a key: its newest run without its rounds, the newest
    `TREND_NIGHTS` points of each chart and the change in force, its gate; the count of its runs."""
    newest = view.runs[-1]
    measurement = dataclasses.replace(newest.measurement, rounds=[], warnings=[], notes=[])
    charts = tuple(_lightened(chart) for chart in view.charts)
    return dataclasses.replace(
        view,
        runs=(dataclasses.replace(newest, measurement=measurement),),
        charts=charts,
        drift=(),
        newest=frozenset(),
        total_runs=view.run_count,
    )


def _lightened(chart: Chart) -> Chart:
    changes = tuple(change for change in chart.changes if change.in_force)
    return dataclasses.replace(chart, points=chart.points[-TREND_NIGHTS:], changes=changes)
