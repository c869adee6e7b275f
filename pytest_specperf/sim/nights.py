"""How one server start's speed differs from another's, night after night: the shapes real CI series show.

Why: a nightly gate is only as good as the noise it was tried on, and real series are not iid normal
(tests/data/real-series/): their starts land on a slow runner pool one night in five, their level
shifts and drifts, their offsets have heavy tails, and neighbouring nights correlate. The simulator
(`--sim-night` and the `--sim-*` flags below) and benchmarks/verdict_nights.py draw a start's speed
from the same function, so what the benchmark measures is what a simulated night does.

A start's throughput factor is exp(offset + level + pool):

* offset: `cv` times a unit draw, normal or Student t with `df` degrees of freedom scaled to unit
  variance (heavy tails); with `rho` > 0 the nights' offsets follow an AR(1) process and a night's
  starts share it (the slow part of a machine's state does not change with a restart);
* level: `drift` (log) per night, and from night `step_at` on a step of `step` (-0.1 = 10% slower);
* pool: with probability `pool_share` a start lands on a pool `pool_slowdown` slower (0.12 = 12%).

Every draw is a pure function of (seed, night, start): a night is reproducible, a second start
differs.

Besides a start's own speed, real nights had noise that every server of a session shares, or that
depends on how the engine runs (`node_speed`, `warmup_factor`, `round_cv`):

* the node: on shared CPU runners the machine's speed moved x3 from one night to the next, the same
  for the reference and the speculative servers of the session (`node_speed`: log-normal with
  `node_swing` as its SD, clipped at x3 either way, a function of (node seed, night) only);
* a warm-up ramp at high concurrency: at concurrency 8, two warm-up requests never formed a batch of 8
  and the rounds climbed 1017 -> 1281 -> 1686 tok/s (`warmup_factor`);
* round spread by engine mode: eager mode on a small model read a 19% round CV at concurrency 1
  (per-step CPU overhead dominates), graphs a few percent (`round_cv`).

Pure: no I/O.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass


@dataclass(frozen=True)
class NightNoise:
    """The noise of a key's server starts, night by night (see the module docstring)."""

    cv: float = 0.0
    df: float = math.inf
    rho: float = 0.0
    pool_share: float = 0.0
    pool_slowdown: float = 0.0
    drift: float = 0.0
    step_at: int | None = None
    step: float = 0.0

    def __post_init__(self) -> None:
        problems = [
            f"{name} must be {rule} (got {value})"
            for name, value, rule, ok in (
                ("cv", self.cv, "in [0, 0.5]", 0.0 <= self.cv <= 0.5),
                ("df", self.df, "> 2", self.df > 2.0),
                ("rho", self.rho, "in [0, 1)", 0.0 <= self.rho < 1.0),
                ("pool_share", self.pool_share, "in [0, 1]", 0.0 <= self.pool_share <= 1.0),
                ("pool_slowdown", self.pool_slowdown, "in [0, 1)", 0.0 <= self.pool_slowdown < 1.0),
                ("step", self.step, "> -1", self.step > -1.0),
            )
            if not ok
        ]
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def quiet(self) -> bool:
        return self == NightNoise()

    def speed(self, seed: int, night: int, start: int) -> float:
        """The throughput factor of server start `start` of night `night` (1.0 for a quiet key)."""
        level = self.drift * night
        if self.step_at is not None and night >= self.step_at:
            level += math.log1p(self.step)
        pool = 0.0
        if self.pool_share and _rng(seed, night, start, "pool").random() < self.pool_share:
            pool = math.log1p(-self.pool_slowdown)
        return math.exp(self._offset(seed, night, start) + level + pool)

    def _offset(self, seed: int, night: int, start: int) -> float:
        if not self.cv:
            return 0.0
        if not self.rho:
            return self.cv * self._unit(seed, night, start)
        state = self._unit(seed, 0, 0)
        for n in range(1, night + 1):  # a night's starts share its AR(1) offset
            state = self.rho * state + math.sqrt(1.0 - self.rho * self.rho) * self._unit(seed, n, 0)
        return self.cv * state

    def _unit(self, seed: int, night: int, start: int) -> float:
        """A draw with mean 0 and variance 1: normal, or Student t with `df` degrees of freedom."""
        rng = _rng(seed, night, start, "offset")
        if math.isinf(self.df):
            return rng.gauss(0.0, 1.0)
        chi2 = rng.gammavariate(self.df / 2.0, 2.0)
        return rng.gauss(0.0, 1.0) / math.sqrt(chi2 / self.df) / math.sqrt(self.df / (self.df - 2.0))


#: The node's speed never moves beyond this factor either way (x3: the SGLang CPU nights' extreme).
NODE_LIMIT = 3.0
#: Round CV by engine mode at concurrency 1: eager (no CUDA graphs, per-step CPU overhead) and graphs.
EAGER_ROUND_CV = 0.19
GRAPH_ROUND_CV = 0.02


def node_speed(node_swing: float, node_seed: int, night: int) -> float:
    """The node's speed factor on `night`, shared by every server of the session: log-normal with SD
    `node_swing`, clipped at `NODE_LIMIT` either way; 1.0 without a swing."""
    if node_swing <= 0.0:
        return 1.0
    draw = node_swing * _rng(node_seed, night, 0, "node").gauss(0.0, 1.0)
    limit = math.log(NODE_LIMIT)
    return math.exp(max(-limit, min(limit, draw)))


def warmup_factor(round_index: int, concurrency: int, *, ramp: float = 0.4, rounds: float = 1.0) -> float:
    """The speed of round `round_index` (0 first) relative to a warm server: at concurrency 8 and more
    the first rounds run slower, by `ramp` at round 0, decaying with `rounds` as its time constant; no
    ramp below concurrency 8 (a few warm-up requests fill a small batch)."""
    if concurrency < 8 or ramp <= 0.0:
        return 1.0
    return 1.0 - ramp * math.exp(-round_index / rounds)


def round_cv(eager: bool, concurrency: int) -> float:
    """The round-to-round CV of an engine mode at a concurrency: per-step overhead averages out over
    a batch, so it falls with the square root of the concurrency."""
    return (EAGER_ROUND_CV if eager else GRAPH_ROUND_CV) / math.sqrt(max(1, concurrency))


def _rng(seed: int, night: int, start: int, what: str) -> random.Random:
    return random.Random(f"{what}:{seed}:{night}:{start}")
