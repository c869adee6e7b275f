"""Monte Carlo of the nightly gate on modelled real nights, through the plugin's own flow.

Why: a nightly gate is only useful if it rarely cries wolf on the nights real CI produces and
catches real changes within a night or three. Real nights are not iid normal: start offsets have
heavy tails, starts land on a slow node pool, levels shift and drift, a suite has many keys that
share a server start, and CI series are autocorrelated. Each trial grows its history night by night
through the plugin's own code: the look schedule (`nightly.looked`: `rounds` rounds; when not MET,
the start extended to `max_rounds`; when still beyond the tolerance, a second server start, asked for
as the session asks (`nightly.worth_a_restart`: a SUSPECT key asks only when it is a change for its
server as a whole) and granted by `nightly.Restarts` as the session grants it: one restart confirms
every key measured on the start before it, at most `max_restarts` a night), the verdict
(`nightly.judge_night`), the mark each night is stored with (`nightly.stored_status`) and what a
history keeps (`store.records.kept_runs`).

Each server start's speed comes from the simulator's own night model (`pytest_specperf.sim.nights`:
node pools, level shifts, drifts, heavy tails, correlated nights), each round adds round noise.

The model of a key's nights is benchmarks/night_model.py; the scenarios of a speculative key judged on
its speedup (a node that swings, the default gate in a suite) are benchmarks/speedup_nights.py.

The "(draw again when beyond)" rows are not the plugin's rule: they take a second draw of a speedup
(both servers started again) whenever its estimate alone is beyond the tolerance, to show what a
-10% speedup flagged within three nights in 90% would cost in starts. Nor are the "(beyond at 95%)" and
"(beyond at 99%)" rows: they ask a REGRESSION's tolerance question at one-sided 95% or 99% instead of
90%, to show what no REGRESSION at all of an unchanged speedup would cost in REGRESSIONs of a changed one.

    python benchmarks/verdict_nights.py                  # the table in docs/benchmarks.md
    python benchmarks/verdict_nights.py --trials 200     # a quicker look
    python benchmarks/verdict_nights.py --only unchanged,pool
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor

import numpy as np
from night_model import (
    HEAVY,
    MAX_RESTARTS,
    MAX_ROUNDS,
    NORMAL,
    ROUND_CV,
    ROUNDS,
    TOLERANCE,
    Key,
    Restarts,
    flagged,
    grown,
    nights,
    one_night,
    restarted,
    store,
    upper_95,
)
from scipy.stats import t as student_t
from speedup_nights import beyond_at, node_swing, node_swing_change, speedup_suite, speedup_suite_change

from pytest_specperf.sim.nights import NightNoise
from pytest_specperf.verdict.nightly import BEYOND_CONFIDENCE
from pytest_specperf.verdict.stats import TWO_SIDED_90, TWO_SIDED_98, Decision

# --- scenarios: each returns {measure: share} over `trials` -------------------------------------------


def unchanged(noise: NightNoise, trials: int, rng: np.random.Generator) -> dict[str, float]:
    """One unchanged night after 10 recorded runs, then 30 more: false REGRESSIONs (per night checked),
    SUSPECT nights and second starts."""
    counts = dict.fromkeys(
        (
            "false REGRESSION (first night)",
            "SUSPECT (first night)",
            "second start (first night)",
            "REGRESSION within 30 more",
        ),
        0.0,
    )
    checks = red = 0
    for _ in range(trials):
        key = grown(noise, rng)
        first, *later = nights(key, rng, 31)
        counts["false REGRESSION (first night)"] += flagged(first)
        counts["SUSPECT (first night)"] += first.verdict is not None and first.verdict.decision is Decision.SUSPECT
        counts["second start (first night)"] += restarted(first)
        counts["REGRESSION within 30 more"] += any(flagged(n) for n in later)
        checks += 31
        red += flagged(first) + sum(flagged(n) for n in later)
    shares = {k: v / trials for k, v in counts.items()}
    shares["false REGRESSION per check"] = red / checks
    return shares


def pool(noise: NightNoise, trials: int, rng: np.random.Generator) -> dict[str, float]:
    """A two-level node pool: each start lands on a pool 12% slower with probability 1/2. 30 nights after
    10 recorded runs: the share of nights that are a false REGRESSION."""
    pooled = dataclasses.replace(noise, pool_share=0.5, pool_slowdown=0.12)
    red = total = 0
    for _ in range(trials):
        key = grown(pooled, rng)
        later = nights(key, rng, 30)
        red += sum(flagged(n) for n in later)
        total += len(later)
    return {"nights with a false REGRESSION": red / total}


def persistent(change: float, count: int = 3):
    def scenario(noise: NightNoise, trials: int, rng: np.random.Generator) -> dict[str, float]:
        first = within = 0
        for _ in range(trials):
            caught = [flagged(n) for n in nights(grown(noise, rng), rng, count, 1.0 - change)]
            first += caught[0]
            within += any(caught)
        return {"first night": first / trials, f"within {count} nights": within / trials}

    return scenario


def pooled_ceiling(change: float, count: int = 3, servers: int = 1):
    """What no night-by-night rule can beat: an oracle that knows which nights the change began with
    and pools every start of `count` nights (one, or two each) against the 10 recorded runs, flagged
    when the interval (at `BEYOND_CONFIDENCE`) lies wholly beyond the tolerance, as a REGRESSION's must.
    `servers`: how many servers' start offsets and round noise one draw carries (2 for a speedup over
    the same-session reference: the node cancels, the two starts do not)."""

    def scenario(noise: NightNoise, trials: int, rng: np.random.Generator) -> dict[str, float]:
        start_sd = math.sqrt(servers * (noise.cv**2 + ROUND_CV**2 / ROUNDS))
        reach = float(student_t.ppf((1.0 + BEYOND_CONFIDENCE) / 2.0, 9))
        shares = {}
        for per_night in (1, 2):
            starts, hits = count * per_night, 0
            for _ in range(trials):
                history = rng.normal(0.0, start_sd, 10)
                tonight = rng.normal(math.log(1.0 - change), start_sd, starts)
                se = math.sqrt(history.var(ddof=1) * (1.0 / starts + 1.0 / 10))
                hits += tonight.mean() - history.mean() + reach * se < math.log(1.0 - TOLERANCE.max_regression)
            shares[f"{count} nights of {per_night} start{'s' if per_night > 1 else ''} pooled (oracle)"] = hits / trials
        return shares

    return scenario


def improvement_lost(noise: NightNoise, trials: int, rng: np.random.Generator) -> dict[str, float]:
    """+15% for 15 nights, then back to the accepted level for 15: keys with any REGRESSION."""
    red = 0
    for _ in range(trials):
        key = grown(noise, rng)
        later = nights(key, rng, 30, lambda n: 1.15 if n < 15 else 1.0)
        red += any(flagged(n) for n in later)
    return {"keys with a REGRESSION": red / trials}


def shared_start(noise: NightNoise, trials: int, rng: np.random.Generator, keys: int = 20) -> dict[str, float]:
    """20 keys of one server: their start offsets correlate at 0.8; second starts granted as the session
    grants them (in order, one restart for every key measured before it, `max_restarts` a night)."""
    bad_nights = restart_nights = 0
    for _ in range(trials):
        common = (int(rng.integers(2**31)), noise)
        suite = [Key(int(rng.integers(2**31)), noise, common=common) for _ in range(keys)]
        for key in suite:
            while len(key.history) < 10:
                nights(key, rng, 1)
        server, restarts = [1], Restarts(MAX_RESTARTS)
        tonight = [one_night(key, rng, 1.0, server, restarts, searches=keys, keys=keys) for key in suite]
        for night in tonight:
            store(night)
        bad_nights += any(flagged(n) for n in tonight)
        restart_nights += restarts.used > 0
    return {"nights with a false REGRESSION": bad_nights / trials, "nights with a restart": restart_nights / trials}


def suite_restarts(noise: NightNoise, trials: int, rng: np.random.Generator, servers: int = 5, keys: int = 20):
    """What the rules cost on a GPU: 5 servers x 20 unchanged keys (offsets of one server's keys correlate
    at 0.8), histories of 10 nights grown night by night, then one night: second starts (server restarts)
    per night, granted as the session grants them (`max_restarts` per session)."""
    red = suspect = 0
    restarts: list[float] = []
    for _ in range(trials):
        suite = []
        for _ in range(servers):
            common = (int(rng.integers(2**31)), noise)
            suite.append([Key(int(rng.integers(2**31)), noise, common=common) for _ in range(keys)])
        for key in (k for server in suite for k in server):
            while len(key.history) < 10:
                nights(key, rng, 1)
        granted = Restarts(MAX_RESTARTS)
        for index, server in enumerate(suite):
            on = [1]
            tonight = [
                one_night(key, rng, 1.0, on, granted, searches=servers * keys, keys=keys, name=str(index))
                for key in server
            ]
            red += any(flagged(n) for n in tonight)
            suspect += sum(n.verdict is not None and n.verdict.decision is Decision.SUSPECT for n in tonight)
        restarts.append(granted.used)
    return {
        "second starts per key and night (x100: per night)": sum(restarts) / trials / (servers * keys),
        "the same, one-sided 95% upper bound over suites (x100: per night)": upper_95(restarts) / (servers * keys),
        "nights with a false REGRESSION": red / trials,
        "SUSPECT keys per night (share of keys)": suspect / trials / (servers * keys),
    }


SCENARIOS: dict[str, tuple[Callable[..., dict[str, float]], list[tuple[str, NightNoise]]]] = {
    "unchanged": (
        unchanged,
        [
            ("normal", NORMAL),
            ("t3", HEAVY),
            ("normal, night SD 3%", NightNoise(cv=0.03)),
            ("AR(1) 0.6", NightNoise(cv=0.02, rho=0.6)),
        ],
    ),
    "pool": (pool, [("normal", NORMAL)]),
    "-10%": (persistent(0.10), [("normal", NORMAL), ("t3", HEAVY)]),
    "-8%": (persistent(0.08), [("normal", NORMAL)]),
    "+15% then back": (improvement_lost, [("normal", NORMAL)]),
    "20 keys": (shared_start, [("normal", NORMAL), ("normal, night SD 3%", NightNoise(cv=0.03))]),
    "-8% ceiling": (pooled_ceiling(0.08), [("normal", NORMAL)]),
    "node x2 unchanged": (node_swing, [("normal", NORMAL)]),
    "node x2 speedup -10%": (node_swing_change, [("normal", NORMAL)]),
    "5 servers x 20 keys": (suite_restarts, [("start SD 2%", NORMAL), ("start SD 5%", NightNoise(cv=0.05))]),
    # what a -10% speedup within three nights in 90% would take (new scenarios last: each cell keeps its seed)
    "node x2 speedup -10% ceiling": (pooled_ceiling(0.10, servers=2), [("normal", NORMAL)]),
    "node x2 unchanged (draw again when beyond)": (functools.partial(node_swing, eager=True), [("normal", NORMAL)]),
    "node x2 speedup -10% (draw again when beyond)": (
        functools.partial(node_swing_change, eager=True),
        [("normal", NORMAL)],
    ),
    "node still unchanged": (functools.partial(node_swing, swing=0.0), [("normal", NORMAL)]),
    "5 servers x 20 keys (gate = speedup)": (
        speedup_suite,
        [("start SD 2%", NORMAL), ("start SD 5%", NightNoise(cv=0.05))],
    ),
    "5 servers x 20 keys (gate = speedup; asked per server)": (
        functools.partial(speedup_suite, rule="server"),
        [("start SD 2%", NORMAL), ("start SD 5%", NightNoise(cv=0.05))],
    ),
    "5 servers x 20 keys (gate = speedup; asked among all)": (
        functools.partial(speedup_suite, rule="always"),
        [("start SD 2%", NORMAL), ("start SD 5%", NightNoise(cv=0.05))],
    ),
    "5 servers x 20 keys (gate = speedup): one server's speedup -10%": (
        speedup_suite_change,
        [("normal", NORMAL), ("start SD 5%", NightNoise(cv=0.05))],
    ),
    "5 servers x 20 keys (gate = speedup; asked per server): one server's speedup -10%": (
        functools.partial(speedup_suite_change, rule="server"),
        [("normal", NORMAL)],
    ),
    "5 servers x 20 keys (gate = speedup; asked among all): one server's speedup -10%": (
        functools.partial(speedup_suite_change, rule="always"),
        [("normal", NORMAL)],
    ),
    # what "no REGRESSION of an unchanged speedup" would cost: the tolerance question asked stricter
    "node x2 unchanged (beyond at 95%)": (beyond_at(TWO_SIDED_90, node_swing), [("normal", NORMAL)]),
    "node x2 speedup -10% (beyond at 95%)": (beyond_at(TWO_SIDED_90, node_swing_change), [("normal", NORMAL)]),
    "node x2 unchanged (beyond at 99%)": (beyond_at(TWO_SIDED_98, node_swing), [("normal", NORMAL)]),
    "node x2 speedup -10% (beyond at 99%)": (beyond_at(TWO_SIDED_98, node_swing_change), [("normal", NORMAL)]),
}
#: Scenarios whose trials are suites (many keys each): a tenth, or a hundredth, of the trials.
SUITE_SHARE = {"20 keys": 10, "5 servers x 20 keys": 100} | {
    name: 100 for name in SCENARIOS if name.startswith("5 servers x 20 keys (gate = speedup")
}


def run_cell(args: tuple[str, str, NightNoise, int, int]) -> tuple[str, str, dict[str, float], float]:
    name, label, noise, trials, seed = args
    started = time.perf_counter()
    shares = SCENARIOS[name][0](noise, trials, np.random.default_rng(seed))
    return name, label, shares, time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=20261202)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--only", default="", help="comma-separated scenarios: " + ", ".join(SCENARIOS).replace("%", "%%")
    )
    args = parser.parse_args(argv)
    only = [s for s in args.only.split(",") if s] or list(SCENARIOS)
    cells = []
    for i, name in enumerate(SCENARIOS):
        for j, (label, noise) in enumerate(SCENARIOS[name][1]):
            if name in only:
                trials = args.trials // SUITE_SHARE.get(name, 1)
                cells.append((name, label, noise, max(trials, 10), args.seed + 100 * i + j))
    print(
        f"nightly gate, max_regression 5%, {ROUNDS} rounds (+{MAX_ROUNDS - ROUNDS} and a second start when "
        f"not MET), history of 10 recorded runs grown night by night; start SD 2%, round CV 3% unless said"
    )
    print("| scenario | nights | measure | share |\n|---|---|---|---|")
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.jobs) as workers:
        for name, label, shares, _ in workers.map(run_cell, cells):
            trials = max(args.trials // SUITE_SHARE.get(name, 1), 10)
            for measure, share in shares.items():
                shown = f"{100 * share:.2f}%" if share >= 5e-5 or not share else f"{100 * share:.2g}%"
                print(f"| {name} | {label} | {measure} | {shown} (n={trials}) |")
    print(f"({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
