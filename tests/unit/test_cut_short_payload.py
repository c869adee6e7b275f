"""Under pytest-xdist, a worker hands the controller the tests its plan holds per key (a session cut short
stores a key once a verdict per test came in), how far a measurement it was cut short in got, and that
measurement's completed rounds: the controller stores and reports for every worker (docs/verdicts.md,
"A session cut short")."""

from __future__ import annotations

from report_samples import measurement

from pytest_specperf.measure.rounds import Cut
from pytest_specperf.session.payload import WorkerPayload


def test_a_cut_short_worker_payload_survives_its_json() -> None:
    done = measurement("eagle3-5step", [70.8, 71.3, 70.9], [2.10, 2.11, 2.09], [14.1, 14.0, 14.1])
    partial = measurement("eagle3-2step", [75.5, 76.2], [1.95, 1.93], [13.2, 13.1])
    payload = WorkerPayload(
        measurements=(done,),
        tests={done.key: 2, partial.key: 1},
        cut={partial.key: (2, 3)},
        partial=(partial,),
    )
    back = WorkerPayload.from_json(payload.to_json())
    assert back.tests == {done.key: 2, partial.key: 1}
    assert back.cut == {partial.key: (2, 3)}
    assert [m.key for m in back.partial] == [partial.key] and len(back.partial[0].rounds) == 2
    assert Cut(*back.cut[partial.key]).text == "interrupted after 2 of 3 rounds"


def test_a_payload_of_a_session_that_ran_to_its_end_reads_as_before() -> None:
    """A payload without the new entries (an older worker's) reads as nothing held back."""
    text = WorkerPayload().to_json().replace(', "tests": [], "cut": [], "partial": []', "")
    assert "tests" not in text
    back = WorkerPayload.from_json(text)
    assert back.tests == {} and back.cut == {} and back.partial == ()
