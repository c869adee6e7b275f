"""Predictions for every candidate with intervals, the leader per objective, and expected improvement.

From the measured servers (tune/observe.py) the acceptance model (tune/acceptance.py, per group and
workload) and the cost model (tune/cost.py, per objective) are fitted; a candidate's throughput at an
objective is then

    decode   = (tokens - 1) / tokens per verify step x cycle
    tok/s    = efficiency x tokens / (TTFT + decode)

with TTFT the lowest median of the measured servers at that objective (a late stream inflates TTFT,
never shrinks it) and efficiency (throughput x E2E / tokens: how many requests are in flight, less the
gaps between them) from the measured speculative servers there. Draws of the
fitted parameters give a distribution of every candidate's tok/s (correlated across candidates, as
their predictions share parameters).

The model checks itself: each measured config is predicted again from the others alone (leave one
out); what those predictions miss beyond their own uncertainty becomes a systematic error that widens
every prediction. A measured config's best estimate combines its measurement with its leave-one-out
prediction (inverse-variance weights: the model pools the start-to-start noise of every start), unless
the two disagree by more than three standard deviations; then the measurement alone counts and the
config is flagged. And when the measured cycles scatter more around the cost fit than `run_to_run_cv`
allows (reduced chi-square above 1), the start-to-start spread at that objective is taken as that much
larger for every estimate and interval there: the prior may not know the node (or the machine) well.

Intervals (90%): a predicted throughput is where the true value lies; a predicted speedup is where the
config's speedup would be measured in this run, over this run's reference: the prediction's uncertainty
plus the start-to-start spread (`run_to_run_cv`) and round noise the config's own start would add. (The
reference's offset is in the prediction and in such a measurement alike, so it cancels.)

Decisions use the estimates: the leader of an objective is the highest estimate; its `chance` is the
smallest probability that it beats another config; another config's `chance` is its probability of
beating the leader. Expected improvement (summed over objectives) is E[max(0, log tok/s - log of the best
measured estimate)]: the gain a start of that config is expected to bring, in relative terms.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

import numpy as np

from pytest_specperf.tune.acceptance import AcceptanceFit, AcceptanceObservation, fit_acceptance, tokens_per_verify
from pytest_specperf.tune.cost import CostFit, CyclePoint, fit_cycle_cost, terms_for
from pytest_specperf.tune.observe import LevelData
from pytest_specperf.tune.space import Candidate, Objective, TuneSpace
from pytest_specperf.verdict.history import speedup_estimate
from pytest_specperf.verdict.stats import DEFAULT_CONFIDENCE, Estimate, mean_estimate

Z90 = 1.6448536269514722
#: leave-one-out predictions less certain than this (relative sd) say nothing about systematic error
_LOO_USABLE_SD = 0.15
#: a prediction this far (in its own standard deviations) from the measurement is a misfit
_MISFIT_Z = 3.0

Observed = Mapping[str, Mapping[Objective, LevelData]]


@dataclass(frozen=True)
class ModelSettings:
    """`run_cv`: the start-to-start CV (the config's `run_to_run_cv`); draws per fit, and their seed (the
    same data always give the same forecast)."""

    run_cv: float = 0.02
    samples: int = 800
    seed: int = 20240917


@dataclass(frozen=True)
class Outlook:
    """One candidate at one objective: what was measured, what the model says, and the combination."""

    label: str
    objective: Objective
    measured: LevelData | None
    throughput: Estimate | None  # measured rounds
    speedup: Estimate | None  # measured, over the reference (the plugin's speedup interval)
    predicted_throughput: Estimate | None  # the model's (leave-one-out for a measured config)
    predicted_speedup: Estimate | None  # where its speedup measured in this run would land
    estimate: float  # log tok/s: the best estimate
    estimate_sd: float
    chance: float = 0.0
    misfit: bool = False

    @property
    def estimated_throughput(self) -> float:
        return math.exp(self.estimate)


@dataclass
class Forecast:
    """Everything the search and the output need from one fit of the models."""

    outlooks: dict[tuple[str, Objective], Outlook]
    leaders: dict[Objective, str]
    #: per objective, the config to recommend and its smallest chance to beat any other (see `_recommend`)
    recommended: dict[Objective, tuple[str, float]]
    improvement: dict[str, float]
    acceptance: dict[tuple[str, str], AcceptanceFit]
    cost: dict[Objective, CostFit]
    systematic_sd: float
    notes: list[str] = field(default_factory=list)

    def leader_chance(self, objective: Objective) -> float:
        return self.outlooks[(self.leaders[objective], objective)].chance

    def settled(self, confidence: float, measured: set[str]) -> bool:
        """Every objective's leader was measured and is ahead of every other config with `confidence`."""
        return all(self.leaders[o] in measured and self.leader_chance(o) >= confidence for o in self.leaders)

    def in_contention(self, label: str, confidence: float) -> bool:
        """Leads an objective, or beats its leader with a chance of at least 1 - confidence."""
        return any(self.chance(label, o) >= 1.0 - confidence for o in self.leaders)

    def chance(self, label: str, objective: Objective) -> float:
        """The chance that `label` beats the leader of `objective` (1 for the leader itself)."""
        return 1.0 if self.leaders[objective] == label else self.outlooks[(label, objective)].chance

    def best_chance(self, label: str) -> float:
        """The largest chance over objectives that `label` beats the leader (1 where it leads)."""
        return max(self.chance(label, o) for o in self.leaders)


@dataclass(frozen=True)
class _Fitted:
    acceptance: dict[tuple[str, str], AcceptanceFit]
    cost: dict[Objective, CostFit]
    ttft: dict[Objective, float]
    efficiency: dict[Objective, float]
    floor: dict[Objective, float]


@dataclass(frozen=True)
class _Belief:
    """What is believed about one config at one objective: log tok/s with its variance."""

    mean: float
    variance: float
    misfit: bool = False
    prediction: tuple[float, float] | None = None  # the model's (mean, variance), leave-one-out if measured


def forecast(
    space: TuneSpace, observed: Observed, settings: ModelSettings = ModelSettings(), failed: Collection[str] = ()
) -> Forecast:
    """Fit the models to `observed` (by candidate label, including the reference) and predict everything;
    configs that `failed` to start are predicted but never lead (nobody can run them as they are)."""
    if space.reference.label not in observed:
        raise ValueError("the reference must be measured before anything can be predicted")
    measured = [c for c in space.candidates if c.label in observed]
    fitted = _fit(space, observed, measured, settings.run_cv)
    model = _sample(space, observed, fitted, space.candidates, np.random.default_rng(settings.seed), settings.samples)
    loo = _leave_one_out(space, observed, measured, settings, fitted)
    spread = {o: settings.run_cv * math.sqrt(max(1.0, fit.misfit)) for o, fit in fitted.cost.items()}
    systematic = _systematic(observed, loo, spread)
    noise = np.random.default_rng(settings.seed + 2)
    labels = [space.reference.label, *(c.label for c in space.candidates)]
    outlooks: dict[tuple[str, Objective], Outlook] = {}
    leaders: dict[Objective, str] = {}
    recommended: dict[Objective, tuple[str, float]] = {}
    improvement = {c.label: 0.0 for c in space.candidates if c.label not in observed}
    for o in space.objectives:
        beliefs, draws = _beliefs(space, observed, model[o], loo, systematic, o, spread[o], settings, noise)
        leader = max((label for label in labels if label not in failed), key=lambda label: beliefs[label].mean)
        leaders[o] = leader
        lead = draws[:, labels.index(leader)]
        beats = {
            label: 0.0 if label in failed else float(np.mean(draws[:, j] > lead))
            for j, label in enumerate(labels)
            if label != leader
        }
        known = [label for label in labels if label in observed]
        best_measured = max(beliefs[label].mean for label in known)
        recommended[o] = _recommend(labels, draws, beliefs, known, leader, space.confidence)
        ref = observed[space.reference.label][o]
        for j, label in enumerate(labels):
            if label in improvement:
                improvement[label] += float(np.mean(np.maximum(0.0, draws[:, j] - best_measured)))
            chance = 1.0 - max(beats.values(), default=0.0) if label == leader else beats[label]
            data = observed.get(label, {}).get(o)
            outlooks[(label, o)] = _outlook(label, o, data, ref, beliefs[label], chance, spread[o])
    notes = [
        f"{o.label}: the measured cycles scatter more than run_to_run_cv {settings.run_cv:.1%} allows: "
        f"start-to-start spread taken as {spread[o]:.1%}"
        for o in space.objectives
        if spread[o] > settings.run_cv * 1.05
    ]
    if systematic > 0:
        notes.append(
            f"leave-one-out predictions missed by more than their intervals: every prediction widened "
            f"by a systematic {systematic:.1%}"
        )
    return Forecast(outlooks, leaders, recommended, improvement, fitted.acceptance, fitted.cost, systematic, notes)


def _leave_one_out(
    space: TuneSpace, observed: Observed, measured: list[Candidate], settings: ModelSettings, full: _Fitted
) -> dict[tuple[str, Objective], tuple[float, float]]:
    """Each measured config predicted from the others alone: (mean, variance) of log tok/s."""
    out = {}
    for cand in measured:
        others = [c for c in measured if c is not cand]
        sub = _fit(space, observed, others, settings.run_cv, full)
        draws = _sample(space, observed, sub, [cand], np.random.default_rng(settings.seed + 1), settings.samples)
        for o in space.objectives:
            values = draws[o][:, 0]
            out[(cand.label, o)] = (float(np.mean(values)), float(np.var(values)))
    return out


def _systematic(
    observed: Observed, loo: dict[tuple[str, Objective], tuple[float, float]], spread: dict[Objective, float]
) -> float:
    """What leave-one-out predictions miss beyond their own and the measurements' variance (method of
    moments over the predictions certain enough to say anything; 0 with fewer than two)."""
    excess = []
    for (label, o), (m, v) in loo.items():
        data = observed[label][o]
        if v <= _LOO_USABLE_SD**2:
            excess.append((math.log(data.level) - m) ** 2 - v - spread[o] ** 2 - data.level_variance)
    return math.sqrt(max(0.0, sum(excess) / len(excess))) if len(excess) >= 2 else 0.0


def _beliefs(
    space: TuneSpace,
    observed: Observed,
    model: np.ndarray,
    loo: dict[tuple[str, Objective], tuple[float, float]],
    systematic: float,
    objective: Objective,
    spread: float,
    settings: ModelSettings,
    noise: np.random.Generator,
) -> tuple[dict[str, _Belief], np.ndarray]:
    """Every config's belief at one objective, and joint draws of log tok/s (reference first).

    Unmeasured configs are drawn from the model (jointly: they share its parameters) plus the
    systematic error; measured ones from their estimate, independently."""
    cv2, size = spread**2, settings.samples
    ref = observed[space.reference.label][objective]
    draws = np.empty((size, len(space.candidates) + 1))
    beliefs = {space.reference.label: _Belief(math.log(ref.level), cv2 + ref.level_variance)}
    draws[:, 0] = noise.normal(beliefs[space.reference.label].mean, math.sqrt(cv2 + ref.level_variance), size)
    for j, cand in enumerate(space.candidates, 1):
        data = observed.get(cand.label, {}).get(objective)
        if data is None:
            column = model[:, j - 1] + noise.normal(0.0, systematic, size)
            mean, var = float(np.mean(column)), float(np.var(column))
            beliefs[cand.label] = _Belief(mean, var, prediction=(mean, var))
            draws[:, j] = column
            continue
        m, v = loo[(cand.label, objective)]
        prediction = (m, v + systematic**2)
        mean, var, misfit = _combine(data, prediction, cv2)
        beliefs[cand.label] = _Belief(mean, var, misfit, prediction)
        draws[:, j] = noise.normal(mean, math.sqrt(var), size)
    return beliefs, draws


def _recommend(
    labels: list[str],
    draws: np.ndarray,
    beliefs: dict[str, _Belief],
    measured: list[str],
    leader: str,
    confidence: float,
) -> tuple[str, float]:
    """The config to recommend, with the smallest chance that it beats another config.

    The best measured config, if it beats the reference (`labels[0]`) with `confidence`: speculation has
    to pay credibly (a disturbed reference measurement must not crown a config that merely looks
    faster); else the reference. A config never started replaces it only when the model is that sure it
    is faster still.
    """

    def beats(a: str, b: str) -> float:
        return float(np.mean(draws[:, labels.index(a)] > draws[:, labels.index(b)]))

    reference = labels[0]
    pick = max(measured, key=lambda label: beliefs[label].mean)
    if pick != reference and beats(pick, reference) < confidence:
        pick = reference
    if leader not in measured and beats(leader, pick) >= confidence and beats(leader, reference) >= confidence:
        pick = leader
    column = draws[:, labels.index(pick)]
    others = [float(np.mean(column > draws[:, j])) for j, label in enumerate(labels) if label != pick]
    return pick, min(others, default=1.0)


def _combine(data: LevelData, prediction: tuple[float, float], cv2: float) -> tuple[float, float, bool]:
    """A measured config's estimate: its measurement, weighted with its leave-one-out prediction."""
    y, vy = math.log(data.level), cv2 + data.level_variance
    m, vm = prediction
    if not math.isfinite(vm) or abs(y - m) > _MISFIT_Z * math.sqrt(vy + vm):
        return y, vy, math.isfinite(vm)
    if vy <= 0.0:
        return y, 0.0, False
    weight = (1.0 / vy) / (1.0 / vy + 1.0 / vm)
    return weight * y + (1.0 - weight) * m, 1.0 / (1.0 / vy + 1.0 / vm), False


def _outlook(
    label: str,
    objective: Objective,
    data: LevelData | None,
    ref: LevelData,
    belief: _Belief,
    chance: float,
    run_cv: float,
) -> Outlook:
    throughput = speedup = predicted_tp = predicted_speedup = None
    if data is not None:
        throughput = (
            mean_estimate(data.throughput)
            if data.rounds > 1
            else Estimate.unknown(data.throughput[0], 1, DEFAULT_CONFIDENCE)
        )
        speedup = speedup_estimate(data.throughput, ref.throughput, run_cv)
    if belief.prediction is not None and math.isfinite(belief.prediction[1]):
        m, v = belief.prediction
        half = Z90 * math.sqrt(v)
        predicted_tp = Estimate(math.exp(m), math.exp(m - half), math.exp(m + half), 0, DEFAULT_CONFIDENCE)
        rounds = data.level_variance if data is not None else ref.level_variance
        spread = math.sqrt(v + run_cv**2 + rounds)  # this run's reference is in both: its offset cancels
        s = m - math.log(ref.level)
        predicted_speedup = Estimate(
            math.exp(s), math.exp(s - Z90 * spread), math.exp(s + Z90 * spread), 0, DEFAULT_CONFIDENCE
        )
    return Outlook(
        label,
        objective,
        data,
        throughput,
        speedup,
        predicted_tp,
        predicted_speedup,
        belief.mean,
        math.sqrt(belief.variance),
        chance,
        belief.misfit,
    )


def _fit(
    space: TuneSpace, observed: Observed, measured: list[Candidate], run_cv: float, near: _Fitted | None = None
) -> _Fitted:
    """Fit every model to `measured` (`near`: a fit to more data, where the optimiser starts)."""
    ref = observed[space.reference.label]
    positions = max(c.shape.depth for c in space.candidates if c.shape is not None)
    acceptance: dict[tuple[str, str], AcceptanceFit] = {}
    for group in dict.fromkeys(c.group for c in space.candidates):
        for workload in dict.fromkeys(o.workload for o in space.objectives):
            items = []
            for cand in measured:
                if cand.group != group or cand.shape is None:
                    continue
                hists = [d.histogram for o, d in observed[cand.label].items() if o.workload == workload and d.histogram]
                if hists:
                    mean = _mean_histogram(hists)
                    items.append(AcceptanceObservation(cand.shape.depth, cand.shape.width, mean))
            start = near.acceptance[(group, workload)].mean if near is not None else None
            acceptance[(group, workload)] = fit_acceptance(items, positions, start)
    terms = terms_for([c.shape for c in space.candidates if c.shape is not None])
    cost, ttft, efficiency, floor = {}, {}, {}, {}
    for o in space.objectives:
        ref_data = ref[o]
        spec = [observed[c.label][o] for c in measured if o in observed[c.label]]
        # a late stream inflates its TTFT, never shrinks it: the lowest median is the one that streamed
        ttft[o] = min(d.ttft_ms for d in [ref_data, *spec])
        plain_tpot = (ref_data.e2e_ms - ttft[o]) / max(ref_data.tokens - 1.0, 1.0)
        points = []
        for cand in measured:
            data = observed[cand.label].get(o)
            cycle = data.cycle_at(ttft[o]) if data is not None else None
            if data is None or cycle is None or cand.shape is None or cycle <= 0:
                continue
            points.append(CyclePoint(cand.shape, cycle, run_cv**2 + data.cycle_variance_at(ttft[o])))
        cost[o] = fit_cycle_cost(points, terms, plain_tpot * 2.0)
        efficiency[o] = _mean([d.efficiency for d in (spec or [ref_data])])
        floor[o] = 0.05 * min([p.cycle_ms for p in points] or [plain_tpot])
    return _Fitted(acceptance, cost, ttft, efficiency, floor)


def _sample(
    space: TuneSpace,
    observed: Observed,
    fitted: _Fitted,
    candidates: list[Candidate] | tuple[Candidate, ...],
    rng: np.random.Generator,
    size: int,
) -> dict[Objective, np.ndarray]:
    """Draws of log tok/s, shape (size, len(candidates)), per objective."""
    ref = observed[space.reference.label]
    thetas = {key: fit.sample(rng, size) for key, fit in fitted.acceptance.items()}
    betas = {o: fit.sample(rng, size) for o, fit in fitted.cost.items()}
    out = {}
    for o in space.objectives:
        tokens = ref[o].tokens
        columns = []
        for cand in candidates:
            assert cand.shape is not None
            fit = fitted.acceptance[(cand.group, o.workload)]
            tau = tokens_per_verify(thetas[(cand.group, o.workload)], fit.positions, cand.shape.depth, cand.shape.width)
            cycle = np.maximum(betas[o] @ fitted.cost[o].row(cand.shape), fitted.floor[o])
            decode = (tokens - 1.0) / tau * cycle
            columns.append(np.log(fitted.efficiency[o] * tokens * 1000.0 / (fitted.ttft[o] + decode)))
        out[o] = np.column_stack(columns) if columns else np.empty((size, 0))
    return out


def _mean_histogram(hists: list[tuple[float, ...]]) -> tuple[float, ...]:
    width = max(len(h) for h in hists)
    return tuple(sum(h[i] if i < len(h) else 0.0 for h in hists) / len(hists) for i in range(width))


def _mean(values: list[float]) -> float:
    return math.fsum(values) / len(values) if values else 0.0
