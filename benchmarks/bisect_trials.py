"""Seeded trials of `specperf bisect`'s rules: the product's own runner and search, on a model of the
jittery simulator's starts.

Why: bisect is only worth its GPU starts if it names the right difference in few of them, and
names nothing when nothing is the cause, on servers whose starts differ by a few percent. Each trial
draws N ∈ {4, 10, 20} differences of every kind (an environment variable, a flag in `args`, a
simulator flag in `sim_args`), each with random names so that the cause lands at a random position
of the sorted list, and one of three nights:

- `none`: the night was the node; tonight no difference costs anything (answer: not reproduced);
- `single`: one difference costs 20-35% of the throughput;
- `pair`: two differences cost 30-40% only together (NCCL's sockets need both transports disabled).

The starts: `BisectRunner` (pytest_specperf/bisect/runner.py) sets up each start from a suite config
as it would for a real server (`setup`: variables, `args`, `sim_args`) and hands it to a model
instead of a server; the model reads the setup (the variables and flags it would start with) and
returns four rounds of throughput: 100 tok/s, times the cost when the night's cause is in the setup,
times one log-normal start offset with the given spread (`--sim-run-jitter`, which is what the
simulator draws per start), times 1% round-to-round noise. The config's `run_to_run_cv` is the
spread, as a suite on such a node sets it; `max_regression` 5%. The search is `bisect.search.bisect`,
exactly what `specperf bisect` runs.

    python benchmarks/bisect_trials.py                   # 200 trials per cell (figures in docs/bisect.md)
    python benchmarks/bisect_trials.py --trials 50 --spreads 0.05
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from pytest_specperf.bisect.differences import Difference, differences, placed
from pytest_specperf.bisect.runner import BisectRunner
from pytest_specperf.bisect.search import FOUND, NOT_REPRODUCED, bisect
from pytest_specperf.config.settings import ServerConfig, SpecperfConfig
from pytest_specperf.measure.fingerprint import UNSET, Fingerprint, launch_flags
from pytest_specperf.measure.records import MeasurementKey

KINDS = ("env", "flag", "sim")
NIGHTS = ("none", "single", "pair")
KEY = MeasurementKey("eagle3", "default", 1)


@dataclass(frozen=True)
class Trial:
    count: int
    spread: float
    night: str
    truth: frozenset[str]  # the names of the causes (empty: none)
    named: frozenset[str]
    outcome: str
    uncertain: bool
    starts: int

    @property
    def exact(self) -> bool:
        return self.outcome == FOUND and self.named == self.truth

    @property
    def false_cause(self) -> bool:
        return bool(self.named) and self.named != self.truth


def night(rng: random.Random, count: int) -> tuple[SpecperfConfig, list[Difference]]:
    """The bad night's suite config (every difference at its bad value, as the suite now reads) and the
    differences between the two nights' fingerprints, as `specperf bisect` finds and places them."""
    keys = rng.sample(range(100, 1000), count)
    env: dict[str, str] = {}
    args: list[str] = []
    sim: list[str] = []
    for key in keys:
        kind = rng.choice(KINDS)
        if kind == "env":
            env[f"SGLANG_X{key}"] = "1"
        elif kind == "flag":
            args += [f"--x{key}", "1"]
        else:
            sim += [f"--sim-x{key}", "1"]
    server = ServerConfig("eagle3", algorithm="EAGLE3", draft_model="d", num_steps=2, args=tuple(args))
    config = SpecperfConfig(
        launcher="sim",
        model="m",
        sim_time_scale=0.1,
        sim_args=tuple(sim),
        env=env,
        servers={"eagle3": server},
        run_to_run_cv=0.02,
    )
    good = Fingerprint({"model": "m", "launcher": "sim"}, {})
    flags = launch_flags(["x", *args, *sim])
    bad = Fingerprint({"model": "m", "launcher": "sim"}, {**flags, **env})
    return config, placed(differences(good, bad), config, "eagle3")


def model(rng: random.Random, spread: float, causes: list[Difference], cost: float):
    """A start of the jittery simulator: slower by `cost` when every one of `causes` is at its bad value."""

    def start(config: SpecperfConfig, environment: dict[str, str | None], build: str | None) -> list[float]:
        server = config.servers[KEY.server]
        variables = {**config.env, **server.env, **environment}
        flags = launch_flags(["x", *server.args, *config.sim_args, *server.sim_args])
        active = bool(causes) and all(
            (variables.get(c.name) or UNSET) == c.bad if c.kind == "env" else flags.get(c.name, UNSET) == c.bad
            for c in causes
        )
        level = 100.0 * (1 - cost if active else 1.0) * math.exp(rng.gauss(0.0, spread))
        return [level * rng.gauss(1.0, 0.01) for _ in range(4)]

    return start


def trial(seed: int, count: int, spread: float, kind: str) -> Trial:
    rng = random.Random(seed)
    config, found = night(rng, count)
    config = SpecperfConfig(**{**config.__dict__, "run_to_run_cv": spread})
    causes = {"none": [], "single": rng.sample(found, 1), "pair": rng.sample(found, 2)}[kind]
    cost = rng.uniform(0.20, 0.35) if kind == "single" else rng.uniform(0.30, 0.40)
    runner = BisectRunner(config, KEY, found, Path("."), say=lambda _: None)
    runner.start_server = model(rng, spread, causes, cost)
    runner.measure_good_setup()
    answer = bisect(len(found), runner.judge, runner.good_setup_holds)
    named = frozenset(found[i].name for group in answer.groups for i in group)
    truth = frozenset(c.name for c in causes)
    return Trial(count, spread, kind, truth, named, answer.outcome, bool(answer.uncertain), runner.server_starts)


def cell(trials: list[Trial]) -> str:
    first = trials[0]
    bound = math.ceil(math.log2(first.count)) + 3
    starts = sorted(t.starts for t in trials)
    false = sum(t.false_cause for t in trials)
    if first.night == "none":
        hit = sum(t.outcome == NOT_REPRODUCED for t in trials)
        what = f"not reproduced {hit}/{len(trials)} ({hit / len(trials):.1%})"
    else:
        hit = sum(t.exact for t in trials)
        what = f"named exactly {hit}/{len(trials)} ({hit / len(trials):.1%})"
    median = f"median {statistics.median(starts):g} starts (bound {bound})" if first.night == "single" else ""
    median = median or f"median {statistics.median(starts):g} starts"
    uncertain = sum(t.uncertain for t in trials)
    return (
        f"N={first.count:2d} spread {first.spread:.0%} {first.night:6s}: {what}; {median}, max {starts[-1]}; "
        f"false cause {false}; uncertain {uncertain}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200, help="trials per cell (N, spread, night)")
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--counts", type=int, nargs="+", default=[4, 10, 20])
    parser.add_argument("--spreads", type=float, nargs="+", default=[0.02, 0.05])
    args = parser.parse_args(argv)
    started = time.perf_counter()
    every: list[Trial] = []
    for spread in args.spreads:
        for count in args.counts:
            for kind in NIGHTS:
                seeds = range(args.first_seed, args.first_seed + args.trials)
                trials = [trial(seed * 1000 + count, count, spread, kind) for seed in seeds]
                every += trials
                print(cell(trials), flush=True)
    false = sum(t.false_cause for t in every)
    print(
        f"{len(every)} trials: a false cause in {false} ({false / len(every):.2%}); "
        f"{time.perf_counter() - started:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
