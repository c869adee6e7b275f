"""The JSON Schema (draft 2020-12) of the `--specperf-json` report, and a small checker for it.

The schema is the report format's definition: `specperf schema` prints it for external validators
(check-jsonschema, ajv), docs/json-schema.md explains it field by field, and `jsonreport.load_report`
checks every document against it before decoding, so a hand-edited or truncated report is named as
corrupt instead of failing somewhere in the decoder. The format's name and version live here with
the schema's `$id`, so a version bump changes them together. `validate` covers only the keywords the
schema uses, so the package needs no `jsonschema` dependency.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_specperf.report.costmodel import FitStatus
from pytest_specperf.report.fields import (
    BOOL,
    CUT_PROPERTIES,
    DISTRIBUTION,
    ESTIMATE,
    INT,
    MEASUREMENT_FIELDS,
    NUM,
    POSITIONS_DESCRIPTION,
    STR,
    Field,
    key_list,
    nullable,
)
from pytest_specperf.report.schemacheck import problems
from pytest_specperf.verdict.trends import KEY_METRICS

SCHEMA_NAME = "pytest-specperf/report"
SCHEMA_VERSION = 1


# --- the schema ---------------------------------------------------------------------------------------

#: What a document is written from besides the report model (`Report`): the session and the command.
DOCUMENT: tuple[str, ...] = ()
#: The document's own keys, in the order the JSON report writes them (a measurement's: `MEASUREMENT_FIELDS`).
REPORT_FIELDS: tuple[Field, ...] = (
    Field("schema", {"const": SCHEMA_NAME}, True, '`"pytest-specperf/report"`', DOCUMENT),
    Field("schema_version", {"type": "integer", "minimum": 1}, True, "integer", DOCUMENT),
    Field("created", STR, True, "string", DOCUMENT),
    Field("host", STR, True, "string", DOCUMENT),
    Field("specperf_version", STR, True, "string", DOCUMENT),
    Field("store", nullable(STR), True, "string or null", DOCUMENT),
    Field(
        "sources",
        {"type": "array", "items": {"type": "object", "required": ["path"], "properties": {"path": STR}}},
        True,
        "array",
        DOCUMENT,
    ),
    Field("simulated", BOOL, True, "boolean", ("simulated",)),
    Field("fingerprint_summary", nullable(STR), True, "string or null", ("fingerprint_summary",)),
    Field(
        "measurements",
        {"type": "array", "items": {"$ref": "#/$defs/measurement"}},
        True,
        "array of measurement",
        ("rows", "drift"),
    ),
    Field("errors", {"type": "array", "items": {"$ref": "#/$defs/error"}}, False, "array of error", ("errors",)),
    Field(
        "interrupted",
        {
            "type": "array",
            "description": "Measurements the session was cut short in (Ctrl-C, SIGTERM, a time limit), with how far "
            "each got; those with a completed round are also in `measurements`, with the rounds they completed.",
            "items": {
                "type": "object",
                "required": key_list("label server workload concurrency rounds planned text"),
                "properties": {
                    "label": STR,
                    "server": STR,
                    "workload": STR,
                    "concurrency": {"type": "integer", "minimum": 1},
                    **CUT_PROPERTIES,
                },
            },
        },
        False,
        "array",
        ("interrupted",),
    ),
    Field(
        "second_starts",
        {
            "type": "array",
            "description": "Servers restarted to confirm checks on a second start, and what was measured again.",
            "items": {
                "type": "object",
                "required": ["server", "measurements"],
                "properties": {"server": STR, "measurements": {"type": "array", "items": STR}},
            },
        },
        False,
        "array",
        ("second_starts",),
    ),
    Field("verify_cost_fits", {"type": "array", "items": {"$ref": "#/$defs/fit"}}, True, "array of fit", ("fits",)),
    Field("sweeps", {"type": "array", "items": {"$ref": "#/$defs/sweep"}}, True, "array of sweep", ("sweeps",)),
    Field("warnings", {"type": "array", "items": STR}, True, "array of strings", ("warnings",)),
    Field("saved_baselines", {"type": "array", "items": {"$ref": "#/$defs/saved"}}, True, "array", ("saved",)),
)

REPORT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://pytest-specperf.invalid/schemas/report-v1.json",
    "title": "pytest-specperf JSON report",
    "description": "See docs/json-schema.md. Non-finite numbers are null; unknown keys may be added in v1.",
    "type": "object",
    "required": [f.name for f in REPORT_FIELDS if f.required],
    "properties": {f.name: dict(f.schema) for f in REPORT_FIELDS},
    "$defs": {
        "error": {
            "type": "object",
            "description": "A measurement that could not be made, or whose test errored inside the plugin.",
            "required": key_list("label server workload concurrency verdict reason"),
            "properties": {
                "label": STR,
                "server": STR,
                "workload": STR,
                "concurrency": {"type": "integer", "minimum": 1},
                "verdict": {"const": "ERROR"},
                "reason": STR,
            },
        },
        "estimate": {
            "type": "object",
            "description": "A value with its interval; low/high null = unbounded on that side (too few rounds).",
            "required": ["value", "low", "high", "n", "confidence", "bounded"],
            "properties": {
                "value": nullable(NUM),
                "low": nullable(NUM),
                "high": nullable(NUM),
                "n": {"type": "integer", "minimum": 0},
                "confidence": NUM,
                "bounded": BOOL,
            },
        },
        "change": {
            "type": "object",
            "required": ["name", "old", "new"],
            "properties": {"name": STR, "old": STR, "new": STR},
        },
        "fingerprint": {
            "type": "object",
            "required": ["identity", "environment"],
            "properties": {
                "identity": {"type": "object", "additionalProperties": STR},
                "environment": {"type": "object", "additionalProperties": STR},
            },
        },
        "record": {
            "type": "object",
            "required": ["index", "sent", "completion_tokens", "error"],
            "properties": {
                "index": INT,
                "sent": NUM,
                "first_chunk": nullable(NUM),
                "last_chunk": nullable(NUM),
                "prompt_tokens": INT,
                "completion_tokens": INT,
                "verify_ct": nullable(INT),
                "error": nullable(STR),
            },
        },
        "round": {
            "type": "object",
            "required": key_list(
                "index duration_s output_throughput request_count error_count ttft_ms tpot_ms e2e_ms "
                "chunk_gap_ms accept_length records"
            ),
            "properties": {
                "index": INT,
                "duration_s": NUM,
                "output_throughput": NUM,
                "request_count": INT,
                "error_count": INT,
                "ttft_ms": DISTRIBUTION,
                "tpot_ms": DISTRIBUTION,
                "e2e_ms": DISTRIBUTION,
                "chunk_gap_ms": DISTRIBUTION,
                "accept_length": nullable(NUM),
                "accept_length_per_request": nullable(NUM),
                "acceptance_rate": nullable(NUM),
                "accept_length_source": {"enum": ["responses", "prometheus"]},
                "spec_counters": {"$ref": "#/$defs/spec_counters"},
                "acceptance_per_position": {
                    "type": "array",
                    "items": NUM,
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
                "drafts": INT,
                "draft_tokens": INT,
                "accepted": INT,
                "accepted_per_position": {"type": "array", "items": INT},
            },
        },
        "summary": {
            "type": "object",
            "description": "vllm bench serve names where the concept matches; means over rounds.",
            "required": key_list(
                "rounds completed errors duration output_throughput mean_ttft_ms median_ttft_ms p99_ttft_ms "
                "mean_tpot_ms median_tpot_ms p99_tpot_ms mean_chunk_gap_ms median_chunk_gap_ms "
                "p99_chunk_gap_ms accept_length"
            ),
            "properties": {
                "rounds": INT,
                "completed": INT,
                "errors": INT,
                "duration": NUM,
                "total_input_tokens": INT,
                "total_output_tokens": INT,
                **{
                    k: nullable(NUM)
                    for k in ("request_throughput", "output_throughput", "accept_length", "acceptance_rate")
                },
            },
            "additionalProperties": nullable(NUM),
        },
        "cost_model": {
            "type": "object",
            "required": key_list(
                "accept_length tpot_ms reference_tpot_ms cycle_ms break_even_accept_length headroom "
                "speedup_tpot speedup_throughput implied_alpha implied_alpha_note acceptance_rate"
            ),
            "properties": {
                **{
                    k: ESTIMATE
                    for k in key_list(
                        "accept_length tpot_ms reference_tpot_ms cycle_ms break_even_accept_length headroom "
                        "speedup_tpot"
                    )
                },
                "speedup_throughput": nullable(ESTIMATE),
                "implied_alpha": nullable(ESTIMATE),
                "implied_alpha_note": nullable(STR),
                "acceptance_rate": nullable(ESTIMATE),
            },
        },
        "measurement": {
            "type": "object",
            "required": [f.name for f in MEASUREMENT_FIELDS if f.required],
            "properties": {f.name: dict(f.schema) for f in MEASUREMENT_FIELDS},
        },
        "explanation": {
            "type": "object",
            "description": "Why a key moved, when a history check lies beyond its tolerance: tonight over the runs "
            "its throughput level rests on, per part of the speculative cycle (throughput = accept length / cycle, "
            "cycle = accept length x TPOT; reference_tpot: plain decoding of the same sessions). `part` names the "
            "part that carries the move; `causes` the environment differences since the level that can act on it.",
            "required": key_list("sentence part throughput accept_length cycle reference_tpot ttft causes"),
            "properties": {
                "sentence": STR,
                "part": {"enum": ["accept_length", "target", "drafting", "cycle", "prefill", "unclear"]},
                **{
                    name: nullable({"$ref": "#/$defs/ratio"})
                    for name in ("throughput", "accept_length", "cycle", "reference_tpot", "ttft")
                },
                "causes": {"type": "array", "items": {"$ref": "#/$defs/change"}},
                "candidates": {
                    "type": "array",
                    "description": "Differences that changed the same way on the reference, whose plain decoding "
                    "moved with this key: candidate causes whatever part they act on.",
                    "items": {"$ref": "#/$defs/change"},
                },
                "level_spread": nullable(
                    {
                        "type": "number",
                        "description": "Highest over lowest throughput of the level's nights, when they differ too "
                        "much to tell which part moved (part `unclear`).",
                    }
                ),
                "positions": nullable(
                    {
                        "type": "object",
                        "description": f"{POSITIONS_DESCRIPTION}, at the level and tonight.",
                        "required": ["level", "tonight"],
                        "properties": {
                            "level": {"type": "array", "items": NUM},
                            "tonight": {"type": "array", "items": NUM},
                        },
                    }
                ),
            },
        },
        "ratio": {
            "type": "object",
            "description": "Tonight over the level, with its interval (null bounds: no interval).",
            "required": key_list("value low high"),
            "properties": {"value": NUM, "low": nullable(NUM), "high": nullable(NUM)},
        },
        "history_point": {
            "type": "object",
            "description": "One run of a key's history; created/segment null for tonight.",
            "required": key_list("created commit segment tonight value"),
            "properties": {
                "created": nullable(STR),
                "commit": nullable(STR),
                "segment": nullable(INT),
                "tonight": BOOL,
                "status": nullable({"enum": ["accepted", "suspect", "refused"]}),
                "value": ESTIMATE,
            },
        },
        "gate": {
            "type": "object",
            "description": "What tonight's throughput check against its history rests on, and what it can detect.",
            "properties": {
                "runs": INT,
                "run_to_run_cv": NUM,
                "prior": BOOL,
                "starts": INT,
                "detectable_change": nullable(NUM),
                "rejected": {"type": "array", "items": {"type": "object"}},
                "confirmation": nullable(STR),
                "confirmed": nullable(BOOL),
                "first_start": nullable(NUM),
                "spread_runs": INT,
                "change_runs": INT,
                "by_change": BOOL,
                "back_to_level": BOOL,
            },
        },
        "change_point": {
            "type": "object",
            "description": "The newest change point of a key series (current segment, tonight appended).",
            "required": key_list("metric index runs since commit tonight ratio p_value description"),
            "properties": {
                "metric": {"enum": list(KEY_METRICS)},
                "index": INT,
                "runs": INT,
                "since": nullable(STR),
                "commit": nullable(STR),
                "tonight": BOOL,
                "ratio": ESTIMATE,
                "p_value": nullable(NUM),
                "kind": {"enum": ["step", "drift"]},
                "per_run": nullable(NUM),
                "description": STR,
            },
        },
        "fit": {
            "type": "object",
            "required": ["workload", "concurrency", "servers", "cycle_ms", "status", "note", "points", "fixed_ms"],
            "properties": {
                "workload": STR,
                "concurrency": INT,
                "servers": {"type": "array", "items": STR},
                "cycle_ms": {"type": "array", "items": NUM},
                "status": {"enum": [s.value for s in FitStatus]},
                "note": STR,
                "points": {"type": "array", "items": {"type": "array", "items": NUM}},
                "fixed_ms": nullable(ESTIMATE),
                "per_token_ms": nullable(ESTIMATE),
                "fixed_shares": {"type": "array", "items": NUM},
            },
        },
        "crossover": {
            "type": "object",
            "description": "Concurrency where speedup crosses 1.0; null = beyond the measured levels.",
            "required": ["kind", "concurrency", "low", "high", "non_monotone", "description"],
            "properties": {
                "kind": {"enum": ["crosses", "crosses upward", "above", "below"]},
                "concurrency": nullable(NUM),
                "low": nullable(NUM),
                "high": nullable(NUM),
                "non_monotone": BOOL,
                "description": STR,
            },
        },
        "sweep": {
            "type": "object",
            "required": ["workload", "levels", "configs", "best"],
            "properties": {
                "workload": STR,
                "levels": {"type": "array", "items": INT},
                "configs": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["server", "speedups", "crossover"],
                        "properties": {
                            "server": STR,
                            "speedups": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "required": ["concurrency", "speedup"],
                                    "properties": {"concurrency": INT, "speedup": ESTIMATE},
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
                            "concurrency": NUM,
                            "server": STR,
                            "throughput": ESTIMATE,
                            "runner_up": nullable(STR),
                            "runner_up_throughput": nullable(ESTIMATE),
                            "certainty": {"enum": ["sole", "clear", "overlapping", "tied"]},
                            "tied_with": {"type": "array", "items": STR},
                        },
                    },
                },
            },
        },
        "saved": {
            "type": "object",
            "required": ["label", "server", "workload", "concurrency", "path", "old", "new"],
            "properties": {
                "label": STR,
                "server": STR,
                "workload": STR,
                "concurrency": INT,
                "path": STR,
                "old": {"type": ["object", "null"]},
                "new": {"type": "object"},
                "replaced_error": nullable(STR),
                "kept_as": nullable(STR),
                "segment": INT,
                "runs": INT,
                "new_segment": {"type": "boolean"},
            },
        },
    },
}


# --- the checker ---------------------------------------------------------------------------------------


def validate(instance: Any, schema: Mapping[str, Any] = REPORT_SCHEMA) -> list[str]:
    """Problems of `instance` against `schema`, as 'where: what' strings (empty when valid): the keywords
    `REPORT_SCHEMA` uses (report/schemacheck.py), so the package needs no jsonschema dependency."""
    return problems(instance, schema)
