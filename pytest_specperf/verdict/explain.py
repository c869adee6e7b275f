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

The size quoted is the verdict's own (tonight over the accepted level, verdict/nightly.py), and each
part is measured the same way: tonight's geometric mean over the geometric mean of the level runs'
means, its interval from tonight's rounds and the spread between those runs (a single run: its
rounds). A part is named only when it carries at least half of the move across its whole interval;
when none does and the level's own nights differ by more than the move, the sentence says the history
is too noisy to tell instead of naming a part by elimination. A difference that changed the same way
on the reference, whose plain decoding moved with this key, is named as a candidate cause.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_specperf.measure.fingerprint import Fingerprint
from pytest_specperf.measure.records import Measurement
from pytest_specperf.verdict.drift import Change, diff
from pytest_specperf.verdict.stats import DEFAULT_CONFIDENCE, Estimate, t_quantile

#: Fingerprint entries that can act on each part (fnmatch patterns): a difference among them is named.
ACTS_ON = {
    "accept_length": ("*draft*", "*speculative*", "sampling*"),
    "target": (
        "NCCL_*",
        "*nccl*",
        "NVSHMEM_*",
        "CUDA_*",
        "NVIDIA_*",
        "image variables*",
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
#: Acceptance by draft position 1, 2, ...: the share of verify steps that accepted at least that many drafts
Shares = tuple[float, ...]
#: Runs a level needs before its runs' means (not their rounds) are what tonight is held against: with
#: two, their spread is the only word on how far apart two nights fall.
MIN_LEVEL_RUNS = 2
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
    #: how far apart the level's nights fall (highest over lowest throughput), when too far to tell a part
    level_spread: float | None = None
    #: differences that changed the same way on the reference, whose plain decoding moved with this key
    candidates: tuple[Change, ...] = ()
    #: how the reference's plain decoding moved, in words, when it names `candidates`
    reference_moved: str | None = None

    def sentence(self) -> str:
        """One line in plain words, e.g. "-12.4%: the cycle is 13.9% [11.8%, 16.1%] slower and plain
        decoding is 14.1% [12.0%, 16.3%] slower: the target model or the node, not the draft (τ 3.10 → 3.09)"."""
        move = f"{self.throughput.value - 1:+.1%}"
        text = f"{move}: {_words(self)}"
        if self.tau is not None and self.part != "accept_length":
            text += f" (τ {self.tau[0]:.2f} → {self.tau[1]:.2f})"
        if self.positions is not None and self.part == "accept_length":
            text += positions_text(*self.positions)
        if self.causes:
            text += "; changed since the level, and able to act on it: " + "; ".join(str(c) for c in self.causes)
        if self.candidates:
            text += (
                f"; a candidate cause, changed on the reference too, whose plain decoding moved with it "
                f"({self.reference_moved}): " + "; ".join(str(c) for c in self.candidates)
            )
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
            "candidates": [{"name": c.name, "old": c.old, "new": c.new} for c in self.candidates],
            "level_spread": self.level_spread,
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
    verdict: Estimate | None = None,
) -> Explanation | None:
    """The split of tonight's throughput against the runs the level rests on (None when they lack it).

    `verdict` is the throughput's ratio as the verdict has it (tonight over the accepted level): the
    size the sentence quotes, so that one report gives one figure. Without it, the same kind of ratio
    is taken here (geometric means)."""
    throughput = verdict if verdict is not None else _ratio(tonight, level, "output_throughput")
    if throughput is None or not throughput.value > 0:
        return None
    spec = bool(tonight.samples("accept_length"))  # a plain server reports no accept length
    tau = _ratio(tonight, level, "accept_length") if spec else None
    cycle = _cycle_ratio(tonight, level, spec)
    reference_tpot = (
        _ratio(reference, reference_level, "mean_tpot_ms") if reference is not None and reference_level else None
    )
    ttft = _ratio(tonight, level, "mean_ttft_ms")
    shares = _Shares(throughput, tau, cycle, reference_tpot, _ttft_share(tonight, level))
    part = _part(shares)
    spread = _spread(level) if part == "unclear" else None
    noisy = spread if spread is not None and math.log(spread) >= abs(math.log(throughput.value)) else None
    levels = _tau_levels(tonight, level) if spec else None
    candidates, moved = _candidates(throughput, drift, reference, reference_level)
    if part == "target":  # plain decoding moved with it, as the sentence says: what changed on both acts there
        causes, candidates = tuple(c for c in drift if _acts_on(c.name, part) or c in candidates), ()
    else:
        causes = tuple(c for c in drift if _acts_on(c.name, part) and c not in candidates)
    positions = _positions(tonight, level) if spec else None
    return Explanation(
        throughput, tau, cycle, reference_tpot, ttft, levels, part, causes, positions, noisy, candidates, moved
    )


@dataclass(frozen=True)
class _Shares:
    """The parts' ratios that `_part` weighs against the throughput's move."""

    throughput: Estimate
    tau: Estimate | None
    cycle: Estimate | None
    reference_tpot: Estimate | None
    #: the first token's contribution to log throughput (its share of a request's time), with its interval
    ttft: tuple[float, float, float] | None


def _candidates(
    throughput: Estimate,
    drift: Sequence[Change],
    reference: Measurement | None,
    reference_level: Sequence[Measurement],
) -> tuple[tuple[Change, ...], str | None]:
    """This key's differences since the level that changed the same way on the reference, when the
    reference's plain decoding moved the way this key did (slower when it fell): what acts on both.
    With them, how plain decoding moved, in words."""
    if reference is None or not reference_level or not drift:
        return (), None
    now, then = reference.fingerprint, reference_level[-1].fingerprint
    if not isinstance(now, Fingerprint) or not isinstance(then, Fingerprint):
        return (), None
    direction, words = _moved(reference, reference_level, "mean_tpot_ms")
    if direction == 0 or (direction > 0) != (throughput.value < 1.0):
        return (), None
    shared = set(diff(then, now).environment)
    found = tuple(c for c in drift if c in shared)
    return (found, words) if found else ((), None)


def _moved(tonight: Measurement, level: Sequence[Measurement], metric: str) -> tuple[int, str]:
    """+1 or -1 when tonight's metric (a time) moved up or down from the level, else 0, and how in words:
    its interval excludes no change, or tonight lies beyond every night of a level of two or more
    (however far apart those nights are)."""
    ratio = _ratio(tonight, level, metric)
    now = _mean(tonight.samples(metric))
    means = [m for run in level if (m := _mean(run.samples(metric))) is not None]
    if ratio is None or now is None:
        return 0, ""
    if _credible(ratio):
        return (1 if ratio.value > 1.0 else -1), _pct(ratio)
    if len(means) >= 2 and (now > max(means) or now < min(means)):
        nights = ", ".join(f"{m:.2f}" for m in means)
        return (1 if now > max(means) else -1), f"TPOT {now:.2f} ms tonight, {nights} ms on the level's nights"
    return 0, ""


def _spread(level: Sequence[Measurement]) -> float | None:
    """The level's nights' throughput, highest over lowest (None with fewer than two nights)."""
    means = [m for run in level if (m := _geomean(_positive(run.samples("output_throughput")))) is not None]
    return max(means) / min(means) if len(means) >= 2 else None


def _ttft_share(tonight: Measurement, level: Sequence[Measurement]) -> tuple[float, float, float] | None:
    """The first token's contribution to log throughput, with its interval: a request takes its first
    token plus its decoding, so a first token Δ ms slower takes log(1 + Δ / the level's request time)
    off the throughput. A 15 ms slower first token in a 550 ms request cannot carry a 64% fall."""
    ratio = _ratio(tonight, level, "mean_ttft_ms")
    ttft = [m for run in level if (m := _geomean(_positive(run.samples("mean_ttft_ms")))) is not None]
    e2e = [m for run in level if (m := _geomean(_positive(run.samples("mean_e2e_latency_ms")))) is not None]
    if ratio is None or not ttft or not e2e:
        return None
    first, request = _geomean(ttft), _geomean(e2e)
    assert first is not None and request is not None

    def share(r: float) -> float:
        return (
            -math.log(max(1e-9, 1.0 + first * (r - 1.0) / request)) if math.isfinite(r) else math.copysign(math.inf, -r)
        )

    return share(ratio.value), share(ratio.high), share(ratio.low)


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


def positions_text(then: Sequence[float], now: Sequence[float]) -> str:
    """'; by draft position: 0.91 → 0.91, 0.73 → 0.46, 0.65 → 0.41 (the largest drop at position 2: 0.27
    of the 0.51 accepted drafts per verify step lost)'.

    Acceptance by draft position is the share of verify steps that accepted at least i drafts
    (docs/metrics.md): each position's share is the drafts it adds per verify step, so its drop is what
    that position lost and the drops add up to the accepted drafts per verify step lost. The largest drop
    names the position that lost the most; a position whose acceptance alone fell passes a smaller drop
    on to the positions after it (their shares are a part of its own), so the largest drop is where
    acceptance broke unless a later position lost more of its own."""
    pairs = ", ".join(f"{a:.2f} → {b:.2f}" for a, b in zip(then, now, strict=False))
    drops = [a - b for a, b in zip(then, now, strict=False)]
    if not drops or max(drops) <= 0.0:
        return f"; by draft position: {pairs} (no position dropped)"
    worst = max(range(len(drops)), key=lambda i: drops[i])
    lost = sum(drops)
    of = f" of the {lost:.2f}" if lost >= drops[worst] - 1e-9 else ""  # unless a later position gained
    return (
        f"; by draft position: {pairs} (the largest drop at position {worst + 1}: {drops[worst]:.2f}{of} "
        "accepted drafts per verify step lost)"
    )


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


def _part(shares: _Shares) -> str:
    """Which part carries at least half of the move across its whole interval: τ (the draft's
    acceptance), the cycle (the target side if plain decoding moved with it by at least half the
    cycle's move, drafting if plain decoding credibly did not, else the cycle on a side the rounds
    cannot tell), the first token; else none ("unclear"), never one named by elimination."""
    move = math.log(shares.throughput.value)
    if move == 0.0:
        return "unclear"
    if shares.tau is not None and _carries(_logs(shares.tau), move):
        return "accept_length"
    if shares.cycle is not None and _carries(_logs(shares.cycle, -1.0), move):
        if shares.tau is None:
            return "target"  # a plain server: its cycle is its TPOT
        if shares.reference_tpot is None:
            return "cycle"
        cycle = math.log(shares.cycle.value)
        plain = _logs(shares.reference_tpot)
        if _carries(plain, cycle):
            return "target"
        return "drafting" if max(abs(plain[1]), abs(plain[2])) < MAIN_SHARE * abs(cycle) else "cycle"
    if shares.ttft is not None and _carries(shares.ttft, move):
        return "prefill"
    return "unclear"


def _logs(ratio: Estimate, sign: float = 1.0) -> tuple[float, float, float]:
    """A ratio's value and interval as log contributions (`sign` -1: a time, which slows throughput)."""

    def log(x: float) -> float:
        return sign * (math.log(x) if x > 0 else -math.inf)

    if not ratio.bounded:
        return log(ratio.value), -math.inf, math.inf
    return log(ratio.value), log(ratio.low), log(ratio.high)


def _carries(contribution: tuple[float, float, float], move: float) -> bool:
    """Whether a part's contribution carries at least half of `move` at every point of its interval."""
    nearest = min(contribution, key=lambda c: c * math.copysign(1.0, move))
    return math.isfinite(nearest) and nearest * move > 0 and abs(nearest) >= MAIN_SHARE * abs(move)


def _ratio(tonight: Measurement, level: Sequence[Measurement], metric: str) -> Estimate | None:
    return _level_ratio(tonight, level, lambda m: m.samples(metric))


def _cycle_ratio(tonight: Measurement, level: Sequence[Measurement], spec: bool) -> Estimate | None:
    """The cycle time's ratio: τ x TPOT per round (a plain server's cycle is its TPOT)."""
    return _level_ratio(tonight, level, _cycles) if spec else _ratio(tonight, level, "mean_tpot_ms")


def _level_ratio(
    tonight: Measurement, level: Sequence[Measurement], samples: Callable[[Measurement], list[float]]
) -> Estimate | None:
    """Tonight's rounds over the level, as the verdict weighs them: geometric means, the level's being
    that of its runs' geometric means. The interval adds tonight's round noise to the spread between the
    level's runs (a Welch t on the logs); a level of one run lends its rounds' noise instead."""
    now = [math.log(v) for v in _positive(samples(tonight))]
    runs = [[math.log(v) for v in _positive(samples(run))] for run in level]
    runs = [r for r in runs if r]
    if not now or not runs:
        return None
    then = [sum(r) / len(r) for r in runs] if len(runs) >= MIN_LEVEL_RUNS else runs[0]
    diff_log = sum(now) / len(now) - sum(then) / len(then)
    parts = [(_variance(now), len(now)), (_variance(then), len(then))]
    if min(n for _, n in parts) < 2:
        return Estimate.unknown(math.exp(diff_log), min(len(now), len(then)), DEFAULT_CONFIDENCE)
    variance = sum(v / n for v, n in parts)
    if variance == 0.0:
        value = math.exp(diff_log)
        return Estimate(value, value, value, min(len(now), len(then)), DEFAULT_CONFIDENCE)
    df = variance**2 / sum((v / n) ** 2 / (n - 1) for v, n in parts if v > 0)
    half = t_quantile(DEFAULT_CONFIDENCE, df) * math.sqrt(variance)
    return Estimate(
        math.exp(diff_log),
        math.exp(diff_log - half),
        math.exp(diff_log + half),
        min(len(now), len(then)),
        DEFAULT_CONFIDENCE,
    )


def _variance(logs: Sequence[float]) -> float:
    if len(logs) < 2:
        return 0.0
    mean = sum(logs) / len(logs)
    return sum((x - mean) ** 2 for x in logs) / (len(logs) - 1)


def _geomean(values: Sequence[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


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
            f"the accept length fell from {e.tau[0]:.2f} to {e.tau[1]:.2f}, enough to carry it: the draft "
            "(its acceptance)"
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
        return f"the first token is {_pct(e.ttft)}, enough of a request's time to carry it: prefill or queueing"
    if e.level_spread is not None:
        return f"cannot tell which part moved: the level's nights differ {e.level_spread:.1f}x"
    return "no part of the cycle moved credibly on its own (the rounds cannot split it)"
