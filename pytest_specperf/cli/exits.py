"""The `specperf` command's exit codes: a module of its own, so that `specperf --help` imports nothing heavy."""

from __future__ import annotations

OK, REGRESSED, FAILED = 0, 1, 2
EXIT_CODES = """exit codes:
  0  done (diff: no measurement credibly regressed; backtest: the last night is not a REGRESSION)
  1  diff: a measurement credibly regressed beyond the tolerance (throughput or accept length);
     backtest: the series' last night is a REGRESSION; accept: no key had a change to accept
  2  usage error; a missing, corrupt, foreign or newer-schema file; conflicting measurements (merge)"""
