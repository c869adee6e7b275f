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

The "(draw again when beyond)" rows are not the plugin's rule: they take a second draw of a speedup
(both servers started again) whenever its estimate alone is beyond the tolerance, to show what a
-10% speedup flagged within three nights in 90% would cost in starts.

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
from dataclasses import dataclass, field

import numpy as np
from scipy.stats import t as student_t

from pytest_specperf.sim.nights import NightNoise, node_speed
from pytest_specperf.store.records import LEVEL_RUNS, VERDICT_NIGHTS, kept_runs
from pytest_specperf.verdict.control import paired_speedups
from pytest_specperf.verdict.nightly import (
    BEYOND_CONFIDENCE,
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
        if len(self.starts) > 1 or len(self.starts[0]) >= MAX_ROUNDS:
            return False
        self.starts[0] += self.key.rounds(self.rng, self.level, self.on_start, MAX_ROUNDS - ROUNDS)
        return True


def one_night(
    key: Key,
    rng: np.random.Generator,
    level: float,
    server: list[int],
    restarts: Restarts,
    searches: int = 1,
    keys: int = 1,
) -> Night:
    """A key's night through the session's looks; `server` is [the current start number], shared by the
    keys of one server, so a restart made for one key is the second start of the others."""
    night = Night(key, level, rng, on_start=server[0])
    night.starts.append(key.rounds(rng, level, server[0], ROUNDS))

    def second_start(_: NightVerdict) -> bool:
        restart, why = restarts.ask(on_current_start=night.on_start == server[0])
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
    restarts = red = suspect = 0
    for _ in range(trials):
        suite = []
        for _ in range(servers):
            common = (int(rng.integers(2**31)), noise)
            suite.append([Key(int(rng.integers(2**31)), noise, common=common) for _ in range(keys)])
        for key in (k for server in suite for k in server):
            while len(key.history) < 10:
                nights(key, rng, 1)
        granted = Restarts(MAX_RESTARTS)
        for server in suite:
            on = [1]
            tonight = [one_night(key, rng, 1.0, on, granted, searches=servers * keys, keys=keys) for key in server]
            red += any(flagged(n) for n in tonight)
            suspect += sum(n.verdict is not None and n.verdict.decision is Decision.SUSPECT for n in tonight)
        restarts += granted.used
    per_key = restarts / trials / (servers * keys)
    return {
        "second starts per key and night (x100: per night)": per_key,
        "nights with a false REGRESSION": red / trials,
        "SUSPECT keys per night (share of keys)": suspect / trials / (servers * keys),
    }


#: The node's swing between sessions (log SD; clipped at x3): about x2 at two SDs.
NODE_SWING = 0.35
SPEEDUP = 1.2


@dataclass
class SpeedupSuiteNight:
    """A night of one speculative server's keys judged on their speedup over the reference's key of the
    same workload (`gate = "speedup"`), through the session's looks: a second look restarts the
    speculative server (granted by `Restarts`) and, once per reference key, the reference too
    (session/looks.py `_reference_again`), so that the second look is a second draw of the ratio."""

    rng: np.random.Generator
    granted: Restarts
    server: list[int]  # the speculative server's current start
    reference: list[int]  # the reference server's current start
    server_keys: int  # the speculative server's keys
    sharing: int  # the keys whose speedup carries the reference's start (control.speedup_keys)
    searches: int
    rule: str = "moved"  # when the question is shared: "moved" (control.asked_among), "server", "always"
    reference_restarts: int = 0

    def judged(self, key: Key, ref_key: Key, ref_night: Night, level: float = SPEEDUP) -> NightVerdict:
        references = [float(np.mean(s)) for s in ref_night.starts]
        asked = self._asked(ref_key, references[0])
        on_start = self.server[0]
        starts = [key.rounds(self.rng, level, on_start, ROUNDS)]

        def look() -> NightVerdict:
            draws = paired_speedups(starts, references)
            return judge_night(draws, key.history, TOLERANCE, searches=self.searches, rounds=ROUNDS, keys=asked)

        def extend() -> bool:
            if len(starts) > 1 or len(starts[0]) >= MAX_ROUNDS:
                return False
            starts[0] += key.rounds(self.rng, level, on_start, MAX_ROUNDS - ROUNDS)
            return True

        def second_start(_: NightVerdict) -> bool:
            restart, why = self.granted.ask(on_current_start=on_start == self.server[0])
            if why is not None:
                return False
            if len(references) == 1:
                if ref_night.on_start == self.reference[0]:
                    self.reference[0] += 1
                    self.reference_restarts += 1
                more = ref_key.rounds(self.rng, 1.0, self.reference[0], ROUNDS)
                ref_night.starts.append(more)
                references.append(float(np.mean(more)))
            if restart:
                self.server[0] += 1
            starts.append(key.rounds(self.rng, level, self.server[0], ROUNDS))
            return True

        verdict = looked(
            look,
            settled=lambda v: v.decision is Decision.MET,
            extend=extend,
            confirmable=lambda v: worth_a_restart(v, asked),
            second_start=second_start,
        )
        status = stored_status(verdict.decision)
        key.history += [PastRun(tuple(d), status, str(key.nights)) for d in paired_speedups(starts, references)]
        key.history = kept_runs(
            key.history, VERDICT_NIGHTS, night_of=lambda r: r.night, counted=lambda r: r.status.counted
        )
        key.nights += 1
        return verdict

    def _asked(self, ref_key: Key, reference: float) -> int:
        """The keys the speedup's question is asked among (`control.asked_among`): the reference's first
        start against the level of its newest accepted runs, as `control.reference_move` reads it."""
        if self.rule != "moved":
            return self.sharing if self.rule == "always" else self.server_keys
        counted = [math.log(float(np.mean(r.samples))) for r in ref_key.history if r.status.counted]
        if not counted:
            return self.server_keys
        moved = TOLERANCE.moved(reference / math.exp(float(np.mean(counted[-LEVEL_RUNS:]))))
        return max(self.server_keys, self.sharing) if moved else self.server_keys


@dataclass
class SuiteNight:
    """What one night of a speedup suite did: the restarts it took and every key's verdict."""

    granted: int  # restarts granted by `max_restarts` (the reference's own and the speculative servers')
    reference_restarts: int  # the reference's restarts for a speedup's second draw
    reference: list[NightVerdict]
    speculative: list[list[NightVerdict]]  # per speculative server


def _suite_nights(
    noise: NightNoise, rng: np.random.Generator, servers: int, keys: int, later: int, rule: str, change: float
) -> list[SuiteNight]:
    """One suite grown for 10 nights, then `later` nights returned: the reference's keys judged on
    throughput, each speculative key on its speedup over the reference's key of its workload, its
    question "is a start off?" asked as `rule` says (`SpeedupSuiteNight`). From night 10 on, the first
    speculative server's speedup is `change` lower."""
    suite = []
    for _ in range(servers):
        common = (int(rng.integers(2**31)), noise)
        suite.append([Key(int(rng.integers(2**31)), noise, common=common) for _ in range(keys)])
    found = []
    for n in range(10 + later):
        granted, ref_on = Restarts(MAX_RESTARTS), [1]
        ref_nights = [one_night(k, rng, 1.0, ref_on, granted, servers * keys, keys) for k in suite[0]]
        sharing = (servers - 1) * keys
        night_of_suite = SpeedupSuiteNight(rng, granted, [1], ref_on, keys, sharing, servers * keys, rule)
        speculative = []
        for i, server in enumerate(suite[1:]):
            night_of_suite.server = [1]
            level = SPEEDUP * (1.0 - change) if i == 0 and n >= 10 else SPEEDUP
            zipped = zip(server, ref_nights, strict=True)
            speculative.append([night_of_suite.judged(k, r.key, r, level) for k, r in zipped])
        for night in ref_nights:
            store(night)
        if n >= 10:
            verdicts = [night.verdict for night in ref_nights if night.verdict is not None]
            found.append(SuiteNight(granted.used, night_of_suite.reference_restarts, verdicts, speculative))
    return found


def speedup_suite(
    noise: NightNoise,
    trials: int,
    rng: np.random.Generator,
    servers: int = 5,
    keys: int = 20,
    later: int = 5,
    rule: str = "moved",
) -> dict[str, float]:
    """What the default gate costs on a GPU: 5 servers x 20 unchanged keys, the first the reference (its
    keys judged on throughput), the other four speculative, each key judged on its speedup over the
    reference's key of its workload (`gate = "speedup"`). Offsets of one server's keys correlate at 0.8.
    10 nights grown night by night, then `later` nights counted: server starts beyond the first per
    night (restarts granted by `max_restarts`, and the reference's restarts for a speedup's second draw,
    which that cap does not limit). A speedup's question "is a start off?" is asked among its server's
    keys and, on a night the reference's start moved beyond the tolerance, among every key whose speedup
    carries it (`control.asked_among`: 80 here); `rule`: "server" asks among the server's keys on every
    night (before), "always" among the 80 on every night."""
    nights = [n for _ in range(trials) for n in _suite_nights(noise, rng, servers, keys, later, rule, 0.0)]
    suite_keys = servers * keys

    def every(n: SuiteNight) -> list[NightVerdict]:
        return n.reference + [v for server in n.speculative for v in server]

    return {
        "second starts per key and night (x100: per night)": sum(n.granted + n.reference_restarts for n in nights)
        / len(nights)
        / suite_keys,
        "of which the reference's for a speedup (x100: per night)": sum(n.reference_restarts for n in nights)
        / len(nights)
        / suite_keys,
        "nights with a false REGRESSION": sum(any(v.decision is Decision.MISSED for v in every(n)) for n in nights)
        / len(nights),
        "SUSPECT keys per night (share of keys)": sum(
            sum(v.decision is Decision.SUSPECT for v in every(n)) for n in nights
        )
        / len(nights)
        / suite_keys,
    }


def speedup_suite_change(
    noise: NightNoise, trials: int, rng: np.random.Generator, rule: str = "moved", servers: int = 5, keys: int = 20
) -> dict[str, float]:
    """What sharing the question (`rule`, as in `speedup_suite`) costs in power: the same suite, the
    first speculative server's speedup 10% lower on all its keys from one night on (a draft or a verify
    path that got slower): its keys flagged (REGRESSION) on the first night and within three, the suites
    that went red for it (any of its keys flagged), and the other servers' keys flagged."""
    first = within = red_first = red_within = others = 0
    for _ in range(trials):
        nights = _suite_nights(noise, rng, servers, keys, 3, rule, 0.10)
        caught = [[v.decision is Decision.MISSED for v in n.speculative[0]] for n in nights]
        first += sum(caught[0])
        within += sum(any(night[k] for night in caught) for k in range(keys))
        red_first += any(caught[0])
        red_within += any(any(night) for night in caught)
        others += sum(v.decision is Decision.MISSED for n in nights for s in n.speculative[1:] for v in s)
    return {
        "changed keys flagged on the first night": first / trials / keys,
        "changed keys flagged within 3 nights": within / trials / keys,
        "suites red for it on the first night": red_first / trials,
        "suites red for it within 3 nights": red_within / trials,
        "unchanged speculative keys flagged (per key and night)": others / trials / (3 * (servers - 2) * keys),
    }


@dataclass
class SpeedupNight:
    """One night of a speculative key judged on its speedup over the same-session reference: both
    servers on the night's node, each start of either with its own offset and round noise. A second
    look starts both servers again (session/looks.py), so the second start is a second draw of the
    speedup (`control.paired_speedups`)."""

    rng: np.random.Generator
    night: int
    seeds: tuple[int, int]  # the reference's and the speculative server's
    node: float
    speedup: float
    history: list[PastRun]
    starts: list[list[float]] = field(default_factory=list)
    references: list[float] = field(default_factory=list)  # each reference start's mean throughput
    eager: bool = False  # a second draw whenever the estimate alone is beyond the tolerance (not the plugin's rule)

    def _rounds(self, level: float, seed: int, start: int, count: int) -> list[float]:
        level *= self.node * NORMAL.speed(seed, self.night, start)
        return (level * (1.0 + ROUND_CV * self.rng.standard_normal(count))).tolist()

    def start(self, count: int = ROUNDS) -> None:
        """Both servers measured on a start of their own."""
        number = len(self.starts) + 1
        self.references.append(float(np.mean(self._rounds(100.0, self.seeds[0], number, ROUNDS))))
        self.starts.append(self._rounds(100.0 * self.speedup, self.seeds[1], number, count))

    def draws(self) -> list[list[float]]:
        return paired_speedups(self.starts, self.references)

    def look(self) -> NightVerdict:
        return judge_night(self.draws(), self.history, TOLERANCE, rounds=ROUNDS)

    def extend(self) -> bool:
        if len(self.starts) > 1 or len(self.starts[0]) >= MAX_ROUNDS:
            return False
        self.starts[0] += self._rounds(100.0 * self.speedup, self.seeds[1], 1, MAX_ROUNDS - ROUNDS)
        return True

    def second_start(self, _: NightVerdict) -> bool:
        self.start()
        return True

    def judged(self) -> NightVerdict:
        self.start()
        return looked(
            self.look,
            settled=lambda v: v.decision is Decision.MET and not self._eager(v),
            extend=self.extend,
            confirmable=lambda v: v.decision in (Decision.SUSPECT, Decision.MISSED) or self._eager(v),
            second_start=self.second_start,
        )

    def _eager(self, verdict: NightVerdict) -> bool:
        """With `eager`: the estimate alone is beyond the tolerance (what a second draw would be taken for)."""
        ratio = verdict.comparison.ratio.value if verdict.comparison is not None else 1.0
        return self.eager and ratio < 1.0 - TOLERANCE.max_regression


def _speedup_key(
    rng: np.random.Generator, change: float, count: int, swing: float = NODE_SWING, eager: bool = False
) -> list[tuple[NightVerdict, float, int]]:
    """A reference and a speculative server sharing each night's node (`sim.nights.node_speed`), each with
    its own start offsets (2%) and round noise: 10 nights grown, then `count` nights with the speedup
    changed by `change`. The speculative key is judged on its speedup over the same-session reference
    (verdict/control.py) through the session's looks; returns each later night's verdict and the
    reference's first start's ratio to its own level that night, and how many starts of each server it took.
    `eager`: a second draw on every night whose estimate alone is beyond the tolerance (what 90% would take)."""
    node_seed, ref, spec = (int(rng.integers(2**31)) for _ in range(3))
    ref_hist: list[float] = []
    history: list[PastRun] = []
    found = []
    for n in range(10 + count):
        speedup = SPEEDUP * (1.0 - change if n >= 10 else 1.0)
        night = SpeedupNight(rng, n, (ref, spec), node_speed(swing, node_seed, n), speedup, history, eager=eager)
        verdict = night.judged()
        ref_mean = night.references[0]
        level = math.exp(float(np.mean(np.log(ref_hist[-30:])))) if ref_hist else ref_mean
        if n >= 10:
            found.append((verdict, ref_mean / level, len(night.starts)))
        status = stored_status(verdict.decision)
        history += [PastRun(tuple(d), status, str(n)) for d in night.draws()]
        ref_hist.append(ref_mean)
    return found


def node_swing(
    noise: NightNoise, trials: int, rng: np.random.Generator, eager: bool = False, swing: float = NODE_SWING
) -> dict[str, float]:
    """Speculation unchanged while the node swings about x2 between sessions: REGRESSIONs of the speedup,
    how often a night the reference moved beyond the tolerance names the node (the speedup held), and
    the nights that started both servers again."""
    red = suspect = nights_seen = moved = named = again = 0
    for _ in range(trials):
        for verdict, ratio, starts in _speedup_key(rng, 0.0, 20, swing, eager=eager):
            nights_seen += 1
            red += verdict.decision is Decision.MISSED
            suspect += verdict.decision is Decision.SUSPECT
            again += starts > 1
            if abs(math.log(ratio)) > -math.log(1.0 - TOLERANCE.max_regression):
                moved += 1
                named += verdict.decision is Decision.MET and not verdict.improved
    return {
        "REGRESSION of the speedup (per night)": red / nights_seen,
        "SUSPECT of the speedup (per night)": suspect / nights_seen,
        "nights the reference moved beyond 5%": moved / nights_seen,
        "of those, the speedup held and the node is named": named / max(moved, 1),
        "second start of both servers (per night)": again / nights_seen,
    }


def node_swing_change(
    noise: NightNoise, trials: int, rng: np.random.Generator, eager: bool = False
) -> dict[str, float]:
    """The speedup 10% lower from one night on, under the same node swing: flagged within three nights."""
    first = within = shown = 0
    for _ in range(trials):
        verdicts = [verdict.decision for verdict, _, _ in _speedup_key(rng, 0.10, 3, eager=eager)]
        caught = [d is Decision.MISSED for d in verdicts]
        first += caught[0]
        within += any(caught)
        shown += any(d is not Decision.MET for d in verdicts)
    return {
        "first night": first / trials,
        "within 3 nights": within / trials,
        "flagged (REGRESSION or SUSPECT) within 3 nights": shown / trials,
    }


NORMAL, HEAVY = NightNoise(cv=0.02), NightNoise(cv=0.02, df=3.0)
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
    "5 servers x 20 keys (gate = speedup): one server's speedup -10%": (speedup_suite_change, [("normal", NORMAL)]),
    "5 servers x 20 keys (gate = speedup; asked per server): one server's speedup -10%": (
        functools.partial(speedup_suite_change, rule="server"),
        [("normal", NORMAL)],
    ),
    "5 servers x 20 keys (gate = speedup; asked among all): one server's speedup -10%": (
        functools.partial(speedup_suite_change, rule="always"),
        [("normal", NORMAL)],
    ),
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
                print(f"| {name} | {label} | {measure} | {100 * share:.2f}% (n={trials}) |")
    print(f"({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
