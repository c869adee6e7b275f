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

import contextlib
import hashlib
import itertools
import json
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest_specperf
from pytest_specperf.common.jsonfile import clean, sync_folder
from pytest_specperf.errors import StoreError
from pytest_specperf.measure.fingerprint import Fingerprint
from pytest_specperf.measure.records import Measurement, RequestRecord
from pytest_specperf.store.columns import round_samples
from pytest_specperf.store.columns import rows as rows  # re-exported: the inverse of `columns`
from pytest_specperf.store.parts import LOG_SUFFIX as LOG_SUFFIX  # re-exported: the name of a history
from pytest_specperf.store.parts import history_files, legacy_records_path, records_path
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
    once, before the first line that names it, and never changed (their names are their digests).
    `record` is the line's run, already scrubbed, so the line is remade for another segment without
    encoding the run again (`with_segment`)."""

    line: str
    documents: dict[str, str]
    record: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def with_segment(self, segment: int) -> Encoded:
        """The same run in `segment` (an append learns its segment from the history's last line)."""
        record = {**self.record, "segment": int(segment)}
        return Encoded(_line(record), self.documents, record)


def _line(record: dict[str, Any]) -> str:
    """A scrubbed run record as its line (what `compact_json` writes, without scrubbing it again)."""
    return json.dumps({"run": record}, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n"


#: shared documents made this process, by the JSON of what they were made from: a session's runs share
#: one fingerprint per server and one setup per key, so each is redacted and hashed once, not per run
_SHARED: dict[tuple[str, str], tuple[str, str, str]] = {}
_SHARED_MAX = 4096


def shared(kind: str, document: Any) -> tuple[str, str, str]:
    """(digest, relative path, text) of a shared document of `kind` (``fingerprints`` or ``setups``)."""
    digest = digest_of(document)
    text = json.dumps(clean(document), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    return digest, f"{kind}/{digest}.json", text


def _shared_once(kind: str, source: Any, make: Callable[[], Any]) -> tuple[str, str, str]:
    """`shared(kind, make())`, remembered by the JSON of `source` (what `make` builds it from: redaction
    and scrubbing are pure, so the same source always makes the same document)."""
    key = (kind, json.dumps(source, sort_keys=True, default=repr))
    found = _SHARED.get(key)
    if found is None:
        if len(_SHARED) >= _SHARED_MAX:
            _SHARED.clear()
        found = _SHARED[key] = shared(kind, make())
    return found


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
    print_ = run.fingerprint
    fingerprint, fingerprint_path, fingerprint_text = _shared_once(
        FINGERPRINTS_DIR, print_.to_dict(), lambda: fingerprint_document(print_)
    )
    setup_body = {**body, "columns": list(table)}
    setup, setup_path, setup_text = _shared_once(SETUPS_DIR, setup_body, lambda: setup_body)
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
    record = clean(record)  # strict JSON: a non-finite float is null, as `compact_json` writes it
    return Encoded(_line(record), {fingerprint_path: fingerprint_text, setup_path: setup_text}, record)


def records_document(run: StoredRun) -> dict[str, Any]:
    """The newest run's per-request records, naming the run they belong to."""
    return {
        "kind": "pytest-specperf records",
        "run": run_ident(run.provenance),
        "rounds": [[rec.to_dict() for rec in r.records] for r in run.measurement.rounds],
    }


# ---- reading -----------------------------------------------------------------------------------


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
    rounds = round_samples(dict(zip(names, values, strict=True)), n)
    measurement = Measurement.from_dict(body | {"rounds": []}, fingerprint=documents.fingerprint(run["fingerprint"]))
    measurement.rounds = rounds
    status = run.get("status", "accepted")
    if status not in RUN_STATUSES:
        raise ValueError(f"status must be one of {', '.join(RUN_STATUSES)}, got {status!r}")
    acceptance = run.get("acceptance")
    if acceptance is not None and not isinstance(acceptance, str):
        raise ValueError(f"acceptance must be a string, got {acceptance!r}")
    provenance = Provenance.from_dict(run["provenance"])
    return StoredRun(measurement, Summary.of(measurement), provenance, int(run["segment"]), status, acceptance)


@dataclass(frozen=True, slots=True)
class _Brief:
    """What choosing a history's window needs of one line (its number, text, run, night, segment and
    status), read without decoding its rounds."""

    number: int
    line: str
    ident: str
    session: object
    segment: object
    status: object


#: the end of a line as `encode_run` writes it (keys sorted: segment, setup, status, v close the run)
_TAIL = re.compile(r'"segment":(-?\d+),"setup":"[0-9A-Za-z]*","status":"([a-z]+)","v":\d+\}\}\s*$')
_PROVENANCE = '"provenance":'
_DECODER = json.JSONDecoder()


def _ident(provenance: object, number: int) -> str:
    """A line's run (`run_ident` of its provenance), or its line number when that is malformed (then
    `read_line` says what is wrong with it)."""
    try:
        assert isinstance(provenance, dict)
        return str(provenance.get("run_id") or f"{provenance['created']}|{provenance.get('session') or '-'}")
    except (KeyError, AssertionError):
        return f"line {number}"


def _brief(path: Path, number: int, line: str) -> _Brief:
    """`_Brief` of a line: its end and its provenance read where `encode_run` puts them, and a line of
    any other shape parsed whole (StoreError when it is not JSON)."""
    tail = _TAIL.search(line)
    at = line.find(_PROVENANCE)
    if tail is not None and at >= 0:
        try:
            provenance, _ = _DECODER.raw_decode(line, at + len(_PROVENANCE))
        except json.JSONDecodeError:
            provenance = None
        if isinstance(provenance, dict):
            session = provenance.get("session") or None
            return _Brief(number, line, _ident(provenance, number), session, int(tail[1]), tail[2])
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise StoreError(f"{path}:{number}: corrupt history line: not valid JSON ({exc})") from None
    run = data.get("run") if isinstance(data, dict) else None
    run = run if isinstance(run, dict) else {}
    provenance = run.get("provenance")
    session = (provenance.get("session") if isinstance(provenance, dict) else None) or None
    status = run.get("status", "accepted")
    return _Brief(number, line, _ident(provenance, number), session, run.get("segment"), status)


def read_lines(path: Path, lines: Iterable[str], documents: Documents, *, nights: int | None = None) -> list[StoredRun]:
    """The runs of a history's lines, a run held twice (re-applied after a push) kept once. A last line
    without its newline is a write that was cut short: it is left out (the next append completes the
    file's lines first). With `nights`, only the runs a history trimmed to that many nights would keep
    (`records.kept_runs`: the verdict's window) are decoded: a year of nights costs a look at each
    line's end and provenance, not a parse of its rounds or a build of 365 measurements."""
    if nights is None:
        return _whole(path, lines, documents)
    briefs: list[_Brief] = []
    seen: set[str] = set()
    for number, line in enumerate(lines, start=1):
        if not line.endswith("\n") or not line.strip():
            continue
        brief = _brief(path, number, line)
        if brief.ident not in seen:
            seen.add(brief.ident)
            briefs.append(brief)
    if nights is not None and briefs:
        current = briefs[-1].segment
        briefs = kept_runs(
            briefs,
            nights,
            night_of=lambda b: b.session,
            counted=lambda b: b.segment == current and b.status == "accepted",
        )
    return [_decoded(path, brief.number, brief.line, documents) for brief in briefs]


def _whole(path: Path, lines: Iterable[str], documents: Documents) -> list[StoredRun]:
    """Every run of a history's lines (`read_lines` without `nights`), each line parsed once and decoded
    at once: every line is decoded, so its run is told from its parsed provenance rather than from a look
    at its text first, and no parsed line outlives its decoding (a year of them held would only make the
    garbage collector walk them)."""
    runs: list[StoredRun] = []
    seen: set[str] = set()
    for number, line in enumerate(lines, start=1):
        if not line.endswith("\n") or not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise StoreError(f"{path}:{number}: corrupt history line: not valid JSON ({exc})") from None
        run = data.get("run") if isinstance(data, dict) else None
        ident = _ident(run.get("provenance") if isinstance(run, dict) else None, number)
        if ident not in seen:
            seen.add(ident)
            runs.append(_decoded(path, number, data, documents))
    return runs


def _decoded(path: Path, number: int, line: str | Any, documents: Documents) -> StoredRun:
    """The run of one line (its text, or parsed); StoreError names the file, the line and what is wrong."""
    try:
        return read_line(json.loads(line) if isinstance(line, str) else line, documents)
    except json.JSONDecodeError as exc:
        raise StoreError(f"{path}:{number}: corrupt history line: not valid JSON ({exc})") from None
    except NewerLayoutError as exc:
        raise StoreError(f"{path}:{number}: {exc}") from None
    except KeyError as exc:
        raise StoreError(f"{path}:{number}: corrupt history line: missing field {exc}") from None
    except (TypeError, ValueError, AttributeError) as exc:
        raise StoreError(f"{path}:{number}: corrupt history line: {exc}") from None


def with_records(runs: list[StoredRun], path: Path) -> list[StoredRun]:
    """The newest run with its per-request records, when the records file (in the history's parts' folder,
    or beside `path`: store/parts.py) is that run's."""
    records = next((p for p in (records_path(path), legacy_records_path(path)) if p.exists()), None)
    if not runs or records is None:
        return runs
    try:
        data = json.loads(records.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return runs  # replaced without an fsync (`replace_records`): cut short by a power loss
    except OSError as exc:
        raise StoreError(f"{records}: cannot read the records of the newest run: {exc}") from None
    try:
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
        with contextlib.ExitStack() as files:  # the history's files in order (store/parts.py)
            handles = [files.enter_context(p.open(encoding="utf-8", newline="\n")) for p in history_files(path)]
            if not handles:
                raise FileNotFoundError(path)
            runs = read_lines(path, itertools.chain.from_iterable(handles), documents, nights=nights)
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


# ---- the file of lines: its tail, an append, the records beside it --------------------------------


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


#: the records file is shared like the history (CI artifacts, other users): the umask's mode, as jsonfile's
_FILE_MODE = 0o666 & ~_umask()


@dataclass(frozen=True)
class Tail:
    """What an append needs of the history before it: the current segment, the newest run's summary,
    and whether the history holds the run being appended (re-applied after a rejected push)."""

    segment: int
    summary: Summary
    holds: bool = False


def read_tail(path: Path, documents: Documents, run_id: str | None = None) -> tuple[Tail | None, int, str | None]:
    """The history's newest run (None when there is none), how many lines it has, and why it is
    unreadable (None: it is not). Only the last line is decoded: an append costs about the same on
    night 365 as on night 1. A last line cut short (no newline) is dropped from its file first, its
    bytes kept. The history is its files in order (store/parts.py): a part holds at most a month."""
    files = history_files(path)
    if not files:
        return None, 0, None
    datas = [file.read_bytes() for file in files]
    if files == [path] and datas[0] and b"\n" not in datas[0]:
        return None, 0, f"{path}: corrupt history: no complete line"
    if datas[-1] and not datas[-1].endswith(b"\n"):  # a write cut short: its bytes kept aside, the history goes on
        datas[-1] = _cut_short(files[-1], datas[-1])
    count = sum(data.count(b"\n") for data in datas)
    data = next((data for data in reversed(datas) if data.strip()), b"")
    if not data:
        return None, count, None
    last = data[data.rstrip(b"\n").rfind(b"\n") + 1 :]
    try:
        run = read_line(json.loads(last), documents)
    except NewerLayoutError as exc:
        raise StoreError(
            f"{path}: refusing to append to this history: {exc}. A newer pytest-specperf ({LAYOUT} is this one's "
            "layout) stored it, and appending in an older layout would lose data"
        ) from None
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        return None, count, f"{path}: corrupt history line {count}: {exc}"
    needle = f'"run_id":{json.dumps(run_id)}'.encode()
    holds = run_id is not None and any(needle in data for data in datas)
    return Tail(run.segment, run.summary, holds), count, None


def _cut_short(path: Path, data: bytes) -> bytes:
    """`data` (the bytes of `path`) without its last line, which has no newline: that line is kept aside
    and the file truncated after its last complete line."""
    whole = data[: data.rfind(b"\n") + 1]
    keep_aside(path, data[len(whole) :], "cut")
    with path.open("r+b") as handle:
        handle.truncate(len(whole))
    return whole


def replace_records(path: Path, text: str) -> None:
    """The newest run's per-request records, replaced at once (a temp file renamed over the old one) but
    not fsynced: they are not the history. The line that follows is what is made durable; after a power
    loss the records file is the one before (it names an older run, so it is not read) or cut short
    (compact.py `with_records` leaves it out), and the history reads on."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        temporary.write_text(text, encoding="utf-8")
        os.chmod(temporary, _FILE_MODE)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
        raise


def append_line(path: Path, line: str) -> None:
    """One line at the end of `path`, in one write, made durable before the lock is released: the one
    fsync of an append (and its folder's, when the line starts the file). A write or fsync that fails
    (a full disk) takes its bytes back, so the history is as it was and the error is said."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        size = os.fstat(fd).st_size
        try:
            os.write(fd, line.encode("utf-8"))
            os.fsync(fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            raise
    finally:
        os.close(fd)
    if size == 0:
        sync_folder(path.parent)


def keep_aside(path: Path, data: bytes, why: str) -> Path:
    """`data` from `path` kept in `<name>.<why>-<UTC time>` beside it, never lost (and never read)."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    target = path.with_name(f"{path.name}.{why}-{stamp}")
    target.write_bytes(data)
    return target
