"""The `--specperf-*` options: declared for pytest, read once into a frozen `Options`, and the suite's
config found, read and overridden by them.

Read once, in `pytest_configure` (as pytest-codspeed's `from_pytest_config` does): every later stage
gets the `Options` object, never pytest's config, so no option is parsed twice and every stage sees
the same values. Command-line words go through the checks a config file's values go through
(config/values.py), so `--specperf-rounds=1` and `rounds = 1` read the same.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from pytest_specperf.config import values as check
from pytest_specperf.config.loading import apply_overrides, find_config_file, parse_attach
from pytest_specperf.config.settings import GATES, SpecperfConfig
from pytest_specperf.engines.suite import check_launcher, load_suite
from pytest_specperf.report.outputs import OutputPaths
from pytest_specperf.servers.launch import check_command_templates

ON_INCOMPARABLE = ("fail", "skip", "warn")
REPORT_DETAIL = ("none", "short", "full")
#: Options whose value is a path: given after a space, pytest may take the path for a test path.
PATH_OPTIONS = ("--specperf-json", "--specperf-markdown", "--specperf-bmf", "--specperf-plot", "--specperf-run-dir")


#: Every `--specperf-*` option with its argparse settings, in the order `pytest --help` lists them.
OPTIONS: tuple[tuple[str, dict[str, Any]], ...] = (
    (
        "--specperf-config",
        {"metavar": "PATH", "help": "config file (default: specperf.toml or [tool.specperf] in the rootdir)"},
    ),
    (
        "--specperf-launcher",
        {"metavar": "ENGINE|sim", "help": "override `launcher`: sim dry-runs a suite on the simulator"},
    ),
    ("--specperf-rounds", {"metavar": "N", "help": "override `rounds` (measured rounds per measurement)"}),
    ("--specperf-sim-time-scale", {"metavar": "F", "help": "override `sim_time_scale` (simulator delays x F)"}),
    (
        "--specperf-attach",
        {
            "action": "append",
            "default": [],
            "metavar": "NAME=URL",
            "help": "use the running server at URL for config NAME (never started or stopped)",
        },
    ),
    (
        "--specperf-servers",
        {"metavar": "A,B", "help": "run only tests of these server configs (shards on several machines)"},
    ),
    (
        "--specperf-update",
        {
            "action": "store_true",
            "help": "store this session's runs as the new normal: each starts a new segment of its history",
        },
    ),
    (
        "--specperf-record",
        {
            "action": "store_true",
            "help": "append this session's good runs to their histories (the nightly job passes it)",
        },
    ),
    (
        "--specperf-update-force",
        {
            "action": "store_true",
            "help": "like --specperf-update, but also store runs with failed checks, request errors or sanity warnings",
        },
    ),
    (
        "--specperf-strict",
        {"action": "store_true", "help": "pass only checks credibly within their thresholds (config strict)"},
    ),
    (
        "--specperf-gate",
        {
            "choices": GATES,
            "default": None,
            "help": "hold a speculative key to its speedup over the same-session reference or to its absolute "
            "throughput (config gate; default speedup)",
        },
    ),
    (
        "--specperf-on-incomparable",
        {
            "choices": ON_INCOMPARABLE,
            "default": "fail",
            "help": "what a baseline from a different setup does (default: fail)",
        },
    ),
    (
        "--specperf-run-dir",
        {"metavar": "DIR", "help": "where server logs go (default: a specperf folder in pytest's basetemp)"},
    ),
    (
        "--specperf-keep-servers",
        {"action": "store_true", "help": "leave launched servers running at exit and print how to attach"},
    ),
    (
        "--specperf-report",
        {"choices": REPORT_DETAIL, "default": "short", "help": "terminal summary detail (default: short)"},
    ),
    ("--specperf-json", {"metavar": "PATH", "help": "write the session's results as JSON"}),
    (
        "--specperf-markdown",
        {
            "metavar": "PATH",
            "help": "write the summary as Markdown (a GitHub Actions job also gets it in $GITHUB_STEP_SUMMARY)",
        },
    ),
    ("--specperf-bmf", {"metavar": "PATH", "help": "write Bencher Metric Format JSON"}),
    ("--specperf-plot", {"metavar": "DIR", "help": "write PNG plots (needs the `plot` extra: matplotlib)"}),
)


def add_options(parser: pytest.Parser) -> None:
    """`pytest_addoption`: every option of the plugin (`OPTIONS`), in one group."""
    group = parser.getgroup("specperf", "speculative-decoding performance (pytest-specperf)")
    for name, settings in OPTIONS:
        group.addoption(name, **settings)


@dataclass(frozen=True)
class Options:
    """Every `--specperf-*` option of a session, read once (`from_pytest_config`)."""

    #: store tonight's runs as the new normal (`--specperf-update`, and `--specperf-update-force`)
    update: bool = False
    record: bool = False
    update_force: bool = False
    strict: bool = False
    gate: str | None = None
    keep_servers: bool = False
    on_incomparable: str = "fail"
    report: str = "short"
    outputs: OutputPaths = field(default_factory=OutputPaths)
    verbose: int = 0
    config_path: str | None = None
    run_dir: str | None = None
    #: command-line overrides of the config file (precedence: marker > command line > config file)
    launcher: str | None = None
    rounds: Any = None
    sim_time_scale: Any = None
    attach: Mapping[str, str] = field(default_factory=dict)
    #: `--specperf-servers`: only these server configs' tests run (None: all)
    only_servers: tuple[str, ...] | None = None

    @classmethod
    def from_pytest_config(cls, config: pytest.Config) -> Options:
        """The options as pytest parsed them; `ConfigError` names the option a value is wrong for."""
        get = config.getoption
        only = get("specperf_servers")
        rounds, scale = get("specperf_rounds"), get("specperf_sim_time_scale")
        return cls(
            update=get("specperf_update") or get("specperf_update_force"),
            record=get("specperf_record"),
            update_force=get("specperf_update_force"),
            strict=get("specperf_strict"),
            gate=get("specperf_gate"),
            keep_servers=get("specperf_keep_servers"),
            on_incomparable=get("specperf_on_incomparable"),
            report=get("specperf_report"),
            outputs=OutputPaths(*(get(f"specperf_{name}") for name in ("json", "markdown", "bmf", "plot"))),
            verbose=get("verbose"),
            config_path=get("specperf_config"),
            run_dir=get("specperf_run_dir"),
            launcher=get("specperf_launcher"),
            rounds=None if rounds is None else check.from_command_line(rounds),
            sim_time_scale=None if scale is None else check.from_command_line(scale),
            attach=parse_attach(get("specperf_attach")),
            only_servers=tuple(s for s in only.split(",") if s) if only else None,
        )

    @property
    def storing(self) -> bool:
        """Whether tonight's runs go into their histories."""
        return self.update or self.record or self.update_force

    def selects(self, server: str) -> bool:
        """Whether `--specperf-servers` (if given) lets tests of `server` run."""
        return self.only_servers is None or server in self.only_servers


def load_suite_config(
    options: Options, rootdir: Path, invoked: Path, test_paths: Sequence[str] = ()
) -> SpecperfConfig | None:
    """The suite's config: found (None without one), read, checked against its engines, and overridden
    by the command line; every `command` template rendered once (a typo fails before any start)."""
    found = find_config_file(rootdir, options.config_path)
    for folder in _suite_folders(rootdir, invoked, test_paths):
        if found is not None:
            break
        found = find_config_file(folder, None)
    if found is None:
        return None
    config = apply_overrides(
        load_suite(*found),
        launcher=options.launcher,
        rounds=options.rounds,
        attach=options.attach,
        only_servers=list(options.only_servers) if options.only_servers is not None else None,
        sim_time_scale=options.sim_time_scale,
    )
    if options.gate is not None:
        config = replace(config, gate=options.gate)
    if options.launcher is not None:
        check_launcher(config, "--specperf-launcher")
    check_command_templates(config)
    return config


def _suite_folders(rootdir: Path, invoked: Path, test_paths: Sequence[str]) -> list[Path]:
    """Where else a suite's config may be, nearest first, when pytest's rootdir has none.

    `pytest perf/` in a checkout whose root has its own pyproject.toml makes the root pytest's rootdir;
    the suite's specperf.toml is beside its tests, so the folders from the test paths' common folder up
    to the rootdir are looked in, as pytest looks for conftest.py files. Then the folder pytest was run
    from: pytest picks its rootdir before it knows this plugin's options, so the PATH of `--specperf-json
    PATH` (with a space) counts as a test path and can pull the rootdir away from the suite.
    """
    given = [invoked / arg.split("::")[0] for arg in test_paths]
    existing = [path.resolve() if path.is_dir() else path.resolve().parent for path in given if path.exists()]
    folders: list[Path] = []
    if existing:
        folder = Path(os.path.commonpath(existing))
        root = rootdir.resolve()
        while folder != root and root in folder.parents:
            folders.append(folder)
            folder = folder.parent
    if invoked != rootdir:
        folders.append(invoked)
    return folders


def spaced_path_hint(config: pytest.Config) -> str:
    """How to fix a rootdir that a path option's value (given after a space) moved."""
    args = [str(a) for a in config.invocation_params.args]
    spaced = [a for a in args if a in PATH_OPTIONS]
    if not spaced:
        return ""
    return (
        f" (pytest chose rootdir {config.rootpath} counting the value after {spaced[0]} as a test path: "
        f"write {spaced[0]}=PATH, with '=', or pass --rootdir)"
    )
