"""vLLM's Prometheus speculation counters, read from real `/metrics` texts of vLLM 0.32.0
(tests/engines/data/vllm-0.32.0/metrics-*-before/after.txt, taken around the captured requests)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pytest_specperf.engines.base import SpecCounters as Counters
from pytest_specperf.engines.sglang import SGLang
from pytest_specperf.engines.vllm import VLLM, prometheus_samples
from pytest_specperf.measure.records import Distribution, Measurement, MeasurementKey, RequestRecord, RoundSample
from pytest_specperf.measure.rounds import summarise_round

DATA = Path(__file__).parent / "data" / "vllm-0.32.0"


def counters(name: str) -> Counters | None:
    return VLLM().spec_counters((DATA / f"metrics-{name}.txt").read_text())


def response_sums(config: str) -> tuple[int, int, int]:
    """Σ (num_spec_steps, num_accepted_draft_tokens, num_draft_tokens) over the two captured requests."""
    steps = accepted = drafted = 0
    for endpoint in ("completions", "chat"):
        text = (DATA / f"{endpoint}-{config}.sse").read_text()
        final = json.loads(re.findall(r"^data: (\{.*\})$", text, flags=re.M)[-1])
        spec = final["metrics"]["speculative_decoding"]
        steps += spec["num_spec_steps"]
        accepted += spec["num_accepted_draft_tokens"]
        drafted += spec["num_draft_tokens"]
    return steps, accepted, drafted


def test_counters_of_a_real_metrics_text() -> None:
    assert counters("draft-after") == Counters(
        drafts=29, draft_tokens=87, accepted=41, accepted_per_position=(19, 14, 8)
    )


def test_a_plain_server_has_no_counters() -> None:
    assert counters("plain-before") is None and counters("plain-after") is None
    assert SGLang().spec_counters((DATA / "metrics-draft-after.txt").read_text()) is None  # not SGLang's counters


@pytest.mark.parametrize("config", ["draft", "ngram", "self"])
def test_deltas_equal_the_responses_own_counts(config: str) -> None:
    """Between before and after the server served exactly the two captured requests: the Prometheus
    deltas are their per-request counts summed, so τ from either source is the same number."""
    before, after = counters(f"{config}-before"), counters(f"{config}-after")
    assert before is not None and after is not None
    delta = after - before
    steps, accepted, drafted = response_sums(config)
    assert (delta.drafts, delta.accepted, delta.draft_tokens) == (steps, accepted, drafted)
    assert delta.accept_length == 1 + accepted / steps
    assert sum(delta.accepted_per_position) == delta.accepted  # every accepted draft has one position
    assert delta.acceptance_rate == accepted / drafted


def test_acceptance_per_position() -> None:
    before, after = counters("draft-before"), counters("draft-after")
    assert before is not None and after is not None
    delta = after - before
    assert delta.accepted_per_position == (17, 13, 7)
    assert delta.acceptance_per_position == pytest.approx((17 / 26, 13 / 26, 7 / 26))
    own = counters("self-after")
    assert own is not None and own.acceptance_per_position == (1.0, 1.0, 1.0)  # the target as its own draft


def test_prometheus_text_details() -> None:
    text = "\n".join(
        [
            "# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.",
            "# TYPE vllm:spec_decode_num_drafts_total counter",
            'vllm:spec_decode_num_drafts_total{engine="0",model_name="m, \\"quoted\\" {x}"} 10.0',
            'vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 5 1700000000000',  # with a timestamp
            'vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.79e+09',
            'vllm:spec_decode_num_accepted_tokens_total{engine="0"} 7.0',
            'vllm:spec_decode_num_accepted_tokens_total{engine="1"} NaN',
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="1"} 2.0',
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",position="1"} 1.0',
            "vllm:spec_decode_num_draft_tokens_total 30",
        ]
    )
    assert VLLM().spec_counters(text) == Counters(drafts=15, draft_tokens=30, accepted=7, accepted_per_position=(0, 3))
    samples = prometheus_samples(text, frozenset({"vllm:spec_decode_num_drafts_total"}))
    assert samples is not None and samples[0][1]["model_name"] == 'm, "quoted" {x}'
    assert VLLM().spec_counters(text + "\ngarbage line {\n") is None  # an unreadable scrape, not a partial sum


def _record(i: int, *, verify_ct: int | None = None, accepted: int | None = None) -> RequestRecord:
    return RequestRecord(
        index=i,
        sent=0.0,
        first_chunk=0.1,
        last_chunk=1.0,
        num_chunks=10,
        completion_tokens=32,
        verify_ct=verify_ct,
        accepted_drafts=accepted,
        proposed_drafts=None if verify_ct is None else 3 * verify_ct,
        spec_tokens=None if verify_ct is None else (accepted or 0) + verify_ct,
    )


DELTA = Counters(drafts=26, draft_tokens=78, accepted=37, accepted_per_position=(17, 13, 7))


def test_a_round_without_per_request_counts_takes_tau_from_the_counters() -> None:
    sample = summarise_round(0, [_record(0), _record(1)], None, None, DELTA)
    assert sample.accept_length == 1 + 37 / 26 and sample.accept_length_source == "prometheus"
    assert sample.acceptance_rate == 37 / 78 and sample.accept_length_per_request is None
    assert sample.acceptance_per_position == pytest.approx((17 / 26, 13 / 26, 7 / 26))


def test_responses_come_first_and_the_counters_are_kept() -> None:
    records = [_record(0, verify_ct=10, accepted=15), _record(1, verify_ct=16, accepted=22)]
    sample = summarise_round(0, records, 3, 1, DELTA)
    assert sample.accept_length == (15 + 22 + 26) / 26 and sample.accept_length_source == "responses"
    assert sample.spec_counters == DELTA
    assert summarise_round(0, [_record(0)], None, None).accept_length_source is None


def test_counters_round_trip_and_pool_over_rounds() -> None:
    sample = summarise_round(0, [_record(0)], None, None, DELTA)
    data = sample.to_dict()
    assert data["accept_length_source"] == "prometheus"
    assert data["spec_counters"] == {
        "drafts": 26,
        "draft_tokens": 78,
        "accepted": 37,
        "accepted_per_position": [17, 13, 7],
    }
    assert RoundSample.from_dict(json.loads(json.dumps(data))) == sample
    plain = summarise_round(0, [_record(0)], None, None).to_dict()
    assert "spec_counters" not in plain and "accept_length_source" not in plain  # SGLang's rounds keep their shape
    other = summarise_round(1, [_record(0)], None, None, Counters(10, 30, 20, (10, 6, 4)))
    m = Measurement(MeasurementKey("s", "w", 1), "h", False, rounds=[sample, other])
    assert m.accept_length_source == "prometheus"
    assert m.acceptance_per_position == pytest.approx((27 / 36, 19 / 36, 11 / 36))
    empty = RoundSample(0, 1.0, 1.0, 1, 0, *(Distribution(),) * 4, None, None, None, 0)
    assert Measurement(MeasurementKey("s", "w", 1), "h", True, rounds=[empty]).acceptance_per_position is None
