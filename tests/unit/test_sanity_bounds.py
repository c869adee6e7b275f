"""Sanity bounds that hold for trees: the accept-length ceiling and an acceptance rate from the server's counts."""

from __future__ import annotations

import pytest

from pytest_specperf.measure.records import Measurement, MeasurementKey, RequestRecord
from pytest_specperf.measure.rounds import sanity_warnings, summarise_round


def record(index: int, tokens: int, verify: int, correct: int | None = None, proposed: int | None = None):
    return RequestRecord(
        index=index,
        sent=0.0,
        first_chunk=0.1,
        last_chunk=1.0,
        num_chunks=verify,
        completion_tokens=tokens,
        verify_ct=verify,
        accepted_drafts=correct,
        proposed_drafts=proposed,
    )


def measurement(
    records: list[RequestRecord], steps: int, topk: int, draft: int, algorithm: str = "EAGLE3"
) -> Measurement:
    m = Measurement(
        key=MeasurementKey("tree", "default", 1),
        workload_hash="h",
        is_reference=False,
        num_steps=steps,
        eagle_topk=topk,
        num_draft_tokens=draft,
        algorithm=algorithm,
    )
    m.rounds.append(summarise_round(0, records, steps, topk))
    return m


def test_a_tree_accepts_at_most_its_depth_plus_the_bonus_token() -> None:
    """steps=3, topk=8, 16 draft tokens: steps*topk+1 = 25 lets an impossible 6.0 through; the real ceiling is 4."""
    warnings = sanity_warnings(measurement([record(0, 60, 10)], steps=3, topk=8, draft=16), {})
    assert "accept length 6.00 outside [1, the draft's depth + 1 = 4]" in warnings


def test_few_draft_tokens_bound_a_chain_below_its_steps() -> None:
    warnings = sanity_warnings(measurement([record(0, 45, 10)], steps=5, topk=4, draft=4), {})
    assert any("outside [1, the draft's depth + 1 = 4]" in w for w in warnings)
    assert not any("outside" in w for w in sanity_warnings(measurement([record(0, 35, 10)], 3, 8, 16), {}))


def test_an_ngram_draft_is_bounded_by_its_draft_tokens_not_its_steps() -> None:
    """SGLang resolves NGRAM's defaults to steps 1, topk 10, 12 draft tokens (the real CPU night's
    /server_info): an n-gram lookup drafts up to 11 tokens, so a τ of 2.4 is possible, not a fault that
    keeps the run out of its history (`min(steps, draft_tokens - 1) + 1` said 2)."""
    ngram = measurement([record(0, 48, 20)], steps=1, topk=10, draft=12, algorithm="NGRAM")
    assert not any("outside" in w for w in sanity_warnings(ngram, {}))
    impossible = measurement([record(0, 130, 10)], steps=1, topk=10, draft=12, algorithm="NGRAM")
    assert "accept length 13.00 outside [1, the draft's depth + 1 = 12]" in sanity_warnings(impossible, {})


def test_acceptance_rate_comes_from_the_servers_counts_for_trees_too() -> None:
    """The chain formula (tau - 1) / steps is wrong for trees; spec_num_correct/proposed_drafts is not."""
    records = [record(0, 30, 10, correct=20, proposed=150), record(1, 25, 10, correct=15, proposed=150)]
    sample = measurement(records, steps=3, topk=8, draft=16).rounds[0]
    assert sample.acceptance_rate == pytest.approx(35 / 300)


def test_without_the_counts_a_chain_keeps_the_chain_formula() -> None:
    sample = measurement([record(0, 30, 10)], steps=3, topk=1, draft=4).rounds[0]
    assert sample.acceptance_rate == pytest.approx((3.0 - 1) / 3)
    assert measurement([record(0, 30, 10)], steps=3, topk=8, draft=16).rounds[0].acceptance_rate is None
