"""The session's results as one report model: rows, cost model, verify-cost fits, drift, warnings.

Renderers (terminal, Markdown, JSON) only format what is computed here, so every output says
the same thing.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_specperf.config.location import StoreLocation
from pytest_specperf.config.settings import DEFAULT_ENGINE, SpecperfConfig
from pytest_specperf.engines import engine_for, engine_names
from pytest_specperf.measure.fingerprint import UNSET
from pytest_specperf.measure.records import Measurement, MeasurementKey
from pytest_specperf.measure.rounds import Cut
from pytest_specperf.report.costmodel import CostModel, VerifyCostFit, analyze, fit_verify_costs
from pytest_specperf.report.noise import noise_warning
from pytest_specperf.report.sweep import Crossover, LevelWinner, best_config_per_level, find_crossover
from pytest_specperf.store.records import SaveResult, StoredBaseline
from pytest_specperf.verdict.checks import (
    Evaluation,
    Limits,
    LosslessMatch,
    comparable,
    drift,
    evaluate,
    lossless_match,
    past_runs,
    rejected_runs,
)
from pytest_specperf.verdict.control import asked_among, speedup_keys
from pytest_specperf.verdict.drift import Change, speedup_differences
from pytest_specperf.verdict.history import Rejection, bimodal, spread_lower_bound
from pytest_specperf.verdict.nightly import NightVerdict
from pytest_specperf.verdict.stats import (
    Estimate,
    coefficient_of_variation,
    mean_estimate,
)
from pytest_specperf.verdict.trends import KEY_METRICS, HistoryChange, Point, series
from pytest_specperf.verdict.verdicts import Verdict, worst

#: Where a report's histories live, as its header and its JSON name them: the session's `store` setting, or
#: the name a report read back (`specperf merge`) carries. A location, not an open `store.base.Store`: a
#: report is written after the store is closed, and a merged one never opened it.
ShownStore = StoreLocation | str

#: The verdict cell of a measurement the session was cut short in (Ctrl-C, SIGTERM, a time limit).
INTERRUPTED = "INTERRUPTED"
#: A key whose run-to-run CV is credibly above tolerance / BLIND_RATIO cannot show a change of the tolerance.
BLIND_RATIO = 2.5


@dataclass(frozen=True)
class Row:
    """One measurement in the summary table."""

    measurement: Measurement
    throughput: Estimate | None
    vs_baseline: Estimate | None
    speedup: Estimate | None
    accept_length: Estimate | None
    tpot_ms: Estimate | None
    ttft_ms: Estimate | None
    cost: CostModel | None
    verdict: Verdict
    cv: float | None
    #: per key metric (trends.KEY_METRICS): every stored run with a value, tonight last
    history: dict[str, tuple[Point, ...]] = field(default_factory=dict)
    #: the newest change point of each key series (current segment, tonight appended)
    changes: tuple[HistoryChange, ...] = ()
    #: why tonight's run was not appended to its history (--specperf-record / --specperf-update)
    not_stored: str | None = None
    #: the throughput history check of tonight (its confirmation, rejected runs, detectable change)
    night: NightVerdict | None = None
    #: what the session did about a second server start for this measurement
    confirmation: str | None = None
    #: recorded runs the throughput check left out as outliers: (when stored, the rejection)
    rejected: tuple[tuple[str, Rejection], ...] = ()
    #: the JSON `gate` of a row read back from a report (a merged report keeps it as it was)
    gate: Mapping[str, Any] | None = None
    #: what the reference and this server differ in besides speculation (its speedup compares those too)
    unlike_reference: tuple[Change, ...] = ()
    #: --specperf-update: what tonight is against the level it replaces, when that is a REGRESSION or SUSPECT
    update_accepts: str | None = None
    #: why the key moved, part by part (`Explanation.to_dict()`), when a history check lies beyond it
    explanation: Mapping[str, Any] | None = None
    #: a speculative row on a temperature-0 workload: its outputs against the reference's (k of n equal)
    lossless: LosslessMatch | None = None
    #: the session was cut short while this measurement was taken: how far it got (its rounds are those it
    #: completed; nothing was decided on them unless a test of it had finished, and it is not stored)
    interrupted: Cut | None = None

    @property
    def key(self) -> MeasurementKey:
        return self.measurement.key


@dataclass(frozen=True)
class Fit:
    """A verify-cost fit over configs that differ only in draft tokens, on one workload/level."""

    servers: tuple[str, ...]
    workload: str
    concurrency: int
    fit: VerifyCostFit
    cycle_ms: tuple[float, ...]


@dataclass(frozen=True)
class SweepSummary:
    """One workload measured at several concurrency levels: where speculation stops paying, who is fastest.

    ``speedups`` holds each speculative config's speedup over the reference per level (only the
    levels it was measured at); ``winners`` ranks every config, the reference included, since at
    high load plain decoding may be the fastest.
    """

    workload: str
    levels: tuple[int, ...]
    speedups: dict[str, dict[int, Estimate]]
    crossovers: dict[str, Crossover]
    winners: tuple[LevelWinner, ...]


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)
    fits: list[Fit] = field(default_factory=list)
    drift: dict[str, list[Change]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    saved: list[tuple[MeasurementKey, SaveResult]] = field(default_factory=list)
    fingerprint_summary: str | None = None
    simulated: bool = False
    sweeps: list[SweepSummary] = field(default_factory=list)
    #: measurements that could not be made, or whose tests errored, with the first line of why
    errors: dict[MeasurementKey, str] = field(default_factory=dict)
    #: servers restarted to confirm checks, with the measurements measured again on the second start
    second_starts: dict[str, list[MeasurementKey]] = field(default_factory=dict)
    #: measurements the session was cut short in (Ctrl-C, SIGTERM, a time limit), and how far each got
    interrupted: dict[MeasurementKey, Cut] = field(default_factory=dict)

    def unmeasured_errors(self) -> dict[MeasurementKey, str]:
        """Errors of measurements without a row (nothing was measured): the table shows them as ERROR rows."""
        measured = {row.key for row in self.rows}
        return {key: reason for key, reason in self.errors.items() if key not in measured}

    def unmeasured_cuts(self) -> dict[MeasurementKey, Cut]:
        """Measurements cut short before their first round (no row): the table shows them as rows of their own."""
        measured = {row.key for row in self.rows}
        return {key: cut for key, cut in self.interrupted.items() if key not in measured}


#: What a key left out by the rules of storing can do about it (not one a session cut short held back).
FORCE_HINT = "--specperf-update-force stores it anyway"


@dataclass(frozen=True)
class SessionFacts:
    """What a session knows besides its measurements and their verdicts, for the report built from them:
    the errors, the servers restarted to confirm checks, what the servers and the store said, and what
    `--specperf-update` is about to accept. A report read back or merged has none."""

    #: measurements that could not be made, or whose tests errored, with the first line of why
    errors: Mapping[MeasurementKey, str] = field(default_factory=dict)
    #: servers restarted to confirm checks, with the measurements measured again on the second start
    second_starts: Mapping[str, Sequence[MeasurementKey]] = field(default_factory=dict)
    #: what the server pool said (a port or an out-of-memory retry, a restart), the workers' too
    pool_warnings: tuple[str, ...] = ()
    #: what the store said while tonight's runs were stored
    store_warnings: tuple[str, ...] = ()
    #: keys not stored because the session was cut short (`--specperf-update-force` cannot store them)
    held: frozenset[MeasurementKey] = frozenset()
    #: --specperf-update: tonight against the level it replaces, where that is a REGRESSION or SUSPECT
    update_accepts: Mapping[MeasurementKey, str] = field(default_factory=dict)
    #: rows judged already (the verdicts a stored run keeps, found before storing): not evaluated again
    judged: Mapping[MeasurementKey, Row] = field(default_factory=dict)


def build_report(
    config: SpecperfConfig,
    measurements: dict[MeasurementKey, Measurement],
    verdicts: dict[MeasurementKey, list[Verdict]],
    baselines: dict[MeasurementKey, StoredBaseline | None],
    saved: dict[MeasurementKey, SaveResult],
    *,
    updating: bool,
    not_stored: dict[MeasurementKey, str] | None = None,
    confirmations: dict[MeasurementKey, str] | None = None,
    searches: int = 1,
    interrupted: Mapping[MeasurementKey, Cut] | None = None,
    facts: SessionFacts | None = None,
) -> Report:
    """The session's report, built once and whole: rows from each measurement's own evaluation against
    its history with the config's tolerances (the same engine the tests ran; tests' markers may be
    stricter), each row's verdict the worst of its tests' (`verdicts`) and that evaluation's (the words
    a stored run's status and the dashboard use too: session/storing.py), and the warnings in one order.
    A measurement the session was cut short in (`interrupted`) is INCONCLUSIVE unless a test of it finished."""
    facts = facts or SessionFacts()
    cuts = dict(interrupted or {})
    ordered = sorted(
        measurements.values(), key=lambda m: (not m.is_reference, m.key.server, m.key.workload, m.key.concurrency)
    )
    judged = RowInputs(config, measurements, verdicts, baselines, updating, searches, cuts)
    rows = [
        dataclasses.replace(
            judged.row(measurement, facts.judged.get(measurement.key)),
            not_stored=(not_stored or {}).get(measurement.key),
            confirmation=(confirmations or {}).get(measurement.key),
            update_accepts=facts.update_accepts.get(measurement.key),
        )
        for measurement in ordered
    ]
    fingerprints = [m.fingerprint for m in ordered if m.fingerprint is not None]
    return Report(
        rows=rows,
        fits=_fits(config, rows),
        drift=judged.drift(ordered),
        warnings=session_warnings(config, ordered, rows, cuts, facts, not_stored or {}),
        saved=sorted(saved.items(), key=lambda kv: kv[0].label),
        fingerprint_summary=fingerprints[0].summary() if fingerprints else None,
        simulated=bool(fingerprints) and fingerprints[0].identity.get("launcher") == "sim",
        sweeps=sweep_summaries(rows),
        errors=dict(sorted(facts.errors.items())),
        second_starts={server: list(keys) for server, keys in facts.second_starts.items()},
        interrupted=cuts,
    )


@dataclass(frozen=True)
class RowInputs:
    """What a row of the summary is judged from: the measurements with their references, the stored
    histories, the tests' verdicts and the measurements cut short."""

    config: SpecperfConfig
    measurements: Mapping[MeasurementKey, Measurement]
    verdicts: Mapping[MeasurementKey, list[Verdict]]
    baselines: Mapping[MeasurementKey, StoredBaseline | None]
    updating: bool
    searches: int
    interrupted: Mapping[MeasurementKey, Cut]

    def reference_of(self, measurement: Measurement) -> Measurement | None:
        key = measurement.key
        reference = self.measurements.get(MeasurementKey(self.config.reference, key.workload, key.concurrency))
        return None if reference is measurement else reference

    def row(self, measurement: Measurement, judged: Row | None = None) -> Row:
        """The key's own verdict at the suite's tolerances, and its tests' (which may be stricter, or check
        less: a test of the accept length alone does not hide what the throughput's history says). A row
        `judged` before (ahead of storing) is not evaluated again; it takes the verdicts its key gained
        since (a run the store could not write is an ERROR)."""
        key, reference = measurement.key, self.reference_of(measurement)
        if judged is not None and key not in self.interrupted:
            return dataclasses.replace(judged, verdict=worst([judged.verdict, *self.verdicts.get(key, [])]))
        baseline = self.baselines.get(key)
        reference_baseline = self.baselines.get(reference.key) if reference is not None else None
        limits = Limits.of(self.config, key.workload)
        keys = sum(1 for k in self.measurements if k.server == key.server)  # as its tests were judged
        on_reference = speedup_keys(self.measurements, self.config.reference)
        evaluation = evaluate(
            measurement,
            reference,
            None,
            limits,
            baseline,
            updating=self.updating,
            reference_baseline=reference_baseline,
            searches=self.searches,
            keys=keys,
            speedup_keys=asked_among(
                keys, on_reference, reference, reference_baseline, limits.tolerance("output_throughput")
            ),
        )
        verdict = worst([*self.verdicts.get(key, []), evaluation.verdict])
        row = _row(measurement, reference, baseline, evaluation, verdict, self.updating, reference_baseline)
        row = dataclasses.replace(row, lossless=_lossless(self.config, measurement, reference))
        if (cut := self.interrupted.get(key)) is None:
            return row
        return dataclasses.replace(
            row, interrupted=cut, verdict=worst(self.verdicts.get(key) or [Verdict.INCONCLUSIVE])
        )

    def drift(self, ordered: Sequence[Measurement]) -> dict[str, list[Change]]:
        """What changed since each key's stored history, identity first (none while updating)."""
        found: dict[str, list[Change]] = {}
        for measurement in ordered:
            baseline = self.baselines.get(measurement.key)
            changes = drift(baseline, measurement) if baseline is not None and not self.updating else None
            if changes:
                found[measurement.key.label] = [*changes.identity, *changes.environment]
        return found


def session_warnings(
    config: SpecperfConfig,
    ordered: Sequence[Measurement],
    rows: Sequence[Row],
    interrupted: Mapping[MeasurementKey, Cut],
    facts: SessionFacts,
    not_stored: Mapping[MeasurementKey, str],
) -> list[str]:
    """Every warning of the session, in the one order the terminal and the JSON show: errors, engine
    releases, each row's own, the cuts, second starts, the pool's and the store's lines, change points,
    what was not stored and what an update accepts."""
    lines = [f"ERROR {key.label}: {message}" for key, message in sorted(facts.errors.items())]
    lines += version_warnings(list(ordered))
    for row in rows:
        lines += row_warnings(row, config)
    lines += [
        f"{key.label}: {cut.text}: the session was cut short (Ctrl-C, SIGTERM or a time limit)"
        for key, cut in sorted(interrupted.items(), key=lambda kv: kv[0].label)
    ]
    lines += second_start_events(list(rows), {server: list(keys) for server, keys in facts.second_starts.items()})
    lines += [*facts.pool_warnings, *facts.store_warnings]
    lines += [f"change point: {change.sentence}" for row in rows for change in row.changes]
    lines += [
        f"not stored {key.label}: {why}" + ("" if key in facts.held else f" ({FORCE_HINT})")
        for key, why in sorted(not_stored.items(), key=lambda kv: kv[0].label)
    ]
    return lines + [
        f"--specperf-update accepts {key.label} as the new level, though against the level it replaces "
        f"tonight is {text}"
        for key, text in sorted(facts.update_accepts.items(), key=lambda kv: kv[0].label)
    ]


def row_warnings(row: Row, config: SpecperfConfig) -> list[str]:
    """A row's own warnings: its measurement's notes and warnings, a speedup that compares more than
    speculation, noisy or warming rounds, and what its history says about tonight."""
    measurement, label = row.measurement, row.key.label
    lines = [f"{label}: {w}" for w in [*measurement.notes, *measurement.warnings]]
    if row.unlike_reference:
        lines.append(
            f"{label}: its speedup over {config.reference} compares more than speculation: "
            + "; ".join(str(c) for c in row.unlike_reference)
        )
    return lines + noise_warning(measurement, config) + history_warnings(row, config.max_regression)


def version_warnings(measurements: list[Measurement]) -> list[str]:
    """One line per engine release outside the plugin's supported range, however many rows ran on
    it: the session's fact, not each row's (`Engine.version_note`)."""
    lines: list[str] = []
    for measurement in measurements:
        fingerprint = measurement.fingerprint
        engine = str(fingerprint.identity.get("engine", DEFAULT_ENGINE)) if fingerprint else None
        if fingerprint is None or engine not in engine_names():
            continue
        version = fingerprint.environment.get(f"{engine}.version")
        note = engine_for(engine).version_note(None if version == UNSET else version)
        if note is not None and note not in lines:
            lines.append(note)
    return lines


def _lossless(config: SpecperfConfig, measurement: Measurement, reference: Measurement | None) -> LosslessMatch | None:
    """The lossless figure of a speculative measurement on a greedy workload, whether a test checks it or
    not (a sampled workload's outputs differ by design)."""
    workload = config.workloads.get(measurement.key.workload)
    if reference is None or measurement.is_reference or workload is None or workload.temperature > 0:
        return None
    return lossless_match(measurement, reference)


def confirmation_text(confirmed: bool, first_start: float) -> str:
    """'confirmed on a second server start (the first start alone: -10.0%)', or not."""
    first = f"{first_start - 1:+.1%}"
    if confirmed:
        return f"confirmed on a second server start (the first start alone: {first})"
    return f"not confirmed on a second server start: the first start was slow ({first})"


def second_start_events(rows: list[Row], restarted: dict[str, list[MeasurementKey]]) -> list[str]:
    """One line per server restarted to confirm checks: a slow start fails many checks of a server
    together, and one restart answers for all of them."""
    by_key = {row.key: row for row in rows}
    lines = []
    for server, keys in sorted(restarted.items()):
        parts = []
        for key in keys:
            night = by_key[key].night if key in by_key else None
            if night is not None and night.confirmed is not None and night.first_start is not None:
                parts.append(
                    f"{key.workload}/c{key.concurrency} {confirmation_text(night.confirmed, night.first_start)}"
                )
            else:
                parts.append(f"{key.workload}/c{key.concurrency} measured on both starts")
        lines.append(
            f"second server start of {server}: one restart for {len(keys)} measurement{'s' if len(keys) != 1 else ''}: "
            + "; ".join(parts)
        )
    return lines


def history_warnings(row: Row, tolerance: float) -> list[str]:
    """What a row's history says about tonight: a confirmation, rejected runs, and what the key can
    and cannot see (`blind_spots`)."""
    label, night = row.key.label, row.night
    lines = [f"{label}: {row.confirmation}"] if row.confirmation else []
    if row.explanation is not None:
        lines.append(f"{label}: why: {row.explanation['sentence']}")
    if night is None or night.comparison is None:
        return lines
    lines += [
        f"{label}: the run of {created[:10]} rejected as an outlier: {r.describe()}; kept in the file, left out of "
        "the level and the spread"
        for created, r in row.rejected
    ]
    return lines + [f"{label}: {spot}" for spot in blind_spots(night, tolerance)]


def blind_spots(night: NightVerdict, tolerance: float) -> list[str]:
    """Why a key's nightly gate cannot show a change of `tolerance` (docs/verdicts.md, "What the gate can
    see"): its run-to-run CV is credibly above tolerance / `BLIND_RATIO`, or its run means fall into two
    alternating groups (its spread then holds both). Sentences without the key's
    label (the report and the dashboard each put it their own way); none when the gate can see it."""
    comparison = night.comparison
    if comparison is None:
        return []
    lines = []
    low = spread_lower_bound(comparison)
    if low is not None and low > tolerance / BLIND_RATIO:
        sees = f"; the smallest change one night flags (80%) is {night.detectable - 1:+.1%}" if night.detectable else ""
        lines.append(
            f"this key cannot show a {tolerance:.0%} change: its run-to-run CV is {comparison.run_cv:.1%} "
            f"(at least {low:.1%}, 90% confidence){sees}: raise rounds, raise the tolerance or fix the noise"
        )
    groups = bimodal(night.values[:-1], share=0.15)
    if groups is not None:
        lines.append(
            f"its run means fall into two groups ({groups[0]:.4g} and {groups[1]:.4g}, alternating from "
            "night to night): some starts land in another state (a GPU clock, a NUMA placement, a kernel choice)"
        )
    return lines


def _estimate(measurement: Measurement, metric: str) -> Estimate | None:
    samples = measurement.samples(metric)
    return mean_estimate(samples) if samples else None


def _row(
    measurement: Measurement,
    reference: Measurement | None,
    baseline: StoredBaseline | None,
    evaluation: Evaluation,
    verdict: Verdict,
    updating: bool,
    reference_baseline: StoredBaseline | None = None,
) -> Row:
    night = next((c.night for c in evaluation.checks if c.name == "regression:output_throughput"), None)
    speedup = cost = None
    unlike: tuple[Change, ...] = ()
    if reference is not None and not measurement.is_reference:
        cur, ref = measurement.samples("output_throughput"), reference.samples("output_throughput")
        if cur and ref and evaluation.speedup is not None:
            speedup = evaluation.speedup.estimate  # the interval min_speedup decides on: one per check
        cost = _cost(measurement, reference)
        unlike = tuple(speedup_differences(reference.fingerprint, measurement.fingerprint))
    history: dict[str, tuple[Point, ...]] = {}
    if baseline is not None and not updating and comparable(baseline, measurement):
        ref_history = (
            reference_baseline if reference is not None and comparable(reference_baseline, reference) else None
        )
        for metric in KEY_METRICS:
            points = series(
                measurement, baseline, metric, reference=reference, reference_baseline=ref_history, whole=True
            )
            if points:
                history[metric] = tuple(points)
    return Row(
        measurement=measurement,
        throughput=_estimate(measurement, "output_throughput"),
        vs_baseline=night.comparison.ratio if night is not None and night.comparison is not None else None,
        speedup=speedup,
        accept_length=_estimate(measurement, "accept_length"),
        tpot_ms=_estimate(measurement, "mean_tpot_ms"),
        ttft_ms=_estimate(measurement, "mean_ttft_ms"),
        cost=cost,
        verdict=verdict,
        cv=coefficient_of_variation(measurement.samples("output_throughput")),
        history=history,
        changes=tuple(evaluation.changes),
        night=night,
        rejected=tuple(
            (run.provenance.created, rejection)
            for run, rejection in (
                rejected_runs(night, past_runs(baseline, "output_throughput")[0]) if night and baseline else []
            )
        ),
        unlike_reference=unlike,
        explanation=evaluation.explanation.to_dict() if evaluation.explanation is not None else None,
    )


def _cost(measurement: Measurement, reference: Measurement) -> CostModel | None:
    tau, tpot = _estimate(measurement, "accept_length"), _estimate(measurement, "mean_tpot_ms")
    ref_tpot = _estimate(reference, "mean_tpot_ms")
    if tau is None or tpot is None or ref_tpot is None:
        return None
    return analyze(
        tau,
        tpot,
        ref_tpot,
        throughput=_estimate(measurement, "output_throughput"),
        reference_throughput=_estimate(reference, "output_throughput"),
        draft_steps=measurement.num_steps,
        topk=measurement.eagle_topk or 1,
    )


def _fits(config: SpecperfConfig, rows: list[Row]) -> list[Fit]:
    """Verify-cost fits over configs that differ only in draft tokens (same everything else)."""
    entries: list[tuple[tuple[Any, ...], float, float]] = []
    members: dict[tuple[Any, ...], list[tuple[str, float]]] = {}
    for row in rows:
        m = row.measurement
        if row.cost is None or m.num_draft_tokens is None:
            continue
        server = config.servers.get(m.key.server)
        if server is None:
            continue
        # everything but the draft-token count: a difference in env (NCCL tuning) or simulator flags
        # changes the cycle for reasons a line through draft tokens cannot explain
        group = (
            config.model_of(server),
            server.draft_model,
            server.algorithm,
            server.eagle_topk,
            server.args,
            tuple(sorted(server.env.items())),
            server.sim_args,
            m.key.workload,
            m.key.concurrency,
        )
        entries.append((group, m.num_draft_tokens, row.cost.cycle_ms.value))
        members.setdefault(group, []).append((m.key.server, row.cost.cycle_ms.value))
    fits = []
    for group, fit in fit_verify_costs(entries).items():
        servers = tuple(name for name, _ in members[group])
        fits.append(Fit(servers, group[-2], group[-1], fit, tuple(c for _, c in members[group])))
    return fits


def sweep_summaries(rows: list[Row]) -> list[SweepSummary]:
    """A `SweepSummary` for every workload whose speedups span more than one concurrency level.

    Works on rows alone (not the config), so merged reports from several shards get their sweep
    recomputed from rows that each carry a speedup measured against their own shard's reference.
    """
    by_workload: dict[str, list[Row]] = {}
    for row in rows:
        by_workload.setdefault(row.key.workload, []).append(row)
    summaries = []
    for workload, group in by_workload.items():
        levels = tuple(sorted({row.key.concurrency for row in group}))
        if len(levels) > 1 and (sweep := _sweep(workload, levels, group)).speedups:
            summaries.append(sweep)  # with no speedup (only the reference measured) there is nothing to show
    return summaries


def _sweep(workload: str, levels: tuple[int, ...], rows: list[Row]) -> SweepSummary:
    speedups: dict[str, dict[int, Estimate]] = {}
    throughputs: dict[str, dict[float, Estimate]] = {}
    for row in rows:
        level = row.key.concurrency
        if row.speedup is not None and math.isfinite(row.speedup.value):
            speedups.setdefault(row.key.server, {})[level] = row.speedup
        if row.throughput is not None and math.isfinite(row.throughput.value):
            throughputs.setdefault(row.key.server, {}).setdefault(float(level), row.throughput)
    crossovers = {
        name: find_crossover({float(level): s for level, s in curve.items()})
        for name, curve in sorted(speedups.items())
    }
    winners = best_config_per_level(throughputs) if throughputs else ()
    return SweepSummary(workload, levels, dict(sorted(speedups.items())), crossovers, winners)
