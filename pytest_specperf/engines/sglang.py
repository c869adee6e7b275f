"""SGLang: launch flags, readiness, request and stream formats, where speculation is reported.

Checked against SGLang 0.5.23 (docs/engines/sglang.md). The built-in simulator speaks the same
contract, so everything here is exercised on every test run.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from pytest_specperf.engines.base import Engine, EngineRequest, SpecCounts, StreamMode, count_list

if TYPE_CHECKING:
    from pytest_specperf.config.settings import ServerConfig, SpecperfConfig
    from pytest_specperf.config.workloads import Prompt
    from pytest_specperf.measure.http import SamplingParams

#: Algorithms SGLang 0.5.23 knows (docs/engines/sglang.md); plugins may register more.
KNOWN_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO")
#: Algorithms whose draft model must be named (EAGLE/NEXTN may default to the target's MTP head).
NEEDS_DRAFT_MODEL = ("EAGLE3", "STANDALONE")
#: Verify steps by number of accepted drafts (index = drafts accepted), on the final event; SGLang grows
#: the list as needed, so its length is the most drafts one step accepted, plus one.
HISTOGRAM = "spec_correct_drafts_histogram"
#: The same histogram's name in releases before 0.5.23 (some emitted both).
OLD_HISTOGRAM = "spec_accept_histogram"
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
    "--cuda-graph-max-bs": "removed in SGLang 0.5.23 (exit 2, 'ambiguous option'): use --cuda-graph-max-bs-decode",
}


#: Where an unset launch value can be read back from /server_info (servers attached by URL).
RESOLVED_FROM_SERVER_INFO: Mapping[str, str] = {
    "model": "model_path",
    "draft_model": "speculative_draft_model_path",
    "algorithm": "speculative_algorithm",
    "num_steps": "speculative_num_steps",
    "eagle_topk": "speculative_eagle_topk",
    "num_draft_tokens": "speculative_num_draft_tokens",
    "tp_size": "tp_size",
}
#: Resolved /server_info settings shown as drift: they change numbers without changing the config.
SERVER_INFO_FIELDS: tuple[str, ...] = (
    "attention_backend",
    "chunked_prefill_size",
    "cuda_graph_config",
    "disable_overlap_schedule",
    "dtype",
    "kv_cache_dtype",
    "max_running_requests",
    "mem_fraction_static",
    "page_size",
    "revision",
    "speculative_draft_model_revision",
)


class SGLang(Engine):
    name = "sglang"
    known_versions = ("0.5.23",)
    readiness_path = "/health_generate"
    flush_path = "/flush_cache"
    module = "sglang.launch_server"
    reserved_flags: ClassVar[Mapping[str, str]] = RESERVED_FLAGS
    resolved_from_info: ClassVar[Mapping[str, str]] = RESOLVED_FROM_SERVER_INFO
    info_fields: ClassVar[tuple[str, ...]] = SERVER_INFO_FIELDS

    def check_server(self, server: ServerConfig, where: str) -> None:
        from pytest_specperf.config.settings import ConfigError, check_speculative_rules

        check_speculative_rules(server, where)
        if server.speculative_config is not None:
            raise ConfigError(
                f"{where} speculative_config",
                "is vLLM's --speculative-config; for SGLang use algorithm, draft_model, num_steps, "
                "eagle_topk and num_draft_tokens",
            )

    def launch_args(self, server: ServerConfig, config: SpecperfConfig, port: int, max_concurrency: int) -> list[str]:
        """SGLang launch arguments for a server config (the same for SGLang and the simulator)."""
        from pytest_specperf.errors import ServerError

        model = config.model_of(server)
        if model is None:
            raise ServerError(f"server {server.name!r}: no model; set `model` globally or on the server")
        args = ["--model-path", model, "--host", server.host, "--port", str(port)]
        if server.algorithm:
            args += ["--speculative-algorithm", server.algorithm]
        if server.draft_model:
            args += ["--speculative-draft-model-path", server.draft_model]
        if server.num_steps is not None:
            args += [
                "--speculative-num-steps", str(server.num_steps),
                "--speculative-eagle-topk", str(server.eagle_topk),
                "--speculative-num-draft-tokens", str(server.num_draft_tokens),
            ]  # fmt: skip
        args += list(server.args)
        running = needed_max_running_requests(server, max_concurrency)
        if running is not None and server.arg_value("--max-running-requests") is None:
            args += ["--max-running-requests", str(running)]
        api_key = server.api_key or config.api_key or os.environ.get("SPECPERF_API_KEY")
        if api_key:
            args += ["--api-key", api_key]
        return args

    def request(self, prompt: Prompt, sampling: SamplingParams, model: str | None) -> EngineRequest:
        """Chat rows go through the server's chat template; text rows through native `/generate`."""
        if prompt.messages is not None:
            payload: dict[str, Any] = {
                "messages": [dict(m) for m in prompt.messages],
                **sampling.to_openai(),
                "stream": True,
                "stream_options": {"include_usage": True},
                "return_spec_tokens_details": True,
            }
            return EngineRequest("/v1/chat/completions", payload, "chat")
        payload = {"text": prompt.text, "sampling_params": sampling.to_sglang(), "stream": True}
        return EngineRequest("/generate", payload, "generate")

    def spec_counts(self, final: Mapping[str, Any], mode: StreamMode) -> SpecCounts | None:
        """`meta_info.spec_*` on /generate's final event; `sglext.spec_tokens_details` on chat's."""
        if mode == "generate":
            spec = final.get("meta_info")
        else:
            sglext = final.get("sglext")
            spec = sglext.get("spec_tokens_details") if isinstance(sglext, Mapping) else None
            if isinstance(spec, list):
                spec = spec[0] if spec else None
        if not isinstance(spec, Mapping) or not _is_int(spec.get("spec_verify_ct")):
            return None
        return SpecCounts(
            verify_steps=spec["spec_verify_ct"],
            accepted_drafts=_int_or_none(spec.get("spec_num_correct_drafts")),
            proposed_drafts=_int_or_none(spec.get("spec_num_proposed_drafts")),
            histogram=count_list(spec.get(HISTOGRAM)) or count_list(spec.get(OLD_HISTOGRAM)),
        )

    def reported_env(self, info: Mapping[str, Any]) -> Mapping[str, Any]:
        """`internal_states[0].env_vars` of /server_info: what the scheduler really runs with."""
        states = info.get("internal_states")
        if isinstance(states, list) and states and isinstance(states[0], Mapping):
            env_vars = states[0].get("env_vars")
            return dict(env_vars) if isinstance(env_vars, Mapping) else {}
        return {}


def needed_max_running_requests(server: ServerConfig, max_concurrency: int) -> int | None:
    """`--max-running-requests` to pass so the workload's concurrency is not silently capped."""
    if server.is_speculative and max_concurrency > SPEC_MAX_RUNNING_REQUESTS:
        return max_concurrency
    return None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int_or_none(value: Any) -> int | None:
    return value if _is_int(value) else None
