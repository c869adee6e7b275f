"""Hand-built measurements and reports for renderer, output and CLI tests (no server needed).

The numbers follow docs/story.md (Kimi-K2.5 on 8 GPUs, EAGLE-3) so a reader can check them: plain
decoding ~62.9 tok/s, 5 steps τ≈2.1 at ~71 tok/s, 2 steps τ≈1.93-2.3 at ~75.9 tok/s. Everything is
fixed, so rendered text can be compared with golden strings.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from pytest_specperf.config.settings import ServerConfig, SpecperfConfig
from pytest_specperf.measure.fingerprint import Fingerprint
from pytest_specperf.measure.records import Distribution, Measurement, MeasurementKey, RequestRecord, RoundSample
from pytest_specperf.report.analysis import Report, build_report
from pytest_specperf.store.records import Provenance, StoredBaseline, StoredRun, Summary
from pytest_specperf.verdict.checks import Verdict

SERVERS = {
    "plain": ServerConfig("plain"),
    "eagle3-5step": ServerConfig(
        "eagle3-5step", algorithm="EAGLE3", draft_model="org/eagle3", num_steps=5, eagle_topk=1, num_draft_tokens=6
    ),
    "eagle3-2step": ServerConfig(
        "eagle3-2step", algorithm="EAGLE3", draft_model="org/eagle3", num_steps=2, eagle_topk=1, num_draft_tokens=3
    ),
}
CONFIG = SpecperfConfig(model="moonshotai/Kimi-K2.5", reference="plain", servers=SERVERS)
STEPS = {"eagle3-5step": (5, 1, 6), "eagle3-2step": (2, 1, 3)}


def fingerprint(server: str, *, scale: str | None = "0.1", nccl: str = "Ring") -> Fingerprint:
    """A simulator fingerprint (time scale `scale`), or a GPU one when `scale` is None."""
    identity = {"launcher": "sglang", "model": "moonshotai/Kimi-K2.5", "gpu": "NVIDIA H200", "gpu_count": "8"}
    config = SERVERS.get(server)  # each server's own speculative settings, as a real fingerprint has them
    identity.update(
        algorithm=config.algorithm if config else server,
        num_steps=config.num_steps if config else None,
        eagle_topk=config.eagle_topk if config else None,
        num_draft_tokens=config.num_draft_tokens if config else None,
    )
    if scale is not None:
        identity.update(launcher="sim", sim_profile="kimi-k2.5-tp8", sim_time_scale=scale)
    environment = {"sglang.version": "0.5.23", "NCCL_ALGO": nccl}
    return Fingerprint(identity=identity, environment=environment)


def round_sample(index: int, tok_s: float, tau: float | None, tpot_ms: float, ttft_ms: float) -> RoundSample:
    """One round of two requests, 32 tokens each, consistent with the given throughput."""
    duration = 64 / tok_s
    verify = None if tau is None else round(32 / tau)
    records = tuple(
        RequestRecord(
            index=i,
            sent=0.0,
            first_chunk=ttft_ms / 1000,
            last_chunk=duration,
            num_chunks=16,
            prompt_tokens=20,
            completion_tokens=32,
            verify_ct=verify,
            finish_reason="length",
            output_hash=f"h{i}",
        )
        for i in range(2)
    )
    return RoundSample(
        index=index,
        duration_s=round(duration, 6),
        output_throughput=tok_s,
        request_count=2,
        error_count=0,
        ttft_ms=Distribution(ttft_ms, ttft_ms, ttft_ms * 1.1, ttft_ms * 1.2),
        tpot_ms=Distribution(tpot_ms, tpot_ms, tpot_ms * 1.05, tpot_ms * 1.1),
        e2e_ms=Distribution(duration * 1000, duration * 1000, duration * 1000, duration * 1000),
        chunk_gap_ms=Distribution(tpot_ms * 2, tpot_ms * 2, tpot_ms * 2.2, tpot_ms * 2.5),
        accept_length=tau,
        accept_length_per_request=tau,
        acceptance_rate=None,
        cached_tokens=0,
        records=records,
    )


def measurement(
    server: str,
    tok_s: list[float],
    taus: list[float] | None,
    tpot_ms: list[float],
    *,
    workload: str = "chat",
    concurrency: int = 1,
    ttft_ms: float = 40.0,
    scale: str | None = "0.1",
    nccl: str = "Ring",
) -> Measurement:
    steps, topk, draft = STEPS.get(server, (None, None, None))
    rounds = [round_sample(i, t, None if taus is None else taus[i], tpot_ms[i], ttft_ms) for i, t in enumerate(tok_s)]
    return Measurement(
        key=MeasurementKey(server, workload, concurrency),
        workload_hash="w1",
        is_reference=server == "plain",
        rounds=rounds,
        num_steps=steps,
        eagle_topk=topk,
        num_draft_tokens=draft,
        fingerprint=fingerprint(server, scale=scale, nccl=nccl),
    )


def story_measurements(scale: str | None = "0.1") -> dict[MeasurementKey, Measurement]:
    """docs/story.md at concurrency 1: plain 62.9, 5 steps ~71, 2 steps ~75.9 tok/s."""
    found = [
        measurement("plain", [62.6, 63.1, 63.0], None, [15.95, 15.85, 15.87], scale=scale),
        measurement("eagle3-5step", [70.8, 71.3, 70.9], [2.10, 2.11, 2.09], [14.1, 14.0, 14.1], scale=scale),
        measurement("eagle3-2step", [75.5, 76.2, 76.0], [1.95, 1.93, 1.96], [13.2, 13.1, 13.15], scale=scale),
    ]
    return {m.key: m for m in found}


def sweep_measurements() -> dict[MeasurementKey, Measurement]:
    """The story plus concurrency 4 and 16, where verify work competes with real tokens."""
    found = dict(story_measurements())
    for c, plain, five, two in ((4, 230.0, 205.0, 240.0), (16, 800.0, 560.0, 700.0)):
        extra = [
            measurement("plain", [plain * 0.99, plain, plain * 1.01], None, [17.0, 17.1, 17.0], concurrency=c),
            measurement("eagle3-5step", [five, five * 1.01, five * 0.99], [2.1] * 3, [19.0] * 3, concurrency=c),
            measurement("eagle3-2step", [two, two * 1.02, two * 0.98], [1.95] * 3, [16.5] * 3, concurrency=c),
        ]
        found.update({m.key: m for m in extra})
    return found


def baseline_of(m: Measurement, path: Path) -> StoredBaseline:
    provenance = Provenance("2025-01-01T00:00:00+00:00", "abc123", "gpu-box", "0.1.0")
    return StoredBaseline(m, Summary.of(m), provenance, path)


def nightly_history(runs: list[Measurement], path: Path, host: str = "h200") -> StoredBaseline:
    """The runs as a stored history, one session a night (s0, s1, ...): a session pairs a speculative
    server's run with the reference's run of the same night (the speedup's history)."""
    stored = tuple(
        StoredRun(
            m,
            baseline_of(m, path).summary,
            Provenance(f"2026-12-{i + 1:02d}T18:00:00+00:00", None, host, "0", f"s{i}"),
            0,
        )
        for i, m in enumerate(runs)
    )
    return dataclasses.replace(baseline_of(runs[-1], path), runs=stored)


def story_report() -> Report:
    """Three configs at c1; the 5-step config has a stored baseline measured with other NCCL tuning."""
    measurements = story_measurements()
    five = MeasurementKey("eagle3-5step", "chat", 1)
    old = measurement("eagle3-5step", [74.0, 74.5, 74.2], [2.10, 2.11, 2.10], [13.5, 13.4, 13.5], nccl="Tree")
    baselines = {five: baseline_of(old, Path("/store/eagle3-5step/chat-c1.json"))}
    verdicts = {five: [Verdict.PASS], MeasurementKey("eagle3-2step", "chat", 1): [Verdict.NEW]}
    return build_report(CONFIG, measurements, verdicts, baselines, {}, updating=False)


def sweep_report() -> Report:
    return build_report(CONFIG, sweep_measurements(), {}, {}, {}, updating=False)


def history_report(not_stored: dict[MeasurementKey, str] | None = None) -> Report:
    """Ten stored nights of the 5-step config and the reference, paired by session: segment 0 (two
    nights at ~74 tok/s), then --specperf-update and segment 1: six nights at ~71, two at ~65.3 (-8%,
    from the run of 2026-11-18, commit c8aaaaa), tonight at 65.3 too. The reference stays at ~62.9."""
    from pytest_specperf.store.records import StoredRun

    def wobble(level: float, i: int) -> list[float]:
        return [round(level * (1 + 0.002 * ((i % 3) - 1)) + d, 2) for d in (-0.1, 0.1, 0.0)]

    levels = [74.0, 74.0, *([71.0] * 6), 65.3, 65.3]

    def history(server: str, values: list[float], taus: list[float] | None) -> StoredBaseline:
        runs = []
        for i, level in enumerate(values):
            m = measurement(server, wobble(level, i), taus, [14.0, 14.0, 14.0] if taus else [15.9] * 3)
            provenance = Provenance(f"2026-11-{10 + i:02d}T01:00:00+00:00", f"c{i}aaaaaaaa", "gpu", "0", f"s{i}")
            runs.append(StoredRun(m, Summary.of(m), provenance, 0 if i < 2 else 1))
        newest = runs[-1]
        path = Path(f"/store/{server}/chat-c1.json")
        return StoredBaseline(newest.measurement, newest.summary, newest.provenance, path, tuple(runs))

    five, plain = MeasurementKey("eagle3-5step", "chat", 1), MeasurementKey("plain", "chat", 1)
    measurements = {
        plain: measurement("plain", [62.8, 63.0, 62.9], None, [15.9] * 3),
        five: measurement("eagle3-5step", [65.2, 65.4, 65.3], [2.10, 2.11, 2.09], [14.0, 14.0, 14.0]),
    }
    baselines = {
        five: history("eagle3-5step", levels, [2.10, 2.11, 2.09]),
        plain: history("plain", [62.9] * len(levels), None),
    }
    verdicts = {five: [Verdict.INCONCLUSIVE], plain: [Verdict.PASS]}
    return build_report(CONFIG, measurements, verdicts, baselines, {}, updating=False, not_stored=not_stored)
