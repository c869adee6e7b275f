"""A SIGTERM whose KeyboardInterrupt was swallowed (it landed in an at-fork hook, where Python drops
exceptions) is raised again at the next safe point, and forgotten once the handler is put back."""

from __future__ import annotations

import contextlib
import signal
import threading

import pytest

from pytest_specperf.common import interrupts


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals: main thread only")
def test_a_swallowed_sigterm_is_raised_again_by_check() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with interrupts.sigterm_as_interrupt():
        assert signal.getsignal(signal.SIGTERM) is interrupts.raise_interrupt
        interrupts.check()  # nothing received: nothing raised
        with contextlib.suppress(KeyboardInterrupt):  # what an at-fork hook does with it
            interrupts.raise_interrupt(signal.SIGTERM, None)
        with pytest.raises(KeyboardInterrupt, match="signal 15"):
            interrupts.check()
    assert signal.getsignal(signal.SIGTERM) == before
    interrupts.check()  # forgotten with the handler


def test_a_swallowed_ctrl_c_is_raised_again_by_check() -> None:
    """A Ctrl-C that lands while a server's process forks is printed and dropped by the at-fork hook, as
    a SIGTERM is; recorded, it is raised at the next safe point instead of the command measuring on (a
    busy machine once let `specperf bisect` run through eight more starts after a Ctrl-C)."""
    outer = signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own, as in a command
    try:
        with interrupts.sigterm_as_interrupt():
            assert signal.getsignal(signal.SIGINT) is interrupts.raise_interrupt
            with contextlib.suppress(KeyboardInterrupt):  # what an at-fork hook does with it
                interrupts.raise_interrupt(signal.SIGINT, None)
            with pytest.raises(KeyboardInterrupt, match="signal 2"):
                interrupts.check()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, outer)


def test_a_ctrl_c_handler_of_someone_else_is_left_alone() -> None:
    outer = signal.signal(signal.SIGINT, signal.SIG_IGN)  # e.g. a worker that ignores Ctrl-C
    try:
        with interrupts.sigterm_as_interrupt():
            assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, outer)
