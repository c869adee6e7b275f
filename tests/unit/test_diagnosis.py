"""A failed start is explained by one line: the known cause, the first error of the first failing rank, the log.

The logs below start the way every SGLang 0.5.23 start does: the `launch_server` deprecation
notice, then `server_args={...}` (engine.py:311: the resolved arguments, which hold `nccl`,
`..._timeout` fields and the API key). That echo is never the cause.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_specperf.engines import engine_for
from pytest_specperf.servers.diagnosis import diagnose

SGLANG = engine_for("sglang")

# what SGLang prints at every start, before anything can fail (shortened: the real dict has ~530 keys)
STARTUP = """\
# specperf: /opt/sglang/bin/python -m sglang.launch_server --model-path /models/kimi --tp-size 8 --api-key <redacted>
/opt/sglang/lib/python3.11/site-packages/sglang/launch_server.py:71: UserWarning: 'python -m sglang.launch_server' \
is still supported, but 'sglang serve' is the recommended entrypoint.
  Example: sglang serve --model-path <model> [options]
  warnings.warn(
[2026-12-01 01:00:00] server_args={'model_path': '/models/kimi', 'tokenizer_path': '/models/kimi', 'tp_size': 8, \
'remote_instance_weight_loader_backend': 'nccl', 'weight_cache_timeout': 300, 'dist_timeout': None, \
'watchdog_timeout': 300, 'soft_watchdog_timeout': None, 'enable_nccl_nvls': False, 'pre_warm_nccl': True, \
'grpc_response_timeout_secs': 600, 'api_key': 'sk-live-0123456789abcdef', 'attention_backend': None}
[2026-12-01 01:00:02] Using default HuggingFace chat template with detected content format: string
"""

OOM = """\
[2026-12-01 01:00:05 TP0] Load weight begin. avail mem=78.10 GB
[2026-12-01 01:00:05 TP5] Load weight begin. avail mem=78.10 GB
[2026-12-01 01:00:09 TP3] Scheduler hit an exception: Traceback (most recent call last):
  File "/opt/sglang/lib/python3.11/site-packages/sglang/srt/model_executor/model_runner.py", line 812, in load_model
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.00 GiB. GPU 3 has 2.06 GiB free.
[2026-12-01 01:00:09 TP0] Scheduler hit an exception: Traceback (most recent call last):
RuntimeError: NCCL communicator was aborted on rank 0
[2026-12-01 01:00:10] Received sigquit from a child process. It usually means the child failed.
"""
PORT = """\
[2026-12-01 01:14:40] INFO:     Started server process [412]
[2026-12-01 01:14:40] INFO:     Waiting for application startup.
[2026-12-01 01:14:40] ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 30000): \
[errno 98] address already in use
[2026-12-01 01:14:40] INFO:     Waiting for application shutdown.
"""
MISSING_MODEL = """\
Traceback (most recent call last):
  File "/opt/sglang/lib/python3.11/site-packages/sglang/srt/utils/hf_transformers/config.py", line 382, in get_config
    config = AutoConfig.from_pretrained(model, trust_remote_code=trust_remote_code, revision=revision, **kwargs)
huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or 'namespace/repo_name': \
'/models/kimi-missing'. Use `repo_type` argument if needed.
"""
BACKEND = """\
[2026-12-01 01:00:03] Attention backend not explicitly specified. Use torch_native backend by default.
Traceback (most recent call last):
  File "/opt/sglang/srt/model_executor/model_runner.py", line 1603, in init_attention_backend
ValueError: EAGLE is not supported in decode attention backend torch_native
"""
ATTRIBUTE = """\
[2026-12-01 01:00:04 TP0] Scheduler hit an exception: Traceback (most recent call last):
AttributeError: 'NoneType' object has no attribute 'shape'
"""

CASES = {
    "oom-on-tp3": (OOM, "GPU out of memory", "(TP3): torch.OutOfMemoryError: CUDA out of memory"),
    "port": (PORT, "address already in use", "[Errno 98] error while attempting to bind"),
    "missing-model": (MISSING_MODEL, "model not found", "/models/kimi-missing"),
    "unsupported-backend": (BACKEND, "attention backend cannot run", "decode attention backend torch_native"),
    "attribute-error": (ATTRIBUTE, "AttributeError during start-up", "'NoneType' object has no attribute"),
}


@pytest.mark.parametrize("log,cause,error", CASES.values(), ids=CASES.keys())
def test_after_sglangs_startup_echo_each_cause_is_named(tmp_path: Path, log: str, cause: str, error: str) -> None:
    path = tmp_path / "server.log"
    path.write_text(STARTUP + log)
    found = diagnose(path, SGLANG)
    line = found.one_line()
    assert cause in line and error in line and f"log: {path}" in line, line
    assert "NCCL" not in found.cause and "server_args" not in (found.first_error or "")
    assert "\n" not in line


def test_the_port_and_memory_failures_are_recognised_for_their_retries(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    path.write_text(STARTUP + PORT)
    assert diagnose(path, SGLANG).port_taken and not diagnose(path, SGLANG).out_of_memory
    path.write_text(STARTUP + OOM)
    assert diagnose(path, SGLANG).out_of_memory and not diagnose(path, SGLANG).port_taken


OLDER_CASES = {
    "nccl": (
        "[2026 TP1] x\nRuntimeError: NCCL error in: ../nccl.cpp:1, unhandled system error\n",
        "NCCL error",
        "(TP1)",
    ),
    "model": (
        "OSError: foo/bar is not a local folder and is not a valid model identifier listed on hf.co\n",
        "model not found",
        "foo/bar",
    ),
    "revision": (
        "huggingface_hub.errors.RevisionNotFoundError: 404 Client Error. Revision Not Found\n",
        "model revision not found",
        "RevisionNotFoundError",
    ),
    "remote-code": (
        "ValueError: The repository for x contains custom code which must be executed to correctly "
        "load the model. Please pass the argument `trust_remote_code=True`\n",
        "add --trust-remote-code",
        "contains custom code",
    ),
    "spec": ("ValueError: Unknown speculative algorithm name: MEDUSA\n", "unsupported speculative setting", "MEDUSA"),
    "import": (
        "Traceback\nImportError: libcudart.so.12: cannot open shared object file\n",
        "a Python import failed",
        "libcudart",
    ),
    "no-sglang": ("/usr/bin/python3: No module named sglang\n", "SGLang is not installed", "No module named"),
    "unrecognized": (
        "sglang serve: error: unrecognized arguments: --no-such-flag\n",
        "does not know a flag",
        "--no-such-flag",
    ),
    "unknown": ("starting\nValueError: something odd\n", "no known cause", "ValueError: something odd"),
}


@pytest.mark.parametrize("log,cause,error", OLDER_CASES.values(), ids=OLDER_CASES.keys())
def test_known_causes_are_named_with_their_first_error(tmp_path: Path, log: str, cause: str, error: str) -> None:
    path = tmp_path / "server.log"
    path.write_text(log)
    line = diagnose(path, SGLANG).one_line()
    assert cause in line and error in line and f"log: {path}" in line
    assert "\n" not in line


def test_the_first_failing_rank_wins_over_later_noise(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    path.write_text(STARTUP + OOM)
    found = diagnose(path, SGLANG)
    assert found.rank == "TP3" and found.first_error is not None and "GPU 3" in found.first_error


def test_a_clean_or_missing_log(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    path.write_text(STARTUP + "[2026-12-01 01:00:05 TP0] Load weight begin. avail mem=78.10 GB\n")
    assert diagnose(path, SGLANG).one_line().startswith("no error in the log")
    assert diagnose(tmp_path / "missing.log", SGLANG).first_error is None


def test_vllm_reads_its_own_echo_and_causes(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    path.write_text(
        "(APIServer pid=6038) INFO 12-01 15:45:49 [api_utils.py:286] non-default args: {'port': 31777, "
        "'model': '/m', 'enforce_eager': True, 'api_key': ['<redacted>']}\n"
        "(APIServer pid=6038) ERROR 12-01 15:45:55 [launcher.py:40] OSError: [Errno 98] Address already in use\n"
    )
    found = diagnose(path, engine_for("vllm"))
    assert found.port_taken and "address already in use" in found.cause


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_slurms_time_limit_during_the_start_is_named_not_taken_for_a_crash(tmp_path: Path, engine: str) -> None:
    """srun's own lines when the allocation's time limit ends a step that is still loading weights."""
    log = tmp_path / "server.log"
    log.write_text(
        STARTUP
        + "[2026-12-01 01:00:05] Load weight begin. avail mem=139.81 GB\n"
        + "slurmstepd-n1: error: *** STEP 20.0 ON n1 CANCELLED AT 2026-12-03T12:07:18 DUE TO TIME LIMIT ***\n"
        + "srun: Job step aborted: Waiting up to 7 seconds for job step to finish.\n"
        + "srun: error: n2: task 1: Terminated\n"
    )
    found = diagnose(log, engine_for(engine))
    assert found.cause.startswith("Slurm's time limit ended the step while the server was starting (not a crash)")
    assert found.first_error is not None and "DUE TO TIME LIMIT" in found.first_error
