"""The order of a bisection's starts and the differences it works on: pure, no server."""

from __future__ import annotations

import pytest

from pytest_specperf.bisect.differences import Difference, apply_flags, differences
from pytest_specperf.bisect.search import every_cause, find_causes, first_bad, most_starts
from pytest_specperf.errors import SpecperfError
from pytest_specperf.measure.fingerprint import Fingerprint


def counting(bad_when: set[frozenset[int]]):
    """An `is_bad` that is bad when any of `bad_when` is applied whole; it counts its calls."""
    calls: list[frozenset[int]] = []

    def is_bad(applied: frozenset[int]) -> bool:
        calls.append(applied)
        return any(need <= applied for need in bad_when)

    return is_bad, calls


def explain(count: int, is_bad) -> list[tuple[int, ...]]:
    """What bisect reports: the first cause found, then checked and completed."""
    return every_cause(count, find_causes(count, is_bad), is_bad)


@pytest.mark.parametrize("count", [1, 2, 3, 10, 11, 16])
def test_one_cause_is_found_and_checked_in_at_most_log2_n_plus_two_starts(count: int) -> None:
    for cause in range(count):
        is_bad, calls = counting({frozenset({cause})})
        assert explain(count, is_bad) == [(cause,)]
        assert len(calls) <= most_starts(count)
        if count > 1:  # the check: every other difference at its bad value, the cause at its good one
            assert frozenset(range(count)) - {cause} in calls
    assert most_starts(11) == 6  # with the good setup's start: 7 for 11 differences
    assert most_starts(1) == 1  # the one difference is the answer: nothing left to check


def test_causes_that_each_cost_throughput_are_all_named() -> None:
    """Restoring the first one found leaves the start bad: the rest is searched until none is left."""
    is_bad, _ = counting({frozenset({2}), frozenset({5}), frozenset({9})})
    assert explain(13, is_bad) == [(2,), (5,), (9,)]


def test_a_harmless_half_that_read_bad_once_is_not_named() -> None:
    """A real vLLM bisection: four differences, `--max-num-seqs 1` (2) the cause; the start of the two
    harmless ones (0, 1) read 30% slow, twice, for no cause. Taken alone the search kept that half, found
    each of the two harmless, and named them as a pair; the check start (2 and 3 at their bad values)
    is bad, the rest is searched, and the pair is dropped once restoring 2 alone is seen to be enough."""

    def is_bad(applied: frozenset[int]) -> bool:
        return applied == {0, 1} or 2 in applied

    assert find_causes(4, is_bad) == (0, 1)  # what bisect named
    assert explain(4, is_bad) == [(2,)]


@pytest.mark.parametrize("count", [1, 2, 3, 10, 11, 16])
def test_one_cause_is_found_in_at_most_log2_n_plus_one_starts(count: int) -> None:
    for cause in range(count):
        is_bad, calls = counting({frozenset({cause})})
        assert find_causes(count, is_bad) == (cause,)
        assert len(calls) <= most_starts(count) - (count > 1)


@pytest.mark.parametrize(("count", "pair"), [(11, (2, 9)), (11, (0, 1)), (8, (3, 4)), (13, (5, 12))])
def test_two_differences_that_only_act_together_are_found_as_a_pair(count: int, pair: tuple[int, int]) -> None:
    is_bad, _ = counting({frozenset(pair)})
    assert find_causes(count, is_bad) == pair
    assert explain(count, is_bad) == [pair]


def fingerprint(env: dict[str, str], args: str = "--tp-size 8", **identity: str) -> Fingerprint:
    return Fingerprint(
        {"model": "m", "launcher": "sglang", "args": args, **identity}, {"sglang.version": "0.5.23", **env}
    )


def test_differences_are_variables_then_flags_then_the_rest() -> None:
    good = fingerprint({"NCCL_ALGO": "Ring", "SGLANG_X": "1"}, "--tp-size 8 --attention-backend fa3")
    bad = fingerprint({"SGLANG_X": "2", "sglang.version": "0.5.24"}, "--tp-size 8 --enable-torch-compile")
    found = differences(good, bad)
    assert [str(d) for d in found] == [
        "NCCL_ALGO: Ring → unset",
        "SGLANG_X: 1 → 2",
        "server.flag --attention-backend: fa3 → unset",
        "server.flag --enable-torch-compile: unset → set",
        "sglang.version: 0.5.23 → 0.5.24",
    ]
    assert [d.kind for d in found] == ["env", "env", "flag", "flag", "other"]
    assert [d.setting(bad=False) for d in found[:4]] == [
        "NCCL_ALGO=Ring",
        "SGLANG_X=1",
        "--attention-backend fa3",
        "no --enable-torch-compile",
    ]


def test_runs_of_different_servers_are_refused() -> None:
    with pytest.raises(SpecperfError, match=r"different servers \(model: m → other\)"):
        differences(fingerprint({}), fingerprint({}, model="other"))


def test_a_redacted_value_is_listed_not_applied() -> None:
    found = Difference("HF_TOKEN", "<redacted>", "unset")
    assert found.kind == "other" and not found.applicable


def test_flags_are_written_into_and_taken_out_of_the_arguments() -> None:
    args = ("--tp-size", "8", "--attention-backend=fa3", "--enable-metrics")
    assert apply_flags(args, {"--attention-backend": "unset", "--tp-size": "4", "--cuda-graph-max-bs": "16"}) == (
        "--enable-metrics",
        "--tp-size",
        "4",
        "--cuda-graph-max-bs",
        "16",
    )
    assert apply_flags(args, {"--enable-torch-compile": "set"})[-1] == "--enable-torch-compile"


@pytest.mark.parametrize("count", [2, 3, 5, 8, 9])
def test_the_first_slow_build_is_found_in_log2_starts(count: int) -> None:
    for first in range(1, count):
        asked: list[int] = []

        def is_bad_at(index: int, first: int = first, asked: list[int] = asked) -> bool:
            asked.append(index)
            return index >= first

        assert first_bad(count, is_bad_at) == first
        assert 0 not in asked and count - 1 not in asked  # the ends are known: good and bad
        assert len(asked) <= (count - 2).bit_length()
