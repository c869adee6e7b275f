"""A suite's config checked against the engines its servers run, before any server starts.

config/ reads the file into records of names and numbers; what an engine allows is the engine's
own knowledge: its flags (as the configured interpreter has the engine installed, or its shipped
list), its speculative settings, the flags the plugin sets itself. Here every server config is
checked against its engine, with errors that name the file, table and key as config/ names them,
and the launcher against the engines that exist (every registered engine, and the simulator).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType

from pytest_specperf.config import values as check
from pytest_specperf.config.loading import Problems, load_config
from pytest_specperf.config.settings import SIM_LAUNCHER, ServerConfig, SpecperfConfig
from pytest_specperf.engines.base import Engine, engine_for, engine_names
from pytest_specperf.engines.flags import EngineFlags
from pytest_specperf.errors import ConfigError


@dataclass(frozen=True)
class ServerPlan:
    """A server config with its engine, resolved once: launching, attaching, measuring and tuning the
    server take the engine from here (and from the `LaunchPlan` and `RunningServer` made from it), so
    nothing past the config looks a server's engine up by name again."""

    server: ServerConfig
    engine: Engine

    @classmethod
    def of(cls, config: SpecperfConfig, server: ServerConfig) -> ServerPlan:
        """The plan of `server`, whose engine is its own `engine` key or the suite's."""
        return cls(server, engine_for(config.engine_name(server)))


def server_plans(config: SpecperfConfig) -> dict[str, ServerPlan]:
    """Every server config of the suite with its engine, by name."""
    return {name: ServerPlan.of(config, server) for name, server in config.servers.items()}


def launchers() -> tuple[str, ...]:
    """Every engine's name (start that engine for real) and "sim" (the simulator)."""
    return (*engine_names(), SIM_LAUNCHER)


def load_suite(path: Path, prefix: str) -> SpecperfConfig:
    """The config file read (config/loading.py) and checked against its engines: what a session runs."""
    return load_config(path, prefix, check_servers=check_config)


def check_config(config: SpecperfConfig) -> SpecperfConfig:
    """The config with every server checked against its engine and its args spelled as the engine
    reads them; each engine's flags, where they were found (`notes`) and what makes numbers noisier
    than they look (`warnings`) are kept on it. Every server's mistakes are named at once."""
    problems = Problems()
    with problems.collecting():
        check.choice(config.engine, config.where("", "engine"), engine_names())
    with problems.collecting():
        check.choice(config.launcher, config.where("", "launcher"), launchers())
    problems.raise_any()  # the servers' checks need the suite's engine
    flags = EngineFlagsOf(config.python, config.env)
    servers = {}
    for name, server in config.servers.items():
        with problems.collecting():
            servers[name] = check_server(server, config.where(f"servers.{name}"), flags, config.engine)
    problems.raise_any()
    config = replace(config, servers=MappingProxyType(servers), engine_flags=MappingProxyType(dict(flags.found)))
    check_launcher(config, config.where("", "launcher"))
    return replace(config, notes=flag_notes(config), warnings=engine_warnings(config))


class EngineFlagsOf:
    """Each engine's flags, asked of the configured interpreter once per config (and cached there)."""

    def __init__(self, python: str, env: Mapping[str, str]) -> None:
        self.python = python
        self.env = env
        self.found: dict[str, EngineFlags] = {}

    def __call__(self, engine: Engine) -> EngineFlags:
        if engine.name not in self.found:
            self.found[engine.name] = engine.flags(self.python, self.env)
        return self.found[engine.name]


def check_server(server: ServerConfig, where: str, flags: EngineFlagsOf, suite_engine: str) -> ServerConfig:
    """One server config (`where` names its table) with its engine's rules applied against that
    engine's flags; its args come back spelled as the engine reads them."""
    name = server.engine or suite_engine
    runs_on = engine_for(check.choice(name, f"{where} engine", engine_names()))
    engine_flags = flags(runs_on)
    runs_on.check_server(server, where, engine_flags)
    server = replace(server, engine=name, args=runs_on.spell_out(server.args, f"{where} args", engine_flags))
    for arg in server.args:
        flag = arg.split("=", 1)[0]
        if flag in runs_on.reserved_flags:
            raise ConfigError(f"{where} args", f"{flag} is not allowed here: {runs_on.reserved_flags[flag]}")
    runs_on.check_args(server, f"{where} args", engine_flags)
    return server


def check_launcher(config: SpecperfConfig, where: str) -> None:
    """The simulator speaks only the engines it simulates; a launcher that names an engine must be
    that engine. `where` names the setting: the config's `launcher`, or `--specperf-launcher`."""
    check.choice(config.launcher, where, launchers())
    for server, engine in ((plan.server, plan.engine) for plan in server_plans(config).values()):
        if config.launcher == SIM_LAUNCHER and not engine.simulated and not server.is_attached:
            raise ConfigError(
                where,
                f'"sim" simulates {", ".join(n for n in engine_names() if engine_for(n).simulated)} only; server '
                f"{server.name!r} runs {engine.name} (launch it for real, or attach to it with --specperf-attach)",
            )
    if config.launcher not in (SIM_LAUNCHER, config.engine):
        raise ConfigError(where, f'is "{config.launcher}" but engine is "{config.engine}"')


def flag_notes(config: SpecperfConfig) -> tuple[str, ...]:
    """Where each engine's flags and algorithms were checked: the installed engine, or the shipped
    list and why (said once, in the report header)."""
    return tuple(flags.describe() for flags in config.engine_flags.values())


def engine_warnings(config: SpecperfConfig) -> tuple[str, ...]:
    """Settings that run but make numbers noisier than they look (each engine's `config_warnings`)."""
    workloads = list(config.workloads.values())
    found: list[str] = []
    for server in config.servers.values():
        found += engine_for(config.engine_name(server)).config_warnings(server, workloads)
    return tuple(found)
