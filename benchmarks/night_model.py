"""The nights benchmarks/verdict_nights.py replays: a key's server starts, night by night, through the
plugin's own look schedule, verdict and history (`nightly.looked`, `nightly.judge_night`,
`nightly.stored_status`, `store.records.kept_runs`). Shared by its throughput scenarios and its
speedup scenarios (benchmarks/speedup_nights.py)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from pytest_specperf.sim.nights import NightNoise
from pytest_specperf.store.records import VERDICT_NIGHTS, kept_runs
from pytest_specperf.verdict.nightly import (
    NightVerdict,
    PastRun,
    Restarts,
    Tolerance,
    judge_night,
    looked,
    stored_status,
    worth_a_restart,
)
from pytest_specperf.verdict.stats import Decision

ROUNDS, MAX_ROUNDS, MAX_RESTARTS = 5, 10, 4
TOLERANCE = Tolerance(0.05)
ROUND_CV = 0.03


@dataclass
class Key:
    """One key: its seed, its noise, its history as the store keeps it."""

    seed: int
    noise: NightNoise
    history: list[PastRun] = field(default_factory=list)
    nights: int = 0
    common: tuple[int, NightNoise] | None = None  # a server start shared with other keys: (its seed, its noise)

    def speed(self, night: int, start: int) -> float:
        own = self.noise.speed(self.seed, night, start)
        if self.common is None:
            return own
        shared = self.common[1].speed(self.common[0], night, start)
        return math.exp(math.sqrt(0.2) * math.log(own) + math.sqrt(0.8) * math.log(shared))

    def rounds(self, rng: np.random.Generator, level: float, start: int, count: int) -> list[float]:
        speed = level * self.speed(self.nights, start)
        return (speed * (1.0 + ROUND_CV * rng.standard_normal(count))).tolist()


@dataclass
class Night:
    """One key's night in the making: its starts' rounds, on which server start each was measured."""

    key: Key
    level: float
    rng: np.random.Generator
    starts: list[list[float]] = field(default_factory=list)
    on_start: int = 1
    verdict: NightVerdict | None = None

    def look(self, searches: int = 1, keys: int = 1) -> NightVerdict:
        self.verdict = judge_night(
            self.starts, self.key.history, TOLERANCE, searches=searches, rounds=ROUNDS, keys=keys
        )
        return self.verdict

    def extend(self) -> bool:
        return extend_first(self.starts, lambda count: self.key.rounds(self.rng, self.level, self.on_start, count))


def extend_first(starts: list[list[float]], rounds: Callable[[int], list[float]]) -> bool:
    """The second look's extra rounds, up to `MAX_ROUNDS` on the first start (`rounds(count)` measures
    them); False when there is a second start already or the first has them all."""
    if len(starts) > 1 or len(starts[0]) >= MAX_ROUNDS:
        return False
    starts[0] += rounds(MAX_ROUNDS - ROUNDS)
    return True


def one_night(
    key: Key,
    rng: np.random.Generator,
    level: float,
    server: list[int],
    restarts: Restarts,
    searches: int = 1,
    keys: int = 1,
    name: str = "server",
) -> Night:
    """A key's night through the session's looks; `server` is [the current start number], shared by the
    keys of one server (`name`), so a restart made for one key is the second start of the others."""
    night = Night(key, level, rng, on_start=server[0])
    night.starts.append(key.rounds(rng, level, server[0], ROUNDS))

    def second_start(_: NightVerdict) -> bool:
        restart, why = restarts.ask(on_current_start=night.on_start == server[0], server=name)
        if why is not None:
            return False
        if restart:
            server[0] += 1
        night.starts.append(key.rounds(rng, level, server[0], ROUNDS))
        return True

    looked(
        lambda: night.look(searches, keys),
        settled=lambda v: v.decision is Decision.MET,
        extend=night.extend,
        confirmable=lambda v: worth_a_restart(v, keys),
        second_start=second_start,
    )
    return night


def store(night: Night) -> None:
    """Every start of the night, marked as the plugin marks it, kept as the store keeps a history."""
    key, verdict = night.key, night.verdict
    assert verdict is not None
    status = stored_status(verdict.decision)
    key.history += [PastRun(tuple(s), status, str(key.nights)) for s in night.starts]
    key.history = kept_runs(key.history, VERDICT_NIGHTS, night_of=lambda r: r.night, counted=lambda r: r.status.counted)
    key.nights += 1


def nights(key: Key, rng: np.random.Generator, count: int, level: float | Callable[[int], float] = 1.0) -> list[Night]:
    """`count` nights of one key on a server of its own, each stored."""
    done = []
    for n in range(count):
        night = one_night(key, rng, level(n) if callable(level) else level, [1], Restarts(MAX_RESTARTS))
        store(night)
        done.append(night)
    return done


def grown(noise: NightNoise, rng: np.random.Generator, runs: int = 10) -> Key:
    """A key whose history grew night by night from nothing, as the plugin grows it, to `runs` runs."""
    key = Key(int(rng.integers(2**31)), noise)
    while len(key.history) < runs:
        nights(key, rng, 1)
    return key


def flagged(night: Night) -> bool:
    return night.verdict is not None and night.verdict.decision is Decision.MISSED


def restarted(night: Night) -> bool:
    return len(night.starts) > 1


NORMAL, HEAVY = NightNoise(cv=0.02), NightNoise(cv=0.02, df=3.0)


def upper_95(per_suite: list[float]) -> float:
    """The one-sided 95% upper bound of a mean over suites (normal approximation).

    Why over suites, not nights: a suite's restarts cluster (at a 5% start spread most suites take none
    in five nights, a few take three or more), so its nights are not independent draws; sets of 100
    suites there read 0.09 to 0.18 second starts a night where 500 read 0.12 (the default gate). The
    bound says how far a figure may be off."""
    values = np.asarray(per_suite, dtype=float)
    if values.size < 2:
        return float("nan")
    return float(values.mean() + 1.645 * values.std(ddof=1) / math.sqrt(values.size))
