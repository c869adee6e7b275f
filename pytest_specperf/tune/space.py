"""The search space of `specperf tune`: the `[specperf.tune]` table and the candidate configs it spans.

Everything is checked here, before any server starts (a mistake found after a 15-minute start is a
wasted start): every error is one line naming the file, the key and what is allowed, and the command
exits 2. The table names a `base` server config; every candidate keeps the base's other settings and
takes one combination of the listed values:

- SGLang: `num_steps`, `eagle_topk`, `num_draft_tokens` (a list, or "valid": every value SGLang
  accepts for the steps and topk: steps + 1 for a chain, 2 to steps x topk + 1 for a tree) and
  `draft_model`;
- vLLM: `num_speculative_tokens`, `prompt_lookup_max` / `prompt_lookup_min` (ngram) and
  `draft_model` (written into the base's `speculative_config`, or its portable keys).

A key the engine does not have, an empty list, a size the engine refuses for every combination, a
`prompt_lookup_min` above every `prompt_lookup_max` and a budget below 3 starts are refused by name.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from pytest_specperf.config import values as check
from pytest_specperf.config.settings import ServerConfig, SpecperfConfig, display_path
from pytest_specperf.config.workloads import WorkloadConfig
from pytest_specperf.engines import engine_for
from pytest_specperf.engines.flags import EngineFlags
from pytest_specperf.engines.vllm import METHODS
from pytest_specperf.errors import ConfigError, did_you_mean

#: keys of `[specperf.tune]` whatever the engine
TABLE_KEYS = ("base", "workloads", "budget", "rounds", "max_rounds", "confidence")
#: the values each engine's candidates may vary
AXES = {
    "sglang": ("num_steps", "eagle_topk", "num_draft_tokens", "draft_model"),
    "vllm": ("num_speculative_tokens", "prompt_lookup_max", "prompt_lookup_min", "draft_model"),
}
VALID = "valid"
#: the reference, one config to learn from and one the model chose: fewer starts cannot search
MIN_BUDGET = 3
DEFAULT_BUDGET = 6
DEFAULT_ROUNDS = 2
DEFAULT_CONFIDENCE = 0.9
#: SGLang algorithms whose drafts form EAGLE-style trees (steps x topk, pruned to num_draft_tokens)
TREE_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")


@dataclass(frozen=True, order=True)
class Objective:
    """What one winner is chosen for: a workload at one concurrency level."""

    workload: str
    concurrency: int

    @property
    def label(self) -> str:
        return f"{self.workload} c{self.concurrency}"


@dataclass(frozen=True)
class Shape:
    """The draft a config verifies: what the cost and acceptance models see of it.

    One verify step accepts at most one path of the tree: no deeper than the draft steps and no longer
    than the draft tokens minus the root (`depth`); each depth holds at most topk candidates, and on
    average (draft tokens - 1) / steps of them (`width`).
    """

    steps: int
    topk: int
    draft_tokens: int

    @property
    def depth(self) -> int:
        return max(0, min(self.steps, self.draft_tokens - 1))

    @property
    def width(self) -> float:
        return max(1.0, min(float(self.topk), (self.draft_tokens - 1) / self.steps))

    @property
    def text(self) -> str:
        return f"{self.steps} steps, topk {self.topk}, {self.draft_tokens} draft tokens"


@dataclass(frozen=True)
class Candidate:
    """One server config the search may start: the reference, or the base with one combination."""

    label: str
    server: ServerConfig
    shape: Shape | None  # None for the reference
    #: the tuned keys and their values (what the ready-to-paste block and the JSON report say)
    settings: Mapping[str, Any]
    #: configs with the same group share their acceptance (same draft model and drafting settings)
    group: str = ""

    @property
    def is_reference(self) -> bool:
        return self.shape is None

    @property
    def draft(self) -> Shape:
        """The shape of a speculative candidate (the reference has none)."""
        if self.shape is None:
            raise ValueError(f"{self.label} is the reference: it drafts nothing")
        return self.shape


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
    engine = config.engine_name(base)
    _check_table_keys(table, engine, where)
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
    axes = {key: _axis(table[key], key, where) for key in AXES[engine] if key in table}
    build = _sglang_candidates if engine == "sglang" else _vllm_candidates
    # the flags the config's engines were checked against (the installed engine's, or its shipped list)
    flags = config.engine_flags.get(engine) or engine_for(engine).flags(config.python, config.env)
    candidates = build(base, axes, where, flags)
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


def _check_table_keys(table: Mapping[str, Any], engine: str, where: str) -> None:
    allowed = (*TABLE_KEYS, *AXES[engine])
    for key in table:
        if key in allowed:
            continue
        other = next((e for e, keys in AXES.items() if e != engine and key in keys), None)
        if other is not None:
            raise ConfigError(
                f"{where} {key}",
                f"is a {other} key; the base server runs {engine}, whose keys are {', '.join(AXES[engine])}",
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


# --- SGLang ----------------------------------------------------------------------------------------


def valid_draft_tokens(steps: int, topk: int) -> range:
    """Draft tokens SGLang runs for `steps` and `topk`: steps + 1 for a chain (topk 1; it silently
    corrects anything else), else 2 to steps x topk + 1 (the root plus at most every tree node)."""
    return range(steps + 1, steps + 2) if topk == 1 else range(2, steps * topk + 2)


def _sglang_candidates(
    base: ServerConfig, axes: Mapping[str, tuple[Any, ...]], where: str, flags: EngineFlags
) -> list[Candidate]:
    if base.algorithm not in TREE_ALGORITHMS:
        raise ConfigError(
            f"{where} base",
            f"server {base.name!r} runs {base.algorithm}; tune varies draft trees of {', '.join(TREE_ALGORITHMS)}",
        )
    steps = axes.get("num_steps") or _from_base(base.num_steps, "num_steps", where)
    topks = axes.get("eagle_topk") or _from_base(base.eagle_topk, "eagle_topk", where)
    tokens = axes.get("num_draft_tokens") or _from_base(base.num_draft_tokens, "num_draft_tokens", where)
    drafts = axes.get("draft_model") or (base.draft_model,)
    engine = engine_for("sglang")
    out, used = [], set()
    for draft, s, k in itertools.product(drafts, steps, topks):
        valid = valid_draft_tokens(s, k)
        for n in valid if tokens == (VALID,) else [t for t in tokens if t in valid]:
            used.add(n)
            label = f"s{s}-k{k}-n{n}" + (f"-d{drafts.index(draft) + 1}" if len(drafts) > 1 else "")
            server = replace(
                base, name=f"tune-{label}", num_steps=s, eagle_topk=k, num_draft_tokens=n, draft_model=draft
            )
            engine.check_server(server, f"{where} (candidate {label})", flags)
            settings = {"num_steps": s, "eagle_topk": k, "num_draft_tokens": n}
            if "draft_model" in axes:
                settings["draft_model"] = draft
            out.append(Candidate(label, server, Shape(s, k, n), MappingProxyType(settings), f"draft {draft}"))
    refused = [t for t in tokens if t != VALID and t not in used]
    if refused:
        raise ConfigError(
            f"{where} num_draft_tokens",
            f"{refused[0]} is valid for no num_steps and eagle_topk of the space (SGLang runs steps + 1 with "
            'eagle_topk 1, else 2 to steps x topk + 1); remove it, or use "valid"',
        )
    return out


def _from_base(value: int | None, key: str, where: str) -> tuple[int, ...]:
    if value is None:
        raise ConfigError(f"{where} {key}", "is not in the table, and the base server leaves it to SGLang: list values")
    return (value,)


# --- vLLM ------------------------------------------------------------------------------------------


def _vllm_candidates(
    base: ServerConfig, axes: Mapping[str, tuple[Any, ...]], where: str, flags: EngineFlags
) -> list[Candidate]:
    raw = dict(base.speculative_config) if base.speculative_config is not None else None
    method = str(raw.get("method")) if raw is not None else METHODS.get(base.algorithm or "", "")
    lookup = [k for k in ("prompt_lookup_max", "prompt_lookup_min") if k in axes]
    if lookup and (raw is None or method != "ngram"):
        raise ConfigError(
            f"{where} {lookup[0]}",
            "applies to vLLM's ngram method, given in the base server's speculative_config table (method = \"ngram\")",
        )
    base_tokens = raw.get("num_speculative_tokens") if raw is not None else base.num_steps
    tokens = axes.get("num_speculative_tokens") or _vllm_from_base(base_tokens, where)
    maxes = axes.get("prompt_lookup_max") or ((raw or {}).get("prompt_lookup_max"),)
    mins = axes.get("prompt_lookup_min") or ((raw or {}).get("prompt_lookup_min"),)
    drafts = axes.get("draft_model") or (((raw or {}).get("model") if raw is not None else base.draft_model),)
    engine = engine_for("vllm")
    out = []
    for draft, high, low, k in itertools.product(drafts, maxes, mins, tokens):
        if high is not None and low is not None and low > high:
            continue
        parts = [f"s{k}"] + [
            f"{tag}{v}"
            for tag, v, key in (("lmax", high, "prompt_lookup_max"), ("lmin", low, "prompt_lookup_min"))
            if key in axes
        ]
        if len(drafts) > 1:
            parts.append(f"d{drafts.index(draft) + 1}")
        label = "-".join(parts)
        settings: dict[str, Any] = {"num_speculative_tokens": k}
        if raw is not None:
            spec = {**raw, "num_speculative_tokens": k}
            for key, value in (("prompt_lookup_max", high), ("prompt_lookup_min", low), ("model", draft)):
                if value is not None:
                    spec[key] = value
            server = replace(base, name=f"tune-{label}", speculative_config=MappingProxyType(spec))
        else:
            server = replace(base, name=f"tune-{label}", num_steps=k, num_draft_tokens=None, draft_model=draft)
        for key, value in (("prompt_lookup_max", high), ("prompt_lookup_min", low), ("draft_model", draft)):
            if key in axes:
                settings[key] = value
        engine.check_server(server, f"{where} (candidate {label})", flags)
        group = " ".join(
            [
                method,
                *([f"lookup {low}-{high}"] if high is not None or low is not None else []),
                *([f"draft {draft}"] if draft else []),
            ]
        )
        out.append(Candidate(label, server, Shape(k, 1, k + 1), MappingProxyType(settings), group))
    if not out and lookup:
        raise ConfigError(f"{where} prompt_lookup_min", "is above every prompt_lookup_max: the space is empty")
    return out


def _vllm_from_base(value: Any, where: str) -> tuple[int, ...]:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(
            f"{where} num_speculative_tokens", "is not in the table, and the base server does not set it: list values"
        )
    return (value,)


def describe_axes(space: TuneSpace) -> list[str]:
    """The space as written, one line per key (for the plan)."""
    return [f"{key} = {', '.join(map(str, values))}" for key, values in space.axes.items()]


def settings_text(candidate: Candidate, keys: Sequence[str] | None = None) -> str:
    """'num_steps 3, eagle_topk 4, num_draft_tokens 10' (the reference: 'no speculation')."""
    if candidate.is_reference:
        return "no speculation"
    items = [(k, v) for k, v in candidate.settings.items() if keys is None or k in keys]
    return ", ".join(f"{k} {v}" for k, v in items)
