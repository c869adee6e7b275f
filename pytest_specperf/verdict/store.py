"""Stored baselines: one reviewable JSON file per (server, workload, concurrency), holding a history.

Layout under the store directory (`store = ".specperf"` in the config)::

    <store>/<server>/<workload>-c<concurrency>.json        measured on a real engine (SGLang, vLLM)
    <store>/sim/<server>/<workload>-c<concurrency>.json    measured on the simulator

A simulator's baselines never share a file with a real engine's: a suite that switches from
`launcher = "sim"` to a real launcher finds no baseline (NEW) instead of the simulator's
(INCOMPARABLE, a failure on every check). Whether a run is simulated is read from its fingerprint
(`launcher = sim`, also for a simulator attached by URL). The extra level cannot clash with a server
called ``sim``: that server's files are ``<store>/sim/*.json``, the simulator's are one level deeper.
Stores written before the ``sim/`` level keep working: a simulated session reads a simulator's
baseline at the old place, and the first save of that key (by either kind of session) moves the file
under ``sim/``; a real-engine session ignores it (NEW), never compares with it.

A file is a *history* (schema_version 2): ``{"schema_version": 2, "kind": ..., "runs": [...]}``,
oldest run first, newest last, at most `history` runs (config; oldest dropped). Each run keeps its
own fingerprint, per-round samples of every metric, a summary, provenance and a ``segment``
number: `--specperf-update` ("this run is the new normal", after an intended change) starts a new
segment, `--specperf-record` appends to the current one. Comparisons use the current (newest)
segment; older segments stay in the file for `specperf history`. Per-request records are kept for
the newest run only, so the file stays small enough to review in a pull request. A schema-1 file
(one baseline) reads as a one-run history and is rewritten as schema 2 on the next write.

Names are made safe for every file system; a name that had to change gets a short hash of the
original appended, so two names never share a file. Files are pretty-printed (indent 2) with
sorted keys so that `--specperf-update` produces a small, readable diff in a pull request.

A file holds the raw evidence (per-round samples, per-request records), the fingerprint (so a
number never travels without its environment: docs/story.md), a summary for reviewers, and
provenance (when, on which host, from which commit, by which pytest session: runs of two servers
stored by one session were measured together, which pairs them into a history of speedups).

Writes are atomic (temp file in the same directory, fsync, `os.replace`) and serialised by one
lock file per store, `<store>/.specperf.lock`. A store-wide lock is enough: saves are rare (once
per measurement under `--specperf-update` or `--specperf-record`) and short, and one lock also
covers creating directories. The lock
file stays (filelock leaves it), so the first save also writes `<store>/.gitignore` naming it
and stray temp files, unless a `.gitignore` is already there. Readers take no lock: `os.replace`
means they see the old or the new file, never half of one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import socket
import statistics
import subprocess
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import filelock

import pytest_specperf
from pytest_specperf.errors import StoreError
from pytest_specperf.jsonfile import atomic_write, clean, read_json_object
from pytest_specperf.measure.records import Measurement, MeasurementKey
from pytest_specperf.verdict.fingerprint import Fingerprint

SCHEMA_VERSION = 2
#: Runs a history keeps when the config does not say (`history`).
DEFAULT_HISTORY = 30
KIND = "pytest-specperf baseline"
LOCK_NAME = ".specperf.lock"
#: The folder under the store that holds the simulator's baselines (see the module docstring).
SIM_DIR = "sim"
LOCK_TIMEOUT_S = 120.0
GITIGNORE = f"# written by pytest-specperf: its lock and interrupted writes\n{LOCK_NAME}\n.*.tmp\n"

_UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9._-]+")
_RESERVED = frozenset({"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(10)), *(f"LPT{i}" for i in range(10))})


class _NewerSchemaError(StoreError):
    """A stored file written by a newer pytest-specperf (a schema_version this one cannot read)."""

    def __init__(self, message: str, version: int) -> None:
        super().__init__(message)
        self.version = version


@dataclass(frozen=True)
class Summary:
    """Headline numbers for reviewers and `specperf show`; always derived from the rounds."""

    rounds: int
    requests: int
    errors: int
    output_throughput: float | None
    accept_length: float | None
    mean_tpot_ms: float | None
    mean_ttft_ms: float | None

    @classmethod
    def of(cls, measurement: Measurement) -> Summary:
        def mean(metric: str) -> float | None:
            values = [v for v in measurement.samples(metric) if math.isfinite(v)]
            return round(statistics.fmean(values), 4) if values else None

        return cls(
            rounds=len(measurement.rounds),
            requests=measurement.request_count,
            errors=measurement.error_count,
            output_throughput=mean("output_throughput"),
            accept_length=mean("accept_length"),
            mean_tpot_ms=mean("mean_tpot_ms"),
            mean_ttft_ms=mean("mean_ttft_ms"),
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Provenance:
    """Who stored a baseline, when, from which commit of the suite, and in which pytest session.

    `session` is the id of the session that stored the run: runs of two servers with the same id
    were measured together (a speculative config and its reference), which is how a history of
    speedups is paired. Runs stored before it existed have None.
    """

    created: str
    git_commit: str | None
    host: str
    specperf_version: str
    session: str | None = None

    @classmethod
    def here(cls, suite_dir: Path | None, session: str | None = None) -> Provenance:
        return cls(
            created=datetime.now(UTC).isoformat(timespec="seconds"),
            git_commit=git_commit(suite_dir) if suite_dir is not None else None,
            host=socket.gethostname(),
            specperf_version=pytest_specperf.__version__,
            session=session,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Provenance:
        required = {f.name: data[f.name] for f in fields(cls) if f.name != "session"}
        return cls(**required, session=data.get("session"))  # no session: stored before session ids


@dataclass(frozen=True)
class StoredRun:
    """One run of a history: its measurement (records only for the newest), summary, provenance, segment."""

    measurement: Measurement
    summary: Summary
    provenance: Provenance
    segment: int

    def summary_value(self, metric: str) -> float | None:
        """This run's mean of `metric` over its rounds (None where no round measured it)."""
        values = [v for v in self.measurement.samples(metric) if math.isfinite(v)]
        return statistics.fmean(values) if values else None

    def to_dict(self) -> dict[str, Any]:
        body = self.measurement.to_dict()
        body.pop("fingerprint", None)  # stored once per run, at the run's top level
        return {
            "measurement": body,
            "summary": self.summary.to_dict(),
            "fingerprint": self.measurement.fingerprint.redacted().to_dict(),
            "provenance": self.provenance.to_dict(),
            "segment": self.segment,
        }


@dataclass(frozen=True)
class StoredBaseline:
    """A history read back from the store. `measurement`, `summary` and `provenance` are the newest
    run's (what a single-baseline comparison uses); `runs` is the whole history, oldest first."""

    measurement: Measurement
    summary: Summary
    provenance: Provenance
    path: Path
    runs: tuple[StoredRun, ...] = ()
    schema_version: int = SCHEMA_VERSION

    @property
    def fingerprint(self) -> Fingerprint:
        return self.measurement.fingerprint

    @property
    def segment(self) -> int:
        return self.runs[-1].segment if self.runs else 0

    @property
    def current_segment(self) -> tuple[StoredRun, ...]:
        """The runs of the newest segment: what tonight is compared with."""
        return tuple(r for r in self.runs if r.segment == self.segment)


@dataclass(frozen=True)
class SaveResult:
    """What `save` changed. `replaced_error` says why an unreadable old file had no summary, and
    `kept_as` where that file now is: it is moved aside, never lost."""

    path: Path
    old: Summary | None
    new: Summary
    replaced_error: str | None = None
    kept_as: Path | None = None
    segment: int = 0
    runs: int = 1  # runs in the history after this save
    new_segment: bool = True


def git_commit(directory: Path) -> str | None:
    """HEAD of the git repository containing `directory`, or None (not a repo, no git)."""
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=directory,
            capture_output=True,
            text=True,
            timeout=15,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = done.stdout.strip()
    return commit if done.returncode == 0 and commit else None


def safe_name(name: str) -> str:
    """`name` as a portable file name; changed names get a hash so they cannot collide."""
    safe = _UNSAFE_CHARS.sub("_", name).strip("._")[:80]
    if safe == name and name.upper() not in _RESERVED:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{safe or 'x'}-{digest}"


class BaselineStore:
    """Stored baselines under `root`. Cheap to create: nothing is touched until used.

    `simulated` selects the layer: the simulator's baselines under ``<root>/sim/``, a real engine's
    directly under `root` (see the module docstring).
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path_for(self, key: MeasurementKey, *, simulated: bool = False) -> Path:
        filename = f"{safe_name(key.workload)}-c{int(key.concurrency)}.json"
        return (self.root / SIM_DIR if simulated else self.root) / safe_name(key.server) / filename

    def load(self, key: MeasurementKey, *, simulated: bool = False) -> StoredBaseline | None:
        """The baseline for `key` in the simulator's or the real layer, None when there is none;
        StoreError when it is unreadable. A simulator's baseline at the pre-``sim/`` place counts
        for the simulator's layer only."""
        path = self.path_for(key, simulated=simulated)
        if not path.exists():
            if not simulated:
                return None
            legacy = self._legacy_simulated(key)
            if legacy is None:
                return None
            baseline = legacy
        else:
            baseline = read_baseline(path)
            if not simulated and is_simulated(baseline.fingerprint):
                return None  # a simulator's baseline from before the sim/ level: never a real one's
        if baseline.measurement.key != key:
            raise StoreError(
                f"{baseline.path}: holds the baseline of {baseline.measurement.key.label}, "
                f"not {key.label} (names that differ only in case on a case-insensitive file system?)"
            )
        return baseline

    def _legacy_simulated(self, key: MeasurementKey) -> StoredBaseline | None:
        """A simulator's baseline stored before the ``sim/`` level existed (at the real layer's path)."""
        path = self.path_for(key)
        if not path.exists():
            return None
        baseline = read_baseline(path)
        return baseline if is_simulated(baseline.fingerprint) else None

    def entries(self) -> list[StoredBaseline]:
        """Every stored baseline (both layers), sorted by path; StoreError on the first unreadable file."""
        if not self.root.is_dir():
            return []
        paths = [*self.root.glob("*/*.json"), *(self.root / SIM_DIR).glob("*/*.json")]
        return [read_baseline(p) for p in sorted(p for p in paths if not p.name.startswith("."))]

    def save(
        self,
        measurement: Measurement,
        *,
        suite_dir: Path | None,
        new_segment: bool = True,
        history: int = DEFAULT_HISTORY,
        session: str | None = None,
    ) -> SaveResult:
        """Append `measurement` to the history of its key, as a new segment or into the current one.

        The new run is built and serialised before the lock is taken, so a failure there leaves the
        store untouched; reading the old history, appending and writing happen under the lock, so two
        jobs appending at once both land. A previous file that is corrupt is moved aside
        (`SaveResult.kept_as`; `replaced_error` says why), never silently overwritten; one of a newer
        schema_version is refused: a newer pytest-specperf wrote it, and rewriting it in this version's
        schema would lose data. A store that cannot be written is one StoreError line. `session`
        (the pytest session's id) pairs this run with the other servers' runs of the same session.
        """
        if not isinstance(measurement.fingerprint, Fingerprint):
            raise ValueError(
                f"{measurement.key.label}: refusing to store a baseline without a fingerprint "
                "(a number without its environment is a phantom)"
            )
        if history < 1:
            raise ValueError(f"history must keep at least 1 run, got {history}")
        new = Summary.of(measurement)
        provenance = Provenance.here(suite_dir, session)
        dumps({"run": StoredRun(measurement, new, provenance, 0).to_dict()})  # fail before touching the store
        simulated = is_simulated(measurement.fingerprint)
        path = self.path_for(measurement.key, simulated=simulated)
        try:
            with self._locked():
                self._move_legacy_simulated(measurement.key)
                previous, error = _old_history(path)
                kept = _move_aside(path, "unreadable") if error else None
                runs = list(previous.runs) if previous else []
                segment = (runs[-1].segment + (1 if new_segment else 0)) if runs else 0
                runs.append(StoredRun(measurement, new, provenance, segment))
                runs = runs[-history:]
                atomic_write(path, dumps(_document(runs)))
                if not (self.root / ".gitignore").exists():
                    atomic_write(self.root / ".gitignore", GITIGNORE)
        except OSError as exc:
            raise StoreError(
                f"{path}: cannot write the baseline ({exc.strerror or exc}"
                + (f": {exc.filename}" if exc.filename and str(exc.filename) != str(path) else "")
                + f"); make the store {self.root} writable, or point `store` (config) at a writable directory"
            ) from None
        old = previous.summary if previous else None
        return SaveResult(
            path=path, old=old, new=new, replaced_error=error, kept_as=kept,
            segment=segment, runs=len(runs), new_segment=new_segment or previous is None,
        )  # fmt: skip

    def _move_legacy_simulated(self, key: MeasurementKey) -> None:
        """Under the lock: a simulator's history at the real layer's path moves under ``sim/`` (or aside,
        when ``sim/`` already has one), so neither layer ever appends to the other's file."""
        legacy = self.path_for(key)
        try:
            baseline = read_baseline(legacy) if legacy.exists() else None
        except StoreError:
            return  # unreadable: `save` of a real run moves it aside and says so
        if baseline is None or not is_simulated(baseline.fingerprint):
            return
        target = self.path_for(key, simulated=True)
        if target.exists():
            _move_aside(legacy, "simulated")
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(legacy, target)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        lock_path = self.root / LOCK_NAME
        try:
            with filelock.FileLock(lock_path, timeout=LOCK_TIMEOUT_S):
                yield
        except filelock.Timeout as exc:
            raise StoreError(
                f"{lock_path}: still locked after {LOCK_TIMEOUT_S:.0f} s; another pytest-specperf "
                "process is writing this store (or died holding the lock on a network file system)"
            ) from exc


def is_simulated(fingerprint: Fingerprint) -> bool:
    """Whether a run was measured on the simulator (its fingerprint's launcher is ``sim``)."""
    return fingerprint.identity.get("launcher") == "sim"


def _document(runs: list[StoredRun]) -> dict[str, Any]:
    """The schema-2 document; per-request records only for the newest run (the file stays reviewable)."""
    bodies = [run.to_dict() for run in runs]
    for body in bodies[:-1]:
        for round_ in body["measurement"]["rounds"]:
            round_["records"] = []
    return {"schema_version": SCHEMA_VERSION, "kind": KIND, "runs": bodies}


def dumps(document: dict[str, Any]) -> str:
    """The stored text: scrubbed, key-sorted, indent 2, trailing newline."""
    return json.dumps(clean(document), indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n"


def _move_aside(path: Path, why: str) -> Path:
    """Rename a file that is about to be replaced to `<name>.<why>-<UTC time>`: kept, out of the way.

    The new name does not end in `.json`, so the store no longer reads it, and it says why it is there.
    """
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    target = path.with_name(f"{path.name}.{why}-{stamp}")
    os.replace(path, target)
    return target


def _old_history(path: Path) -> tuple[StoredBaseline | None, str | None]:
    """The history about to be appended to; an unreadable one is reported (and moved aside), not fatal."""
    if not path.exists():
        return None, None
    try:
        return read_baseline(path), None
    except _NewerSchemaError as exc:
        raise StoreError(
            f"{path}: refusing to overwrite a baseline of schema_version {exc.version}, newer than this "
            f"pytest-specperf ({pytest_specperf.__version__}) writes (schema_version {SCHEMA_VERSION}): a newer "
            "pytest-specperf stored it and downgrading it would lose data; upgrade pytest-specperf "
            "(or delete the file to start a new baseline with this version)"
        ) from None
    except StoreError as exc:
        return None, str(exc)


def read_baseline(path: Path) -> StoredBaseline:
    """Parse and validate one stored file; StoreError names the file and what is wrong.

    The summary is recomputed from the rounds: the stored one is for reviewers, and a hand
    edit to it must not change what the plugin compares against. A schema-1 file (one baseline,
    no history) reads as a history of one run in segment 0.
    """
    data = _read_json(path)
    version = _check_header(path, data)
    try:
        if version == 1:
            runs = [_read_run(data, segment=0)]
        else:
            listed = data["runs"]
            if not isinstance(listed, list) or not listed:
                raise ValueError("runs must be a non-empty list")
            runs = [_read_run(run, segment=int(run["segment"])) for run in listed]
    except KeyError as exc:
        raise StoreError(f"{path}: corrupt baseline: missing field {exc}") from exc
    except (TypeError, ValueError, AttributeError) as exc:
        raise StoreError(f"{path}: corrupt baseline: {exc}") from exc
    newest = runs[-1]
    return StoredBaseline(newest.measurement, newest.summary, newest.provenance, path, tuple(runs), version)


def _read_run(data: dict[str, Any], *, segment: int) -> StoredRun:
    fingerprint = Fingerprint.from_dict(data["fingerprint"])
    measurement = Measurement.from_dict(data["measurement"], fingerprint=fingerprint)
    return StoredRun(measurement, Summary.of(measurement), Provenance.from_dict(data["provenance"]), segment)


def _read_json(path: Path) -> dict[str, Any]:
    return read_json_object(path, StoreError, "stored baseline")


def _check_header(path: Path, data: dict[str, Any]) -> int:
    if data.get("kind") != KIND:
        raise StoreError(f"{path}: not a pytest-specperf baseline (kind={data.get('kind')!r})")
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise StoreError(f"{path}: corrupt baseline: bad schema_version {version!r}")
    if version > SCHEMA_VERSION:
        raise _NewerSchemaError(
            f"{path}: schema_version {version} is newer than this pytest-specperf "
            f"({pytest_specperf.__version__}) supports (schema_version {SCHEMA_VERSION}); "
            "upgrade pytest-specperf to read it",
            version,
        )
    return version
