"""Monte Carlo error rates of the regression check under the adaptive rounds policy.

Why: a nightly perf suite is only useful if it rarely cries wolf and reliably catches real
regressions. This script measures both for `stats.decide_regression` with its defaults, exactly as
the plugin uses it: the stored baseline has 5 rounds; the current measurement starts with 5 and,
while the check is INCONCLUSIVE, gets one more round at a time up to max_rounds (10). Only a final
MISSED is an alarm. Rounds are synthetic normal samples with the given coefficient of variation.

    python benchmarks/verdict_power.py                      # the table in the docs
    python benchmarks/verdict_power.py --confidence 0.95    # explore another interval level
    python benchmarks/verdict_power.py --nights             # single baseline vs history, with night-to-night spread
    python benchmarks/verdict_power.py --nights --goal --trials 10000                         # goal cells only

`--nights` simulates a nightly gate where every server start has its own offset (night SD): the
single-baseline check (tonight's rounds vs one stored run's rounds, stats.decide_regression) and
the history check (tonight vs the segment's recorded runs, verdict/history.py, prior
run_to_run_cv 2% below 3 runs) side by side, both under the adaptive policy the plugin uses.
The history check adds rounds while INCONCLUSIVE as history.advise_history says: while rounds are
expected to resolve it at tonight's estimate, and up to max_rounds while tonight's estimate lies
beyond the tolerance. The full table takes ~3 min at 2000 trials on 2 cores; `--goal` runs only the
cells the detection goal is stated for.

A change equal to max_regression sits exactly on the tolerance: a MISSED there is the worst-case
false alarm, and its rate is what the one-sided level bounds per look.
"""

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np

from pytest_specperf.verdict.history import advise_history, compare_with_history
from pytest_specperf.verdict.stats import (
    DEFAULT_CONFIDENCE,
    DEFAULT_MAX_ROUNDS,
    DEFAULT_ROUNDS,
    Decision,
    Direction,
    classify_ratio,
    decide_regression,
)

CVS = (0.01, 0.03, 0.05)
CHANGES = (0.0, 0.05, 0.10)
MEAN = 100.0


@dataclass(frozen=True)
class Cell:
    """One (CV, true change) combination to simulate."""

    cv: float
    change: float
    seed: int
    trials: int
    rounds: int
    max_rounds: int
    max_regression: float
    confidence: float
    direction: Direction


@dataclass(frozen=True)
class CellResult:
    """Shares of final decisions, mean rounds used, and the first-look alarm share for comparison."""

    cell: Cell
    alarm: float
    inconclusive: float
    mean_rounds: float
    first_look_alarm: float


def simulate(cell: Cell) -> CellResult:
    """Run the adaptive policy ``cell.trials`` times on fresh synthetic baselines and currents."""
    rng = np.random.default_rng(cell.seed)
    worse = 1.0 - cell.change if cell.direction is Direction.HIGHER_IS_BETTER else 1.0 + cell.change
    base = rng.normal(MEAN, cell.cv * MEAN, size=(cell.trials, cell.rounds)).tolist()
    cur = rng.normal(MEAN * worse, cell.cv * MEAN * worse, size=(cell.trials, cell.max_rounds)).tolist()
    alarms = inconclusive = first_alarms = rounds_used = 0
    for b, c in zip(base, cur, strict=True):
        n = cell.rounds
        while True:
            decision = decide_regression(
                c[:n], b, cell.max_regression, cell.direction, confidence=cell.confidence
            ).decision
            if n == cell.rounds:
                first_alarms += decision is Decision.MISSED
            if decision is not Decision.INCONCLUSIVE or n >= cell.max_rounds:
                break
            n += 1
        alarms += decision is Decision.MISSED
        inconclusive += decision is Decision.INCONCLUSIVE
        rounds_used += n
    t = cell.trials
    return CellResult(cell, alarms / t, inconclusive / t, rounds_used / t, first_alarms / t)


def _pct(x: float) -> str:
    return f"{100 * x:5.1f}%"


def render(results: list[CellResult], args: argparse.Namespace) -> str:
    """The table: rows per CV; alarm share per true change, then rounds and inconclusive shares."""
    by = {(r.cell.cv, r.cell.change): r for r in results}
    sign = "-" if args.direction is Direction.HIGHER_IS_BETTER else "+"
    lines = [
        f"regression check, {args.direction.value}, max_regression={args.max_regression:g}, "
        f"confidence={args.confidence:g} two-sided (one-sided {(1 + args.confidence) / 2:g} per claim)",
        f"baseline {args.rounds} rounds; current {args.rounds} rounds, +1 while INCONCLUSIVE up to "
        f"{args.max_rounds}; {args.trials} trials per cell, seed {args.seed}",
        "",
        f"{'CV':>4} | {'false alarm':>11} | {'detect ' + sign + '5%':>10} | {'detect ' + sign + '10%':>11} |"
        f" {'mean rounds (0/5/10%)':>21} | {'inconclusive (0/5/10%)':>24} |"
        f" {'5 rounds only: FA/' + sign + '5/' + sign + '10':>26}",
    ]
    lines.append("-" * len(lines[-1]))
    for cv in CVS:
        row = [by[(cv, ch)] for ch in CHANGES]
        rounds = " / ".join(f"{r.mean_rounds:.1f}" for r in row)
        inconc = "/".join(_pct(r.inconclusive).strip() for r in row)
        first = "/".join(_pct(r.first_look_alarm).strip() for r in row)
        lines.append(
            f"{cv:>4.0%} | {_pct(row[0].alarm):>11} | {_pct(row[1].alarm):>10} | {_pct(row[2].alarm):>11} |"
            f" {rounds:>21} | {inconc:>24} | {first:>26}"
        )
    se = 100 * np.sqrt(0.25 / args.trials)
    lines.append(f"(binomial standard error of any share <= {se:.2f} points)")
    return "\n".join(lines)


# --- nights: single baseline vs history ---------------------------------------------------------------

NIGHT_SDS = (0.0, 0.01, 0.02, 0.03)
ROUND_CVS = (0.01, 0.03)
RECORDED = (1, 3, 10, 30)
PRIOR_CV = 0.02
CHECKS_PER_NIGHT = 20
#: The cells the detection goals are stated for (night SD 2%, round CV 3%, >= 5 recorded runs): `--goal`.
GOAL_CELLS = {(0.02, 0.03, 10), (0.02, 0.03, 30)}


@dataclass(frozen=True)
class NightCell:
    night_sd: float
    round_cv: float
    recorded: int
    seed: int
    trials: int
    rounds: int = DEFAULT_ROUNDS
    max_rounds: int = DEFAULT_MAX_ROUNDS


@dataclass(frozen=True)
class NightResult:
    """Per check: false alarm share; detection of -5%/-10% on the first night and within 3 nights."""

    cell: NightCell
    single: tuple[float, float, float, float, float, float]  # FA, d5 first, d5 in 3, d10 first, d10 in 3, rounds
    history: tuple[float, float, float, float, float, float]


def _run(rng: np.random.Generator, level: float, sd: float, cv: float, n: int) -> list[float]:
    offset = float(np.exp(rng.normal(0.0, sd))) if sd else 1.0
    return (level * offset * (1.0 + rng.normal(0.0, cv, size=n))).tolist()


def _single(current: list[float], baseline: list[float], rounds: int, max_rounds: int) -> tuple[bool, int]:
    n = rounds
    while True:
        decision = decide_regression(current[:n], baseline, 0.05, Direction.HIGHER_IS_BETTER).decision
        if decision is not Decision.INCONCLUSIVE or n >= max_rounds:
            return decision is Decision.MISSED, n
        n += 1


def _history(current: list[float], runs: list[list[float]], rounds: int, max_rounds: int) -> tuple[bool, int, bool]:
    """(alarm, rounds used, recorded): a run is recorded unless flagged or its ratio's point
    estimate lies beyond the tolerance (session.py: a suspect night does not become normal)."""
    n = rounds
    while True:
        comparison = compare_with_history(current[:n], runs, PRIOR_CV)
        outcome = classify_ratio(comparison.ratio, 0.05, Direction.HIGHER_IS_BETTER)
        suspect = comparison.ratio.value < outcome.regression_bound
        if outcome.decision is not Decision.INCONCLUSIVE or n >= max_rounds:
            alarm = outcome.decision is Decision.MISSED
            return alarm, n, not alarm and not suspect
        helps = advise_history(comparison, outcome.regression_bound, outcome.decision, max_rounds=max_rounds).helps
        if not helps:
            return False, n, not suspect
        n += 1


def simulate_nights(cell: NightCell) -> NightResult:
    """For each trial: `recorded` unchanged runs are in the history (the newest is the single
    baseline); then an unchanged night (false alarm?), and 3 nights after a -5% or -10% change.
    A changed night that is not flagged is recorded (as --specperf-record does) unless its point
    estimate is beyond the tolerance, so the history may absorb part of a change; the single
    baseline stays until someone updates it."""
    rng = np.random.default_rng(cell.seed)
    rounds, max_rounds = cell.rounds, cell.max_rounds
    single = np.zeros(6)
    hist = np.zeros(6)
    for _ in range(cell.trials):
        runs = [_run(rng, MEAN, cell.night_sd, cell.round_cv, rounds) for _ in range(cell.recorded)]
        tonight = _run(rng, MEAN, cell.night_sd, cell.round_cv, max_rounds)
        alarm, n = _single(tonight, runs[-1], rounds, max_rounds)
        single[0] += alarm
        single[5] += n
        alarm, n, _ = _history(tonight, runs, rounds, max_rounds)
        hist[0] += alarm
        hist[5] += n
        for column, change in ((1, 0.05), (3, 0.10)):
            history = [list(r) for r in runs]
            caught_single = caught_history = None
            for night in range(3):
                current = _run(rng, MEAN * (1 - change), cell.night_sd, cell.round_cv, max_rounds)
                if caught_single is None and _single(current, runs[-1], rounds, max_rounds)[0]:
                    caught_single = night
                if caught_history is None:
                    alarm, _, recorded = _history(current, history, rounds, max_rounds)
                    if alarm:
                        caught_history = night
                    elif recorded:
                        history = [*history, current[:rounds]][-30:]
            single[column] += caught_single == 0
            single[column + 1] += caught_single is not None
            hist[column] += caught_history == 0
            hist[column + 1] += caught_history is not None
    t = cell.trials
    return NightResult(cell, tuple(single / t), tuple(hist / t))


def render_nights(results: list[NightResult], args: argparse.Namespace) -> str:
    lines = [
        f"single baseline (S) vs history (H): max_regression 5%, {args.rounds} rounds (+1 while INCONCLUSIVE, "
        f"up to {args.max_rounds}; the history check as history.advise_history says), prior run_to_run_cv "
        f"{PRIOR_CV:.0%}; {args.trials} trials per cell, seed {args.seed}",
        f"FA: false REGRESSION per check; night: nights with >= 1 among {CHECKS_PER_NIGHT} independent checks",
        "",
        "| night SD | round CV | runs | FA S | FA H | night S | night H | -5% 1st S/H | -5% <=3 S/H "
        "| -10% 1st S/H | -10% <=3 S/H | rounds S/H |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        s, h, c = r.single, r.history, r.cell

        def night(fa: float) -> str:
            return f"{100 * (1 - (1 - fa) ** CHECKS_PER_NIGHT):.0f}%"

        lines.append(
            f"| {c.night_sd:.0%} | {c.round_cv:.0%} | {c.recorded} | {100 * s[0]:.2f}% | {100 * h[0]:.2f}% "
            f"| {night(s[0])} | {night(h[0])} | {100 * s[1]:.0f}/{100 * h[1]:.0f}% "
            f"| {100 * s[2]:.0f}/{100 * h[2]:.0f}% | {100 * s[3]:.0f}/{100 * h[3]:.0f}% "
            f"| {100 * s[4]:.0f}/{100 * h[4]:.0f}% | {s[5]:.1f}/{h[5]:.1f} |"
        )
    return "\n".join(lines)


def main_nights(args: argparse.Namespace) -> int:
    cells = []
    seeds = np.random.SeedSequence(args.seed).generate_state(len(NIGHT_SDS) * len(ROUND_CVS) * len(RECORDED))
    for i, sd in enumerate(NIGHT_SDS):
        for j, cv in enumerate(ROUND_CVS):
            for k, recorded in enumerate(RECORDED):
                index = (i * len(ROUND_CVS) + j) * len(RECORDED) + k  # a cell's seed does not depend on --goal
                if args.goal and (sd, cv, recorded) not in GOAL_CELLS:
                    continue
                cells.append(
                    NightCell(
                        sd, cv, recorded, int(seeds[index]), args.trials, args.rounds, args.max_rounds,
                    )
                )  # fmt: skip
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(simulate_nights, cells))
    print(render_nights(results, args))
    print(f"({time.perf_counter() - start:.1f} s)")
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=20_000)
    p.add_argument("--seed", type=int, default=20240917)
    p.add_argument("--confidence", type=float, default=DEFAULT_CONFIDENCE)
    p.add_argument("--max-regression", type=float, default=0.05)
    p.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS)
    p.add_argument("--max-rounds", type=int, default=DEFAULT_MAX_ROUNDS)
    p.add_argument("--direction", choices=[d.value for d in Direction], default="higher_is_better")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--nights", action="store_true", help="single baseline vs history under night-to-night spread")
    p.add_argument("--goal", action="store_true", help="--nights: only the cells of the detection goal (quick)")
    args = p.parse_args(argv)
    args.direction = Direction(args.direction)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.nights:
        return main_nights(args)
    seeds = np.random.SeedSequence(args.seed).generate_state(len(CVS) * len(CHANGES))
    cells = [
        Cell(cv, ch, int(seeds[i * len(CHANGES) + j]), args.trials, args.rounds, args.max_rounds,
             args.max_regression, args.confidence, args.direction)
        for i, cv in enumerate(CVS)
        for j, ch in enumerate(CHANGES)
    ]  # fmt: skip
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(simulate, cells))
    print(render(results, args))
    print(f"({time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
