"""A Ctrl-C is never lost to a fork: a command that starts processes stops when it is told to.

A server is started with a preexec hook (the parent-death signal), so Python runs its at-fork hooks
around every start; a signal whose handler runs inside one of them is printed and dropped (on a busy
machine a fork is slow enough for that: `specperf bisect` once went on through its remaining starts
after a Ctrl-C). Here the Ctrl-C is made to land exactly there: an at-fork hook of the parent sends
it, during the third of a loop of starts made as the server pool makes them.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

STARTS = textwrap.dedent(
    """
    import os, signal, subprocess, sys
    from pytest_specperf.common import interrupts

    forks = []

    def ctrl_c_on_the_third_fork() -> None:  # runs in the parent, inside Python's at-fork hooks
        forks.append(1)
        if len(forks) == 3:
            os.kill(os.getpid(), signal.SIGINT)

    os.register_at_fork(after_in_parent=ctrl_c_on_the_third_fork)
    try:
        with interrupts.sigterm_as_interrupt():
            for _ in range(10):
                subprocess.Popen(["true"], preexec_fn=lambda: None).wait()
                interrupts.check()  # what the server pool does after each fork
    except KeyboardInterrupt:
        print(f"interrupted after {len(forks)} starts", flush=True)
        sys.exit(130)
    print(f"went on through {len(forks)} starts", flush=True)
    """
)


@pytest.mark.parametrize("handler", ["python's own", "none set"])
def test_a_ctrl_c_inside_an_at_fork_hook_stops_the_starts(handler: str) -> None:
    """With Python's own Ctrl-C handler (a command run from a terminal) the interrupt is raised after the
    third start; where SIGINT is left at its default the process ends at once, as the shell expects.
    Each is set first: a shell's background job (`pytest tests &`) ignores SIGINT, and its children with it."""
    own = handler == "python's own"
    disposition = "signal.default_int_handler" if own else "signal.SIG_DFL"
    script = f"import signal; signal.signal(signal.SIGINT, {disposition})\n" + STARTS
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    if own:
        assert (done.returncode, done.stdout) == (130, "interrupted after 3 starts\n"), done.stdout + done.stderr
    else:
        assert done.returncode == -signal.SIGINT, done.stdout + done.stderr
