"""The speedup scenarios of benchmarks/verdict_nights.py: a speculative key judged on its speedup over
the same-session reference (verdict/control.py), alone on a node that swings between sessions, or in a
suite of 5 servers x 20 keys under the default gate (`gate = "speedup"`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from unittest import mock

import numpy as np
from night_model import (
    MAX_RESTARTS,
    NORMAL,
    ROUND_CV,
    ROUNDS,
    TOLERANCE,
    Key,
    Night,
    extend_first,
    one_night,
    store,
    upper_95,
)

from pytest_specperf.sim.nights import NightNoise, node_speed
from pytest_specperf.store.records import LEVEL_RUNS, VERDICT_NIGHTS, kept_runs
from pytest_specperf.verdict import nightly
from pytest_specperf.verdict.control import paired_speedups
from pytest_specperf.verdict.nightly import (
    NightVerdict,
    PastRun,
    Restarts,
    judge_night,
    looked,
    stored_status,
    worth_a_restart,
)
from pytest_specperf.verdict.stats import Decision

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
    name: str = ""  # the speculative server's (one restart per server and night, `Restarts`)
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
            return extend_first(starts, lambda count: key.rounds(self.rng, level, on_start, count))

        def second_start(_: NightVerdict) -> bool:
            restart, why = self.granted.ask(on_current_start=on_start == self.server[0], server=self.name)
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
            night_of_suite.server, night_of_suite.name = [1], f"speculative {i}"
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
    suites = [_suite_nights(noise, rng, servers, keys, later, rule, 0.0) for _ in range(trials)]
    nights = [n for suite in suites for n in suite]
    suite_keys = servers * keys

    def starts(of: list[SuiteNight]) -> float:
        return sum(n.granted + n.reference_restarts for n in of) / len(of) / suite_keys

    def every(n: SuiteNight) -> list[NightVerdict]:
        return n.reference + [v for server in n.speculative for v in server]

    return {
        "second starts per key and night (x100: per night)": starts(nights),
        "the same, one-sided 95% upper bound over suites (x100: per night)": upper_95([starts(s) for s in suites]),
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
    first = within = red_first = red_within = others = starts = 0
    for _ in range(trials):
        nights = _suite_nights(noise, rng, servers, keys, 3, rule, 0.10)
        starts += sum(n.granted + n.reference_restarts for n in nights)
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
        "second starts while it lasts (x100: per night)": starts / trials / 3 / 100,
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
        return extend_first(self.starts, lambda count: self._rounds(100.0 * self.speedup, self.seeds[1], 1, count))

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


def beyond_at(confidence: float, scenario: Callable[..., dict[str, float]]) -> Callable[..., dict[str, float]]:
    """`scenario` with a REGRESSION's second question, "is it beyond the tolerance?", asked at `confidence`
    (two-sided) instead of the plugin's `BEYOND_CONFIDENCE` (one-sided 90%), on one night and on the
    nights of a change alike. Not the plugin's rule: the rows it makes show what "no REGRESSION of an
    unchanged speedup" would cost in REGRESSIONs of a changed one."""

    def held(noise: NightNoise, trials: int, rng: np.random.Generator) -> dict[str, float]:
        with mock.patch.object(nightly, "BEYOND_CONFIDENCE", confidence):
            return scenario(noise, trials, rng)

    return held
