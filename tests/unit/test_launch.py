"""The real-SGLang launch path: argv and environment built from a server config (docs/engines/sglang.md)."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest

from pytest_specperf.config.settings import ServerConfig, SpecperfConfig
from pytest_specperf.servers.launch import build_launch, gpu_pids, wait_for_gpu_release

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
        "/opt/sglang/bin/python", "-m", "sglang.launch_server",
        "--model-path", "moonshotai/Kimi-K2.5", "--host", "127.0.0.1", "--port", "31000",
        "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "org/draft",
        "--speculative-num-steps", "5", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "6",
        "--tp-size", "8",
    )  # fmt: skip
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
    given = ServerConfig(name="x", algorithm="EAGLE", num_steps=3, eagle_topk=1, num_draft_tokens=4,
                         args=("--max-running-requests", "32"))  # fmt: skip
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


def test_gpu_release_waits_for_the_driver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the first query still lists pid 4242, later ones do not: the driver freed its memory
    counter = tmp_path / "calls"
    fake_nvidia_smi(tmp_path, monkeypatch, f'n=$(cat {counter} 2>/dev/null || echo 0); echo $((n+1)) > {counter}\n'
                    f'[ "$n" -lt 1 ] && echo 4242; echo 77\n')  # fmt: skip
    assert gpu_pids() == {4242, 77}
    assert wait_for_gpu_release({4242}, timeout=30) is True
    assert int(counter.read_text()) >= 2


def test_gpu_release_gives_up_at_the_timeout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_nvidia_smi(tmp_path, monkeypatch, "echo 4242\n")
    assert wait_for_gpu_release({4242}, timeout=0) is False


def test_no_gpu_no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    assert gpu_pids() is None
    assert wait_for_gpu_release({1}, timeout=60) is True
