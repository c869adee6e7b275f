"""A failed start is explained by one line: the known cause, the first error of the first failing rank, the log."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_specperf.servers.diagnosis import diagnose

TP8_OOM = """\
# specperf: python -m sglang.launch_server --model-path m --tp-size 8
[2026-12-01 01:00:00 TP0] Load weight begin. avail mem=78.10 GB
[2026-12-01 01:00:00 TP5] Load weight begin. avail mem=78.10 GB
[2026-12-01 01:00:09 TP3] Scheduler hit an exception: Traceback (most recent call last):
  File "sglang/srt/model_executor/model_runner.py", line 812, in load_model
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.00 GiB. GPU 3 has 2.06 GiB free.
[2026-12-01 01:00:09 TP0] Scheduler hit an exception: Traceback (most recent call last):
RuntimeError: NCCL communicator was aborted on rank 0
[2026-12-01 01:00:10] Received sigquit from a child process. It usually means the child failed.
"""

CASES = {
    "oom-on-tp3": (TP8_OOM, "GPU out of memory", "(TP3): torch.OutOfMemoryError: CUDA out of memory"),
    "nccl": ("[2026 TP1] x\nRuntimeError: NCCL error in: ../nccl.cpp:1, unhandled system error\n",
             "NCCL error", "(TP1)"),
    "port": ("ERROR:    [Errno 98] error while attempting to bind on address: address already in use\n",
             "address already in use", "[Errno 98]"),
    "model": ("OSError: foo/bar is not a local folder and is not a valid model identifier listed on hf.co\n",
              "model not found", "foo/bar"),
    "revision": ("huggingface_hub.errors.RevisionNotFoundError: 404 Client Error. Revision Not Found\n",
                 "model revision not found", "RevisionNotFoundError"),
    "remote-code": ("ValueError: The repository for x contains custom code which must be executed to correctly "
                    "load the model. Please pass the argument `trust_remote_code=True`\n",
                    "add --trust-remote-code", "contains custom code"),
    "spec": ("ValueError: Unknown speculative algorithm name: MEDUSA\n", "unsupported speculative setting", "MEDUSA"),
    "import": ("Traceback\nImportError: libcudart.so.12: cannot open shared object file\n",
               "a Python import failed", "libcudart"),
    "no-sglang": ("/usr/bin/python3: No module named sglang\n", "SGLang is not installed", "No module named"),
    "unrecognized": ("sglang serve: error: unrecognized arguments: --no-such-flag\n",
                     "does not know a flag", "--no-such-flag"),
    "unknown": ("starting\nValueError: something odd\n", "no known cause", "ValueError: something odd"),
}  # fmt: skip


@pytest.mark.parametrize("log,cause,error", CASES.values(), ids=CASES.keys())
def test_known_causes_are_named_with_their_first_error(tmp_path: Path, log: str, cause: str, error: str) -> None:
    path = tmp_path / "server.log"
    path.write_text(log)
    line = diagnose(path).one_line()
    assert cause in line and error in line and f"log: {path}" in line
    assert "\n" not in line


def test_the_first_failing_rank_wins_over_later_noise(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    path.write_text(TP8_OOM)
    found = diagnose(path)
    assert found.rank == "TP3" and found.first_error is not None and "GPU 3" in found.first_error


def test_a_clean_or_missing_log(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    path.write_text("# specperf: python -m sglang.launch_server\nloading\n")
    assert diagnose(path).one_line().startswith("no error in the log")
    assert diagnose(tmp_path / "missing.log").first_error is None
