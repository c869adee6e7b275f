"""`specperf schema`: the JSON Schema (draft 2020-12) of `--specperf-json` reports."""

from __future__ import annotations

import argparse
import json

from pytest_specperf.cli.exits import OK
from pytest_specperf.cli.setup import Setup
from pytest_specperf.report.schema import REPORT_SCHEMA


def run_schema(args: argparse.Namespace) -> int:
    """For validators in other languages, or `check-jsonschema --schemafile`."""
    print(json.dumps(REPORT_SCHEMA, indent=2))
    return OK


SETUP = Setup(run_schema, epilog=None)
