"""One measurement at a time per machine (per set of GPUs), across every pytest session.

Two measurements running at once slow each other down: two sessions on one machine once stored
a baseline 15% low. A lock inside one session's folder only covers that session's xdist workers,
so the lock lives in a well-known place every session on the machine finds:

    $SPECPERF_LOCK_DIR, else <system temp dir>/pytest-specperf   (e.g. /tmp/pytest-specperf)

The folder is world-writable with the sticky bit (like /tmp) and lock files are mode 0666, so
sessions of different users exclude each other too. The lock is keyed by the GPUs the session
uses, from CUDA_VISIBLE_DEVICES (`measure-gpus-0-1.lock`; unset means every GPU: `measure-gpus-all.lock`).
Sessions on disjoint GPU sets measure in parallel.

Every held measurement also leaves its wall-clock interval in `measurements.jsonl` in the same
folder, with its GPUs. After each measurement the intervals of other sessions are read back, and
one that overlapped ours on a shared GPU becomes a warning on the measurement (so it reaches the
report and the stored baseline). That catches what the lock cannot: sessions keyed on different
but overlapping GPU sets, a different SPECPERF_LOCK_DIR, a lock on a file system without locking.
Waiting for another session's measurement is noted as well (and a `waiting` line is appended,
so the queue can be seen). A session that does not use this
plugin at all leaves no interval and cannot be seen.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import filelock

from pytest_specperf.errors import ServerError

ENV_DIR = "SPECPERF_LOCK_DIR"
INTERVALS = "measurements.jsonl"
KEEP_S = 24 * 3600.0  # intervals older than this are dropped when the file grows
MAX_BYTES = 256 * 1024
WAIT_TIMEOUT_S = 6 * 3600.0  # a night; a measurement never legitimately holds the lock longer
#: How a measurement's note that it waited for another session begins (`is_wait_note`).
WAIT_NOTE = "waited "


def lock_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where the machine's measurement locks live (see the module docstring)."""
    env = os.environ if environ is None else environ
    return Path(env.get(ENV_DIR) or Path(tempfile.gettempdir()) / "pytest-specperf")


def gpu_set(environ: Mapping[str, str] | None = None) -> str:
    """The GPUs a session uses, as a lock-file key: "0-1" for CUDA_VISIBLE_DEVICES=1,0; "all" if unset."""
    env = os.environ if environ is None else environ
    raw = env.get("CUDA_VISIBLE_DEVICES")
    if raw is None or not raw.strip():
        return "all"
    parts = sorted({p.strip() for p in raw.split(",") if p.strip()})
    return "-".join("".join(c if c.isalnum() else "_" for c in p) for p in parts) or "all"


def share_gpus(a: str, b: str) -> bool:
    return a == "all" or b == "all" or bool(set(a.split("-")) & set(b.split("-")))


@dataclass(frozen=True)
class Interval:
    """One measurement's hold of the lock, as recorded in `measurements.jsonl` (wall-clock seconds)."""

    id: str
    session: str
    pid: int
    gpus: str
    label: str
    start: float
    end: float | None = None


def is_wait_note(note: str) -> bool:
    """Whether a measurement's note is the one saying it waited for another session's measurement."""
    return note.startswith(WAIT_NOTE) and "for another session's measurement" in note


@dataclass
class Holding:
    """What happened around one measurement: how long we waited, for whom, and who overlapped us."""

    interval: Interval
    waited_s: float = 0.0
    waited_for: str | None = None
    overlaps: list[Interval] = field(default_factory=list)

    def wait_note(self) -> str | None:
        """A note for the measurement that it waited (waiting disturbs nothing, so not a warning)."""
        if self.waited_for is None:
            return None
        return (
            f"{WAIT_NOTE}{self.waited_s:.1f} s for another session's measurement on this machine "
            f"({self.waited_for}) to finish"
        )

    def disturbances(self) -> list[str]:
        """Warnings for the measurement: they travel with it into the report and the baseline."""
        out = []
        for other in self.overlaps:
            end = "still running" if other.end is None else f"until {_clock(other.end)}"
            out.append(
                f"another measurement overlapped this one on GPUs {other.gpus} ({other.label}, pid {other.pid}, "
                f"from {_clock(other.start)} {end}): both may read low; measure again"
            )
        return out


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


class MachineLock:
    """The per-machine measurement lock of one session (see the module docstring)."""

    def __init__(self, session: str, directory: Path | None = None, environ: Mapping[str, str] | None = None) -> None:
        self.session = session
        self.dir = directory or lock_dir(environ)
        self.gpus = gpu_set(environ)
        self._count = 0

    @property
    def lock_path(self) -> Path:
        return self.dir / f"measure-gpus-{self.gpus}.lock"

    @contextlib.contextmanager
    def hold(self, label: str) -> Iterator[Holding]:
        """Hold the lock while measuring `label`; the Holding's notes are ready after the block."""
        self._prepare()
        lock = filelock.FileLock(str(self.lock_path), mode=0o666)
        holding = Holding(Interval("", self.session, os.getpid(), self.gpus, label, 0.0))
        try:
            lock.acquire(timeout=0)
        except filelock.Timeout:
            holding.waited_for = self._holder_text()
            started = time.monotonic()
            self._append(
                {"waiting": time.time(), "session": self.session, "pid": os.getpid(), "gpus": self.gpus, "label": label}
            )  # others (and tests) can see the queue
            try:
                lock.acquire(timeout=WAIT_TIMEOUT_S)
            except filelock.Timeout:
                raise ServerError(
                    f"{self.lock_path}: another measurement has held this machine's lock for "
                    f"{WAIT_TIMEOUT_S / 3600:.0f} h ({holding.waited_for}); stop it, or set {ENV_DIR} "
                    "to measure independently of it"
                ) from None
            holding.waited_s = time.monotonic() - started
            if self._holder().get("session") == self.session:
                holding.waited_for = None  # one of our own xdist workers: that is the plan, not news
        try:
            self._count += 1
            interval = Interval(
                f"{self.session}:{os.getpid()}:{self._count}", self.session, os.getpid(), self.gpus, label, time.time()
            )
            holding.interval = interval
            self._write_holder(interval)
            self._append({**interval.__dict__})
            try:
                yield holding
            finally:
                end = time.time()
                holding.interval = Interval(**{**interval.__dict__, "end": end})
                self._append({"id": interval.id, "end": end})
                holding.overlaps = self.overlapping(holding.interval)  # anyone who started before our end is written
        finally:
            lock.release()

    def intervals(self) -> list[Interval]:
        """Every recorded interval (start and end lines joined), oldest first."""
        path = self.dir / INTERVALS
        if not path.exists():
            return []
        found: dict[str, Interval] = {}
        for line in path.read_text(errors="replace").splitlines():
            try:
                data: dict[str, Any] = json.loads(line)
            except ValueError:
                continue  # a line cut by a crash
            if "start" in data:
                with contextlib.suppress(TypeError):
                    found[data["id"]] = Interval(**data)
            elif data.get("id") in found:
                found[data["id"]] = Interval(**{**found[data["id"]].__dict__, "end": data.get("end")})
        return sorted(found.values(), key=lambda i: i.start)

    def overlapping(self, ours: Interval) -> list[Interval]:
        """Other sessions' measurements on a shared GPU whose interval met ours."""
        assert ours.end is not None
        out = []
        for other in self.intervals():
            if other.session == self.session or not share_gpus(other.gpus, ours.gpus):
                continue
            end = other.end if other.end is not None else (time.time() if _alive(other.pid) else other.start)
            if other.start < ours.end and end > ours.start:
                out.append(other)
        return out

    # ---- files ------------------------------------------------------------------------------

    def _prepare(self) -> None:
        if not self.dir.is_dir():
            self.dir.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(OSError):  # shared by every user, like /tmp
                os.chmod(self.dir, 0o1777)

    def _holder_path(self) -> Path:
        return self.dir / f"measure-gpus-{self.gpus}.holder"

    def _write_holder(self, interval: Interval) -> None:
        with contextlib.suppress(OSError):
            fd = os.open(self._holder_path(), os.O_WRONLY | os.O_TRUNC | os.O_CREAT, 0o666)
            try:
                _share(fd)
                os.write(fd, json.dumps(interval.__dict__).encode())
            finally:
                os.close(fd)

    def _holder(self) -> dict[str, Any]:
        try:
            data = json.loads(self._holder_path().read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _holder_text(self) -> str:
        data = self._holder()
        if not data:
            return "holder unknown"
        return f"{data.get('label')}, pid {data.get('pid')}, since {_clock(float(data.get('start') or 0))}"

    def _append(self, record: dict[str, Any]) -> None:
        """One line per event, appended with O_APPEND: concurrent writers never interleave lines."""
        path = self.dir / INTERVALS
        with contextlib.suppress(OSError):
            if path.exists() and path.stat().st_size > MAX_BYTES:
                self._prune(path)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
            try:
                _share(fd)
                os.write(fd, (json.dumps(record) + "\n").encode())
            finally:
                os.close(fd)

    def _prune(self, path: Path) -> None:
        """Drop intervals older than a day; we hold the lock of our GPUs, which covers our own lines."""
        cutoff = time.time() - KEEP_S
        kept = [i for i in self.intervals() if (i.end or time.time()) >= cutoff]
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text("".join(json.dumps(i.__dict__) + "\n" for i in kept))
        os.replace(tmp, path)


def _share(fd: int) -> None:
    """Files every user's sessions write (despite the umask); only the owner can change the mode."""
    with contextlib.suppress(OSError):
        if os.fstat(fd).st_uid == os.getuid():
            os.fchmod(fd, 0o666)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
