"""The `specperf` command: read stored baselines and JSON reports without running pytest.

    specperf show [STORE]                         stored baselines as a table (default store: .specperf;
                                                  a directory, or git:<branch> / git:<url>#<branch>)
    specperf history [SERVER[/WORKLOAD]]          each stored history as a series of runs, with its
                     [--store STORE]              segments and change points
    specperf accept SERVER[/WORKLOAD[/cN]]        make a change the accepted level from the run it began with
                    [--since RUN] [--store STORE] (default: the change the newest night names)
    specperf diff OLD NEW                         two JSON reports, stored baseline files or stores, side
                                                  by side: ratios with intervals, fingerprint drift
    specperf merge A.json B.json ... -o ALL.json  reports of shards run on several machines, as one report
    specperf store FILE [--store STORE]           store the runs a session kept when its store could not be
                                                  written (the file its last line names)
    specperf backtest FILE.csv [--value COLUMN]   replay a nightly series through the verdict engine the tests
                                                  use: each night's outcome, change points, a summary
    specperf dashboard [--store STORE] -o DIR     a static HTML site of the stored histories (--publish: onto
                                                  a git store's branch, for GitHub Pages)
    specperf schema                               the JSON Schema (draft 2020-12) of JSON reports
    specperf tune [--dry-run] [--json PATH]       find the best speculative config in a few server starts
                                                  ([specperf.tune] in the config file; see its --help)
    specperf bisect SERVER/WORKLOAD/cN            find the difference between a good and a bad run that made
                    [--good RUN] [--bad RUN]      the key slower, by starting its server with subsets of them

Exit codes:
    0  done (diff: no measurement credibly regressed)
    1  diff: a measurement credibly regressed beyond the tolerance (throughput or accept length);
       accept: no key had a change to accept
    2  usage error, or a file that is missing, corrupt, not ours, of a newer schema version, or
       (merge) two reports holding different measurements of the same speculative config

Each subcommand is one module here, with its parser (`add_parser`) and its `run_*` function.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pytest_specperf.cli import accept, backtest, bisect, dashboard, diff, history, merge, schema, show, store, tune
from pytest_specperf.cli.common import EXIT_CODES, FAILED
from pytest_specperf.errors import SpecperfError

#: The subcommands, in the order `specperf --help` lists them.
COMMANDS = (show, history, accept, diff, merge, store, backtest, dashboard, schema, tune, bisect)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except (SpecperfError, OSError) as exc:
        print(f"specperf: error: {exc}", file=sys.stderr)
        return FAILED


def build_parser() -> argparse.ArgumentParser:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="specperf", description=__doc__.split("\n\n")[0], epilog=EXIT_CODES, formatter_class=formatter
    )
    names = ",".join(command.__name__.rsplit(".", 1)[-1] for command in COMMANDS)
    commands = parser.add_subparsers(dest="command", required=True, metavar=f"{{{names}}}")
    for command in COMMANDS:
        command.add_parser(commands, EXIT_CODES, formatter)
    return parser
