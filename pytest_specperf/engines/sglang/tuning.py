"""SGLang's search space for `specperf tune`: EAGLE-style draft trees, sized by `num_steps`,
`eagle_topk` and `num_draft_tokens` (a list, or "valid": every value SGLang runs for the steps and
topk), and `draft_model`. Each combination is checked as a server config would be, so a candidate
SGLang refuses is never started.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from pytest_specperf.engines.tuning import VALID, Candidate, Shape
from pytest_specperf.errors import ConfigError

if TYPE_CHECKING:
    from pytest_specperf.config.settings import ServerConfig
    from pytest_specperf.engines.base import Engine
    from pytest_specperf.engines.flags import EngineFlags

#: the keys a search varies
AXES = ("num_steps", "eagle_topk", "num_draft_tokens", "draft_model")
#: algorithms whose drafts form EAGLE-style trees (steps x topk, pruned to num_draft_tokens)
TREE_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")


def valid_draft_tokens(steps: int, topk: int) -> range:
    """Draft tokens SGLang runs for `steps` and `topk`: steps + 1 for a chain (topk 1; it silently
    corrects anything else), else 2 to steps x topk + 1 (the root plus at most every tree node)."""
    return range(steps + 1, steps + 2) if topk == 1 else range(2, steps * topk + 2)


def candidates(
    engine: Engine, base: ServerConfig, axes: Mapping[str, tuple[Any, ...]], where: str, flags: EngineFlags
) -> list[Candidate]:
    """The base with every combination of the axes SGLang runs, each checked as a server config."""
    if base.algorithm not in TREE_ALGORITHMS:
        raise ConfigError(
            f"{where} base",
            f"server {base.name!r} runs {base.algorithm}; tune varies draft trees of {', '.join(TREE_ALGORITHMS)}",
        )
    steps = axes.get("num_steps") or _from_base(base.num_steps, "num_steps", where)
    topks = axes.get("eagle_topk") or _from_base(base.eagle_topk, "eagle_topk", where)
    tokens = axes.get("num_draft_tokens") or _from_base(base.num_draft_tokens, "num_draft_tokens", where)
    drafts = axes.get("draft_model") or (base.draft_model,)
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
            settings: dict[str, Any] = {"num_steps": s, "eagle_topk": k, "num_draft_tokens": n}
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


def settings(server: ServerConfig) -> dict[str, Any]:
    """A candidate's speculative settings as SGLang reads them."""
    found: dict[str, Any] = {"algorithm": server.algorithm, "draft_model": server.draft_model}
    if server.num_draft_tokens is None:
        found["num_speculative_tokens"] = server.num_steps
    else:
        found.update(num_steps=server.num_steps, eagle_topk=server.eagle_topk, num_draft_tokens=server.num_draft_tokens)
    return found


def _from_base(value: int | None, key: str, where: str) -> tuple[int, ...]:
    if value is None:
        raise ConfigError(f"{where} {key}", "is not in the table, and the base server leaves it to SGLang: list values")
    return (value,)
