"""Machine-readable outputs of a session: JSON report, Markdown, Bencher Metric Format, plots.

The JSON report (`--specperf-json`) is the complete record: every measurement with its raw rounds
and per-request records, its fingerprint, verdict, speedup and cost model, plus the verify-cost fits,
concurrency sweeps, environment drift and warnings. It is versioned (`schema`, `schema_version`),
described by `REPORT_SCHEMA` (JSON Schema draft 2020-12) and documented in docs/json-schema.md.
`load_report` reads it back into an `analysis.Report`, which is what `specperf diff` and
`specperf merge` work on, so a report written on one machine renders the same on another.

Strict JSON: a number that is not finite is written as null (an interval end of null is unbounded
on that side). Every string passes the fingerprint redaction once more before it is written.
"""

from __future__ import annotations

import json
import math
import os
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest_specperf

from .analysis import Fit, Report, Row, sweep_summaries
from .costmodel import CostModel, FitStatus, ImpliedAcceptance, VerifyCostFit
from .errors import SpecperfError
from .fingerprint import Change, Fingerprint, redact_text
from .records import Measurement, MeasurementKey
from .stats import Estimate, coefficient_of_variation
from .store import SaveResult, Summary
from .sweep import Crossover, LevelWinner
from .verdict import Verdict

SCHEMA_NAME = "pytest-specperf/report"
SCHEMA_VERSION = 1


class ReportError(SpecperfError):
    """A JSON report that is missing, corrupt, not a report, or of a newer schema version."""


# --- writing -----------------------------------------------------------------------------------------


def report_document(
    report: Report,
    *,
    store: Any = None,
    sources: Sequence[Mapping[str, Any]] = (),
    created: str | None = None,
    host: str | None = None,
) -> dict[str, Any]:
    """The JSON report of `report` (see docs/json-schema.md); `sources` lists merged shards."""
    document = {
        "schema": SCHEMA_NAME,
        "schema_version": SCHEMA_VERSION,
        "created": created or datetime.now(UTC).isoformat(timespec="seconds"),
        "host": host if host is not None else socket.gethostname(),
        "specperf_version": pytest_specperf.__version__,
        "store": None if store is None else str(store),
        "sources": [dict(s) for s in sources],
        "simulated": report.simulated,
        "fingerprint_summary": report.fingerprint_summary,
        "measurements": [measurement_entry(row, report.drift.get(row.key.label, [])) for row in report.rows],
        "verify_cost_fits": [fit_json(fit) for fit in report.fits],
        "sweeps": [sweep_json(sweep) for sweep in report.sweeps],
        "warnings": list(report.warnings),
        "saved_baselines": [saved_json(key, saved) for key, saved in report.saved],
    }
    return _clean(document)


def dumps(document: Mapping[str, Any]) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def write_json(path: Path, document: Mapping[str, Any]) -> None:
    """Write via a temp file and rename, so a reader never sees half a report."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(dumps(document), encoding="utf-8")
    os.replace(tmp, path)


def measurement_entry(row: Row, drift: Sequence[Change] = ()) -> dict[str, Any]:
    """One measurement: identity, verdict, summary, estimates, cost model, drift, then raw rounds."""
    m = row.measurement
    raw = m.to_dict()
    fingerprint = m.fingerprint.redacted().to_dict() if isinstance(m.fingerprint, Fingerprint) else None
    return {
        "label": m.key.label,
        "server": m.key.server,
        "workload": m.key.workload,
        "concurrency": m.key.concurrency,
        "is_reference": m.is_reference,
        "num_steps": m.num_steps,
        "eagle_topk": m.eagle_topk,
        "num_draft_tokens": m.num_draft_tokens,
        "workload_hash": m.workload_hash,
        "verdict": row.verdict.value,
        "summary": summary_json(m),
        "estimates": {
            "output_throughput": estimate_json(row.throughput),
            "accept_length": estimate_json(row.accept_length),
            "mean_tpot_ms": estimate_json(row.tpot_ms),
            "mean_ttft_ms": estimate_json(row.ttft_ms),
            "speedup": estimate_json(row.speedup),
            "vs_baseline": estimate_json(row.vs_baseline),
        },
        "throughput_cv": row.cv,
        "cost_model": cost_json(row.cost),
        "drift": [{"name": c.name, "old": c.old, "new": c.new} for c in drift],
        "warnings": list(m.warnings),
        "fingerprint": fingerprint,
        "rounds": raw["rounds"],
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
        "label": key.label,
        "server": key.server,
        "workload": key.workload,
        "concurrency": key.concurrency,
        "path": str(saved.path),
        "old": saved.old.to_dict() if saved.old else None,
        "new": saved.new.to_dict(),
        "replaced_error": saved.replaced_error,
    }


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _clean(value: Any) -> Any:
    """Strict JSON, no secrets: non-finite floats become null, every string is redacted."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


# --- reading -----------------------------------------------------------------------------------------


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
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ReportError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ReportError(f"{path}: cannot read: {exc}") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReportError(f"{path}: corrupt: not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise ReportError(f"{path}: corrupt: expected a JSON object, got {type(data).__name__}")
    return data


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
    report = Report(
        rows=rows,
        fits=[decode_fit(f) for f in data["verify_cost_fits"]],
        drift={label: changes for label, changes in drift.items() if changes},
        warnings=list(data["warnings"]),
        saved=[decode_saved(s) for s in data["saved_baselines"]],
        fingerprint_summary=data.get("fingerprint_summary"),
        simulated=bool(data.get("simulated")),
    )
    report.sweeps = sweep_summaries(rows)
    return report


def decode_measurement(entry: Mapping[str, Any]) -> Measurement:
    fingerprint = Fingerprint.from_dict(entry["fingerprint"]) if entry.get("fingerprint") else None
    return Measurement.from_dict(dict(entry), fingerprint)


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
    result = SaveResult(Path(data["path"]), old, Summary(**data["new"]), data.get("replaced_error"))
    return MeasurementKey(data["server"], data["workload"], int(data["concurrency"])), result


# --- JSON Schema (draft 2020-12) and a small validator -------------------------------------------------


def _keys(names: str) -> list[str]:
    """Property names written as one string: the long `required` lists stay readable."""
    return names.split()


def _nullable(schema: Mapping[str, Any]) -> dict[str, Any]:
    return {"anyOf": [dict(schema), {"type": "null"}]}


_NUM = {"type": "number"}
_INT = {"type": "integer"}
_STR = {"type": "string"}
_BOOL = {"type": "boolean"}
_ESTIMATE = {"$ref": "#/$defs/estimate"}
_DISTRIBUTION = {
    "type": "object",
    "required": ["mean", "p50", "p90", "p99"],
    "properties": {k: _nullable(_NUM) for k in ("mean", "p50", "p90", "p99")},
}

REPORT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://pytest-specperf.invalid/schemas/report-v1.json",
    "title": "pytest-specperf JSON report",
    "description": "See docs/json-schema.md. Non-finite numbers are null; unknown keys may be added in v1.",
    "type": "object",
    "required": _keys(
        "schema schema_version created host specperf_version store sources simulated "
        "fingerprint_summary measurements verify_cost_fits sweeps warnings saved_baselines"
    ),
    "properties": {
        "schema": {"const": SCHEMA_NAME},
        "schema_version": {"type": "integer", "minimum": 1},
        "created": _STR,
        "host": _STR,
        "specperf_version": _STR,
        "store": _nullable(_STR),
        "sources": {"type": "array", "items": {"type": "object", "required": ["path"], "properties": {"path": _STR}}},
        "simulated": _BOOL,
        "fingerprint_summary": _nullable(_STR),
        "measurements": {"type": "array", "items": {"$ref": "#/$defs/measurement"}},
        "verify_cost_fits": {"type": "array", "items": {"$ref": "#/$defs/fit"}},
        "sweeps": {"type": "array", "items": {"$ref": "#/$defs/sweep"}},
        "warnings": {"type": "array", "items": _STR},
        "saved_baselines": {"type": "array", "items": {"$ref": "#/$defs/saved"}},
    },
    "$defs": {
        "estimate": {
            "type": "object",
            "description": "A value with its interval; low/high null = unbounded on that side (too few rounds).",
            "required": ["value", "low", "high", "n", "confidence", "bounded"],
            "properties": {
                "value": _nullable(_NUM),
                "low": _nullable(_NUM),
                "high": _nullable(_NUM),
                "n": {"type": "integer", "minimum": 0},
                "confidence": _NUM,
                "bounded": _BOOL,
            },
        },
        "change": {
            "type": "object",
            "required": ["name", "old", "new"],
            "properties": {"name": _STR, "old": _STR, "new": _STR},
        },
        "fingerprint": {
            "type": "object",
            "required": ["identity", "environment"],
            "properties": {
                "identity": {"type": "object", "additionalProperties": _STR},
                "environment": {"type": "object", "additionalProperties": _STR},
            },
        },
        "record": {
            "type": "object",
            "required": ["index", "sent", "completion_tokens", "error"],
            "properties": {
                "index": _INT,
                "sent": _NUM,
                "first_chunk": _nullable(_NUM),
                "last_chunk": _nullable(_NUM),
                "prompt_tokens": _INT,
                "completion_tokens": _INT,
                "verify_ct": _nullable(_INT),
                "error": _nullable(_STR),
            },
        },
        "round": {
            "type": "object",
            "required": _keys(
                "index duration_s output_throughput request_count error_count ttft_ms tpot_ms e2e_ms "
                "chunk_gap_ms accept_length records"
            ),
            "properties": {
                "index": _INT,
                "duration_s": _NUM,
                "output_throughput": _NUM,
                "request_count": _INT,
                "error_count": _INT,
                "ttft_ms": _DISTRIBUTION,
                "tpot_ms": _DISTRIBUTION,
                "e2e_ms": _DISTRIBUTION,
                "chunk_gap_ms": _DISTRIBUTION,
                "accept_length": _nullable(_NUM),
                "accept_length_per_request": _nullable(_NUM),
                "acceptance_rate": _nullable(_NUM),
                "records": {"type": "array", "items": {"$ref": "#/$defs/record"}},
            },
        },
        "summary": {
            "type": "object",
            "description": "vllm bench serve names where the concept matches; means over rounds.",
            "required": _keys(
                "rounds completed errors duration output_throughput mean_ttft_ms median_ttft_ms p99_ttft_ms "
                "mean_tpot_ms median_tpot_ms p99_tpot_ms mean_chunk_gap_ms median_chunk_gap_ms "
                "p99_chunk_gap_ms accept_length"
            ),
            "properties": {
                "rounds": _INT,
                "completed": _INT,
                "errors": _INT,
                "duration": _NUM,
                "total_input_tokens": _INT,
                "total_output_tokens": _INT,
                **{
                    k: _nullable(_NUM)
                    for k in ("request_throughput", "output_throughput", "accept_length", "acceptance_rate")
                },
            },
            "additionalProperties": _nullable(_NUM),
        },
        "cost_model": {
            "type": "object",
            "required": _keys(
                "accept_length tpot_ms reference_tpot_ms cycle_ms break_even_accept_length headroom "
                "speedup_tpot speedup_throughput implied_alpha implied_alpha_note acceptance_rate"
            ),
            "properties": {
                **{
                    k: _ESTIMATE
                    for k in _keys(
                        "accept_length tpot_ms reference_tpot_ms cycle_ms break_even_accept_length headroom "
                        "speedup_tpot"
                    )
                },
                "speedup_throughput": _nullable(_ESTIMATE),
                "implied_alpha": _nullable(_ESTIMATE),
                "implied_alpha_note": _nullable(_STR),
                "acceptance_rate": _nullable(_ESTIMATE),
            },
        },
        "measurement": {
            "type": "object",
            "required": _keys(
                "label server workload concurrency is_reference workload_hash verdict summary estimates "
                "throughput_cv cost_model drift warnings fingerprint rounds"
            ),
            "properties": {
                "label": _STR,
                "server": _STR,
                "workload": _STR,
                "concurrency": {"type": "integer", "minimum": 1},
                "is_reference": _BOOL,
                "num_steps": _nullable(_INT),
                "eagle_topk": _nullable(_INT),
                "num_draft_tokens": _nullable(_INT),
                "workload_hash": _STR,
                "verdict": {"enum": [v.value for v in Verdict]},
                "summary": {"$ref": "#/$defs/summary"},
                "estimates": {
                    "type": "object",
                    "required": _keys("output_throughput accept_length mean_tpot_ms mean_ttft_ms speedup vs_baseline"),
                    "additionalProperties": _nullable(_ESTIMATE),
                },
                "throughput_cv": _nullable(_NUM),
                "cost_model": _nullable({"$ref": "#/$defs/cost_model"}),
                "drift": {"type": "array", "items": {"$ref": "#/$defs/change"}},
                "warnings": {"type": "array", "items": _STR},
                "fingerprint": _nullable({"$ref": "#/$defs/fingerprint"}),
                "rounds": {"type": "array", "items": {"$ref": "#/$defs/round"}},
            },
        },
        "fit": {
            "type": "object",
            "required": ["workload", "concurrency", "servers", "cycle_ms", "status", "note", "points", "fixed_ms"],
            "properties": {
                "workload": _STR,
                "concurrency": _INT,
                "servers": {"type": "array", "items": _STR},
                "cycle_ms": {"type": "array", "items": _NUM},
                "status": {"enum": [s.value for s in FitStatus]},
                "note": _STR,
                "points": {"type": "array", "items": {"type": "array", "items": _NUM}},
                "fixed_ms": _nullable(_ESTIMATE),
                "per_token_ms": _nullable(_ESTIMATE),
                "fixed_shares": {"type": "array", "items": _NUM},
            },
        },
        "crossover": {
            "type": "object",
            "description": "Concurrency where speedup crosses 1.0; null = beyond the measured levels.",
            "required": ["kind", "concurrency", "low", "high", "non_monotone", "description"],
            "properties": {
                "kind": {"enum": ["crosses", "crosses upward", "above", "below"]},
                "concurrency": _nullable(_NUM),
                "low": _nullable(_NUM),
                "high": _nullable(_NUM),
                "non_monotone": _BOOL,
                "description": _STR,
            },
        },
        "sweep": {
            "type": "object",
            "required": ["workload", "levels", "configs", "best"],
            "properties": {
                "workload": _STR,
                "levels": {"type": "array", "items": _INT},
                "configs": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["server", "speedups", "crossover"],
                        "properties": {
                            "server": _STR,
                            "speedups": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "required": ["concurrency", "speedup"],
                                    "properties": {"concurrency": _INT, "speedup": _ESTIMATE},
                                },
                            },
                            "crossover": {"$ref": "#/$defs/crossover"},
                        },
                    },
                },
                "best": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["concurrency", "server", "throughput", "certainty"],
                        "properties": {
                            "concurrency": _NUM,
                            "server": _STR,
                            "throughput": _ESTIMATE,
                            "runner_up": _nullable(_STR),
                            "runner_up_throughput": _nullable(_ESTIMATE),
                            "certainty": {"enum": ["sole", "clear", "overlapping", "tied"]},
                            "tied_with": {"type": "array", "items": _STR},
                        },
                    },
                },
            },
        },
        "saved": {
            "type": "object",
            "required": ["label", "server", "workload", "concurrency", "path", "old", "new"],
            "properties": {
                "label": _STR,
                "server": _STR,
                "workload": _STR,
                "concurrency": _INT,
                "path": _STR,
                "old": {"type": ["object", "null"]},
                "new": {"type": "object"},
                "replaced_error": _nullable(_STR),
            },
        },
    },
}

_TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
}


def validate(instance: Any, schema: Mapping[str, Any] = REPORT_SCHEMA) -> list[str]:
    """Problems of `instance` against `schema`, as 'where: what' strings (empty when valid).

    Covers the keywords `REPORT_SCHEMA` uses (type, const, enum, minimum, required, properties,
    additionalProperties, items, anyOf, local $ref), so the package needs no jsonschema dependency.
    """
    problems: list[str] = []
    _check(instance, schema, schema, "$", problems)
    return problems


def _check(value: Any, schema: Mapping[str, Any], root: Mapping[str, Any], where: str, out: list[str]) -> None:
    if "$ref" in schema:
        ref = schema["$ref"]
        if not ref.startswith("#/$defs/"):
            raise ValueError(f"unsupported $ref {ref!r}")
        _check(value, root["$defs"][ref.removeprefix("#/$defs/")], root, where, out)
    if "anyOf" in schema:
        if not any(not _sub(value, option, root, where) for option in schema["anyOf"]):
            out.append(f"{where}: matches none of the allowed shapes ({_describe(value)})")
        return
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else types
        if not any(_TYPES[t](value) for t in names):
            out.append(f"{where}: expected {' or '.join(names)}, got {_describe(value)}")
            return
    if "const" in schema and value != schema["const"]:
        out.append(f"{where}: expected {schema['const']!r}, got {value!r}")
    if "enum" in schema and value not in schema["enum"]:
        out.append(f"{where}: {value!r} is not one of {schema['enum']}")
    if "minimum" in schema and _TYPES["number"](value) and value < schema["minimum"]:
        out.append(f"{where}: {value} is below the minimum {schema['minimum']}")
    if isinstance(value, dict):
        _check_object(value, schema, root, where, out)
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            _check(item, schema["items"], root, f"{where}[{i}]", out)


def _check_object(
    value: dict[str, Any], schema: Mapping[str, Any], root: Mapping[str, Any], where: str, out: list[str]
) -> None:
    for key in schema.get("required", ()):
        if key not in value:
            out.append(f"{where}: missing required key {key!r}")
    properties = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    for key, item in value.items():
        if key in properties:
            _check(item, properties[key], root, f"{where}.{key}", out)
        elif extra is False:
            out.append(f"{where}: unexpected key {key!r}")
        elif isinstance(extra, Mapping):
            _check(item, extra, root, f"{where}.{key}", out)


def _sub(value: Any, schema: Mapping[str, Any], root: Mapping[str, Any], where: str) -> list[str]:
    found: list[str] = []
    _check(value, schema, root, where, found)
    return found


def _describe(value: Any) -> str:
    return "null" if value is None else type(value).__name__


# --- Bencher Metric Format -----------------------------------------------------------------------------

#: BMF measure name → (Row attribute, unit): the unit is in the docs, BMF itself carries none.
BMF_MEASURES = {
    "throughput": ("throughput", "output tok/s"),
    "accept-length": ("accept_length", "tokens per verify step"),
    "tpot": ("tpot_ms", "ms"),
    "ttft": ("ttft_ms", "ms"),
    "speedup": ("speedup", "x over the reference"),
}


def bmf_document(report: Report) -> dict[str, dict[str, dict[str, float]]]:
    """`{"server/workload/cN": {measure: {"value", "lower_value", "upper_value"}}}`.

    Bounds are the report's confidence interval; they are left out when it is unknown (one round),
    and a measure is left out when it was not measured (no accept length on a plain server).
    """
    out: dict[str, dict[str, dict[str, float]]] = {}
    for row in report.rows:
        measures = {}
        for measure, (attribute, _) in BMF_MEASURES.items():
            metric = _bmf_metric(getattr(row, attribute))
            if metric is not None:
                measures[measure] = metric
        out[row.key.label] = measures
    return out


def _bmf_metric(estimate: Estimate | None) -> dict[str, float] | None:
    if estimate is None or not math.isfinite(estimate.value):
        return None
    metric = {"value": estimate.value}
    if estimate.bounded:
        metric.update(lower_value=estimate.low, upper_value=estimate.high)
    return metric


# --- Markdown ------------------------------------------------------------------------------------------


def markdown_text(report: Report, *, store: Any = None, sources: Sequence[str] = ()) -> str:
    from .report import render_markdown, summary_blocks

    return render_markdown(summary_blocks(report, store=store, sources=sources, full=True))


def write_markdown(path: Path, text: str) -> list[str]:
    """Write the Markdown file; also append it to $GITHUB_STEP_SUMMARY in a GitHub Actions job."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    written = [f"specperf: wrote Markdown summary to {path}"]
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if step_summary:
        with open(step_summary, "a", encoding="utf-8") as handle:
            handle.write(text + "\n")
        written.append(f"specperf: appended the Markdown summary to $GITHUB_STEP_SUMMARY ({step_summary})")
    return written


# --- the session's outputs -----------------------------------------------------------------------------


def write_outputs(report: Report, session: Any) -> list[str]:
    """Write every output the options ask for; returns one line per file written (or failed).

    A failure to write one output is reported and does not stop the others: the measurements
    behind them took a long time, and the terminal summary still shows them.
    """
    options, store = session.options, session.config.store
    jobs: list[tuple[str | None, str, Callable[[Path], list[str]]]] = [
        (options.json_path, "JSON report", lambda p: _json_job(p, report, store)),
        (options.markdown_path, "Markdown summary", lambda p: write_markdown(p, markdown_text(report, store=store))),
        (options.bmf_path, "Bencher Metric Format JSON", lambda p: _bmf_job(p, report)),
        (options.plot_dir, "plots", lambda p: _plot_job(p, report)),
    ]
    lines: list[str] = []
    for target, what, job in jobs:
        if not target:
            continue
        try:
            lines += job(Path(target))
        except (OSError, SpecperfError) as exc:
            lines.append(f"specperf: ERROR: could not write {what} to {target}: {exc}")
    return lines


def _json_job(path: Path, report: Report, store: Any) -> list[str]:
    write_json(path, report_document(report, store=store))
    return [f"specperf: wrote JSON report to {path}"]


def _bmf_job(path: Path, report: Report) -> list[str]:
    write_json(path, _clean(bmf_document(report)))
    return [f"specperf: wrote Bencher Metric Format JSON to {path}"]


def _plot_job(directory: Path, report: Report) -> list[str]:
    from .plots import write_plots

    paths = write_plots(report, directory)
    return [f"specperf: wrote {len(paths)} plots to {directory}: {', '.join(p.name for p in paths)}"]
