"""Stored baselines: the records of a history (runs, summaries, provenance), and the older layout.

The records here (`StoredRun`, `StoredBaseline`) are what every backend gives the verdict. Since
layout 3 a history is kept append-only, one line per run (store/compact.py); what follows describes
the layout before it (schema_version 1 and 2, one JSON file per key rewritten every night), which is
still read as it is and converted by the first write (store/file.py `migrate`).

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
stored by one session were measured together, which pairs them into a history of speedups), and
the run's own id, so a run appended twice (re-applied after a rejected push) is kept once.
"""

from __future__ import annotations

import json
import math
import socket
import statistics
import subprocess
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest_specperf
from pytest_specperf.common.jsonfile import clean, read_json_object
from pytest_specperf.errors import StoreError
from pytest_specperf.measure.fingerprint import Fingerprint
from pytest_specperf.measure.records import Measurement

SCHEMA_VERSION = 2
#: Nights a history keeps when the config does not say (`history`): 0, every night (a store keeps
#: years; the verdict reads the window it needs, `VERDICT_NIGHTS`). N > 0 is a retention.
DEFAULT_HISTORY = 0
#: Nights of a history the verdict reads (store/file.py `verdict_window`): its spread rests on up to
#: 90 accepted runs (verdict/level.py SPREAD_RUNS), its level on the first `LEVEL_RUNS` of the segment.
VERDICT_NIGHTS = 90
#: Accepted runs of the current segment a trimmed history keeps however old (`kept_runs`): the runs
#: the level rests on (verdict/level.py).
LEVEL_RUNS = 30

T = TypeVar("T")
KIND = "pytest-specperf baseline"


class NewerSchemaError(StoreError):
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
        """The rounds' means, each round read once: every run of a year is summarised when it is read."""
        rounds = measurement.rounds
        return cls(
            rounds=len(rounds),
            requests=sum(r.request_count for r in rounds),
            errors=sum(r.error_count for r in rounds),
            output_throughput=_mean([r.output_throughput for r in rounds]),
            accept_length=_mean([r.accept_length for r in rounds]),
            mean_tpot_ms=_mean([r.tpot_ms.mean for r in rounds]),
            mean_ttft_ms=_mean([r.ttft_ms.mean for r in rounds]),
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _mean(values: list[float | None]) -> float | None:
    """The mean of the finite values, to 4 decimals; None without any."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return round(math.fsum(finite) / len(finite), 4) if finite else None  # `statistics.fmean`, without its checks


@dataclass(frozen=True)
class Provenance:
    """Who stored a baseline, when, from which commit of the suite, and in which pytest session.

    `session` is the id of the session that stored the run: runs of two servers with the same id
    were measured together (a speculative config and its reference), which is how a history of
    speedups is paired. Runs stored before it existed have None.

    `run_id` names the run itself: a history holds a run once, however often it is appended (a
    shared store re-applies a session's runs after another job pushed first; a push that reached the
    remote but reported a failure is retried). Runs stored before it existed have None.
    """

    created: str
    git_commit: str | None
    host: str
    specperf_version: str
    session: str | None = None
    run_id: str | None = None

    @classmethod
    def here(cls, suite_dir: Path | None, session: str | None = None) -> Provenance:
        return cls(
            created=datetime.now(UTC).isoformat(timespec="seconds"),
            git_commit=git_commit(suite_dir) if suite_dir is not None else None,
            host=socket.gethostname(),
            specperf_version=pytest_specperf.__version__,
            session=session,
            run_id=uuid.uuid4().hex[:16],
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Provenance:
        # session and run_id are absent in runs stored before they existed; the others' names looked up once
        required = {name: data[name] for name in _PROVENANCE_REQUIRED}
        return cls(**required, session=data.get("session"), run_id=data.get("run_id"))


_PROVENANCE_REQUIRED = tuple(f.name for f in fields(Provenance) if f.name not in ("session", "run_id"))


@dataclass(frozen=True)
class StoredRun:
    """One run of a history: its measurement (records only for the newest), summary, provenance, segment."""

    measurement: Measurement
    summary: Summary
    provenance: Provenance
    segment: int
    #: how the run counts (verdict/nightly.py's RunStatus): "accepted" in the level and the spread,
    #: "suspect" (beyond the tolerance, not credibly) and "refused" (a REGRESSION night) in neither
    status: str = "accepted"
    #: who made this run the first of a new level after it was stored, and why (`accepted_from`):
    #: `specperf accept`'s line; None for a run stored as it is (`--specperf-update` starts a segment itself)
    acceptance: str | None = None

    @property
    def fingerprint(self) -> Fingerprint:
        """Where the run was measured: every stored run has one (`new_run` refuses a measurement without)."""
        assert self.measurement.fingerprint is not None
        return self.measurement.fingerprint

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
            "fingerprint": self.fingerprint.redacted().to_dict(),
            "provenance": self.provenance.to_dict(),
            "segment": self.segment,
            "status": self.status,
        } | ({"acceptance": self.acceptance} if self.acceptance is not None else {})


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
        """Where the newest run was measured (a stored run always says)."""
        assert self.measurement.fingerprint is not None
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


def runs_word(runs: Sequence[object]) -> str:
    """`1 run`, `2 runs`: how many runs a message speaks of."""
    return f"{len(runs)} run{'s' if len(runs) != 1 else ''}"


def new_run(
    measurement: Measurement, *, suite_dir: Path | None, session: str | None = None, status: str = "accepted"
) -> StoredRun:
    """Tonight's run of `measurement`, ready to append: summary, provenance (with a new run id).

    Its segment is set by the history it is appended to. A measurement without a fingerprint is
    refused: a number without its environment is a phantom.
    """
    if not isinstance(measurement.fingerprint, Fingerprint):
        raise ValueError(
            f"{measurement.key.label}: refusing to store a baseline without a fingerprint "
            "(a number without its environment is a phantom)"
        )
    return StoredRun(measurement, Summary.of(measurement), Provenance.here(suite_dir, session), 0, status)


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


def is_simulated(fingerprint: Fingerprint) -> bool:
    """Whether a run was measured on the simulator (its fingerprint's launcher is ``sim``)."""
    return fingerprint.identity.get("launcher") == "sim"


def reference_history(entry: StoredBaseline, stored: Sequence[StoredBaseline]) -> StoredBaseline | None:
    """The reference's history of the same workload and level, on the same layer (the simulator's or
    the engine's): the other half of a stored speedup. None for a reference's own history."""
    key = entry.measurement.key
    if entry.measurement.is_reference:
        return None
    simulated = is_simulated(entry.fingerprint)
    return next(
        (
            e
            for e in stored
            if e.measurement.is_reference
            and e.measurement.key.workload == key.workload
            and e.measurement.key.concurrency == key.concurrency
            and is_simulated(e.fingerprint) == simulated
        ),
        None,
    )


def document(runs: list[StoredRun]) -> dict[str, Any]:
    """The schema-2 document; per-request records only for the newest run (the file stays reviewable)."""
    bodies = [run.to_dict() for run in runs]
    for body in bodies[:-1]:
        for round_ in body["measurement"]["rounds"]:
            round_["records"] = []
    return {"schema_version": SCHEMA_VERSION, "kind": KIND, "runs": bodies}


def dumps(document: dict[str, Any]) -> str:
    """The stored text: scrubbed, key-sorted, indent 2, trailing newline."""
    return json.dumps(clean(document), indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n"


def read_baseline(path: Path) -> StoredBaseline:
    """Parse and validate one stored file; StoreError names the file and what is wrong.

    The summary is recomputed from the rounds: the stored one is for reviewers, and a hand
    edit to it must not change what the plugin compares against. A schema-1 file (one baseline,
    no history) reads as a history of one run in segment 0. A layout-3 history (``.jsonl``) is read by
    `store.compact.read_history`, with the fingerprints of the store it is in.
    """
    data = _read_json(path)
    version = _check_header(path, data)
    try:
        if version == 1:
            runs = [read_run(data, segment=0)]
        else:
            listed = data["runs"]
            if not isinstance(listed, list) or not listed:
                raise ValueError("runs must be a non-empty list")
            runs = [read_run(run, segment=int(run["segment"])) for run in listed]
    except KeyError as exc:
        raise StoreError(f"{path}: corrupt baseline: missing field {exc}") from exc
    except (TypeError, ValueError, AttributeError) as exc:
        raise StoreError(f"{path}: corrupt baseline: {exc}") from exc
    newest = runs[-1]
    return StoredBaseline(newest.measurement, newest.summary, newest.provenance, path, tuple(runs), version)


RUN_STATUSES = ("accepted", "suspect", "refused")


def read_run(data: dict[str, Any], *, segment: int) -> StoredRun:
    fingerprint = Fingerprint.from_dict(data["fingerprint"])
    measurement = Measurement.from_dict(data["measurement"], fingerprint=fingerprint)
    status = data.get("status", "accepted")  # runs stored before statuses were all accepted ones
    if status not in RUN_STATUSES:
        raise ValueError(f"status must be one of {', '.join(RUN_STATUSES)}, got {status!r}")
    provenance = Provenance.from_dict(data["provenance"])
    acceptance = data.get("acceptance")
    if acceptance is not None and not isinstance(acceptance, str):
        raise ValueError(f"acceptance must be a string, got {acceptance!r}")
    return StoredRun(measurement, Summary.of(measurement), provenance, segment, status, acceptance)


def accepted_from(runs: Sequence[StoredRun], first: int, acceptance: str) -> list[StoredRun]:
    """The history with its runs from `first` on made the accepted level: a new segment starts there,
    as `--specperf-update` would have started it on that night, and its runs count ("accepted"), so a
    trimmed history keeps them as the level (`kept_runs`). The first carries `acceptance`, the line
    that says who accepted it and why. Only a run of the current segment after its first can be
    accepted: an older one is behind a level a person accepted since."""
    if not 0 <= first < len(runs):
        raise ValueError(f"there is no run {first + 1} in a history of {runs_word(runs)}")
    current = runs[-1].segment
    began = next(i for i, r in enumerate(runs) if r.segment == current)
    if first < began:
        raise ValueError(f"run {first + 1} is before the current level, accepted at run {began + 1}")
    if first == began:
        raise ValueError(f"run {first + 1} already begins the accepted level")
    tail = [replace(r, segment=current + 1, status="accepted") for r in runs[first:]]
    tail[0] = replace(tail[0], acceptance=acceptance)
    return [*runs[:first], *tail]


def _read_json(path: Path) -> dict[str, Any]:
    return read_json_object(path, StoreError, "stored baseline")


def _check_header(path: Path, data: dict[str, Any]) -> int:
    if data.get("kind") != KIND:
        raise StoreError(f"{path}: not a pytest-specperf baseline (kind={data.get('kind')!r})")
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise StoreError(f"{path}: corrupt baseline: bad schema_version {version!r}")
    if version > SCHEMA_VERSION:
        raise NewerSchemaError(
            f"{path}: schema_version {version} is newer than this pytest-specperf "
            f"({pytest_specperf.__version__}) supports (schema_version {SCHEMA_VERSION}); "
            "upgrade pytest-specperf to read it",
            version,
        )
    return version


def kept_runs(
    runs: Sequence[T], nights: int, *, night_of: Callable[[T], object], counted: Callable[[T], bool]
) -> list[T]:
    """What a history keeps of `runs` (oldest first): the runs of the newest `nights` nights; when the
    oldest of them is not counted (a REGRESSION or SUSPECT night: an unacknowledged change that
    outlives them), the whole stretch of such runs it belongs to, so the change is named since the run
    it began with ("since run 15" on night 200 as on night 16); and the first `LEVEL_RUNS` counted runs
    of the current segment (`counted` says which), the level a person accepted, which every later run
    is held against (verdict/level.py) however long ago that was. A night is `night_of` a run (the
    starts of one session share it; None: a night of its own)."""
    seen: list[object] = []
    start = 0
    for index in range(len(runs) - 1, -1, -1):
        night = night_of(runs[index])
        night = index if night is None else night
        if night not in seen:
            if len(seen) == nights:
                start = index + 1
                break
            seen.append(night)
    if start > 0 and not counted(runs[start]):
        while start > 0 and not counted(runs[start - 1]):
            start -= 1
    accepted = [r for r in runs[:start] if counted(r)][:LEVEL_RUNS]
    return [*accepted, *runs[start:]]
