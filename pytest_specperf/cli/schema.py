"""`specperf schema`: the JSON Schema (draft 2020-12) of `--specperf-json` reports."""

from __future__ import annotations

import argparse
import json
from typing import Any

from pytest_specperf.cli.common import OK
from pytest_specperf.report.schema import REPORT_SCHEMA


def add_parser(commands: Any, epilog: str, formatter: type[argparse.HelpFormatter]) -> None:
    schema = commands.add_parser("schema", help="print the JSON Schema of --specperf-json reports")
    schema.set_defaults(run=run_schema)


def run_schema(args: argparse.Namespace) -> int:
    """For validators in other languages, or `check-jsonschema --schemafile`."""
    print(json.dumps(REPORT_SCHEMA, indent=2))
    return OK
