"""Warm-up reaches every level measured, and rounds that still rise are called warming up, not noise.

Replays a real GPU night (vLLM 0.26.0 on one H200, a ~110 M-parameter llama, 16 requests x 64 tokens,
3 rounds, 2 warm-up requests): the ngram config's rounds at concurrency 8 rose 1017 → 1281 → 1686 tok/s
(2 warm-up requests never formed a batch of 8), and the report called it noise needing "about 72
rounds". The plain config at c8 on the same night read 810.7 ± 7.9 tok/s: a steady server.
"""

from __future__ import annotations

import itertools

import pytest
from report_samples import measurement

from pytest_specperf.config.settings import ServerConfig, SpecperfConfig
from pytest_specperf.config.workloads import Prompt, WorkloadConfig, warmup_count, warmup_plan
from pytest_specperf.report.noise import noise_warning, steady_trend

#: the H200 night's ngram rounds at c8, tok/s
NGRAM_C8 = [1017.0, 1281.0, 1686.0]
#: the plain config's c8 mean and spread that night; its three rounds in every order
PLAIN_C8 = [810.7 - 7.9, 810.7, 810.7 + 7.9]

CONFIG = SpecperfConfig(
    launcher="vllm",
    rounds=3,
    servers={"plain": ServerConfig(name="plain"), "ngram": ServerConfig(name="ngram")},
    workloads={"default": WorkloadConfig(name="default", num_requests=16, max_new_tokens=64, warmup=2)},
)


def _night(server: str, tok_s: list[float]) -> list[str]:
    m = measurement(server, tok_s, None, [10.0] * len(tok_s), workload="default", concurrency=8)
    return noise_warning(m, CONFIG)


def test_the_warm_up_reaches_the_level_measured() -> None:
    workload = CONFIG.workloads["default"]
    prompts = [Prompt(f"p{i}", f"prompt {i}", None, "qa") for i in range(20)]
    assert warmup_count(workload, 1) == 2
    assert warmup_count(workload, 8) == 8  # the night sent 2: no batch of 8 before the first round
    assert len(warmup_plan(workload, prompts, 8)) == 8
    assert [p.id for p in warmup_plan(workload, prompts, 1)] == ["p19", "p18"]
    off = WorkloadConfig(name="off", warmup=0)
    assert warmup_count(off, 8) == 0 and warmup_plan(off, prompts, 8) == []  # `warmup = 0` turns it off


def test_rounds_that_rise_are_still_warming_up() -> None:
    assert steady_trend(NGRAM_C8) == "rose"
    assert steady_trend(NGRAM_C8[::-1]) == "fell"
    (line,) = _night("ngram", NGRAM_C8)
    assert line.startswith("ngram/default/c8: still warming up: rounds rose 1017 → 1281 → 1686 tok/s; ")
    assert "raise `warmup` of workload 'default' (8 warm-up requests at c8 tonight)" in line
    assert "rounds would resolve" not in line and "noisy" not in line


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))), ids=str)
def test_a_steady_server_is_neither_warming_nor_noisy(order: tuple[int, ...]) -> None:
    """In any order, even rising, the plain rounds spread 1%: no trend is read, and no noise."""
    assert _night("plain", [PLAIN_C8[i] for i in order]) == []


def test_noise_without_a_trend_is_still_noise() -> None:
    """Rounds that jump about (the plain config at c1 that night: CV 19%) keep the rounds advice."""
    (line,) = _night("plain", [122.4, 98.0, 146.8])
    assert "noisy throughput" in line and "rounds would resolve" in line
    assert steady_trend([1017.0, 1681.0, 1686.0]) is None  # a jump then a plateau: the line leaves too much
    assert steady_trend([1017.0, 1686.0]) is None  # two rounds are no trend
