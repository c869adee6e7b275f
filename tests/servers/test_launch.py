"""The real-SGLang launch path: argv and environment built from a server config (docs/engines/sglang.md)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_specperf.config.settings import ServerConfig, SpecperfConfig
from pytest_specperf.engines import engine_for
from pytest_specperf.servers import teardown as stopping
from pytest_specperf.servers.gpus import gpu_memory_used, visible_gpus
from pytest_specperf.servers.launch import LaunchPlan, ServerProcess, build_launch
from pytest_specperf.servers.teardown import Teardown

EAGLE = ServerConfig(
    name="eagle3-5step",
    algorithm="EAGLE3",
    draft_model="org/draft",
    num_steps=5,
    eagle_topk=1,
    num_draft_tokens=6,
    args=("--tp-size", "8"),
    env={"NCCL_ALGO": "Ring"},
)
CONFIG = SpecperfConfig(
    launcher="sglang", python="/opt/sglang/bin/python", model="moonshotai/Kimi-K2.5", env={"A": "1"}
)


def plan(server: ServerConfig = EAGLE, config: SpecperfConfig = CONFIG, tmp: Path = Path("/tmp"), **kw):
    return build_launch(server, config, run_dir=tmp / "run", port=31000, **kw)


def test_sglang_argv_follows_the_contract(tmp_path: Path) -> None:
    launch = plan(tmp=tmp_path)
    assert launch.argv == (
        "/opt/sglang/bin/python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "moonshotai/Kimi-K2.5",
        "--host",
        "127.0.0.1",
        "--port",
        "31000",
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        "org/draft",
        "--speculative-num-steps",
        "5",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "6",
        "--tp-size",
        "8",
    )
    assert launch.url == "http://127.0.0.1:31000"
    assert launch.env_overrides == {"A": "1", "NCCL_ALGO": "Ring"}  # the server's env wins over the global one
    assert launch.log_path == tmp_path / "run" / "eagle3-5step.log"


def test_a_plain_server_gets_no_speculative_flags(tmp_path: Path) -> None:
    argv = plan(ServerConfig(name="plain", args=("--tp-size", "8")), tmp=tmp_path).argv
    assert not [a for a in argv if a.startswith("--speculative")]


def test_high_concurrency_lifts_the_48_request_cap_of_speculative_servers(tmp_path: Path) -> None:
    assert "--max-running-requests" not in plan(tmp=tmp_path, max_concurrency=48).argv
    argv = plan(tmp=tmp_path, max_concurrency=64).argv
    assert argv[argv.index("--max-running-requests") + 1] == "64"
    plain = plan(ServerConfig(name="plain"), tmp=tmp_path, max_concurrency=64).argv
    assert "--max-running-requests" not in plain  # the cap only applies under speculation
    given = ServerConfig(
        name="x",
        algorithm="EAGLE",
        num_steps=3,
        eagle_topk=1,
        num_draft_tokens=4,
        args=("--max-running-requests", "32"),
    )
    assert plan(given, tmp=tmp_path, max_concurrency=64).argv.count("--max-running-requests") == 1


def test_cluster_command_template(tmp_path: Path) -> None:
    server = ServerConfig(
        name="big", host="10.1.2.3", command="srun -N2 --gres=gpu:8 {python} -m sglang.launch_server {args} --nnodes 2"
    )
    argv = plan(server, tmp=tmp_path).argv
    assert argv[:4] == ("srun", "-N2", "--gres=gpu:8", "/opt/sglang/bin/python")
    assert argv[-2:] == ("--nnodes", "2")
    assert argv[argv.index("--host") : argv.index("--host") + 2] == ("--host", "10.1.2.3")
    assert plan(server, tmp=tmp_path).url == "http://10.1.2.3:31000"


def test_the_simulator_gets_the_same_arguments(tmp_path: Path) -> None:
    sim = SpecperfConfig(**{**CONFIG.__dict__, "launcher": "sim", "sim_time_scale": 0.5})
    sglang_args = plan(tmp=tmp_path).argv[3:]
    argv = plan(config=sim, tmp=tmp_path).argv
    assert argv[1:3] == ("-m", "pytest_specperf.sim")
    assert argv[3 : 3 + len(sglang_args)] == sglang_args
    assert argv[3 + len(sglang_args) :] == ("--sim-time-scale", "0.5")


def test_suite_sim_args_come_before_a_servers_own(tmp_path: Path) -> None:
    jittery = SpecperfConfig(**{**CONFIG.__dict__, "launcher": "sim", "sim_args": ("--sim-run-jitter", "0.02")})
    server = ServerConfig(**{**EAGLE.__dict__, "sim_args": ("--sim-draft-slowdown", "8")})
    argv = plan(server, jittery, tmp_path).argv
    assert argv[-4:] == ("--sim-run-jitter", "0.02", "--sim-draft-slowdown", "8")


def test_the_api_key_is_passed_but_never_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECPERF_API_KEY", "sk-secret")
    launch = plan(tmp=tmp_path)
    assert launch.argv[-2:] == ("--api-key", "sk-secret")
    assert launch.api_key == "sk-secret"
    assert "sk-secret" not in launch.display_command and "sk-secret" not in repr(launch)
    assert shlex.split(launch.display_command)[-1] == "<redacted>"


def test_a_key_inside_a_quoted_command_template_is_hidden_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECPERF_API_KEY", "TOPSECRETKEY123")
    server = ServerConfig(name="c", command='srun bash -c "{python} -m sglang.launch_server {args}"')
    launch = plan(server, tmp=tmp_path)
    assert "TOPSECRETKEY123" in " ".join(launch.argv)
    assert "TOPSECRETKEY123" not in launch.display_command
    assert launch.redact("ServerArgs(api_key='TOPSECRETKEY123')") == "ServerArgs(api_key='<redacted>')"


def test_each_start_gets_its_own_log_file(tmp_path: Path) -> None:
    first, second = plan(tmp=tmp_path), plan(tmp=tmp_path)
    assert (first.log_path.name, second.log_path.name) == ("eagle3-5step.log", "eagle3-5step~2.log")


def fake_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "nvidia-smi"
    tool.write_text("#!/bin/sh\n" + script)
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


GPU_MEMORY = """\
mem=$(cat "{file}")
n=$(cat "{file}.calls" 2>/dev/null || echo 0); echo $((n+1)) > "{file}.calls"
case "$*" in
  *--query-compute-apps*) echo 987654 ;;  # host pids, as the driver reports them inside a container
  *) i=0; for m in $mem; do echo "$i, $m"; i=$((i+1)); done ;;
esac
"""


def gpu_memory_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, used: str) -> Path:
    """A fake nvidia-smi whose `memory.used` per GPU (MiB, space-separated) the test writes to a file."""
    file = tmp_path / "memory"
    file.write_text(used)
    fake_nvidia_smi(tmp_path, monkeypatch, GPU_MEMORY.format(file=file))
    return file


def test_gpu_memory_is_read_per_device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gpu_memory_file(tmp_path, monkeypatch, "1000 500 0")
    assert gpu_memory_used() == {0: 1000, 1: 500, 2: 0}


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        ((), {}, [0]),
        (("--tp-size", "4"), {}, [0, 1, 2, 3]),
        (("--tp-size=2", "--base-gpu-id", "2"), {}, [2, 3]),
        (("--tp-size", "2"), {"CUDA_VISIBLE_DEVICES": "6,7"}, [6, 7]),
        (("--tp-size", "2", "--pp-size", "2"), {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}, [4, 5, 6, 7]),
        (("--tp-size", "2"), {"CUDA_VISIBLE_DEVICES": "GPU-1a2b,GPU-3c4d"}, []),
        (("--tp-size", "8", "--dp-size", "2"), {}, list(range(16))),
        (("--tp-size", "8", "--dp-size", "8", "--enable-dp-attention"), {}, list(range(8))),  # DP inside TP
        (("--tp-size", "8", "--attn-dp-size", "8"), {}, list(range(8))),
        (("--tp-size", "16", "--nnodes", "2", "--node-rank", "1"), {}, list(range(8))),  # this node's share
        (("--tp-size", "2", "--base-gpu-id", "1", "--gpu-id-step", "2"), {}, [1, 3]),
    ],
)
def test_the_devices_an_sglang_server_uses(args: tuple[str, ...], env: dict[str, str], expected: list[int]) -> None:
    argv = ["python", "-m", "sglang.launch_server", *args]
    assert visible_gpus(engine_for("sglang").local_gpu_ids(argv), env) == expected


@pytest.mark.parametrize(
    ("args", "count", "local"),
    [
        (("--tp-size", "8"), 8, 8),
        (("--tp-size", "8", "--dp-size", "2"), 16, 16),
        (("--tp-size", "8", "--dp-size", "8", "--enable-dp-attention"), 8, 8),
        (("--tp-size", "8", "--attn-dp-size", "8"), 8, 8),
        (("--tp-size", "8", "--pp-size", "2", "--nnodes", "2"), 16, 8),
    ],
)
def test_an_sglang_gpu_count_understands_dp_attention(args: tuple[str, ...], count: int, local: int) -> None:
    engine = engine_for("sglang")
    assert (engine.gpu_count(args), len(engine.local_gpu_ids(args))) == (count, local)


def _sleeper(tmp_path: Path, args: tuple[str, ...] = ("--tp-size", "2"), **env: str) -> ServerProcess:
    """A 'server' (a sleeping Python) launched like SGLang, so its devices come from its argv."""
    launch = LaunchPlan(
        server="big",
        argv=(sys.executable, "-c", "import time; time.sleep(600)", *args),
        env_overrides=env,
        host="127.0.0.1",
        port=1,
        log_path=tmp_path / "big.log",
        startup_timeout=10,
    )
    return ServerProcess(launch, parent_death_signal=True)


def test_teardown_waits_for_the_devices_memory_not_for_pids(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside a container nvidia-smi reports host pids: a wait on pids ends at once while 70 GB are still held."""
    memory = gpu_memory_file(tmp_path, monkeypatch, "500 500 9000")
    proc = _sleeper(tmp_path)
    proc.start()
    memory.write_text("70000 70000 9000")  # loaded; GPU 2 belongs to somebody else
    calls = tmp_path / "memory.calls"
    script = GPU_MEMORY.format(file=memory).replace(
        f'mem=$(cat "{memory}")',
        f'mem=$(cat "{memory}"); [ "$(cat {calls})" -ge 3 ] && mem="600 520 30000"',
    )
    (tmp_path / "bin" / "nvidia-smi").write_text("#!/bin/sh\n" + script)
    result = proc.stop(timeout=5)
    assert result.ok and result.gpu is not None and result.gpu.startswith("GPU 0,1 released after"), result
    assert int(calls.read_text()) >= 4  # it polled until the memory came back, not until the pids were gone


def test_teardown_reports_memory_that_is_never_released(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    memory = gpu_memory_file(tmp_path, monkeypatch, "500 500")
    monkeypatch.setattr(stopping, "GPU_RELEASE_TIMEOUT_S", 0.0)
    proc = _sleeper(tmp_path)
    proc.start()
    memory.write_text("70000 500")
    result = proc.stop(timeout=5)
    assert not result.ok
    assert "GPU 0,1 not released after 0 s: GPU 0 holds 69500 MiB more than before the start" in result.line()


def test_no_gpu_no_wait(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    assert gpu_memory_used() is None
    proc = _sleeper(tmp_path)
    proc.start()
    assert proc.stop(timeout=5) == Teardown("big")


def test_a_process_that_will_not_be_reaped_is_reported_not_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process in uninterruptible sleep survives SIGKILL: an unbounded wait would hang the night."""
    monkeypatch.setenv("PATH", "/nonexistent")
    proc = _sleeper(tmp_path)
    proc.start()
    real_wait = subprocess.Popen.wait

    def stuck_wait(self: subprocess.Popen[bytes], timeout: float | None = None) -> int:
        if timeout is None:
            raise AssertionError("an unbounded wait in teardown")
        raise subprocess.TimeoutExpired(self.args, timeout)

    monkeypatch.setattr(subprocess.Popen, "wait", stuck_wait)
    result = proc.stop(timeout=5)
    monkeypatch.setattr(subprocess.Popen, "wait", real_wait)
    assert proc.proc is not None
    proc.proc.wait(timeout=10)
    assert not result.ok and result.stuck == [f"pid {proc.pid}"]


def test_progress_line_keeps_the_speculative_flags_of_a_long_command() -> None:
    from pytest_specperf.servers.launch import progress_line

    command = (
        "# specperf: /very/long/path/to/a/virtualenv/bin/python3 -m sglang.launch_server --model-path "
        "moonshotai/Kimi-K2.5 --host 127.0.0.1 --port 31234 --speculative-algorithm EAGLE3 "
        "--speculative-draft-model-path lightseekorg/kimi-k2.5-eagle3 --speculative-num-steps 5 "
        "--speculative-eagle-topk 1 --speculative-num-draft-tokens 6 --tp-size 8 --mem-fraction-static 0.85 "
        "--cuda-graph-max-bs-decode 48 --max-running-requests 48 --api-key <redacted>"
    )
    line = progress_line(command)
    for flag in (
        "--speculative-algorithm EAGLE3",
        "--speculative-num-steps 5",
        "--speculative-eagle-topk 1",
        "--speculative-num-draft-tokens 6",
        "--model-path moonshotai/Kimi-K2.5",
    ):
        assert flag in line, line
    assert len(line) < len(command)
    assert progress_line("Loading weights: 45%") == "Loading weights: 45%"
    long_plain = "x" * 300
    assert progress_line(long_plain).startswith("…") and len(progress_line(long_plain)) <= 121


def test_a_long_start_shows_its_newest_milestone_not_the_launch_echo(tmp_path: Path) -> None:
    """A 20-minute start must not be silent, nor show SGLang's `server_args=` echo as its progress."""
    log = tmp_path / "eagle.log"
    log.write_text(
        "# specperf: python -m sglang.launch_server --model-path m\n"
        "[2026-12-01 01:00:00] server_args={'model_path': 'm', 'api_key': 'sk-live-0123456789abcdef'}\n"
        "[2026-12-01 01:00:05 TP0] Load weight begin. avail mem=78.10 GB\n"
        "[2026-12-01 01:09:40 TP0] Load weight end. type=DeepseekV3ForCausalLM, avail mem=12.31 GB\n"
        "[2026-12-01 01:09:41 TP0] Capture cuda graph begin. This can take up to several minutes. bs=[1, 2, 4]\n"
        "[2026-12-01 01:09:41 TP3] Using 1 CUDA streams\n"
        "[2026-12-01 01:09:42] server_args={'model_path': 'm', 'dist_timeout': None}\n"
    )
    process = ServerProcess(
        LaunchPlan(
            server="eagle",
            argv=("python",),
            env_overrides={},
            host="127.0.0.1",
            port=1,
            log_path=log,
            startup_timeout=1,
        )
    )
    assert process.last_log_line() == (
        "[2026-12-01 01:09:41 TP0] Capture cuda graph begin. This can take up to several minutes. bs=[1, 2, 4]"
    )
    log.write_text("# specperf: python -m sglang.launch_server\nDownloading shards: 40%\n")
    assert process.last_log_line() == "Downloading shards: 40%"


def test_the_default_startup_timeout_is_an_hour() -> None:
    """SGLang's own CI allows 3600 s on H200: download, DeepGEMM compilation, CUDA-graph capture, warmup."""
    assert SpecperfConfig().startup_timeout == 3600.0
    assert plan(ServerConfig(name="plain")).startup_timeout == 3600.0


def test_a_dry_run_hands_the_installed_flags_to_the_simulator(tmp_path: Path) -> None:
    from pytest_specperf.engines.flags import EngineFlags

    flags = EngineFlags(
        "sglang",
        "0.6.0",
        "installed",
        {"--model-path": "--model-path", "--new-flag": "--new-flag"},
        algorithms=("EAGLE3", "SUPERDRAFT"),
    )
    config = SpecperfConfig(launcher="sim", model="m", engine_flags={"sglang": flags})
    argv = build_launch(ServerConfig(name="plain"), config, run_dir=tmp_path, port=31000).argv
    path = Path(argv[argv.index("--sim-sglang-flags") + 1])
    assert "# algorithms: EAGLE3 SUPERDRAFT" in path.read_text() and "--new-flag" in path.read_text()
    shipped = SpecperfConfig(launcher="sim", model="m")
    assert "--sim-sglang-flags" not in build_launch(ServerConfig(name="p"), shipped, run_dir=tmp_path, port=1).argv
