"""What every `specperf` subcommand states about its parser, and the one function that builds it.

A subcommand module declares `SETUP`: its run function, its help's description and epilog, and its
arguments in the order its help lists them, each a part. Its own arguments are a function of the
parser; the arguments several subcommands share are parts declared here once (`StoreArgument` where
the histories live, `Suite` the config file a command starts servers from, `Output` where it writes,
`Tolerances` the tolerances a night was judged with), so a shared argument reads the same in every
subcommand's help. `build_subparser` is the one function that turns a declaration into the parser
(cli/__init__.py calls it for the subcommand asked for only; the summary comes from `SUBCOMMANDS`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_specperf.cli.exits import EXIT_CODES
from pytest_specperf.config import values as check
from pytest_specperf.config.location import setting_forms
from pytest_specperf.config.settings import SpecperfConfig

#: The store a command reads when none is named.
DEFAULT_STORE = ".specperf"
#: The `store` setting's forms, from config/location.py `LOCATIONS` (a new backend appears here by itself).
STORE_FORMS = setting_forms()
STORE_HELP = f"{STORE_FORMS} (default: {DEFAULT_STORE})"

#: One part of a parser: it adds its arguments.
Part = Callable[[argparse.ArgumentParser], None]


@dataclass(frozen=True)
class Setup:
    """One subcommand's parser: `run` takes the parsed arguments and returns the exit code; `parts` add
    the arguments, in the order the help lists them; `epilog` None for a command with no exit codes."""

    run: Callable[[argparse.Namespace], int]
    parts: Sequence[Part] = ()
    description: str | None = None
    epilog: str | None = EXIT_CODES


@dataclass(frozen=True)
class StoreArgument:
    """Where the histories live: `--store STORE`, or (`positional`) the command's one argument."""

    positional: bool = False
    default: str | None = DEFAULT_STORE
    #: the help: the store's forms and the default
    help: str = STORE_HELP

    def __call__(self, parser: argparse.ArgumentParser) -> None:
        if self.positional:
            parser.add_argument("store", nargs="?", default=self.default, help=self.help)
        else:
            parser.add_argument("--store", default=self.default, help=self.help)


@dataclass(frozen=True)
class Suite:
    """The suite a command starts servers from: its config file, the launcher and the simulator's time
    scale overridden, and where the servers' logs go."""

    def __call__(self, parser: argparse.ArgumentParser) -> None:
        from pytest_specperf.engines.suite import launchers  # the engines load for this command only

        parser.add_argument(
            "--config", metavar="PATH", help="config file (default: specperf.toml, or pyproject.toml here)"
        )
        parser.add_argument(
            "--launcher", choices=launchers(), help="override `launcher` (sim: rehearse on the simulator)"
        )
        parser.add_argument("--sim-time-scale", type=float, metavar="F", help="override `sim_time_scale`")
        parser.add_argument("--run-dir", type=Path, metavar="DIR", help="server logs (default: a new temporary folder)")


@dataclass(frozen=True)
class Output:
    """Where a command writes its result: `--json PATH`, or `-o/--output` (`flags`)."""

    help: str
    flags: tuple[str, ...] = ("--json",)
    metavar: str | None = "PATH"
    required: bool = False

    def __call__(self, parser: argparse.ArgumentParser) -> None:
        options: dict[str, Any] = {"type": Path, "help": self.help}
        if self.metavar is not None:
            options["metavar"] = self.metavar
        if self.required:
            options["required"] = True
        parser.add_argument(*self.flags, **options)


@dataclass(frozen=True)
class Tolerances:
    """The tolerances a night is judged with, by the rules the suite's settings of the same names follow
    (`check_tolerances` applies them once parsed)."""

    throughput: str = "the suite's tolerated throughput loss (default {default:g})"

    def __call__(self, parser: argparse.ArgumentParser) -> None:
        for name, words in (
            ("max_regression", self.throughput),
            ("max_regression_accept_length", "tolerated accept-length loss (default {default:g})"),
        ):
            default = getattr(SpecperfConfig, name)
            parser.add_argument(
                f"--{name.replace('_', '-')}",
                type=check.from_command_line,
                default=default,
                metavar="F",
                help=words.format(default=default),
            )


def check_tolerances(args: argparse.Namespace) -> None:
    """The tolerances, by the rules the suite's settings of the same names follow."""
    for name in ("max_regression", "max_regression_accept_length"):
        setattr(args, name, check.setting(name, getattr(args, name), f"--{name.replace('_', '-')}"))


def build_subparser(
    commands: Any, name: str, summary: str, setup: Setup, formatter: type[argparse.HelpFormatter]
) -> argparse.ArgumentParser:
    """The parser of subcommand `name` as its `setup` declares it."""
    parser: argparse.ArgumentParser = commands.add_parser(
        name, help=summary, description=setup.description, epilog=setup.epilog, formatter_class=formatter
    )
    for part in setup.parts:
        part(parser)
    parser.set_defaults(run=setup.run)
    return parser
