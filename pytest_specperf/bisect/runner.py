"""Real starts of a bisection: the key's server with some differences at their bad values, measured
as a test measures it, judged against the good setup measured on the same node tonight.

Each start is judged by the verdict engine's threshold rule on the start-to-start ratio interval a
speedup uses (`verdict/history.speedup_estimate`, with the config's `run_to_run_cv`): credibly below
1 - `max_regression` is bad, at or above it good; a start in between is repeated once on a new server,
as a night is confirmed, and then decided by where its estimate lies (and said to be uncertain).
Every server is stopped when its start is judged, and by every exit path (SIGTERM included).

Every start is judged against the good setup's starts tonight (`anchors`). One of them can be off
(a start that landed fast, a node that slowed down since): then *every* start reads bad, or every one
good, and a search would name whatever it tried first. So a search whose starts all came out one
way measures the good setup again (`good_setup_holds`) before its answer counts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pytest_specperf import interrupts
from pytest_specperf.bisect.differences import Difference, apply_flags
from pytest_specperf.config.settings import SpecperfConfig
from pytest_specperf.measure.fingerprint import UNSET
from pytest_specperf.measure.records import Measurement, MeasurementKey
from pytest_specperf.measure.rounds import Measurer
from pytest_specperf.servers.pool import ServerPool
from pytest_specperf.verdict.history import speedup_estimate
from pytest_specperf.verdict.stats import Decision, Direction, Estimate, decide_threshold

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


@dataclass
class BisectRunner:
    """Starts and judges setups of one key; `anchors` are the good setup's starts tonight that the
    others are judged against, `searched` the index in `starts` the current search began at."""

    config: SpecperfConfig
    key: MeasurementKey
    found: Sequence[Difference]
    run_dir: Path
    say: Callable[[str], None]
    anchors: list[Measurement] = field(default_factory=list)
    starts: list[Start] = field(default_factory=list)
    good_setup_starts: int = 0
    searched: int = 0

    @property
    def server_starts(self) -> int:
        return sum(s.starts for s in self.starts) + self.good_setup_starts

    def measure_good_setup(self, build: str | None = None) -> Measurement:
        measurement = self._good_setup_start(build)
        self.anchors.append(measurement)
        return measurement

    def _good_setup_start(self, build: str | None = None) -> Measurement:
        on = f" on build {build}" if build else ""
        self.say(f"start {self.server_starts + 1}: the good setup{on} ({self._describe(frozenset())})")
        self.good_setup_starts += 1
        return self._measure(frozenset(), build)

    def one_way(self) -> bool:
        """Every start of the current search came out the same way (all bad or all good): what one
        good-setup start that is off produces."""
        verdicts = {s.bad for s in self.starts[self.searched :]}
        return len(verdicts) == 1

    def good_setup_holds(self) -> bool:
        """Measure the good setup once more and judge it against its earlier starts. When it agrees
        (within the tolerance, either way) it joins them and True; when not, the earlier starts are
        dropped — every later start is judged against the new one — and False: search again."""
        latest = self._good_setup_start()
        slower_decision, slower = self._judge([latest])  # the rule every start is judged by
        faster = speedup_estimate(self._anchor_samples(), [latest.samples(THROUGHPUT)], self.config.run_to_run_cv)
        faster_decision = decide_threshold(faster, 1 - self.config.max_regression, Direction.HIGHER_IS_BETTER)
        off = Decision.MISSED in (slower_decision, faster_decision)
        if not off:
            self.anchors.append(latest)
            self.say(f"  the good setup again: {_pct(slower)} of its earlier start(s): it holds")
            return True
        self.say(
            f"  the good setup again: {_pct(slower)} of its earlier start(s), so every start was judged against "
            "a good setup that was off (or the node moved): searching again against this one"
        )
        self.anchors = [latest]
        self.searched = len(self.starts)
        return False

    def is_bad(self, applied: frozenset[int]) -> bool:
        """Start the server with `applied` at their bad values; judged, repeated once when unclear. A set
        this search has judged already is not started again (the pair search asks for some twice)."""
        for start in self.starts[self.searched :]:
            if start.applied == applied and start.build is None:
                return start.bad
        return self._judged(applied, None)

    def is_bad_build(self, build: str) -> bool:
        """Start the good setup on engine build `build` (its interpreter); judged like any start."""
        return self._judged(frozenset(), build)

    def _judged(self, applied: frozenset[int], build: str | None) -> bool:
        number = self.server_starts + 1
        self.say(f"start {number}: " + (f"build {build}" if build else self._describe(applied)))
        runs = [self._measure(applied, build)]
        decision, ratio = self._judge(runs)
        if decision is Decision.SUSPECT:
            self.say(f"  {ratio.value - 1:+.1%} of the good setup: not clearly either; once more on a new server")
            runs.append(self._measure(applied, build))
            decision, ratio = self._judge(runs)
            verdict = ("bad" if ratio.value < 1 - self.config.max_regression else "good") + (
                " (uncertain)" if decision is Decision.SUSPECT else ""
            )
        else:
            verdict = "bad" if decision is Decision.MISSED else "good"
        self.starts.append(Start(applied, verdict, ratio, len(runs), build))
        self.say(f"  {verdict}: throughput {_pct(ratio)} of the good setup")
        return verdict.startswith("bad")

    def _judge(self, runs: Sequence[Measurement]) -> tuple[Decision, Estimate]:
        assert self.anchors, "the good setup is measured first"
        current = [m.samples(THROUGHPUT) for m in runs]
        ratio = speedup_estimate(current, self._anchor_samples(), self.config.run_to_run_cv)
        return decide_threshold(ratio, 1 - self.config.max_regression, Direction.HIGHER_IS_BETTER), ratio

    def _anchor_samples(self) -> list[list[float]]:
        return [m.samples(THROUGHPUT) for m in self.anchors]

    def _progress(self, line: str) -> None:
        self.say(f"  {line}")

    def _describe(self, applied: frozenset[int]) -> str:
        bad = [self.found[i].setting(bad=True) for i in sorted(applied)]
        return "bad values: " + "; ".join(bad) if bad else "every difference at its good value"

    def _measure(self, applied: frozenset[int], build: str | None = None) -> Measurement:
        """One server start of the setup (on engine build `build`, an interpreter, when given), measured;
        the server is stopped before this returns."""
        config, environment = setup(self.config, self.key.server, self.found, applied)
        if build is not None:
            config = dataclasses.replace(config, python=build, engine_flags={})
        with _environment(environment):
            pool = ServerPool(config, self.run_dir, progress=self._progress, after_fork=interrupts.check)
            try:
                server = pool.acquire(self.key.server)
                workload = config.workloads[self.key.workload]
                return Measurer(config).measure(
                    server, workload, self.key.concurrency, is_reference=self.key.server == config.reference
                )
            finally:
                pool.shutdown()


def setup(
    config: SpecperfConfig, server: str, found: Sequence[Difference], applied: frozenset[int]
) -> tuple[SpecperfConfig, dict[str, str | None]]:
    """The suite's config with every applicable difference at its good value, those in `applied` at
    their bad one: flags written into the server's arguments, variables returned to be set (None:
    unset) in the environment the server starts from, and taken out of the config's own `env`."""
    values = {i: (d.bad if i in applied else d.good) for i, d in enumerate(found) if d.applicable}
    flags = {found[i].flag: v for i, v in values.items() if found[i].kind == "flag"}
    variables = {found[i].name: (None if v == UNSET else v) for i, v in values.items() if found[i].kind == "env"}
    target = config.servers[server]
    target = dataclasses.replace(
        target,
        args=apply_flags(target.args, flags),
        env={k: v for k, v in target.env.items() if k not in variables},
    )
    config = dataclasses.replace(
        config,
        servers={**config.servers, server: target},
        env={k: v for k, v in config.env.items() if k not in variables},
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
