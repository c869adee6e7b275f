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
