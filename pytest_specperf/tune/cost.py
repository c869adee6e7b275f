"""The cycle-time fit: cycle = fixed + per draft token x draft tokens + per draft step x steps.

Why linear, and why these terms: a speculative cycle is the draft model's steps, then one verify
forward pass over the draft tokens. Verify on a big tensor-parallel model is mostly fixed cost
(CUDA-graph replay, all-reduce, attention setup) plus a part that grows with the tokens verified; each
draft step adds its own small forward pass. This is the cost model the phantom-baseline story (docs/story.md) rests on
(report/costmodel.py fits its one-variable form, cycle = a + b x draft tokens, across configs that
differ only in draft tokens); here the steps get their own term, because a search varies both.

A term the space cannot tell apart from the others is left out (a space of chains, where draft tokens
= steps + 1 always, gets fixed + per draft step): it could never change a prediction inside the space.

Fit: weighted least squares where each measured cycle's variance is its own round noise plus the
start-to-start spread (`run_to_run_cv`: a server start carries its own offset, and a fit through three
starts inherits three offsets), with a weak normal prior (sd ten times the largest cycle) so that a
fit with fewer distinct configs than terms still answers, with very wide intervals where the data say
nothing. When the points scatter more than their variances allow (reduced chi-square above 1), the
covariance is widened by that factor. Everything here is pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pytest_specperf.tune.space import Shape

#: term name -> its value for a shape
TERMS = ("fixed", "per draft token", "per draft step")
PRIOR_SCALE = 10.0


def term_values(term: str, shape: Shape) -> float:
    if term == "fixed":
        return 1.0
    if term == "per draft token":
        return float(shape.draft_tokens)
    return float(shape.steps)


def terms_for(shapes: Sequence[Shape]) -> tuple[str, ...]:
    """The terms the space can tell apart: each one kept only if it adds to the design's rank."""
    kept: list[str] = []
    rank = 0
    for term in ("fixed", "per draft step", "per draft token"):
        trial = [*kept, term]
        matrix = np.array([[term_values(t, s) for t in trial] for s in shapes], dtype=float)
        new_rank = int(np.linalg.matrix_rank(matrix)) if len(shapes) else 0
        if new_rank > rank:
            kept, rank = trial, new_rank
    return tuple(t for t in TERMS if t in kept)


@dataclass(frozen=True)
class CyclePoint:
    """One measured config at one level: its shape, mean cycle (ms) and the relative variance of it."""

    shape: Shape
    cycle_ms: float
    relative_variance: float


@dataclass(frozen=True)
class CostFit:
    """Posterior mean and covariance of the terms' coefficients (ms per unit)."""

    terms: tuple[str, ...]
    mean: np.ndarray
    cov: np.ndarray
    points: tuple[CyclePoint, ...]
    misfit: float  # reduced chi-square of the points (1.0 when they cannot tell)

    def row(self, shape: Shape) -> np.ndarray:
        return np.array([term_values(t, shape) for t in self.terms], dtype=float)

    def predict(self, shape: Shape) -> float:
        return float(self.row(shape) @ self.mean)

    def sd(self, shape: Shape) -> float:
        x = self.row(shape)
        return float(np.sqrt(max(0.0, float(x @ self.cov @ x))))

    def coefficient(self, term: str) -> tuple[float, float] | None:
        """(value, sd) of one term's coefficient, None when the fit has no such term."""
        if term not in self.terms:
            return None
        i = self.terms.index(term)
        return float(self.mean[i]), float(np.sqrt(max(0.0, self.cov[i, i])))

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return rng.multivariate_normal(self.mean, self.cov, size=size, method="cholesky")


def fit_cycle_cost(points: Sequence[CyclePoint], terms: Sequence[str], scale_ms: float) -> CostFit:
    """The weighted, weakly regularised fit described in the module docstring (`scale_ms` sets the prior)."""
    terms = tuple(terms)
    prior_sd = PRIOR_SCALE * max(scale_ms, max((p.cycle_ms for p in points), default=0.0), 1e-9)
    precision = np.eye(len(terms)) / prior_sd**2
    if not points:
        return CostFit(terms, np.zeros(len(terms)), np.linalg.inv(precision), (), 1.0)
    x = np.array([[term_values(t, p.shape) for t in terms] for p in points], dtype=float)
    y = np.array([p.cycle_ms for p in points], dtype=float)
    weights = np.array([1.0 / max(p.cycle_ms**2 * p.relative_variance, 1e-12) for p in points])
    cov = np.linalg.inv(x.T @ (weights[:, None] * x) + precision)
    cov = (cov + cov.T) / 2.0
    mean = cov @ (x.T @ (weights * y))
    dof = len(points) - int(np.linalg.matrix_rank(x))
    misfit = 1.0
    if dof > 0:
        misfit = float(np.sum(weights * (y - x @ mean) ** 2) / dof)
        if misfit > 1.0:
            cov = cov * misfit
    return CostFit(terms, mean, cov, tuple(points), misfit)
