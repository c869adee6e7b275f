"""The order of a bisection's starts and the differences it works on: pure, no server."""

from __future__ import annotations

import pytest

from pytest_specperf.bisect.differences import Difference, apply_flags, differences
from pytest_specperf.bisect.search import FOUND, Seen, Trail, bisect, find_causes, first_bad, most_starts
from pytest_specperf.errors import SpecperfError
from pytest_specperf.measure.fingerprint import Fingerprint


def counting(bad_when: set[frozenset[int]]):
    """A judge that is (clearly) bad when any of `bad_when` is applied whole; it counts its calls."""
    calls: list[frozenset[int]] = []

    def judge(applied: frozenset[int]) -> Seen:
        calls.append(applied)
        return Seen(any(need <= applied for need in bad_when))

    return judge, calls


def explain(count: int, judge) -> list[tuple[int, ...]]:
    """What bisect reports: reproduced, the first cause found, then checked and completed."""
    answer = bisect(count, judge)
    assert answer.outcome == FOUND, answer
    return list(answer.groups)


@pytest.mark.parametrize("count", [1, 2, 3, 4, 10, 11, 16, 20])
def test_one_cause_is_reproduced_found_and_checked(count: int) -> None:
    """The bad setup first, then the halvings; the check is made unless every other difference was
    in a good start. Over the cause's positions the median is within ⌈log₂ N⌉ + 2 (+ the good setup's)."""
    used = []
    for cause in range(count):
        judge, calls = counting({frozenset({cause})})
        assert explain(count, judge) == [(cause,)]
        assert calls[0] == frozenset(range(count))  # reproduce first
        assert len(calls) == len(set(calls)) <= most_starts(count)
        used.append(len(calls))
    assert sorted(used)[(count - 1) // 2] <= (count - 1).bit_length() + 2
    assert most_starts(11) == 7  # with the good setup's start: 8 for 11 differences
    assert most_starts(1) == 1  # the bad setup is the one difference: nothing left to check


def test_causes_that_each_cost_throughput_are_all_named() -> None:
    """Restoring the first one found leaves the start bad: the rest is searched until none is left."""
    judge, _ = counting({frozenset({2}), frozenset({5}), frozenset({9})})
    assert explain(13, judge) == [(2,), (5,), (9,)]


def test_a_harmless_half_that_read_bad_once_is_not_named() -> None:
    """A real vLLM bisection: four differences, `--max-num-seqs 1` (2) the cause; the start of the two
    harmless ones (0, 1) read 30% slow, twice, for no cause. Taken alone the search kept that half, found
    each of the two harmless, and named them as a pair; the check start (2 and 3 at their bad values)
    is bad, the rest is searched, and the pair is dropped once restoring 2 alone is seen to be enough."""

    def judge(applied: frozenset[int]) -> Seen:
        return Seen(applied == {0, 1} or 2 in applied)

    assert find_causes(4, Trail(judge)) == (0, 1)  # what the search alone names
    assert explain(4, judge) == [(2,)]


@pytest.mark.parametrize(("count", "pair"), [(11, (2, 9)), (11, (0, 1)), (8, (3, 4)), (13, (5, 12)), (4, (0, 3))])
def test_two_differences_that_only_act_together_are_found_as_a_pair(count: int, pair: tuple[int, int]) -> None:
    judge, calls = counting({frozenset(pair)})
    assert explain(count, judge) == [pair]
    # named only after each member alone was seen good and the pair bad
    assert {frozenset({pair[0]}), frozenset({pair[1]}), frozenset(pair)} <= set(calls)


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


def test_a_night_with_no_cause_is_not_reproduced_and_names_nothing() -> None:
    """A night slowed only by the node: tonight every setup measures as fast as the good one. The
    search used to assume the regression reproduces and, every subset good, named all the differences
    "only together"; the bad setup is measured first now, and nothing is named."""
    judge, calls = counting(set())
    answer = bisect(4, judge)
    assert answer.outcome == "not reproduced" and answer.groups == ()
    assert calls == [frozenset(range(4))]


def test_a_bad_setup_that_read_slow_once_on_a_busy_node_is_not_reproduced() -> None:
    """The bad setup's first start read slow (the node), every subset is good, and the bad setup
    measured once more is fast: not reproduced, no cause."""
    everything = frozenset(range(4))
    seen: list[frozenset[int]] = []

    def judge(applied: frozenset[int]) -> Seen:
        seen.append(applied)
        return Seen(applied == everything and seen.count(everything) == 1)

    answer = bisect(4, judge)
    assert answer.outcome == "not reproduced" and answer.groups == ()
    assert seen.count(everything) == 2


def test_a_bad_setup_that_stays_unclear_is_not_reproduced() -> None:
    judge = lambda applied: Seen(True, certain=False)  # noqa: E731
    answer = bisect(6, judge)
    assert answer.outcome == "not reproduced" and answer.uncertain == (frozenset(range(6)),)


def test_a_pair_from_one_uncertain_start_is_not_named() -> None:
    """A harmless pair read -5.1% [-13.9%, +4.7%] ("bad (uncertain)") and was reported as a pair. A
    pair is named only when it is confidently bad and each member alone confidently good."""
    everything = frozenset(range(4))

    def judge(applied: frozenset[int]) -> Seen:
        if applied == everything:
            return Seen(True)  # the bad setup is slow (for a reason no pair of these explains)
        return Seen({1, 2} <= applied, certain=not {1, 2} <= applied)

    assert find_causes(4, Trail(lambda applied: Seen({1, 2} <= applied))) == (1, 2)  # were it clear: the pair
    answer = bisect(4, judge)
    assert answer.outcome == "unexplained" and answer.groups == ()
    assert frozenset({1, 2}) in answer.uncertain


def test_an_answer_that_rests_on_an_uncertain_start_says_so() -> None:
    def judge(applied: frozenset[int]) -> Seen:
        return Seen(3 in applied, certain=applied != {0, 1})  # the first half: good, unclear

    answer = bisect(4, judge)
    assert answer.outcome == FOUND and answer.groups == ((3,),)
    assert answer.uncertain == (frozenset({0, 1}),)
    clear = bisect(4, lambda applied: Seen(3 in applied))
    assert clear.uncertain == ()


def test_a_good_setup_start_that_was_off_is_measured_again_and_the_search_redone() -> None:
    """Against a good-setup start that landed fast every start reads bad; the good setup measured
    again does not hold, and against the new one the night is not reproduced."""
    anchor = {"off": True}

    def judge(applied: frozenset[int]) -> Seen:
        return Seen(anchor["off"])

    def holds() -> bool:
        anchor["off"] = False
        return False

    assert bisect(5, judge, holds).outcome == "not reproduced"
