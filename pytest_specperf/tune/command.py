"""`specperf tune`: the subcommand's arguments, and the run from the config file to the report.

    specperf tune [--config PATH] [--dry-run] [--json PATH] [--plot PATH] [--budget N]
                  [--launcher {sglang,vllm,sim}] [--sim-time-scale F] [--run-dir DIR] [--top N]

Everything the table or the options get wrong is refused before any server starts (exit 2).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from pytest_specperf.common.interrupts import sigterm_as_interrupt
from pytest_specperf.config.loading import apply_overrides, find_config_file
from pytest_specperf.config.settings import SpecperfConfig
from pytest_specperf.engines.suite import check_launcher, launchers, load_suite
from pytest_specperf.errors import ConfigError
from pytest_specperf.servers.launch import check_command_templates

TUNE_EPILOG = """exit codes:
  0    done: a winner per objective (workload and concurrency level)
  2    usage error, a bad [specperf.tune] table, or the reference server could not be measured
  130  interrupted (Ctrl-C or SIGTERM); every server it started is stopped"""
INTERRUPTED = 130

DESCRIPTION = """Find the best speculative config in a few server starts: measure the reference and a few
informative configs, fit the cost and acceptance models, predict every other config with an interval,
start the one with the largest expected improvement, stop when the leaders are known or the budget is
spent. Reads [specperf.tune] from the same config file as the tests."""


def add_tune_arguments(tune: argparse.ArgumentParser) -> None:
    """The subcommand's arguments (cli/tune.py declares its parser with them, DESCRIPTION and TUNE_EPILOG)."""
    tune.add_argument("--config", metavar="PATH", help="config file (default: specperf.toml, or pyproject.toml here)")
    tune.add_argument("--dry-run", action="store_true", help="print the plan and start nothing")
    tune.add_argument("--json", metavar="PATH", type=Path, help="write the result as JSON")
    tune.add_argument("--plot", metavar="PATH", type=Path, help="PNG of predicted vs measured (the `plot` extra)")
    tune.add_argument("--budget", type=int, metavar="N", help="server starts, the reference included")
    tune.add_argument("--launcher", choices=launchers(), help="override `launcher` (sim: rehearse on the simulator)")
    tune.add_argument("--sim-time-scale", type=float, metavar="F", help="override `sim_time_scale`")
    tune.add_argument("--run-dir", type=Path, metavar="DIR", help="server logs (default: a new temporary folder)")
    tune.add_argument("--top", type=int, default=10, metavar="N", help="rows per ranking besides the measured (0: all)")


def load_tune_config(args: argparse.Namespace) -> SpecperfConfig:
    found = find_config_file(Path.cwd(), args.config)
    if found is None:
        raise ConfigError("specperf tune", "no specperf.toml (or [tool.specperf] in pyproject.toml) here; use --config")
    config = apply_overrides(load_suite(*found), launcher=args.launcher, sim_time_scale=args.sim_time_scale)
    if args.launcher is not None:
        check_launcher(config, "--launcher")
    return config


def run_tune(args: argparse.Namespace) -> int:
    from pytest_specperf.tune.model import ModelSettings
    from pytest_specperf.tune.output import plan_lines, result_lines
    from pytest_specperf.tune.plot import missing_matplotlib
    from pytest_specperf.tune.space import load_space

    if args.top < 0:
        raise ConfigError("--top", f"must be >= 0 (0 shows every config), got {args.top}")
    config = load_tune_config(args)
    space = load_space(config, budget=args.budget)
    if args.plot is not None and (problem := missing_matplotlib()):
        raise ConfigError("--plot", problem)
    for line in plan_lines(space, config):
        say(line)
    if args.dry_run:
        return 0
    check_command_templates(space.run_config(config))
    run_dir = args.run_dir or Path(tempfile.mkdtemp(prefix="specperf-tune-"))
    say(f"server logs: {run_dir}")
    try:
        result, warnings = _search(config, space, run_dir, ModelSettings(run_cv=config.run_to_run_cv))
    except KeyboardInterrupt:
        print("specperf tune: interrupted; every server it started is stopped", file=sys.stderr, flush=True)
        return INTERRUPTED
    for line in result_lines(result, config, top=args.top):
        say(line)
    for line in warnings:
        say(f"warning: {line}")
    if args.json is not None:
        from pytest_specperf.tune.document import write_document

        write_document(args.json, result, launcher=config.launcher)
        say(f"wrote {args.json}")
    if args.plot is not None:
        from pytest_specperf.tune.plot import write_plot

        say(f"wrote {write_plot(result, args.plot, simulated=config.launcher == 'sim')}")
    return 0


def _search(config: SpecperfConfig, space: Any, run_dir: Path, settings: Any) -> tuple[Any, list[str]]:
    """The search with real servers; every server it started is stopped however it ends (SIGTERM, as
    a cancelled job sends, becomes KeyboardInterrupt so that the `finally` runs)."""
    from pytest_specperf.tune.runner import ServerRunner
    from pytest_specperf.tune.search import run_search

    runner = ServerRunner(config, space, run_dir, progress=lambda line: say(f"  {line}"))
    with sigterm_as_interrupt():
        try:
            result = run_search(space, runner, settings, say)
        finally:
            runner.close()
    return result, runner.report_lines


def say(line: str) -> None:
    print(line, flush=True)
    sys.stdout.flush()
