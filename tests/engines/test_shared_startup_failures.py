"""The start-up failures every Python engine shares are declared once (engines/base.py) and read the same
whatever the engine: a real SGLang start that lost its port, a real vLLM start that refused a flag."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_specperf.engines import engine_for, engine_names
from pytest_specperf.engines.base import PORT_IN_USE, UNKNOWN_FLAG
from pytest_specperf.servers.diagnosis import diagnose

DATA = Path(__file__).parents[1] / "data"
#: SGLang 0.5.23 on a CPU: uvicorn could not bind after the start (the launcher then waits for ever)
SGLANG_PORT_TAKEN = DATA / "real-nights" / "sglang-cpu-spec" / "unlike-plain.log"
#: vLLM 0.26.0 refusing `--enable-per-request-metrics` (argparse's usage, then its error line)
VLLM_UNKNOWN_FLAG = DATA / "vllm-0.26.0" / "unrecognized-per-request-metrics.log"


@pytest.mark.parametrize("engine", engine_names())
def test_a_port_another_process_took_reads_the_same_for_every_engine(engine: str) -> None:
    found = diagnose(SGLANG_PORT_TAKEN, engine_for(engine))
    assert found.cause == PORT_IN_USE
    bind = next(line for line in SGLANG_PORT_TAKEN.read_text().splitlines() if "Errno 98" in line)
    assert any(pattern.search(bind) for pattern in engine_for(engine).fatal_startup)


@pytest.mark.parametrize("engine", engine_names())
def test_a_refused_flag_reads_the_same_for_every_engine(engine: str) -> None:
    assert diagnose(VLLM_UNKNOWN_FLAG, engine_for(engine)).cause == UNKNOWN_FLAG[1]


@pytest.mark.parametrize("engine", engine_names())
def test_each_engine_lists_the_shared_causes_once(engine: str) -> None:
    diagnoses = [diagnosis for _, diagnosis in engine_for(engine).startup_failures]
    assert diagnoses.count(PORT_IN_USE) == 1 and diagnoses.count(UNKNOWN_FLAG[1]) == 1
