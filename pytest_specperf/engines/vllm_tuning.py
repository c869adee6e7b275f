"""vLLM's search space for `specperf tune`: `num_speculative_tokens`, `prompt_lookup_max` /
`prompt_lookup_min` (the ngram method) and `draft_model`, written into the base server's
`speculative_config` (or its portable keys). Each combination is checked as a server config would be.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from pytest_specperf.engines.tuning import Candidate, Shape
from pytest_specperf.errors import ConfigError

if TYPE_CHECKING:
    from pytest_specperf.config.settings import ServerConfig
    from pytest_specperf.engines.base import Engine
    from pytest_specperf.engines.flags import EngineFlags

#: the keys a search varies
AXES = ("num_speculative_tokens", "prompt_lookup_max", "prompt_lookup_min", "draft_model")


def candidates(
    engine: Engine,
    base: ServerConfig,
    axes: Mapping[str, tuple[Any, ...]],
    where: str,
    flags: EngineFlags,
    methods: Mapping[str, str],
) -> list[Candidate]:
    """The base with every combination of the axes, each checked as a server config (`methods`: the
    portable algorithm names as vLLM's `method`)."""
    raw = dict(base.speculative_config) if base.speculative_config is not None else None
    method = str(raw.get("method")) if raw is not None else methods.get(base.algorithm or "", "")
    lookup = [k for k in ("prompt_lookup_max", "prompt_lookup_min") if k in axes]
    if lookup and (raw is None or method != "ngram"):
        raise ConfigError(
            f"{where} {lookup[0]}",
            "applies to vLLM's ngram method, given in the base server's speculative_config table (method = \"ngram\")",
        )
    base_tokens = raw.get("num_speculative_tokens") if raw is not None else base.num_steps
    tokens = axes.get("num_speculative_tokens") or _from_base(base_tokens, where)
    maxes = axes.get("prompt_lookup_max") or ((raw or {}).get("prompt_lookup_max"),)
    mins = axes.get("prompt_lookup_min") or ((raw or {}).get("prompt_lookup_min"),)
    drafts = axes.get("draft_model") or (((raw or {}).get("model") if raw is not None else base.draft_model),)
    out = []
    for draft, high, low, k in itertools.product(drafts, maxes, mins, tokens):
        if high is not None and low is not None and low > high:
            continue
        label = _label(k, high, low, draft, drafts, axes)
        if raw is not None:
            spec = {**raw, "num_speculative_tokens": k}
            for key, value in (("prompt_lookup_max", high), ("prompt_lookup_min", low), ("model", draft)):
                if value is not None:
                    spec[key] = value
            server = replace(base, name=f"tune-{label}", speculative_config=MappingProxyType(spec))
        else:
            server = replace(base, name=f"tune-{label}", num_steps=k, num_draft_tokens=None, draft_model=draft)
        settings: dict[str, Any] = {"num_speculative_tokens": k}
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


def _label(k: int, high: Any, low: Any, draft: Any, drafts: tuple[Any, ...], axes: Mapping[str, Any]) -> str:
    parts = [f"s{k}"] + [
        f"{tag}{v}"
        for tag, v, key in (("lmax", high, "prompt_lookup_max"), ("lmin", low, "prompt_lookup_min"))
        if key in axes
    ]
    if len(drafts) > 1:
        parts.append(f"d{drafts.index(draft) + 1}")
    return "-".join(parts)


def _from_base(value: Any, where: str) -> tuple[int, ...]:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(
            f"{where} num_speculative_tokens", "is not in the table, and the base server does not set it: list values"
        )
    return (value,)
