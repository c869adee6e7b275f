"""Process lifecycle of the simulator: logging, the startup sequence with its fault switches, serving.

The order mirrors SGLang so a launcher sees what it would see on a GPU box: the HTTP port answers 503
while "weights load" and "CUDA graphs capture", one warmup generation runs, then the ready line is
logged and readiness endpoints turn 200.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import sys
import threading
import time

from .cli import PROG, SimConfigError, SimServerConfig, parse_config
from .engine import Engine, EngineSettings, SimSamplingParams
from .nccl import SOCKET_COMM_FACTOR, SOCKET_FALLBACK_ENV, over_sockets
from .nodes import Rendezvous, follow
from .server import ServerState, SimHTTPServer
from .text import SimPrompt

log = logging.getLogger("specperf.sim")

READY_LINE = "The server is fired up and ready to roll!"
WARMUP_PROMPT = "The capital city of France is"


class _Formatter(logging.Formatter):
    """SGLang's ``[time] message`` lines, with the level spelled out for warnings and errors."""

    def format(self, record: logging.LogRecord) -> str:
        msg = super().format(record)
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.created))
        level = "" if record.levelno == logging.INFO else f"{record.levelname}: "
        return f"[{stamp}] {level}{msg}"


def setup_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter())
    log.handlers[:] = [handler]
    log.setLevel(level.upper())
    log.propagate = False


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m pytest_specperf.sim``."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        config = parse_config(argv)
    except SimConfigError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    setup_logging(config.log_level)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    if config.nodes.rank > 0:  # a rank other than 0 serves no HTTP: it joins rank 0 and stays
        try:
            return follow(config.nodes, stop)
        except KeyboardInterrupt:
            return 0
    config, tuned, missing = _communication(config)
    _banner(config, tuned, missing)
    engine = _engine(config, tuned)
    _log_noise(config, engine)
    state = ServerState(config, engine, tuned, missing)
    httpd = _bind(state)
    return 1 if httpd is None else _serve(state, httpd, stop)


def _communication(config: SimServerConfig) -> tuple[SimServerConfig, bool, tuple[str, ...]]:
    """The NCCL environment as the profile judges it: tuned or not, what is missing, and a slower
    communication when NCCL would fall back to sockets."""
    missing = tuple(config.profile.nccl.missing(os.environ))
    tuned = config.profile.nccl.is_tuned(os.environ)
    if over_sockets(os.environ):
        config = dataclasses.replace(config, profile=config.profile.slower_communication(SOCKET_COMM_FACTOR))
        log.info(
            "sim: %s are both set: NCCL communicates over sockets, %gx slower",
            " and ".join(SOCKET_FALLBACK_ENV),
            SOCKET_COMM_FACTOR,
        )
    return config, tuned, missing


def _engine(config: SimServerConfig, tuned: bool) -> Engine:
    """The batching engine with every setting the launch resolved."""
    return Engine(
        EngineSettings(
            profile=config.profile,
            spec=config.spec,
            tuned=tuned,
            max_running_requests=config.max_running_requests,
            cuda_graph_max_bs=config.cuda_graph_max_bs_decode,
            time_scale=config.sim.time_scale,
            seed=config.sim.seed,
            lossy_rate=config.sim.lossy_rate,
            run_jitter=config.sim.run_jitter,
            round_jitter=config.sim.round_jitter,
            start_seed=_start_seed(config),
            batch_acceptance=config.sim.batch_acceptance,
            deterministic=config.deterministic,
            night=config.sim.night,
            night_noise=config.sim.night_noise,
            node_swing=config.sim.node_swing,
            node_seed=config.sim.node_seed,
            eager=config.sim.eager,
            warmup_ramp=config.sim.warmup_ramp,
        )
    )


def _log_noise(config: SimServerConfig, engine: Engine) -> None:
    """Say in the log which noise this start draws, so a surprising number can be traced to its flag."""
    if config.sim.run_jitter or config.sim.round_jitter or config.sim.night is not None:
        log.info(
            "sim: run speed factor %.4f (--sim-run-jitter %g, night %s), per-round CV %g",
            engine.run_factor,
            config.sim.run_jitter,
            config.sim.night,
            config.sim.round_jitter,
        )
    if config.sim.batch_acceptance:
        log.info(
            "sim: acceptance depends on which prompts share a decode step (--sim-batch-acceptance %g)",
            config.sim.batch_acceptance,
        )


def _bind(state: ServerState) -> SimHTTPServer | None:
    """The HTTP server on its port, or None after logging uvicorn's words for a port that is taken."""
    try:
        return SimHTTPServer(state)
    except OSError as exc:  # uvicorn's words, as SGLang's log shows them
        log.error(
            "ERROR:    [Errno %d] error while attempting to bind on address (%r, %d): %s",
            exc.errno or 0,
            state.config.host,
            state.config.port,
            (exc.strerror or str(exc)).lower(),
        )
        return None


def _serve(state: ServerState, httpd: SimHTTPServer, stop: threading.Event) -> int:
    """Start up (waiting for every node first), serve until stopped, and shut down: 1 when the start
    failed or another node left, else 0."""
    config = state.config
    state.engine.start()
    threading.Thread(target=httpd.serve_forever, args=(0.05,), name="sim-http", daemon=True).start()
    rendezvous = Rendezvous(config.nodes) if config.nodes.count > 1 else None
    code = 0
    try:
        if (rendezvous is not None and not rendezvous.wait(stop)) or not _startup(config, state, stop):
            code = 1
        else:
            stop.wait()
            code = 1 if rendezvous is not None and rendezvous.left.is_set() else 0
    except KeyboardInterrupt:
        pass
    log.info("Shutting down the simulator")
    if rendezvous is not None:
        rendezvous.close()
    httpd.shutdown()
    state.engine.stop()
    return code


def _banner(cfg: SimServerConfig, tuned: bool, missing: tuple[str, ...]) -> None:
    """The first line says plainly what this is, so nobody mistakes its numbers for a GPU's."""
    nccl = cfg.profile.nccl
    if not nccl.env:
        tuning = "not applicable (profile has no NCCL tuning variables)"
    elif tuned:
        tuning = "tuned (" + ", ".join(f"{k}={v}" for k, v in nccl.env.items()) + ")"
    else:
        tuning = "untuned (missing " + ", ".join(missing) + ")"
    log.info(
        "pytest-specperf simulator %s -- NOT a real SGLang server, no GPU is used. profile=%s (%s), "
        "time_scale=%g, seed=%d, NCCL %s",
        cfg.sim.version,
        cfg.profile.name,
        cfg.profile.source,
        cfg.sim.time_scale,
        cfg.sim.seed,
        tuning,
    )
    log.info("server_args=%s", server_args_echo(cfg))
    for level, message in cfg.notices:
        log.log(logging.getLevelName(level.upper()), message)


def server_args_echo(cfg: SimServerConfig) -> dict:
    """What SGLang 0.5.23 logs at every start (engine.py: the resolved arguments as a dict), a few
    of its ~530 keys: words such as `nccl` and `timeout` appear in it, and the API key in clear
    text, as in the real line; a diagnosis must never take it for an error."""
    spec = cfg.spec
    return {
        "model_path": cfg.model_path,
        "tp_size": cfg.tp_size,
        "host": cfg.host,
        "port": cfg.port,
        "speculative_algorithm": cfg.speculative_algorithm,
        "speculative_num_steps": spec and spec.steps,
        "speculative_eagle_topk": spec and spec.topk,
        "speculative_num_draft_tokens": spec and spec.draft_tokens,
        "max_running_requests": cfg.max_running_requests,
        "cuda_graph_max_bs_decode": cfg.cuda_graph_max_bs_given,
        "remote_instance_weight_loader_backend": "nccl",
        "weight_cache_timeout": 300,
        "dist_timeout": None,
        "watchdog_timeout": 300,
        "enable_nccl_nvls": False,
        "api_key": cfg.api_key,
        "enable_deterministic_inference": cfg.deterministic,
    }


def _startup(cfg: SimServerConfig, state: ServerState, stop: threading.Event) -> bool:
    """Fake weight loading and graph capture (wall time, not scaled), warm up, then turn ready."""
    total = cfg.sim.startup_seconds
    t0 = time.time()
    gpu = cfg.profile.server.accelerator
    log.info("Load weight begin. avail mem=139.81 GB (%s, simulated)", gpu)
    if stop.wait(total * 0.6):
        return True
    if cfg.sim.fail_at_startup:
        _fail_startup()
        return False
    log.info(
        "Load weight end. type=%s, dtype=torch.bfloat16, avail mem=31.20 GB (simulated)",
        cfg.profile.server.architecture,
    )
    log.info(
        "Capture cuda graph begin. This can take up to several minutes. bs=[1, 2, 4, 8, ..., %d]",
        cfg.cuda_graph_max_bs_decode,
    )
    if stop.wait(total * 0.4):
        return True
    log.info("Capture cuda graph end. Time elapsed: %.2f s (simulated)", time.time() - t0)
    log.info("Uvicorn running on http://%s:%d (Press CTRL+C to quit)", cfg.host, cfg.port)
    state.startup_time = time.time() - t0
    if cfg.sim.never_ready:
        log.warning(
            "Warmup generation never finishes (simulated by --sim-never-ready): /health_generate and /ready stay 503"
        )
        return True
    req = state.engine.submit(
        SimPrompt.from_text(WARMUP_PROMPT), SimSamplingParams(max_new_tokens=8, temperature=0.0), rid="warmup"
    )
    while not req.wait().finished:
        pass
    state.engine.flush_cache(timeout=0)  # the warmup must not make the first measured prompt look cached
    state.ready.set()
    log.info(READY_LINE)
    return True


def _fail_startup() -> None:
    """A plausible CUDA OOM during weight loading, then a non-zero exit (--sim-fail-at-startup)."""
    lines = [
        "Scheduler hit an exception: Traceback (most recent call last):",
        '  File "sglang/srt/managers/scheduler.py", line 3127, in run_scheduler_process',
        '  File "sglang/srt/model_executor/model_runner.py", line 812, in load_model',
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.00 GiB. GPU 0 has a total capacity of "
        "139.81 GiB of which 2.06 GiB is free. (simulated by --sim-fail-at-startup)",
    ]
    for line in lines:
        log.error(line)
    log.error("Received sigquit from a child process. It usually means the child failed.")


def _start_seed(config: SimServerConfig) -> int:
    """--sim-start-seed (else the port), moved on for a restart: pytest-specperf numbers the starts of
    a config in SPECPERF_SERVER_START, and a second start must draw its own offset even on a night
    whose start seed is given (a reproducible night, restarts included)."""
    seed = config.port if config.sim.start_seed is None else config.sim.start_seed
    start = os.environ.get("SPECPERF_SERVER_START", "1")
    return seed + 7919 * (int(start) - 1) if start.isdigit() and int(start) > 1 else seed
