"""Warmup plus rounds of a workload on a server: a `Measurement` of raw per-request records.

Each round starts from a flushed radix cache, so later rounds do not hit prefixes cached by
earlier ones, and yields one sample of every metric (docs/metrics.md). Accept length is always
scoped to the round's own requests (Σ completion tokens / Σ verify steps from each final
`meta_info`), never SGLang's cumulative `avg_spec_accept_length`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from pytest_specperf.config.settings import ServerConfig, SpecperfConfig
from pytest_specperf.config.workloads import (
    BUILTIN_PREFIX,
    Prompt,
    SamplingParams,
    WorkloadConfig,
    load_prompts,
    request_plan,
    warmup_plan,
    workload_hash,
)
from pytest_specperf.engines.base import Engine, ReportedSettings, SpecCounters, draft_depth
from pytest_specperf.errors import ServerError, StalledServer
from pytest_specperf.measure.fingerprint import Fingerprint, capture
from pytest_specperf.measure.http import ServerClient
from pytest_specperf.measure.load import run_requests
from pytest_specperf.measure.records import (
    Distribution,
    Measurement,
    MeasurementKey,
    RequestRecord,
    RoundSample,
)


@dataclass(frozen=True)
class Cut:
    """How far a measurement got when the session was cut short (Ctrl-C, SIGTERM, a time limit): the
    rounds it completed of the rounds it was taking. A measurement cut short is kept with its
    completed rounds, shown as such, and never stored."""

    rounds: int
    planned: int

    @property
    def text(self) -> str:
        return f"interrupted after {self.rounds} of {self.planned} rounds"


@dataclass
class Underway:
    """The measurement being taken now, and the round count it is taking (`Cut` when it is cut short)."""

    measurement: Measurement
    planned: int

    def cut(self) -> Cut:
        return Cut(len(self.measurement.rounds), self.planned)


class MeasuredServer(Protocol):
    """What measuring needs of a running server: where it answers and in which engine's terms, how it
    was configured and started, and whether it is still alive. The server pool's servers are such
    servers (servers/pool.py); measuring neither starts nor stops one."""

    name: str
    url: str
    config: ServerConfig
    engine: Engine
    log_path: Path | None
    api_key: str | None
    startup_seconds: float | None
    launch_env: dict[str, str]

    @property
    def attached(self) -> bool: ...

    def check_alive(self, grace: float = 0.0) -> None: ...


def distribution(values_s: Sequence[float]) -> Distribution:
    """Mean and percentiles (linear interpolation) of latencies given in seconds, in ms."""
    if not values_s:
        return Distribution()
    ms = np.asarray(values_s, dtype=float) * 1000.0
    p50, p90, p99 = np.percentile(ms, [50, 90, 99])
    return Distribution(mean=float(ms.mean()), p50=float(p50), p90=float(p90), p99=float(p99))


def summarise_round(
    index: int,
    records: Sequence[RequestRecord],
    num_steps: int | None,
    eagle_topk: int | None,
    counters: SpecCounters | None = None,
) -> RoundSample:
    """One round's sample of every metric, from its request records.

    `counters` is the change of the server's speculation counters over the round (vLLM's Prometheus
    counters); when no response carries its own counts, the round's accept length comes from them.
    """
    ok = [r for r in records if r.ok and r.last_chunk is not None]
    tokens = sum(r.completion_tokens for r in ok)
    span = (max(r.last_chunk or r.sent for r in ok) - min(r.sent for r in ok)) if ok else 0.0
    verified = [r for r in ok if r.verify_ct]
    accept = sum(r.verified_tokens for r in verified) / sum(r.verify_ct or 0 for r in verified) if verified else None
    per_request = float(np.mean([r.accept_length for r in verified])) if verified else None
    rate = acceptance_rate(verified, accept, num_steps, eagle_topk)
    source = "responses" if accept is not None else None
    if accept is None and counters is not None and counters.accept_length is not None:
        accept, rate, source = counters.accept_length, counters.acceptance_rate, "prometheus"
    return RoundSample(
        index=index,
        duration_s=span,
        output_throughput=tokens / span if span > 0 else 0.0,
        request_count=len(records),
        error_count=len(records) - len(ok),
        ttft_ms=distribution([r.ttft for r in ok if r.ttft is not None]),
        tpot_ms=distribution([r.tpot for r in ok if r.tpot is not None]),
        e2e_ms=distribution([r.e2e for r in ok if r.e2e is not None]),
        chunk_gap_ms=distribution([g for r in ok for g in r.chunk_gaps]),
        accept_length=accept,
        accept_length_per_request=per_request,
        acceptance_rate=rate,
        cached_tokens=sum(r.cached_tokens for r in ok),
        records=tuple(records),
        accept_length_source=source,
        spec_counters=counters,
    )


def _stalled(
    exc: StalledServer, server: MeasuredServer, workload: WorkloadConfig, client: ServerClient, concurrency: int = 0
) -> StalledServer:
    """The client's stall error, told about this server and workload (the session then stops it)."""
    log = f" (log: {server.log_path})" if server.log_path else ""
    level = f", concurrency {concurrency}" if concurrency else ""
    what = str(exc).removeprefix(f"server at {client.shown_url} ")
    return StalledServer(
        f"server {server.name!r} (workload {workload.name!r}{level}): {what}; "
        f"the measurement failed and the server is stopped{log}"
    )


def _client(server: MeasuredServer, workload: WorkloadConfig, config: SpecperfConfig) -> ServerClient:
    return ServerClient(
        server.url,
        server.api_key,
        request_timeout=workload.effective_request_timeout,
        engine=server.engine,
        model=config.model_of(server.config),
    )


def acceptance_rate(
    verified: Sequence[RequestRecord], accept: float | None, num_steps: int | None, eagle_topk: int | None
) -> float | None:
    """Accepted over proposed draft tokens: the server's own counts (`spec_num_correct_drafts` /
    `spec_num_proposed_drafts`), which hold for trees too; else the chain formula (tau - 1) / steps,
    which only a chain (topk = 1) satisfies."""
    counted = [r for r in verified if r.accepted_drafts is not None and r.proposed_drafts]
    if counted and len(counted) == len(verified):
        return sum(r.accepted_drafts or 0 for r in counted) / sum(r.proposed_drafts or 0 for r in counted)
    if accept is not None and num_steps and eagle_topk == 1:
        return (accept - 1) / num_steps
    return None


def accept_length_ceiling(num_steps: int, num_draft_tokens: int | None, algorithm: str | None = None) -> int:
    """The most tokens one verify step can yield: the deepest accepted path (`draft_depth`: no deeper
    than a tree's steps, no longer than its draft tokens minus the root; an n-gram draft's steps are no
    depth) plus the bonus token. `steps * topk + 1` counts every node of a tree, which no path reaches."""
    depth = draft_depth(algorithm, num_steps, num_draft_tokens)
    return (num_steps if depth is None else depth) + 1


#: Adds a site's own facts to a measurement's fingerprint: (server, key, identity, environment), the
#: last two changed in place (the plugin's `pytest_specperf_update_fingerprint` hook).
UpdateFingerprint = Callable[[MeasuredServer, MeasurementKey, dict[str, str], dict[str, str]], None]


class Measurer:
    """Runs measurements; prompts are loaded once per workload."""

    def __init__(
        self,
        config: SpecperfConfig,
        progress: Callable[[str], None] | None = None,
        update_fingerprint: UpdateFingerprint | None = None,
        *,
        detail: Callable[[str], None] | None = None,
    ) -> None:
        self.config = config
        self.progress = progress
        self.detail = detail if detail is not None else progress  # a line per warmup and round
        self.update_fingerprint = update_fingerprint
        self._prompts: dict[str, list[Prompt]] = {}
        self._info: dict[tuple[Any, ...], dict[str, Any]] = {}
        #: the measurement being taken (warm-up or rounds), None between measurements; read when the
        #: session is cut short, so the rounds completed are kept (session/measurements.py)
        self.underway: Underway | None = None
        self._no_counters: set[tuple[Any, ...]] = set()

    def prompts(self, workload: WorkloadConfig) -> list[Prompt]:
        if workload.name not in self._prompts:
            base = self.config.source.parent if self.config.source else Path.cwd()
            self._prompts[workload.name] = load_prompts(workload.prompts, base)
        return self._prompts[workload.name]

    def workload_hash(self, workload: WorkloadConfig) -> str:
        return workload_hash(workload, self.prompts(workload))

    def measure(
        self, server: MeasuredServer, workload: WorkloadConfig, concurrency: int, *, is_reference: bool
    ) -> Measurement:
        """Warmup, then `rounds` rounds, each from a flushed cache.

        Speculative sizes are what the server says it runs (SGLang's auto-chosen sizes, NGRAM's
        topk), else what the config asked. A measurement whose every request failed is no
        measurement: it raises, naming the server and the first failure, so it reads as an ERROR
        and never as a 0 tok/s regression.
        """
        cfg = server.config
        client = _client(server, workload, self.config)
        info = self._server_info(server, client)
        reported = server.engine.reported(info)
        measurement = Measurement(
            key=MeasurementKey(server.name, workload.name, concurrency),
            workload_hash=self.workload_hash(workload),
            is_reference=is_reference,
            num_steps=_given(reported.num_steps, cfg.num_steps),
            eagle_topk=_given(reported.eagle_topk, cfg.eagle_topk),
            num_draft_tokens=_given(reported.num_draft_tokens, cfg.num_draft_tokens),
            algorithm=cfg.algorithm,
        )
        prompts = self.prompts(workload)
        self.underway = Underway(measurement, self.config.rounds)
        self._warm_up(server, client, workload, measurement.key, "warmup")
        self.extend(measurement, server, workload, self.config.rounds)
        _refuse_all_failed(measurement, server)
        measurement.fingerprint = self._fingerprint(server, client, info, reported, measurement)
        measurement.warnings.extend(sanity_warnings(measurement, reported, speculative=cfg.is_speculative))
        # a note, not a warning: the numbers are no less true, so the run may be recorded (a version
        # outside the supported range is the report's, once a session: report/analysis.py)
        repeats = repeat_note(workload, prompts)
        measurement.notes += [repeats] if repeats is not None else []
        self.underway = None
        return measurement

    def add_start(self, measurement: Measurement, server: MeasuredServer, workload: WorkloadConfig) -> None:
        """Warmup, then `rounds` rounds on a server start the measurement has no rounds of yet."""
        client = _client(server, workload, self.config)
        self.underway = Underway(measurement, len(measurement.rounds) + self.config.rounds)
        self._warm_up(server, client, workload, measurement.key, "warmup on a second server start")
        self.extend(measurement, server, workload, self.config.rounds, start=measurement.starts)
        self.underway = None

    def _warm_up(
        self, server: MeasuredServer, client: ServerClient, workload: WorkloadConfig, key: MeasurementKey, what: str
    ) -> None:
        """The warm-up before a level's first round: at least as many requests as the level's
        concurrency, sent closed loop, so the engine has run a batch of that size (`warmup_count`)."""
        warmup = warmup_plan(workload, self.prompts(workload), key.concurrency)
        if warmup:
            requests = f"{len(warmup)} request{'s' if len(warmup) != 1 else ''}"
            self._say(f"{key.label}: {what}, {requests} at concurrency {key.concurrency}", detail=True)
            self._run(server, client, workload, warmup, key.concurrency, closed_loop=True)

    def _server_info(self, server: MeasuredServer, client: ServerClient) -> dict[str, Any]:
        """The server's info answer once per server start (resolved args, version, simulator marker)."""
        key = (server.name, server.url, server.startup_seconds)
        if key not in self._info:
            try:
                self._info[key] = client.server_info()
            except Exception as exc:  # an old or proxied server: fingerprint what we know
                self._say(f"{server.name}: server info failed ({exc}); fingerprint from the config only")
                self._info[key] = {}
        return self._info[key]

    def _fingerprint(
        self,
        server: MeasuredServer,
        client: ServerClient,
        info: dict[str, Any],
        reported: ReportedSettings,
        measurement: Measurement,
    ) -> Fingerprint:
        """Where the numbers were measured: what the server says it runs, where it says so."""
        cfg = server.config
        try:
            loads = client.loads()
        except Exception:
            loads = None
        identity: dict[str, Any] = {
            "launcher": self.config.launcher,
            "model": self.config.model_of(cfg),
            "draft_model": cfg.draft_model,
            "algorithm": _given(reported.algorithm, cfg.algorithm),
            "num_steps": measurement.num_steps,
            "eagle_topk": measurement.eagle_topk,
            "num_draft_tokens": measurement.num_draft_tokens,
            "args": list(cfg.args),
            "tp_size": cfg.tp_size if not server.attached else None,
            "workload_hash": measurement.workload_hash,
            "sim_profile": self.config.sim_profile,
            **server.engine.identity_extras(cfg),
        }
        gpu_count = reported.gpu_count if server.attached else server.engine.gpu_count(cfg.args)
        captured = capture(
            launch_identity=identity,
            server_info=info,
            loads=loads,
            server_env=server.launch_env,
            env_patterns=self.config.env_patterns,
            local=not server.attached,
            engine=server.engine,
            gpu_count=gpu_count,
        )
        if self.update_fingerprint is None:
            return captured
        identity, environment = dict(captured.identity), dict(captured.environment)
        self.update_fingerprint(server, measurement.key, identity, environment)
        return Fingerprint(identity, environment).redacted()  # a site's facts pass the same redaction

    def extend(
        self, measurement: Measurement, server: MeasuredServer, workload: WorkloadConfig, rounds: int, *, start: int = 0
    ) -> None:
        """Append `rounds` more rounds, measured on server start `start` of the measurement (0: the
        first; a second look extends it, a confirmation adds start 1)."""
        client = _client(server, workload, self.config)
        plan = request_plan(workload, self.prompts(workload))
        concurrency = measurement.key.concurrency
        target = len(measurement.rounds) + rounds
        outer = self.underway  # a measurement's first rounds, a second start's: they planned these rounds
        if outer is None or outer.measurement is not measurement:
            self.underway = Underway(measurement, target)
        while len(measurement.rounds) < target:
            index = len(measurement.rounds)
            self._flush(server, client, workload)
            before = self._counters(server, client)
            records = self._run(server, client, workload, plan, concurrency)
            after = self._counters(server, client) if before is not None else None
            counters = after - before if after is not None and before is not None else None
            sample = summarise_round(index, records, measurement.num_steps, measurement.eagle_topk, counters)
            measurement.rounds.append(replace(sample, start=start) if start else sample)
            self._say(
                f"{measurement.key.label}: round {index + 1}/{target}, {sample.output_throughput:.1f} tok/s"
                + (f", accept length {sample.accept_length:.2f}" if sample.accept_length else "")
                + (f", {sample.error_count} errors" if sample.error_count else ""),
                detail=True,
            )
        self.underway = outer

    def _run(
        self,
        server: MeasuredServer,
        client: ServerClient,
        workload: WorkloadConfig,
        plan: list[Prompt],
        concurrency: int,
        *,
        closed_loop: bool = False,
    ) -> list[RequestRecord]:
        """One pass over `plan`; `closed_loop` sends it without the workload's arrival rate (a warm-up:
        every worker busy at once)."""
        sampling = SamplingParams.from_workload(workload)
        try:
            result = run_requests(
                client,
                plan,
                sampling,
                concurrency=concurrency,
                request_rate=None if closed_loop else workload.request_rate,
                seed=workload.seed,
                stall_timeout=workload.stall_timeout,
            )
        except StalledServer as exc:
            raise _stalled(exc, server, workload, client, concurrency) from None
        server.check_alive()
        return list(result.records)

    def _counters(self, server: MeasuredServer, client: ServerClient) -> SpecCounters | None:
        """The server's speculation counters now (vLLM's `/metrics`), for a speculative server whose
        engine has them; None otherwise, or when the scrape fails (said once per server start)."""
        engine = server.engine
        if engine.counters_path is None or not server.config.is_speculative:
            return None
        try:
            return engine.spec_counters(client.metrics_text(engine.counters_path) or "")
        except Exception as exc:
            key = (server.name, server.url, server.startup_seconds)
            if key not in self._no_counters:
                self._no_counters.add(key)
                self._say(f"{server.name}: {engine.counters_path} failed ({exc}); no counter deltas per round")
            return None

    def _flush(self, server: MeasuredServer, client: ServerClient, workload: WorkloadConfig) -> None:
        server.check_alive()
        if client.engine.flush_path is None:
            return  # the engine offers no cache reset (vLLM without dev mode): rounds may hit cached prefixes
        try:
            flushed = client.flush_cache(stall_timeout=workload.stall_timeout)
        except StalledServer as exc:
            raise _stalled(exc, server, workload, client) from None
        except ServerError:
            server.check_alive(grace=2.0)  # refused because it died? then say so
            raise
        if not flushed:
            raise ServerError(
                f"server {server.name!r}: /flush_cache did not succeed before a round (the server stayed busy); "
                "later rounds would hit cached prefixes"
            )

    def _say(self, message: str, *, detail: bool = False) -> None:
        say = self.detail if detail else self.progress
        if say:
            say(message)


def repeat_note(workload: WorkloadConfig, prompts: Sequence[Prompt]) -> str | None:
    """A note when one round sends a prompt more than once, None when every request is distinct.

    A note, not a warning: it is a property of the workload that every night shares, not a sign
    that this run was disturbed, so such runs are still recorded.

    A repeated prompt finds its own prefix in the radix cache from earlier in the same round (the
    flush is per round), so its TTFT and prefill cost are flattering: a small prompt file, or
    `num_requests` larger than the set. Prompts are compared by content, not by id.
    """
    plan = request_plan(workload, prompts)
    distinct = len({json.dumps(p.content(), sort_keys=True) for p in plan})
    if distinct == len(plan):
        return None
    available = len({json.dumps(p.content(), sort_keys=True) for p in prompts})
    return (
        f"a round repeats prompts: {len(plan)} requests from {available} distinct prompt"
        f"{'s' if available != 1 else ''} ({_source(workload.prompts)}), so {len(plan) - distinct} request(s) of "
        "every round repeat an earlier one and may hit its prefix in the radix cache; "
        f"give the workload at least {len(plan)} distinct prompts, or lower num_requests"
    )


def _source(spec: str) -> str:
    """A builtin set as named, a prompt file by its name (its folder differs per machine)."""
    return spec if spec.startswith(BUILTIN_PREFIX) else Path(spec).name


def _given(*values: Any) -> Any:
    """The first value that is not None (what the server reports, else what was asked)."""
    return next((v for v in values if v is not None), None)


def _refuse_all_failed(measurement: Measurement, server: MeasuredServer) -> None:
    """A measurement without one successful request measured nothing: an error, never a 0 tok/s row."""
    total = measurement.request_count
    if total and measurement.error_count == total:
        first = next((r.error for r in measurement.records if r.error), "")
        log = f" (log: {server.log_path})" if server.log_path else ""
        raise ServerError(
            f"server {server.name!r}: all {total} requests of {measurement.key.label} failed, so nothing was "
            f"measured; first: {first}{log}"
        )


def sanity_warnings(
    measurement: Measurement, reported: ReportedSettings | None = None, *, speculative: bool | None = None
) -> list[str]:
    """Things that make the numbers suspect, recorded on the result and shown in the report.

    `reported` is what the server says it runs (its engine reads the CUDA-graph batch limit and
    max running requests from its info answer); `speculative` says whether the server was
    configured to speculate (default: it has an `algorithm`; a vLLM server may have a raw
    `speculative_config` instead)."""
    reported = reported or ReportedSettings()
    warnings = []
    errors, total = measurement.error_count, measurement.request_count
    if errors:
        first = next((r.error for r in measurement.records if r.error), "")
        warnings.append(f"{errors} of {total} requests failed; first: {first}")
    accept = [a for a in measurement.samples("accept_length")]
    if measurement.num_steps is not None and accept:
        ceiling = accept_length_ceiling(measurement.num_steps, measurement.num_draft_tokens, measurement.algorithm)
        outside = [a for a in accept if not 1.0 <= a <= ceiling]
        if outside:
            warnings.append(f"accept length {outside[0]:.2f} outside [1, the draft's depth + 1 = {ceiling}]")
    if speculative is None:
        speculative = measurement.algorithm is not None
    if not speculative and accept:
        warnings.append("server reports spec_verify_ct although no speculative algorithm is configured")
    level = measurement.key.concurrency
    graph_bs = reported.cuda_graph_max_bs
    if graph_bs is not None and level > graph_bs:
        warnings.append(
            f"concurrency {level} > the server's decode CUDA-graph batch limit {graph_bs}: decode runs without "
            "CUDA graphs and speculative speedup collapses"
        )
    running = reported.max_running_requests
    if running is not None and level > running:
        warnings.append(f"concurrency {level} > the server's max_running_requests {running}: requests queue")
    # only a round's first request proves the flush: later ones may share a chat template's prefix
    cached = [r.index for r in measurement.rounds if r.records and _first(r.records).cached_tokens]
    if cached:
        warnings.append(
            f"the first request of round(s) {', '.join(str(i + 1) for i in cached)} hit the radix cache "
            "right after /flush_cache"
        )
    return warnings


def _first(records: Sequence[RequestRecord]) -> RequestRecord:
    return min(records, key=lambda r: r.sent)
