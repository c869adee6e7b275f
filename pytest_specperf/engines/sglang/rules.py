"""SGLang's launch rules: how its argparse reads a flag, and what its speculative hooks assert,
override or silently correct, refused here at collection time instead.

Read from SGLang's source (docs/engines/sglang.md cites each rule): flags come from the installed
SGLang's own parser where the configured interpreter has one (`engines/flags.py`); the size rules
differ per algorithm (`srt/arg_groups/speculative_hook.py`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from pytest_specperf.engines.base import LikeForLike
from pytest_specperf.engines.flags import EngineFlags
from pytest_specperf.errors import ConfigError

if TYPE_CHECKING:
    from pytest_specperf.config.settings import ServerConfig

#: Algorithms SGLang 0.5.23 knows (`spec_info.py`: the enum, FROZEN_KV_MTP included, and the NEXTN alias).
SHIPPED_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO", "FROZEN_KV_MTP")
#: The EAGLE family (`_handle_eagle_family`): sizes all or none, topk 1 means draft tokens = steps + 1.
EAGLE_FAMILY = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "FROZEN_KV_MTP")
#: Block drafters: SGLang forces steps and topk to 1 (overriding other values with a warning only).
BLOCK_DRAFTERS = ("DFLASH", "DSPARK")
#: Algorithms whose draft model must be named (EAGLE/NEXTN may default to the target's MTP head).
NEEDS_DRAFT_MODEL = ("EAGLE3", "STANDALONE", "DFLASH")
#: Speculative servers cap running requests at this unless told otherwise.
SPEC_MAX_RUNNING_REQUESTS = 48

#: Flags the plugin sets itself, or that have a dedicated key; refused inside `args`.
RESERVED_FLAGS: Mapping[str, str] = {
    "--host": "the plugin sets it (use the server's `host` key)",
    "--port": "the plugin picks a free port",
    "--model-path": "use the `model` key",
    "--model": "use the `model` key",
    "--speculative-algorithm": "use the `algorithm` key",
    "--speculative-draft-model-path": "use the `draft_model` key",
    "--speculative-draft-model": "use the `draft_model` key",
    "--speculative-num-steps": "use the `num_steps` key",
    "--speculative-eagle-topk": "use the `eagle_topk` key",
    "--speculative-num-draft-tokens": "use the `num_draft_tokens` key",
    "--api-key": "use the `api_key` key or SPECPERF_API_KEY, so it never lands in a report",
    "--admin-api-key": "not supported: /flush_cache would need it before every round; use `api_key` alone",
}
#: What SGLang says makes no difference between a speedup's reference and a speculative server:
#: * it turns the overlap schedule off for speculation itself ("Overlap schedule is not implemented for
#:   speculative decoding on CPU.", "Non-overlap (synchronous) spec v2 is used for eagle/eagle3/standalone
#:   speculative decoding.": `server_args.py`), so a speculative server reports `disable_overlap_schedule`
#:   true without having asked for it;
#: * `mem_fraction_static`, unless asked, is computed from the free memory at start (0.843 and 0.846 on
#:   one CPU, minutes apart);
#: * `dtype` `auto` is the model's own dtype (its `config.json`, recorded as `model.dtype`);
#: * a CPU has no CUDA graphs: `--disable-cuda-graph` and the `cuda_graph_config` it resolves do nothing there;
#: * `--disable-cuda-graph` is reported as `cuda_graph_config`'s backends (0.5.23): judged by those, once.
LIKE_FOR_LIKE = LikeForLike(
    forced={"server.disable_overlap_schedule": "true"},
    automatic=("server.mem_fraction_static",),
    resolved={"server.dtype": "model.dtype"},
    inert={
        "cpu": (
            "server.cuda_graph_*",
            "server.disable_cuda_graph*",
            "server.flag --cuda-graph-*",
            "server.flag --disable-cuda-graph*",
            "server.flag --enable-cuda-graph*",
        )
    },
    effects={
        "--disable-cuda-graph": ("server.cuda_graph_config.*.backend", "server.disable_cuda_graph"),
    },
)

#: The flag SGLang 0.5.23 removed (it became `--cuda-graph-max-bs-decode`/`-prefill`); refused only
#: where the installed SGLang does not have it.
REMOVED_CUDA_GRAPH_FLAG = "--cuda-graph-max-bs"


def spell_out(args: Sequence[str], where: str, flags: EngineFlags) -> tuple[str, ...]:
    """`args` with every abbreviated flag written in full, as SGLang's argparse reads it.

    SGLang keeps argparse's prefix matching: `--tp 8` is `--tp-size 8`, `--po 1` is `--port 1`.
    Checks and identities compare whole flags, so an abbreviation would slip past the reserved
    flags or count a TP8 server as one GPU. A reserved flag is reported as written, an ambiguous
    prefix is refused with the candidates (SGLang exits 2 on it); unknown flags are `check_args`'s.
    """
    out = []
    for arg in args:
        flag, eq, value = arg.partition("=")
        if not flag.startswith("--") or flag in RESERVED_FLAGS:
            out.append(arg)
            continue
        resolved = flags.resolve(flag)
        if isinstance(resolved, list):
            if flag == REMOVED_CUDA_GRAPH_FLAG:
                raise ConfigError(where, _removed_message(flags))
            raise ConfigError(
                where,
                f"ambiguous option: {flag} could match {', '.join(resolved)} (SGLang exits 2); write the flag in full",
            )
        if resolved is not None and resolved in RESERVED_FLAGS and resolved != flag:
            raise ConfigError(
                where, f"{flag} (SGLang reads it as {resolved}) is not allowed here: {RESERVED_FLAGS[resolved]}"
            )
        out.append((resolved or flag) + eq + value)
    return tuple(out)


def check_args(args: Sequence[str], where: str, flags: EngineFlags) -> None:
    """Refuse a flag the SGLang in use does not know (argparse would exit 2 on it after a long
    import), and a value outside a flag's choices, naming the closest flag or the allowed values."""
    for i, arg in enumerate(args):
        flag, eq, inline = arg.partition("=")
        if not flag.startswith("--"):
            continue
        if flag == REMOVED_CUDA_GRAPH_FLAG and flag not in flags.options:
            raise ConfigError(where, _removed_message(flags))
        if flags.resolve(flag) is None:
            raise ConfigError(
                where,
                f"unrecognized argument {flag}: {_known_by(flags)} does not have it{flags.suggestion(flag)}",
            )
        allowed = flags.choices.get(flags.primary(flag))
        value = inline if eq else (args[i + 1] if i + 1 < len(args) else None)
        if allowed and value is not None and not value.startswith("--") and value not in allowed:
            raise ConfigError(
                where, f"{flag} {value!r}: {_known_by(flags)} allows {', '.join(allowed)}{_close(value, allowed)}"
            )


def known_algorithms(flags: EngineFlags) -> tuple[str, ...]:
    """The algorithms the installed SGLang accepts: its algorithm enum's, else its parser's choices for
    `--speculative-algorithm` (a build whose enum cannot be imported still lists them), else the shipped list."""
    if flags.algorithms is not None:
        return flags.algorithms
    choices = flags.choices.get("--speculative-algorithm")
    if flags.installed and choices:
        return tuple(c for c in choices if c.upper() != "NONE")
    return SHIPPED_ALGORITHMS


def check_speculative(server: ServerConfig, where: str, flags: EngineFlags) -> None:
    """SGLang's speculative rules for the server's algorithm (docs/engines/sglang.md)."""
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
    known = known_algorithms(flags)
    if server.algorithm not in known:
        raise ConfigError(
            f"{where} algorithm",
            f"unknown speculative algorithm {server.algorithm!r}; {_known_by(flags)} knows {', '.join(known)}"
            f"{_close(server.algorithm, known)}",
        )
    if server.algorithm in NEEDS_DRAFT_MODEL and not server.draft_model:
        raise ConfigError(f"{where} draft_model", f"is required for algorithm {server.algorithm}")
    if server.algorithm in EAGLE_FAMILY:
        _check_eagle_sizes(server, where, sizes, given)
    elif server.algorithm == "NGRAM" and server.eagle_topk is not None:
        raise ConfigError(
            f"{where} eagle_topk",
            "SGLang overwrites it for NGRAM with --speculative-ngram-max-bfs-breadth (default 10), so the run "
            "would not be what the config says; leave eagle_topk out and set that flag in `args` instead",
        )
    elif server.algorithm in BLOCK_DRAFTERS:
        for key in ("num_steps", "eagle_topk"):
            if sizes[key] not in (None, 1):
                raise ConfigError(
                    f"{where} {key}",
                    f"{server.algorithm} drafts a block in one step: SGLang overrides {key} to 1 with a warning "
                    f"(got {sizes[key]}); leave it out (num_draft_tokens is the block's verify width)",
                )


def _check_eagle_sizes(server: ServerConfig, where: str, sizes: dict[str, int | None], given: list[str]) -> None:
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
            f"{where} num_draft_tokens", f"{draft} is more than num_steps * eagle_topk + 1 = {steps * topk + 1}"
        )


def _known_by(flags: EngineFlags) -> str:
    if flags.installed:
        return f"the installed SGLang {flags.version or ''}".rstrip()
    return f"SGLang {flags.version} (the shipped list: {flags.fallback_reason})"


def _removed_message(flags: EngineFlags) -> str:
    return (
        f"{REMOVED_CUDA_GRAPH_FLAG} is not a flag of {_known_by(flags)}: it was removed in SGLang 0.5.23 "
        "(exit 2, 'ambiguous option'); use --cuda-graph-max-bs-decode"
    )


def _close(value: str, allowed: Sequence[str]) -> str:
    from pytest_specperf.errors import did_you_mean

    return did_you_mean(value, allowed)
