"""The search space of `specperf tune`: the `[specperf.tune]` table and the candidate configs it spans.

Everything is checked here, before any server starts (a mistake found after a 15-minute start is a
wasted start): every error is one line naming the file, the key and what is allowed, and the command
exits 2. The table names a `base` server config; every candidate keeps the base's other settings and
takes one combination of the listed values. Which keys a base server's engine lets a search vary, and
which combinations it runs, the engine says (`Engine.tune_axes`, `Engine.tune_candidates`: SGLang's
draft trees in engines/sglang/tuning.py, vLLM's `speculative_config` in engines/vllm_tuning.py); this
module reads the table, the axes' values and the search's limits, and names no engine.

A key the engine does not have, an empty list, a size the engine refuses for every combination and a
budget below 3 starts are refused by name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from pytest_specperf.config import values as check
from pytest_specperf.config.settings import ServerConfig, SpecperfConfig, display_path
from pytest_specperf.config.workloads import WorkloadConfig
from pytest_specperf.engines import Engine, engine_for, engine_names
from pytest_specperf.engines.suite import ServerPlan
from pytest_specperf.engines.tuning import VALID, Candidate, Shape
from pytest_specperf.errors import ConfigError, did_you_mean

__all__ = ["VALID", "Candidate", "Objective", "Shape", "TuneSpace", "load_space", "tune_keys"]

#: keys of `[specperf.tune]` whatever the engine
TABLE_KEYS = ("base", "workloads", "budget", "rounds", "max_rounds", "confidence")
#: the reference, one config to learn from and one the model chose: fewer starts cannot search
MIN_BUDGET = 3
DEFAULT_BUDGET = 6
DEFAULT_ROUNDS = 2
DEFAULT_CONFIDENCE = 0.9


@dataclass(frozen=True, order=True)
class Objective:
    """What one winner is chosen for: a workload at one concurrency level."""

    workload: str
    concurrency: int

    @property
    def label(self) -> str:
        return f"{self.workload} c{self.concurrency}"


@dataclass(frozen=True)
class TuneSpace:
    """A validated `[specperf.tune]` table: the candidates, the objectives and the search's limits."""

    where: str
    engine: str
    base: ServerConfig
    reference: Candidate
    candidates: tuple[Candidate, ...]
    axes: Mapping[str, tuple[Any, ...]]
    workloads: tuple[WorkloadConfig, ...]
    budget: int
    rounds: int
    max_rounds: int
    confidence: float
    #: the base server with its engine, resolved once: the candidates, the plan and the report ask it
    plan: ServerPlan

    @property
    def objectives(self) -> tuple[Objective, ...]:
        return tuple(Objective(w.name, level) for w in self.workloads for level in w.concurrency)

    @property
    def max_concurrency(self) -> int:
        return max(level for w in self.workloads for level in w.concurrency)

    def candidate(self, label: str) -> Candidate:
        if label == self.reference.label:
            return self.reference
        return next(c for c in self.candidates if c.label == label)

    def run_config(self, config: SpecperfConfig) -> SpecperfConfig:
        """The config the runs use: the reference and every candidate as server configs."""
        servers = {self.reference.server.name: self.reference.server}
        servers.update({c.server.name: c.server for c in self.candidates})
        return replace(config, servers=MappingProxyType(servers))


def table_where(config: SpecperfConfig) -> str:
    """`specperf.toml [specperf.tune]` (or `pyproject.toml [tool.specperf.tune]`): where errors point."""
    if config.source is None:
        return "[specperf.tune]"
    prefix = "tool.specperf" if config.source.name == "pyproject.toml" else "specperf"
    return f"{display_path(config.source)} [{prefix}.tune]"


def load_space(config: SpecperfConfig, *, budget: int | None = None) -> TuneSpace:
    """The validated search space of `config`'s `[specperf.tune]` table (`budget` overrides its own)."""
    where = table_where(config)
    table = dict(config.tune)
    if not table:
        raise ConfigError(where, "no such table: add one with `base` (a server config) and the values to try")
    base = _base(config, table, where)
    plan = ServerPlan.of(config, base)
    engine = plan.engine.name
    _check_table_keys(table, plan.engine, where)
    reference = config.reference_server
    if reference is None:
        raise ConfigError(f"{where} base", f"the reference server {config.reference!r} is not defined")
    workloads = _workloads(config, table, where)
    rounds = check.integer(table.get("rounds", DEFAULT_ROUNDS), f"{where} rounds", minimum=2)
    max_rounds = check.integer(
        table.get("max_rounds", max(rounds, config.rounds)), f"{where} max_rounds", minimum=rounds
    )
    chosen = budget if budget is not None else table.get("budget", DEFAULT_BUDGET)
    budget_where = "--budget" if budget is not None else f"{where} budget"
    starts = check.integer(chosen, budget_where)
    if starts < MIN_BUDGET:
        raise ConfigError(
            budget_where,
            f"must be >= {MIN_BUDGET} server starts (the reference, one config to learn from, one the model "
            f"chooses), got {starts}",
        )
    confidence = check.number(
        table.get("confidence", DEFAULT_CONFIDENCE),
        f"{where} confidence",
        minimum=0.5,
        maximum=1.0,
        exclusive_min=True,
        exclusive_max=True,
        hint="0.9",
    )
    runs = plan.engine
    axes = {key: _axis(table[key], key, where) for key in runs.tune_axes if key in table}
    # the flags the config's engines were checked against (the installed engine's, or its shipped list)
    flags = config.engine_flags.get(engine) or runs.flags(config.python, config.env)
    candidates = runs.tune_candidates(base, axes, where, flags)
    if not candidates:
        raise ConfigError(where, "the space is empty: no combination of the listed values is a config the engine runs")
    ref = Candidate(reference.name, reference, None, MappingProxyType({}))
    return TuneSpace(
        where,
        engine,
        base,
        ref,
        tuple(candidates),
        MappingProxyType(axes),
        workloads,
        starts,
        rounds,
        max_rounds,
        confidence,
        plan,
    )


def _base(config: SpecperfConfig, table: Mapping[str, Any], where: str) -> ServerConfig:
    if "base" not in table:
        raise ConfigError(f"{where} base", "is required: the server config whose other settings every candidate keeps")
    name = check.string(table["base"], f"{where} base")
    if name not in config.servers:
        known = ", ".join(sorted(config.servers)) or "none"
        raise ConfigError(
            f"{where} base",
            f"names server {name!r}, which is not defined{did_you_mean(name, config.servers)}; defined: {known}",
        )
    server = config.servers[name]
    if not server.is_speculative:
        raise ConfigError(f"{where} base", f"server {name!r} does not speculate; name a speculative config to vary")
    if server.is_attached:
        raise ConfigError(f"{where} base", f"server {name!r} is attached by URL; tune must launch its candidates")
    return server


def tune_keys() -> dict[str, tuple[str, ...]]:
    """The keys a `[specperf.tune]` table may hold, by engine: the table's own and the engine's axes."""
    return {name: (*TABLE_KEYS, *engine_for(name).tune_axes) for name in engine_names()}


def _check_table_keys(table: Mapping[str, Any], runs: Engine, where: str) -> None:
    engine, axes = runs.name, runs.tune_axes
    allowed = (*TABLE_KEYS, *axes)
    for key in table:
        if key in allowed:
            continue
        other = next((name for name, keys in tune_keys().items() if name != engine and key in keys), None)
        if other is not None:
            raise ConfigError(
                f"{where} {key}",
                f"is a {other} key; the base server runs {engine}, whose keys are {', '.join(axes) or 'none'}",
            )
    check.known_keys(table, allowed, where)


def _workloads(config: SpecperfConfig, table: Mapping[str, Any], where: str) -> tuple[WorkloadConfig, ...]:
    names = check.string_list(table.get("workloads", ["default"]), f"{where} workloads")
    if not names:
        raise ConfigError(f"{where} workloads", "is empty: name at least one workload")
    found = []
    for name in dict.fromkeys(names):
        if name not in config.workloads:
            raise ConfigError(
                f"{where} workloads",
                f"names workload {name!r}, which is not defined{did_you_mean(name, config.workloads)}; "
                f"defined: {', '.join(sorted(config.workloads))}",
            )
        workload = config.workloads[name]
        if workload.is_open_loop:
            raise ConfigError(
                f"{where} workloads",
                f"workload {name!r} has a request_rate (open loop): tune compares closed-loop throughput per level",
            )
        found.append(workload)
    return tuple(found)


def _axis(raw: Any, key: str, where: str) -> tuple[Any, ...]:
    """One axis: a non-empty list of positive integers (strings for draft_model), or "valid"."""
    at = f"{where} {key}"
    if key == "num_draft_tokens" and raw == VALID:
        return (VALID,)
    if not isinstance(raw, list):
        extra = ' or "valid"' if key == "num_draft_tokens" else ""
        raise ConfigError(at, f"must be a list of values to try{extra}, got {check.given(raw)}")
    if not raw:
        raise ConfigError(at, "is an empty list: the space would be empty")
    if key == "draft_model":
        values: list[Any] = [check.string(v, at) for v in raw]
    else:
        values = [check.integer(v, at, minimum=1) for v in raw]
    return tuple(dict.fromkeys(values))


def describe_axes(space: TuneSpace) -> list[str]:
    """The space as written, one line per key (for the plan)."""
    return [f"{key} = {', '.join(map(str, values))}" for key, values in space.axes.items()]


def settings_text(candidate: Candidate, keys: Sequence[str] | None = None) -> str:
    """'num_steps 3, eagle_topk 4, num_draft_tokens 10' (the reference: 'no speculation')."""
    if candidate.is_reference:
        return "no speculation"
    items = [(k, v) for k, v in candidate.settings.items() if keys is None or k in keys]
    return ", ".join(f"{k} {v}" for k, v in items)
