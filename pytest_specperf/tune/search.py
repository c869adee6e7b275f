"""The search: which config to start next, how long to measure it, and when to stop.

1. The reference, measured with `max_rounds` rounds: every speedup is over it (as long again, once, when
   its rounds differ more than `run_to_run_cv`: a disturbed reference would skew every speedup).
2. An initial design the models need before they can predict (`initial_design`): the deepest chain of
   each acceptance group (it reaches every draft position, so every position's acceptance is
   measured), the widest tree (how much topk adds, and what many draft tokens cost), and whatever
   completes the cost fit (configs that differ in draft tokens and in steps). At most budget - 2, so
   the model always chooses at least one start.
3. Then, while starts remain: fit the models, stop if every objective's leader was measured and is
   ahead of every other config -- measured or predicted -- with `confidence`; else start the config
   with the largest expected improvement.

Why expected improvement (not an upper bound): it weighs how likely a config beats the best measured
one *and* by how much, so a config the model is unsure about is tried only when its doubt reaches
somewhere worth going, and a config that could only tie is never worth a 15-minute start. It is zero
for configs the model rules out, which is how the report can say why each was never started.

Successive halving of rounds: a start is measured with `rounds` rounds first; while it is in
contention (it leads an objective, or beats the leader with a chance of at least 1 - confidence) its
rounds double, up to `max_rounds`. The server start is the expensive part on a GPU node, so a config
out of contention after two rounds is stopped at once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from pytest_specperf.errors import ServerError
from pytest_specperf.tune.cost import term_values, terms_for
from pytest_specperf.tune.model import Forecast, ModelSettings, forecast
from pytest_specperf.tune.observe import LevelData
from pytest_specperf.tune.space import Candidate, Objective, TuneSpace, settings_text
from pytest_specperf.verdict.stats import coefficient_of_variation

#: an expected improvement below this (relative) is not worth a server start
MIN_IMPROVEMENT = 1e-4
#: a config with less chance than this to beat a leader is ruled out by the model
RULED_OUT = 0.01


class Runner(Protocol):
    """Starts servers and measures them (tune/runner.py with real servers; a stand-in in unit tests)."""

    def measure(self, candidate: Candidate, rounds: int) -> Mapping[Objective, LevelData]:
        """Start `candidate` if it is not running, measure `rounds` more rounds at every objective."""

    def release(self, candidate: Candidate) -> None:
        """Stop `candidate`'s server: the search is done with it."""


@dataclass(frozen=True)
class Start:
    """One server start: what, why, and how it went."""

    label: str
    reason: str
    rounds: int = 0
    error: str | None = None


@dataclass
class TuneResult:
    space: TuneSpace
    starts: list[Start]
    observed: dict[str, dict[Objective, LevelData]]
    forecast: Forecast
    stopped: str
    settled: bool = False
    failed: dict[str, str] = field(default_factory=dict)
    #: after each fit: (starts so far, every config's best chance to beat a leader)
    trace: list[tuple[int, dict[str, float]]] = field(default_factory=list)

    @property
    def measured(self) -> set[str]:
        return set(self.observed)

    def ruled_out_after(self, label: str) -> int | None:
        """The number of starts after which the model ruled `label` out for good (None: it never did)."""
        after = None
        for starts, chances in self.trace:
            if chances.get(label, 1.0) >= RULED_OUT:
                after = None
            elif after is None:
                after = starts
        return after


def initial_design(space: TuneSpace) -> list[tuple[Candidate, str]]:
    """The configs the models need before they can predict, each with the reason (see the module doc)."""
    chosen: list[tuple[Candidate, str]] = []
    specs = list(space.candidates)
    groups = list(dict.fromkeys(c.group for c in specs))
    for group in groups:
        members = [c for c in specs if c.group == group]
        deepest = max(members, key=lambda c: (c.draft.depth, -c.draft.width, -c.draft.draft_tokens))
        kind = "chain" if deepest.draft.width == 1.0 else "config"
        where = f" of {group}" if len(groups) > 1 else ""
        chosen.append((deepest, f"the deepest {kind}{where}: it measures the acceptance of every draft position"))
    terms = terms_for([c.draft for c in specs])
    widest = max(c.draft.width for c in specs)
    trees = [c for c in specs if c.draft.width == widest and c not in _picked(chosen)]
    if widest > 1.0 and trees:
        tree = max(trees, key=lambda c: _design_score([*_picked(chosen), c], specs, terms))
        chosen.append((tree, "the widest tree: what topk adds over a chain, and what many draft tokens cost"))
    while _rank(_picked(chosen), terms) < len(terms):
        rest = [c for c in specs if c not in _picked(chosen)]
        best = max(rest, key=lambda c: _design_score([*_picked(chosen), c], specs, terms), default=None)
        if best is None or _rank([*_picked(chosen), best], terms) == _rank(_picked(chosen), terms):
            break
        chosen.append((best, f"completes the cost fit ({' + '.join(terms)} need configs that differ in them)"))
    return chosen


def run_search(
    space: TuneSpace,
    runner: Runner,
    settings: ModelSettings,
    say: Callable[[str], None] = lambda line: None,
) -> TuneResult:
    """Search `space` with `runner`'s servers; progress goes to `say`, one line at a time."""
    search = _Search(space, runner, settings, say)
    return search.run()


class _Search:
    def __init__(self, space: TuneSpace, runner: Runner, settings: ModelSettings, say: Callable[[str], None]):
        self.space = space
        self.runner = runner
        self.settings = settings
        self.say = say
        self.observed: dict[str, dict[Objective, LevelData]] = {}
        self.starts: list[Start] = []
        self.failed: dict[str, str] = {}
        self.latest: Forecast | None = None
        self.trace: list[tuple[int, dict[str, float]]] = []

    def run(self) -> TuneResult:
        space = self.space
        self._start(space.reference, "the reference: every speedup is over it", space.max_rounds)
        design = initial_design(space)[: max(1, space.budget - 2)]
        for cand, why in design:
            self._start(cand, why, space.rounds)
        stopped, settled = f"the budget of {space.budget} starts is spent", False
        while True:
            current = self._forecast()
            if current.settled(space.confidence, set(self.observed)):
                stopped = f"every leader is ahead of every other config with {space.confidence:.0%} confidence"
                settled = True
                break
            if len(self.starts) >= space.budget:
                break
            pick = self._most_promising(current)
            if pick is None:
                stopped = "no config left that could beat the leaders (expected improvement below 0.01%)"
                break
            gain = current.improvement[pick.label]
            self._start(pick, f"expected improvement {gain:+.1%}", space.rounds)
        final = self._forecast()
        return TuneResult(space, self.starts, self.observed, final, stopped, settled, dict(self.failed), self.trace)

    def _most_promising(self, current: Forecast) -> Candidate | None:
        options = [c for c in self.space.candidates if c.label not in self.observed and c.label not in self.failed]
        if not options:
            return None
        best = max(options, key=lambda c: current.improvement.get(c.label, 0.0))
        return best if current.improvement.get(best.label, 0.0) > MIN_IMPROVEMENT else None

    def _forecast(self) -> Forecast:
        self.latest = forecast(self.space, self.observed, self.settings, self.failed)
        chances = {c.label: self.latest.best_chance(c.label) for c in self.space.candidates}
        self.trace.append((len(self.observed) + len(self.failed), chances))  # starts whose data is in
        return self.latest

    def _start(self, cand: Candidate, why: str, rounds: int) -> None:
        space, number = self.space, len(self.starts) + 1
        self.say(f"start {number}/{space.budget}: {cand.label} ({settings_text(cand)}): {why}")
        if self.latest is not None and not cand.is_reference:
            for o in space.objectives:
                outlook = self.latest.outlooks[(cand.label, o)]
                p = outlook.predicted_speedup
                if p is not None and p.bounded and p.low > 0 and p.high <= 3.0 * p.low:  # says something
                    self.say(
                        f"  predicted {o.label}: {p.value:.2f}x [{p.low:.2f}, {p.high:.2f}], "
                        f"chance to beat the leader {outlook.chance:.0%}"
                    )
        try:
            self.observed[cand.label] = dict(self.runner.measure(cand, rounds))
        except ServerError as exc:
            self.runner.release(cand)
            if cand.is_reference:
                raise
            self.failed[cand.label] = str(exc).splitlines()[0]
            self.starts.append(Start(cand.label, why, 0, self.failed[cand.label]))
            self.say(f"  {cand.label} failed: {self.failed[cand.label]}")
            return
        done = rounds
        if cand.is_reference:
            done += self._steady_reference(cand)
        while not cand.is_reference and done < space.max_rounds:
            current = self._forecast()
            if not current.in_contention(cand.label, space.confidence):
                self.say(
                    f"  {cand.label}: out of contention after {done} rounds (best chance to beat a leader "
                    f"{current.best_chance(cand.label):.0%})"
                )
                break
            more = min(done, space.max_rounds - done)
            self.say(f"  {cand.label}: in contention, {more} more round{'s' if more != 1 else ''}")
            self.observed[cand.label] = dict(self.runner.measure(cand, more))
            done += more
        self.runner.release(cand)
        self.starts.append(Start(cand.label, why, done))
        for o, data in self.observed[cand.label].items():
            ref = self.observed[space.reference.label][o].mean_throughput
            cycle = f", cycle {data.mean_cycle_ms:.2f} ms" if data.mean_cycle_ms else ""
            speedup = "" if cand.is_reference else f", {data.mean_throughput / ref:.2f}x"
            self.say(f"  measured {o.label}: {data.mean_throughput:.1f} tok/s{speedup}{cycle} ({data.rounds} rounds)")

    def _steady_reference(self, ref: Candidate) -> int:
        """The reference anchors every speedup: when its rounds differ more than starts do (round CV above
        run_to_run_cv: the machine was disturbed), measure it as long again, once. Returns the rounds added."""
        noisy = {
            o: cv
            for o, data in self.observed[ref.label].items()
            if (cv := coefficient_of_variation(data.throughput)) is not None and cv > self.settings.run_cv
        }
        if not noisy:
            return 0
        where = ", ".join(f"{o.label} {cv:.1%}" for o, cv in noisy.items())
        self.say(f"  {ref.label}: its rounds differ more than run_to_run_cv ({where}): {self.space.max_rounds} more")
        self.observed[ref.label] = dict(self.runner.measure(ref, self.space.max_rounds))
        return self.space.max_rounds


def _picked(chosen: list[tuple[Candidate, str]]) -> list[Candidate]:
    return [c for c, _ in chosen]


def _matrix(cands: list[Candidate], specs: list[Candidate], terms: tuple[str, ...]) -> np.ndarray:
    scale = [max(term_values(t, c.draft) for c in specs) for t in terms]
    return np.array([[term_values(t, c.draft) / s for t, s in zip(terms, scale, strict=True)] for c in cands])


def _rank(cands: list[Candidate], terms: tuple[str, ...]) -> int:
    if not cands:
        return 0
    return int(np.linalg.matrix_rank(np.array([[term_values(t, c.draft) for t in terms] for c in cands])))


def _design_score(cands: list[Candidate], specs: list[Candidate], terms: tuple[str, ...]) -> float:
    """log det of the normalised cost design (plus a little ridge, so incomplete designs rank too)."""
    x = _matrix(cands, specs, terms)
    return float(np.linalg.slogdet(x.T @ x + 1e-6 * np.eye(len(terms)))[1])
