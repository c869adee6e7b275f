"""Why a server failed to start, in one line: a known cause, its first error line, and the rank.

On a TP8 node eight scheduler ranks write into one log at once, and the line that says what
went wrong scrolls away under the shutdown noise of the other seven. A person reading a failed
night needs the cause first; the log tail alone rarely shows it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

#: Known causes of a failed SGLang start: (log pattern, one-line diagnosis with the usual fix).
#: Order matters: the first pattern of the first matching line wins.
PORT_IN_USE = "address already in use: another process took the server's port"

# fmt: off
SGLANG_STARTUP_FAILURES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), diagnosis)
    for pattern, diagnosis in (
        (r"error: unrecognized arguments", "the engine does not know a flag in the launch arguments (check `args`)"),
        (r"error: ambiguous option", "an abbreviated flag matches several SGLang flags (write it in full)"),
        (r"error: argument --", "the engine refused a flag's value (check `args`)"),
        (r"address already in use|errno 98\b", PORT_IN_USE),
        (
            r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|Not enough memory",
            "GPU out of memory: another process holds GPU memory, or lower --mem-fraction-static / "
            "--max-running-requests / the context length",
        ),
        (r"\bNCCL\b.*(error|failure|timeout)|nccl(Internal|System|Unhandled\w*|Invalid\w*)Error|NCCL WARN",
         "NCCL error: the GPUs of a tensor-parallel group could not talk to each other"),
        (r"RevisionNotFoundError|Invalid rev id|revision .* (is not|not) (found|valid)",
         "model revision not found: check the revision/branch name"),
        (r"GatedRepoError|Access to model .* is restricted|401 Client Error",
         "model access denied: log in to Hugging Face (HF_TOKEN) or accept the model's licence"),
        (r"RepositoryNotFoundError|is not a local folder and is not a valid model identifier|404 Client Error"
         r"|does not appear to have a file named|No such file or directory: .*config\.json",
         "model not found: check `model`/`draft_model` (a local path or a Hugging Face repo id)"),
        (r"trust_remote_code|contains custom code",
         "the model needs its own code: add --trust-remote-code to `args`"),
        (r"Unknown speculative algorithm|speculative\S* .*(not supported|unsupported|must be|requires)"
         r"|does not support speculative",
         "unsupported speculative setting: check algorithm, draft model and the num_* keys"),
        (r"No module named '?sglang\b", "SGLang is not installed for the configured `python`"),
        (r"ModuleNotFoundError|ImportError|undefined symbol",
         "a Python import failed: a missing or mismatched package (torch, flashinfer, sgl-kernel)"),
    )
)
# fmt: on

#: A scheduler rank as SGLang prefixes its log lines: `[2026-01-01 00:00:00 TP3]`, `[... DP0 TP3 EP3]`.
_RANK = re.compile(r"^\[[^\]]*?\b((?:DP\d+ )?(?:PP\d+ )?TP\d+(?: EP\d+)?)\]")
#: A line that reports an error in any form (used when no known cause matches).
_ANY_ERROR = re.compile(r"\b\w*(Error|Exception)\b:|\berror: |\bfatal\b", re.IGNORECASE)
MAX_LOG_BYTES = 20_000_000  # a log beyond this is scanned from its end


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
        return self.cause == PORT_IN_USE

    def one_line(self) -> str:
        where = f" ({self.rank})" if self.rank else ""
        error = f"; first error{where}: {self.first_error.strip()[:300]}" if self.first_error else ""
        return f"{self.cause}{error}; log: {self.log_path}"


def diagnose(log_path: Path) -> Diagnosis:
    """Scan a server log for the first known cause of a failed start (else the first error line)."""
    lines = _read(log_path)
    rank: str | None = None
    first_generic: tuple[str, str | None] | None = None
    for line in lines:
        match = _RANK.match(line)
        if match:
            rank = match.group(1)
        for pattern, cause in SGLANG_STARTUP_FAILURES:
            if pattern.search(line):
                return Diagnosis(cause, line, rank, log_path)
        if first_generic is None and _ANY_ERROR.search(line) and not line.startswith("# specperf:"):
            first_generic = (line, rank)
    if first_generic is not None:
        return Diagnosis("no known cause recognised; see the first error", first_generic[0], first_generic[1], log_path)
    return Diagnosis("no error in the log; see its last lines", None, None, log_path)


def _read(path: Path) -> list[str]:
    try:
        with path.open("rb") as fh:
            size = fh.seek(0, 2)
            fh.seek(max(0, size - MAX_LOG_BYTES))
            return fh.read().decode(errors="replace").splitlines()
    except OSError:
        return []
