"""Reading a suite's configuration: `specperf.toml`, `[tool.specperf]` in pyproject.toml, or `--specperf-config`.

Everything the file says is validated here, before any server starts: a typo found after a
20-minute server start is a wasted night. Every error names the file, the table and key as the
file spells them, and what is allowed (`ConfigError`, with the sentences of config/values.py).
What an engine allows (its flags, its speculative settings) is checked next, by the engines
(engines/suite.py); command-line values are applied last (`apply_overrides`).
"""

from __future__ import annotations

import contextlib
import re
import string
import tomllib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pytest_specperf.config import values as check
from pytest_specperf.config.location import StoreLocation
from pytest_specperf.config.settings import (
    COMMAND_PLACEHOLDERS,
    DEFAULT_ENGINE,
    DEFAULT_ENV_PATTERNS,
    DEFAULT_STARTUP_TIMEOUT,
    GATES,
    HTTP_URL,
    ServerConfig,
    SpecperfConfig,
    display_path,
)
from pytest_specperf.config.workloads import DEFAULT_WORKLOAD, WorkloadConfig, load_prompts, parse_workload
from pytest_specperf.errors import ConfigError, ConfigErrors, did_you_mean

# --------------------------------------------------------------------------------------------
# Loading


def find_config_file(rootdir: Path, explicit: str | None) -> tuple[Path, str] | None:
    """The config file and the table prefix it uses, or None when the suite has none."""
    if explicit:
        path = Path(explicit)
        if not path.is_absolute():
            path = Path.cwd() / path
        if not path.is_file():
            raise ConfigError("--specperf-config", f"file not found: {path}")
        prefix = "tool.specperf" if path.name == "pyproject.toml" else "specperf"
        return path, prefix
    candidate = rootdir / "specperf.toml"
    if candidate.is_file():
        return candidate, "specperf"
    pyproject = rootdir / "pyproject.toml"
    if pyproject.is_file() and "specperf" in _read_toml(pyproject).get("tool", {}):
        return pyproject, "tool.specperf"
    return None


def load_config(
    path: Path, prefix: str, *, check_servers: Callable[[SpecperfConfig], SpecperfConfig] | None = None
) -> SpecperfConfig:
    """Parse and validate one config file.

    `check_servers` (the engines' check: engines/suite.py) sees every table as read, before the
    checks across tables (the reference server): a server's own mistake is named first.
    """
    data = _read_toml(path)
    table: Any = data
    for part in prefix.split("."):
        table = table.get(part) if isinstance(table, dict) else None
    if not isinstance(table, dict):
        raise ConfigError(display_path(path), f"no [{prefix}] table; see docs/reference.md for the file's shape")
    config = _Parser(SpecperfConfig(source=path, table=prefix)).parse(table)
    if check_servers is not None:
        config = check_servers(config)
    check_reference(config)
    return config


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(display_path(path), f"not valid TOML: {exc}") from None


# --------------------------------------------------------------------------------------------
# Validation


GLOBAL_KEYS = {
    "engine",
    "launcher",
    "python",
    "model",
    "reference",
    "store",
    "offline_store",
    "startup_timeout",
    "stop_timeout",
    "max_servers",
    "rounds",
    "max_rounds",
    "max_regression",
    "max_regression_accept_length",
    "history",
    "run_to_run_cv",
    "run_to_run_cv_accept_length",
    "confirm",
    "max_restarts",
    "strict",
    "gate",
    "env",
    "env_patterns",
    "api_key",
    "sim_profile",
    "sim_time_scale",
    "sim_args",
    "servers",
    "workloads",
    "tune",
}
SERVER_KEYS = {f.name for f in fields(ServerConfig)} - {"name"}


class Problems:
    """The mistakes found so far in one file: each check runs, and `raise_any` names all of them at once.

    A check that fails gives its default instead, so the rest of the file is still read; a check across
    values (`max_rounds` against `rounds`) runs only on a file without other mistakes, where its
    inputs are what the user wrote.
    """

    def __init__(self) -> None:
        self.errors: list[ConfigError] = []

    @contextlib.contextmanager
    def collecting(self) -> Iterator[None]:
        try:
            yield
        except ConfigError as exc:
            self.errors.append(exc)

    def checked(self, check: Callable[[], Any], fallback: Any) -> Any:
        """`check()`, or `fallback` when it found a mistake (recorded)."""
        try:
            return check()
        except ConfigError as exc:
            self.errors.append(exc)
            return fallback

    def raise_any(self) -> None:
        if self.errors:
            raise ConfigErrors.of(self.errors)


class _Parser:
    """Turns raw TOML tables into config dataclasses, naming file and key on every error, every error of
    the file at once.

    `blank` is the empty config of the file (its source and table): it names places (`where`).
    """

    def __init__(self, blank: SpecperfConfig) -> None:
        assert blank.source is not None
        self.blank = blank
        self.path = blank.source
        self.where = blank.where
        self.problems = Problems()

    def parse(self, table: dict[str, Any]) -> SpecperfConfig:
        with self.problems.collecting():
            check.known_keys(table, GLOBAL_KEYS, self.where(""))
        get = _Getter(table, self.where(""), self.problems)
        self.engine = get.string("engine", DEFAULT_ENGINE)
        base = self.path.parent
        values: dict[str, Any] = {
            "source": self.path,
            "table": self.blank.table,
            "engine": self.engine,
            "launcher": get.string("launcher", self.engine),
            "python": get.string("python", "python3"),
            "model": get.string("model", None),
            "reference": get.string("reference", "plain"),
            "store": self.parse_store(get, base),
            "startup_timeout": get.number("startup_timeout", DEFAULT_STARTUP_TIMEOUT, minimum=0, exclusive=True),
            "stop_timeout": get.number("stop_timeout", 60.0, minimum=0, exclusive=True),
            "max_servers": get.integer("max_servers", 1, minimum=1),
            "rounds": get.setting("rounds", 5),
            "max_rounds": get.setting("max_rounds", None),
            "max_regression": get.setting("max_regression", 0.05),
            "max_regression_accept_length": get.setting("max_regression_accept_length", 0.02),
            "history": get.setting("history", 0),  # 0: every night (a retention only when one asks)
            "run_to_run_cv": get.setting("run_to_run_cv", 0.02),
            "run_to_run_cv_accept_length": get.setting("run_to_run_cv_accept_length", 0.005),
            "confirm": get.boolean("confirm", True),
            "max_restarts": get.integer("max_restarts", 4, minimum=0),
            "strict": get.boolean("strict", False),
            "gate": get.choice("gate", GATES, "speedup"),
            "env": get.string_map("env"),
            "env_patterns": tuple(get.string_list("env_patterns", DEFAULT_ENV_PATTERNS)),
            "api_key": get.string("api_key", None),
            "sim_profile": get.string("sim_profile", None),
            "sim_time_scale": get.setting("sim_time_scale", 1.0),
            "sim_args": tuple(
                self.problems.checked(
                    lambda: check_sim_args(get.string_list("sim_args", ()), self.where("", "sim_args")), ()
                )
            ),
        }
        if not self.problems.errors and values["max_rounds"] is not None and values["max_rounds"] < values["rounds"]:
            self.problems.errors.append(
                ConfigError(self.where("", "max_rounds"), f"must be >= rounds ({values['rounds']})")
            )
        values["servers"] = MappingProxyType(self.parse_servers(get.subtable("servers")))
        values["workloads"] = MappingProxyType(self.parse_workloads(get.subtable("workloads"), base))
        values["tune"] = MappingProxyType(get.subtable("tune"))  # `specperf tune` validates it
        self.problems.raise_any()
        return SpecperfConfig(**values)

    def parse_store(self, get: _Getter, base: Path) -> StoreLocation:
        """`store`, and `offline_store` (a git store's fallback directory, when its remote is unreachable)."""
        store_where = self.where("", "store")
        default = StoreLocation.parse(".specperf", base=base, where=store_where)
        store = self.problems.checked(
            lambda: StoreLocation.parse(get.string("store", ".specperf"), base=base, where=store_where), default
        )
        offline = get.string("offline_store", None)
        if offline is not None and not store.is_git:
            self.problems.errors.append(
                ConfigError(self.where("", "offline_store"), 'applies to a git store only (store = "git:...")')
            )
            return store
        return replace(store, offline=base / offline) if offline is not None else store

    def parse_servers(self, tables: dict[str, Any]) -> dict[str, ServerConfig]:
        servers = {}
        for name, table in tables.items():
            where = self.where(f"servers.{name}")
            with self.problems.collecting():
                check_name(name, where)
                if not isinstance(table, dict):
                    raise ConfigError(where, "must be a table")
                servers[name] = parse_server(name, table, where, engine=self.engine)
        return servers

    def parse_workloads(self, tables: dict[str, Any], base: Path) -> dict[str, WorkloadConfig]:
        workloads = {}
        for name, table in tables.items():
            with self.problems.collecting():
                check_name(name, self.where(f"workloads.{name}"))
                if not isinstance(table, dict):
                    raise ConfigError(self.where(f"workloads.{name}"), "must be a table")
                workloads[name] = parse_workload(name, table, self.where(f"workloads.{name}"), base)
                load_prompts(workloads[name].prompts, base)  # a bad line fails now, not after a server start
        if "default" not in workloads:
            workloads["default"] = DEFAULT_WORKLOAD
        return workloads


def check_reference(config: SpecperfConfig) -> None:
    """The reference server exists and does not speculate: every speedup is measured against it."""
    if not config.servers:
        return
    where = config.where("", "reference")
    ref = config.servers.get(config.reference)
    if ref is None:
        raise ConfigError(
            where,
            f"names server {config.reference!r}, which is not defined"
            f"{did_you_mean(config.reference, config.servers)}; defined: {', '.join(sorted(config.servers))}",
        )
    if ref.is_speculative:
        raise ConfigError(
            where,
            f"server {config.reference!r} is speculative (algorithm = {ref.algorithm!r}); "
            "the reference must be a plain, non-speculative server",
        )


def parse_server(name: str, table: dict[str, Any], where: str, engine: str = DEFAULT_ENGINE) -> ServerConfig:
    """One `[specperf.servers.NAME]` table (`where` names it), running its own `engine` or the
    suite's; its engine's rules are applied once the whole file is read (engines/suite.py). Every
    mistake of the table is named at once."""
    problems = Problems()
    with problems.collecting():
        check.known_keys(table, SERVER_KEYS, where)
    get = _Getter(table, where, problems)
    algorithm = get.string("algorithm", None)
    own_engine = get.string("engine", engine)
    spec_config = get.subtable("speculative_config") if "speculative_config" in table else None
    server = ServerConfig(
        name=name,
        algorithm=algorithm.upper() if algorithm else None,
        draft_model=get.string("draft_model", None),
        num_steps=get.integer("num_steps", None, minimum=1),
        eagle_topk=get.integer("eagle_topk", None, minimum=1),
        num_draft_tokens=get.integer("num_draft_tokens", None, minimum=1),
        model=get.string("model", None),
        args=tuple(get.string_list("args", ())),
        env=MappingProxyType(get.string_map("env")),
        url=get.string("url", None),
        command=get.string("command", None),
        host=get.string("host", "127.0.0.1"),
        startup_timeout=get.number("startup_timeout", None, minimum=0, exclusive=True),
        api_key=get.string("api_key", None),
        sim_args=tuple(get.string_list("sim_args", ())),
        engine=own_engine,
        speculative_config=MappingProxyType(dict(spec_config)) if spec_config is not None else None,
    )
    for check_server in (
        lambda: check_sim_args(server.sim_args, f"{where} sim_args"),
        lambda: check_attach(server, table, where),
        lambda: check_command(server, where),
    ):
        problems.checked(check_server, None)
    problems.raise_any()
    return server


def check_sim_args(args: Sequence[str], where: str) -> Sequence[str]:
    for arg in args:
        if not arg.startswith("--sim-") and arg.startswith("--"):
            raise ConfigError(where, f"{arg}: only --sim-* flags belong here (others go in `args`)")
    return args


def check_attach(server: ServerConfig, table: dict[str, Any], where: str) -> None:
    if server.url is None:
        return
    if not HTTP_URL.match(server.url):
        raise ConfigError(f"{where} url", f"must be an http(s) URL like http://host:30000, got {server.url!r}")
    launch_only = sorted(k for k in ("command", "args", "env", "startup_timeout", "sim_args") if k in table)
    if launch_only:
        raise ConfigError(
            f"{where} {launch_only[0]}",
            "an attached server (url = ...) is never launched, so launch settings do not apply",
        )


def check_command(server: ServerConfig, where: str) -> None:
    if server.command is None:
        return
    try:
        names = {name for _, name, _, _ in string.Formatter().parse(server.command) if name is not None}
    except ValueError as exc:
        raise ConfigError(f"{where} command", f"bad template: {exc}") from None
    unknown = sorted(names - set(COMMAND_PLACEHOLDERS))
    if unknown:
        raise ConfigError(
            f"{where} command",
            f"unknown placeholder {{{unknown[0]}}}; allowed: {', '.join('{' + p + '}' for p in COMMAND_PLACEHOLDERS)}",
        )
    if "args" not in names:
        raise ConfigError(f"{where} command", "must contain {args} (the launch arguments the plugin builds)")


def check_name(name: str, where: str) -> None:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise ConfigError(where, "names may use letters, digits, '-', '_' and '.' only")


class _Getter:
    """Reads from one table with defaults; the checks themselves are `config.values`, named by key. A
    value that fails its check is recorded in `problems` and read as the default, so the rest of the
    table is still checked."""

    def __init__(self, table: Mapping[str, Any], where: str, problems: Problems) -> None:
        self.table = table
        self.where = where
        self.problems = problems

    def _get(self, key: str, default: Any, check_value: Callable[[Any, str], Any], fallback: Any = None) -> Any:
        """The checked value of `key` (None stays None), or `fallback` (default: `default`) if it is wrong."""
        value, where = self.table.get(key, default), f"{self.where} {key}"
        if value is None:
            return None
        return self.problems.checked(lambda: check_value(value, where), default if fallback is None else fallback)

    def setting(self, key: str, default: Any) -> Any:
        """A setting other front ends accept too, checked by its one rule (config/values.py `SETTINGS`)."""
        return self._get(key, default, lambda value, where: check.setting(key, value, where))

    def string(self, key: str, default: str | None) -> Any:
        return self._get(key, default, check.string)

    def choice(self, key: str, choices: tuple[str, ...], default: str) -> str:
        return self._get(key, default, lambda value, where: check.choice(check.string(value, where), where, choices))

    def boolean(self, key: str, default: bool) -> bool:
        return bool(self._get(key, default, check.boolean))

    def integer(self, key: str, default: int | None, minimum: int | None = None) -> Any:
        return self._get(key, default, lambda value, where: check.integer(value, where, minimum=minimum))

    def number(
        self,
        key: str,
        default: float | None,
        minimum: float | None = None,
        maximum: float | None = None,
        exclusive: bool = False,
    ) -> Any:
        return self._get(
            key,
            default,
            lambda value, where: check.number(value, where, minimum=minimum, maximum=maximum, exclusive_min=exclusive),
        )

    def string_list(self, key: str, default: Any) -> list[str]:
        return list(self._get(key, default, check.string_list, fallback=()) or ())

    def string_map(self, key: str) -> dict[str, str]:
        return dict(self._get(key, {}, check.string_map) or {})

    def subtable(self, key: str) -> dict[str, Any]:
        return dict(self._get(key, {}, check.table) or {})


# --------------------------------------------------------------------------------------------
# Command-line overrides (precedence: marker > command line > config file > defaults)


def apply_overrides(
    config: SpecperfConfig,
    *,
    launcher: str | None = None,
    rounds: int | None = None,
    attach: Mapping[str, str] | None = None,
    only_servers: list[str] | None = None,
    sim_time_scale: float | None = None,
) -> SpecperfConfig:
    """The config with command-line options applied; each option is validated by its name."""
    if launcher is not None:  # which launchers exist the engines know: engines/suite.py checks it
        config = replace(config, launcher=launcher)
    if rounds is not None:
        rounds = check.setting("rounds", rounds, "--specperf-rounds")
        keep = config.max_rounds is not None and config.max_rounds >= rounds
        config = replace(config, rounds=rounds, max_rounds=config.max_rounds if keep else None)
    if sim_time_scale is not None:
        config = replace(
            config, sim_time_scale=check.setting("sim_time_scale", sim_time_scale, "--specperf-sim-time-scale")
        )
    servers = dict(config.servers)
    for name, url in (attach or {}).items():
        if name not in servers:
            raise ConfigError("--specperf-attach", f"unknown server {name!r}{did_you_mean(name, servers)}")
        if not HTTP_URL.match(url):
            raise ConfigError("--specperf-attach", f"{name}={url!r}: the URL must look like http://host:port")
        servers[name] = replace(servers[name], url=url)
    for name in only_servers or []:
        if name not in servers:
            raise ConfigError("--specperf-servers", f"unknown server {name!r}{did_you_mean(name, servers)}")
    return replace(config, servers=MappingProxyType(servers))


def parse_attach(values: list[str]) -> dict[str, str]:
    """`--specperf-attach NAME=URL` values as a mapping."""
    result = {}
    for value in values:
        name, sep, url = value.partition("=")
        if not sep or not name or not url:
            raise ConfigError("--specperf-attach", f"expected NAME=URL, got {value!r}")
        result[name] = url
    return result
