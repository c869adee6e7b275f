"""Where each engine reports its verify steps by number of accepted drafts (what `specperf tune` fits)."""

from __future__ import annotations

import pytest

from pytest_specperf.engines.sglang import SGLang
from pytest_specperf.measure.records import RequestRecord

FINAL = {"spec_verify_ct": 6, "spec_num_correct_drafts": 7, "spec_num_proposed_drafts": 30}


@pytest.mark.parametrize("name", ["spec_correct_drafts_histogram", "spec_accept_histogram"])
def test_sglang_reads_the_histogram_under_either_name(name: str) -> None:
    """0.5.23 sends spec_correct_drafts_histogram; earlier releases called it spec_accept_histogram."""
    counts = SGLang().spec_counts({"meta_info": {**FINAL, name: [1, 2, 0, 1]}}, "generate")
    assert counts is not None and counts.histogram == (1, 2, 0, 1)


def test_sglang_chat_histogram_comes_from_sglext() -> None:
    final = {"sglext": {"spec_tokens_details": {**FINAL, "spec_correct_drafts_histogram": [2, 4]}}}
    counts = SGLang().spec_counts(final, "chat")
    assert counts is not None and counts.histogram == (2, 4)


@pytest.mark.parametrize("bad", [None, [], "1,2", [1, -1], [1.5, 2], [True, 1]])
def test_a_histogram_that_is_not_a_list_of_counts_is_left_out(bad: object) -> None:
    counts = SGLang().spec_counts({"meta_info": {**FINAL, "spec_correct_drafts_histogram": bad}}, "generate")
    assert counts is not None and counts.verify_steps == 6 and counts.histogram is None


def test_records_keep_the_histogram_through_json() -> None:
    record = RequestRecord(index=0, sent=0.0, completion_tokens=13, verify_ct=6, accept_histogram=(1, 2, 0, 3))
    data = record.to_dict()
    assert data["accept_histogram"] == [1, 2, 0, 3]
    assert RequestRecord.from_dict(data) == record
    plain = RequestRecord(index=0, sent=0.0, completion_tokens=13).to_dict()
    assert "accept_histogram" not in plain  # plain records keep the shape they had


def test_acceptance_by_position_from_histograms() -> None:
    """h[a] counts verify steps that accepted exactly a drafts: position i's share is Σ_{a >= i} h[a] / Σ h."""
    from pytest_specperf.measure.records import acceptance_from_histograms

    assert acceptance_from_histograms([(2, 1, 1), (0, 2)]) == (4 / 6, 1 / 6)
    assert acceptance_from_histograms([(3,)]) is None  # no draft position to speak of
    assert acceptance_from_histograms([]) is None
