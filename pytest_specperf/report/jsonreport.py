"""The JSON report (`--specperf-json`): a `Report` as a versioned document, and back.

The report is the complete record of a session: every measurement with its raw rounds and
per-request records, its fingerprint, verdict, speedup and cost model, plus the verify-cost fits,
concurrency sweeps, environment drift and warnings. It is versioned (`schema`, `schema_version`),
described by `schema.REPORT_SCHEMA` and documented in docs/json-schema.md. `load_report` reads it
back into an `analysis.Report`, which is what `specperf diff` and `specperf merge` work on, so a
report written on one machine renders the same on another.

Strict JSON: a number that is not finite is written as null (an interval end of null is unbounded
on that side). Every string passes the fingerprint redaction once more before it is written.
"""

from __future__ import annotations

import json
import math
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest_specperf
from pytest_specperf.common.jsonfile import atomic_write, clean, read_json_object
from pytest_specperf.errors import SpecperfError
from pytest_specperf.measure.fingerprint import Fingerprint
from pytest_specperf.measure.records import Measurement, MeasurementKey
from pytest_specperf.measure.rounds import Cut
from pytest_specperf.report.analysis import Fit, Report, Row, ShownStore, sweep_summaries
from pytest_specperf.report.costmodel import CostModel, FitStatus, ImpliedAcceptance, VerifyCostFit
from pytest_specperf.report.fields import MEASUREMENT_FIELDS
from pytest_specperf.report.schema import REPORT_FIELDS, SCHEMA_NAME, SCHEMA_VERSION, validate
from pytest_specperf.report.sweep import Crossover, LevelWinner
from pytest_specperf.store.records import SaveResult, Summary
from pytest_specperf.verdict.checks import LosslessMatch
from pytest_specperf.verdict.drift import Change
from pytest_specperf.verdict.stats import Estimate, coefficient_of_variation
from pytest_specperf.verdict.trends import HistoryChange, Point
from pytest_specperf.verdict.verdicts import Verdict


class ReportError(SpecperfError):
    """A JSON report that is missing, corrupt, not a report, or of a newer schema version."""


# --- encoding ----------------------------------------------------------------------------------------


def report_document(
    report: Report,
    *,
    store: ShownStore | None = None,
    sources: Sequence[Mapping[str, Any]] = (),
    created: str | None = None,
    host: str | None = None,
) -> dict[str, Any]:
    """The JSON report of `report` (see docs/json-schema.md); `sources` lists merged shards. The keys
    `schema.REPORT_FIELDS` declares, in its order."""
    values: dict[str, Any] = {
        "schema": SCHEMA_NAME,
        "schema_version": SCHEMA_VERSION,
        "created": created or datetime.now(UTC).isoformat(timespec="seconds"),
        "host": host if host is not None else socket.gethostname(),
        "specperf_version": pytest_specperf.__version__,
        "store": None if store is None else str(store),
        "sources": [dict(s) for s in sources],
        **report_values(report),
    }
    return clean({field.name: values[field.name] for field in REPORT_FIELDS})


def report_values(report: Report) -> dict[str, Any]:
    """What each key of the document written from the report model holds (`report_document` writes them)."""
    return {
        "simulated": report.simulated,
        "fingerprint_summary": report.fingerprint_summary,
        "measurements": [
            measurement_entry(row, report.drift.get(row.key.label, []), report.errors.get(row.key))
            for row in report.rows
        ],
        "errors": [error_entry(key, reason) for key, reason in report.errors.items()],
        "interrupted": [
            {**_key_json(key), **(cut_json(cut) or {})}
            for key, cut in sorted(report.interrupted.items(), key=lambda kv: kv[0].label)
        ],
        "second_starts": [
            {"server": server, "measurements": [key.label for key in keys]}
            for server, keys in sorted(report.second_starts.items())
        ],
        "verify_cost_fits": [fit_json(fit) for fit in report.fits],
        "sweeps": [sweep_json(sweep) for sweep in report.sweeps],
        "warnings": list(report.warnings),
        "saved_baselines": [saved_json(key, saved) for key, saved in report.saved],
    }


def dumps(document: Mapping[str, Any]) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def write_json(path: Path, document: Mapping[str, Any]) -> None:
    """Write via a temp file and rename, so a reader never sees half a report."""
    atomic_write(Path(path), dumps(document))


def cut_json(cut: Cut | None) -> dict[str, Any] | None:
    """How far a measurement got when the session was cut short: `{"rounds", "planned", "text"}`."""
    if cut is None:
        return None
    return {"rounds": cut.rounds, "planned": cut.planned, "text": cut.text}


def decode_cut(data: Mapping[str, Any] | None) -> Cut | None:
    return None if data is None else Cut(int(data["rounds"]), int(data["planned"]))


def _key_json(key: MeasurementKey) -> dict[str, Any]:
    return {"label": key.label, "server": key.server, "workload": key.workload, "concurrency": key.concurrency}


def error_entry(key: MeasurementKey, reason: str) -> dict[str, Any]:
    """A measurement that could not be made, or whose test errored: ERROR and the one line of why."""
    return {
        **_key_json(key),
        "verdict": Verdict.ERROR.value,
        "reason": reason,
    }


def measurement_entry(row: Row, drift: Sequence[Change] = (), reason: str | None = None) -> dict[str, Any]:
    """One measurement: identity, verdict (and why, for ERROR), summary, estimates, cost model, drift, rounds;
    the keys `schema.MEASUREMENT_FIELDS` declares, in its order."""
    values = measurement_values(row, drift, reason)
    return {field.name: values[field.name] for field in MEASUREMENT_FIELDS}


def measurement_values(row: Row, drift: Sequence[Change] = (), reason: str | None = None) -> dict[str, Any]:
    """What each key of a measurement holds (`measurement_entry` writes them as declared)."""
    m = row.measurement
    fingerprint = m.fingerprint.redacted().to_dict() if isinstance(m.fingerprint, Fingerprint) else None
    return {
        **_key_json(m.key),
        "is_reference": m.is_reference,
        "num_steps": m.num_steps,
        "eagle_topk": m.eagle_topk,
        "num_draft_tokens": m.num_draft_tokens,
        "workload_hash": m.workload_hash,
        "verdict": row.verdict.value,
        "reason": reason,
        "summary": summary_json(m),
        "accept_length_source": m.accept_length_source,
        "acceptance_per_position": list(per_position) if (per_position := m.acceptance_per_position) else None,
        "estimates": estimates_json(row),
        "throughput_cv": row.cv,
        "cost_model": cost_json(row.cost),
        "drift": [{"name": c.name, "old": c.old, "new": c.new} for c in drift],
        "unlike_reference": [{"name": c.name, "old": c.old, "new": c.new} for c in row.unlike_reference],
        "warnings": list(m.warnings),
        "notes": list(m.notes),
        "fingerprint": fingerprint,
        "history": {metric: [point_json(p) for p in points] for metric, points in row.history.items()},
        "change_points": [change_point_json(c) for c in row.changes],
        "gate": gate_json(row),
        "not_stored": row.not_stored,
        "update_accepts": row.update_accepts,
        "explanation": row.explanation,
        "interrupted": cut_json(row.interrupted),
        "lossless": lossless_json(row.lossless),
        "rounds": m.to_dict()["rounds"],
    }


def estimates_json(row: Row) -> dict[str, Any]:
    """A row's estimates, by the metric names of the summary (`vs_baseline`: tonight over the level)."""
    return {
        "output_throughput": estimate_json(row.throughput),
        "accept_length": estimate_json(row.accept_length),
        "mean_tpot_ms": estimate_json(row.tpot_ms),
        "mean_ttft_ms": estimate_json(row.ttft_ms),
        "speedup": estimate_json(row.speedup),
        "vs_baseline": estimate_json(row.vs_baseline),
    }


def lossless_json(match: LosslessMatch | None) -> dict[str, Any] | None:
    """The outputs equal to the reference's, passing or not: `{"equal", "compared", "share", "first_mismatch"}`."""
    if match is None:
        return None
    return {
        "equal": match.equal,
        "compared": match.compared,
        "share": match.share,
        "first_mismatch": match.first_mismatch,
    }


def decode_lossless(data: Mapping[str, Any] | None) -> LosslessMatch | None:
    if data is None:
        return None
    return LosslessMatch(int(data["equal"]), int(data["compared"]), data.get("first_mismatch"))


def point_json(point: Point) -> dict[str, Any]:
    """One run of a key's history: its value over its rounds, when it was stored, from which commit."""
    return {
        "created": point.created,
        "commit": point.commit,
        "segment": point.segment,
        "tonight": point.tonight,
        "status": point.status,
        "value": estimate_json(point.value),
    }


def gate_json(row: Row) -> dict[str, Any] | None:
    """What tonight's throughput check against the history rests on, and what the key can see."""
    night = row.night
    if night is None or night.comparison is None:
        if row.gate is not None:
            return dict(row.gate)  # a row read back from a report keeps its gate as it was
        return {"confirmation": row.confirmation} if row.confirmation else None
    c = night.comparison
    return {
        "runs": c.runs,
        "run_to_run_cv": c.run_cv,
        "prior": c.prior,
        "spread_source": c.spread_source,
        "starts": c.starts,
        "detectable_change": None if night.detectable is None else night.detectable - 1.0,
        "rejected": [{"created": created, "ratio": r.ratio, "t": r.t, "limit": r.limit} for created, r in row.rejected],
        "confirmation": row.confirmation,
        "confirmed": night.confirmed,
        "first_start": night.first_start,
        "spread_runs": c.spread_runs,
        "change_runs": len(night.level.change_runs) if night.level is not None and night.change is not None else 0,
        "by_change": night.by_change,
        "back_to_level": night.back_since is not None,
    }


def change_point_json(change: HistoryChange) -> dict[str, Any]:
    """A change point of a key series (current segment, tonight appended): where, since when, how much."""
    return {
        "metric": change.metric,
        "index": change.index,
        "runs": change.runs,
        "since": change.created,
        "commit": change.commit,
        "tonight": change.tonight,
        "ratio": estimate_json(change.change),
        "p_value": change.p_value,
        "kind": change.kind,
        "per_run": change.per_run,
        "description": change.sentence,
    }


def summary_json(m: Measurement) -> dict[str, Any]:
    """Headline numbers, named as `vllm bench serve` names them where the concept is the same.

    Each latency statistic is the mean over rounds of its per-round value (rounds are the samples,
    see stats.py). Chunk gaps are *not* vLLM's ITL: with speculation a chunk carries several tokens.
    """
    ok = [r for r in m.records if r.ok]
    duration = sum(r.duration_s for r in m.rounds)
    completed = m.request_count - m.error_count
    summary: dict[str, Any] = {
        "rounds": len(m.rounds),
        "completed": completed,
        "errors": m.error_count,
        "duration": duration,
        "total_input_tokens": sum(r.prompt_tokens for r in ok),
        "total_output_tokens": sum(r.completion_tokens for r in ok),
        "request_throughput": completed / duration if duration > 0 else None,
        "output_throughput": _mean(r.output_throughput for r in m.rounds),
    }
    for name, attr in (("ttft", "ttft_ms"), ("tpot", "tpot_ms"), ("e2el", "e2e_ms"), ("chunk_gap", "chunk_gap_ms")):
        for stat, part in (("mean", "mean"), ("median", "p50"), ("p90", "p90"), ("p99", "p99")):
            summary[f"{stat}_{name}_ms"] = _mean(getattr(getattr(r, attr), part) for r in m.rounds)
    summary["accept_length"] = _mean(r.accept_length for r in m.rounds)
    summary["accept_length_per_request"] = _mean(r.accept_length_per_request for r in m.rounds)
    summary["acceptance_rate"] = _mean(r.acceptance_rate for r in m.rounds)
    return summary


def _mean(values: Any) -> float | None:
    xs = [v for v in values if v is not None and math.isfinite(v)]
    return sum(xs) / len(xs) if xs else None


def estimate_json(e: Estimate | None) -> dict[str, Any] | None:
    if e is None:
        return None
    return {
        "value": _finite(e.value),
        "low": _finite(e.low),
        "high": _finite(e.high),
        "n": e.n,
        "confidence": e.confidence,
        "bounded": e.bounded,
    }


def cost_json(cost: CostModel | None) -> dict[str, Any] | None:
    if cost is None:
        return None
    implied = cost.implied_acceptance
    return {
        "accept_length": estimate_json(cost.accept_length),
        "tpot_ms": estimate_json(cost.tpot_ms),
        "reference_tpot_ms": estimate_json(cost.reference_tpot_ms),
        "cycle_ms": estimate_json(cost.cycle_ms),
        "break_even_accept_length": estimate_json(cost.break_even_accept_length),
        "headroom": estimate_json(cost.headroom),
        "speedup_tpot": estimate_json(cost.speedup_tpot),
        "speedup_throughput": estimate_json(cost.speedup_throughput),
        "implied_alpha": estimate_json(implied.alpha) if implied else None,
        "implied_alpha_note": implied.reason if implied else None,
        "acceptance_rate": estimate_json(cost.acceptance_rate),
    }


def fit_json(fit: Fit) -> dict[str, Any]:
    return {
        "workload": fit.workload,
        "concurrency": fit.concurrency,
        "servers": list(fit.servers),
        "cycle_ms": list(fit.cycle_ms),
        "status": fit.fit.status.value,
        "note": fit.fit.note,
        "points": [list(p) for p in fit.fit.points],
        "fixed_ms": estimate_json(fit.fit.fixed_ms),
        "per_token_ms": estimate_json(fit.fit.per_token_ms),
        "fixed_shares": list(fit.fit.point_fixed_shares),
    }


def sweep_json(sweep: Any) -> dict[str, Any]:
    return {
        "workload": sweep.workload,
        "levels": list(sweep.levels),
        "configs": [
            {
                "server": name,
                "speedups": [{"concurrency": c, "speedup": estimate_json(e)} for c, e in sorted(curve.items())],
                "crossover": crossover_json(sweep.crossovers[name]),
            }
            for name, curve in sweep.speedups.items()
        ],
        "best": [winner_json(w) for w in sweep.winners],
    }


def crossover_json(c: Crossover) -> dict[str, Any]:
    return {
        "kind": c.kind.value,
        "concurrency": _finite(c.concurrency),
        "low": _finite(c.low),
        "high": _finite(c.high),
        "non_monotone": c.non_monotone,
        "description": c.describe(),
    }


def winner_json(w: LevelWinner) -> dict[str, Any]:
    return {
        "concurrency": w.concurrency,
        "server": w.best,
        "throughput": estimate_json(w.throughput),
        "runner_up": w.runner_up,
        "runner_up_throughput": estimate_json(w.runner_up_throughput),
        "certainty": w.certainty.value,
        "tied_with": list(w.tied_with),
    }


def saved_json(key: MeasurementKey, saved: SaveResult) -> dict[str, Any]:
    return {
        **_key_json(key),
        "path": str(saved.path),
        "old": saved.old.to_dict() if saved.old else None,
        "new": saved.new.to_dict(),
        "replaced_error": saved.replaced_error,
        "kept_as": None if saved.kept_as is None else str(saved.kept_as),
        "segment": saved.segment,
        "runs": saved.runs,
        "new_segment": saved.new_segment,
    }


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


# --- decoding ----------------------------------------------------------------------------------------


@dataclass
class LoadedReport:
    """A JSON report read back: the report model plus the document's own metadata."""

    path: Path
    report: Report
    document: dict[str, Any] = field(repr=False)

    @property
    def measurements(self) -> list[Measurement]:
        return [row.measurement for row in self.report.rows]


def read_document(path: Path) -> dict[str, Any]:
    """Parse a JSON file into an object; ReportError names the file and what is wrong."""
    return read_json_object(path, ReportError, "report")


def is_report(data: Mapping[str, Any]) -> bool:
    return data.get("schema") == SCHEMA_NAME


def load_report(path: Path, data: dict[str, Any] | None = None) -> LoadedReport:
    """Read, check and decode a JSON report (schema name, version, then shape)."""
    data = read_document(path) if data is None else data
    check_header(path, data)
    problems = validate(data)
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise ReportError(f"{path}: corrupt report: " + "; ".join(problems[:3]) + more)
    try:
        report = decode_report(data)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ReportError(f"{path}: corrupt report: {exc!r}") from exc
    return LoadedReport(Path(path), report, data)


def check_header(path: Path, data: Mapping[str, Any]) -> None:
    if data.get("schema") != SCHEMA_NAME:
        raise ReportError(f"{path}: not a pytest-specperf JSON report (schema={data.get('schema')!r})")
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ReportError(f"{path}: corrupt report: bad schema_version {version!r}")
    if version > SCHEMA_VERSION:
        raise ReportError(
            f"{path}: schema_version {version} is newer than this pytest-specperf "
            f"({pytest_specperf.__version__}) reads (schema_version {SCHEMA_VERSION}); upgrade pytest-specperf"
        )


def decode_report(data: Mapping[str, Any]) -> Report:
    """The `Report` a document describes; sweeps are recomputed from its rows."""
    rows = [decode_row(entry) for entry in data["measurements"]]
    drift = {e["label"]: [Change(c["name"], c["old"], c["new"]) for c in e["drift"]] for e in data["measurements"]}
    return Report(
        rows=rows,
        fits=[decode_fit(f) for f in data["verify_cost_fits"]],
        drift={label: changes for label, changes in drift.items() if changes},
        warnings=list(data["warnings"]),
        saved=[decode_saved(s) for s in data["saved_baselines"]],
        fingerprint_summary=data.get("fingerprint_summary"),
        simulated=bool(data.get("simulated")),
        sweeps=sweep_summaries(rows),
        errors={_decode_key(e): str(e["reason"]) for e in data.get("errors", [])},
        interrupted={_decode_key(e): Cut(int(e["rounds"]), int(e["planned"])) for e in data.get("interrupted", [])},
    )


def _decode_key(entry: Mapping[str, Any]) -> MeasurementKey:
    return MeasurementKey(entry["server"], entry["workload"], int(entry["concurrency"]))


def decode_measurement(entry: Mapping[str, Any]) -> Measurement:
    return Measurement.from_dict(dict(entry))


def decode_row(entry: Mapping[str, Any]) -> Row:
    m = decode_measurement(entry)
    estimates = entry["estimates"]
    return Row(
        measurement=m,
        throughput=decode_estimate(estimates.get("output_throughput")),
        vs_baseline=decode_estimate(estimates.get("vs_baseline")),
        speedup=decode_estimate(estimates.get("speedup")),
        accept_length=decode_estimate(estimates.get("accept_length")),
        tpot_ms=decode_estimate(estimates.get("mean_tpot_ms")),
        ttft_ms=decode_estimate(estimates.get("mean_ttft_ms")),
        cost=decode_cost(entry.get("cost_model")),
        verdict=Verdict(entry["verdict"]),
        cv=coefficient_of_variation(m.samples("output_throughput")),
        history={metric: tuple(decode_point(p) for p in points) for metric, points in entry.get("history", {}).items()},
        changes=tuple(decode_change_point(m.key, c) for c in entry.get("change_points", [])),
        not_stored=entry.get("not_stored"),
        update_accepts=entry.get("update_accepts"),
        gate=entry.get("gate"),
        unlike_reference=tuple(Change(c["name"], c["old"], c["new"]) for c in entry.get("unlike_reference", [])),
        explanation=entry.get("explanation"),
        interrupted=decode_cut(entry.get("interrupted")),
        lossless=decode_lossless(entry.get("lossless")),
    )


def decode_point(data: Mapping[str, Any]) -> Point:
    value = decode_estimate(data["value"])
    if value is None:
        raise ValueError("history point without a value")
    segment = data.get("segment")
    return Point(
        value,
        data.get("created"),
        data.get("commit"),
        None if segment is None else int(segment),
        bool(data.get("tonight")),
        data.get("status"),
    )


def decode_change_point(key: MeasurementKey, data: Mapping[str, Any]) -> HistoryChange:
    ratio = decode_estimate(data["ratio"])
    if ratio is None:
        raise ValueError("change point without a ratio")
    return HistoryChange(
        key,
        str(data["metric"]),
        int(data["index"]),
        int(data["runs"]),
        data.get("since"),
        data.get("commit"),
        ratio,
        _float_or_nan(data.get("p_value")),
        str(data.get("kind", "step")),
        data.get("per_run"),
    )


def decode_estimate(data: Mapping[str, Any] | None) -> Estimate | None:
    if data is None:
        return None
    value = math.nan if data["value"] is None else float(data["value"])
    low = -math.inf if data["low"] is None else float(data["low"])
    high = math.inf if data["high"] is None else float(data["high"])
    return Estimate(value, low, high, int(data["n"]), float(data["confidence"]))


def _required(data: Mapping[str, Any], key: str) -> Estimate:
    estimate = decode_estimate(data[key])
    if estimate is None:
        raise ValueError(f"cost_model.{key} is null")
    return estimate


def decode_cost(data: Mapping[str, Any] | None) -> CostModel | None:
    if data is None:
        return None
    alpha, note = decode_estimate(data.get("implied_alpha")), data.get("implied_alpha_note")
    return CostModel(
        accept_length=_required(data, "accept_length"),
        tpot_ms=_required(data, "tpot_ms"),
        reference_tpot_ms=_required(data, "reference_tpot_ms"),
        cycle_ms=_required(data, "cycle_ms"),
        break_even_accept_length=_required(data, "break_even_accept_length"),
        headroom=_required(data, "headroom"),
        speedup_tpot=_required(data, "speedup_tpot"),
        speedup_throughput=decode_estimate(data.get("speedup_throughput")),
        implied_acceptance=ImpliedAcceptance(alpha, note) if alpha is not None or note else None,
        acceptance_rate=decode_estimate(data.get("acceptance_rate")),
    )


def decode_fit(data: Mapping[str, Any]) -> Fit:
    fit = VerifyCostFit(
        status=FitStatus(data["status"]),
        points=tuple((float(n), float(c)) for n, c in data["points"]),
        fixed_ms=decode_estimate(data.get("fixed_ms")),
        per_token_ms=decode_estimate(data.get("per_token_ms")),
        note=data["note"],
    )
    return Fit(tuple(data["servers"]), data["workload"], int(data["concurrency"]), fit, tuple(data["cycle_ms"]))


def decode_saved(data: Mapping[str, Any]) -> tuple[MeasurementKey, SaveResult]:
    old = Summary(**data["old"]) if data.get("old") else None
    kept = data.get("kept_as")
    result = SaveResult(
        Path(data["path"]),
        old,
        Summary(**data["new"]),
        data.get("replaced_error"),
        Path(kept) if kept else None,
        segment=int(data.get("segment", 0)),
        runs=int(data.get("runs", 1)),
        new_segment=bool(data.get("new_segment", True)),
    )
    return MeasurementKey(data["server"], data["workload"], int(data["concurrency"])), result


def _float_or_nan(value: Any) -> float:
    """A number the JSON may hold as null (NaN is written as null)."""
    return math.nan if value is None else float(value)
