"""vLLM: launch flags, readiness, OpenAI request and stream formats, per-request speculation metrics.

Checked against vLLM 0.32.0 (its CPU build runs this project's real-engine tests; see
docs/engines/vllm.md). Speculation is configured by one `--speculative-config` JSON; the portable keys
(algorithm, draft_model, num_steps) map onto it, and a server's raw `speculative_config` table is
passed as it is.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from prometheus_client.parser import text_string_to_metric_families

from pytest_specperf.engines.base import Engine, EngineRequest, SpecCounts, StreamMode, count_list

if TYPE_CHECKING:
    from pytest_specperf.config.settings import ServerConfig, SpecperfConfig
    from pytest_specperf.config.workloads import Prompt
    from pytest_specperf.measure.http import SamplingParams
    from pytest_specperf.measure.records import SpecCounters

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

RESERVED_FLAGS: Mapping[str, str] = {
    "--host": "the plugin sets it (use the server's `host` key)",
    "--port": "the plugin picks a free port",
    "--model": "use the `model` key",
    "--speculative-config": "use algorithm/draft_model/num_steps, or a `speculative_config` table",
    "--per-request-spec-decode-metrics": "the plugin sets it on speculative servers (it reads accept length from it)",
    "--api-key": "use the `api_key` key or SPECPERF_API_KEY, so it never lands in a report",
}


class VLLM(Engine):
    name = "vllm"
    known_versions = ("0.32.0",)
    readiness_path = "/health"
    flush_path = None  # POST /reset_prefix_cache exists only with VLLM_SERVER_DEV_MODE=1
    module = "vllm.entrypoints.openai.api_server"  # the `vllm serve` script is broken in the CPU wheel
    reserved_flags: ClassVar[Mapping[str, str]] = RESERVED_FLAGS

    def check_server(self, server: ServerConfig, where: str) -> None:
        from pytest_specperf.errors import ConfigError

        if server.eagle_topk is not None and server.eagle_topk > 1:
            raise ConfigError(f"{where} eagle_topk", "vLLM 0.32.0 has no tree drafts: use eagle_topk = 1 (a chain)")
        if server.speculative_config is not None:
            extra = [k for k in ("algorithm", "draft_model", "num_steps", "num_draft_tokens") if getattr(server, k)]
            if extra:
                raise ConfigError(
                    f"{where} {extra[0]}", "give either the portable keys or a raw `speculative_config`, not both"
                )
            if "method" not in server.speculative_config:
                raise ConfigError(f"{where} speculative_config", 'needs a "method" (e.g. "ngram", "eagle3")')
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
        if server.num_draft_tokens is not None and server.num_draft_tokens != server.num_steps + 1:
            raise ConfigError(
                f"{where} num_draft_tokens",
                f"a vLLM chain verifies num_steps + 1 = {server.num_steps + 1} tokens; got {server.num_draft_tokens}",
            )

    def speculative_config(self, server: ServerConfig) -> dict[str, Any] | None:
        """vLLM's `--speculative-config` for a server: its raw table, or the portable keys mapped."""
        if server.speculative_config is not None:
            return dict(server.speculative_config)
        if server.algorithm is None:
            return None
        spec: dict[str, Any] = {"method": METHODS[server.algorithm], "num_speculative_tokens": server.num_steps}
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
            # per-request accept length; a startup error on a server without speculation
            args += ["--per-request-spec-decode-metrics", "summary"]
        args += list(server.args)
        api_key = server.api_key or config.api_key or os.environ.get("SPECPERF_API_KEY")
        if api_key:
            args += ["--api-key", api_key]
        return args

    def request(self, prompt: Prompt, sampling: SamplingParams, model: str | None) -> EngineRequest:
        """Chat rows go to `/v1/chat/completions` (the model's chat template), text rows to `/v1/completions`."""
        common: dict[str, Any] = {
            **sampling.to_openai(),
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
            proposed_drafts=drafted if _is_int(drafted) else None,
            spec_tokens=accepted + steps,
            histogram=count_list(spec.get("acceptance_histogram")),
        )

    def version_path(self) -> str | None:
        return "/version"

    counters_path = "/metrics"  # open even with --api-key

    def spec_counters(self, metrics_text: str) -> SpecCounters | None:
        """`vllm:spec_decode_num_{drafts,draft_tokens,accepted_tokens}_total` and the per-position
        `vllm:spec_decode_num_accepted_tokens_per_pos_total{position="i"}`, summed over engines.

        None when the server has no `vllm:spec_decode_num_drafts_total` (a plain server) or the text
        does not parse.
        """
        from pytest_specperf.measure.records import SpecCounters

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


def _count(value: float) -> int:
    """A counter's value as the integer it counts (vLLM writes `29.0`)."""
    return round(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
