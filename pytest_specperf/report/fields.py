"""The keys of the JSON report declared once (`MEASUREMENT_FIELDS`; the document's own are in schema.py),
with the JSON Schema building blocks they are written in: report/schema.py makes the schema of them,
report/jsonreport.py writes them in their order, and docs/json-schema.md's tables name them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_specperf.measure.records import POSITIONS_LABEL, POSITIONS_MEANING
from pytest_specperf.verdict.verdicts import Verdict


def key_list(names: str) -> list[str]:
    """Property names written as one string: the long `required` lists stay readable."""
    return names.split()


#: Acceptance by draft position, as every output names and defines it (docs/metrics.md).
POSITIONS_DESCRIPTION = (
    f"{POSITIONS_LABEL[0].upper()}{POSITIONS_LABEL[1:]} 1, 2, ...: {POSITIONS_MEANING} "
    "(zeros at the drafted positions no verify step reached)"
)


def nullable(schema: Mapping[str, Any]) -> dict[str, Any]:
    return {"anyOf": [dict(schema), {"type": "null"}]}


NUM = {"type": "number"}
INT = {"type": "integer"}
STR = {"type": "string"}
BOOL = {"type": "boolean"}

#: How far a measurement got when the session was cut short: "interrupted after 2 of 3 rounds".
CUT_PROPERTIES: dict[str, Any] = {
    "rounds": {"type": "integer", "minimum": 0},
    "planned": {"type": "integer", "minimum": 1},
    "text": STR,
}
ESTIMATE = {"$ref": "#/$defs/estimate"}
DISTRIBUTION = {
    "type": "object",
    "required": ["mean", "p50", "p90", "p99"],
    "properties": {k: nullable(NUM) for k in ("mean", "p50", "p90", "p99")},
}


@dataclass(frozen=True)
class Field:
    """One key of the JSON report (a measurement's, or the document's), declared once: its schema, whether
    every report has it, the type docs/json-schema.md's table gives it, and the attributes of the report
    model (`Row`, `Report`) it is written from. The schema takes its properties from here, the writer
    (jsonreport.py) writes these keys in this order, and tests/unit/test_schema_fields.py holds the
    writer, the docs' tables and the model the terminal renders to them."""

    name: str
    schema: Mapping[str, Any]
    required: bool
    doc_type: str
    model: tuple[str, ...] = ()


#: A key written from the measurement itself (`Row.measurement`).
OWN = ("measurement",)
#: The keys of a measurement, in the order the JSON report writes them.
MEASUREMENT_FIELDS: tuple[Field, ...] = (
    Field("label", STR, True, "string", OWN),
    Field("server", STR, True, "string", OWN),
    Field("workload", STR, True, "string", OWN),
    Field("concurrency", {"type": "integer", "minimum": 1}, True, "integer", OWN),
    Field("is_reference", BOOL, True, "boolean", OWN),
    Field("num_steps", nullable(INT), False, "integer or null", OWN),
    Field("eagle_topk", nullable(INT), False, "integer or null", OWN),
    Field("num_draft_tokens", nullable(INT), False, "integer or null", OWN),
    Field("workload_hash", STR, True, "string", OWN),
    Field("verdict", {"enum": [v.value for v in Verdict]}, True, "string", ("verdict",)),
    Field("reason", nullable(STR), False, "string or null", ()),
    Field("summary", {"$ref": "#/$defs/summary"}, True, "object", OWN),
    Field(
        "accept_length_source",
        nullable({"enum": ["responses", "prometheus", "prometheus+responses"]}),
        False,
        "string or null",
        OWN,
    ),
    Field(
        "acceptance_per_position",
        nullable(
            {
                "type": "array",
                "items": NUM,
                "description": f"{POSITIONS_DESCRIPTION}, pooled over the rounds.",
            }
        ),
        False,
        "array of numbers or null",
        OWN,
    ),
    Field(
        "estimates",
        {
            "type": "object",
            "required": key_list("output_throughput accept_length mean_tpot_ms mean_ttft_ms speedup vs_baseline"),
            "additionalProperties": nullable(ESTIMATE),
        },
        True,
        "object of estimate-or-null",
        ("throughput", "vs_baseline", "speedup", "accept_length", "tpot_ms", "ttft_ms"),
    ),
    Field("throughput_cv", nullable(NUM), True, "number or null", ("cv",)),
    Field("cost_model", nullable({"$ref": "#/$defs/cost_model"}), True, "object or null", ("cost",)),
    Field(
        "drift", {"type": "array", "items": {"$ref": "#/$defs/change"}}, True, 'array of `{"name", "old", "new"}`', ()
    ),
    Field(
        "unlike_reference",
        {
            "type": "array",
            "description": "What the reference and this server differ in besides speculation "
            "(old: the reference's value): its speedup compares those too.",
            "items": {"$ref": "#/$defs/change"},
        },
        False,
        'array of `{"name", "old", "new"}`',
        ("unlike_reference",),
    ),
    Field("warnings", {"type": "array", "items": STR}, True, "array of strings", OWN),
    Field("notes", {"type": "array", "items": STR}, False, "array of strings", OWN),
    Field("fingerprint", nullable({"$ref": "#/$defs/fingerprint"}), True, "object or null", OWN),
    Field(
        "history",
        {
            "type": "object",
            "description": "Per key metric, every stored run of the comparable history, tonight last.",
            "additionalProperties": {"type": "array", "items": {"$ref": "#/$defs/history_point"}},
        },
        False,
        "object",
        ("history",),
    ),
    Field("change_points", {"type": "array", "items": {"$ref": "#/$defs/change_point"}}, False, "array", ("changes",)),
    Field(
        "gate",
        nullable({"$ref": "#/$defs/gate"}),
        False,
        "object or null",
        ("night", "confirmation", "rejected", "gate"),
    ),
    Field("not_stored", nullable(STR), False, "string or null", ("not_stored",)),
    Field("update_accepts", nullable(STR), False, "string or null", ("update_accepts",)),
    Field("explanation", nullable({"$ref": "#/$defs/explanation"}), False, "object or null", ("explanation",)),
    Field(
        "interrupted",
        nullable(
            {
                "type": "object",
                "description": "The session was cut short while this measurement was taken: its rounds "
                "are the ones it completed, it is not stored, and nothing was decided on it unless a test "
                "of it had finished (verdict INCONCLUSIVE otherwise).",
                "required": key_list("rounds planned text"),
                "properties": CUT_PROPERTIES,
            }
        ),
        False,
        "object or null",
        ("interrupted",),
    ),
    Field(
        "lossless",
        nullable(
            {
                "type": "object",
                "description": "A speculative measurement on a temperature-0 workload: its outputs equal "
                "to the reference server's for the same prompt in the same round slot, whether a lossless "
                "check passed, failed or was not asked for.",
                "required": ["equal", "compared", "share", "first_mismatch"],
                "properties": {
                    "equal": INT,
                    "compared": INT,
                    "share": NUM,
                    "first_mismatch": nullable(STR),
                },
            }
        ),
        False,
        "object or null",
        ("lossless",),
    ),
    Field("rounds", {"type": "array", "items": {"$ref": "#/$defs/round"}}, True, "array of round", OWN),
)
