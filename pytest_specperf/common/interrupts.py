"""SIGTERM as Ctrl-C for the commands that start servers (`specperf tune`, `specperf bisect`).

A cancelled CI job sends SIGTERM, whose default action ends the process at once: the `finally`
blocks that stop its servers would never run. Raised as KeyboardInterrupt instead, it unwinds like
Ctrl-C, and every server is stopped on the way out.

A signal that lands while the process forks (starting a server, its log relay) runs its handler
inside an at-fork hook, where Python prints the exception and drops it: the interrupt would be lost and
the command would go on measuring. So the handler also records it, and `check()` raises it again at the
next safe point. Ctrl-C (SIGINT) is recorded the same way wherever it still has Python's own handler: on
a busy machine a fork takes long enough for a Ctrl-C to land in it.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from typing import Any

_received: list[int] = []  # signals received within the block, raised or not


def raise_interrupt(signum: int, frame: Any) -> None:
    """The handler: record the signal, then unwind like Ctrl-C."""
    _received.append(signum)
    raise KeyboardInterrupt(f"signal {signum}")


def install() -> dict[int, Any] | None:
    """Make SIGTERM raise KeyboardInterrupt from now on, and record Ctrl-C where Python's own handler has
    it; the handlers replaced (None outside the main thread)."""
    _received.clear()
    previous: dict[int, Any] = {}
    try:
        previous[signal.SIGTERM] = signal.signal(signal.SIGTERM, raise_interrupt)
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # the same KeyboardInterrupt, recorded
            previous[signal.SIGINT] = signal.signal(signal.SIGINT, raise_interrupt)
    except ValueError:  # not the main thread: whoever embeds us handles signals
        return None
    return previous


def uninstall(previous: dict[int, Any] | None) -> None:
    """Put back the handlers `install` replaced (None: nothing was installed) and forget its signals."""
    _received.clear()
    for signum, handler in (previous or {}).items():
        with contextlib.suppress(ValueError):
            signal.signal(signum, handler)


def check() -> None:
    """Raise the KeyboardInterrupt of a signal received within the block, if it has not unwound it."""
    if _received:
        raise KeyboardInterrupt(f"signal {_received[-1]}")


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises KeyboardInterrupt and Ctrl-C is recorded; the previous handlers are
    restored after it.
    Outside the main thread (an embedding program handles signals) nothing changes."""
    previous = install()
    try:
        yield
    finally:
        uninstall(previous)
