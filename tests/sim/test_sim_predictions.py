"""What the simulator serves agrees with its profile: the accept length of its own acceptance model, NCCL
tuning recognised from the environment, eager decode priced above the CUDA-graph batch limit.

Nothing here asserts a time: how closely the simulator's wall clock follows the profile is a benchmark
(benchmarks/sim_fidelity.py, benchmarks/sim_step_effects.py; figures in docs/benchmarks.md), since a busy
machine's scheduler adds to every simulated step.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest
import requests

from pytest_specperf.sim.profile import SpecConfig
from pytest_specperf.sim.profile_files import load_profile

SCALE = 0.2
TUNED_ENV = {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL128", "NCCL_MIN_NCHANNELS": "16"}
SPEC = SpecConfig("EAGLE3", 5, 1, 6)


@dataclass
class Rec:
    start: float
    first: float
    last: float
    prompt_tokens: int
    tokens: int
    verify: int


def stream_one(url: str, text: str, max_new: int) -> Rec:
    body = {
        "text": text,
        "stream": True,
        "sampling_params": {"max_new_tokens": max_new, "temperature": 0, "ignore_eos": True},
    }
    start = time.perf_counter()
    first = None
    meta: dict = {}
    with requests.post(url + "/generate", json=body, stream=True, timeout=60) as r:
        for line in r.iter_lines():
            if line.startswith(b"data: {"):
                first = first or time.perf_counter()
                meta = json.loads(line[6:])["meta_info"]
    last = time.perf_counter()
    return Rec(
        start, first or last, last, meta["prompt_tokens"], meta["completion_tokens"], meta.get("spec_verify_ct", 0)
    )


def round_of(url: str, prompts: list[str], max_new: int, concurrency: int = 1) -> list[Rec]:
    with ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(lambda p: stream_one(url, p, max_new), prompts))


def duration(recs: list[Rec]) -> float:
    return max(r.last for r in recs) - min(r.start for r in recs)


def tpot(rec: Rec) -> float:
    return (rec.last - rec.first) / (rec.tokens - 1)


@pytest.fixture(scope="module")
def kimi():
    return load_profile("kimi-k2.5-tp8")


def test_accept_length_follows_the_acceptance_model(sim_factory, spec_args, kimi):
    """Sequential requests: Σ completion tokens / Σ verify steps is the profile's expectation for these
    prompts (their difficulty is a fixed function of their text; what remains is the draws' luck)."""
    sim = sim_factory(["--sim-time-scale", "0", *spec_args])
    prompts = [f"measured prompt {i} about speculative decoding" for i in range(8)]
    n = 48
    recs = round_of(sim.url, prompts, n)
    predicted = [kimi.predict_request(SPEC, r.prompt_tokens, n) for r in recs]
    assert all(r.tokens == n for r in recs)
    tau = sum(r.tokens for r in recs) / sum(r.verify for r in recs)
    pred_tau = sum(p.output_tokens for p in predicted) / sum(p.verify_steps for p in predicted)
    assert tau == pytest.approx(pred_tau, rel=0.12)


def test_nccl_tuning_env_is_recognised(sim_factory):
    untuned = sim_factory(["--sim-time-scale", "0"])
    tuned = sim_factory(["--sim-time-scale", "0"], env=TUNED_ENV)
    assert untuned.get("/server_info").json()["simulator"]["nccl_tuned"] is False
    assert tuned.get("/server_info").json()["simulator"]["nccl_tuned"] is True
    assert "NCCL tuned (NCCL_ALGO=Ring" in tuned.log()


def test_tuning_and_eager_decode_are_priced_by_the_profile(kimi):
    """The step times the simulator sleeps: tuned steps 1.43x faster (the phantom baseline's 90 vs 62.9
    tok/s), a batch of 2 above `--cuda-graph-max-bs-decode 1` 1.66x slower (16.5 x 1.6 / 15.9), not the
    batch slope's 1.04."""
    assert kimi.plain_step_ms(1) / kimi.plain_step_ms(1, tuned=True) == pytest.approx(1.43, abs=0.01)
    assert kimi.plain_step_ms(2, cuda_graph_max_bs=1) / kimi.plain_step_ms(1) == pytest.approx(1.66, abs=0.01)
    assert kimi.plain_step_ms(2) / kimi.plain_step_ms(1) == pytest.approx(1.04, abs=0.01)
