"""The simulated inference engine: continuous batching on a scheduler thread, timed by a profile.

One step at a time, like SGLang's scheduler: if requests wait and there is room, a prefill step admits
them (it stalls decoding, as a non-mixed prefill does); otherwise one decode step (a plain step, or a
speculative cycle) advances every running request. Each step's cost comes from the profile and the
thread sleeps to the step's absolute deadline, so rounding and Python overhead do not accumulate.
Tokens of a step are published when the step ends, one event per request, which the HTTP layer turns
into one stream chunk.

Noise, all off by default (then a seed and a schedule fix every number): ``run_jitter`` draws one
speed factor per server start (with ``night``, from the night shapes of sim/nights.py: node pools,
level shifts, drifts, heavy tails, correlated nights), ``round_jitter`` one per cache flush (the
plugin flushes per round), and ``batch_acceptance`` makes acceptance depend on which prompts share a
decode step — one mean-one log-normal factor on the conditional rates per distinct set of prompts, a
pure function of the set and the seed, never applied to a request alone in the batch (see
``_batch_acceptance_factor``).
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import math
import queue
import random
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from .nights import NightNoise, node_speed, round_cv, warmup_factor
from .profile import Profile, SpecConfig
from .text import EOS_TOKEN_ID, OutputTokens, SimPrompt, render

log = logging.getLogger("specperf.sim")

#: SGLang folds speculative counters into its lifetime average every this many decode iterations.
DECODE_LOG_INTERVAL = 40
#: A step that starts later than this behind its deadline restarts the clock instead of catching up.
#: The modelled GPU server does not slow down when the machine running the simulator is busy: a step
#: that woke late (another process had the CPU) is made up by the next ones, up to this much.
_MAX_LAG_S = 2.0


@dataclass(frozen=True)
class SimSamplingParams:
    """The sampling parameters the simulator acts on (others are accepted and ignored)."""

    max_new_tokens: int = 128
    temperature: float = 1.0
    ignore_eos: bool = False
    min_new_tokens: int = 0
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    sampling_seed: int | None = None


@dataclass(frozen=True)
class Event:
    """One published step of a request: how many tokens exist now, and whether it is finished."""

    completion_tokens: int
    finished: bool


@dataclass
class Request:
    """A request inside the engine. Fields are written by the scheduler thread only; readers wait for an
    event first, which orders the writes before the reads."""

    rid: str
    prompt: SimPrompt
    params: SimSamplingParams
    stream: bool
    log_metrics: bool
    arrival: float
    natural_tokens: int
    tokens: OutputTokens = field(repr=False)
    accept_rng: random.Random = field(repr=False)
    rates: tuple[float, ...] = ()
    output_ids: list[int] = field(default_factory=list)
    cached_tokens: int = 0
    verify_ct: int = 0
    correct_drafts: int = 0
    histogram: list[int] = field(default_factory=list)
    finish_reason: dict | None = None
    stop_text: str | None = None
    admitted_at: float | None = None
    first_token_at: float | None = None
    finished_at: float | None = None
    aborted: bool = False
    events: queue.SimpleQueue = field(default_factory=queue.SimpleQueue, repr=False)

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def text(self, upto: int | None = None) -> str:
        """Rendered output of the first ``upto`` tokens (all by default), cut at a matched stop string."""
        out = render(self.output_ids[:upto])
        if self.stop_text is not None and (upto is None or upto >= len(self.output_ids)):
            idx = out.find(self.stop_text)
            if idx >= 0:
                out = out[:idx]
        return out

    def wait(self, timeout: float | None = None) -> Event:
        """Next published event (blocks); raises queue.Empty on timeout."""
        return self.events.get(timeout=timeout)

    def wait_latest(self) -> Event:
        """The newest event, blocking for one: every step published while the writer was busy
        merges into it, as SGLang's tokenizer manager keeps only the last of its pending outputs
        (a busy server streams one event for several decode steps)."""
        event = self.events.get()
        while not event.finished:
            try:
                event = self.events.get_nowait()
            except queue.Empty:
                break
        return event


@dataclass
class Counters:
    """Server-wide counters behind /metrics, /server_info and /v1/loads."""

    num_requests: int = 0
    prompt_tokens: int = 0
    generation_tokens_streaming: int = 0
    generation_tokens_non_streaming: int = 0
    spec_verify_calls: int = 0
    # SGLang's lifetime accept average: interval counters folded every DECODE_LOG_INTERVAL iterations.
    interval_accept_tokens: int = 0
    interval_forward_ct: int = 0
    interval_correct_drafts: int = 0
    total_accept_tokens: int = 0
    total_forward_ct: int = 0
    total_correct_drafts: int = 0
    decode_iterations: int = 0
    last_gen_throughput: float = 0.0

    def reset_spec(self) -> None:
        """What /flush_cache resets (metrics_reporter.reset_metrics)."""
        self.interval_accept_tokens = self.interval_forward_ct = self.interval_correct_drafts = 0
        self.total_accept_tokens = self.total_forward_ct = self.total_correct_drafts = 0


@dataclass(frozen=True)
class Snapshot:
    """A consistent view of the engine for status endpoints."""

    running: int
    waiting: int
    counters: Counters
    cache_entries: int


@dataclass(frozen=True)
class EngineSettings:
    """Everything the engine needs from the launch: what to simulate and how fast."""

    profile: Profile
    spec: SpecConfig | None
    tuned: bool
    max_running_requests: int
    cuda_graph_max_bs: int
    time_scale: float
    seed: int = 0
    lossy_rate: float = 0.0
    run_jitter: float = 0.0  # CV of one speed factor drawn per server start (--sim-run-jitter)
    round_jitter: float = 0.0  # CV of a speed factor redrawn at every cache flush, i.e. per round
    start_seed: int = 0  # tells starts apart (--sim-start-seed, else the port): one run factor per start
    batch_acceptance: float = 0.0  # CV of an acceptance factor per set of prompts sharing a decode step
    #: --sim-night: the start's speed from sim/nights.py (night shapes) instead of the plain run-jitter draw
    night: int | None = None
    night_noise: NightNoise = field(default_factory=NightNoise)
    #: --sim-node-swing / --sim-node-seed: the node's speed, shared by every server of a session (sim/nights.py)
    node_swing: float = 0.0
    node_seed: int = 0
    #: --sim-eager: the round spread of eager mode (no CUDA graphs), falling with the batch (sim/nights.py)
    eager: bool = False
    #: --sim-warmup-ramp: how much slower the first round runs at concurrency 8 and more
    warmup_ramp: float = 0.0
    #: --enable-deterministic-inference: only then does a request's sampling_seed fix what it samples
    #: (SGLang builds its per-request seeds only in deterministic mode: sampling_batch_info.py)
    deterministic: bool = False


class Engine:
    """Continuous batching with a profile-driven clock."""

    def __init__(self, settings: EngineSettings) -> None:
        self.settings = settings
        self._cond = threading.Condition()
        self._waiting: deque[Request] = deque()
        self._running: list[Request] = []
        self._prefilling: list[Request] = []  # off the queue, in their prefill step: in flight too
        self._cache: set[bytes] = set()
        self.counters = Counters()
        self._ids = itertools.count(1)
        self._stop = False
        self._thread = threading.Thread(target=self._loop, name="sim-scheduler", daemon=True)
        self._deadline: float | None = None
        self._last_log = 0.0
        self._interval_start = time.perf_counter()
        self._interval_tokens = 0
        # Noise of its own RNG, so a jittery run draws the same acceptances as a deterministic one.
        self._jitter = random.Random(f"jitter:{settings.seed}:{settings.start_seed}")
        if settings.night is None:
            self.run_factor = self._speed_factor(settings.run_jitter)
        else:  # a slower start's steps take longer: the factor multiplies step times
            self.run_factor = 1.0 / settings.night_noise.speed(settings.seed, settings.night, settings.start_seed)
        self.run_factor /= node_speed(settings.node_swing, settings.node_seed, settings.night or 0)
        self.round_factor = 1.0
        self._flushes = 0  # rounds so far: the warm-up ramp decays over them
        self._batch = 1  # the largest batch of the round so far: eager spread averages over it

    def _speed_factor(self, cv: float) -> float:
        """A log-normal multiplier of step times with CV ~`cv` (1.0 when 0): always positive."""
        return math.exp(self._jitter.gauss(0.0, cv)) if cv > 0.0 else 1.0

    # ---- public API (any thread) ----------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()

    def submit(
        self,
        prompt: SimPrompt,
        params: SimSamplingParams,
        *,
        stream: bool = False,
        log_metrics: bool = True,
        rid: str | None = None,
    ) -> Request:
        """Queue a request; it joins the batch at the next step boundary."""
        n = next(self._ids)
        req = self._new_request(rid or f"{n:032x}", prompt, params, stream, log_metrics, n)
        with self._cond:
            self._waiting.append(req)
            self._cond.notify_all()
        return req

    def abort(self, req: Request) -> None:
        """Drop a request (its client went away); it leaves the batch at the next step."""
        req.aborted = True

    def flush_cache(self, timeout: float = 0.0) -> bool:
        """Clear the radix cache and spec counters, only when idle (as SGLang); False if still busy."""
        with self._cond:
            if not self._cond.wait_for(self._idle, timeout=max(0.0, timeout)):
                return False
            self._cache.clear()
            self.counters.reset_spec()
            cv = max(self.settings.round_jitter, round_cv(True, self._batch) if self.settings.eager else 0.0)
            self.round_factor = self._speed_factor(cv)  # the plugin flushes per round
            self._flushes, self._batch = self._flushes + 1, 1
            return True

    def snapshot(self) -> Snapshot:
        with self._cond:
            c = Counters(**vars(self.counters))
            return Snapshot(len(self._running), len(self._waiting), c, len(self._cache))

    # ---- request construction -------------------------------------------------------------------
    def _new_request(
        self, rid: str, prompt: SimPrompt, params: SimSamplingParams, stream: bool, log_metrics: bool, n: int
    ) -> Request:
        s = self.settings
        greedy = params.temperature <= 0.0
        if greedy:
            text_rng = random.Random(prompt.seed("text"))
            accept_rng = random.Random(prompt.seed("accept", s.seed))
        elif params.sampling_seed is not None and s.deterministic:  # reproducible per (seed, prompt)
            text_rng = random.Random(prompt.seed(f"sampled-text/{params.sampling_seed}"))
            accept_rng = random.Random(prompt.seed(f"sampled-accept/{params.sampling_seed}"))
        else:
            base = s.seed * 1_000_003 + n
            text_rng, accept_rng = random.Random(f"text/{base}"), random.Random(f"accept/{base}")
        lo, hi = s.profile.output.natural_tokens
        natural = lo + int(prompt.unit("natural") * (hi - lo + 1))
        diverge_at, alt = None, None
        if s.spec is not None and s.lossy_rate > 0 and prompt.unit(f"lossy/{s.seed}") < s.lossy_rate:
            span = max(1, min(natural, params.max_new_tokens) - 1)
            diverge_at = 1 + int(prompt.unit(f"diverge/{s.seed}") * span)
            alt = random.Random(prompt.seed("lossy", s.seed))
        rates: tuple[float, ...] = ()
        if s.spec is not None:
            model = s.profile.acceptance_for(s.spec.algorithm)
            rates = model.rates(s.spec, model.difficulty_at(prompt.unit("difficulty")))
        return Request(
            rid=rid,
            prompt=prompt,
            params=params,
            stream=stream,
            log_metrics=log_metrics,
            arrival=time.perf_counter(),
            natural_tokens=natural,
            tokens=OutputTokens(text_rng, diverge_at, alt),
            accept_rng=accept_rng,
            rates=rates,
            histogram=[0] * (s.spec.draft_tokens if s.spec is not None else 0),
        )

    # ---- scheduler thread -----------------------------------------------------------------------
    def _idle(self) -> bool:
        return not self._running and not self._waiting and not self._prefilling

    def _loop(self) -> None:
        while True:
            with self._cond:
                while self._idle() and not self._stop:
                    self._deadline = None
                    self._cond.notify_all()  # wake flush_cache waiters
                    self._cond.wait()
                if self._stop:
                    return
                self._drop_aborted()
                admit = self._prefilling = self._admit()
                batch = list(self._running)
            try:
                if admit:
                    self._prefill_step(admit)
                elif batch:
                    self._decode_step(batch)
            except Exception:  # a bug must fail the requests involved, not hang every client forever
                log.exception("Scheduler step failed; aborting the requests in it")
                self._fail(admit or batch)

    def _fail(self, reqs: list[Request]) -> None:
        with self._cond:
            self._prefilling = []
            for req in reqs:
                if req in self._running:
                    self._running.remove(req)
                if not req.finished or req.finished_at is None:
                    self._finish(req, {"type": "abort", "message": "internal simulator error"})

    def _drop_aborted(self) -> None:
        for req in [r for r in self._running if r.aborted]:
            self._running.remove(req)
            self._finish(req, {"type": "abort", "message": "client disconnected"})
        for req in [r for r in self._waiting if r.aborted]:
            self._waiting.remove(req)
            self._finish(req, {"type": "abort", "message": "client disconnected"})

    def _admit(self) -> list[Request]:
        room = self.settings.max_running_requests - len(self._running)
        admit = []
        while self._waiting and room > 0:
            admit.append(self._waiting.popleft())
            room -= 1
        return admit

    def _wait_until(self, cost_ms: float) -> None:
        """Sleep to the end of a step that starts where the previous one ended (absolute deadlines)."""
        now = time.perf_counter()
        start = now if self._deadline is None or now - self._deadline > _MAX_LAG_S else self._deadline
        self._batch = max(self._batch, len(self._running))
        ramp = warmup_factor(self._flushes - 1, len(self._running), ramp=self.settings.warmup_ramp)
        factor = self.run_factor * self.round_factor / ramp
        self._deadline = start + cost_ms * factor * self.settings.time_scale / 1000.0
        delay = self._deadline - time.perf_counter()
        if delay > 0:
            time.sleep(delay)

    def _prefill_step(self, admit: list[Request]) -> None:
        s = self.settings
        now = time.perf_counter()
        new_tokens = 0
        for req in admit:
            req.admitted_at = now
            cached = req.prompt.digest in self._cache
            req.cached_tokens = max(0, req.prompt.num_tokens - 1) if cached else 0
            new_tokens += req.prompt.num_tokens - req.cached_tokens
        cost = s.profile.prefill_ms(new_tokens, s.tuned)
        self._wait_until(cost)
        log.debug(
            "Prefill batch, #new-seq: %d, #new-token: %d, #running-req: %d, cost: %.2f ms",
            len(admit),
            new_tokens,
            len(self._running),
            cost,
        )
        done = time.perf_counter()
        with self._cond:
            self._prefilling = []
            for req in admit:
                self._cache.add(req.prompt.digest)
                req.first_token_at = done
                if req.aborted:
                    self._finish(req, {"type": "abort", "message": "client disconnected"})
                    continue
                if req.params.max_new_tokens > 0:
                    self._append(req, 1)
                else:
                    req.finish_reason = {"type": "length", "length": 0}
                if req.finished:
                    self._finish(req, req.finish_reason)
                else:
                    self._running.append(req)
                    req.events.put(Event(len(req.output_ids), False))

    def _decode_step(self, batch: list[Request]) -> None:
        s = self.settings
        cost = s.profile.step_ms(s.spec, len(batch), s.tuned, cuda_graph_max_bs=s.cuda_graph_max_bs)
        if s.spec is not None:
            factor = self._batch_acceptance_factor(batch)
            cap = s.profile.acceptance_for(s.spec.algorithm).max_rate
            accepted = [self._draw(req, factor, cap) for req in batch]
        else:
            accepted = [0] * len(batch)
        self._wait_until(cost)
        with self._cond:
            produced = 0
            for req, a in zip(batch, accepted, strict=True):
                before = len(req.output_ids)
                if s.spec is not None:
                    req.verify_ct += 1
                    req.correct_drafts += a
                    req.histogram[a] += 1
                self._append(req, a + 1)
                produced += len(req.output_ids) - before
                if req.finished:
                    self._running.remove(req)
                    self._finish(req, req.finish_reason)
                else:
                    req.events.put(Event(len(req.output_ids), False))
            self._account_decode(len(batch), produced, sum(accepted))

    def _batch_acceptance_factor(self, batch: list[Request]) -> float:
        """The acceptance factor of a step shared by ``batch`` (--sim-batch-acceptance CV; 1.0 when 0).

        Which prompts share a step changes the logits a little (batch-variant kernels: split sizes and
        reduction orders follow the batch), so near-tie argmaxes flip and every request in the step
        accepts a little more or less. One mean-one log-normal factor per distinct set of prompts, a pure
        function of the set and ``--sim-seed``: the same mix always draws the same factor, another mix
        another one, and a request alone in the batch (concurrency 1) is never affected.
        """
        cv = self.settings.batch_acceptance
        if cv <= 0.0 or len(batch) < 2:
            return 1.0
        h = hashlib.blake2b(f"batch-accept/{self.settings.seed}".encode(), digest_size=8)
        for digest in sorted(req.prompt.digest for req in batch):
            h.update(digest)
        z = random.Random(int.from_bytes(h.digest(), "big")).gauss(0.0, 1.0)
        return math.exp(cv * z - cv * cv / 2.0)

    @staticmethod
    def _draw(req: Request, factor: float = 1.0, cap: float = 1.0) -> int:
        """Accepted drafts this cycle: position i is accepted only if all before it were.

        ``factor`` scales the conditional rates (capped at ``cap``, the profile's max_rate); the request's
        own random stream is consumed the same way whatever the factor, so 1.0 draws exactly as before.
        """
        a = 0
        for rate in req.rates:
            if req.accept_rng.random() >= (rate if factor == 1.0 else min(cap, rate * factor)):
                break
            a += 1
        return a

    def _append(self, req: Request, count: int) -> None:
        """Append up to ``count`` tokens, stopping at EOS, a stop string/token or max_new_tokens."""
        p = req.params
        for _ in range(count):
            n = len(req.output_ids) + 1
            eos = n >= req.natural_tokens and not p.ignore_eos and n > p.min_new_tokens
            tok = EOS_TOKEN_ID if eos else req.tokens.next_id()
            req.output_ids.append(tok)
            if eos:
                req.finish_reason = {"type": "stop", "matched": EOS_TOKEN_ID}
            elif tok in p.stop_token_ids and n > p.min_new_tokens:
                req.finish_reason = {"type": "stop", "matched": tok}
            elif p.stop and n > p.min_new_tokens and (hit := self._stop_hit(req)) is not None:
                req.stop_text = hit
                req.finish_reason = {"type": "stop", "matched": hit}
            elif n >= p.max_new_tokens:
                req.finish_reason = {"type": "length", "length": p.max_new_tokens}
            if req.finished:
                return

    @staticmethod
    def _stop_hit(req: Request) -> str | None:
        for stop in req.params.stop:
            if stop and stop in render(req.output_ids[-(len(stop) + 1) :]):
                return stop
        return None

    def _finish(self, req: Request, reason: dict | None) -> None:
        """Record a finished request (lock held) and publish its final event."""
        req.finish_reason = reason
        req.finished_at = time.perf_counter()
        if req.log_metrics and reason is not None and reason.get("type") != "abort":
            c = self.counters
            c.num_requests += 1
            c.prompt_tokens += req.prompt.num_tokens
            if req.stream:
                c.generation_tokens_streaming += len(req.output_ids)
            else:
                c.generation_tokens_non_streaming += len(req.output_ids)
            c.spec_verify_calls += req.verify_ct
        log.debug(
            "Finish: rid=%s, prompt_tokens=%d, cached_tokens=%d, completion_tokens=%d, spec_verify_ct=%d, "
            "finish_reason=%s, e2e=%.3f s",
            req.rid,
            req.prompt.num_tokens,
            req.cached_tokens,
            len(req.output_ids),
            req.verify_ct,
            reason,
            req.finished_at - req.arrival,
        )
        req.events.put(Event(len(req.output_ids), True))

    def _account_decode(self, batch: int, produced: int, correct: int) -> None:
        """SGLang-style interval counters and the periodic 'Decode batch' log line (lock held)."""
        c = self.counters
        c.decode_iterations += 1
        self._interval_tokens += produced
        if self.settings.spec is not None:
            c.interval_accept_tokens += produced
            c.interval_forward_ct += batch
            c.interval_correct_drafts += correct
        if c.decode_iterations % DECODE_LOG_INTERVAL:
            return
        now = time.perf_counter()
        c.last_gen_throughput = self._interval_tokens / max(1e-9, now - self._interval_start)
        self._interval_start, self._interval_tokens = now, 0
        c.total_accept_tokens += c.interval_accept_tokens
        c.total_forward_ct += c.interval_forward_ct
        c.total_correct_drafts += c.interval_correct_drafts
        spec = ""
        if self.settings.spec is not None and c.interval_forward_ct:
            proposed = c.interval_forward_ct * (self.settings.spec.draft_tokens - 1)
            spec = (
                f"accept len: {c.interval_accept_tokens / c.interval_forward_ct:.2f}, "
                f"accept rate: {c.interval_correct_drafts / max(1, proposed):.2f}, "
            )
        c.interval_accept_tokens = c.interval_forward_ct = c.interval_correct_drafts = 0
        if now - self._last_log >= 1.0:  # keep the log readable at tiny time scales
            self._last_log = now
            log.info(
                "Decode batch, #running-req: %d, %scuda graph: %s, gen throughput (token/s): %.2f, #queue-req: %d",
                batch,
                spec,
                batch <= self.settings.cuda_graph_max_bs,
                c.last_gen_throughput,
                len(self._waiting),
            )
