"""`python -m pytest_specperf.cli`: the `specperf` command."""

import sys

from pytest_specperf.cli import main

sys.exit(main())
