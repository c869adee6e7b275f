"""Why a server failed to start, in one line: a known cause, its first error line, and the rank.

On a TP8 node eight scheduler ranks write into one log at once, and the line that says what
went wrong scrolls away under the shutdown noise of the other seven. A person reading a failed
night needs the cause first; the log tail alone rarely shows it.

Engines echo their launch at every start (SGLang's `server_args=...` line holds words such as
`nccl` and `timeout`, and the API key); an echo is never evidence. The cause is the first real
error after it: a scheduler's own line (Slurm's time limit ended the step: not a crash), a known
cause of the server's engine (`Engine.startup_failures`), else the first line that reports an error
in any form. A server that ends after it was ready is read for Slurm's line too (`slurm_end`): a
`scancel` or a time limit is then named as such, not as a crash.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass
from pathlib import Path

from pytest_specperf.engines import Engine

#: A scheduler rank as SGLang prefixes its log lines: `[2026-01-01 00:00:00 TP3]`, `[... DP0 TP3 EP3]`.
_RANK = re.compile(r"^\[[^\]]*?\b((?:DP\d+ )?(?:PP\d+ )?TP\d+(?: EP\d+)?)\]")
#: A line that reports an error in any form (used when no known cause matches).
_ANY_ERROR = re.compile(r"\b\w*(Error|Exception)\b:|\berror: |\bfatal\b", re.IGNORECASE)
#: The first line of a native abort's block (`terminate called after throwing an instance of 'c10::Error'`,
#: then `what():`, the C++ frames, and `Fatal Python error: Aborted` last): the line that says what threw.
_ABORT = re.compile(r"^terminate called after throwing|^Fatal Python error:")
#: A raised exception as a traceback ends (`AttributeError: ...`): better evidence than "hit an exception:".
_EXCEPTION = re.compile(r"(?:^|[\s\].])([A-Z]\w*(?:Error|Exception)): ")
#: A line a logger wrote at warning level (vLLM's `WARNING 12-04 19:24:57 [system_utils.py:299] ...`): it may
#: quote an error it warns about, but it is not one.
_WARNING_LEVEL = re.compile(r"^(?:\(\S+ pid=\d+\) )?WARNING\b")
#: The plugin's own header lines in a server log (the command it ran).
_OWN_LINE = "# specperf:"
#: A traceback frame (`  File "x.py", line 3, in f`): it and the source line under it quote code, not errors.
_FRAME = re.compile(r'^\s*File "[^"]*", line \d+')
MAX_LOG_BYTES = 20_000_000  # a log beyond this is scanned from its end

#: Slurm's own line when it ends a step or a job, as slurmstepd writes it into the step's output:
#: `slurmstepd-n1: error: *** STEP 2.0 ON n1 CANCELLED AT 2026-12-04T19:22:32 ***` (scancel), the same
#: with `JOB 3`, or ending `DUE TO TIME LIMIT ***` (also PREEMPTION, NODE FAILURE, JOB REQUEUE). Older
#: releases' slurmstepd, and srun's own time-limit line, name no `ON node`. Group 1: the words after `DUE TO`.
_SLURM_CANCELLED = r"\*\*\* (?:STEP|JOB) \S+ (?:ON \S+ )?CANCELLED AT \S+"
SLURM_ENDED = re.compile(_SLURM_CANCELLED + r"(?: DUE TO ([A-Z][A-Z ]*[A-Z]))?")
SLURM_TIME_LIMIT = "TIME LIMIT"

#: A scheduler's own lines, whatever the engine: Slurm's step ended by the allocation, not by the server.
SCHEDULER_FAILURES: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(f"{_SLURM_CANCELLED} DUE TO {SLURM_TIME_LIMIT}"),
        "Slurm's time limit ended the step while the server was starting (not a crash): give the job more --time, "
        "or leave the server's start more of it",
    ),
    (
        SLURM_ENDED,
        "Slurm cancelled the step while the server was starting (scancel, or the allocation ended): not a crash",
    ),
)


@dataclass(frozen=True)
class SlurmEnd:
    """Slurm's line that it ended the server's step: a server gone after it was ready is then named as
    Slurm's doing, not as a crash with the exit code srun happened to return."""

    line: str
    reason: str | None  # the words after `DUE TO` ("TIME LIMIT", "PREEMPTION", ...); None for a cancellation

    def after_ready(self, exit_note: str = "") -> str:
        """What happened, said of the server (`server 'x' ...`), with the usual fix; `exit_note` (how the
        process ended, e.g. "it exited with code 0") in parentheses before Slurm's line."""
        if self.reason is None:
            what = "was cancelled by Slurm after it was ready (scancel, or the allocation ended): not a crash"
        elif self.reason == SLURM_TIME_LIMIT:
            what = "was ended by Slurm's time limit after it was ready (not a crash): give the job more --time"
        else:
            what = f"was ended by Slurm after it was ready, due to {self.reason.lower()} (not a crash)"
        note = f" ({exit_note})" if exit_note else ""
        return f"{what}{note}; Slurm: {self.line.strip()[:300]}"


def slurm_end(log_path: Path) -> SlurmEnd | None:
    """Slurm's first line in a server's log saying it ended the step (None: Slurm did not end it)."""
    for line in _read(log_path):
        match = SLURM_ENDED.search(line)
        if match:
            return SlurmEnd(line, match.group(1))
    return None


PORT_IN_USE_WORDS = re.compile(r"address already in use|errno 98\b", re.IGNORECASE)
OUT_OF_MEMORY_WORDS = re.compile(r"out of memory|OutOfMemoryError|Not enough memory", re.IGNORECASE)


@dataclass(frozen=True)
class Diagnosis:
    """The most likely cause of a failed start, and the log line it was read from."""

    cause: str  # one line, with the usual fix
    first_error: str | None  # the first error line of the first failing rank, as logged
    rank: str | None  # `TP3`, or None for a single-process server
    log_path: Path

    @property
    def port_taken(self) -> bool:
        """The server could not bind its port: a fresh port may be all a restart needs."""
        return self.first_error is not None and bool(PORT_IN_USE_WORDS.search(self.first_error))

    @property
    def out_of_memory(self) -> bool:
        """The GPUs had no room: if a previous server's memory is still being released, waiting may be enough."""
        return self.first_error is not None and bool(OUT_OF_MEMORY_WORDS.search(self.first_error))

    def one_line(self) -> str:
        where = f" ({self.rank})" if self.rank else ""
        error = f"; first error{where}: {self.first_error.strip()[:300]}" if self.first_error else ""
        return f"{self.cause}{error}; log: {self.log_path}"


def is_echo(line: str, engine: Engine) -> bool:
    """A line that repeats the launch (the command, the engine's echo of its arguments)."""
    return line.startswith(_OWN_LINE) or any(p.search(line) for p in engine.launch_echo)


def diagnose(log_path: Path, engine: Engine) -> Diagnosis:
    """Scan a server log for the first known cause of a failed start (else the first error line)."""
    rank: str | None = None
    first_generic: tuple[str, str | None] | None = None
    first_exception: tuple[str, str | None] | None = None
    quoted_code = False
    for line in _read(log_path):
        match = _RANK.match(line)
        if match:
            rank = match.group(1)
        after_frame, quoted_code = quoted_code, bool(_FRAME.match(line))
        if quoted_code or (after_frame and line[:1].isspace()) or is_echo(line, engine):
            continue
        for pattern, cause in (*SCHEDULER_FAILURES, *engine.startup_failures):
            if pattern.search(line):
                return Diagnosis(cause, line, rank, log_path)
        if first_exception is None and (_EXCEPTION.search(line) or _ABORT.search(line)):
            first_exception = (line, rank)
        if first_generic is None and _ANY_ERROR.search(line):
            first_generic = (line, rank)
    found = first_exception or first_generic
    if found is not None:
        line, where = found
        exception = _EXCEPTION.search(line)
        if _ABORT.search(line):
            cause = "an abort in native code during start-up"
        elif exception:
            cause = f"{exception.group(1)} during start-up"
        else:
            cause = "an error during start-up"
        return Diagnosis(f"{cause} (no known cause recognised); see the first error", line, where, log_path)
    return Diagnosis("no error in the log; see its last lines", None, None, log_path)


#: What a death by each signal usually means for a server, so a report can say more than "no error".
SIGNAL_MEANINGS = {
    signal.SIGILL: "an instruction this CPU lacks: a kernel or wheel built for another CPU (AVX-512, AMX, ...)",
    signal.SIGKILL: "killed from outside: the kernel's out-of-memory killer (see `dmesg`) or a scheduler's limit",
    signal.SIGSEGV: "a crash in native code: a kernel, a driver, or an extension built against another torch",
    signal.SIGABRT: "an abort in native code: a C++ exception or a failed check (the log's failure block says which)",
    signal.SIGBUS: "a bad memory access: shared memory (/dev/shm) too small, or a file mapped from a full disk",
    signal.SIGTERM: "stopped from outside: a scheduler, a container runtime or a person",
}


def describe_exit(code: int) -> tuple[str, str | None]:
    """How a process ended, in words, and what that usually means (None for a plain exit code).

    A negative code is a death by signal; a code of 128 + N is the same death reported by a shell
    (a `command` template that runs the server under `bash -c`).
    """
    number = -code if code < 0 else code - 128 if code > 128 else 0
    try:
        sig = signal.Signals(number)
    except ValueError:
        return f"exited with code {code}", None
    died = f"was killed by {sig.name} (signal {number})" if code < 0 else f"exited with code {code} (128 + {sig.name})"
    return died, SIGNAL_MEANINGS.get(sig)


class LogWatch:
    """A starting server's log, read as it grows: the first fatal line, and the newest error since the
    newest milestone (what a progress line shows: a start that logs errors but goes on is not hidden)."""

    def __init__(self, path: Path, engine: Engine) -> None:
        self.path, self.engine = path, engine
        self.fatal: str | None = None
        self.newest_error: str | None = None
        self._offset = 0
        self._partial = b""

    def poll(self) -> None:
        """Read what was written since the last poll (complete lines only)."""
        try:
            with self.path.open("rb") as fh:
                fh.seek(self._offset)
                data = fh.read(MAX_LOG_BYTES)
        except OSError:
            return
        self._offset += len(data)
        *lines, self._partial = (self._partial + data).split(b"\n")
        for raw in lines:
            self._see(raw.decode(errors="replace").rstrip("\r"))

    def _see(self, line: str) -> None:
        if not line.strip() or is_echo(line, self.engine) or _FRAME.match(line):
            return
        if self.fatal is None and any(p.search(line) for p in self.engine.fatal_startup):
            self.fatal = line
        if any(p.search(line) for p in self.engine.startup_milestones):
            self.newest_error = None  # the start went on past it
        elif (_ANY_ERROR.search(line) or _ABORT.search(line)) and not _WARNING_LEVEL.search(line):
            self.newest_error = line  # not vLLM's `WARNING ... can cause fd limit errors like `OSError: ...``


def _read(path: Path) -> list[str]:
    try:
        with path.open("rb") as fh:
            size = fh.seek(0, 2)
            fh.seek(max(0, size - MAX_LOG_BYTES))
            return fh.read().decode(errors="replace").splitlines()
    except OSError:
        return []
