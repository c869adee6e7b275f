"""Why a key moved: its throughput change split into the parts of a speculative cycle.

A REGRESSION that says only *what* moved leaves the detective work to a person: which part of the
cycle got slower, and which of the settings that changed did it. The cost model splits it from the
rounds already measured, with no extra start:

* per-stream throughput is τ ÷ cycle time (one draft-and-verify cycle emits τ tokens), so
  Δ log throughput ≈ Δ log τ - Δ log cycle, the cycle being τ x TPOT;
* plain decoding measured beside it (the reference's TPOT, by the same sessions) moves with the
  target model and the node (kernels, NCCL, the GPUs); a cycle that slowed while plain decoding did
  not points at drafting;
* where neither moved, the time to the first token (prefill, queueing) is what is left.

Intervals are tonight's rounds against the per-run means of the runs the level rests on (round
noise only: the verdict, not this split, accounts for start-to-start spread). A part is named as
the cause only when its interval excludes no change and it carries at least half of the move.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_specperf.measure.records import Measurement
from pytest_specperf.verdict.drift import Change
from pytest_specperf.verdict.stats import Estimate, ratio_estimate

#: Fingerprint entries that can act on each part (fnmatch patterns): a difference among them is named.
ACTS_ON = {
    "accept_length": ("*draft*", "*speculative*", "sampling*"),
    "target": (
        "NCCL_*",
        "*nccl*",
        "NVSHMEM_*",
        "CUDA_*",
        "NVIDIA_*",
        "TORCH_*",
        "PYTORCH_*",
        "OMP_*",
        "gpu.*",
        "*.version",
        "server.*",
    ),
    "drafting": ("*draft*", "*speculative*", "server.*", "*.version"),
    "prefill": ("server.*", "*.version", "*chunked*", "*prefill*"),
    "unclear": ("*",),  # no part stands out: any difference may be the one
}
#: Acceptance by draft position: the share of verify steps that accepted a draft at position 1, 2, ...
Shares = tuple[float, ...]
#: Runs a level needs before its runs' means (not their rounds) are what tonight is held against.
MIN_LEVEL_RUNS = 3
#: A part must carry at least this share of the throughput's move (in log terms) to be named its cause.
MAIN_SHARE = 0.5


@dataclass(frozen=True)
class Explanation:
    """Tonight against the level, per part: each a ratio (tonight / level) with its interval."""

    throughput: Estimate
    accept_length: Estimate | None  # None on a plain server (τ is 1)
    cycle: Estimate | None  # τ x TPOT; a plain server's cycle is its TPOT
    reference_tpot: Estimate | None  # plain decoding beside it (None: no reference history)
    ttft: Estimate | None
    tau: tuple[float, float] | None  # τ at the level, tonight
    part: str  # "accept_length" | "target" | "drafting" | "cycle" | "prefill" | "unclear"
    causes: tuple[Change, ...] = ()
    #: acceptance by draft position at the level and tonight, where both are known
    positions: tuple[Shares, Shares] | None = None

    def sentence(self) -> str:
        """One line in plain words, e.g. "-12.4%: the cycle is 13.9% [11.8%, 16.1%] slower and plain
        decoding is 14.1% [12.0%, 16.3%] slower: the target model or the node, not the draft (τ 3.10 → 3.09)"."""
        move = f"{self.throughput.value - 1:+.1%}"
        text = f"{move}: {_words(self)}"
        if self.tau is not None and self.part != "accept_length":
            text += f" (τ {self.tau[0]:.2f} → {self.tau[1]:.2f})"
        if self.positions is not None and self.part == "accept_length":
            then, now = self.positions
            pairs = ", ".join(f"{a:.2f} → {b:.2f}" for a, b in zip(then, now, strict=False))
            text += f"; by draft position: {pairs} (the largest drop at position {_largest_drop(then, now)})"
        if self.causes:
            text += "; changed since the level, and able to act on it: " + "; ".join(str(c) for c in self.causes)
        return text

    def to_dict(self) -> dict[str, Any]:
        def ratio(estimate: Estimate | None) -> dict[str, Any] | None:
            if estimate is None:
                return None
            bounded = estimate.bounded
            return {
                "value": estimate.value,
                "low": estimate.low if bounded else None,
                "high": estimate.high if bounded else None,
            }

        return {
            "sentence": self.sentence(),
            "part": self.part,
            "throughput": ratio(self.throughput),
            "accept_length": ratio(self.accept_length),
            "cycle": ratio(self.cycle),
            "reference_tpot": ratio(self.reference_tpot),
            "ttft": ratio(self.ttft),
            "causes": [{"name": c.name, "old": c.old, "new": c.new} for c in self.causes],
            "positions": {"level": list(self.positions[0]), "tonight": list(self.positions[1])}
            if self.positions is not None
            else None,
        }


def explain(
    tonight: Measurement,
    level: Sequence[Measurement],
    *,
    reference: Measurement | None = None,
    reference_level: Sequence[Measurement] = (),
    drift: Sequence[Change] = (),
) -> Explanation | None:
    """The split of tonight's throughput against the runs the level rests on (None when they lack it)."""
    throughput = _ratio(tonight, level, "output_throughput")
    if throughput is None:
        return None
    spec = bool(tonight.samples("accept_length"))  # a plain server reports no accept length
    tau = _ratio(tonight, level, "accept_length") if spec else None
    cycle = _cycle_ratio(tonight, level, spec)
    reference_tpot = (
        _ratio(reference, reference_level, "mean_tpot_ms") if reference is not None and reference_level else None
    )
    ttft = _ratio(tonight, level, "mean_ttft_ms")
    part = _part(throughput, tau, cycle, reference_tpot, ttft)
    levels = _tau_levels(tonight, level) if spec else None
    causes = tuple(c for c in drift if _acts_on(c.name, part))
    positions = _positions(tonight, level) if spec else None
    return Explanation(throughput, tau, cycle, reference_tpot, ttft, levels, part, causes, positions)


def _positions(
    tonight: Measurement, level: Sequence[Measurement]
) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
    """Acceptance by draft position at the level (the mean of its runs') and tonight."""
    now = tonight.acceptance_per_position
    runs = [p for run in level if (p := run.acceptance_per_position)]
    if not now or not runs:
        return None
    depth = min(len(now), *(len(p) for p in runs))
    then = tuple(sum(p[i] for p in runs) / len(runs) for i in range(depth))
    return then, tuple(now[:depth])


def _largest_drop(then: Sequence[float], now: Sequence[float]) -> int:
    """The draft position (1-based) whose acceptance fell the most."""
    return max(range(len(then)), key=lambda i: then[i] - now[i]) + 1


def speedup_shortfall(tonight: Measurement, reference: Measurement) -> str | None:
    """Why a speedup falls short, by the break-even accept length: the cycle costs as much time as
    τ* = cycle / the reference's TPOT plain tokens, and speculation pays only while τ exceeds it."""
    tau = _mean(tonight.samples("accept_length"))
    tpot = _mean(tonight.samples("mean_tpot_ms"))
    plain = _mean(reference.samples("mean_tpot_ms"))
    if tau is None or tpot is None or plain is None:
        return None
    cycle = tau * tpot
    even = cycle / plain
    costs = f"a cycle of {cycle:.2f} ms costs as much as {even:.2f} plain tokens at {plain:.2f} ms"
    if tau <= even:
        return f"τ {tau:.2f} is below the break-even {even:.2f} ({costs}): the draft accepts too little for this cycle"
    return (
        f"τ {tau:.2f} is above the break-even {even:.2f} ({costs}), so decoding pays by "
        f"{tau / even:.2f}x; the rest is lost outside the cycle (the first token, prefill, queueing)"
    )


def _acts_on(name: str, part: str) -> bool:
    """Whether a fingerprint entry can act on `part` (the target side excludes the draft's own settings)."""

    def matches(key: str) -> bool:
        return any(fnmatch.fnmatchcase(name, p) for p in ACTS_ON[key])

    if part == "cycle":  # the cycle, on a side the rounds cannot tell
        return matches("target") or matches("drafting")
    return matches(part) and not (part == "target" and matches("accept_length"))


def _part(
    throughput: Estimate,
    tau: Estimate | None,
    cycle: Estimate | None,
    reference_tpot: Estimate | None,
    ttft: Estimate | None,
) -> str:
    """Which part carries the move: τ (the draft's acceptance), the cycle (the target side if plain
    decoding moved with it, else drafting), the first token, or none clearly."""
    move = math.log(throughput.value) if throughput.value > 0 else 0.0
    if move == 0.0:
        return "unclear"

    def carries(d: float) -> bool:
        return d * move > 0 and abs(d) >= MAIN_SHARE * abs(move)

    if tau is not None and _credible(tau) and carries(math.log(tau.value)):
        return "accept_length"
    if cycle is not None and _credible(cycle) and carries(-math.log(cycle.value)):
        if tau is None:
            return "target"  # a plain server: its cycle is its TPOT
        if reference_tpot is None:
            return "cycle"
        slowed = math.log(reference_tpot.value)
        with_it = _credible(reference_tpot) and slowed * math.log(cycle.value) > 0
        return "target" if with_it and abs(slowed) >= MAIN_SHARE * abs(math.log(cycle.value)) else "drafting"
    if ttft is not None and _credible(ttft) and (ttft.value - 1) * -move > 0:
        return "prefill"
    return "unclear"


def _ratio(tonight: Measurement, level: Sequence[Measurement], metric: str) -> Estimate | None:
    return _level_ratio(tonight, level, lambda m: m.samples(metric))


def _cycle_ratio(tonight: Measurement, level: Sequence[Measurement], spec: bool) -> Estimate | None:
    """The cycle time's ratio: τ x TPOT per round (a plain server's cycle is its TPOT)."""
    return _level_ratio(tonight, level, _cycles) if spec else _ratio(tonight, level, "mean_tpot_ms")


def _level_ratio(
    tonight: Measurement, level: Sequence[Measurement], samples: Callable[[Measurement], list[float]]
) -> Estimate | None:
    """Tonight's rounds over the level: its runs' means, or their rounds while it has fewer than
    `MIN_LEVEL_RUNS` runs (a young history has no run-to-run spread to speak of yet)."""
    now = _positive(samples(tonight))
    if len(level) >= MIN_LEVEL_RUNS:
        then = [m for run in level if (m := _mean(samples(run))) is not None]
    else:
        then = [v for run in level for v in _positive(samples(run))]
    return ratio_estimate(now, then) if now and then else None


def _positive(values: Sequence[float]) -> list[float]:
    return [v for v in values if v > 0 and math.isfinite(v)]


def _cycles(measurement: Measurement) -> list[float]:
    pairs = ((r.metric("accept_length"), r.metric("mean_tpot_ms")) for r in measurement.rounds)
    return [tau * tpot for tau, tpot in pairs if tau is not None and tpot is not None and tau > 0 and tpot > 0]


def _tau_levels(tonight: Measurement, level: Sequence[Measurement]) -> tuple[float, float] | None:
    now = _mean(tonight.samples("accept_length"))
    then = [m for run in level if (m := _mean(run.samples("accept_length"))) is not None]
    return (sum(then) / len(then), now) if now is not None and then else None


def _mean(values: Sequence[float]) -> float | None:
    finite = _positive(values)
    return sum(finite) / len(finite) if finite else None


def _credible(ratio: Estimate) -> bool:
    """The interval excludes no change."""
    return ratio.bounded and (ratio.low > 1.0 or ratio.high < 1.0)


def _pct(ratio: Estimate) -> str:
    """'13.9% [11.8%, 16.1%] slower': a time ratio's change, with its interval."""
    if ratio.value >= 1.0:
        word, value, low, high = "slower", ratio.value - 1, ratio.low - 1, ratio.high - 1
    else:
        word, value, low, high = "faster", 1 - ratio.value, 1 - ratio.high, 1 - ratio.low
    interval = f" [{low:.1%}, {high:.1%}]" if ratio.bounded else ""
    return f"{value:.1%}{interval} {word}"


def _words(e: Explanation) -> str:
    """What moved, and what that points at."""
    if e.part == "accept_length" and e.tau is not None:
        return (
            f"the accept length fell from {e.tau[0]:.2f} to {e.tau[1]:.2f} while the cycle held: the draft "
            "(its acceptance), not the verify cycle"
        )
    if e.part in ("target", "drafting", "cycle") and e.cycle is not None:
        if e.tau is None:
            return f"decoding (TPOT) is {_pct(e.cycle)}: the model or the node"
        cycle = f"the cycle is {_pct(e.cycle)}"
        if e.reference_tpot is None:
            return f"{cycle} (no plain decoding measured beside the level to tell the target from the draft)"
        plain = f"plain decoding is {_pct(e.reference_tpot)}"
        if e.part == "target":
            return f"{cycle} and {plain}: the target model or the node, not the draft"
        return f"{cycle} while {plain}: drafting (the draft model or its settings), not the target"
    if e.part == "prefill" and e.ttft is not None:
        return f"τ and the cycle held; the first token is {_pct(e.ttft)}: prefill or queueing"
    return "no part of the cycle moved credibly on its own (the rounds cannot split it)"
