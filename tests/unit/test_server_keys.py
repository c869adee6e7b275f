"""A REGRESSION on one server start is judged among the keys that start serves (verdict/nightly.py
`judge_night(keys=...)`, `server_change`, `worth_a_restart`).

Whether a start is off is the server's question, and each key it measures asks it: at one key's 99%
change question, one of 20 unchanged keys is that far off on about one night in five. A one-start
REGRESSION of one key among 20 that is not a change for the server as a whole is SUSPECT and takes
no restart; a fall as large as the H200's second start (the same plain config at concurrency 8 read
975 then 811 tok/s, -17%) is a REGRESSION among 20 keys too, and asks for its second start.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

from report_samples import measurement, nightly_history

from pytest_specperf.measure.records import Measurement
from pytest_specperf.store.records import StoredBaseline
from pytest_specperf.verdict.checks import Limits, evaluate
from pytest_specperf.verdict.nightly import PastRun, Tolerance, judge_night, server_change, worth_a_restart
from pytest_specperf.verdict.stats import Decision
from pytest_specperf.verdict.verdicts import Verdict

TOLERANCE = Tolerance(0.05)


def _h200_history(seed: int = 7) -> list[PastRun]:
    """Ten nights of the H200's plain config at concurrency 8 around its first start's 975 tok/s, 2% apart."""
    rng = random.Random(seed)
    return [
        PastRun(tuple(975.0 * math.exp(rng.gauss(0.0, 0.02)) * (1 + 0.003 * k) for k in (-1, 0, 1)), night=str(i))
        for i in range(10)
    ]


def _night(value: float) -> list[list[float]]:
    return [[value - 1.0, value, value + 1.0]]


def test_a_one_start_regression_of_one_of_twenty_keys_is_suspect_and_takes_no_restart() -> None:
    """900 tok/s (-7.7%) on one start: alone on its server a REGRESSION that asks for a second start;
    as one of the 20 keys of one server start, not a change for the server as a whole: SUSPECT, and
    no restart is bought by it."""
    alone = judge_night(_night(900.0), _h200_history(), TOLERANCE)
    assert alone.decision is Decision.MISSED and worth_a_restart(alone, keys=1)
    among = judge_night(_night(900.0), _h200_history(), TOLERANCE, keys=20)
    assert among.decision is Decision.SUSPECT
    assert among.comparison is not None and not server_change(among.comparison, 20)
    assert not worth_a_restart(among, keys=20)


def test_the_h200_start_to_start_fall_is_a_regression_among_twenty_keys_too() -> None:
    """811 tok/s, the H200's second start: far beyond what 20 keys' noise explains, a REGRESSION on
    one start that asks for the second start which confirms or refutes it."""
    night = judge_night(_night(811.0), _h200_history(), TOLERANCE, keys=20)
    assert night.decision is Decision.MISSED
    assert night.comparison is not None and server_change(night.comparison, 20)
    assert worth_a_restart(night, keys=20)


def test_a_key_alone_on_its_server_is_judged_as_before() -> None:
    """keys=1 (the default) asks the server's question at the SUSPECT confidence, which every
    REGRESSION already answers: no verdict of a server of one key moves."""
    for value in (811.0, 880.0, 900.0, 910.0, 920.0, 940.0):
        assert (
            judge_night(_night(value), _h200_history(), TOLERANCE, keys=1).decision
            is judge_night(_night(value), _h200_history(), TOLERANCE).decision
        )


def test_a_regression_confirmed_on_a_second_start_stands_among_twenty_keys() -> None:
    """The server's question is for a night on one start: two starts that both fell beyond the
    tolerance are the answer, whatever the number of keys."""
    night = judge_night([[899.0, 900.0, 901.0], [897.0, 898.0, 899.0]], _h200_history(), TOLERANCE, keys=20)
    assert night.decision is Decision.MISSED and night.confirmed is True


def test_a_value_without_spread_stands_on_one_start_among_twenty_keys() -> None:
    """A deterministic accept length (the CPU nights' collapse: τ 1.0159 in every round) cannot be
    measured differently by a second start: its one-start REGRESSION stands whatever the keys."""
    history = [PastRun((3.24 * (1 + 0.01 * (i % 3 - 1)),) * 3, night=str(i)) for i in range(10)]
    night = judge_night([[1.0159] * 9], history, TOLERANCE, keys=20)
    assert night.decision is Decision.MISSED


def _plain(tok_s: list[float]) -> Measurement:
    return measurement("plain", tok_s, None, [8.0] * len(tok_s), workload="code", concurrency=8)


def _stored(path: Path) -> StoredBaseline:
    """The same ten nights as a stored history of the plain config at concurrency 8, one session each."""
    return nightly_history([_plain(list(run.samples)) for run in _h200_history()], path)


def test_the_session_judges_a_key_among_the_keys_its_server_measures(tmp_path: Path) -> None:
    """Through the checks a test runs (`evaluate(keys=...)`, as session/looks.py and the report's rows
    call it): 900 tok/s on one start is a REGRESSION of a server's only key and SUSPECT for one of 20."""
    stored = _stored(tmp_path / "plain" / "code-c8.jsonl")
    tonight = _plain([899.0, 900.0, 901.0])
    limits = Limits(0.05, 0.02, 0.0)
    alone = evaluate(tonight, None, None, limits, stored, updating=False)
    among = evaluate(tonight, None, None, limits, stored, updating=False, keys=20)
    throughput = {c.name: c for c in among.checks}["regression:output_throughput"]
    assert alone.verdict is Verdict.REGRESSION
    assert among.verdict is Verdict.SUSPECT and throughput.decision is Decision.SUSPECT


def test_a_failing_message_describes_a_history_once() -> None:
    """A key's throughput and its speedup are judged against the runs of the same nights: where both
    lines would carry the same description of those runs and their spread (on a real 2-core machine,
    "assumed run-to-run CV ... (what tonight's rounds showed, above the prior; 2 more recorded runs
    replace it)" twice), the first says the line below has it."""
    from pytest_specperf.verdict.outcome import SAME_HISTORY, failure_message
    from pytest_specperf.verdict.results import CheckResult

    night = judge_night(_night(811.0), _h200_history(), TOLERANCE)
    assert night.comparison is not None
    described = f"({night.comparison.describe()})"
    checks = [
        CheckResult(name, night.decision, f"{name}: 811 vs 975 {described}: ratio 0.83", night=night)
        for name in ("speedup", "regression:output_throughput")
    ]
    result = measurement("plain", [811.0, 810.0, 812.0], None, [10.0, 10.0, 10.0])
    evaluation = evaluate(result, None, None, Limits(0.05, 0.02, 0.0), None, updating=False)
    text = failure_message(result, evaluation, checks)
    assert text.count(described) == 1 and text.count(SAME_HISTORY) == 1, text
    assert f"speedup: 811 vs 975 {SAME_HISTORY}: ratio 0.83" in text  # the throughput line below says it
