"""SIGTERM as Ctrl-C for the commands that start servers (`specperf tune`, `specperf bisect`).

A cancelled CI job sends SIGTERM, whose default action ends the process at once: the `finally`
blocks that stop its servers would never run. Raised as KeyboardInterrupt instead, it unwinds like
Ctrl-C, and every server is stopped on the way out.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises KeyboardInterrupt; the previous handler is restored after it.
    Outside the main thread (an embedding program handles signals) nothing changes."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:
        previous = None
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
