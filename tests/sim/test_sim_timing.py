"""Measured timing agrees with the profile's predictions (small time scale, tolerances for a noisy 2-core box)."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest
import requests

from pytest_specperf.sim.profile import SpecConfig, load_profile

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


@pytest.mark.parametrize("spec", [None, SPEC], ids=["plain", "eagle3-5-1-6"])
def test_measured_matches_prediction(sim_factory, spec_args, kimi, spec):
    """Sequential requests: wall time, throughput and accept length match the profile's prediction."""
    sim = sim_factory(["--sim-time-scale", str(SCALE), *(spec_args if spec else [])])
    prompts = [f"measured prompt {i} about speculative decoding" for i in range(8)]
    n = 48
    recs = round_of(sim.url, prompts, n)
    predicted = [kimi.predict_request(spec, r.prompt_tokens, n) for r in recs]
    pred_s = sum(p.e2e_ms for p in predicted) * SCALE / 1000
    assert duration(recs) / pred_s == pytest.approx(1.0, abs=0.15)
    tput = sum(r.tokens for r in recs) / duration(recs)
    pred_tput = len(recs) * n / pred_s
    assert tput / pred_tput == pytest.approx(1.0, abs=0.15)
    ttft = sum(r.first - r.start for r in recs) / len(recs)
    pred_ttft = kimi.predicted_ttft_ms(recs[0].prompt_tokens) * SCALE / 1000
    assert 0.9 * pred_ttft <= ttft <= pred_ttft + 0.010  # + HTTP client overhead (a few ms in python)
    if spec is not None:
        tau = sum(r.tokens for r in recs) / sum(r.verify for r in recs)
        pred_tau = sum(p.output_tokens for p in predicted) / sum(p.verify_steps for p in predicted)
        assert tau == pytest.approx(pred_tau, rel=0.12)
        cycle = sum(r.last - r.first for r in recs) / sum(r.verify for r in recs)
        assert cycle / (kimi.cycle_ms(5, 1, 6, 1) * SCALE / 1000) == pytest.approx(1.0, abs=0.15)


def test_nccl_tuning_env_speeds_up_every_step(sim_factory, kimi):
    untuned = sim_factory(["--sim-time-scale", str(SCALE)])
    tuned = sim_factory(["--sim-time-scale", str(SCALE)], env=TUNED_ENV)
    assert untuned.get("/server_info").json()["simulator"]["nccl_tuned"] is False
    assert tuned.get("/server_info").json()["simulator"]["nccl_tuned"] is True
    assert "NCCL tuned (NCCL_ALGO=Ring" in tuned.log()
    prompts = [f"nccl {i}" for i in range(3)]
    slow = sum(map(tpot, round_of(untuned.url, prompts, 40))) / len(prompts)
    fast = sum(map(tpot, round_of(tuned.url, prompts, 40))) / len(prompts)
    expected = kimi.plain_step_ms(1) / kimi.plain_step_ms(1, tuned=True)  # 15.9 / 11.1 = 1.43
    assert slow / fast == pytest.approx(expected, abs=0.15)


def test_batch_above_cuda_graph_max_bs_is_penalised(sim_factory, kimi):
    """Batch 2 with --cuda-graph-max-bs-decode 1 runs eager: per-step time x1.6 on top of the batch slope."""
    sim = sim_factory(["--sim-time-scale", str(SCALE), "--cuda-graph-max-bs-decode", "1"])
    alone = tpot(round_of(sim.url, ["graph alone"], 60)[0])
    pair = round_of(sim.url, ["graph a", "graph b"], 60, concurrency=2)
    expected = kimi.plain_step_ms(2, cuda_graph_max_bs=1) / kimi.plain_step_ms(1)  # 16.5 x 1.6 / 15.9 = 1.66
    assert expected == pytest.approx(1.66, abs=0.01)
    for rec in pair:  # without the penalty this would be 16.5 / 15.9 = 1.04
        assert tpot(rec) / alone == pytest.approx(expected, abs=0.25)
