"""`specperf tune --json PATH`: the result as one JSON document (docs/tune.md has its shape).

    {"best": [{"workload": ..., "concurrency": N, "config": "s3-k4-n10",
               "server": {"num_steps": .., "eagle_topk": .., "num_draft_tokens": .., ...},
               "throughput": .., "speedup": .., "speedup_interval": [low, high], "measured": true, ...}],
     "starts": N, "candidates": [...], ...}

Written atomically (a reader never sees half a file), strict JSON (no NaN), secrets redacted.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pytest_specperf.common.jsonfile import atomic_write, clean
from pytest_specperf.engines import Engine
from pytest_specperf.tune.model import Outlook
from pytest_specperf.tune.output import never_started, winner, winner_speedup
from pytest_specperf.tune.search import TuneResult
from pytest_specperf.tune.space import Candidate
from pytest_specperf.verdict.stats import Estimate

KIND = "pytest-specperf tune"
SCHEMA = 1


def server_settings(candidate: Candidate, engine: Engine) -> dict[str, Any]:
    """The speculative settings of a candidate as its engine reads them (empty for the reference)."""
    return {} if candidate.is_reference else engine.speculative_settings(candidate.server)


def tune_document(result: TuneResult, *, launcher: str) -> dict[str, Any]:
    space, fc = result.space, result.forecast
    best = []
    for objective in space.objectives:
        cand, outlook = winner(result, objective)
        speedup = winner_speedup(result, objective)
        best.append(
            {
                "workload": objective.workload,
                "concurrency": objective.concurrency,
                "config": cand.label,
                "server": server_settings(cand, result.space.plan.engine),
                "throughput": outlook.throughput.value if outlook.throughput else outlook.estimated_throughput,
                "speedup": speedup.value if speedup is not None else None,
                "speedup_interval": _interval(speedup),
                "measured": cand.label in result.observed,
                "confidence": fc.recommended[objective][1],
            }
        )
    candidates = [_candidate(result, cand) for cand in (space.reference, *space.candidates)]
    return clean(
        {
            "kind": KIND,
            "schema": SCHEMA,
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
            "config": space.where,
            "engine": space.engine,
            "launcher": launcher,
            "base": space.base.name,
            "reference": space.reference.label,
            "budget": space.budget,
            "starts": len(result.starts),
            "grid": len(space.candidates) + 1,
            "stopped": result.stopped,
            "settled": result.settled,
            "best": best,
            "candidates": candidates,
            "start_log": [
                {"config": s.label, "reason": s.reason, "rounds": s.rounds, "error": s.error} for s in result.starts
            ],
            "model": _model(result),
        }
    )


def write_document(path: Path, result: TuneResult, *, launcher: str) -> None:
    atomic_write(path, json.dumps(tune_document(result, launcher=launcher), indent=2, sort_keys=True) + "\n")


def _candidate(result: TuneResult, cand: Candidate) -> dict[str, Any]:
    started = cand.label in result.observed
    levels = []
    for objective in result.space.objectives:
        o: Outlook = result.forecast.outlooks[(cand.label, objective)]
        levels.append(
            {
                "workload": objective.workload,
                "concurrency": objective.concurrency,
                "throughput": _estimate(o.throughput),
                "speedup": _estimate(o.speedup),
                "predicted_throughput": _estimate(o.predicted_throughput),
                "predicted_speedup": _estimate(o.predicted_speedup),
                "estimate": o.estimated_throughput,
                "chance": o.chance,
                "leader": result.forecast.leaders[objective] == cand.label,
                "misfit": o.misfit,
                "rounds": o.measured.rounds if o.measured is not None else 0,
                "cycle_ms": o.measured.mean_cycle_ms if o.measured is not None else None,
                "accept_histogram": list(o.measured.histogram) if o.measured and o.measured.histogram else None,
            }
        )
    return {
        "config": cand.label,
        "reference": cand.is_reference,
        "server": server_settings(cand, result.space.plan.engine),
        "started": started,
        "why_not_started": None if started else never_started(result, cand.label),
        "ruled_out_after_starts": None if cand.is_reference else result.ruled_out_after(cand.label),
        "levels": levels,
    }


def _model(result: TuneResult) -> dict[str, Any]:
    fc = result.forecast
    cost = []
    for objective, fit in fc.cost.items():
        terms = {t: {"value": c[0], "sd": c[1]} for t in fit.terms if (c := fit.coefficient(t)) is not None}
        cost.append(
            {
                "workload": objective.workload,
                "concurrency": objective.concurrency,
                "terms": terms,
                "configs": len(fit.points),
                "misfit": fit.misfit,
            }
        )
    acceptance = [
        {
            "group": group,
            "workload": workload,
            "configs": acc.observations,
            "by_position": [{"value": v, "low": lo, "high": hi} for v, lo, hi in acc.by_position_intervals()],
            "rates": [{"value": v, "low": lo, "high": hi} for v, lo, hi in acc.rate_intervals()],
            "tree_gain": acc.gain,
        }
        for (group, workload), acc in fc.acceptance.items()
    ]
    return {"cost": cost, "acceptance": acceptance, "systematic_error": fc.systematic_sd}


def _estimate(e: Estimate | None) -> dict[str, Any] | None:
    if e is None:
        return None
    return {"value": e.value, "low": e.low if e.bounded else None, "high": e.high if e.bounded else None}


def _interval(e: Estimate | None) -> list[float | None] | None:
    if e is None:
        return None
    return [e.low if e.bounded else None, e.high if e.bounded else None]
