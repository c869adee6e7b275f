"""Status documents of the simulated server: /model_info, /server_info, /v1/loads, /v1/models, /metrics.

They have SGLang 0.5.23's shapes (the resolved arguments with `cuda_graph_config` nested per phase,
`launch_command` as the raw arguments joined, the API key in clear text as SGLang reports it, the
Prometheus labels of its scheduler and tokenizer collectors), but never pretend to be a real
SGLang: ``version`` carries a ``+specperf-sim`` suffix and ``/server_info`` has a top-level
``simulator`` block.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from .cli import SimServerConfig
from .engine import Snapshot

SGLANG_VERSION = "0.5.23"
VERSION = f"{SGLANG_VERSION}+specperf-sim"  # by default; `--sim-sglang-version` changes the release


@dataclass(frozen=True)
class ServerStatus:
    """What status documents need besides the config: tuning, readiness and engine counters."""

    config: SimServerConfig
    tuned: bool
    nccl_missing: tuple[str, ...]
    ready: bool
    startup_time: float
    snapshot: Snapshot


def model_info(cfg: SimServerConfig) -> dict:
    return {
        "model_path": cfg.model_path,
        "served_model_name": cfg.served_model_name,
        "tokenizer_path": cfg.model_path,
        "is_generation": True,
        "preferred_sampling_params": None,
        "weight_version": "default",
        "load_format": "auto",
        "reasoning_parser": None,
        "tool_call_parser": None,
        "disaggregation_mode": "null",
        "has_image_understanding": False,
        "has_audio_understanding": False,
        "model_type": cfg.profile.server.architecture.removesuffix("ForCausalLM").lower(),
        "architectures": [cfg.profile.server.architecture],
    }


def simulator_block(st: ServerStatus) -> dict:
    """The marker that says plainly this is a simulator, and with which settings."""
    s = st.config.sim
    return {
        "profile": st.config.profile.name,
        "profile_source": st.config.profile.source,
        "time_scale": s.time_scale,
        "seed": s.seed,
        "nccl_tuned": st.tuned,
        "nccl_tuning_env": dict(st.config.profile.nccl.env),
        "nccl_missing": list(st.nccl_missing),
        "faults": {
            "startup_seconds": s.startup_seconds,
            "fail_at_startup": s.fail_at_startup,
            "never_ready": s.never_ready,
            "exit_after_requests": s.exit_after_requests,
            "stop_after_requests": s.stop_after_requests,
            "error_rate": s.error_rate,
            "lossy_rate": s.lossy_rate,
        },
    }


def cuda_graph_config(cfg: SimServerConfig) -> dict:
    """`cuda_graph_config` as 0.5.23 resolves it: one PhaseConfig per phase (cuda_graph_config.py)."""

    def phase(backend: str, max_bs: int | None) -> dict:
        return {
            "backend": backend,
            "max_bs": max_bs,
            "bs": None,
            "tc_compiler": "eager",
            "max_context_size": None,
            "full_prefill_max_req": None,
            "full_prefill_prefix_chunk_tokens": None,
            "max_seq_len": None,
        }

    return {
        "decode": phase("full", cfg.cuda_graph_max_bs_decode),
        "prefill": phase("breakable", cfg.cuda_graph_max_bs_prefill),
    }


def resolved_args(cfg: SimServerConfig) -> dict:
    """The ServerArgs-like flat dict (unmodelled flags included, so fingerprints still see them)."""
    spec = cfg.spec
    prof = cfg.profile.server
    args: dict = dict(cfg.unmodelled_args)
    args.update(
        {
            "model_path": cfg.model_path,
            "tokenizer_path": cfg.model_path,
            "served_model_name": cfg.served_model_name,
            "host": cfg.host,
            "port": cfg.port,
            "tp_size": cfg.tp_size,
            "dp_size": 1,
            "pp_size": 1,
            "api_key": cfg.api_key,  # in clear text, as SGLang reports it (engine.py): the plugin must hide it
            "speculative_algorithm": cfg.speculative_algorithm,
            "speculative_draft_model_path": cfg.speculative_draft_model_path,
            "speculative_num_steps": spec.steps if spec else None,
            "speculative_eagle_topk": spec.topk if spec else None,
            "speculative_num_draft_tokens": spec.draft_tokens if spec else None,
            "max_running_requests": cfg.max_running_requests,
            "cuda_graph_max_bs_decode": cfg.cuda_graph_max_bs_given,
            "cuda_graph_max_bs_prefill": cfg.cuda_graph_max_bs_prefill,
            "cuda_graph_config": cuda_graph_config(cfg),
            "enable_deterministic_inference": cfg.deterministic,
            "mem_fraction_static": cfg.mem_fraction_static,
            "context_length": prof.context_length,
            "enable_metrics": cfg.enable_metrics,
            "log_level": cfg.log_level,
            "random_seed": cfg.random_seed,
            "decode_log_interval": 40,
            "stream_interval": 1,
            "device": device(cfg),
            "dtype": args.get("dtype", "auto"),
            "launch_command": cfg.launch_command,
        }
    )
    return args


def device(cfg: SimServerConfig) -> str:
    """The device a launch asked for (`--device cpu` makes a CPU server, as SGLang's CPU build is), else CUDA."""
    return str(cfg.unmodelled_args.get("device") or "cuda")


def server_info(st: ServerStatus) -> dict:
    cfg, snap = st.config, st.snapshot
    prof = cfg.profile.server
    info = resolved_args(cfg)
    info.update(
        {
            "status": "ready" if st.ready else "starting",
            "max_total_num_tokens": prof.max_total_num_tokens,
            "max_req_input_len": prof.context_length - 1,
            "startup_time": st.startup_time,
            "kv_events": None,
            "version": cfg.sim.version,
            "frontend": "python",
        }
    )
    state = {
        k: info[k]
        for k in (
            "speculative_algorithm",
            "speculative_num_steps",
            "speculative_eagle_topk",
            "speculative_num_draft_tokens",
            "max_running_requests",
            "cuda_graph_config",
        )
    }
    state.update(
        {
            "world_size": cfg.tp_size,
            "startup_time": st.startup_time,
            "effective_max_running_requests_per_dp": cfg.max_running_requests,
            "last_gen_throughput": snap.counters.last_gen_throughput,
            "memory_usage": {"weight": 0.0, "kvcache": 0.0, "graph": 0.0, "token_capacity": prof.max_total_num_tokens},
        }
    )
    accept = avg_accept_length(st)
    if accept is not None:
        state["avg_spec_accept_length"] = accept
    info["internal_states"] = [state]
    info["simulator"] = simulator_block(st)
    return info


def avg_accept_length(st: ServerStatus) -> float | None:
    """SGLang's lifetime average (folded every 40 decode iterations); absent when nothing was folded."""
    c = st.snapshot.counters
    if st.config.spec is None or c.total_forward_ct == 0:
        return None
    return c.total_accept_tokens / c.total_forward_ct


def loads(st: ServerStatus) -> dict:
    cfg, snap = st.config, st.snapshot
    load: dict = {
        "dp_rank": 0,
        "num_running_reqs": snap.running,
        "num_waiting_reqs": snap.waiting,
        "num_total_reqs": snap.running + snap.waiting,
        "token_usage": 0.0,
        "gen_throughput": snap.counters.last_gen_throughput,
        "max_running_requests": cfg.max_running_requests,
    }
    if cfg.spec is not None:
        c = snap.counters
        proposed = c.total_forward_ct * (cfg.spec.draft_tokens - 1)
        load["speculative"] = {
            "accept_length": avg_accept_length(st) or 0.0,
            "accept_rate": c.total_correct_drafts / proposed if proposed else 0.0,
        }
    return {
        "timestamp": dt.datetime.now(dt.UTC).isoformat(),
        "version": cfg.sim.version,
        # a CPU server reports no accelerator and one "accelerator" (SGLang's CPU build does)
        "accelerator": None if device(cfg) == "cpu" else cfg.profile.server.accelerator,
        "num_accelerators": 1 if device(cfg) == "cpu" else cfg.tp_size,
        "loads": [load],
    }


def models(cfg: SimServerConfig, created: int) -> dict:
    return {
        "object": "list",
        "data": [
            {
                "id": cfg.served_model_name,
                "object": "model",
                "created": created,
                "owned_by": "sglang",
                "root": cfg.model_path,
                "max_model_len": cfg.profile.server.context_length,
            }
        ],
    }


def metrics_text(st: ServerStatus) -> str:
    """Prometheus text exposition of the counters the plugin reads (contract §2.8), with SGLang's
    labels: `model_name, engine_type` on the tokenizer's metrics, plus `tp_rank, pp_rank,
    moe_ep_rank` on the scheduler's (reported by rank 0: metrics_collector.py)."""
    cfg, c = st.config, st.snapshot.counters
    tokenizer = f'model_name="{cfg.served_model_name}",engine_type="unified"'
    scheduler = f'{tokenizer},tp_rank="0",pp_rank="0",moe_ep_rank="0"'
    out: list[str] = []

    def metric(name: str, kind: str, help_: str, samples: list[tuple[str, float]], labels: str = tokenizer) -> None:
        out.append(f"# HELP sglang:{name} {help_}")
        out.append(f"# TYPE sglang:{name} {kind}")
        out.extend(f"sglang:{name}{{{labels}{extra}}} {float(value)}" for extra, value in samples)

    metric("prompt_tokens_total", "counter", "Number of prefill tokens processed.", [("", c.prompt_tokens)])
    metric(
        "generation_tokens_total",
        "counter",
        "Number of generation tokens processed.",
        [
            (',is_streaming="False"', c.generation_tokens_non_streaming),
            (',is_streaming="True"', c.generation_tokens_streaming),
        ],
    )
    metric("num_requests_total", "counter", "Number of requests processed.", [("", c.num_requests)])
    metric(
        "spec_verify_calls_total", "counter", "Total number of speculative verify calls.", [("", c.spec_verify_calls)]
    )
    running, waiting = st.snapshot.running, st.snapshot.waiting
    metric("num_running_reqs", "gauge", "The number of running requests.", [("", running)], scheduler)
    metric("num_queue_reqs", "gauge", "The number of requests in the waiting queue.", [("", waiting)], scheduler)
    metric("gen_throughput", "gauge", "The generation throughput (token/s).", [("", c.last_gen_throughput)], scheduler)
    if cfg.spec is not None:
        accept = avg_accept_length(st) or 0.0
        metric(
            "spec_accept_length",
            "gauge",
            "The average acceptance length of speculative decoding.",
            [("", accept)],
            scheduler,
        )
        tokens = cfg.spec.draft_tokens
        metric("spec_num_draft_tokens", "gauge", "Number of draft tokens per verify.", [("", tokens)], scheduler)
    return "\n".join(out) + "\n"
