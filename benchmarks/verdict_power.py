"""Monte Carlo error rates of the round-only regression check, with the two fixed looks.

Why: `specperf diff` of two JSON reports compares one measurement's rounds with another's
(`stats.decide_regression`), with no history and no start-to-start spread: where starts do not
differ (a deterministic simulator, or rounds of one server start) this is the whole story. The
stored baseline has 5 rounds; the current measurement is judged after 5 rounds and, when not MET,
once more after 10 (the two looks the plugin takes). Only a final MISSED is an alarm. Rounds are
synthetic normal samples with the given coefficient of variation. The nightly gate against a
history of server starts is benchmarks/verdict_nights.py.

    python benchmarks/verdict_power.py                      # the table in docs/benchmarks.md
    python benchmarks/verdict_power.py --confidence 0.95    # explore another interval level

A change equal to max_regression sits exactly on the tolerance: a MISSED there is the worst-case
false alarm, and its rate is what the one-sided level bounds per look (5%), raised by the second look.
"""

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np

from pytest_specperf.verdict.stats import (
    DEFAULT_CONFIDENCE,
    DEFAULT_MAX_ROUNDS,
    DEFAULT_ROUNDS,
    Decision,
    Direction,
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
    suspect: float
    mean_rounds: float
    first_look_alarm: float


def simulate(cell: Cell) -> CellResult:
    """Run the adaptive policy ``cell.trials`` times on fresh synthetic baselines and currents."""
    rng = np.random.default_rng(cell.seed)
    worse = 1.0 - cell.change if cell.direction is Direction.HIGHER_IS_BETTER else 1.0 + cell.change
    base = rng.normal(MEAN, cell.cv * MEAN, size=(cell.trials, cell.rounds)).tolist()
    cur = rng.normal(MEAN * worse, cell.cv * MEAN * worse, size=(cell.trials, cell.max_rounds)).tolist()
    alarms = suspect = first_alarms = rounds_used = 0
    for b, c in zip(base, cur, strict=True):
        n = cell.rounds
        decision = decide_regression(c[:n], b, cell.max_regression, cell.direction, confidence=cell.confidence).decision
        first_alarms += decision is Decision.MISSED
        if decision is not Decision.MET:  # the second look: the extension's rounds
            n = cell.max_rounds
            decision = decide_regression(
                c[:n], b, cell.max_regression, cell.direction, confidence=cell.confidence
            ).decision
        alarms += decision is Decision.MISSED
        suspect += decision is Decision.SUSPECT
        rounds_used += n
    t = cell.trials
    return CellResult(cell, alarms / t, suspect / t, rounds_used / t, first_alarms / t)


def _pct(x: float) -> str:
    return f"{100 * x:5.1f}%"


def render(results: list[CellResult], args: argparse.Namespace) -> str:
    """The table: rows per CV; alarm share per true change, then rounds and suspect shares."""
    by = {(r.cell.cv, r.cell.change): r for r in results}
    sign = "-" if args.direction is Direction.HIGHER_IS_BETTER else "+"
    lines = [
        f"regression check, {args.direction.value}, max_regression={args.max_regression:g}, "
        f"confidence={args.confidence:g} two-sided (one-sided {(1 + args.confidence) / 2:g} per claim)",
        f"baseline {args.rounds} rounds; current {args.rounds} rounds, judged again at {args.max_rounds} when not "
        f"MET; {args.trials} trials per cell, seed {args.seed}",
        "",
        f"{'CV':>4} | {'false alarm':>11} | {'detect ' + sign + '5%':>10} | {'detect ' + sign + '10%':>11} |"
        f" {'mean rounds (0/5/10%)':>21} | {'suspect (0/5/10%)':>24} |"
        f" {'5 rounds only: FA/' + sign + '5/' + sign + '10':>26}",
    ]
    lines.append("-" * len(lines[-1]))
    for cv in CVS:
        row = [by[(cv, ch)] for ch in CHANGES]
        rounds = " / ".join(f"{r.mean_rounds:.1f}" for r in row)
        inconc = "/".join(_pct(r.suspect).strip() for r in row)
        first = "/".join(_pct(r.first_look_alarm).strip() for r in row)
        lines.append(
            f"{cv:>4.0%} | {_pct(row[0].alarm):>11} | {_pct(row[1].alarm):>10} | {_pct(row[2].alarm):>11} |"
            f" {rounds:>21} | {inconc:>24} | {first:>26}"
        )
    se = 100 * np.sqrt(0.25 / args.trials)
    lines.append(f"(binomial standard error of any share <= {se:.2f} points)")
    return "\n".join(lines)


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
    args = p.parse_args(argv)
    args.direction = Direction(args.direction)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    seeds = np.random.SeedSequence(args.seed).generate_state(len(CVS) * len(CHANGES))
    cells = [
        Cell(
            cv,
            ch,
            int(seeds[i * len(CHANGES) + j]),
            args.trials,
            args.rounds,
            args.max_rounds,
            args.max_regression,
            args.confidence,
            args.direction,
        )
        for i, cv in enumerate(CVS)
        for j, ch in enumerate(CHANGES)
    ]
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(simulate, cells))
    print(render(results, args))
    print(f"({time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
