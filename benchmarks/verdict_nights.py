"""Monte Carlo of the nightly gate on modelled real nights, through the plugin's own verdict engine.

Why: a nightly gate is only useful if it rarely cries wolf on the nights real CI produces and
catches real changes within a night or three. Real nights are not iid normal: start offsets have
heavy tails, one bad night ends up in the history, runs drift, a suite has many keys that share a
server start, and CI series are autocorrelated. Each trial here grows its history night by night
through `nightly.judge_night` and the storing rule the plugin applies (`nightly.stored_status`),
with the look schedule the plugin follows (`nightly.second_look`: `rounds` rounds; when not MET,
the start is extended to `max_rounds`; when still beyond the tolerance, a second server start).

    python benchmarks/verdict_nights.py                  # the README table (~10 min on 2 cores)
    python benchmarks/verdict_nights.py --trials 500     # a quicker look
    python benchmarks/verdict_nights.py --only unchanged,outlier

Model of one server start: every round of it is level x exp(offset) x (1 + round CV x N(0, 1)),
the offset drawn per start from a normal or a Student t with 3 df scaled to the same SD; with
`--rho`, nights' offsets follow an AR(1) process (a restart on the same night keeps that night's
offset: the slow part of a machine's state does not change with a restart).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from pytest_specperf.verdict.nightly import (
    NightVerdict,
    PastRun,
    SecondLook,
    Tolerance,
    judge_night,
    second_look,
    stored_status,
)
from pytest_specperf.verdict.stats import Decision

ROUNDS, MAX_ROUNDS, HISTORY = 5, 10, 30
TOLERANCE = Tolerance(0.05)


@dataclass(frozen=True)
class World:
    """How nights are drawn."""

    night_sd: float = 0.02
    round_cv: float = 0.03
    heavy: bool = False  # Student t (3 df) offsets with the same SD
    rho: float = 0.0  # AR(1) correlation of nights' offsets


@dataclass
class Key:
    """One key's history and its offset process."""

    world: World
    rng: np.random.Generator
    history: list[PastRun] = field(default_factory=list)
    offset: float = 0.0
    nights: int = 0

    def new_night(self, common: float | None = None) -> None:
        w = self.world
        fresh = self._offset(common)
        self.offset = w.rho * self.offset + math.sqrt(1 - w.rho * w.rho) * fresh if w.rho else fresh

    def _offset(self, common: float | None) -> float:
        """A start's offset; `common` (unit SD) is the part every key of a shared start has (0.8)."""
        own = self._unit()
        unit = own if common is None else math.sqrt(0.8) * common + math.sqrt(0.2) * own
        return self.world.night_sd * unit

    def _unit(self) -> float:
        if self.world.heavy:
            return float(self.rng.standard_t(3)) / math.sqrt(3.0)
        return float(self.rng.standard_normal())

    def start(self, level: float, rounds: int, restart: bool = False, common: float | None = None) -> list[float]:
        """Round samples of one server start; a restart draws a new offset (not with AR nights)."""
        w = self.world
        offset = self._offset(common) if restart and not w.rho else self.offset
        noise = self.rng.standard_normal(rounds)
        return (level * math.exp(offset) * (1.0 + w.round_cv * noise)).tolist()


@dataclass
class Night:
    """What one night of one key came to."""

    verdict: NightVerdict
    restarted: bool
    starts: list[list[float]]


def first_look(key: Key, level: float, searches: int = 1) -> tuple[list[float], NightVerdict]:
    samples = key.start(level, MAX_ROUNDS)
    return samples, judge_night([samples[:ROUNDS]], key.history, TOLERANCE, searches=searches, rounds=ROUNDS)


def finish(
    key: Key, level: float, samples: list[float], first: NightVerdict, *, can_restart: bool = True,
    second: Callable[[], list[float]] | None = None, searches: int = 1,
) -> Night:  # fmt: skip
    """The rest of the look schedule after `first`, then the night is stored as the plugin does."""
    step = second_look(first.decision, can_restart=can_restart)
    if step is SecondLook.NONE:
        night = Night(first, False, [samples[:ROUNDS]])
    else:
        extended = judge_night([samples], key.history, TOLERANCE, searches=searches, rounds=ROUNDS)
        if extended.decision is Decision.MET or step is SecondLook.EXTEND:
            night = Night(extended, False, [samples])
        else:
            other = second() if second is not None else key.start(level, ROUNDS, restart=True)
            both = judge_night([samples, other], key.history, TOLERANCE, searches=searches, rounds=ROUNDS)
            night = Night(both, True, [samples, other])
    store(key, night)
    return night


def store(key: Key, night: Night) -> None:
    """Every start of the night, as the plugin stores them; the history keeps the newest HISTORY nights."""
    key.nights += 1
    status = stored_status(night.verdict.decision)
    key.history += [PastRun(tuple(samples[:ROUNDS]), status, str(key.nights)) for samples in night.starts]
    oldest = str(key.nights - HISTORY + 1)
    while key.history and key.history[0].night is not None and int(key.history[0].night) < int(oldest):
        del key.history[0]


def one_night(key: Key, level: float = 1.0, searches: int = 1) -> Night:
    key.new_night()
    samples, first = first_look(key, level, searches)
    return finish(key, level, samples, first, searches=searches)


def grown(world: World, rng: np.random.Generator, runs: int = 10) -> Key:
    """A key whose history grew night by night from nothing, as the plugin grows it."""
    key = Key(world, rng)
    while sum(1 for r in key.history if r.status.counted) < runs:
        one_night(key)
    return key


def flagged(night: Night) -> bool:
    return night.verdict.decision is Decision.MISSED


# --- scenarios: each returns {measure: share} over `trials` -------------------------------------------


def unchanged(world: World, trials: int, rng: np.random.Generator) -> dict[str, float]:
    """One unchanged night after 10 recorded runs: its outcome and whether it restarted; then 30
    more unchanged nights: a change warning or a false REGRESSION among them."""
    counts = dict.fromkeys(("false REGRESSION", "suspect or inconclusive", "restart", "change within 30",
                            "REGRESSION within 30"), 0.0)  # fmt: skip
    for _ in range(trials):
        key = grown(world, rng)
        night = one_night(key)
        counts["false REGRESSION"] += flagged(night)
        counts["suspect or inconclusive"] += night.verdict.decision in (Decision.SUSPECT, Decision.INCONCLUSIVE)
        counts["restart"] += night.restarted
        changed = regressed = False
        for _ in range(30):
            later = one_night(key)
            changed |= later.verdict.change is not None
            regressed |= flagged(later)
        counts["change within 30"] += changed
        counts["REGRESSION within 30"] += regressed
    return {k: v / trials for k, v in counts.items()}


def persistent(change: float, nights: int = 3, outlier: bool = False):
    def scenario(world: World, trials: int, rng: np.random.Generator) -> dict[str, float]:
        first = within = 0
        for _ in range(trials):
            key = grown(world, rng)
            if outlier:  # one -15% run among the recorded ones, as a night that slipped through
                runs = [i for i, r in enumerate(key.history) if r.status.counted]
                bad = runs[int(rng.integers(len(runs)))]
                old = key.history[bad]
                key.history[bad] = PastRun(tuple(x * 0.85 for x in old.samples), old.status, old.night)
            caught = [flagged(one_night(key, 1.0 - change)) for _ in range(nights)]
            first += caught[0]
            within += any(caught)
        return {"first night": first / trials, f"within {nights} nights": within / trials}

    return scenario


def drift(world: World, trials: int, rng: np.random.Generator) -> dict[str, float]:
    """-0.3% per night from the first night after 10 recorded runs: flagged by night 30?"""
    caught = 0
    for _ in range(trials):
        key = grown(world, rng)
        caught += any(flagged(one_night(key, math.exp(-0.003 * (n + 1)))) for n in range(30))
    return {"by night 30": caught / trials}


def shared_start(world: World, trials: int, rng: np.random.Generator, keys: int = 20) -> dict[str, float]:
    """20 keys of one server: their offsets correlate at 0.8; one restart confirms every key that
    needs it. Nights with any false REGRESSION, and restarts per night."""
    bad_nights = restarts = 0
    for _ in range(trials):
        suite = [grown(world, rng) for _ in range(keys)]
        common = suite[0]._unit()
        for key in suite:
            key.new_night(common)
        looks = [first_look(key, 1.0, searches=keys) for key in suite]
        second_common = suite[0]._unit()
        nights = [
            finish(key, 1.0, s, v, searches=keys,
                   second=lambda k=key, c=second_common: k.start(1.0, ROUNDS, restart=True, common=c))
            for key, (s, v) in zip(suite, looks, strict=True)
        ]  # fmt: skip
        bad_nights += any(flagged(n) for n in nights)
        restarts += any(n.restarted for n in nights)
    return {"nights with a false REGRESSION": bad_nights / trials, "nights with a restart": restarts / trials}


SCENARIOS: dict[str, tuple[Callable[..., dict[str, float]], list[tuple[str, World]]]] = {
    "unchanged": (unchanged, [
        ("normal", World()), ("t3", World(heavy=True)), ("normal, night SD 3%", World(night_sd=0.03)),
        ("AR(1) 0.6", World(rho=0.6)),
    ]),
    "-10%": (persistent(0.10), [("normal", World()), ("t3", World(heavy=True))]),
    "-8%": (persistent(0.08), [("normal", World())]),
    "outlier": (persistent(0.10, outlier=True), [("normal", World())]),
    "drift": (drift, [("normal", World())]),
    "20 keys": (shared_start, [("normal", World()), ("t3", World(heavy=True)),
                               ("normal, night SD 3%", World(night_sd=0.03))]),
}  # fmt: skip


def run_cell(args: tuple[str, str, World, int, int]) -> tuple[str, str, dict[str, float], float]:
    name, label, world, trials, seed = args
    started = time.perf_counter()
    scenario = SCENARIOS[name][0]
    shares = scenario(world, trials, np.random.default_rng(seed))
    return name, label, shares, time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=20261201)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--only", default="", help="comma-separated scenarios: " + ", ".join(SCENARIOS).replace("%", "%%")
    )
    args = parser.parse_args(argv)
    only = [s for s in args.only.split(",") if s] or list(SCENARIOS)
    cells = []
    for i, name in enumerate(SCENARIOS):
        for j, (label, world) in enumerate(SCENARIOS[name][1]):
            if name in only:
                trials = args.trials // 10 if name == "20 keys" else args.trials
                cells.append((name, label, world, max(trials, 10), args.seed + 100 * i + j))
    print(
        f"nightly gate, max_regression 5%, {ROUNDS} rounds (+{MAX_ROUNDS - ROUNDS} and a second start when "
        f"not MET), history of 10 recorded runs grown night by night; night SD 2%, round CV 3% unless said"
    )
    print("| scenario | nights | measure | share |\n|---|---|---|---|")
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for name, label, shares, _ in pool.map(run_cell, cells):
            trials = args.trials // 10 if name == "20 keys" else args.trials
            for measure, share in shares.items():
                print(f"| {name} | {label} | {measure} | {100 * share:.2f}% (n={trials}) |")
    print(f"({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
