"""What the engine-facing machinery costs: asking the installed engine for its flags, and a graceful stop.

(a) Flag check at collection: the configured interpreter is asked for its engine's own argparse parser.
    A cold ask (nothing cached) imports the engine (torch included); a warm one only asks the engine's
    version and reads the cached dump. Measured for SGLang's stand-in-free case (`python3`, which has
    no SGLang: the shipped list stands in) and, with ``SPECPERF_VLLM_PYTHON``, for a real vLLM.
(b) A stop in the engine's order (SIGTERM to the launcher, its own shutdown, then SIGKILL of what is
    left): seconds until no process of the server is left, and whether the launcher exited on its own.
    Measured on the simulator and, with ``SPECPERF_VLLM_PYTHON`` (and the lane's tiny models), on vLLM.

Run: ``python benchmarks/engine_costs.py`` (``SPECPERF_VLLM_PYTHON=$(bash .ci/vllm-venv | tail -n1)``
adds vLLM; ``SPECPERF_VLLM_MODELS`` as in tests/vllm).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pytest_specperf.config.settings import ServerConfig, SpecperfConfig
from pytest_specperf.engines import engine_for
from pytest_specperf.engines import flags as engine_flags
from pytest_specperf.servers.launch import ServerProcess, build_launch


def probe(engine: str, python: str) -> None:
    with tempfile.TemporaryDirectory() as cache:
        os.environ[engine_flags.CACHE_ENV] = cache
        for label in ("cold", "warm"):
            engine_flags._installed_flags.cache_clear()  # the in-process cache would hide the cost
            started = time.perf_counter()
            found = engine_for(engine).flags(python, {})
            elapsed = time.perf_counter() - started
            where = f"{found.source} {found.version}, {len(found.options)} options"
            print(f"(a) {engine:6} {label}: {elapsed:6.2f} s, {where}")


def stop(name: str, config: SpecperfConfig, server: ServerConfig) -> None:
    with tempfile.TemporaryDirectory() as run_dir:
        process = ServerProcess(build_launch(server, config, run_dir=Path(run_dir)))
        process.start()
        ready = process.wait_ready()
        started = time.perf_counter()
        teardown = process.stop(timeout=config.stop_timeout)
        print(
            f"(b) {name:6} ready after {ready:5.1f} s; stopped in {time.perf_counter() - started:5.2f} s, "
            f"launcher exited on its own: {teardown.graceful}, killed after it: {teardown.killed}"
        )


def main() -> int:
    probe("sglang", "python3")
    vllm = os.environ.get("SPECPERF_VLLM_PYTHON")
    if vllm:
        probe("vllm", vllm)
    sim = SpecperfConfig(launcher="sim", model="sim/m", sim_time_scale=0.0, stop_timeout=20)
    stop("sim", sim, ServerConfig(name="plain"))
    if vllm:
        sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
        import vllm_models

        root = Path(os.environ.get("SPECPERF_VLLM_MODELS", Path.home() / ".cache/pytest-specperf/vllm-models"))
        if not vllm_models.is_built(root):
            subprocess.run([vllm, vllm_models.__file__, str(root)], check=True, cwd="/")
        config = SpecperfConfig(
            engine="vllm",
            launcher="vllm",
            python=vllm,
            model=str(vllm_models.model_paths(root)["target"]),
            stop_timeout=20,
            startup_timeout=300,
            env={"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_HOST_IP": "127.0.0.1"},
        )
        stop("vllm", config, ServerConfig(name="plain", engine="vllm", args=("--enforce-eager",)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
