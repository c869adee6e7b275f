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

Each subcommand is one module here, named with its one-line summary in `SUBCOMMANDS` (which `specperf
--help` lists); the module declares its parser in `SETUP` (cli/setup.py: its run function, its own
arguments and the shared ones it takes) and `build_subparser` builds it. Only the module of the
subcommand asked for is imported: `specperf --help` and `specperf schema --help` stay quick, since the
verdict engine (SciPy) loads only for the command that uses it.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_specperf import __version__
from pytest_specperf.cli.exits import EXIT_CODES, FAILED
from pytest_specperf.errors import SpecperfError


@dataclass(frozen=True)
class Subcommand:
    """One `specperf` subcommand: its name, the one line `specperf --help` and its own help show, and its
    module (which declares the rest in `SETUP`)."""

    name: str
    summary: str

    @property
    def module(self) -> str:
        return f"{__name__}.{self.name}"


#: The subcommands, in the order `specperf --help` lists them; each one's parser is built with its `summary`.
SUBCOMMANDS = (
    Subcommand("show", "stored baselines as a table"),
    Subcommand("history", "stored run histories with segments and change points"),
    Subcommand("accept", "make a change the accepted level, from the run it began with"),
    Subcommand("diff", "compare two JSON reports, stored baseline files or stores"),
    Subcommand("merge", "combine the JSON reports of shards into one"),
    Subcommand("store", "store the runs a session kept when its store could not be written"),
    Subcommand("backtest", "replay a nightly series (CSV) through the verdict engine"),
    Subcommand("dashboard", "a static HTML site of the stored histories"),
    Subcommand("schema", "print the JSON Schema of --specperf-json reports"),
    Subcommand("tune", "find the best speculative config in a few server starts"),
    Subcommand("bisect", "find the difference between a good and a bad run that made a key slower"),
)


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(only=_asked_for(arguments))
    args = parser.parse_args(arguments)
    try:
        return int(args.run(args))
    except (SpecperfError, OSError) as exc:
        print(f"specperf: error: {exc}", file=sys.stderr)
        return FAILED


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole parser, or (`only`) one subcommand's full parser beside the others' names and summaries.

    `only` names no subcommand for `specperf --help` or a mistyped one: every subcommand is then a name
    and a summary, and argparse prints the help or the list of valid choices."""
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="specperf", description=__doc__.split("\n\n")[0], epilog=EXIT_CODES, formatter_class=formatter
    )
    parser.add_argument("--version", action="version", version=f"specperf (pytest-specperf) {__version__}")
    names = ",".join(command.name for command in SUBCOMMANDS)
    commands = parser.add_subparsers(dest="command", required=True, metavar=f"{{{names}}}")
    for command in SUBCOMMANDS:
        if only is None or command.name == only:
            from pytest_specperf.cli.setup import build_subparser

            setup = importlib.import_module(command.module).SETUP
            build_subparser(commands, command.name, command.summary, setup, formatter)
        else:
            commands.add_parser(command.name, help=command.summary)
    return parser


def _asked_for(arguments: Sequence[str]) -> str:
    """The subcommand the command line names (its first word that is not an option), or "" for none."""
    return next((argument for argument in arguments if not argument.startswith("-")), "")
