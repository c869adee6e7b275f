"""The GPUs a server uses, and waiting for them to be free again after it stopped.

The driver frees a dead process's memory asynchronously, so "the process is gone" is not yet
"the GPUs are free": SGLang's own tests wait for the release before the next launch, and a start
made while memory is still held fails with out-of-memory.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

#: A device counts as released within this many MiB of its use before the start (other tenants drift).
GPU_RELEASE_SLACK_MIB = 1024
#: Seconds to wait for a stopped server's memory to come back.
GPU_RELEASE_TIMEOUT_S = 60.0
_POLL_S = 1.0


def gpu_memory_used() -> dict[int, int] | None:
    """MiB in use per GPU index on this host (`nvidia-smi`), or None where there is no NVIDIA GPU.

    Memory per device, not processes: inside a container the driver reports host pids, which
    match no pid the plugin knows, so a wait on pids returns at once.
    """
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=15,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    used = {}
    for line in out.splitlines():
        index, _, mib = (part.strip() for part in line.partition(","))
        if index.isdigit() and mib.isdigit():
            used[int(index)] = int(mib)
    return used or None


def visible_gpus(logical: Sequence[int], env: Mapping[str, str]) -> list[int]:
    """nvidia-smi indices of logical device ids, mapped through CUDA_VISIBLE_DEVICES (nvidia-smi
    ignores it and lists physical indices); [] where the mapping cannot be known (UUIDs, MIG)."""
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return list(logical)
    ids = [part.strip() for part in visible.split(",") if part.strip()]
    if not all(part.isdigit() for part in ids):
        return []
    return [int(ids[i]) for i in logical if i < len(ids)]


@dataclass
class GpuWatch:
    """The GPUs one server uses and their memory use before it started."""

    devices: list[int]
    before: dict[int, int]
    skipped: str | None = None  # why the release cannot be checked

    @classmethod
    def of(cls, logical: Sequence[int], env: Mapping[str, str]) -> GpuWatch | None:
        """None where there is no nvidia-smi (the simulator's machines)."""
        used = gpu_memory_used()
        if used is None:
            return None
        devices = [d for d in visible_gpus(logical, env) if d in used]
        if not devices:
            return cls([], {}, skipped="GPU release not checked: its devices are unknown (CUDA_VISIBLE_DEVICES)")
        return cls(devices, {d: used[d] for d in devices})

    def held(self) -> dict[int, int]:
        """MiB each device holds beyond its use before the start (only those above the slack)."""
        used = gpu_memory_used() or {}
        held = {d: used.get(d, 0) - self.before[d] for d in self.devices}
        return {d: mib for d, mib in held.items() if mib > GPU_RELEASE_SLACK_MIB}

    def wait_released(self, timeout: float) -> tuple[bool, str | None]:
        """Poll until every device is back within GPU_RELEASE_SLACK_MIB of its use before the start."""
        if self.skipped:
            return True, self.skipped
        started = time.monotonic()
        names = ",".join(map(str, self.devices))
        while True:
            held = self.held()
            elapsed = time.monotonic() - started
            if not held:
                return True, f"GPU {names} released after {elapsed:.1f} s"
            if elapsed >= timeout:
                excess = ", ".join(f"GPU {d} holds {mib} MiB more than before the start" for d, mib in held.items())
                return False, f"GPU {names} not released after {timeout:g} s: {excess}"
            time.sleep(_POLL_S)
