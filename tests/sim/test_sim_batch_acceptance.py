"""Acceptance that depends on which prompts share a decode step (--sim-batch-acceptance CV).

Off by default (acceptance never depends on batch-mates); when on, a request alone in the batch draws
exactly as before, so concurrency 1 is unchanged, and a batch's factor is a pure function of its mix and
the seed.
"""

from __future__ import annotations

import statistics
from concurrent.futures import ThreadPoolExecutor

import pytest

from pytest_specperf.sim.cli import SimConfigError, parse_config
from pytest_specperf.sim.engine import Engine, EngineSettings, SimSamplingParams
from pytest_specperf.sim.profile import SpecConfig
from pytest_specperf.sim.profile_files import load_profile
from pytest_specperf.sim.text import SimPrompt

PROMPTS = [f"Prompt number {i}: explain topic {i * 7} in detail." for i in range(8)]
GREEDY = SimSamplingParams(max_new_tokens=96, temperature=0.0, ignore_eos=True)


def engine(cv: float = 0.0, seed: int = 0) -> Engine:
    return Engine(
        EngineSettings(
            profile=load_profile("kimi-k2.5-tp8"),
            spec=SpecConfig("EAGLE3", 5, 1, 6),
            tuned=True,
            max_running_requests=8,
            cuda_graph_max_bs=8,
            time_scale=0.0,
            seed=seed,
            batch_acceptance=cv,
        )
    )


def verify_counts(e: Engine, prompts: list[str], *, together: bool) -> list[int]:
    """spec_verify_ct per prompt: all submitted before the scheduler starts (one batch, a fixed
    schedule), or one at a time (each alone in the batch)."""
    reqs = []
    if together:
        reqs = [e.submit(SimPrompt.from_text(p), GREEDY) for p in prompts]
        e.start()
    else:
        e.start()
        for p in prompts:
            reqs.append(e.submit(SimPrompt.from_text(p), GREEDY))
            while not reqs[-1].wait(timeout=10).finished:
                pass
    for req in reqs:
        while not req.finished_at:
            req.wait(timeout=10)
    e.stop()
    return [req.verify_ct for req in reqs]


def test_off_by_default_and_alone_in_the_batch() -> None:
    e = engine()
    batch = [e._new_request(str(i), SimPrompt.from_text(p), GREEDY, False, True, i) for i, p in enumerate(PROMPTS)]
    assert e._batch_acceptance_factor(batch) == 1.0
    assert engine(0.1)._batch_acceptance_factor(batch[:1]) == 1.0
    # concurrency 1: every request alone draws exactly what it draws without the model
    assert verify_counts(engine(0.1), PROMPTS[:4], together=False) == verify_counts(
        engine(), PROMPTS[:4], together=False
    )


def test_a_batch_accepts_by_its_mix_reproducibly() -> None:
    plain = verify_counts(engine(seed=1), PROMPTS[:4], together=True)
    mixed = verify_counts(engine(0.1, seed=1), PROMPTS[:4], together=True)
    assert mixed == verify_counts(engine(0.1, seed=1), PROMPTS[:4], together=True)  # same mix and seed: same draws
    assert mixed != plain
    # without the model a request's draws ignore its batch-mates; with it, another mate changes them
    assert verify_counts(engine(seed=1), PROMPTS[:3] + PROMPTS[4:5], together=True)[:3] == plain[:3]
    assert verify_counts(engine(0.1, seed=1), PROMPTS[:3] + PROMPTS[4:5], together=True)[:3] != mixed[:3]


def test_factor_is_a_mean_one_function_of_the_set() -> None:
    e = engine(0.05)
    reqs = [e._new_request(str(i), SimPrompt.from_text(f"p{i}"), GREEDY, False, True, i) for i in range(600)]
    assert e._batch_acceptance_factor(reqs[:3]) == e._batch_acceptance_factor(reqs[2::-1])  # order does not matter
    factors = [e._batch_acceptance_factor(reqs[i : i + 3]) for i in range(0, 600, 2)]
    assert len(set(factors)) == len(factors)
    assert 0.99 < statistics.fmean(factors) < 1.01
    assert 0.04 < statistics.stdev(factors) < 0.06
    assert engine(0.05, seed=7)._batch_acceptance_factor(reqs[:3]) != factors[0]


def test_flag_is_validated() -> None:
    base = ["--model-path", "m", "--port", "1234"]
    assert parse_config(base).sim.batch_acceptance == 0.0
    assert parse_config([*base, "--sim-batch-acceptance", "0.03"]).sim.batch_acceptance == 0.03
    with pytest.raises(SimConfigError, match="--sim-batch-acceptance must be a CV in"):
        parse_config([*base, "--sim-batch-acceptance", "0.9"])


def test_server_concurrency_changes_acceptance_only_with_company(sim_factory, spec_args) -> None:
    """A real server: sequential requests draw as on a server without the model; the same requests sent
    together share steps, and their acceptance follows the mix."""
    body = {"sampling_params": {"max_new_tokens": 96, "temperature": 0, "ignore_eos": True}}
    reference = sim_factory(["--sim-time-scale", "0", "--sim-seed", "1", *spec_args])
    sim = sim_factory(["--sim-time-scale", "0.05", "--sim-seed", "1", "--sim-batch-acceptance", "0.1", *spec_args])

    def verify_ct(server, prompt: str) -> int:
        r = server.post("/generate", json={**body, "text": prompt})
        assert r.status_code == 200, r.text
        return r.json()["meta_info"]["spec_verify_ct"]

    alone = [verify_ct(reference, p) for p in PROMPTS[:4]]
    assert [verify_ct(sim, p) for p in PROMPTS[:4]] == alone
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda p: verify_ct(sim, p), PROMPTS[:4]))
    assert together != alone
    assert "--sim-batch-acceptance 0.1" in sim.log()
