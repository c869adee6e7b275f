"""A speedup's like-for-like check against the `/server_info` pairs of a real night: SGLang built for CPU,
a plain reference and two speculative servers (tests/data/real-nights/sglang-cpu-spec/unlike-*).

The fingerprints are the ones the plugin captured from each server's `/server_info` that night (the
report's `fingerprint`); only what SGLang itself decides, or what cannot act on a CPU, must stop being
named, while a variable one server was really given (`OMP_NUM_THREADS=1`) stays a difference.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pytest_specperf.measure.fingerprint import Fingerprint, capture
from pytest_specperf.verdict.drift import Change, speedup_differences

NIGHT = Path(__file__).parent.parent / "data" / "real-nights" / "sglang-cpu-spec"


def _fingerprints(report: str) -> dict[str, Fingerprint]:
    data: dict[str, Any] = json.loads((NIGHT / report).read_text())
    return {m["server"]: Fingerprint.from_dict(m["fingerprint"]) for m in data["measurements"]}


def _with_model_dtype(fingerprint: Fingerprint, dtype: str) -> Fingerprint:
    """The fingerprint as this release captures it from the same server: with the model's own dtype
    (its config.json; the night's model is bf16: the log's "KV Cache is allocated. dtype: torch.bfloat16")."""
    return Fingerprint(fingerprint.identity, {**fingerprint.environment, "model.dtype": dtype})


def test_the_log_says_speculation_forces_the_overlap_schedule_off() -> None:
    """The rule the engine's rules encode is the one the real server logged that night."""
    log = (NIGHT / "unlike-standalone-asked.log").read_text()
    assert "Overlap schedule is not implemented for speculative decoding on CPU." in log
    assert "Non-overlap (synchronous) spec v2 is used for eagle/eagle3/standalone speculative decoding." in log


def test_a_server_asked_differently_that_ran_the_same_is_like_for_like() -> None:
    """standalone-asked: `disable_overlap_schedule` (forced by speculation), `mem_fraction_static` 0.843 →
    0.846 (SGLang's auto value), `dtype` auto (the model's bf16) and `--disable-cuda-graph` (no graphs on a
    CPU), named five times that night, are no difference at all."""
    found = _fingerprints("unlike-report.json")
    plain = _with_model_dtype(found["plain"], "bfloat16")
    standalone = _with_model_dtype(found["standalone-asked"], "bfloat16")
    assert speedup_differences(plain, standalone) == []


def test_a_variable_one_server_was_given_stays_a_difference() -> None:
    """ngram-omp1 ran with OMP_NUM_THREADS=1: that difference acts, and it alone is named."""
    found = _fingerprints("unlike-report.json")
    plain = _with_model_dtype(found["plain"], "bfloat16")
    ngram = _with_model_dtype(found["ngram-omp1"], "bfloat16")
    assert speedup_differences(plain, ngram) == [Change("OMP_NUM_THREADS", "unset", "1")]


def test_without_the_models_dtype_auto_is_still_named() -> None:
    """A fingerprint stored before the model's dtype was recorded: `auto` cannot be resolved, so it stays
    a difference (and nothing else of that pair is named)."""
    found = _fingerprints("unlike-report.json")
    assert speedup_differences(found["plain"], found["standalone-asked"]) == [
        Change("server.dtype", "bfloat16", "auto")
    ]


def test_a_setting_the_speculative_server_asked_for_is_named() -> None:
    """Forced only when the engine set it: a speculative server that asked for the overlap schedule off,
    or asked for another memory fraction, differs by its own request."""
    found = _fingerprints("unlike-report.json")
    plain = _with_model_dtype(found["plain"], "bfloat16")
    asked = found["standalone-asked"]
    identity = {
        **asked.identity,
        "args": asked.identity["args"] + " --mem-fraction-static 0.7 --disable-overlap-schedule",
    }
    environment = {**asked.environment, "model.dtype": "bfloat16", "server.mem_fraction_static": "0.7"}
    names = [c.name for c in speedup_differences(plain, Fingerprint(identity, environment))]
    assert names == ["server.disable_overlap_schedule", "server.mem_fraction_static"]


def test_on_a_gpu_the_cuda_graph_flag_is_judged_by_its_effect_once() -> None:
    """The same pair on a GPU: CUDA graphs act there, so their difference is named, once (by what ran)."""
    found = _fingerprints("unlike-report.json")
    on_gpu = {"device": "unset", "cpu": "unset", "cpu_count": "unset", "gpu": "NVIDIA H200", "gpu_count": "1"}
    plain, asked = (
        Fingerprint({**fp.identity, **on_gpu}, {**fp.environment, "model.dtype": "bfloat16"})
        for fp in (found["plain"], found["standalone-asked"])
    )
    assert speedup_differences(plain, asked) == [Change("server.cuda_graph_config.decode.backend", "full", "disabled")]


def test_the_model_dtype_is_read_from_a_local_models_config(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(
        json.dumps({"architectures": ["LlamaForCausalLM"], "torch_dtype": "bfloat16"})
    )
    fingerprint = capture(
        launch_identity={"launcher": "sglang", "model": str(tmp_path)},
        server_info={"dtype": "auto"},
        loads=None,
        server_env={},
        gpu_probe=lambda: None,
    )
    assert fingerprint.environment["model.dtype"] == "bfloat16"
