"""Git as the tests drive it: one helper for every test that builds or reads a repository."""

from __future__ import annotations

import subprocess
from pathlib import Path


def git(cwd: Path, *args: str) -> str:
    """`git ARGS` in `cwd` with a throwaway identity; its stdout, stripped (a failure raises)."""
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()
