"""SIGTERM as Ctrl-C for the commands that start servers (`specperf tune`, `specperf bisect`).

A cancelled CI job sends SIGTERM, whose default action ends the process at once: the `finally`
blocks that stop its servers would never run. Raised as KeyboardInterrupt instead, it unwinds like
Ctrl-C, and every server is stopped on the way out.

A signal that lands while the process forks (starting a server) runs its handler inside an at-fork
hook, where Python prints the exception and drops it: the interrupt would be lost and the command
would go on. So the handler also records it, and `check()` raises it again at the next safe point.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from typing import Any

_received: list[int] = []  # SIGTERMs received within the block, raised or not


def raise_interrupt(signum: int, frame: Any) -> None:
    """The SIGTERM handler: record the signal, then unwind like Ctrl-C."""
    _received.append(signum)
    raise KeyboardInterrupt(f"signal {signum}")


def install() -> Any:
    """Make SIGTERM raise KeyboardInterrupt from now on; the previous handler (None outside the main thread)."""
    _received.clear()
    try:
        return signal.signal(signal.SIGTERM, raise_interrupt)
    except ValueError:  # not the main thread: whoever embeds us handles signals
        return None


def uninstall(previous: Any) -> None:
    """Put back the handler `install` replaced (None: nothing was installed) and forget its signals."""
    _received.clear()
    if previous is not None:
        with contextlib.suppress(ValueError):
            signal.signal(signal.SIGTERM, previous)


def check() -> None:
    """Raise the KeyboardInterrupt of a SIGTERM received within the block, if it has not unwound it."""
    if _received:
        raise KeyboardInterrupt(f"signal {_received[-1]}")


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises KeyboardInterrupt; the previous handler is restored after it.
    Outside the main thread (an embedding program handles signals) nothing changes."""
    previous = install()
    try:
        yield
    finally:
        uninstall(previous)
