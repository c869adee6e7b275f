"""The JSON report's keys are declared once (`fields.MEASUREMENT_FIELDS` a measurement's,
`schema.REPORT_FIELDS` the document's): the schema takes its properties from the declarations, and these
tests hold the writer, the tables of docs/json-schema.md and the report model the terminal renders
(`Row`, `Report`) to them, so a key added in one place only fails here, naming the place it is missing from."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from report_samples import history_report, story_report

from pytest_specperf.report.analysis import Report, Row
from pytest_specperf.report.fields import MEASUREMENT_FIELDS, Field
from pytest_specperf.report.jsonreport import measurement_entry, measurement_values, report_document, report_values
from pytest_specperf.report.schema import REPORT_FIELDS, REPORT_SCHEMA, validate
from pytest_specperf.verdict.drift import Change

DOCS = Path(__file__).resolve().parents[2] / "docs" / "json-schema.md"
DECLARED = [field.name for field in MEASUREMENT_FIELDS]
DOCUMENT = [field.name for field in REPORT_FIELDS]


def docs_table(heading: str) -> list[tuple[list[str], str]]:
    """The rows of the table under `heading`: the keys its first cell names, and its type cell."""
    lines = DOCS.read_text(encoding="utf-8").splitlines()
    start = lines.index(heading)
    table = []
    for line in lines[start + 1 :]:
        if line.startswith("#"):
            break
        if not line.startswith("| `"):
            continue  # the header, the rule under it, and the prose around the table
        cells = [cell.strip() for cell in line.split("|")[1:]]
        table.append((re.findall(r"`([a-z_]+)`", cells[0]), cells[1] if len(cells) > 1 else ""))
    return table


def doc_type(fields: list[Field]) -> str:
    """The type cell of a row naming several keys: their one type, or each key's in turn."""
    types = [field.doc_type for field in fields]
    return types[0] if len(set(types)) == 1 else ", ".join(types)


def test_the_schema_takes_a_measurements_keys_from_the_declaration() -> None:
    measurement = REPORT_SCHEMA["$defs"]["measurement"]
    assert list(measurement["properties"]) == DECLARED
    assert measurement["required"] == [field.name for field in MEASUREMENT_FIELDS if field.required]
    assert len(set(DECLARED)) == len(DECLARED)


def test_the_writer_writes_every_declared_key_and_no_other() -> None:
    """What `measurement_values` computes is what is declared: a key the writer gains without the
    declaration would be dropped from the report unseen, one the declaration gains would be missing."""
    for row in [*story_report().rows, *history_report().rows]:
        drift = [Change("NCCL_ALGO", "Tree", "Ring")]
        assert list(measurement_values(row, drift, "why")) == DECLARED
        assert list(measurement_entry(row, drift, "why")) == DECLARED


def test_a_written_report_is_valid_against_the_schema() -> None:
    assert validate(report_document(history_report(), created="2026-12-04T00:00:00+00:00", host="h")) == []


def test_the_docs_table_names_every_declared_key_in_order_with_its_type() -> None:
    by_name = {field.name: field for field in MEASUREMENT_FIELDS}
    table = docs_table("## Measurement")
    documented = [name for names, _ in table for name in names]
    assert documented == DECLARED, (
        f"docs/json-schema.md's Measurement table lacks {sorted(set(DECLARED) - set(documented))}, "
        f"has undeclared {sorted(set(documented) - set(DECLARED))}, or orders them otherwise"
    )
    for names, typed in table:
        assert typed == doc_type([by_name[name] for name in names]), names


def test_every_attribute_of_a_row_is_written_under_a_declared_key() -> None:
    """What the terminal shows (a `Row`) is what the JSON report keeps: a row attribute no key is
    written from would be lost by `specperf merge` and `specperf diff`, which read the JSON back."""
    written = {attribute for field in MEASUREMENT_FIELDS for attribute in field.model}
    attributes = {f.name for f in dataclasses.fields(Row)}
    assert written == attributes, (
        f"not written: {sorted(attributes - written)}; not a Row's: {sorted(written - attributes)}"
    )


def test_the_document_takes_its_keys_from_the_declaration_in_every_place() -> None:
    """The same holds for the document's own keys: schema, writer, docs' table and `Report`."""
    assert list(REPORT_SCHEMA["properties"]) == DOCUMENT
    assert REPORT_SCHEMA["required"] == [field.name for field in REPORT_FIELDS if field.required]
    report = history_report()
    assert list(report_document(report, created="2026-12-04T00:00:00+00:00", host="h")) == DOCUMENT
    from_model = [field.name for field in REPORT_FIELDS if field.model]
    assert list(report_values(report)) == from_model, "report_values writes what the declaration says of `Report`"
    by_name = {field.name: field for field in REPORT_FIELDS}
    table = docs_table("## Top level")
    assert [name for names, _ in table for name in names] == DOCUMENT
    for names, typed in table:
        assert typed == doc_type([by_name[name] for name in names]), names
    written = {attribute for field in REPORT_FIELDS for attribute in field.model}
    attributes = {f.name for f in dataclasses.fields(Report)}
    assert written == attributes, (
        f"not written: {sorted(attributes - written)}; not a Report's: {sorted(written - attributes)}"
    )
