"""Simulator noise: one speed factor per server start, one per round; deterministic by default."""

from __future__ import annotations

import math
import statistics

import pytest

from pytest_specperf.sim.cli import SimConfigError, parse_config
from pytest_specperf.sim.engine import Engine, EngineSettings
from pytest_specperf.sim.profile_files import load_profile


def engine(**kw: object) -> Engine:
    profile = load_profile("kimi-k2.5-tp8")
    values: dict = {
        "profile": profile, "spec": None, "tuned": True, "max_running_requests": 8,
        "cuda_graph_max_bs": 8, "time_scale": 0.0,
    }  # fmt: skip
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

    def factor(*args: str) -> str:
        sim = sim_factory(["--sim-time-scale", "0", "--sim-run-jitter", "0.02", *args])
        line = next(x for x in sim.log().splitlines() if "run speed factor" in x)
        sim.stop()
        return line.split("run speed factor ")[1].split()[0]

    seeded = {factor("--sim-start-seed", "3") for _ in range(2)}
    assert len(seeded) == 1
    assert factor("--sim-start-seed", "4") not in seeded
    assert len({factor() for _ in range(2)}) == 2  # two ports, two draws
