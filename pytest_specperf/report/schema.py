"""The JSON Schema (draft 2020-12) of the `--specperf-json` report, and a small checker for it.

The schema is the report format's definition: `specperf schema` prints it for external validators
(check-jsonschema, ajv), docs/json-schema.md explains it field by field, and `jsonreport.load_report`
checks every document against it before decoding, so a hand-edited or truncated report is named as
corrupt instead of failing somewhere in the decoder. The format's name and version live here with
the schema's `$id`, so a version bump changes them together. `validate` covers only the keywords the
schema uses, so the package needs no `jsonschema` dependency.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pytest_specperf.measure.records import POSITIONS_LABEL, POSITIONS_MEANING
from pytest_specperf.report.costmodel import FitStatus
from pytest_specperf.verdict.trends import KEY_METRICS
from pytest_specperf.verdict.verdicts import Verdict

SCHEMA_NAME = "pytest-specperf/report"
SCHEMA_VERSION = 1


# --- the schema ----------------------------------------------------------------------------------------


def _keys(names: str) -> list[str]:
    """Property names written as one string: the long `required` lists stay readable."""
    return names.split()


#: Acceptance by draft position, as every output names and defines it (docs/metrics.md).
POSITIONS_DESCRIPTION = (
    f"{POSITIONS_LABEL[0].upper()}{POSITIONS_LABEL[1:]} 1, 2, ...: {POSITIONS_MEANING} "
    "(zeros at the drafted positions no verify step reached)"
)


def _nullable(schema: Mapping[str, Any]) -> dict[str, Any]:
    return {"anyOf": [dict(schema), {"type": "null"}]}


_NUM = {"type": "number"}
_INT = {"type": "integer"}
_STR = {"type": "string"}
_BOOL = {"type": "boolean"}

#: How far a measurement got when the session was cut short: "interrupted after 2 of 3 rounds".
_CUT_PROPERTIES: dict[str, Any] = {
    "rounds": {"type": "integer", "minimum": 0},
    "planned": {"type": "integer", "minimum": 1},
    "text": _STR,
}
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
        "errors": {"type": "array", "items": {"$ref": "#/$defs/error"}},
        "interrupted": {
            "type": "array",
            "description": "Measurements the session was cut short in (Ctrl-C, SIGTERM, a time limit), with how far "
            "each got; those with a completed round are also in `measurements`, with the rounds they completed.",
            "items": {
                "type": "object",
                "required": _keys("label server workload concurrency rounds planned text"),
                "properties": {
                    "label": _STR,
                    "server": _STR,
                    "workload": _STR,
                    "concurrency": {"type": "integer", "minimum": 1},
                    **_CUT_PROPERTIES,
                },
            },
        },
        "second_starts": {
            "type": "array",
            "description": "Servers restarted to confirm checks on a second start, and what was measured again.",
            "items": {
                "type": "object",
                "required": ["server", "measurements"],
                "properties": {"server": _STR, "measurements": {"type": "array", "items": _STR}},
            },
        },
    },
    "$defs": {
        "error": {
            "type": "object",
            "description": "A measurement that could not be made, or whose test errored inside the plugin.",
            "required": _keys("label server workload concurrency verdict reason"),
            "properties": {
                "label": _STR,
                "server": _STR,
                "workload": _STR,
                "concurrency": {"type": "integer", "minimum": 1},
                "verdict": {"const": "ERROR"},
                "reason": _STR,
            },
        },
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
                "accept_length_source": {"enum": ["responses", "prometheus"]},
                "spec_counters": {"$ref": "#/$defs/spec_counters"},
                "acceptance_per_position": {
                    "type": "array",
                    "items": _NUM,
                    "description": f"{POSITIONS_DESCRIPTION}, over this round's counter deltas.",
                },
                "records": {"type": "array", "items": {"$ref": "#/$defs/record"}},
            },
        },
        "spec_counters": {
            "type": "object",
            "description": "The change of the server's speculation counters over a round (vLLM's Prometheus).",
            "required": ["drafts", "draft_tokens", "accepted", "accepted_per_position"],
            "properties": {
                "drafts": _INT,
                "draft_tokens": _INT,
                "accepted": _INT,
                "accepted_per_position": {"type": "array", "items": _INT},
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
                "reason": _nullable(_STR),
                "summary": {"$ref": "#/$defs/summary"},
                "accept_length_source": _nullable({"enum": ["responses", "prometheus", "prometheus+responses"]}),
                "acceptance_per_position": _nullable(
                    {
                        "type": "array",
                        "items": _NUM,
                        "description": f"{POSITIONS_DESCRIPTION}, pooled over the rounds.",
                    }
                ),
                "estimates": {
                    "type": "object",
                    "required": _keys("output_throughput accept_length mean_tpot_ms mean_ttft_ms speedup vs_baseline"),
                    "additionalProperties": _nullable(_ESTIMATE),
                },
                "throughput_cv": _nullable(_NUM),
                "cost_model": _nullable({"$ref": "#/$defs/cost_model"}),
                "drift": {"type": "array", "items": {"$ref": "#/$defs/change"}},
                "unlike_reference": {
                    "type": "array",
                    "description": "What the reference and this server differ in besides speculation "
                    "(old: the reference's value): its speedup compares those too.",
                    "items": {"$ref": "#/$defs/change"},
                },
                "warnings": {"type": "array", "items": _STR},
                "notes": {"type": "array", "items": _STR},
                "fingerprint": _nullable({"$ref": "#/$defs/fingerprint"}),
                "history": {
                    "type": "object",
                    "description": "Per key metric, every stored run of the comparable history, tonight last.",
                    "additionalProperties": {"type": "array", "items": {"$ref": "#/$defs/history_point"}},
                },
                "change_points": {"type": "array", "items": {"$ref": "#/$defs/change_point"}},
                "gate": _nullable({"$ref": "#/$defs/gate"}),
                "not_stored": _nullable(_STR),
                "update_accepts": _nullable(_STR),
                "explanation": _nullable({"$ref": "#/$defs/explanation"}),
                "interrupted": _nullable(
                    {
                        "type": "object",
                        "description": "The session was cut short while this measurement was taken: its rounds "
                        "are the ones it completed, it is not stored, and nothing was decided on it unless a test "
                        "of it had finished (verdict INCONCLUSIVE otherwise).",
                        "required": _keys("rounds planned text"),
                        "properties": _CUT_PROPERTIES,
                    }
                ),
                "lossless": _nullable(
                    {
                        "type": "object",
                        "description": "A speculative measurement on a temperature-0 workload: its outputs equal "
                        "to the reference server's for the same prompt in the same round slot, whether a lossless "
                        "check passed, failed or was not asked for.",
                        "required": ["equal", "compared", "share", "first_mismatch"],
                        "properties": {
                            "equal": _INT,
                            "compared": _INT,
                            "share": _NUM,
                            "first_mismatch": _nullable(_STR),
                        },
                    }
                ),
                "rounds": {"type": "array", "items": {"$ref": "#/$defs/round"}},
            },
        },
        "explanation": {
            "type": "object",
            "description": "Why a key moved, when a history check lies beyond its tolerance: tonight over the runs "
            "its throughput level rests on, per part of the speculative cycle (throughput = accept length / cycle, "
            "cycle = accept length x TPOT; reference_tpot: plain decoding of the same sessions). `part` names the "
            "part that carries the move; `causes` the environment differences since the level that can act on it.",
            "required": _keys("sentence part throughput accept_length cycle reference_tpot ttft causes"),
            "properties": {
                "sentence": _STR,
                "part": {"enum": ["accept_length", "target", "drafting", "cycle", "prefill", "unclear"]},
                **{
                    name: _nullable({"$ref": "#/$defs/ratio"})
                    for name in ("throughput", "accept_length", "cycle", "reference_tpot", "ttft")
                },
                "causes": {"type": "array", "items": {"$ref": "#/$defs/change"}},
                "candidates": {
                    "type": "array",
                    "description": "Differences that changed the same way on the reference, whose plain decoding "
                    "moved with this key: candidate causes whatever part they act on.",
                    "items": {"$ref": "#/$defs/change"},
                },
                "level_spread": _nullable(
                    {
                        "type": "number",
                        "description": "Highest over lowest throughput of the level's nights, when they differ too "
                        "much to tell which part moved (part `unclear`).",
                    }
                ),
                "positions": _nullable(
                    {
                        "type": "object",
                        "description": f"{POSITIONS_DESCRIPTION}, at the level and tonight.",
                        "required": ["level", "tonight"],
                        "properties": {
                            "level": {"type": "array", "items": _NUM},
                            "tonight": {"type": "array", "items": _NUM},
                        },
                    }
                ),
            },
        },
        "ratio": {
            "type": "object",
            "description": "Tonight over the level, with its interval (null bounds: no interval).",
            "required": _keys("value low high"),
            "properties": {"value": _NUM, "low": _nullable(_NUM), "high": _nullable(_NUM)},
        },
        "history_point": {
            "type": "object",
            "description": "One run of a key's history; created/segment null for tonight.",
            "required": _keys("created commit segment tonight value"),
            "properties": {
                "created": _nullable(_STR),
                "commit": _nullable(_STR),
                "segment": _nullable(_INT),
                "tonight": _BOOL,
                "status": _nullable({"enum": ["accepted", "suspect", "refused"]}),
                "value": _ESTIMATE,
            },
        },
        "gate": {
            "type": "object",
            "description": "What tonight's throughput check against its history rests on, and what it can detect.",
            "properties": {
                "runs": _INT,
                "run_to_run_cv": _NUM,
                "prior": _BOOL,
                "starts": _INT,
                "detectable_change": _nullable(_NUM),
                "rejected": {"type": "array", "items": {"type": "object"}},
                "confirmation": _nullable(_STR),
                "confirmed": _nullable(_BOOL),
                "first_start": _nullable(_NUM),
                "spread_runs": _INT,
                "change_runs": _INT,
                "by_change": _BOOL,
                "back_to_level": _BOOL,
            },
        },
        "change_point": {
            "type": "object",
            "description": "The newest change point of a key series (current segment, tonight appended).",
            "required": _keys("metric index runs since commit tonight ratio p_value description"),
            "properties": {
                "metric": {"enum": list(KEY_METRICS)},
                "index": _INT,
                "runs": _INT,
                "since": _nullable(_STR),
                "commit": _nullable(_STR),
                "tonight": _BOOL,
                "ratio": _ESTIMATE,
                "p_value": _nullable(_NUM),
                "kind": {"enum": ["step", "drift"]},
                "per_run": _nullable(_NUM),
                "description": _STR,
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
                "kept_as": _nullable(_STR),
                "segment": _INT,
                "runs": _INT,
                "new_segment": {"type": "boolean"},
            },
        },
    },
}


# --- the checker ---------------------------------------------------------------------------------------

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
