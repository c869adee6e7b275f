"""Configuration: `specperf.toml`, `[tool.specperf]` in pyproject.toml, or `--specperf-config`.

Everything is validated here, before any server starts: a typo found after a 20-minute
server start is a wasted night. Every error names the file, the table and key, and what is
allowed (`ConfigError`).
"""

from __future__ import annotations

import re
import string
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pytest_specperf.config import values as check
from pytest_specperf.config.workloads import DEFAULT_WORKLOAD, WorkloadConfig, load_prompts, parse_workload
from pytest_specperf.engines.base import engine_for, engine_names
from pytest_specperf.engines.sglang import KNOWN_ALGORITHMS, NEEDS_DRAFT_MODEL, RESERVED_FLAGS
from pytest_specperf.errors import ConfigError, did_you_mean
from pytest_specperf.sim.sglang_flags import ambiguous_message, sglang_flags
from pytest_specperf.verdict.fingerprint import DEFAULT_ENV_PATTERNS

#: "sim" starts the built-in simulator (SGLang's contract); any other value starts the real engine.
LAUNCHERS = ("sglang", "vllm", "sim")

HTTP_URL = re.compile(r"^https?://[^/]+")

#: Placeholders a `command` template may use.
COMMAND_PLACEHOLDERS = ("python", "args", "host", "port", "model", "name")


@dataclass(frozen=True)
class ServerConfig:
    """A named way to get one SGLang server: launch settings, or a URL to attach to."""

    name: str
    algorithm: str | None = None
    draft_model: str | None = None
    num_steps: int | None = None
    eagle_topk: int | None = None
    num_draft_tokens: int | None = None
    model: str | None = None
    # repr=False: these may hold secrets, and pytest prints reprs in assertion failures
    args: tuple[str, ...] = field(default=(), repr=False)
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    url: str | None = field(default=None, repr=False)
    command: str | None = field(default=None, repr=False)
    host: str = "127.0.0.1"
    startup_timeout: float | None = None
    api_key: str | None = field(default=None, repr=False)
    sim_args: tuple[str, ...] = ()
    engine: str | None = None  # None: the suite's engine
    speculative_config: Mapping[str, Any] | None = None  # vLLM's --speculative-config, passed as it is

    @property
    def is_speculative(self) -> bool:
        return self.algorithm is not None or self.speculative_config is not None

    @property
    def is_attached(self) -> bool:
        return self.url is not None

    def arg_value(self, flag: str) -> str | None:
        """Value of `flag` in the extra args (`--flag V` or `--flag=V`), if given."""
        for i, arg in enumerate(self.args):
            if arg == flag and i + 1 < len(self.args):
                return self.args[i + 1]
            if arg.startswith(flag + "="):
                return arg.split("=", 1)[1]
        return None

    @property
    def tp_size(self) -> int:
        value = self.arg_value("--tp-size") or self.arg_value("--tensor-parallel-size")
        return int(value) if value and value.isdigit() else 1


@dataclass(frozen=True)
class SpecperfConfig:
    """The whole, validated configuration of a session."""

    source: Path | None = None
    launcher: str = "sglang"
    engine: str = "sglang"
    python: str = "python3"
    model: str | None = None
    reference: str = "plain"
    store: Path = Path(".specperf")
    startup_timeout: float = 1800.0
    stop_timeout: float = 60.0
    max_servers: int = 1
    rounds: int = 5
    max_rounds: int | None = None
    max_regression: float = 0.05
    max_regression_accept_length: float = 0.02
    history: int = 30
    run_to_run_cv: float = 0.02
    run_to_run_cv_accept_length: float = 0.005
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    env_patterns: tuple[str, ...] = DEFAULT_ENV_PATTERNS
    api_key: str | None = field(default=None, repr=False)
    sim_profile: str | None = None
    sim_time_scale: float = 1.0
    #: --sim-* flags every simulated server gets (before its own `sim_args`), e.g. run-to-run jitter
    sim_args: tuple[str, ...] = ()
    servers: Mapping[str, ServerConfig] = field(default_factory=dict)
    workloads: Mapping[str, WorkloadConfig] = field(default_factory=dict)
    #: the `[specperf.tune]` table as written: `specperf tune` validates it (pytest runs never read it)
    tune: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @property
    def effective_max_rounds(self) -> int:
        return self.max_rounds if self.max_rounds is not None else 2 * self.rounds

    @property
    def reference_server(self) -> ServerConfig | None:
        return self.servers.get(self.reference)

    @property
    def speculative_servers(self) -> list[ServerConfig]:
        return [s for s in self.servers.values() if s.is_speculative]

    def model_of(self, server: ServerConfig) -> str | None:
        return server.model or self.model

    def engine_of(self, server: ServerConfig) -> str:
        """The engine a server runs: its own `engine`, else the suite's."""
        return server.engine or self.engine


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


def load_config(path: Path, prefix: str) -> SpecperfConfig:
    """Parse and validate one config file."""
    data = _read_toml(path)
    table: Any = data
    for part in prefix.split("."):
        table = table.get(part) if isinstance(table, dict) else None
    if not isinstance(table, dict):
        raise ConfigError(display_path(path), f"no [{prefix}] table; see the README for the file's shape")
    return _Parser(path, prefix).parse(table)


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(display_path(path), f"not valid TOML: {exc}") from None


# --------------------------------------------------------------------------------------------
# Validation


GLOBAL_KEYS = {
    "engine", "launcher", "python", "model", "reference", "store", "startup_timeout", "stop_timeout", "max_servers",
    "rounds", "max_rounds", "max_regression", "max_regression_accept_length", "history",
    "run_to_run_cv", "run_to_run_cv_accept_length", "env", "env_patterns",
    "api_key", "sim_profile", "sim_time_scale", "sim_args", "servers", "workloads", "tune",
}  # fmt: skip
SERVER_KEYS = {f.name for f in fields(ServerConfig)} - {"name"}


class _Parser:
    """Turns raw TOML tables into config dataclasses, naming file and key on every error."""

    def __init__(self, path: Path, prefix: str) -> None:
        self.path = path
        self.prefix = prefix

    def where(self, table: str, key: str | None = None) -> str:
        name = f"{self.prefix}.{table}" if table else self.prefix
        return f"{display_path(self.path)} [{name}]" + (f" {key}" if key else "")

    def parse(self, table: dict[str, Any]) -> SpecperfConfig:
        check_keys(table, GLOBAL_KEYS, self.where(""))
        self.engine = _Getter(table, self.where("")).choice("engine", engine_names(), "sglang")
        get = _Getter(table, self.where(""))
        base = self.path.parent
        values: dict[str, Any] = {
            "source": self.path,
            "engine": get.choice("engine", engine_names(), "sglang"),
            "launcher": get.choice("launcher", LAUNCHERS, get.table.get("engine", "sglang")),
            "python": get.string("python", "python3"),
            "model": get.string("model", None),
            "reference": get.string("reference", "plain"),
            "store": base / get.string("store", ".specperf"),
            "startup_timeout": get.number("startup_timeout", 1800.0, minimum=0, exclusive=True),
            "stop_timeout": get.number("stop_timeout", 60.0, minimum=0, exclusive=True),
            "max_servers": get.integer("max_servers", 1, minimum=1),
            "rounds": get.integer("rounds", 5, minimum=2),
            "max_rounds": get.integer("max_rounds", None, minimum=2),
            "max_regression": get.number("max_regression", 0.05, minimum=0, maximum=1),
            "max_regression_accept_length": get.number("max_regression_accept_length", 0.02, 0, 1),
            "history": get.integer("history", 30, minimum=1),
            "run_to_run_cv": get.number("run_to_run_cv", 0.02, 0, 1),
            "run_to_run_cv_accept_length": get.number("run_to_run_cv_accept_length", 0.005, 0, 1),
            "env": get.string_map("env"),
            "env_patterns": tuple(get.string_list("env_patterns", DEFAULT_ENV_PATTERNS)),
            "api_key": get.string("api_key", None),
            "sim_profile": get.string("sim_profile", None),
            "sim_time_scale": get.number("sim_time_scale", 1.0, minimum=0),
            "sim_args": tuple(check_sim_args(get.string_list("sim_args", ()), self.where("", "sim_args"))),
        }
        for key in ("max_regression", "max_regression_accept_length"):
            if values[key] >= 1:
                raise ConfigError(self.where("", key), f"must be a fraction below 1 (0.05 = 5%), got {values[key]:g}")
        if values["max_rounds"] is not None and values["max_rounds"] < values["rounds"]:
            raise ConfigError(self.where("", "max_rounds"), f"must be >= rounds ({values['rounds']})")
        values["servers"] = MappingProxyType(self.parse_servers(get.subtable("servers")))
        values["workloads"] = MappingProxyType(self.parse_workloads(get.subtable("workloads"), base))
        values["tune"] = MappingProxyType(get.subtable("tune"))
        config = SpecperfConfig(**values)
        self.check_reference(config)
        check_engines(config, self.where(""))
        return config

    def parse_servers(self, tables: dict[str, Any]) -> dict[str, ServerConfig]:
        servers = {}
        for name, table in tables.items():
            where = self.where(f"servers.{name}")
            check_name(name, where)
            if not isinstance(table, dict):
                raise ConfigError(where, "must be a table")
            servers[name] = parse_server(name, table, where, engine=self.engine)
        return servers

    def parse_workloads(self, tables: dict[str, Any], base: Path) -> dict[str, WorkloadConfig]:
        workloads = {}
        for name, table in tables.items():
            check_name(name, self.where(f"workloads.{name}"))
            if not isinstance(table, dict):
                raise ConfigError(self.where(f"workloads.{name}"), "must be a table")
            workloads[name] = parse_workload(name, table, display_path(self.path), base)
            load_prompts(workloads[name].prompts, base)  # a bad line fails now, not after a server start
        if "default" not in workloads:
            workloads["default"] = DEFAULT_WORKLOAD
        return workloads

    def check_reference(self, config: SpecperfConfig) -> None:
        if not config.servers:
            return
        where = self.where("", "reference")
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


def parse_server(name: str, table: dict[str, Any], where: str, engine: str = "sglang") -> ServerConfig:
    """One `[specperf.servers.NAME]` table, with its engine's rules applied (SGLang's by default)."""
    check_keys(table, SERVER_KEYS, where)
    get = _Getter(table, where)
    algorithm = get.string("algorithm", None)
    own_engine = get.choice("engine", engine_names(), engine) if "engine" in table else None
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
    runs_on = engine_for(own_engine or engine)
    runs_on.check_server(server, where)
    if runs_on.name == "sglang":
        server = replace(server, args=spell_out_sglang_flags(server.args, f"{where} args"))
    check_args(server, where, runs_on.reserved_flags)
    check_attach(server, table, where)
    check_command(server, where)
    return server


def check_speculative_rules(server: ServerConfig, where: str) -> None:
    """SGLang's rules (docs/engines/sglang.md), refused instead of silently corrected."""
    sizes = {
        "num_steps": server.num_steps,
        "eagle_topk": server.eagle_topk,
        "num_draft_tokens": server.num_draft_tokens,
    }
    given = [k for k, v in sizes.items() if v is not None]
    if server.algorithm is None:
        extra = given + (["draft_model"] if server.draft_model else [])
        if extra:
            raise ConfigError(
                f"{where} {extra[0]}", 'is set but `algorithm` is not; add algorithm = "EAGLE3" (or remove it)'
            )
        return
    if server.algorithm not in KNOWN_ALGORITHMS:
        raise ConfigError(
            f"{where} algorithm",
            f"unknown speculative algorithm {server.algorithm!r}; SGLang 0.5.23 knows {', '.join(KNOWN_ALGORITHMS)}",
        )
    if server.algorithm in NEEDS_DRAFT_MODEL and not server.draft_model:
        raise ConfigError(f"{where} draft_model", f"is required for algorithm {server.algorithm}")
    if given and len(given) != 3:
        missing = [k for k in sizes if k not in given]
        raise ConfigError(
            f"{where} {missing[0]}",
            "num_steps, eagle_topk and num_draft_tokens must be given all together or not at all "
            f"(SGLang asserts or crashes otherwise); missing: {', '.join(missing)}",
        )
    if not given:
        return
    steps, topk, draft = server.num_steps, server.eagle_topk, server.num_draft_tokens
    assert steps is not None and topk is not None and draft is not None
    if topk == 1 and draft != steps + 1:
        raise ConfigError(
            f"{where} num_draft_tokens",
            f"with eagle_topk = 1 it must be num_steps + 1 = {steps + 1}, got {draft} "
            "(SGLang would silently change it; set it explicitly)",
        )
    if draft > steps * topk + 1:
        raise ConfigError(
            f"{where} num_draft_tokens",
            f"{draft} is more than num_steps * eagle_topk + 1 = {steps * topk + 1}",
        )


def spell_out_sglang_flags(args: tuple[str, ...], where: str) -> tuple[str, ...]:
    """`args` with every abbreviated flag written in full, as SGLang's argparse reads it.

    SGLang keeps argparse's prefix matching: `--tp 8` is `--tp-size 8`, `--po 1` is `--port 1`.
    Checks and identities compare whole flags, so an abbreviation would slip past the reserved
    flags or count a TP8 server as `tp_size = 1`. A reserved flag is reported as written, an
    ambiguous prefix is refused with the candidates (SGLang exits 2 on it), and a flag SGLang
    0.5.23 does not know is left as it is (a newer SGLang may know it; a dry run refuses it).
    """
    out = []
    for arg in args:
        flag, eq, value = arg.partition("=")
        if not flag.startswith("--") or flag in RESERVED_FLAGS:
            out.append(arg)
            continue
        resolved = sglang_flags().resolve(flag)
        if isinstance(resolved, list):
            raise ConfigError(where, f"{ambiguous_message(flag, resolved)} (SGLang exits 2); write the flag in full")
        if resolved is not None and resolved in RESERVED_FLAGS and resolved != flag:
            raise ConfigError(
                where, f"{flag} (SGLang reads it as {resolved}) is not allowed here: {RESERVED_FLAGS[resolved]}"
            )
        out.append((resolved or flag) + eq + value)
    return tuple(out)


def check_args(server: ServerConfig, where: str, reserved: Mapping[str, str] = RESERVED_FLAGS) -> None:
    for arg in server.args:
        flag = arg.split("=", 1)[0]
        if flag in reserved:
            raise ConfigError(f"{where} args", f"{flag} is not allowed here: {reserved[flag]}")
    check_sim_args(server.sim_args, f"{where} sim_args")


def check_sim_args(args: Sequence[str], where: str) -> Sequence[str]:
    for arg in args:
        if not arg.startswith("--sim-") and arg.startswith("--"):
            raise ConfigError(where, f"{arg}: only --sim-* flags belong here (others go in `args`)")
    return args


def check_engines(config: SpecperfConfig, where: str) -> None:
    """The simulator speaks SGLang only; a launcher that names an engine must be that engine."""
    for server in config.servers.values():
        engine = config.engine_of(server)
        if config.launcher == "sim" and engine != "sglang" and not server.is_attached:
            raise ConfigError(
                f"{where} launcher",
                f'"sim" simulates SGLang only; server {server.name!r} runs {engine} (launch it for real, '
                "or attach to it with --specperf-attach)",
            )
    if config.launcher not in ("sim", config.engine):
        raise ConfigError(f"{where} launcher", f'is "{config.launcher}" but engine is "{config.engine}"')


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


def display_path(path: Path) -> str:
    """A path as the user would type it: relative to the working directory when below it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def check_keys(table: Mapping[str, Any], allowed: set[str], where: str) -> None:
    for key in table:
        if key not in allowed:
            raise ConfigError(
                f"{where} {key}", f"unknown key{did_you_mean(key, allowed)}; allowed: {', '.join(sorted(allowed))}"
            )


def check_name(name: str, where: str) -> None:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise ConfigError(where, "names may use letters, digits, '-', '_' and '.' only")


class _Getter:
    """Reads from one table with defaults; the checks themselves are `config.values`, named by key."""

    def __init__(self, table: Mapping[str, Any], where: str) -> None:
        self.table = table
        self.where = where

    def _read(self, key: str, default: Any) -> tuple[Any, str]:
        return self.table.get(key, default), f"{self.where} {key}"

    def string(self, key: str, default: str | None) -> Any:
        value, where = self._read(key, default)
        return None if value is None else check.string(value, where)

    def choice(self, key: str, choices: tuple[str, ...], default: str) -> str:
        value, where = self._read(key, default)
        return check.choice(check.string(value, where), where, choices)

    def integer(self, key: str, default: int | None, minimum: int | None = None) -> Any:
        value, where = self._read(key, default)
        return None if value is None else check.integer(value, where, minimum=minimum)

    def number(
        self, key: str, default: float | None, minimum: float | None = None, maximum: float | None = None,
        exclusive: bool = False,
    ) -> Any:  # fmt: skip
        value, where = self._read(key, default)
        if value is None:
            return None
        return check.number(value, where, minimum=minimum, maximum=maximum, exclusive_min=exclusive)

    def string_list(self, key: str, default: Any) -> list[str]:
        return check.string_list(*self._read(key, default))

    def string_map(self, key: str) -> dict[str, str]:
        return check.string_map(*self._read(key, {}))

    def subtable(self, key: str) -> dict[str, Any]:
        return check.table(*self._read(key, {}))


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
    if launcher is not None:
        if launcher not in LAUNCHERS:
            raise ConfigError("--specperf-launcher", f"must be one of {', '.join(LAUNCHERS)}, got {launcher!r}")
        config = replace(config, launcher=launcher)
        check_engines(config, "--specperf-launcher")
    if rounds is not None:
        if rounds < 2:
            raise ConfigError("--specperf-rounds", f"must be >= 2 (a CI needs two rounds), got {rounds}")
        keep = config.max_rounds is not None and config.max_rounds >= rounds
        config = replace(config, rounds=rounds, max_rounds=config.max_rounds if keep else None)
    if sim_time_scale is not None:
        if sim_time_scale < 0:
            raise ConfigError("--specperf-sim-time-scale", f"must be >= 0, got {sim_time_scale}")
        config = replace(config, sim_time_scale=sim_time_scale)
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
