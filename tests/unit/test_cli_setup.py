"""Each `specperf` subcommand declares its parser once (`SETUP`), and one function builds them all: the
arguments several subcommands share read the same everywhere, and every form of the `store` setting a
backend opens is named in every help that takes a store."""

from __future__ import annotations

import importlib

import pytest

from pytest_specperf.cli import SUBCOMMANDS, build_parser
from pytest_specperf.cli.setup import Setup, StoreArgument
from pytest_specperf.config.location import LOCATIONS

MODULES = {command.name: importlib.import_module(command.module) for command in SUBCOMMANDS}


def subcommand_help(name: str) -> str:
    parser = build_parser(only=name)
    subparsers = next(a for a in parser._actions if a.dest == "command")
    return " ".join(subparsers.choices[name].format_help().split())


@pytest.mark.parametrize("name", MODULES)
def test_every_subcommand_declares_its_parser_and_builds_it_the_one_way(name: str) -> None:
    module = MODULES[name]
    assert isinstance(module.SETUP, Setup)
    assert not hasattr(module, "add_parser")


STORE_COMMANDS = [
    name for name, module in MODULES.items() if any(isinstance(p, StoreArgument) for p in module.SETUP.parts)
]


def test_the_commands_that_read_a_store_are_the_ones_expected() -> None:
    assert sorted(STORE_COMMANDS) == ["accept", "bisect", "dashboard", "history", "show", "store"]


@pytest.mark.parametrize("name", STORE_COMMANDS)
def test_a_store_help_names_every_backend_the_setting_can_open(name: str) -> None:
    """`store = "postgresql://host/db"` opens the PostgreSQL store; the `--store` help once named folders and
    git branches only."""
    text = subcommand_help(name)
    for form in LOCATIONS:
        if form.example is not None:
            assert form.example in text, (name, form.scheme)
    assert "postgresql://host/db" in text


def subcommand_actions(name: str) -> dict[str, tuple[object, ...]]:
    parser = build_parser(only=name)
    subparsers = next(a for a in parser._actions if a.dest == "command")
    actions = subparsers.choices[name]._actions
    return {a.dest: (tuple(a.option_strings), a.default, a.metavar, a.help) for a in actions}


def test_a_shared_argument_reads_the_same_in_every_help() -> None:
    """`--store` and the tolerances are declared once: the same flags, defaults and words wherever taken."""
    actions = {name: subcommand_actions(name) for name in ("history", "accept", "dashboard", "bisect")}
    assert len({found["store"] for found in actions.values()}) == 1
    for dest in ("max_regression", "max_regression_accept_length"):
        assert len({found[dest] for name, found in actions.items() if name != "bisect"}) == 1
