"""The speculative-decoding cost model: cycle time, break-even accept length, implied acceptance,
and the split of verify cost into a fixed and a per-token part (docs/story.md, docs/metrics.md).

Why: tok/s alone hid the real story in the session this tool was born from. A 5-step EAGLE-3 config
at 71 tok/s "lost" to a remembered 90 tok/s plain server (a phantom measured with NCCL tuning), and
cutting draft tokens was expected to halve verify time but only saved 11%, because verify is
dominated by fixed overhead. These numbers say *why* a config wins or loses:

* cycle time = τ * TPOT: one draft-and-verify cycle emits τ tokens on average.
* break-even τ* = cycle / reference TPOT: the accept length at which speculation just pays.
  headroom = τ - τ*; speedup by TPOT = reference TPOT / (cycle / τ) = τ / τ*.
* implied per-draft acceptance alpha (chains of k drafts): invert τ = (1 - alpha^(k+1)) / (1 - alpha)
  (Leviathan et al., 2023).
* verify-cost fit: cycle = a + b·n over configs that differ only in draft tokens n; a/cycle is the
  fixed share that no draft-length tuning can remove.

Interval propagation: inputs may be plain floats (exact) or `stats.Estimate`s. Every function here
is monotone in each argument separately (for any fixed values of the others), so the output's
extremes over the box of input intervals sit at its corners: we evaluate all corners (interval
arithmetic). This needs no independence or normality, unlike the delta method, and it is
conservative. The label it gets is the Bonferroni guarantee 1 - Σ(1 - cᵢ) over the inputs with
intervals (two 90% inputs give an interval labelled 80%; its real coverage is usually higher).
An unknown input interval, or a divisor whose interval reaches 0, makes the output unknown.
Because corners treat inputs as free to vary independently, a quantity that enters twice (τ in both
τ and τ*) is computed from a form where it enters once, see `analyze`.
"""

import itertools
import math
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TypeVar

from pytest_specperf.verdict.stats import DEFAULT_CONFIDENCE, Estimate, t_quantile

Number = float | Estimate
K = TypeVar("K", bound=Hashable)


# --- interval arithmetic -------------------------------------------------------------------------


def _as_estimate(x: Number) -> Estimate:
    return x if isinstance(x, Estimate) else Estimate.exact(float(x))


def propagate(f: Callable[..., float], *inputs: Number) -> Estimate:
    """Apply ``f`` to point values and to every corner of the inputs' intervals (see module doc).

    ``f`` must be monotone in each argument when the others are held fixed, and defined on the box.
    """
    ests = [_as_estimate(x) for x in inputs]
    value = f(*(e.value for e in ests))
    n, confidence = _label(ests)
    if not all(e.bounded for e in ests):
        return Estimate.unknown(value, n, confidence)
    corners = [f(*c) for c in itertools.product(*((e.low, e.high) for e in ests))]
    if not all(math.isfinite(c) for c in corners):
        return Estimate.unknown(value, n, confidence)
    return Estimate(value, min(*corners, value), max(*corners, value), n, confidence)


def _label(ests: Sequence[Estimate]) -> tuple[int, float]:
    """(n, confidence) of a derived Estimate: the fewest rounds behind any sampled input, and the
    Bonferroni guarantee 1 - Σ(1 - cᵢ) (exact inputs have confidence 1 and add nothing)."""
    n = min((e.n for e in ests if e.n > 0 or e.low != e.high), default=0)
    return n, max(1.0 - math.fsum(1.0 - e.confidence for e in ests), 1e-9)


def _divide(f: Callable[..., float], divisors: Sequence[Number], *inputs: Number) -> Estimate:
    """`propagate` for a formula that divides by ``divisors`` (times and rates, so > 0).

    Division is monotone only while the divisor keeps its sign: if a divisor's interval reaches 0
    the result is unknown; a divisor whose value is ≤ 0 is a caller error.
    """
    divs = [_as_estimate(d) for d in divisors]
    if any(not d.value > 0.0 for d in divs):
        raise ValueError(f"divisor must be > 0, got {[d.value for d in divs]}")
    if all(d.low > 0.0 for d in divs):
        return propagate(f, *inputs)
    ests = [_as_estimate(x) for x in inputs]
    return Estimate.unknown(f(*(e.value for e in ests)), *_label(ests))


# --- the cycle -----------------------------------------------------------------------------------


def cycle_time(accept_length: Number, tpot_ms: Number) -> Estimate:
    """τ * TPOT (ms): the time of one draft-and-verify cycle, which emits τ tokens on average."""
    return propagate(lambda tau, t: tau * t, accept_length, tpot_ms)


def break_even_accept_length(cycle_ms: Number, reference_tpot_ms: Number) -> Estimate:
    """τ* = cycle / reference TPOT: below this accept length the cycle costs more than plain decoding."""
    return _divide(lambda c, r: c / r, [reference_tpot_ms], cycle_ms, reference_tpot_ms)


def headroom(accept_length: Number, break_even: Number) -> Estimate:
    """τ - τ*: how many tokens per cycle speculation has to spare (or lacks, if negative).

    Treats the two as independent: if τ* was computed from this same τ, use `analyze`.
    """
    return propagate(lambda tau, star: tau - star, accept_length, break_even)


def speedup_from_tpot(reference_tpot_ms: Number, tpot_ms: Number) -> Estimate:
    """Reference TPOT / speculative TPOT (= τ / τ*): per-stream speedup."""
    return _divide(lambda r, t: r / t, [tpot_ms], reference_tpot_ms, tpot_ms)


def speedup_from_throughput(throughput: Number, reference_throughput: Number) -> Estimate:
    """Speculative / reference throughput. With raw round samples prefer `stats.ratio_estimate`
    (Fieller), which is tighter than interval arithmetic on two means."""
    return _divide(lambda s, r: s / r, [reference_throughput], throughput, reference_throughput)


# --- acceptance ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImpliedAcceptance:
    """Per-draft acceptance alpha implied by an accept length, or None with the reason it is undefined."""

    alpha: Estimate | None
    reason: str | None = None


def expected_accept_length(alpha: float, draft_steps: int) -> float:
    """τ = 1 + alpha + ... + alpha^k, i.e. (1 - alpha^(k+1)) / (1 - alpha) without the 0/0 at alpha = 1."""
    return math.fsum(alpha**i for i in range(draft_steps + 1))


def _invert_chain(tau: float, k: int) -> float:
    if tau <= 1.0:
        return 0.0
    if tau >= k + 1.0:
        return 1.0
    from scipy.optimize import brentq  # only where a τ is inverted: scipy.optimize is slow to import

    return float(brentq(lambda a: expected_accept_length(a, k) - tau, 0.0, 1.0, xtol=1e-12))


def implied_acceptance(accept_length: Number, draft_steps: int, topk: int = 1) -> ImpliedAcceptance:
    """Invert τ = (1 - alpha^(k+1)) / (1 - alpha) for a chain of k draft steps (brentq on [0, 1]).

    τ = 1 gives alpha = 0 and τ = k + 1 gives alpha = 1. A point estimate outside [1, k + 1] is impossible
    for a chain and gets None with a reason; interval ends outside it are clamped (alpha is in [0, 1]).
    """
    if draft_steps < 1:
        raise ValueError(f"draft_steps must be >= 1, got {draft_steps}")
    if topk != 1:
        return ImpliedAcceptance(None, f"the chain formula needs topk=1 (got topk={topk}: a tree)")
    tau = _as_estimate(accept_length)
    if not 1.0 <= tau.value <= draft_steps + 1.0:
        reason = f"accept length {tau.value:g} is outside [1, {draft_steps + 1}] for {draft_steps} draft steps"
        return ImpliedAcceptance(None, reason)
    alpha = propagate(lambda t: _invert_chain(t, draft_steps), _clamp_to_chain(tau, draft_steps))
    return ImpliedAcceptance(alpha)


def _clamp_to_chain(tau: Estimate, k: int) -> Estimate:
    """A chain's τ lies in [1, k + 1]: clamping its interval keeps alpha in [0, 1], even when unknown."""
    low, high = max(tau.low, 1.0), min(tau.high, k + 1.0)
    return Estimate(tau.value, low, high, tau.n, tau.confidence)


def chain_acceptance_rate(accept_length: Number, draft_steps: int) -> Estimate:
    """(τ - 1) / k: the share of proposed draft tokens accepted, for a chain of k drafts."""
    if draft_steps < 1:
        raise ValueError(f"draft_steps must be >= 1, got {draft_steps}")
    return propagate(lambda t: (t - 1.0) / draft_steps, accept_length)


# --- one measurement against its reference -------------------------------------------------------


@dataclass(frozen=True)
class CostModel:
    """The cost-model view of one speculative measurement against the reference (all in ms/tokens)."""

    accept_length: Estimate
    tpot_ms: Estimate
    reference_tpot_ms: Estimate
    cycle_ms: Estimate
    break_even_accept_length: Estimate
    headroom: Estimate
    speedup_tpot: Estimate
    speedup_throughput: Estimate | None
    implied_acceptance: ImpliedAcceptance | None
    acceptance_rate: Estimate | None


def analyze(
    accept_length: Number,
    tpot_ms: Number,
    reference_tpot_ms: Number,
    *,
    throughput: Number | None = None,
    reference_throughput: Number | None = None,
    draft_steps: int | None = None,
    topk: int = 1,
) -> CostModel:
    """All cost-model numbers for one speculative measurement.

    Headroom is computed as τ·(1 - TPOT/ref) rather than τ - τ*(τ), and the TPOT speedup as ref/TPOT,
    so that τ's interval enters once (interval arithmetic would otherwise count its width twice).
    """
    cycle = cycle_time(accept_length, tpot_ms)
    room = _divide(lambda tau, t, r: tau - tau * t / r, [reference_tpot_ms], accept_length, tpot_ms, reference_tpot_ms)
    by_throughput = None
    if throughput is not None and reference_throughput is not None:
        by_throughput = speedup_from_throughput(throughput, reference_throughput)
    chain_steps = draft_steps if topk == 1 else None
    return CostModel(
        accept_length=_as_estimate(accept_length),
        tpot_ms=_as_estimate(tpot_ms),
        reference_tpot_ms=_as_estimate(reference_tpot_ms),
        cycle_ms=cycle,
        break_even_accept_length=break_even_accept_length(cycle, reference_tpot_ms),
        headroom=room,
        speedup_tpot=speedup_from_tpot(reference_tpot_ms, tpot_ms),
        speedup_throughput=by_throughput,
        implied_acceptance=implied_acceptance(accept_length, draft_steps, topk) if draft_steps else None,
        acceptance_rate=chain_acceptance_rate(accept_length, chain_steps) if chain_steps else None,
    )


# --- verify-cost fit -----------------------------------------------------------------------------


class FitStatus(Enum):
    """How much a verify-cost fit can say."""

    NOT_ENOUGH_POINTS = "not enough points"  # < 2 distinct draft-token counts
    EXACT = "exact"  # a line through two points: no residuals, so no CI
    FITTED = "fitted"  # least squares over ≥ 3 points, with t intervals


@dataclass(frozen=True)
class VerifyCostFit:
    """cycle = a + b·n over configs that differ only in draft tokens n.

    ``fixed_ms`` (a) and ``per_token_ms`` (b) are None when there are not enough points; for an
    exact two-point fit their intervals are unknown (-inf, inf), as the line has no residuals.
    """

    status: FitStatus
    points: tuple[tuple[float, float], ...]
    fixed_ms: Estimate | None
    per_token_ms: Estimate | None
    note: str

    def predict(self, draft_tokens: float) -> float | None:
        """Predicted cycle (ms) at ``draft_tokens``; extrapolation beyond the points is the caller's risk."""
        if self.fixed_ms is None or self.per_token_ms is None:
            return None
        return self.fixed_ms.value + self.per_token_ms.value * draft_tokens

    def fixed_share(self, cycle_ms: Number) -> Estimate | None:
        """a / cycle: the part of a cycle that shortening the draft cannot remove."""
        if self.fixed_ms is None:
            return None
        return _divide(lambda a, c: a / c, [cycle_ms], self.fixed_ms, cycle_ms)

    @property
    def point_fixed_shares(self) -> tuple[float, ...]:
        """a / cycle at each fitted point (empty when there is no fit)."""
        if self.fixed_ms is None:
            return ()
        return tuple(self.fixed_ms.value / cycle for _, cycle in self.points)


def fit_verify_cost(points: Iterable[tuple[float, float]], confidence: float = DEFAULT_CONFIDENCE) -> VerifyCostFit:
    """Least-squares fit of cycle_ms = a + b·draft_tokens (points are (draft_tokens, cycle_ms)).

    One point, or all at the same draft-token count, cannot separate a from b: we say so rather than
    guess. Two distinct points define the line exactly (no CI). Three or more give t intervals on
    a and b with n - 2 degrees of freedom (intervals are degenerate when the points are collinear).
    """
    pts = tuple(sorted((float(n), float(c)) for n, c in points))
    if len({n for n, _ in pts}) < 2:
        note = f"not enough points: {len(pts)} point(s) at {len({n for n, _ in pts})} draft-token count(s)"
        return VerifyCostFit(FitStatus.NOT_ENOUGH_POINTS, pts, None, None, note)
    if len(pts) == 2:
        (n0, c0), (n1, c1) = pts
        b = (c1 - c0) / (n1 - n0)
        a = c0 - b * n0
        note = "exact fit through two points: no confidence interval"
        return VerifyCostFit(
            FitStatus.EXACT, pts, Estimate.unknown(a, 2, confidence), Estimate.unknown(b, 2, confidence), note
        )
    return _least_squares(pts, confidence)


def _least_squares(pts: tuple[tuple[float, float], ...], confidence: float) -> VerifyCostFit:
    from scipy.stats import linregress  # only where a cost is fitted: scipy.stats is slow to import

    fit = linregress([n for n, _ in pts], [c for _, c in pts])
    t = t_quantile(confidence, len(pts) - 2)

    def est(value: float, stderr: float) -> Estimate:
        return Estimate(value, value - t * stderr, value + t * stderr, len(pts), confidence)

    a = est(float(fit.intercept), float(fit.intercept_stderr))
    b = est(float(fit.slope), float(fit.stderr))
    note = f"least squares over {len(pts)} points (r² = {fit.rvalue**2:.3f})"
    return VerifyCostFit(FitStatus.FITTED, pts, a, b, note)


def group_by_key(entries: Iterable[tuple[K, float, float]]) -> dict[K, tuple[tuple[float, float], ...]]:
    """Group (key, draft_tokens, cycle_ms) by the caller's opaque key.

    The key stands for "everything but draft tokens" (model, draft model, topk, algorithm, extra
    args): only configs sharing it may be fitted together, otherwise a and b mix other effects.
    """
    groups: dict[K, list[tuple[float, float]]] = {}
    for key, draft_tokens, cycle_ms in entries:
        groups.setdefault(key, []).append((float(draft_tokens), float(cycle_ms)))
    return {key: tuple(sorted(pts)) for key, pts in groups.items()}


def fit_verify_costs(
    entries: Iterable[tuple[K, float, float]], confidence: float = DEFAULT_CONFIDENCE
) -> dict[K, VerifyCostFit]:
    """`fit_verify_cost` for every group of configs that differ only in draft tokens."""
    return {key: fit_verify_cost(pts, confidence) for key, pts in group_by_key(entries).items()}
