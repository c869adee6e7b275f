"""Fingerprints: capture from realistic server answers, redaction, diffs, summary."""

from __future__ import annotations

import json
import platform

import pytest

import pytest_specperf
from pytest_specperf.common.redact import REDACTED
from pytest_specperf.config.settings import DEFAULT_ENV_PATTERNS
from pytest_specperf.measure.fingerprint import Fingerprint, LocalGpus, capture, normalize_args
from pytest_specperf.verdict.drift import Change, diff

HF_TOKEN = "hf_abcdefghijklmnopqrstuvwxyz0123456789"

LAUNCH = {
    "launcher": "sglang",
    "model": "moonshotai/Kimi-K2.5",
    "draft_model": "org/kimi-k2.5-eagle3",
    "algorithm": "EAGLE3",
    "num_steps": 5,
    "eagle_topk": 1,
    "num_draft_tokens": 6,
    "args": ["--tp-size", "8", "--mem-fraction-static=0.8"],
    "tp_size": 8,
    "workload_hash": "3f2a9c",
    "sim_profile": None,
}

SERVER_INFO = {
    "model_path": "moonshotai/Kimi-K2.5",
    "tp_size": 8,
    "speculative_algorithm": "EAGLE3",
    "speculative_num_steps": 5,
    "speculative_eagle_topk": 1,
    "speculative_num_draft_tokens": 6,
    "max_running_requests": 48,
    "attention_backend": "fa3",
    "cuda_graph_config": {"max_bs_decode": 48},
    "api_key": "sk-123",
    "admin_api_key": "adm-secret-777",
    "version": "0.5.23",
    "launch_command": (
        "python3 -m sglang.launch_server --model-path moonshotai/Kimi-K2.5 --host 127.0.0.1 "
        "--port 31234 --api-key sk-123 --admin-api-key=adm-secret-777 --tp-size 8"
    ),
    "internal_states": [{"avg_spec_accept_length": 2.1, "env_vars": {"SGLANG_ENABLE_JIT_DEEPGEMM": "0"}}],
}

LOADS = {"version": "0.5.23", "accelerator": "NVIDIA H200", "num_accelerators": 8, "loads": []}

SERVER_ENV = {
    "NCCL_ALGO": "Ring",
    "NCCL_MIN_NCHANNELS": "16",
    "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7",
    "HF_TOKEN": HF_TOKEN,
    "SGLANG_API_KEY": "sk-123",
    "PATH": "/usr/bin",
    "HOME": "/root",
}


def no_gpus() -> LocalGpus | None:
    return None


def take(**overrides: object) -> Fingerprint:
    kwargs: dict = {
        "launch_identity": LAUNCH,
        "server_info": SERVER_INFO,
        "loads": LOADS,
        "server_env": SERVER_ENV,
        "gpu_probe": no_gpus,
    }
    kwargs.update(overrides)
    return capture(**kwargs)


# --- capture --------------------------------------------------------------------------------


def test_capture_identity_from_launch_and_loads() -> None:
    fp = take()
    assert fp.identity == {
        "launcher": "sglang",
        "model": "moonshotai/Kimi-K2.5",
        "draft_model": "org/kimi-k2.5-eagle3",
        "algorithm": "EAGLE3",
        "num_steps": "5",
        "eagle_topk": "1",
        "num_draft_tokens": "6",
        "args": "--mem-fraction-static 0.8 --tp-size 8",
        "tp_size": "8",
        "workload_hash": "3f2a9c",
        "gpu": "NVIDIA H200",
        "gpu_count": "8",
    }


def test_capture_environment_versions_settings_and_env() -> None:
    env = take().environment
    assert env["sglang.version"] == "0.5.23"
    assert env["python.version"] == platform.python_version()
    assert env["specperf.version"] == pytest_specperf.__version__
    assert env["server.max_running_requests"] == "48"
    assert env["server.cuda_graph_config.max_bs_decode"] == "48"  # one entry per leaf of a nested setting
    assert env["NCCL_ALGO"] == "Ring"
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    assert env["SGLANG_ENABLE_JIT_DEEPGEMM"] == "0"  # reported by the server itself
    assert "PATH" not in env and "HOME" not in env and "HF_TOKEN" not in env


def test_launch_command_is_recorded_per_flag_redacted_and_stable_across_ports() -> None:
    env = take().environment
    flags = {k: v for k, v in env.items() if k.startswith("server.flag ")}
    assert flags == {
        "server.flag --model-path": "moonshotai/Kimi-K2.5",
        "server.flag --api-key": "<redacted>",
        "server.flag --admin-api-key": "<redacted>",
        "server.flag --tp-size": "8",
    }
    other_port = {**SERVER_INFO, "launch_command": SERVER_INFO["launch_command"].replace("31234", "40001")}
    other_python = {
        **SERVER_INFO,
        "launch_command": SERVER_INFO["launch_command"].replace("python3", "/venv/bin/python"),
    }
    other_start = {**SERVER_INFO, "launch_command": SERVER_INFO["launch_command"] + " --sim-start-seed 7"}
    for info in (other_port, other_python, other_start):
        assert {k: v for k, v in take(server_info=info).environment.items() if k.startswith("server.flag ")} == flags


def test_no_secret_reaches_the_serialised_fingerprint() -> None:
    info = {**SERVER_INFO, "launch_command": SERVER_INFO["launch_command"].split()}  # argv as a list
    launch = {**LAUNCH, "args": ["--api-key", "sk-123", "--tp-size", "8"]}
    env = {**SERVER_ENV, "SGLANG_HF_TOKEN": HF_TOKEN, "NCCL_SOCKET_PASSWORD": "pw-999"}
    fp = take(server_info=info, launch_identity=launch, server_env=env)
    text = json.dumps(fp.to_dict())
    for secret in ("sk-123", "adm-secret-777", HF_TOKEN, "pw-999"):
        assert secret not in text
    assert fp.environment["SGLANG_API_KEY"] == REDACTED
    assert fp.environment["SGLANG_HF_TOKEN"] == REDACTED


def test_env_patterns_are_configurable() -> None:
    env = {"NCCL_ALGO": "Ring", "MY_TUNING": "1", "OMP_NUM_THREADS": "4"}
    fp = take(server_env=env, env_patterns=["MY_*"])
    assert fp.environment["MY_TUNING"] == "1"
    assert "NCCL_ALGO" not in fp.environment and "OMP_NUM_THREADS" not in fp.environment
    assert "OMP_*" in DEFAULT_ENV_PATTERNS


def test_a_vllm_servers_variables_are_recorded_by_default() -> None:
    env = {"VLLM_CPU_KVCACHE_SPACE": "4", "VLLM_ATTENTION_BACKEND": "FLASH_ATTN", "VLLM_API_KEY": "sk-x"}
    fp = take(server_env=env)
    assert fp.environment["VLLM_CPU_KVCACHE_SPACE"] == "4"
    assert fp.environment["VLLM_ATTENTION_BACKEND"] == "FLASH_ATTN"
    assert fp.environment["VLLM_API_KEY"] == REDACTED


def test_simulator_marker_wins_and_records_profile() -> None:
    info = {
        **SERVER_INFO,
        "simulator": {"profile": "kimi-k2.5-h200", "time_scale": 0.01, "seed": 7, "faults": {}},
    }
    fp = take(server_info=info, launch_identity={**LAUNCH, "launcher": "sglang"})
    assert fp.identity["launcher"] == "sim"
    assert fp.identity["sim_profile"] == "kimi-k2.5-h200"
    assert fp.identity["sim_time_scale"] == "0.01"
    assert fp.environment["sim.seed"] == "7"
    assert "sim.faults" not in fp.environment


def test_sim_profile_from_launch_identity_without_marker() -> None:
    fp = take(server_info=None, loads=None, launch_identity={**LAUNCH, "launcher": "sim", "sim_profile": "p1"})
    assert fp.identity["sim_profile"] == "p1"
    assert fp.identity["sim_time_scale"] == "unset"
    assert fp.environment["sglang.version"] == "unset"


def test_sglang_identity_has_no_sim_keys() -> None:
    assert not any(k.startswith("sim") for k in take().identity)


def test_none_values_become_unset() -> None:
    launch = {**LAUNCH, "draft_model": None, "algorithm": None, "num_steps": None, "args": []}
    fp = take(launch_identity=launch, server_info=None)
    assert fp.identity["draft_model"] == "unset"
    assert fp.identity["algorithm"] == "unset"
    assert fp.identity["num_steps"] == "unset"
    assert fp.identity["args"] == "unset"


def test_unset_launch_values_are_read_back_from_server_info() -> None:
    """A server attached by URL: the config knows nothing, the server knows its own args."""
    launch = {"launcher": "sglang", "workload_hash": "w1"}
    fp = take(launch_identity=launch)
    assert fp.identity["model"] == "moonshotai/Kimi-K2.5"
    assert fp.identity["num_draft_tokens"] == "6"
    assert fp.identity["tp_size"] == "8"


def test_gpu_falls_back_to_local_probe() -> None:
    gpus = LocalGpus(name="NVIDIA H100 80GB HBM3", count=8, driver="550.54", cuda="12.4")
    fp = take(loads=None, gpu_probe=lambda: gpus, server_env={"CUDA_VISIBLE_DEVICES": "0,1"})
    assert fp.identity["gpu"] == "NVIDIA H100 80GB HBM3"
    assert fp.identity["gpu_count"] == "2"
    assert fp.environment["gpu.driver"] == "550.54"
    assert fp.environment["gpu.cuda"] == "12.4"


def test_gpu_unknown_without_loads_or_probe() -> None:
    def forbidden() -> LocalGpus | None:
        raise AssertionError("a remote server must not be probed locally")

    fp = take(loads=None, local=False, gpu_probe=forbidden)
    assert (fp.identity["gpu"], fp.identity["gpu_count"]) == ("unknown", "unknown")
    assert "gpu.driver" not in fp.environment


def test_args_order_and_equals_form_do_not_change_identity() -> None:
    a = take(launch_identity={**LAUNCH, "args": ["--tp-size", "8", "--mem-fraction-static=0.8"]})
    b = take(launch_identity={**LAUNCH, "args": ["--mem-fraction-static", "0.8", "--tp-size=8"]})
    assert a.identity["args"] == b.identity["args"]


def test_normalize_args_keeps_negative_numbers_as_values() -> None:
    assert normalize_args(["--x", "-1", "--a"]) == "--a --x -1"


# --- redaction of a fingerprint (the rules themselves: test_redact.py) -----------------------


def test_redacted_is_idempotent() -> None:
    fp = take()
    assert fp.redacted() == fp


# --- serialisation and summary ----------------------------------------------------------------


def test_round_trip() -> None:
    fp = take()
    data = json.loads(json.dumps(fp.to_dict()))
    assert Fingerprint.from_dict(data) == fp
    assert list(data["identity"]) == sorted(data["identity"])


@pytest.mark.parametrize("data", [None, [], {"identity": {}}, {"identity": [], "environment": {}}])
def test_from_dict_rejects_malformed(data: object) -> None:
    with pytest.raises(ValueError, match="fingerprint"):
        Fingerprint.from_dict(data)  # type: ignore[arg-type]


def test_values_are_normalised_to_strings() -> None:
    fp = Fingerprint(identity={"num_steps": 5, "x": None, "flag": True}, environment={})
    assert fp.identity == {"num_steps": "5", "x": "unset", "flag": "true"}


def test_summary() -> None:
    assert take().summary() == "NVIDIA H200 x8, sglang 0.5.23, launcher sglang"
    sim = take(
        loads=None,
        server_info={"version": "0.5.23-sim", "simulator": {"profile": "kimi"}},
    )
    assert sim.summary() == "GPU unknown, sglang 0.5.23-sim, launcher sim (profile kimi)"


@pytest.mark.parametrize(
    ("info", "args"),
    [({"device": "cpu"}, ""), ({}, "--device cpu"), ({"version": "0.32.0+cpu"}, "")],
    ids=["reported", "flag", "cpu build"],
)
def test_a_cpu_server_is_fingerprinted_by_its_cpu_not_as_an_unknown_gpu(info: dict, args: str) -> None:
    from pytest_specperf.measure.fingerprint import local_cpu_model

    fp = take(
        launch_identity={**LAUNCH, "args": args},
        server_info={**SERVER_INFO, **info},
        loads={"accelerator": None, "num_accelerators": 1},
    )
    assert fp.identity["device"] == "cpu"
    assert fp.identity["cpu"] == local_cpu_model() != "unknown"
    assert "gpu" not in fp.identity and "gpu_count" not in fp.identity
    assert fp.summary().startswith(f"CPU {local_cpu_model()} ({fp.identity['cpu_count']} cores), sglang ")


def test_a_gpu_server_carries_no_device_key_so_older_baselines_stay_comparable() -> None:
    fp = take(server_info={**SERVER_INFO, "device": "cuda"})
    assert "device" not in fp.identity and fp.identity["gpu"] == "NVIDIA H200"


# --- diff -----------------------------------------------------------------------------------


def test_diff_identical_is_empty_and_comparable() -> None:
    d = diff(take(), take())
    assert d.comparable and not d and d.describe() == ""


def test_diff_environment_only_is_comparable_and_shows_unset() -> None:
    """The phantom baseline: NCCL tuning lost on restart must show, not hide."""
    baseline = take()
    env = {k: v for k, v in SERVER_ENV.items() if not k.startswith("NCCL_")}
    current = take(server_env={**env, "NCCL_NVLS_ENABLE": "0"})
    d = diff(baseline, current)
    assert d.comparable
    assert d.identity == []
    assert d.environment == [
        Change("NCCL_ALGO", "Ring", "unset"),
        Change("NCCL_MIN_NCHANNELS", "16", "unset"),
        Change("NCCL_NVLS_ENABLE", "unset", "0"),
    ]
    assert str(d.environment[0]) == "NCCL_ALGO: Ring → unset"
    assert d.describe().splitlines() == [
        "NCCL_ALGO: Ring → unset",
        "NCCL_MIN_NCHANNELS: 16 → unset",
        "NCCL_NVLS_ENABLE: unset → 0",
    ]


def test_diff_identity_change_is_incomparable() -> None:
    baseline = take()
    current = take(
        loads={**LOADS, "accelerator": "NVIDIA H100"},
        server_info={**SERVER_INFO, "version": "0.5.24"},
    )
    d = diff(baseline, current)
    assert not d.comparable
    assert d.identity == [Change("gpu", "NVIDIA H200", "NVIDIA H100")]
    assert d.environment == [Change("sglang.version", "0.5.23", "0.5.24")]
    assert d.describe().splitlines() == [
        "gpu: NVIDIA H200 → NVIDIA H100 (not comparable)",
        "sglang.version: 0.5.23 → 0.5.24",
    ]


def test_diff_sglang_to_sim_is_incomparable() -> None:
    sim_info = {**SERVER_INFO, "simulator": {"profile": "kimi"}}
    d = diff(take(), take(server_info=sim_info))
    assert not d.comparable
    names = [c.name for c in d.identity]
    assert names == ["launcher", "sim_profile"]  # an absent key and "unset" are the same
    assert str(d.identity[1]) == "sim_profile: unset → kimi"


# --- a speedup's two servers -----------------------------------------------------------------


def test_a_speedups_servers_differ_besides_speculation() -> None:
    from pytest_specperf.verdict.drift import speedup_differences

    reference = take(
        launch_identity={
            **LAUNCH,
            "algorithm": None,
            "draft_model": None,
            "num_steps": None,
            "eagle_topk": None,
            "num_draft_tokens": None,
        },
        server_info={
            **SERVER_INFO,
            "attention_backend": "torch_native",
            "speculative_algorithm": None,
            "launch_command": "--model-path m --attention-backend torch_native --tp-size 8",
        },
        server_env={**SERVER_ENV, "NCCL_ALGO": "Tree"},
    )
    speculative = take(
        server_info={
            **SERVER_INFO,
            "attention_backend": "intel_amx",
            "max_running_requests": 48,
            "launch_command": "--model-path m --attention-backend intel_amx --tp-size 8 "
            "--speculative-algorithm EAGLE3 --max-running-requests 48",
        },
    )
    names = {c.name: (c.old, c.new) for c in speedup_differences(reference, speculative)}
    assert names == {"server.attention_backend": ("torch_native", "intel_amx"), "NCCL_ALGO": ("Tree", "Ring")}
    assert speedup_differences(speculative, speculative) == []
    assert speedup_differences(None, speculative) == []


def _asked_and_ran(asked: str | None, ran: str, *, reported_command: bool) -> Fingerprint:
    """A speculative server asked for backend `asked` (None: not asked) that ran `ran`."""
    flag = f" --attention-backend {asked}" if asked else ""
    info = {**SERVER_INFO, "attention_backend": ran}
    if reported_command:  # the simulator reports its launch command; real SGLang 0.5.23 does not
        info["launch_command"] = f"--model-path m --tp-size 8{flag}"
    else:
        info.pop("launch_command", None)
    args = f"--mem-fraction-static 0.8 --tp-size 8{flag}"
    return take(launch_identity={**LAUNCH, "args": args}, server_info=info)


@pytest.mark.parametrize("reported_command", [True, False], ids=["command reported", "command not reported"])
def test_a_flag_the_server_did_not_act_on_is_no_difference(reported_command: bool) -> None:
    """Real SGLang on a CPU: the reference asked for no backend, the speculative server for intel_amx, and
    both ran torch_native (the fallback). What ran is alike: no `*`, no warning."""
    from pytest_specperf.verdict.drift import speedup_differences

    reference = _asked_and_ran(None, "torch_native", reported_command=reported_command)
    speculative = _asked_and_ran("intel_amx", "torch_native", reported_command=reported_command)
    assert speedup_differences(reference, speculative) == []


def test_a_setting_that_ran_differently_shows_what_was_asked_beside_it() -> None:
    from pytest_specperf.verdict.drift import speedup_differences

    reference = _asked_and_ran(None, "torch_native", reported_command=False)
    speculative = _asked_and_ran("intel_amx", "flashinfer", reported_command=False)
    assert speedup_differences(reference, speculative) == [
        Change("server.attention_backend", "torch_native", "flashinfer (asked intel_amx)")
    ]


def test_the_gpu_count_comes_from_the_launch_not_a_per_replica_report() -> None:
    """SGLang's /v1/loads counts GPUs per DP rank: a TP8 x DP2 deployment says 8."""
    fp = take(loads={"accelerator": "NVIDIA H200", "num_accelerators": 8}, gpu_count=16)
    assert (fp.identity["gpu"], fp.identity["gpu_count"]) == ("NVIDIA H200", "16")
    assert take(loads={"accelerator": "NVIDIA H200", "num_accelerators": 8}).identity["gpu_count"] == "8"
