"""Simulator profiles: the numbers behind a simulated server, and pure predictions derived from them.

A profile (a TOML file in ``sim/profiles/``) describes one model/hardware pair: what a plain decode step
costs, what a speculative cycle costs (drafting, verify = fixed + per-token, a little scheduling
overhead), which share of each part is NCCL communication (the part that NCCL tuning variables shrink),
how often drafts are accepted, and how long outputs naturally are.

The simulator's engine and the rest of pytest-specperf both use the functions here, so a test can derive
its expectation from the same numbers the server runs on instead of copying magic constants. All times
are milliseconds at ``--sim-time-scale 1.0``; multiply by the time scale to get wall time.

Public API (kept stable; other modules import it):

- ``load_profile(name_or_path) -> Profile`` and ``available_profiles() -> list[str]`` (profile_files.py,
  which reads a profile's TOML into these records)
- ``SpecConfig(algorithm, steps, topk, draft_tokens)``
- ``Profile.plain_step_ms(batch, tuned=False, *, cuda_graph_max_bs=None) -> float``
- ``Profile.cycle_ms(steps, topk, draft_tokens, batch, tuned=False, *, cuda_graph_max_bs=None) -> float``
- ``Profile.cycle_breakdown(steps, topk, draft_tokens, batch, tuned=False, *, cuda_graph_max_bs=None)``
  ``-> CycleBreakdown``
- ``Profile.expected_accept_length(steps, topk, draft_tokens, *, algorithm="EAGLE3", difficulty=None)``
- ``Profile.expected_verify_steps(spec, output_tokens, *, difficulty=None) -> float``
- ``Profile.predicted_decode_throughput(spec_or_None, batch, tuned=False, *, cuda_graph_max_bs=None)``
- ``Profile.predicted_ttft_ms(prompt_tokens, *, cached_tokens=0, tuned=False) -> float``
- ``Profile.predict_request(spec_or_None, prompt_tokens, output_tokens, *, tuned=False) -> RequestPrediction``
- ``Profile.predicted_round_throughput(spec_or_None, *, concurrency, prompt_tokens, output_tokens,``
  ``num_requests=None, tuned=False, cuda_graph_max_bs=None) -> float``
- ``AcceptanceModel.difficulty_at(u) -> float``: a prompt's difficulty factor from its hash unit u in [0, 1)
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache

DEFAULT_PROFILE = "kimi-k2.5-tp8"

#: Number of equally likely difficulty points used to average over the prompt difficulty distribution.
_DIFFICULTY_POINTS = 64
#: Seeded replays averaged by ``predicted_round_throughput`` for speculative servers above concurrency 1.
_REPLAYS = 8


class ProfileError(ValueError):
    """A profile file is missing, unreadable or has a bad key; the message names the file and key."""


@dataclass(frozen=True)
class SpecConfig:
    """A resolved speculative configuration (what the ``--speculative-*`` flags resolve to)."""

    algorithm: str = "EAGLE3"
    steps: int = 5
    topk: int = 1
    draft_tokens: int = 6

    @property
    def family(self) -> str:
        """Acceptance family: NEXTN is an alias of EAGLE in SGLang."""
        return "EAGLE" if self.algorithm == "NEXTN" else self.algorithm

    @property
    def depth(self) -> int:
        """Longest run of drafts one verify can accept.

        EAGLE-style trees accept at most one draft per draft step and at most draft_tokens - 1 drafts;
        NGRAM drafts come from a trie, so only the verify width limits them.
        """
        if self.family == "NGRAM":
            return max(0, self.draft_tokens - 1)
        return max(0, min(self.steps, self.draft_tokens - 1))

    @property
    def width(self) -> float:
        """Effective branching per depth: topk, limited by how many tree nodes the verify width allows."""
        if self.family == "NGRAM" or self.steps <= 0:
            return 1.0
        return max(1.0, min(float(self.topk), (self.draft_tokens - 1) / self.steps))


@dataclass(frozen=True)
class CycleBreakdown:
    """Where the time of one decode step goes (ms, all parts already include tuning and graph penalty)."""

    draft_ms: float
    verify_fixed_ms: float
    verify_tokens_ms: float
    overhead_ms: float
    comm_ms: float
    """The communication (all-reduce) part contained in the other parts; not added to the total."""

    @property
    def verify_ms(self) -> float:
        return self.verify_fixed_ms + self.verify_tokens_ms

    @property
    def total_ms(self) -> float:
        return self.draft_ms + self.verify_ms + self.overhead_ms

    @property
    def verify_share(self) -> float:
        return self.verify_ms / self.total_ms

    @property
    def fixed_share(self) -> float:
        """Share of the cycle that does not grow with the number of verified tokens."""
        return (self.total_ms - self.verify_tokens_ms) / self.total_ms


@dataclass(frozen=True)
class RequestPrediction:
    """Expected timing of one request on an otherwise idle server (concurrency 1)."""

    prompt_tokens: int
    output_tokens: int
    ttft_ms: float
    decode_ms: float
    verify_steps: float
    """Expected verify cycles (0 for a plain server)."""

    @property
    def e2e_ms(self) -> float:
        return self.ttft_ms + self.decode_ms

    @property
    def throughput(self) -> float:
        """Output tok/s of this request, TTFT included (what a concurrency-1 round measures)."""
        return self.output_tokens / self.e2e_ms * 1000.0

    @property
    def accept_length(self) -> float:
        """Token-weighted accept length as SGLang reports it: completion_tokens / spec_verify_ct."""
        return self.output_tokens / self.verify_steps if self.verify_steps > 0 else 1.0


@dataclass(frozen=True)
class StepCostModel:
    """Step costs in ms at time scale 1.0 (see the profile TOML for where each number comes from)."""

    plain_step_ms: float
    plain_per_request_ms: float
    draft_step_ms: float
    draft_per_token_ms: float
    verify_fixed_ms: float
    verify_per_token_ms: float
    cycle_overhead_ms: float
    prefill_fixed_ms: float
    prefill_per_token_ms: float
    no_cuda_graph_penalty: float
    plain_comm_share: float
    draft_comm_share: float
    verify_comm_share: float
    prefill_comm_share: float


@dataclass(frozen=True)
class NcclTuning:
    """Environment variables that count as "NCCL tuned", and how much they shrink communication."""

    env: Mapping[str, str]
    comm_factor: float
    """Communication time is multiplied by this when tuned (1.0 = tuning has no effect)."""

    def missing(self, environ: Mapping[str, str]) -> list[str]:
        """Tuning variables absent from ``environ`` or set to another value ("*" accepts any value)."""
        out = []
        for key, want in self.env.items():
            have = environ.get(key)
            if have is None or (want != "*" and have.strip().lower() != want.lower()):
                out.append(f"{key}={want}")
        return out

    def is_tuned(self, environ: Mapping[str, str]) -> bool:
        return bool(self.env) and not self.missing(environ)


@dataclass(frozen=True)
class AcceptanceModel:
    """Per-position conditional acceptance of a draft chain, scaled by a per-prompt difficulty factor.

    ``position_rates[i]`` is P(draft i+1 accepted | drafts 1..i accepted) at difficulty 1 and topk 1.
    A prompt's difficulty factor d is uniform in ``difficulty``; rates are multiplied by d and capped.
    """

    position_rates: tuple[float, ...]
    difficulty: tuple[float, float]
    max_rate: float

    def rates(self, spec: SpecConfig, difficulty: float) -> tuple[float, ...]:
        """Conditional acceptance per position for ``spec`` at ``difficulty`` (length ``spec.depth``).

        Wider trees (topk > 1) give each position several chances: 1 - (1 - q)^width.
        """
        out = []
        for i in range(spec.depth):
            base = self.position_rates[min(i, len(self.position_rates) - 1)]
            q = min(self.max_rate, base * difficulty)
            out.append(min(self.max_rate, 1.0 - (1.0 - q) ** spec.width))
        return tuple(out)

    def difficulty_at(self, u: float) -> float:
        """The difficulty factor of a prompt whose hash maps to ``u`` in [0, 1) (uniform in the range)."""
        lo, hi = self.difficulty
        return lo + (hi - lo) * u

    def difficulty_points(self) -> list[float]:
        """Equally likely difficulty values (midpoint rule) used to average over prompts."""
        lo, hi = self.difficulty
        n = _DIFFICULTY_POINTS
        return [lo + (hi - lo) * (k + 0.5) / n for k in range(n)]


def accepted_distribution(rates: tuple[float, ...]) -> list[float]:
    """P(exactly a drafts accepted) for a = 0..len(rates), for a chain with conditional ``rates``."""
    probs = []
    reach = 1.0
    for r in rates:
        probs.append(reach * (1.0 - r))
        reach *= r
    probs.append(reach)
    return probs


def chain_mean_tokens(rates: tuple[float, ...]) -> float:
    """Expected tokens per verify (accepted drafts + the bonus token)."""
    total, reach = 1.0, 1.0
    for r in rates:
        reach *= r
        total += reach
    return total


def expected_cycles(rates: tuple[float, ...], tokens: int) -> float:
    """Expected verify cycles to produce ``tokens`` tokens when each cycle yields 1 + accepted drafts.

    The last cycle may yield more than needed (the surplus is cut), which is why this is not simply
    tokens / mean tokens per cycle.
    """
    if tokens <= 0:
        return 0.0
    dist = [(a + 1, p) for a, p in enumerate(accepted_distribution(rates)) if p > 0.0]
    m = [0.0] * (tokens + 1)
    for r in range(1, tokens + 1):
        m[r] = 1.0 + sum(p * m[max(0, r - x)] for x, p in dist)
    return m[tokens]


@dataclass(frozen=True)
class OutputModel:
    """Natural (EOS) output length per prompt: uniform in ``natural_tokens``, fixed per prompt."""

    natural_tokens: tuple[int, int]


@dataclass(frozen=True)
class ServerDefaults:
    """What the simulated server reports about itself when the launch flags don't say otherwise."""

    model_path: str
    draft_model_path: str
    architecture: str
    accelerator: str
    tp_size: int
    max_running_requests: int
    cuda_graph_max_bs_decode: int
    mem_fraction_static: float
    context_length: int
    max_total_num_tokens: int


@dataclass(frozen=True)
class Profile:
    """One model/hardware pair; every method is pure and cheap."""

    name: str
    description: str
    source: str
    server: ServerDefaults
    cost: StepCostModel
    nccl: NcclTuning
    acceptance: Mapping[str, AcceptanceModel] = field(repr=False)
    output: OutputModel = field(default_factory=lambda: OutputModel((64, 256)))

    # ---- costs -------------------------------------------------------------------------------
    def _scale(self, ms: float, comm_share: float, tuned: bool) -> float:
        """Apply NCCL tuning to the communication share of ``ms``."""
        if not tuned:
            return ms
        return ms * (1.0 - comm_share * (1.0 - self.nccl.comm_factor))

    def _graph_penalty(self, batch: int, cuda_graph_max_bs: int | None) -> float:
        limit = self.server.cuda_graph_max_bs_decode if cuda_graph_max_bs is None else cuda_graph_max_bs
        return self.cost.no_cuda_graph_penalty if batch > limit else 1.0

    def plain_step_ms(self, batch: int, tuned: bool = False, *, cuda_graph_max_bs: int | None = None) -> float:
        """One plain decode step for ``batch`` running requests: fixed + per-request slope."""
        c = self.cost
        ms = c.plain_step_ms + c.plain_per_request_ms * max(0, batch - 1)
        return self._scale(ms, c.plain_comm_share, tuned) * self._graph_penalty(batch, cuda_graph_max_bs)

    def cycle_breakdown(
        self,
        steps: int,
        topk: int,
        draft_tokens: int,
        batch: int,
        tuned: bool = False,
        *,
        cuda_graph_max_bs: int | None = None,
    ) -> CycleBreakdown:
        """One speculative cycle: steps x draft_step + verify_fixed + verify_per_token x batch x draft_tokens."""
        c = self.cost
        pen = self._graph_penalty(batch, cuda_graph_max_bs)
        draft_raw = steps * (c.draft_step_ms + c.draft_per_token_ms * max(0, batch * topk - 1))
        vtok_raw = c.verify_per_token_ms * batch * draft_tokens
        draft = self._scale(draft_raw, c.draft_comm_share, tuned) * pen
        vfix = self._scale(c.verify_fixed_ms, c.verify_comm_share, tuned) * pen
        vtok = self._scale(vtok_raw, c.verify_comm_share, tuned) * pen
        factor = self.nccl.comm_factor if tuned else 1.0
        comm = (draft_raw * c.draft_comm_share + (c.verify_fixed_ms + vtok_raw) * c.verify_comm_share) * factor * pen
        return CycleBreakdown(draft, vfix, vtok, c.cycle_overhead_ms, comm)

    def cycle_ms(
        self,
        steps: int,
        topk: int,
        draft_tokens: int,
        batch: int,
        tuned: bool = False,
        *,
        cuda_graph_max_bs: int | None = None,
    ) -> float:
        """Total time of one speculative cycle (draft + verify + overhead)."""
        return self.cycle_breakdown(
            steps, topk, draft_tokens, batch, tuned, cuda_graph_max_bs=cuda_graph_max_bs
        ).total_ms

    def step_ms(
        self, spec: SpecConfig | None, batch: int, tuned: bool = False, *, cuda_graph_max_bs: int | None = None
    ) -> float:
        """A decode step of either kind: a plain step, or a speculative cycle."""
        if spec is None:
            return self.plain_step_ms(batch, tuned, cuda_graph_max_bs=cuda_graph_max_bs)
        return self.cycle_ms(
            spec.steps, spec.topk, spec.draft_tokens, batch, tuned, cuda_graph_max_bs=cuda_graph_max_bs
        )

    def prefill_ms(self, new_tokens: int, tuned: bool = False) -> float:
        """One prefill (extend) step over ``new_tokens`` uncached prompt tokens (all admitted requests)."""
        c = self.cost
        ms = c.prefill_fixed_ms + c.prefill_per_token_ms * max(0, new_tokens)
        return self._scale(ms, c.prefill_comm_share, tuned)

    def predicted_ttft_ms(self, prompt_tokens: int, *, cached_tokens: int = 0, tuned: bool = False) -> float:
        """Server-side time to first token of a lone request: one prefill over its uncached tokens."""
        return self.prefill_ms(prompt_tokens - cached_tokens, tuned)

    # ---- variants ----------------------------------------------------------------------------
    def slower_draft(self, factor: float) -> Profile:
        """This profile with drafting `factor` times slower: what a heavier draft model does to a cycle."""
        if factor <= 0:
            raise ValueError(f"must be > 0, got {factor}")
        if factor == 1.0:
            return self
        cost = dataclasses.replace(
            self.cost,
            draft_step_ms=self.cost.draft_step_ms * factor,
            draft_per_token_ms=self.cost.draft_per_token_ms * factor,
        )
        return dataclasses.replace(self, cost=cost)

    def slower_communication(self, factor: float) -> Profile:
        """This profile with every part's NCCL communication `factor` times slower (the rest of each part
        unchanged): what NCCL does when it must fall back from NVLink and shared memory to sockets."""
        if factor <= 0:
            raise ValueError(f"must be > 0, got {factor}")
        c = self.cost

        def part(ms: float, share: float) -> float:
            return ms * (1.0 + share * (factor - 1.0))

        def share(old: float) -> float:
            return old * factor / (1.0 + old * (factor - 1.0))

        cost = dataclasses.replace(
            c,
            plain_step_ms=part(c.plain_step_ms, c.plain_comm_share),
            plain_per_request_ms=part(c.plain_per_request_ms, c.plain_comm_share),
            draft_step_ms=part(c.draft_step_ms, c.draft_comm_share),
            draft_per_token_ms=part(c.draft_per_token_ms, c.draft_comm_share),
            verify_fixed_ms=part(c.verify_fixed_ms, c.verify_comm_share),
            verify_per_token_ms=part(c.verify_per_token_ms, c.verify_comm_share),
            prefill_fixed_ms=part(c.prefill_fixed_ms, c.prefill_comm_share),
            prefill_per_token_ms=part(c.prefill_per_token_ms, c.prefill_comm_share),
            plain_comm_share=share(c.plain_comm_share),
            draft_comm_share=share(c.draft_comm_share),
            verify_comm_share=share(c.verify_comm_share),
            prefill_comm_share=share(c.prefill_comm_share),
        )
        return dataclasses.replace(self, cost=cost)

    def scaled_acceptance(self, factor: float) -> Profile:
        """This profile with every draft position's acceptance times `factor`: what a draft model trained
        on other data (or an older checkpoint) does to the accept length, the cycle unchanged."""
        if not 0.0 < factor <= 1.0 / max(max(m.position_rates) for m in self.acceptance.values()):
            raise ValueError(f"must be > 0 and keep every rate <= 1, got {factor}")
        if factor == 1.0:
            return self
        scaled = {
            family: dataclasses.replace(model, position_rates=tuple(r * factor for r in model.position_rates))
            for family, model in self.acceptance.items()
        }
        return dataclasses.replace(self, acceptance=scaled)

    # ---- acceptance --------------------------------------------------------------------------
    def acceptance_for(self, algorithm: str) -> AcceptanceModel:
        """The acceptance model of an algorithm family (falls back to ``default``)."""
        family = SpecConfig(algorithm=algorithm.upper()).family
        return self.acceptance.get(family) or self.acceptance["default"]

    def expected_accept_length(
        self,
        steps: int,
        topk: int,
        draft_tokens: int,
        *,
        algorithm: str = "EAGLE3",
        difficulty: float | None = None,
    ) -> float:
        """Steady-state tokens per verify cycle (accepted drafts + bonus token).

        With ``difficulty=None`` (the default) this is the token-weighted mean over the prompt
        difficulty distribution, i.e. the harmonic mean of per-prompt values: what
        Σ decode tokens / Σ spec_verify_ct converges to over many equal-length requests. Pass
        ``difficulty=1.0`` for the value of a typical prompt. It excludes the prefill token that
        SGLang's ``completion_tokens / spec_verify_ct`` includes; see ``predict_request`` for that.
        """
        spec = SpecConfig(algorithm.upper(), steps, topk, draft_tokens)
        model = self.acceptance_for(spec.algorithm)
        if difficulty is not None:
            return chain_mean_tokens(model.rates(spec, difficulty))
        points = model.difficulty_points()
        return len(points) / sum(1.0 / chain_mean_tokens(model.rates(spec, d)) for d in points)

    def expected_verify_steps(self, spec: SpecConfig, output_tokens: int, *, difficulty: float | None = None) -> float:
        """Expected spec_verify_ct of a request with ``output_tokens`` tokens (the first comes from prefill):
        averaged over the prompt difficulty distribution, or at one ``difficulty`` factor."""
        model = self.acceptance_for(spec.algorithm)
        if difficulty is not None:
            return expected_cycles(model.rates(spec, difficulty), output_tokens - 1)
        return _mean_cycles(model, spec, output_tokens - 1)

    # ---- predictions -------------------------------------------------------------------------
    def predicted_decode_throughput(
        self,
        spec: SpecConfig | None,
        batch: int,
        tuned: bool = False,
        *,
        cuda_graph_max_bs: int | None = None,
    ) -> float:
        """Steady-state output tok/s of the whole batch during decoding (no prefill), time scale 1."""
        step = self.step_ms(spec, batch, tuned, cuda_graph_max_bs=cuda_graph_max_bs)
        per_step = 1.0
        if spec is not None:
            per_step = self.expected_accept_length(spec.steps, spec.topk, spec.draft_tokens, algorithm=spec.algorithm)
        return batch * per_step / step * 1000.0

    def predict_request(
        self, spec: SpecConfig | None, prompt_tokens: int, output_tokens: int, *, tuned: bool = False
    ) -> RequestPrediction:
        """Expected timing of one uncached request alone on the server (what concurrency 1 sees)."""
        ttft = self.predicted_ttft_ms(prompt_tokens, tuned=tuned)
        if spec is None:
            steps = float(max(0, output_tokens - 1))
            return RequestPrediction(prompt_tokens, output_tokens, ttft, steps * self.plain_step_ms(1, tuned), 0.0)
        verify = self.expected_verify_steps(spec, output_tokens)
        return RequestPrediction(prompt_tokens, output_tokens, ttft, verify * self.step_ms(spec, 1, tuned), verify)

    def predicted_round_throughput(
        self,
        spec: SpecConfig | None,
        *,
        concurrency: int,
        prompt_tokens: int,
        output_tokens: int,
        num_requests: int | None = None,
        tuned: bool = False,
        cuda_graph_max_bs: int | None = None,
    ) -> float:
        """Output tok/s of a closed-loop round of ``num_requests`` (default: ``concurrency``) equal requests
        (ignore_eos) sent by ``concurrency`` clients, each sending its next request when one ends.

        At concurrency 1 this is exact in expectation (TTFT + expected steps, one request after another).
        Above 1 it replays the engine's schedule: prefill steps stall decoding, a request arriving during a
        step joins at the next boundary, an idle engine prefills the first arrival alone; for speculative
        servers the per-request verify counts are drawn from the acceptance model (mean of 8 seeded
        replays, so the result is deterministic).
        """
        c = max(1, concurrency)
        total = max(c, num_requests or c)
        if c == 1:  # sequential: exact, with fractional expected verify steps
            return self.predict_request(spec, prompt_tokens, output_tokens, tuned=tuned).throughput

        def prefill(n: int) -> float:
            return self.prefill_ms(n * prompt_tokens, tuned)

        def step(b: int) -> float:
            return self.step_ms(spec, b, tuned, cuda_graph_max_bs=cuda_graph_max_bs)

        if spec is None:
            wall_ms = _closed_loop_ms(c, [output_tokens - 1] * total, prefill, step)
        else:  # requests finish at different steps: average a few seeded replays of the draws
            walls = []
            for rep in range(_REPLAYS):
                rng = random.Random(rep)
                steps = [self._sample_verify_steps(spec, output_tokens, rng) for _ in range(total)]
                walls.append(_closed_loop_ms(c, steps, prefill, step))
            wall_ms = sum(walls) / len(walls)
        return total * output_tokens / wall_ms * 1000.0

    def _sample_verify_steps(self, spec: SpecConfig, output_tokens: int, rng: random.Random) -> int:
        """One random request: a difficulty from the distribution, then chain draws until N tokens."""
        model = self.acceptance_for(spec.algorithm)
        rates = model.rates(spec, model.difficulty_at(rng.random()))
        tokens, steps = 1, 0
        while tokens < output_tokens:
            accepted = 0
            for r in rates:
                if rng.random() >= r:
                    break
                accepted += 1
            tokens += accepted + 1
            steps += 1
        return steps


def _closed_loop_ms(
    clients: int,
    steps: list[int],
    prefill_ms: Callable[[int], float],
    step_ms: Callable[[int], float],
) -> float:
    """Wall time (ms) of a closed-loop round on the engine's step-by-step schedule.

    ``steps[i]`` is the number of decode steps of the i-th request admitted. Arrivals after a finish come
    a hair later than the step boundary, so they join at the next one; arrivals of a burst are ordered, so
    an idle engine admits only the first.
    """
    eps = 1e-9
    total = len(steps)
    queue = iter(steps)
    arrivals = [k * eps for k in range(min(clients, total))]
    sent, finished, t = len(arrivals), 0, 0.0
    running: list[int] = []
    while finished < total:
        if not running and arrivals and min(arrivals) > t:
            t = min(arrivals)  # idle until the next arrival
        ready = [a for a in arrivals if a <= t]
        if ready:
            arrivals = [a for a in arrivals if a > t]
            t += prefill_ms(len(ready))
            running += [next(queue) for _ in ready]
        else:
            t += step_ms(len(running))
            running = [r - 1 for r in running]
        done = sum(1 for r in running if r <= 0)
        running = [r for r in running if r > 0]
        finished += done
        more = min(done, total - sent)
        arrivals += [t + (k + 1) * eps for k in range(more)]
        sent += more
    return t


def _mean_cycles(model: AcceptanceModel, spec: SpecConfig, tokens: int) -> float:
    """Expected cycles for ``tokens`` decode tokens, averaged over difficulty (memoised: it's a DP)."""
    return _mean_cycles_cached(model.position_rates, model.difficulty, model.max_rate, spec, tokens)


@lru_cache(maxsize=256)
def _mean_cycles_cached(
    rates: tuple[float, ...], difficulty: tuple[float, float], max_rate: float, spec: SpecConfig, tokens: int
) -> float:
    model = AcceptanceModel(rates, difficulty, max_rate)
    points = model.difficulty_points()
    return sum(expected_cycles(model.rates(spec, d), tokens) for d in points) / len(points)
