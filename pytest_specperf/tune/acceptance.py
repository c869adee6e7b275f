"""Acceptance per draft position, fitted to what servers report, to predict configs never started.

Why per position: an accept length says how many tokens one config's verify steps yield, not what a
deeper or wider draft would yield. The histogram of accepted drafts per verify step (SGLang's
`spec_correct_drafts_histogram`, vLLM's `acceptance_histogram` or its per-position counters) says, for
each draft position, how many steps reached it and how many went past: the conditional acceptance of
every position is measured instead of assumed (Leviathan et al.'s single alpha is the special case of
equal rates; a draft model that predicts 1-2 tokens well and little after that is not).

Model (one per acceptance group -- the same draft model and drafting settings -- and workload):

    q_i          conditional acceptance of draft position i of a chain (topk 1), i = 1..D
    w            candidates per depth of the config's tree (`Shape.width`, 1 for a chain)
    r_i          = 1 - (1 - q_i) ** (w ** gamma): one of w ** gamma effectively independent candidates
                 is right; gamma = 1 when siblings are independent, below 1 as far as they are alike
    P(A = a)     = r_1 ... r_a (1 - r_{a+1}) for a < depth;  P(A = depth) = r_1 ... r_depth
    tokens per verify step = 1 + E[A]  (accepted drafts plus the bonus token)

Fit: the maximum of the posterior, histograms as multinomial counts, with weak priors: logit q_i ~
N(0, 2^2) (90% of its mass between 0.04 and 0.96) and log gamma ~ N(0, 0.5^2) (independence unless
trees were measured). Positions no measured config reached keep their prior, so configs deeper than
anything measured get wide intervals, which is what makes the search look there if it could pay.
Uncertainty: the Laplace approximation, a normal around the optimum with the inverse Hessian of the
negative log posterior as covariance; `sample` draws from it for prediction intervals.

The counts are one round's worth (the mean over rounds): at temperature 0 every round repeats the same
prompts and the same acceptances, so more rounds add no evidence about acceptance.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize

from pytest_specperf.report.costmodel import implied_acceptance

#: prior standard deviations: logit of a position's rate, log of the tree gain
RATE_PRIOR_SD = 2.0
GAIN_PRIOR_SD = 0.5
_EPS = 1e-12


@dataclass(frozen=True)
class AcceptanceObservation:
    """One measured config: its draft's shape and its verify steps by number of accepted drafts."""

    depth: int
    width: float
    histogram: tuple[float, ...]

    @property
    def steps(self) -> float:
        return math.fsum(self.histogram)

    def counts(self) -> tuple[np.ndarray, np.ndarray]:
        """Per position i (0-based, i < depth): steps that reached it and went past, and that stopped there."""
        depth = max(self.depth, len(self.histogram) - 1)
        h = np.zeros(depth + 1)
        h[: len(self.histogram)] = self.histogram
        past = np.cumsum(h[::-1])[::-1][1:]  # steps with A > i
        return past[:depth], h[:depth]


def histogram_from_counters(drafts: int, accepted_per_position: Sequence[int]) -> tuple[int, ...]:
    """Steps by accepted drafts from per-position counters (vLLM): `accepted_per_position[i]` counts the
    steps whose draft was accepted at least to position i + 1, out of `drafts` steps."""
    reached = [drafts, *accepted_per_position]
    counts = [reached[i] - reached[i + 1] for i in range(len(accepted_per_position))]
    return (*counts, reached[-1])


def histogram_from_accept_length(accept_length: float, depth: int, steps: float) -> tuple[float, ...]:
    """The histogram of a chain with one acceptance alpha that gives `accept_length`, for a server that
    reports no histogram: alpha is implied by inverting tau = (1 - alpha^(k+1)) / (1 - alpha)."""
    if depth < 1:
        return (steps,)
    tau = min(max(accept_length, 1.0), depth + 1.0)
    implied = implied_acceptance(tau, depth, 1).alpha
    alpha = implied.value if implied is not None else 0.0
    probs = [alpha**a * (1.0 - alpha) for a in range(depth)] + [alpha**depth]
    return tuple(steps * p for p in probs)


@dataclass(frozen=True)
class AcceptanceFit:
    """The fitted rates of one group: `mean` = (logit q_1 .. logit q_D, log gamma), `cov` its covariance."""

    positions: int
    mean: np.ndarray
    cov: np.ndarray
    observations: int

    @property
    def rates(self) -> np.ndarray:
        """q_1 .. q_D at the optimum."""
        return _sigmoid(self.mean[: self.positions])

    @property
    def gain(self) -> float:
        """gamma at the optimum: how much of a tree's width counts as independent candidates."""
        return float(math.exp(self.mean[-1]))

    def rate_intervals(self, z: float = 1.645) -> list[tuple[float, float, float]]:
        """Per position: (q, low, high), a 90% interval by default (logit scale, then mapped)."""
        sd = np.sqrt(np.clip(np.diag(self.cov)[: self.positions], 0.0, None))
        m = self.mean[: self.positions]
        return [
            (float(_sigmoid(v)), float(_sigmoid(v - z * s)), float(_sigmoid(v + z * s)))
            for v, s in zip(m, sd, strict=True)
        ]

    @property
    def by_position(self) -> np.ndarray:
        """Acceptance by draft position (docs/metrics.md) of the fitted chain: per position i the share of
        verify steps that accept at least i drafts, q_1 ... q_i. The q_i are the model's conditional rates;
        this is the figure a report shows for a measured chain of the group, under the same label."""
        return np.cumprod(self.rates)

    def by_position_intervals(self, draws: int = 4000, seed: int = 0) -> list[tuple[float, float, float]]:
        """Per position: (share, low, high), a 90% interval from the Laplace approximation's draws (seeded,
        so a document is the same for the same fit)."""
        theta = self.sample(np.random.default_rng(seed), draws)[:, : self.positions]
        low, high = np.quantile(np.cumprod(_sigmoid(theta), axis=1), [0.05, 0.95], axis=0)
        return [
            (float(v), float(min(lo, v)), float(max(hi, v)))
            for v, lo, hi in zip(self.by_position, low, high, strict=True)
        ]

    def tokens_per_verify(self, depth: int, width: float) -> float:
        return float(tokens_per_verify(self.mean[None, :], self.positions, depth, width)[0])

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """Parameter draws from the Laplace approximation, shape (size, positions + 1)."""
        return rng.multivariate_normal(self.mean, self.cov, size=size, method="cholesky")


def tokens_per_verify(theta: np.ndarray, positions: int, depth: int, width: float) -> np.ndarray:
    """1 + E[accepted drafts] for each parameter row of `theta` (shape (S, positions + 1))."""
    depth = min(depth, positions)
    if depth <= 0:
        return np.ones(theta.shape[0])
    q = _sigmoid(theta[:, :depth])
    effective = width ** np.exp(theta[:, -1])
    r = -np.expm1(effective[:, None] * np.log1p(-np.clip(q, 0.0, 1.0 - _EPS)))
    return 1.0 + np.cumprod(r, axis=1).sum(axis=1)


def fit_acceptance(
    observations: Sequence[AcceptanceObservation], positions: int, start: np.ndarray | None = None
) -> AcceptanceFit:
    """The posterior optimum and its Laplace covariance over `positions` draft positions (`start`: where the
    optimiser begins, e.g. a fit to more data)."""
    data = [(o.counts(), np.log(max(o.width, 1.0))) for o in observations if o.steps > 0]
    data = [((past[:positions], stop[:positions]), log_w) for (past, stop), log_w in data]
    p = positions + 1

    def objective(theta: np.ndarray) -> tuple[float, np.ndarray]:
        return _neg_log_posterior(theta, data, positions)

    start = np.zeros(p) if start is None else np.asarray(start, dtype=float)
    result = minimize(objective, start, jac=True, method="BFGS")
    mean = np.asarray(result.x, dtype=float)
    hessian = _hessian(lambda t: objective(t)[1], mean)
    try:
        cov = np.linalg.inv(hessian)
        cov = (cov + cov.T) / 2.0
        np.linalg.cholesky(cov)
    except np.linalg.LinAlgError:
        cov = np.diag(np.concatenate([np.full(positions, RATE_PRIOR_SD**2), [GAIN_PRIOR_SD**2]]))
    return AcceptanceFit(positions, mean, cov, len(data))


def _neg_log_posterior(
    theta: np.ndarray, data: Sequence[tuple[tuple[np.ndarray, np.ndarray], float]], positions: int
) -> tuple[float, np.ndarray]:
    """-log posterior and its gradient; see the module docstring for the model."""
    value = 0.5 * float(np.sum(theta[:positions] ** 2)) / RATE_PRIOR_SD**2 + 0.5 * theta[-1] ** 2 / GAIN_PRIOR_SD**2
    grad = np.concatenate([theta[:positions] / RATE_PRIOR_SD**2, [theta[-1] / GAIN_PRIOR_SD**2]])
    gamma = math.exp(theta[-1])
    for (past, stop), log_w in data:
        d = len(past)
        if d == 0:
            continue
        t = theta[:d]
        q = _sigmoid(t)
        log_miss = -np.logaddexp(0.0, t)  # log(1 - q)
        e = math.exp(gamma * log_w)  # w ** gamma
        log_fail = e * log_miss  # log(1 - r)
        fail = np.exp(log_fail)
        hit = np.clip(-np.expm1(log_fail), _EPS, None)  # r
        value -= float(np.sum(past * np.log(hit) + stop * log_fail))
        # d/d logit q: log(1-r) moves by -e q; log r by e q (1-r)/r
        grad[:d] -= past * e * q * fail / hit - stop * e * q
        # d/d log gamma: e moves by e * gamma * log w; log(1-r) = e log_miss
        de = e * gamma * log_w
        grad[-1] -= float(np.sum(past * (-fail / hit) * log_miss * de + stop * log_miss * de))
    return value, grad


def _hessian(gradient: Callable[[np.ndarray], np.ndarray], x: np.ndarray, step: float = 1e-4) -> np.ndarray:
    """Central differences of the analytic gradient, symmetrised."""
    n = len(x)
    h = np.zeros((n, n))
    for i in range(n):
        e = np.zeros(n)
        e[i] = step
        h[i] = (gradient(x + e) - gradient(x - e)) / (2 * step)
    return (h + h.T) / 2.0


def _sigmoid(x: np.ndarray | float) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.asarray(x, dtype=float)))
