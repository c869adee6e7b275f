"""`specperf tune`: find the best speculative config in a few server starts (pytest_specperf/tune/)."""

from __future__ import annotations

import argparse
from typing import Any

from pytest_specperf.tune.command import add_tune_parser


def add_parser(commands: Any, epilog: str, formatter: type[argparse.HelpFormatter]) -> None:
    add_tune_parser(commands, formatter)  # tune's own epilog: its exit codes differ (130 when interrupted)
