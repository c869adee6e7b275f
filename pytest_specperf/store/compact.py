"""The append-only history (layout 3): one JSON line per run, what nights share stored once by digest.

Why: a history a team keeps for years must not rewrite a key's earlier nights every night. A file
rewritten whole makes a git branch grow by the whole history each night, makes two shards that write
one key merge text, and makes a store of 1,000 keys by 365 nights gigabytes. So a night only adds its
own bytes (docs/stores.md argues the layout)::

    <store>/fingerprints/<digest>.json                 one redacted fingerprint, written once, never changed
    <store>/setups/<digest>.json                       what a key's runs share night after night, likewise
    <store>/<server>/<workload>-c<level>.jsonl         one line per run, oldest first; a night appends its line
    <store>/<server>/<workload>-c<level>.records.json  the newest run's per-request records (replaced)
    <store>/sim/<server>/...                           the simulator's layer, the same way

A line is ``{"run": {...}}``: the digests of its fingerprint and its setup (the measurement's fields but
its rounds: server, workload, level, workload hash, draft shape, notes, warnings, and the names of the
round columns), the rounds as columns of values in the setup's order, provenance, segment, status and
acceptance. A fingerprint is shared by every key a server measures, a setup by every night of a key, so
a night adds its numbers and its provenance, about a kilobyte. The summary is not stored: it is derived
from the rounds on reading. Shared documents are named by their content's digest, so two jobs that
write the same one write the same bytes, and one is never changed once written.

Precision: a new run's measured floats keep 6 significant digits (`SIGNIFICANT`). The verdict's
intervals rest on run-to-run spreads of 0.5-2% and round-to-round noise of the same size; rounding at
6 digits moves a value by at most 5e-6 of itself, a thousand times inside the narrowest interval the
verdict draws (docs/stores.md). A run converted from an older store keeps its floats as they were
written (`exact`): the conversion is lossless, so a history's verdicts do not move.

Per-request records are kept for the newest run only, as before (the file stays small); they live in
the ``.records.json`` file beside the lines, which names the run it belongs to.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest_specperf
from pytest_specperf.common.jsonfile import clean
from pytest_specperf.errors import StoreError
from pytest_specperf.measure.fingerprint import Fingerprint
from pytest_specperf.measure.records import Measurement, RequestRecord
from pytest_specperf.store.records import (
    RUN_STATUSES,
    Provenance,
    StoredBaseline,
    StoredRun,
    Summary,
    kept_runs,
    read_baseline,
)

#: The layout a store of lines is (the files' names say it: ``.jsonl``); in every line as ``"v"``.
LAYOUT = 3
LOG_SUFFIX = ".jsonl"
RECORDS_SUFFIX = ".records.json"
FINGERPRINTS_DIR = "fingerprints"
SETUPS_DIR = "setups"
#: significant digits a new run's measured floats keep (see the module docstring)
SIGNIFICANT = 6
#: hex digits of a fingerprint's digest: 80 bits, no collision among the fingerprints of any store
DIGEST_CHARS = 20


def compact_json(value: Any) -> str:
    """One line: scrubbed (`clean`), key-sorted, no spaces."""
    return json.dumps(clean(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def fingerprint_document(fingerprint: Fingerprint) -> dict[str, Any]:
    return fingerprint.redacted().to_dict()


def digest_of(document: Any) -> str:
    """The name a shared document is stored under: the sha256 of its key-sorted JSON, shortened."""
    return hashlib.sha256(compact_json(document).encode()).hexdigest()[:DIGEST_CHARS]


def fingerprint_digest(fingerprint: Fingerprint) -> str:
    return digest_of(fingerprint_document(fingerprint))


def rounded(value: Any, digits: int = SIGNIFICANT) -> Any:
    """`value` with every float kept to `digits` significant digits (ints, strings, None as they are)."""
    if isinstance(value, float):
        return float(f"{value:.{digits}g}") if math.isfinite(value) else value
    if isinstance(value, Mapping):
        return {k: rounded(v, digits) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [rounded(v, digits) for v in value]
    return value


def run_ident(provenance: Provenance) -> str:
    """What names a run in its history: its id, or (runs stored before ids) when and by which session."""
    return provenance.run_id or f"{provenance.created}|{provenance.session or '-'}"


# ---- writing -----------------------------------------------------------------------------------


def columns(rounds: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Rounds as columns: each field once, a value per round (None where a round has none). A field that
    is an object with the same keys in every round (a distribution) becomes one column per key."""
    names: list[str] = []
    for body in rounds:
        names.extend(k for k in body if k not in names)
    out: dict[str, list[Any]] = {}
    for name in names:
        values = [body.get(name) for body in rounds]
        objects = [v for v in values if isinstance(v, dict)]
        if len(objects) == len(values) and objects[0] and all(v.keys() == objects[0].keys() for v in objects):
            for sub in objects[0]:
                out[f"{name}.{sub}"] = [v[sub] for v in objects]
        else:
            out[name] = values
    return out


@dataclass(frozen=True)
class Encoded:
    """A run as stored: its line, and the shared documents it names (relative path: text), each written
    once, before the first line that names it, and never changed (their names are their digests)."""

    line: str
    documents: dict[str, str]


def shared(kind: str, document: Any) -> tuple[str, str, str]:
    """(digest, relative path, text) of a shared document of `kind` (``fingerprints`` or ``setups``)."""
    digest = digest_of(document)
    text = json.dumps(clean(document), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    return digest, f"{kind}/{digest}.json", text


def encode_run(run: StoredRun, *, exact: bool = False) -> Encoded:
    """`run` as one line (newline included) and the shared documents it names: its fingerprint, and its
    setup (what a key's runs share night after night: the measurement's fields but its rounds, the names
    of its round columns). Floats are rounded to `SIGNIFICANT` digits unless `exact` (a converted run)."""
    body = run.measurement.to_dict()
    body.pop("fingerprint", None)
    rounds = body.pop("rounds")
    for round_ in rounds:
        round_.pop("records", None)
        round_.pop("acceptance_per_position", None)  # derived from spec_counters on reading
    table = columns(rounds)
    fingerprint, fingerprint_path, fingerprint_text = shared(FINGERPRINTS_DIR, fingerprint_document(run.fingerprint))
    setup, setup_path, setup_text = shared(SETUPS_DIR, {**body, "columns": list(table)})
    values = list(table.values())
    record: dict[str, Any] = {
        "v": LAYOUT,
        "setup": setup,
        "fingerprint": fingerprint,
        "rounds": values if exact else rounded(values),
        "provenance": run.provenance.to_dict(),
        "segment": run.segment,
        "status": run.status,
    }
    if run.acceptance is not None:
        record["acceptance"] = run.acceptance
    line = compact_json({"run": record}) + "\n"
    return Encoded(line, {fingerprint_path: fingerprint_text, setup_path: setup_text})


def records_document(run: StoredRun) -> dict[str, Any]:
    """The newest run's per-request records, naming the run they belong to."""
    return {
        "kind": "pytest-specperf records",
        "run": run_ident(run.provenance),
        "rounds": [[rec.to_dict() for rec in r.records] for r in run.measurement.rounds],
    }


# ---- reading -----------------------------------------------------------------------------------


def rows(table: Mapping[str, list[Any]], n: int) -> list[dict[str, Any]]:
    """Inverse of `columns`."""
    out: list[dict[str, Any]] = [{} for _ in range(n)]
    for name, values in table.items():
        if not isinstance(values, list) or len(values) != n:
            raise ValueError(f"round column {name!r} must hold {n} values")
        head, dot, sub = name.partition(".")
        for body, value in zip(out, values, strict=True):
            if dot:
                body.setdefault(head, {})[sub] = value
            else:
                body[name] = value
    return out


@dataclass
class Documents:
    """The shared documents of one store (fingerprints, setups), each read once."""

    root: Path

    def __post_init__(self) -> None:
        self._read: dict[tuple[str, str], Any] = {}
        self._fingerprints: dict[str, Fingerprint] = {}

    def get(self, kind: str, digest: object) -> Any:
        if not isinstance(digest, str) or not digest.isalnum():
            raise ValueError(f"bad {kind} digest {digest!r}")
        if (kind, digest) not in self._read:
            path = self.root / kind / f"{digest}.json"
            try:
                self._read[kind, digest] = json.loads(path.read_text(encoding="utf-8"))
            except FileNotFoundError:
                raise ValueError(f"its {kind} document {path} is missing") from None
            except (OSError, json.JSONDecodeError) as exc:
                raise ValueError(f"its {kind} document {path} is unreadable ({exc})") from None
        return self._read[kind, digest]

    def fingerprint(self, digest: object) -> Fingerprint:
        """The fingerprint of `digest`, made once: every run that names it shares it (fingerprints are
        read-only), so a year of nights builds it once, not 365 times."""
        made = self._fingerprints.get(digest) if isinstance(digest, str) else None
        if made is None:
            made = Fingerprint.from_dict(self.get(FINGERPRINTS_DIR, digest))
            self._fingerprints[str(digest)] = made
        return made


class NewerLayoutError(ValueError):
    """A line written by a newer pytest-specperf."""


def read_line(data: Mapping[str, Any], documents: Documents) -> StoredRun:
    run = data["run"]
    version = run.get("v")
    if isinstance(version, int) and not isinstance(version, bool) and version > LAYOUT:
        raise NewerLayoutError(
            f"layout {version} is newer than this pytest-specperf ({pytest_specperf.__version__}) reads "
            f"(layout {LAYOUT}); upgrade pytest-specperf to read it"
        )
    if version != LAYOUT:
        raise ValueError(f"bad layout {version!r}")
    setup = documents.get(SETUPS_DIR, run["setup"])
    body = {k: v for k, v in setup.items() if k != "columns"}
    values = run["rounds"]
    names = setup["columns"]
    if not isinstance(values, list) or len(values) != len(names):
        raise ValueError(f"rounds must hold {len(names)} columns")
    n = len(values[0]) if values else 0
    body["rounds"] = rows(dict(zip(names, values, strict=True)), n)
    measurement = Measurement.from_dict(body, fingerprint=documents.fingerprint(run["fingerprint"]))
    status = run.get("status", "accepted")
    if status not in RUN_STATUSES:
        raise ValueError(f"status must be one of {', '.join(RUN_STATUSES)}, got {status!r}")
    acceptance = run.get("acceptance")
    if acceptance is not None and not isinstance(acceptance, str):
        raise ValueError(f"acceptance must be a string, got {acceptance!r}")
    provenance = Provenance.from_dict(run["provenance"])
    return StoredRun(measurement, Summary.of(measurement), provenance, int(run["segment"]), status, acceptance)


def read_lines(path: Path, lines: Iterable[str], documents: Documents, *, nights: int | None = None) -> list[StoredRun]:
    """The runs of a history's lines, a run held twice (re-applied after a push) kept once. A last line
    without its newline is a write that was cut short: it is left out (the next append completes the
    file's lines first). With `nights`, only the runs a history trimmed to that many nights would keep
    (`records.kept_runs`: the verdict's window) are decoded: a year of nights costs a parse of its JSON,
    not a build of 365 measurements."""
    parsed: list[tuple[int, dict[str, Any]]] = []
    seen: set[str] = set()
    for number, line in enumerate(lines, start=1):
        if not line.endswith("\n") or not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise StoreError(f"{path}:{number}: corrupt history line: not valid JSON ({exc})") from None
        try:
            provenance = data["run"]["provenance"]
            ident = provenance.get("run_id") or f"{provenance['created']}|{provenance.get('session') or '-'}"
        except (KeyError, TypeError, AttributeError):
            ident = f"line {number}"  # read_line says what is wrong with it
        if ident in seen:
            continue
        seen.add(ident)
        parsed.append((number, data))
    if nights is not None and parsed:
        parsed = _window(parsed, nights)
    runs: list[StoredRun] = []
    for number, data in parsed:
        try:
            runs.append(read_line(data, documents))
        except NewerLayoutError as exc:
            raise StoreError(f"{path}:{number}: {exc}") from None
        except KeyError as exc:
            raise StoreError(f"{path}:{number}: corrupt history line: missing field {exc}") from None
        except (TypeError, ValueError, AttributeError) as exc:
            raise StoreError(f"{path}:{number}: corrupt history line: {exc}") from None
    return runs


def _window(parsed: list[tuple[int, dict[str, Any]]], nights: int) -> list[tuple[int, dict[str, Any]]]:
    """The lines a history trimmed to `nights` keeps, told from their JSON alone (store/file.py
    `newest_nights` on the decoded runs keeps the same ones)."""

    def field(entry: tuple[int, dict[str, Any]], name: str, default: Any = None) -> Any:
        run = entry[1].get("run")
        return run.get(name, default) if isinstance(run, dict) else default

    def session(entry: tuple[int, dict[str, Any]]) -> object:
        provenance = field(entry, "provenance")
        return (provenance.get("session") if isinstance(provenance, dict) else None) or None

    current = field(parsed[-1], "segment")
    return kept_runs(
        parsed,
        nights,
        night_of=session,
        counted=lambda e: field(e, "segment") == current and field(e, "status", "accepted") == "accepted",
    )


def with_records(runs: list[StoredRun], path: Path) -> list[StoredRun]:
    """The newest run with its per-request records, when the records file beside `path` is that run's."""
    records = path.with_name(path.name.removesuffix(LOG_SUFFIX) + RECORDS_SUFFIX)
    if not runs or not records.exists():
        return runs
    try:
        data = json.loads(records.read_text(encoding="utf-8"))
        newest = runs[-1]
        if data.get("run") != run_ident(newest.provenance):
            return runs
        per_round = data["rounds"]
        rounds = [
            replace(r, records=tuple(RequestRecord.from_dict(rec) for rec in recs))
            for r, recs in zip(newest.measurement.rounds, per_round, strict=True)
        ]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise StoreError(f"{records}: corrupt records of the newest run: {exc}") from None
    measurement = replace(newest.measurement, rounds=rounds)
    return [*runs[:-1], replace(newest, measurement=measurement)]


def read_log(path: Path, documents: Documents, *, nights: int | None = None) -> StoredBaseline:
    """The history in `path` (a ``.jsonl`` file), whole or (`nights`) its window; StoreError names the
    file, the line and what is wrong."""
    try:
        with path.open(encoding="utf-8", newline="\n") as handle:
            runs = read_lines(path, handle, documents, nights=nights)
    except FileNotFoundError:
        raise StoreError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise StoreError(f"{path}: cannot read the history: {exc}") from None
    if not runs:
        raise StoreError(f"{path}: corrupt history: no complete run line")
    runs = with_records(runs, path)
    newest = runs[-1]
    return StoredBaseline(newest.measurement, newest.summary, newest.provenance, path, tuple(runs), LAYOUT)


def read_history(path: Path) -> StoredBaseline:
    """One stored history file of either layout: a compact log (``.jsonl``, read with the fingerprints
    of the store it is in) or an earlier release's JSON document (`records.read_baseline`)."""
    if path.suffix == ".jsonl":
        return read_log(path, Documents(store_root_of(path)))
    return read_baseline(path)


def store_root_of(path: Path) -> Path:
    """The store a history file is in: the nearest folder above it that holds ``fingerprints/``."""
    for parent in Path(path).resolve().parents:
        if (parent / FINGERPRINTS_DIR).is_dir():
            return parent
    return Path(path).resolve().parent.parent
