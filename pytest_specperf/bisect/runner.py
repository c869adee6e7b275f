"""Real starts of a bisection: the key's server with some differences at their bad values, measured
as a test measures it, judged against the good setup measured on the same node tonight.

The bad setup (every difference applied) is judged by the verdict engine's threshold rule on the
start-to-start ratio interval a speedup uses (`verdict/history.speedup_estimate`, with the config's
`run_to_run_cv`): credibly below 1 - `max_regression` is reproduced. Once it is, a start of the
search is placed between the two setups' levels (`_between`): at the bad one's or at the good
one's, by odds of 19 to 1. A start that is neither clearly is measured again on a new server, as a
night is confirmed (up to three starts, pooled), before it decides anything; one that stays unclear
is decided by where its estimate lies and said to be uncertain, and so is an answer that rests on it.
Every server is stopped when its start is judged, and by every exit path (SIGTERM included).

Every start is judged against the good setup's starts tonight (`anchors`). One of them can be off
(a start that landed fast, a node that slowed down since): then *every* start reads bad, or every one
good, and a search would name whatever it tried first. So a search whose starts all came out one
way measures the good setup again (`good_setup_holds`) before its answer counts.

The starts themselves are one callable (`StartServer`): real servers through the plugin's pool and
measurer, or, for the trials benchmark and the tests of the rules, a seeded model of them; the
judging and the setups are this module's either way.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import statistics
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pytest_specperf.bisect.differences import ARGS, SIM_ARGS, Difference, apply_flags
from pytest_specperf.bisect.search import Seen
from pytest_specperf.common import interrupts
from pytest_specperf.config.settings import SpecperfConfig
from pytest_specperf.measure.fingerprint import UNSET
from pytest_specperf.measure.records import MeasurementKey
from pytest_specperf.measure.rounds import Measurer
from pytest_specperf.servers.pool import ServerPool
from pytest_specperf.verdict.history import speedup_estimate
from pytest_specperf.verdict.stats import Decision, Direction, Estimate, Tolerance, decide_threshold

#: What a start is judged on.
THROUGHPUT = "output_throughput"


@dataclass(frozen=True)
class Start:
    """One judged start: which differences were at their bad values, and what it measured."""

    applied: frozenset[int]
    verdict: str  # "good", "bad", or "bad (uncertain)" / "good (uncertain)" after a repeat
    ratio: Estimate  # its throughput over the good setup's tonight
    starts: int  # server starts it took (2 when repeated)
    build: str | None = None  # the engine build (interpreter) it ran, when builds are bisected

    @property
    def bad(self) -> bool:
        return self.verdict.startswith("bad")


#: One server start of a setup (the config, the variables to set or unset, the engine build or
#: None), measured: its per-round throughput. Real starts by default; a model of them in tests.
StartServer = Callable[[SpecperfConfig, dict[str, "str | None"], "str | None"], list[float]]
#: Starts of one set at most: a start that stays unclear is measured again, twice.
MOST_RUNS = 3


#: The odds a start of the search must give one setup's level over the other's to decide clearly.
ODDS = 19.0


@dataclass(frozen=True)
class _Level:
    """A setup's throughput on the log scale: the mean over its starts, and that mean's variance."""

    mean: float
    variance: float


@dataclass
class BisectRunner:
    """Starts and judges setups of one key; `anchors` are the good setup's starts tonight (their
    per-round throughput) that the others are judged against."""

    config: SpecperfConfig
    key: MeasurementKey
    found: Sequence[Difference]
    run_dir: Path
    say: Callable[[str], None]
    start_server: StartServer | None = None
    anchors: list[list[float]] = field(default_factory=list)
    starts: list[Start] = field(default_factory=list)
    good_setup_starts: int = 0
    #: the bad setup's starts (their per-round throughput), once it is reproduced
    bad_runs: list[list[float]] | None = None

    @property
    def server_starts(self) -> int:
        return sum(s.starts for s in self.starts) + self.good_setup_starts

    def measure_good_setup(self, build: str | None = None) -> list[float]:
        measured = self._good_setup_start(build)
        self.anchors.append(measured)
        return measured

    def _good_setup_start(self, build: str | None = None) -> list[float]:
        on = f" on build {build}" if build else ""
        self.say(f"start {self.server_starts + 1}: the good setup{on} ({self._describe(frozenset())})")
        self.good_setup_starts += 1
        return self._measure(frozenset(), build)

    def good_setup_holds(self) -> bool:
        """Measure the good setup once more and judge it against its earlier starts. When it agrees
        (within the tolerance, either way) it joins them and True; when not, the earlier starts are
        dropped — every later start is judged against the new one — and False: search again."""
        latest = self._good_setup_start()
        slower_decision, slower = self._judge([latest])  # the rule every start is judged by
        faster = speedup_estimate(self.anchors, [latest], self.config.run_to_run_cv)
        faster_decision = decide_threshold(
            faster, Tolerance(self.config.max_regression).regression_bound, Direction.HIGHER_IS_BETTER
        )
        if Decision.MISSED not in (slower_decision, faster_decision):
            self.anchors.append(latest)
            self.say(f"  the good setup again: {_pct(slower)} of its earlier start(s): it holds")
            return True
        self.say(
            f"  the good setup again: {_pct(slower)} of its earlier start(s), so every start was judged against "
            "a good setup that was off (or the node moved): searching again against this one"
        )
        self.anchors = [latest]
        self.bad_runs = None  # judged against the old good setup: reproduced again
        return False

    def judge(self, applied: frozenset[int]) -> Seen:
        """Start the server with `applied` at their bad values and judge it; a start that is not
        clearly either is measured again on a new server (up to MOST_RUNS starts, pooled) before it
        decides anything, and stays uncertain only when they all leave it unclear.

        The bad setup (every difference applied) is judged against the tolerance: that is the
        reproduction. Once it is slow, a start of a subset is bad when it is closer to the bad setup's
        level than to the good one's (below their geometric midpoint, never above the tolerance): the
        question is whether the subset carries what made the bad setup slow, and a harmless start
        that reads 6% slow on a node whose starts spread by 5% does not."""
        everything = len(applied) == len(self.found)
        if everything:
            self.bad_runs = None
        seen, runs = self._judged(applied, None)
        if everything and seen.bad:
            self.bad_runs = runs
        return seen

    def is_bad_build(self, build: str) -> bool:
        """Start the good setup on engine build `build` (its interpreter); judged like any start."""
        return self._judged(frozenset(), build)[0].bad

    def _judged(self, applied: frozenset[int], build: str | None) -> tuple[Seen, list[list[float]]]:
        self.say(f"start {self.server_starts + 1}: " + (f"build {build}" if build else self._describe(applied)))
        runs = [self._measure(applied, build)]
        decision, ratio = self._judge(runs)
        while decision is Decision.SUSPECT and len(runs) < MOST_RUNS:
            self.say(f"  {ratio.value - 1:+.1%} of the good setup: not clearly either; once more on a new server")
            runs.append(self._measure(applied, build))
            decision, ratio = self._judge(runs)
        bad = decision is not Decision.MET  # SUSPECT: the estimate is on the bad side, not credibly
        certain = decision is not Decision.SUSPECT
        verdict = ("bad" if bad else "good") + ("" if certain else " (uncertain)")
        self.starts.append(Start(applied, verdict, ratio, len(runs), build))
        self.say(f"  {verdict}: throughput {_pct(ratio)} of the good setup")
        return Seen(bad, certain), runs

    def _judge(self, runs: Sequence[list[float]]) -> tuple[Decision, Estimate]:
        """The start's throughput over the good setup's, and what it says: against the tolerance, or,
        once the bad setup is reproduced, against the midpoint between the two setups."""
        assert self.anchors, "the good setup is measured first"
        ratio = speedup_estimate(list(runs), self.anchors, self.config.run_to_run_cv)
        tolerance = decide_threshold(
            ratio, Tolerance(self.config.max_regression).regression_bound, Direction.HIGHER_IS_BETTER
        )
        return self._between(runs) or tolerance, ratio

    def _between(self, runs: Sequence[list[float]]) -> Decision | None:
        """Which of the two setups' levels the start is at, on the log scale: once the bad setup is
        reproduced, the question is no longer "slower than the tolerance?" but "at the bad setup's
        level, or at the good one's?". The start's distance below their midpoint, against its
        spread, gives the odds of the one over the other (two normal levels a gap apart): MISSED
        when they are 19 to 1 or more for the bad level, MET when as much for the good one, SUSPECT
        in between. The distance shares the good setup's offset with the midpoint, so its variance
        is the start's plus a quarter of each setup's. None before the bad setup is reproduced, or
        when the midpoint is within the tolerance (a bad setup only just slower: the tolerance
        decides)."""
        if self.bad_runs is None:
            return None
        start, good, bad = (self._level(r) for r in (runs, self.anchors, self.bad_runs))
        middle, gap = (good.mean + bad.mean) / 2, good.mean - bad.mean
        if middle - good.mean > Tolerance(self.config.max_regression).log_band[0]:
            return None
        variance = start.variance + good.variance / 4 + bad.variance / 4
        margin = variance * math.log(ODDS) / gap  # log odds = gap * distance / variance
        below = start.mean - middle
        if below < -margin:
            return Decision.MISSED
        return Decision.MET if below > margin else Decision.SUSPECT

    def _level(self, runs: Sequence[list[float]]) -> _Level:
        """The log-scale level of a setup's starts and its variance: each start's offset
        (`run_to_run_cv`) and its rounds' own spread, over the number of starts."""
        logs = [[math.log(v) for v in run if v > 0] for run in runs]
        logs = [run for run in logs if run]
        rounds = [statistics.variance(run) / len(run) if len(run) > 1 else 0.0 for run in logs]
        cv = self.config.run_to_run_cv
        return _Level(
            statistics.fmean(statistics.fmean(run) for run in logs), (cv * cv + statistics.fmean(rounds)) / len(logs)
        )

    def _progress(self, line: str) -> None:
        self.say(f"  {line}")

    def _describe(self, applied: frozenset[int]) -> str:
        bad = [self.found[i].setting(bad=True) for i in sorted(applied)]
        return "bad values: " + "; ".join(bad) if bad else "every difference at its good value"

    def _measure(self, applied: frozenset[int], build: str | None = None) -> list[float]:
        """One start of the setup (on engine build `build`, an interpreter, when given): its throughput."""
        config, environment = setup(self.config, self.key.server, self.found, applied)
        if build is not None:
            config = dataclasses.replace(config, python=build, engine_flags={})
        start = self.start_server or self._real_start
        return start(config, environment, build)

    def _real_start(self, config: SpecperfConfig, environment: dict[str, str | None], build: str | None) -> list[float]:
        """A real server started and measured as a test measures it; stopped before this returns."""
        with _environment(environment):
            pool = ServerPool(config, self.run_dir, progress=self._progress, after_fork=interrupts.check)
            try:
                server = pool.acquire(self.key.server)
                workload = config.workloads[self.key.workload]
                measured = Measurer(config).measure(
                    server, workload, self.key.concurrency, is_reference=self.key.server == config.reference
                )
                return measured.samples(THROUGHPUT)
            finally:
                pool.shutdown()


def setup(
    config: SpecperfConfig, server: str, found: Sequence[Difference], applied: frozenset[int]
) -> tuple[SpecperfConfig, dict[str, str | None]]:
    """The suite's config with every applicable difference at its good value, those in `applied` at
    their bad one: each flag written into the argument list that carries it (and taken out of the
    others: the suite's `sim_args` too), variables returned to be set (None: unset) in the environment
    the server starts from, and taken out of the config's own `env`."""
    values = {i: (d.bad if i in applied else d.good) for i, d in enumerate(found) if d.applicable}
    flags = {
        carrier: {
            found[i].flag: v for i, v in values.items() if found[i].kind == "flag" and found[i].carrier == carrier
        }
        for carrier in (ARGS, SIM_ARGS)
    }
    every_flag = {**flags[ARGS], **flags[SIM_ARGS]}
    unset = dict.fromkeys(every_flag, UNSET)
    variables = {found[i].name: (None if v == UNSET else v) for i, v in values.items() if found[i].kind == "env"}
    target = config.servers[server]
    target = dataclasses.replace(
        target,
        args=apply_flags(apply_flags(target.args, unset), flags[ARGS]),
        sim_args=apply_flags(apply_flags(target.sim_args, unset), flags[SIM_ARGS]),
        env={k: v for k, v in target.env.items() if k not in variables},
    )
    config = dataclasses.replace(
        config,
        servers={**config.servers, server: target},
        env={k: v for k, v in config.env.items() if k not in variables},
        sim_args=apply_flags(config.sim_args, unset),
    )
    return config, variables


@contextlib.contextmanager
def _environment(variables: dict[str, str | None]) -> Iterator[None]:
    """This process's environment (which a server inherits) with `variables` set or unset, then restored."""
    saved = {name: os.environ.get(name) for name in variables}
    try:
        _set(variables)
        yield
    finally:
        _set(saved)


def _set(variables: dict[str, str | None]) -> None:
    """Set each variable in this process's environment (None: unset it)."""
    for name, value in variables.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _pct(ratio: Estimate) -> str:
    bounds = f" [{ratio.low - 1:+.1%}, {ratio.high - 1:+.1%}]" if ratio.bounded else ""
    return f"{ratio.value - 1:+.1%}{bounds}"
