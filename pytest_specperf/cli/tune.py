"""`specperf tune`: find the best speculative config in a few server starts (pytest_specperf/tune/)."""

from __future__ import annotations

from pytest_specperf.cli.setup import Setup
from pytest_specperf.tune.command import DESCRIPTION, TUNE_EPILOG, add_tune_arguments, run_tune

#: tune's own epilog: its exit codes differ (130 when interrupted)
SETUP = Setup(run_tune, [add_tune_arguments], description=DESCRIPTION, epilog=TUNE_EPILOG)
