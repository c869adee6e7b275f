"""The same-session reference as a control: a speculative key's speedup judged against its own history.

Why: a speculative server and the reference measured in the same session share the node, the target
model and the night. On a shared or mixed node pool the node's speed moves far more than speculation
does: on real SGLang CPU nights the machine's speed moved x3 from one night to the next (the
reference read +168% one night and -78% another) while the speculative servers' speedup over the
same-session reference held. Absolute tok/s then follows the node, and a gate on it calls speculation
IMPROVED or REGRESSION for what the node did. The speedup cancels the node: it is a series of its
own (one value per session that measured both servers), judged by the one verdict engine
(`nightly.judge_night`) with its own spread and the throughput tolerance.

What it gives a test (verdict/checks.py):

* `regression:speedup`: the speedup against its history. With `gate = "speedup"` (the default) it is
  the check a speculative key is held to; the key's absolute throughput check is reported beside it
  and fails nothing (the reference's own throughput check judges the node and the target, once).
* `moved_alongside`: when the reference moved beyond the tolerance in the same session and the
  speedup held, the throughput check says so ("the node or the target: the reference moved -78%
  alongside; the speedup held 1.21x -> 1.20x") instead of calling speculation IMPROVED or a REGRESSION,
  whichever gate is in force.
* `reference_move`: how far the reference moved tonight, a floor of the spread a speculative key's
  absolute throughput is assumed to have while its own runs cannot say it (verdict/history.py).
* `asked_among`: how many keys a speedup's question "is a start off?" is asked among tonight (below).

Pure: no pytest, no I/O.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from pytest_specperf.measure.records import Measurement, MeasurementKey
from pytest_specperf.store.records import LEVEL_RUNS, StoredBaseline, StoredRun
from pytest_specperf.verdict.history import REFERENCE_SOURCE
from pytest_specperf.verdict.nightly import NightVerdict, PastRun, RunStatus, judge_night
from pytest_specperf.verdict.results import CheckResult, fmt
from pytest_specperf.verdict.stats import Decision, Tolerance

#: The name of the speedup's history check.
SPEEDUP_CHECK = "regression:speedup"


@dataclass(frozen=True)
class Control:
    """Tonight's speedup against its history, and how far the reference itself moved."""

    check: CheckResult
    night: NightVerdict
    reference_ratio: float | None  # tonight's reference over its level (None: no level)
    max_regression: float

    @property
    def held(self) -> bool:
        """The speedup neither fell nor rose beyond its tolerance, credibly."""
        return self.night.decision is Decision.MET and not self.night.improved

    @property
    def moved_alongside(self) -> bool:
        """The reference moved beyond the tolerance tonight while the speedup held: the node or the target."""
        ratio = self.reference_ratio
        return self.held and ratio is not None and Tolerance(self.max_regression).moved(ratio)

    def sentence(self) -> str:
        """'the node or the target: the reference moved -78.0% alongside; the speedup held 1.21x -> 1.20x'."""
        comparison = self.night.comparison
        assert comparison is not None and self.reference_ratio is not None
        before, now = comparison.level, comparison.level * comparison.ratio.value
        return (
            f"the node or the target: the reference moved {self.reference_ratio - 1:+.1%} alongside; "
            f"the speedup held {before:.2f}x → {now:.2f}x"
        )


def _mean(samples: Sequence[float]) -> float:
    return math.fsum(samples) / len(samples)


def _throughput(measurement: Measurement) -> list[float]:
    return measurement.samples("output_throughput")


def speedup_samples(result: Measurement, reference: Measurement) -> list[list[float]]:
    """Tonight's speedup, one list per draw of it: each round's throughput over the mean of the
    reference's start it is paired with (`paired_speedups`)."""
    return paired_speedups(
        result.start_samples("output_throughput"), [_mean(s) for s in reference.start_samples("output_throughput")]
    )


def paired_speedups(starts: Sequence[Sequence[float]], references: Sequence[float]) -> list[list[float]]:
    """A night's speedup samples, one list per independent draw of the speedup: the speculative server's
    start i over the reference's start i (`references`: each start's mean throughput).

    Why: a speedup carries the start offsets of two servers. A second start of the speculative server
    divided by the same reference measurement as the first shares the reference's offset: it is not a
    second draw, and judging it as one would halve a spread it cannot average away. So a speculative
    start beyond the reference's last start joins the draw of that last start (one start, as judged),
    and only a second start of both servers is a second draw of the ratio."""
    draws: list[list[float]] = [[] for _ in references]
    for i, start in enumerate(starts):
        paired = min(i, len(references) - 1)
        draws[paired] += [x / references[paired] for x in start]
    return [d for d in draws if d]


def speedup_runs(baseline: StoredBaseline, reference_baseline: StoredBaseline) -> list[PastRun]:
    """The current segment's runs that the same session measured the reference for, as speedups: a
    session's runs (one per server start) paired in order with its reference runs (`paired_speedups`),
    so a night the session measured both servers twice is two draws and one it measured the reference
    once is one."""
    references: dict[str, list[float]] = {}
    for ref in reference_baseline.current_segment:
        y = _throughput(ref.measurement)
        if ref.provenance.session and y and min(y) > 0.0:
            references.setdefault(ref.provenance.session, []).append(_mean(y))
    sessions: dict[str, list[StoredRun]] = {}
    for run in baseline.current_segment:
        x = _throughput(run.measurement)
        if run.provenance.session in references and x and min(x) > 0.0:
            sessions.setdefault(run.provenance.session, []).append(run)
    found = []
    for session, runs in sessions.items():
        draws = paired_speedups([_throughput(r.measurement) for r in runs], references[session])
        # each draw keeps the mark of the run it starts with (the night's starts share one mark)
        found += [
            PastRun(tuple(d), RunStatus(runs[min(i, len(runs) - 1)].status), session) for i, d in enumerate(draws)
        ]
    return found


def reference_move(reference: Measurement, reference_baseline: StoredBaseline | None) -> float | None:
    """Tonight's reference throughput over the level of its newest accepted runs (geometric), or None."""
    if reference_baseline is None:
        return None
    runs = [r for r in reference_baseline.current_segment if RunStatus(r.status).counted]
    values = [_mean(_throughput(r.measurement)) for r in runs[-LEVEL_RUNS:] if _throughput(r.measurement)]
    tonight = _throughput(reference)
    if not values or not tonight or min(values) <= 0.0:
        return None
    return _mean(tonight) / math.exp(statistics.fmean(math.log(v) for v in values))


def reference_floor(
    result: Measurement, reference: Measurement | None, reference_baseline: StoredBaseline | None
) -> list[tuple[float, str]]:
    """The reference's movement tonight as a floor of a speculative key's assumed spread: the node's
    speed is in both servers' throughput. None for the reference itself (its movement is the question)."""
    if reference is None or result.is_reference:
        return []
    ratio = reference_move(reference, reference_baseline)
    return [(abs(math.log(ratio)), REFERENCE_SOURCE)] if ratio is not None and ratio > 0.0 else []


def speedup_keys(keys: Iterable[MeasurementKey], reference: str) -> int:
    """How many of tonight's keys are judged on their speedup over `reference`: every one of them
    carries a start of the reference (`asked_among`)."""
    return max(1, sum(1 for key in keys if key.server != reference))


def asked_among(
    server_keys: int,
    sharing: int,
    reference: Measurement | None,
    reference_baseline: StoredBaseline | None,
    tolerance: Tolerance,
) -> int:
    """How many keys a speculative key's speedup asks "is a start off?" among tonight
    (`nightly.server_change`, `nightly.worth_a_restart`): its server's `server_keys`, and, on a night
    the reference's start read beyond the tolerance of the reference's own level, every key whose
    speedup carries that start (`sharing`, `speedup_keys`).

    Why: a speedup carries two starts, its own server's and the reference's, and one reference start is
    in the speedup of every speculative key of the session. When that start reads high, every
    speculative server's speedups fall together, and asked per speculative server each of them took a
    restart for one offset of the reference (5 servers x 20 unchanged keys at a 5% start spread: 0.26
    second starts a night; shared on such nights, 0.11; benchmarks/verdict_nights.py, with the server's
    question at one-sided 97.5%, before `nightly.SERVER_CONFIDENCE`). On a night the
    reference read its level, its start is no suspect and the fall is the speculative server's: the
    question stays its server's, so a server whose speedup fell 10% on every key still turns the suite
    red on its first night in 80% (69% asked per server; shared on every night, 37%)."""
    ratio = reference_move(reference, reference_baseline) if reference is not None else None
    moved = ratio is not None and ratio > 0.0 and tolerance.moved(ratio)
    return max(server_keys, sharing) if moved else server_keys


def judge_speedup(
    result: Measurement,
    reference: Measurement | None,
    baseline: StoredBaseline | None,
    reference_baseline: StoredBaseline | None,
    tolerance: Tolerance,
    *,
    strict: bool = False,
    searches: int = 1,
    rounds: int | None = None,
    keys: int = 1,
) -> Control | None:
    """The speedup's history check of a speculative key, or None (the reference itself, no reference
    tonight, or no run of both servers stored by one session). `keys`: the keys its question "is a start
    off?" is asked among (`asked_among`, `nightly.judge_night`)."""
    if reference is None or result.is_reference or baseline is None or reference_baseline is None:
        return None
    past = speedup_runs(baseline, reference_baseline)
    if not _throughput(reference) or not _throughput(result) or not any(r.status.counted for r in past):
        return None
    tonight = speedup_samples(result, reference)
    night = judge_night(tonight, past, tolerance, strict=strict, searches=searches, rounds=rounds, keys=keys)
    comparison = night.comparison
    assert comparison is not None
    change = "improved" if night.improved else night.decision.value
    if night.decision is Decision.MISSED:
        change = "REGRESSION"
    message = (
        f"speedup over {reference.key.server}: {_mean([x for d in tonight for x in d]):.3f}x vs its history "
        f"{comparison.level:.3f}x ({comparison.describe()}): ratio {fmt(comparison.ratio, 3)}, "
        f"allowed -{tolerance.max_regression:.0%}: {change}"
    )
    check = CheckResult(SPEEDUP_CHECK, night.decision, message, comparison.ratio, night.improved, night, True)
    return Control(check, night, reference_move(reference, reference_baseline), tolerance.max_regression)


def held_to(check: CheckResult, control: Control | None, gate: str) -> CheckResult:
    """A speculative key's absolute throughput check as the gate in force holds it. With `gate =
    "speedup"`, while the speedup is within its tolerance, it is reported beside the speedup's check
    and fails nothing, and when the reference moved alongside it says so ("the node or the target:
    ..."): no verdict on speculation. When the speedup fell too, speculation is what moved, and the
    throughput check (its two starts, its spread) stands. With `gate = "throughput"` it stands
    whatever the speedup did, and says so when the reference moved alongside."""
    if control is None:
        return check
    if control.moved_alongside:
        line = control.sentence()
    elif check.beyond or check.improved:
        line = f"reported: gate = speedup holds this key to its speedup over the reference ({SPEEDUP_CHECK})"
    else:
        return check
    if gate != "speedup" or control.check.decision is not Decision.MET:
        return replace(check, message=f"{check.message}\n    {line}") if control.moved_alongside else check
    return replace(check, decision=Decision.MET, improved=False, message=f"{check.message}\n    {line}")
