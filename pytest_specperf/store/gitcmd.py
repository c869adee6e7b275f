"""Running the `git` program for the git store: never prompting, never leaking a credential.

Why the program and not a library: every CI machine has git, configured with the credentials the
job may push with (a credential helper, an SSH key, the token actions/checkout stores in the
checkout's configuration). Running git in a work tree of the suite's own repository uses exactly
that configuration, and nothing of it passes through the plugin.

Every run is bounded in time, reads nothing from the terminal (`GIT_TERMINAL_PROMPT=0`, stdin
closed: a missing credential fails instead of waiting for a password on a CI runner), ignores the
variables that would point git at another repository (`GIT_DIR`, `GIT_INDEX_FILE`, ... are set
inside git hooks, and would make it write the user's index), and never starts a garbage collection
in the user's repository. Its error output is redacted before it becomes a message: git prints
remote URLs, and an `origin` URL may carry a CI token.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pytest_specperf.common.redact import redact_text
from pytest_specperf.errors import StoreError

#: Seconds a local git command may take (add, write-tree, checkout of a history branch).
LOCAL_TIMEOUT_S = 120.0
#: Seconds a command that talks to the remote may take (ls-remote, fetch, push).
NETWORK_TIMEOUT_S = 300.0
#: Variables that point git at a repository other than the one its working directory is in.
_REPOSITORY_VARIABLES = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_PREFIX",
    "GIT_QUARANTINE_PATH",
)
#: Who commits a history when git's configuration names no one (a fresh CI runner).
FALLBACK_IDENTITY = {
    "GIT_AUTHOR_NAME": "pytest-specperf",
    "GIT_AUTHOR_EMAIL": "pytest-specperf@localhost",
    "GIT_COMMITTER_NAME": "pytest-specperf",
    "GIT_COMMITTER_EMAIL": "pytest-specperf@localhost",
}


class GitError(StoreError):
    """A git command failed; the message is its first error line, redacted."""


def git_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The process environment for git: no prompts, no other repository, stalled transfers time out."""
    env = {k: v for k, v in os.environ.items() if k not in _REPOSITORY_VARIABLES}
    env.update({"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "LANGUAGE": "C"})
    env.setdefault("GIT_HTTP_LOW_SPEED_LIMIT", "1000")  # bytes/s; below it for 60 s is a stalled transfer
    env.setdefault("GIT_HTTP_LOW_SPEED_TIME", "60")
    env.update(extra or {})
    return env


@dataclass
class Git:
    """git, run in `cwd`."""

    cwd: Path
    env: dict[str, str] = field(default_factory=git_environment)

    def __call__(
        self, *args: str, timeout: float = LOCAL_TIMEOUT_S, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        command = ["git", "-c", "gc.auto=0", "-c", "maintenance.auto=false", *args]
        try:
            done = subprocess.run(
                command,
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except FileNotFoundError:
            raise GitError("the git program was not found on PATH; the git store runs git (install it)") from None
        except subprocess.TimeoutExpired:
            raise GitError(f"`git {args[0]}` gave no answer within {timeout:.0f} s") from None
        if check and done.returncode != 0:
            raise GitError(f"`git {args[0]}` failed: {first_error(done.stderr) or f'exit status {done.returncode}'}")
        return done

    def out(self, *args: str, timeout: float = LOCAL_TIMEOUT_S) -> str:
        """The stripped standard output of a command that must succeed."""
        return self(*args, timeout=timeout).stdout.strip()

    def ensure_identity(self) -> None:
        """Commits need an author: when git's configuration has none, the plugin's name is used."""
        if self("var", "GIT_COMMITTER_IDENT", check=False).returncode != 0:
            self.env.update(FALLBACK_IDENTITY)


def first_error(stderr: str) -> str:
    """The line of git's error output that says what went wrong, redacted, without 'fatal: '."""
    lines = [line.strip() for line in redact_text(stderr).splitlines() if line.strip()]
    for line in lines:
        for prefix in ("fatal: ", "error: "):
            if line.startswith(prefix):
                return line.removeprefix(prefix)
    return lines[0] if lines else ""
