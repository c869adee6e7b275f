"""Stopping a server the way its engine stops itself, then making sure nothing is left.

SGLang's schedulers (one per tensor-parallel rank) install no SIGTERM handler: a SIGTERM to the
whole process group kills them at once, before the launcher can send them its shutdown request
and let them release their GPU memory in userspace, and a bare kill "can hold GPU memory for
minutes on a busy host" (SGLang's `terminate_and_kill_process_tree`). vLLM's API server, on
SIGTERM, terminates its engine core and workers itself. So both are stopped in the same order:
SIGTERM to the launcher process only, a wait of up to `stop_timeout` for it to exit (its own
shutdown stops its children), then SIGKILL to the group and every descendant seen before or
after the SIGTERM, then a bounded wait for the GPUs' memory.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
from dataclasses import dataclass, field

import psutil

from pytest_specperf.servers.gpus import GPU_RELEASE_TIMEOUT_S, GpuWatch

#: Seconds to wait for a SIGKILLed process to be gone (a process in uninterruptible sleep never is).
REAP_TIMEOUT_S = 10.0


@dataclass
class Teardown:
    """How stopping one server went: processes that would not die, and whether its GPUs were freed."""

    server: str
    stuck: list[str] = field(default_factory=list)  # "pid 123 (disk-sleep): python -m sglang..."
    gpu: str | None = None  # the GPU wait's outcome, or None when there was nothing to wait for
    gpu_released: bool = True
    #: the launcher exited on its own after the SIGTERM (its children were stopped by it, not killed)
    graceful: bool = True
    killed: int = 0  # processes still alive after the launcher's own shutdown, SIGKILLed

    @property
    def ok(self) -> bool:
        return not self.stuck and self.gpu_released

    def line(self) -> str:
        parts = [f"stopped {self.server}"]
        if not self.graceful:
            parts.append("it did not exit within stop_timeout after SIGTERM and was killed")
        if self.stuck:
            parts.append(f"{len(self.stuck)} process(es) did not exit after SIGKILL: {'; '.join(self.stuck)}")
        if self.gpu:
            parts.append(self.gpu)
        return ", ".join(parts)


def terminate_tree(
    pid: int, timeout: float, *, gpus: GpuWatch | None = None, server: str = "", gpu_timeout: float | None = None
) -> Teardown:
    """Stop a server started in its own process group: SIGTERM to the launcher `pid` alone, wait
    up to `timeout` for it to exit, then SIGKILL the group and every descendant, then wait until
    its GPUs are back to their memory use before the start. Every wait is bounded; what did not
    finish is in the result.

    The descendants are listed before and after the SIGTERM: once the launcher dies they are
    re-parented and can no longer be found from it.
    """
    result = Teardown(server or str(pid))
    tree = _tree(pid)
    root = tree.get(pid)
    if root is not None and _is_running(root):
        with contextlib.suppress(psutil.Error):
            root.send_signal(signal.SIGCONT)  # a stopped (hung, kill -STOP) launcher handles SIGTERM once resumed
            root.send_signal(signal.SIGTERM)
        tree.update(_tree(pid))
        _, alive = psutil.wait_procs([root], timeout=timeout)
        result.graceful = not alive
        if result.graceful:
            # the launcher's own shutdown stops its children; give them the rest of the time to go
            children = [p for p in tree.values() if p.pid != pid]
            psutil.wait_procs(children, timeout=min(timeout, 5.0))
    tree.update(_tree(pid))
    alive = [p for p in tree.values() if _is_running(p)]
    result.killed = len(alive)
    _signal_group(pid, signal.SIGCONT)  # a stopped process dies of SIGKILL either way; SIGCONT lets it be reaped
    _signal_group(pid, signal.SIGKILL)
    for proc in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    _, stuck = psutil.wait_procs(alive, timeout=REAP_TIMEOUT_S)
    result.stuck = [describe_process(p.pid) for p in stuck if _is_running(p)]
    if gpus is not None:
        result.gpu_released, result.gpu = gpus.wait_released(
            GPU_RELEASE_TIMEOUT_S if gpu_timeout is None else gpu_timeout
        )
    return result


def describe_process(pid: int) -> str:
    try:
        proc = psutil.Process(pid)
        return f"pid {pid} ({proc.status()}): {shlex.join(proc.cmdline())[:120]}"
    except psutil.Error:
        return f"pid {pid}"


def _tree(pid: int) -> dict[int, psutil.Process]:
    try:
        root = psutil.Process(pid)
        return {p.pid: p for p in [root, *root.children(recursive=True)]}
    except psutil.NoSuchProcess:
        return {}


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _is_running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def pid_alive(pid: int) -> bool:
    """True while the process exists and is not a zombie (a dead child nobody reaped yet)."""
    try:
        return _is_running(psutil.Process(pid))
    except psutil.NoSuchProcess:
        return False
