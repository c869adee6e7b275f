"""The `@pytest.mark.specperf(...)` marker: parsed and validated at collection time.

A typo in a marker must be a usage error naming the test and the key before any server
starts, never an exception 20 minutes into a night.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from pytest_specperf.config import values as check
from pytest_specperf.config.settings import SpecperfConfig
from pytest_specperf.engines.base import draft_depth
from pytest_specperf.errors import ConfigError, did_you_mean
from pytest_specperf.measure.records import MeasurementKey

Range = tuple[float | None, float | None]

#: Marker range keys and the metric each one checks (metric names follow records.METRICS).
RANGE_METRICS = {
    "throughput": "output_throughput",
    "accept_length": "accept_length",
    "tpot_ms": "mean_tpot_ms",
    "ttft_ms": "mean_ttft_ms",
}
#: Every marker argument and the values it takes, in the order `pytest --markers` lists them (plugin.py
#: builds that help from here, so an argument is declared once and never left out of it).
MARKER_ARGUMENTS = {
    "server": "NAME or [NAME, ...] (default: every speculative server)",
    "workload": "NAME or [NAME, ...] (default: 'default')",
    "min_speedup": "X > 0, or {LEVEL: X}",
    **{key: "(LOW, HIGH) with None for an open end, or {LEVEL: (LOW, HIGH)}" for key in RANGE_METRICS},
    "accept_per_position": "True (each draft position against the stored history), or [FLOOR in [0, 1], ...] "
    "for positions 1, 2, ..., or {LEVEL: [FLOOR, ...]}",
    "max_regression": "F in [0, 1)",
    "max_regression_accept_length": "F in [0, 1)",
    "lossless": "True, False, or the share of identical outputs in (0, 1]",
    "max_error_rate": "F in [0, 1]",
}
MARKER_KEYS = tuple(MARKER_ARGUMENTS)


@dataclass(frozen=True)
class ServerCase:
    """A test that needs a running server but measures nothing (the `specperf_server` fixture alone)."""

    server: str


#: What one parametrized test runs against: a server, or a measurement (server, workload, level).
#: Two types, so code holding a measurement never meets a half-known one.
Case = ServerCase | MeasurementKey


@dataclass(frozen=True)
class AgainstHistory:
    """`accept_per_position=True`: each draft position's acceptance judged against the stored history's
    level rather than against floors typed by hand. A type of its own, so that no tuple of floors (an
    empty one least of all) can stand for it."""


#: The marker's `accept_per_position=True`.
AGAINST_HISTORY: Final = AgainstHistory()
#: What `accept_per_position` asks at one level: floors for draft positions 1, 2, ..., or the history's level.
Floors = tuple[float, ...] | AgainstHistory


@dataclass(frozen=True)
class SpecperfMarker:
    """The checks one marked test declares."""

    servers: tuple[str, ...]
    workloads: tuple[str, ...]
    min_speedup: float | Mapping[int, float] | None = None
    ranges: Mapping[str, Range | Mapping[int, Range]] = field(default_factory=dict)
    max_regression: float | None = None
    max_regression_accept_length: float | None = None
    lossless: float | None = None  # the share of outputs that must equal the reference's; None: not checked
    max_error_rate: float | None = None
    #: floors of the acceptance at draft positions 1, 2, ... (None: not checked), or one per level;
    #: AGAINST_HISTORY (the marker's `True`): each position against the stored history's level
    accept_per_position: Floors | Mapping[int, Floors] | None = None

    def floors_at(self, level: int) -> Floors | None:
        if isinstance(self.accept_per_position, Mapping):
            return self.accept_per_position.get(level)
        return self.accept_per_position

    def min_speedup_at(self, level: int) -> float | None:
        if isinstance(self.min_speedup, Mapping):
            return self.min_speedup.get(level)
        return self.min_speedup

    def range_at(self, key: str, level: int) -> Range | None:
        value = self.ranges.get(key)
        if isinstance(value, Mapping):
            return value.get(level)
        return value


def parse_marker(args: tuple[Any, ...], kwargs: Mapping[str, Any], test: str, config: SpecperfConfig) -> SpecperfMarker:
    """Validate a marker's arguments against the session config."""
    if args:
        raise ConfigError(f"{test} @specperf", "takes keyword arguments only, e.g. specperf(min_speedup=1.1)")
    check.known_keys(kwargs, MARKER_KEYS, f"{test} @specperf")
    where = f"{test} @specperf"
    servers = _names(kwargs.get("server"), config.servers, f"{where} server", "server")
    if not servers:
        servers = tuple(s.name for s in config.speculative_servers)
        if not servers:
            raise ConfigError(f"{where} server", "no speculative server config is defined; name a server")
    workloads = _names(kwargs.get("workload"), config.workloads, f"{where} workload", "workload") or ("default",)
    levels = sorted({c for w in workloads for c in config.workloads[w].concurrency})
    min_speedup = _per_level(kwargs.get("min_speedup"), levels, f"{where} min_speedup", _positive)
    if min_speedup is not None and config.reference in servers:
        raise ConfigError(
            f"{where} min_speedup",
            f"does not apply to the reference server {config.reference!r} (speedup is measured against it)",
        )
    ranges = {key: r for key in RANGE_METRICS if (r := _per_level(kwargs.get(key), levels, f"{where} {key}", _range))}
    floors = _per_level(kwargs.get("accept_per_position"), levels, f"{where} accept_per_position", _floors)
    if floors is not None:
        _check_floors(floors, servers, config, f"{where} accept_per_position")
    lossless = _lossless(kwargs.get("lossless", False), f"{where} lossless")
    if lossless is not None:
        _check_lossless(servers, workloads, config, f"{where} lossless")
    return SpecperfMarker(
        servers=servers,
        workloads=workloads,
        min_speedup=min_speedup,
        ranges=ranges,
        max_regression=_setting("max_regression", kwargs, where),
        max_regression_accept_length=_setting("max_regression_accept_length", kwargs, where),
        lossless=lossless,
        max_error_rate=_setting("max_error_rate", kwargs, where),
        accept_per_position=floors,
    )


def measured_cases(marker: SpecperfMarker, config: SpecperfConfig) -> list[tuple[MeasurementKey, str]]:
    """Every (server, workload, level) case of a marker, with its test id."""
    cases = []
    for server in marker.servers:
        for workload in marker.workloads:
            levels = config.workloads[workload].concurrency
            for level in levels:
                parts = [server]
                if len(marker.workloads) > 1:
                    parts.append(workload)
                if len(levels) > 1:
                    parts.append(f"c{level}")
                cases.append((MeasurementKey(server, workload, level), "-".join(parts)))
    return cases


def _check_lossless(servers: tuple[str, ...], workloads: tuple[str, ...], config: SpecperfConfig, where: str) -> None:
    """Losslessness compares outputs with the reference server's, token for token, at temperature 0."""
    if config.reference in servers:
        raise ConfigError(where, f"does not apply to the reference server {config.reference!r} (it is the reference)")
    hot = [w for w in workloads if config.workloads[w].temperature > 0]
    if hot:
        raise ConfigError(
            where,
            f"needs temperature 0; workload {hot[0]!r} samples at temperature {config.workloads[hot[0]].temperature:g}",
        )


def _floors(value: Any, where: str) -> Floors:
    """Floors of the acceptance at draft positions 1, 2, ...: shares in [0, 1]; `True`: against the history."""
    if value is True:
        return AGAINST_HISTORY
    if not isinstance(value, list | tuple) or not value:
        raise ConfigError(
            where,
            f"must be True (each position against the stored history) or list floors for draft positions 1, 2, ..., "
            f"e.g. (0.6, 0.4), got {value!r}",
        )
    for floor in value:
        if isinstance(floor, bool) or not isinstance(floor, int | float) or not 0 <= floor <= 1:
            raise ConfigError(where, f"floors are shares of verify steps in [0, 1], got {floor!r} in {value!r}")
    return tuple(float(f) for f in value)


def _check_floors(floors: Any, servers: tuple[str, ...], config: SpecperfConfig, where: str) -> None:
    """Per-position acceptance needs drafts: not the reference, and no deeper than a server drafts."""
    lists = list(floors.values()) if isinstance(floors, Mapping) else [floors]
    deepest = max(
        0 if isinstance(f, AgainstHistory) else len(f) for f in lists
    )  # against history: as deep as it drafts
    for name in servers:
        server = config.servers[name]
        if not server.is_speculative:
            raise ConfigError(where, f"server {name!r} does not speculate: it has no draft positions")
        depth = draft_depth(server.algorithm, server.num_steps, server.num_draft_tokens)
        if depth is not None and deepest > depth:
            sizes = "num_draft_tokens - 1" if depth != server.num_steps else "num_steps"
            raise ConfigError(where, f"has {deepest} floors, but server {name!r} drafts {depth} positions ({sizes})")


def _names(value: Any, known: Mapping[str, Any], where: str, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list | tuple) or not names or not all(isinstance(n, str) for n in names):
        raise ConfigError(where, f"must be a {what} name or a list of names, got {value!r}")
    for name in names:
        if name not in known:
            raise ConfigError(
                where, f"unknown {what} {name!r}{did_you_mean(name, known)}; defined: {', '.join(sorted(known))}"
            )
    return tuple(dict.fromkeys(names))


def _per_level(value: Any, levels: list[int], where: str, parse: Any) -> Any:
    """A value for every level, or a {level: value} mapping naming measured levels only."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        out = {}
        for level, item in value.items():
            if isinstance(level, bool) or not isinstance(level, int) or level not in levels:
                raise ConfigError(where, f"mapping key {level!r} is not a concurrency level of the workload ({levels})")
            out[level] = parse(item, f"{where}[{level}]")
        return out
    return parse(value, where)


def _positive(value: Any, where: str) -> float:
    return check.number(value, where, minimum=0, exclusive_min=True, hint="1.1 for +10%")


def _range(value: Any, where: str) -> Range:
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise ConfigError(where, f"must be a (low, high) pair, None for an open end, got {value!r}")
    lo, hi = value
    for end in (lo, hi):
        if end is not None and (isinstance(end, bool) or not isinstance(end, int | float)):
            raise ConfigError(where, f"ends must be numbers or None, got {value!r}")
    if lo is None and hi is None:
        raise ConfigError(where, "(None, None) checks nothing; give at least one end")
    if lo is not None and hi is not None and lo > hi:
        raise ConfigError(where, f"low end {lo} is above high end {hi}")
    return (None if lo is None else float(lo), None if hi is None else float(hi))


#: `lossless=True`: the share of temperature-0 outputs that must equal the reference server's.
#: Not 1.0: bf16 kernels on tensor-parallel GPUs are not bit-identical across batch shapes, so a
#: correct speculative server still differs on a few prompts (vLLM's own EAGLE tests accept 66%).
DEFAULT_LOSSLESS = 0.9


def _lossless(value: Any, where: str) -> float | None:
    if value is True:
        return DEFAULT_LOSSLESS
    if value is False or value is None:
        return None
    if isinstance(value, int | float) and 0 < value <= 1:
        return float(value)
    raise ConfigError(
        where,
        f"must be true (at least {DEFAULT_LOSSLESS:.0%} identical outputs), false, or a share in (0, 1], got {value!r}",
    )


def _setting(name: str, kwargs: Mapping[str, Any], where: str) -> Any:
    """A marker argument the config file accepts too, checked by the same rule (config/values.py)."""
    value = kwargs.get(name)
    return None if value is None else check.setting(name, value, f"{where} {name}")
