"""Stored histories with everything a dashboard draws: nights of several keys in both layers, segments,
suspect and refused nights, an outlier, a step, a drift, fingerprint drift, a second server start.

Each night is a run built from fixed, seeded round samples and appended through the file store, as
`--specperf-record` appends it (one session per night; a second server start shares its night's).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from pytest_specperf.measure.fingerprint import Fingerprint
from pytest_specperf.measure.records import Distribution, Measurement, MeasurementKey, RoundSample
from pytest_specperf.store.file import FileStore
from pytest_specperf.store.records import Provenance, StoredRun, Summary

ROUNDS = 5
SPECULATIVE = {"eagle3-5step": (5, 1, 6), "eagle3-2step": (2, 1, 3)}


def fingerprint(server: str, *, simulated: bool, nccl: str) -> Fingerprint:
    """Kimi-K2.5 on 8 H200 (the simulator's model of it at time scale 0.1, or SGLang itself)."""
    steps, topk, draft = SPECULATIVE.get(server, (None, None, None))
    identity = {
        "launcher": "sglang",
        "model": "moonshotai/Kimi-K2.5",
        "gpu": "NVIDIA H200",
        "gpu_count": "8",
        "algorithm": "EAGLE3" if steps else None,
        "num_steps": steps,
        "eagle_topk": topk,
        "num_draft_tokens": draft,
    }
    if simulated:
        identity.update(launcher="sim", sim_profile="kimi-k2.5-tp8", sim_time_scale="0.1")
    return Fingerprint(identity=identity, environment={"sglang.version": "0.5.23", "NCCL_ALGO": nccl})


def measurement(
    key: MeasurementKey, tok_s: list[float], taus: list[float] | None, *, simulated: bool, nccl: str
) -> Measurement:
    """Rounds of the given throughputs (and accept lengths), TPOT consistent with them."""
    rounds = []
    for i, t in enumerate(tok_s):
        tau = None if taus is None else taus[i]
        tpot = 1000.0 / t
        spread = Distribution(tpot, tpot, tpot * 1.05, tpot * 1.1)
        rounds.append(
            RoundSample(
                index=i,
                duration_s=round(64 / t, 6),
                output_throughput=t,
                request_count=2,
                error_count=0,
                ttft_ms=Distribution(40.0, 40.0, 44.0, 48.0),
                tpot_ms=spread,
                e2e_ms=spread,
                chunk_gap_ms=spread,
                accept_length=tau,
                accept_length_per_request=tau,
                acceptance_rate=None,
                cached_tokens=0,
            )
        )
    steps, topk, draft = SPECULATIVE.get(key.server, (None, None, None))
    return Measurement(
        key=key,
        workload_hash="w1",
        is_reference=key.server == "plain",
        rounds=rounds,
        num_steps=steps,
        eagle_topk=topk,
        num_draft_tokens=draft,
        fingerprint=fingerprint(key.server, simulated=simulated, nccl=nccl),
    )


@dataclass(frozen=True)
class Night:
    """One stored run: its level (tok/s), status, and what starts a segment or changes the setup."""

    level: float
    status: str = "accepted"
    new_segment: bool = False
    nccl: str = "Ring"
    second_start: float | None = None  # the same night's second server start, at this level


def record(
    store: FileStore,
    key: MeasurementKey,
    nights: list[Night],
    *,
    simulated: bool = True,
    seed: int = 1,
    spread: float = 0.005,
    noise: float = 0.004,
    tau: float | None = None,
) -> None:
    """Append `nights` to the history of `key`, one session per night, dated one day apart: each server
    start off its night's level by `spread` (CV), each round by `noise`."""
    rng = random.Random(f"{key.label}-{seed}")
    for i, night in enumerate(nights):
        session = f"{key.workload}-{key.concurrency}-n{i:02d}"
        levels = [night.level] + ([night.second_start] if night.second_start is not None else [])
        for start, level in enumerate(levels):
            offset = level * (1 + rng.gauss(0.0, spread))
            tok_s = [round(offset * (1 + rng.gauss(0.0, noise)), 3) for _ in range(ROUNDS)]
            taus = None if tau is None else [round(tau * (1 + rng.gauss(0.0, 0.002)), 4) for _ in range(ROUNDS)]
            m = measurement(key, tok_s, taus, simulated=simulated, nccl=night.nccl)
            created = f"2026-11-{1 + i:02d}T02:{10 + start:02d}:00+00:00"
            provenance = Provenance(
                created, f"{i:02d}{start}abcdef0123", "gpu-node-1", "0.1.0", session, f"{session}-{start}"
            )
            run = StoredRun(m, Summary.of(m), provenance, 0, night.status)
            store.append(run, new_segment=night.new_segment and start == 0)


STEP_AT = 7  # the first run of eagle3-5step/chat/c1 after its step


def rich_store(root: Path) -> FileStore:
    """Five keys: a steady reference, a step (refused nights, a second start tonight), two segments with
    an outlier and fingerprint drift (tonight suspect), a drift, and a real engine's bimodal key."""
    store = FileStore(root)
    plain, five, two = (MeasurementKey(s, "chat", 1) for s in ("plain", "eagle3-5step", "eagle3-2step"))
    record(store, plain, [Night(630.0) for _ in range(12)])
    stepped = [Night(710.0) for _ in range(STEP_AT)] + [Night(650.0, "suspect")]
    stepped += [Night(650.0, "refused") for _ in range(3)] + [Night(648.0, "refused", second_start=651.0)]
    record(store, five, stepped, tau=2.1)
    segments = [Night(760.0) for _ in range(4)] + [Night(775.0, new_segment=True)] + [Night(775.0) for _ in range(3)]
    segments += [Night(728.0), Night(776.0, nccl="Tree"), Night(775.0, nccl="Tree"), Night(774.0, nccl="Tree")]
    segments += [Night(738.0, "suspect", nccl="Tree")]
    record(store, two, segments, tau=1.95)
    record(store, MeasurementKey("plain", "sweep", 2), [Night(1160.0 * 0.993**i) for i in range(18)], spread=0.002)
    record(
        store,
        MeasurementKey("plain", "code", 1),
        [Night(600.0 if i % 2 else 660.0) for i in range(14)],
        simulated=False,
        spread=0.002,
    )
    return store
