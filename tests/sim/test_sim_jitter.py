"""Simulator noise: one speed factor per server start, one per round; deterministic by default."""

from __future__ import annotations

import itertools
import math
import statistics
import threading

import pytest
from simharness import Sim

from pytest_specperf.sim.cli import SimConfigError, parse_config
from pytest_specperf.sim.engine import Engine, EngineSettings, SimSamplingParams
from pytest_specperf.sim.profile_files import load_profile
from pytest_specperf.sim.text import SimPrompt


def engine(**kw: object) -> Engine:
    profile = load_profile("kimi-k2.5-tp8")
    values: dict = {
        "profile": profile,
        "spec": None,
        "tuned": True,
        "max_running_requests": 8,
        "cuda_graph_max_bs": 8,
        "time_scale": 0.0,
    }
    values.update(kw)
    return Engine(EngineSettings(**values))


def test_default_is_deterministic() -> None:
    e = engine()
    assert e.run_factor == 1.0
    assert e.flush_cache() and e.round_factor == 1.0


def test_each_start_draws_its_own_run_factor_reproducibly() -> None:
    factors = [engine(run_jitter=0.02, seed=1, start_seed=port).run_factor for port in range(30000, 30400)]
    assert factors[:5] == [engine(run_jitter=0.02, seed=1, start_seed=p).run_factor for p in range(30000, 30005)]
    assert len(set(factors)) == len(factors)
    cv = statistics.stdev(factors) / statistics.fmean(factors)
    assert 0.016 < cv < 0.024  # ~2% over 400 seeded starts
    assert all(f > 0 for f in factors)


def test_round_factor_is_redrawn_at_every_flush() -> None:
    e = engine(round_jitter=0.01, start_seed=1)
    seen = []
    for _ in range(200):
        assert e.flush_cache()
        seen.append(e.round_factor)
    assert e.run_factor == 1.0 and len(set(seen)) == 200
    assert 0.008 < statistics.stdev(math.log(f) for f in seen) < 0.012


@pytest.mark.parametrize("flag", ["--sim-run-jitter", "--sim-round-jitter"])
def test_jitter_flags_are_validated(flag: str) -> None:
    base = ["--model-path", "m", "--port", "1234"]
    assert getattr(parse_config([*base, flag, "0.02"]).sim, flag[6:].replace("-", "_")) == 0.02
    with pytest.raises(SimConfigError, match=f"{flag} must be a CV in"):
        parse_config([*base, flag, "-0.1"])


def test_a_start_seed_makes_a_start_reproducible(sim_factory) -> None:
    """--sim-start-seed N fixes a start's run factor (a reproducible night); by default the port does."""
    assert parse_config(["--model-path", "m", "--sim-start-seed", "3"]).sim.start_seed == 3
    assert parse_config(["--model-path", "m"]).sim.start_seed is None

    def start(*args: str) -> Sim:
        return sim_factory(["--sim-time-scale", "0", "--sim-run-jitter", "0.02", *args])

    def factor_of(sim: Sim) -> str:
        line = next(x for x in sim.log().splitlines() if "run speed factor" in x)
        sim.stop()
        return line.split("run speed factor ")[1].split()[0]

    seeded = {factor_of(start("--sim-start-seed", "3")) for _ in range(2)}
    assert len(seeded) == 1
    assert factor_of(start("--sim-start-seed", "4")) not in seeded
    # two simulators alive at once: two ports, two draws (one after the other, the OS may hand the
    # second the port the first just freed)
    together = [start(), start()]
    assert len({factor_of(sim) for sim in together}) == 2


# --- night shapes (sim/nights.py): what real CI series showed, for the simulator and the benchmark ---------


def test_a_mixed_node_pool_has_two_levels() -> None:
    from pytest_specperf.sim.nights import NightNoise

    noise = NightNoise(pool_share=0.5, pool_slowdown=0.12)
    speeds = [noise.speed(7, night, 0) for night in range(400)]
    assert set(round(s, 6) for s in speeds) == {1.0, 0.88}
    assert 0.4 < sum(s < 1.0 for s in speeds) / 400 < 0.6


def test_a_level_shift_and_a_drift_move_every_later_night() -> None:
    from pytest_specperf.sim.nights import NightNoise

    shift = NightNoise(step_at=10, step=-0.1)
    assert [round(shift.speed(1, n, 0), 6) for n in (9, 10, 30)] == [1.0, 0.9, 0.9]
    drift = NightNoise(drift=-0.003)
    assert math.isclose(drift.speed(1, 30, 0), math.exp(-0.09))


def test_heavy_tails_and_correlated_nights_keep_their_spread() -> None:
    from pytest_specperf.sim.nights import NightNoise

    heavy = [math.log(NightNoise(cv=0.02, df=3.0).speed(3, n, 0)) for n in range(4000)]
    assert 0.015 < statistics.stdev(heavy) < 0.03
    assert max(abs(x) for x in heavy) > 5 * 0.02  # t3: a tail a normal offset almost never reaches
    ar = NightNoise(cv=0.02, rho=0.6)
    logs = [math.log(ar.speed(5, n, 0)) for n in range(300)]
    mean = statistics.fmean(logs)
    pairs = sum((a - mean) * (b - mean) for a, b in itertools.pairwise(logs))
    lag1 = pairs / sum((x - mean) ** 2 for x in logs)
    assert 0.45 < lag1 < 0.75
    assert ar.speed(5, 40, 0) == ar.speed(5, 40, 1)  # a restart keeps the night's slow state


def test_night_shapes_are_validated_and_need_a_night() -> None:
    base = ["--model-path", "m", "--port", "1234"]
    with pytest.raises(SimConfigError, match="need --sim-night"):
        parse_config([*base, "--sim-pool-share", "0.5", "--sim-pool-slowdown", "0.1"])
    with pytest.raises(SimConfigError, match="pool_share must be in"):
        parse_config([*base, "--sim-night", "1", "--sim-pool-share", "1.5"])
    config = parse_config([*base, "--sim-night", "4", "--sim-step-at-night", "3", "--sim-step", "-0.2"])
    assert config.sim.night == 4 and config.sim.night_noise.step == -0.2


def test_a_simulated_night_after_a_level_shift_is_slower(sim_factory) -> None:
    """The running simulator draws its start's speed from the same function: a night after a -20% shift
    runs its steps 1/0.8 times as long."""

    def factor(night: int) -> float:
        sim = sim_factory(
            ["--sim-time-scale", "0", "--sim-night", str(night), "--sim-step-at-night", "3", "--sim-step", "-0.2"]
        )
        line = next(x for x in sim.log().splitlines() if "run speed factor" in x)
        sim.stop()
        return float(line.split("run speed factor ")[1].split()[0])

    assert factor(2) == 1.0 and factor(3) == 1.25


def test_a_request_in_its_prefill_step_keeps_the_engine_busy() -> None:
    """SGLang flushes its cache only when no request is in flight. A request taken off the queue for its
    prefill step is in flight too: a flush landing in that step used to succeed, and the request then
    ran on a flushed server (the disconnect test saw it as one running request after a 200 flush)."""
    e = engine()
    in_prefill, release = threading.Event(), threading.Event()

    def held(cost_ms: float) -> None:  # the step's sleep: held open until the test has looked
        in_prefill.set()
        release.wait(10)

    e._wait_until = held  # type: ignore[method-assign]
    e.start()
    try:
        e.submit(SimPrompt.from_text("a prompt"), SimSamplingParams(max_new_tokens=1))
        assert in_prefill.wait(10)
        assert not e.flush_cache(timeout=0)
    finally:
        release.set()
        e.stop()
