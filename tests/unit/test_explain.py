"""Why a key moved: each kind of change is named by the part of the cycle it acts on, from seeded rounds
(1% round noise, 2% start-to-start offsets on the level's runs), with the differences that could do it."""

from __future__ import annotations

import random
import re

import pytest
from report_samples import measurement

from pytest_specperf.measure.records import Measurement
from pytest_specperf.verdict.drift import Change
from pytest_specperf.verdict.explain import explain, speedup_shortfall

TAU, TPOT, TTFT, PLAIN_TPOT = 3.10, 10.0, 40.0, 15.9


def run(
    rng: random.Random, server: str, *, tau: float | None, tpot: float, ttft: float = TTFT, offset: float = 0.02
) -> Measurement:
    """Five rounds of one start: throughput from τ and TPOT (and TTFT), with a start offset and round noise."""
    start = rng.gauss(1.0, offset)
    taus = [t * rng.gauss(1.0, 0.005) for t in [tau] * 5] if tau is not None else None
    tpots = [tpot * start * rng.gauss(1.0, 0.01) for _ in range(5)]
    per_token = [p / (t if taus else 1.0) for p, t in zip(tpots, taus or [1.0] * 5, strict=True)]
    rounds = [200 * 1000 / (ttft + 199 * p) for p in per_token]
    return measurement(server, rounds, taus, per_token, ttft_ms=ttft)


def night(rng: random.Random, *, tau: float = TAU, cycle: float = 1.0, plain: float = 1.0, ttft: float = 1.0):
    """The level (ten runs of both servers) and tonight with the given factors on τ, the speculative cycle,
    plain decoding's TPOT and the time to the first token."""
    level = [run(rng, "eagle3-5step", tau=TAU, tpot=TPOT * TAU) for _ in range(10)]
    plain_level = [run(rng, "plain", tau=None, tpot=PLAIN_TPOT) for _ in range(10)]
    tonight = run(rng, "eagle3-5step", tau=tau, tpot=TPOT * TAU * cycle, ttft=TTFT * ttft, offset=0.0)
    reference = run(rng, "plain", tau=None, tpot=PLAIN_TPOT * plain, offset=0.0)
    return tonight, level, reference, plain_level


NCCL = Change("NCCL_ALGO", "Ring", "unset")
DRAFT = Change("server.speculative_draft_model_path", "org/draft@v1", "org/draft@v2")


@pytest.mark.parametrize("seed", range(20))
def test_a_slower_target_is_the_target_or_the_node_and_names_the_lost_nccl_variable(seed: int) -> None:
    tonight, level, reference, plain_level = night(random.Random(seed), cycle=1.14, plain=1.14)
    found = explain(tonight, level, reference=reference, reference_level=plain_level, drift=[NCCL, DRAFT])
    assert found is not None and found.part == "target"
    assert found.throughput.value < 0.92
    assert found.causes == (NCCL,)  # a draft model's path does not act on the target side
    sentence = found.sentence()
    assert "the target model or the node, not the draft" in sentence and "NCCL_ALGO: Ring → unset" in sentence


@pytest.mark.parametrize("seed", range(20))
def test_a_draft_that_accepts_less_is_the_accept_length(seed: int) -> None:
    tonight, level, reference, plain_level = night(random.Random(seed), tau=TAU * 0.85)
    found = explain(tonight, level, reference=reference, reference_level=plain_level, drift=[NCCL, DRAFT])
    assert found is not None and found.part == "accept_length"
    assert found.causes == (DRAFT,)
    assert "the accept length fell from 3.1" in found.sentence() and "to 2.6" in found.sentence()


@pytest.mark.parametrize("seed", range(20))
def test_a_slower_cycle_with_plain_decoding_unchanged_is_drafting(seed: int) -> None:
    tonight, level, reference, plain_level = night(random.Random(seed), cycle=1.14)
    found = explain(tonight, level, reference=reference, reference_level=plain_level)
    assert found is not None and found.part == "drafting"
    assert "drafting (the draft model or its settings), not the target" in found.sentence()


def test_a_slower_first_token_with_the_cycle_unchanged_is_prefill() -> None:
    tonight, level, reference, plain_level = night(random.Random(7), ttft=8.0)
    found = explain(tonight, level, reference=reference, reference_level=plain_level)
    assert found is not None and found.part == "prefill"
    assert "prefill or queueing" in found.sentence()


def test_without_plain_decoding_beside_the_level_the_cycle_is_named_without_a_side() -> None:
    tonight, level, _, _ = night(random.Random(3), cycle=1.14, plain=1.14)
    found = explain(tonight, level)
    assert found is not None and found.part == "cycle"
    assert "no plain decoding measured beside the level" in found.sentence()


def test_a_plain_server_is_explained_by_its_tpot() -> None:
    rng = random.Random(5)
    level = [run(rng, "plain", tau=None, tpot=PLAIN_TPOT) for _ in range(10)]
    tonight = run(rng, "plain", tau=None, tpot=PLAIN_TPOT * 1.2, offset=0.0)
    found = explain(tonight, level, drift=[NCCL])
    assert found is not None and found.part == "target" and found.tau is None
    assert found.sentence().startswith("-") and "decoding (TPOT) is " in found.sentence()
    assert found.to_dict()["causes"] == [{"name": "NCCL_ALGO", "old": "Ring", "new": "unset"}]


def test_the_sentence_reads_in_plain_words() -> None:
    tonight, level, reference, plain_level = night(random.Random(1), cycle=1.14, plain=1.14)
    found = explain(tonight, level, reference=reference, reference_level=plain_level, drift=[NCCL])
    assert found is not None
    pct = r"\d+\.\d%"
    assert re.fullmatch(
        rf"-\d+\.\d%: the cycle is {pct} \[{pct}, {pct}\] slower and plain decoding is {pct} \[{pct}, {pct}\] "
        r"slower: the target model or the node, not the draft \(τ 3\.10 → 3\.1\d\); changed since the level, and "
        r"able to act on it: NCCL_ALGO: Ring → unset",
        found.sentence(),
    ), found.sentence()


def test_a_speedup_short_of_its_minimum_says_how_tau_stands_against_the_break_even() -> None:
    """τ* = cycle / the reference's TPOT: the plain tokens a cycle's time would have decoded."""
    rng = random.Random(2)
    reference = run(rng, "plain", tau=None, tpot=PLAIN_TPOT, offset=0.0)
    slow_cycle = run(rng, "eagle3-5step", tau=2.0, tpot=PLAIN_TPOT * 2.5, offset=0.0)  # τ* about 2.5
    below = speedup_shortfall(slow_cycle, reference)
    assert below is not None and re.match(r"τ (1\.9|2\.0)\d is below the break-even 2\.[45]\d \(a cycle of ", below)
    assert below.endswith("the draft accepts too little for this cycle")
    paying = run(rng, "eagle3-5step", tau=3.1, tpot=PLAIN_TPOT * 2.0, offset=0.0)  # τ* about 2.0
    above = speedup_shortfall(paying, reference)
    assert above is not None and re.match(
        r"τ 3\.\d\d is above the break-even [12]\.\d\d .*, so decoding pays by 1\.", above
    )


def with_histogram(m: Measurement, histogram: tuple[int, ...]) -> Measurement:
    """The measurement with every response reporting `histogram` (verify steps by drafts accepted)."""
    from dataclasses import replace

    m.rounds = [replace(r, records=[replace(rec, accept_histogram=histogram) for rec in r.records]) for r in m.rounds]
    return m


def test_a_fall_in_accept_length_names_the_draft_positions_that_fell() -> None:
    tonight, level, reference, plain_level = night(random.Random(4), tau=TAU * 0.85)
    level = [with_histogram(m, (10, 10, 20, 40, 10, 10)) for m in level]  # shares 0.9 0.8 0.6 0.2 0.1
    tonight = with_histogram(tonight, (10, 10, 50, 10, 10, 10))  # position 3: 0.6 -> 0.3
    found = explain(tonight, level, reference=reference, reference_level=plain_level)
    assert found is not None and found.part == "accept_length"
    assert found.sentence().endswith(
        "; by draft position: 0.90 → 0.90, 0.80 → 0.80, 0.60 → 0.30, 0.20 → 0.20, 0.10 → 0.10 "
        "(the largest drop at position 3: 0.30 of the 0.30 accepted drafts per verify step lost)"
    )
    positions = found.to_dict()["positions"]
    assert positions["level"] == pytest.approx([0.9, 0.8, 0.6, 0.2, 0.1])
    assert positions["tonight"] == pytest.approx([0.9, 0.8, 0.3, 0.2, 0.1])
