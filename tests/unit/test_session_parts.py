"""The session's parts that need no server: the plan, and what an xdist worker hands the controller."""

from __future__ import annotations

import json

from report_samples import CONFIG, story_measurements

from pytest_specperf.measure.records import MeasurementKey
from pytest_specperf.session.payload import WorkerPayload
from pytest_specperf.session.plan import Plan, PlannedTest
from pytest_specperf.verdict.markers import ServerCase
from pytest_specperf.verdict.verdicts import Verdict


def test_a_worker_payload_is_named_json_and_comes_back_the_same() -> None:
    measurements = tuple(story_measurements().values())
    key = measurements[1].key
    payload = WorkerPayload(
        measurements=measurements,
        verdicts={key: (Verdict.SUSPECT, Verdict.PASS)},
        errors={MeasurementKey("eagle3-2step", "chat", 4): "server 'eagle3-2step' died during the session"},
        pool_warnings=("restarted eagle3-5step once",),
        confirmations={key: "decided on one server start: attached by URL"},
        second_starts=(key,),
    )
    text = payload.to_json()
    entry = json.loads(text)["verdicts"][0]
    assert entry == {
        "key": {"server": key.server, "workload": key.workload, "concurrency": key.concurrency},
        "verdicts": ["SUSPECT", "PASS"],
    }
    back = WorkerPayload.from_json(text)
    assert [m.to_dict() for m in back.measurements] == [m.to_dict() for m in measurements]
    assert back.measurements[0].fingerprint == measurements[0].fingerprint  # rebuilt by the record itself
    assert (back.verdicts, back.errors, back.pool_warnings) == (payload.verdicts, payload.errors, payload.pool_warnings)
    assert (back.confirmations, back.second_starts) == (payload.confirmations, payload.second_starts)


def test_the_plan_puts_the_reference_first_and_knows_what_it_implies() -> None:
    chat, code = MeasurementKey("eagle3-5step", "chat", 1), MeasurementKey("eagle3-5step", "code", 4)
    plan = Plan(
        CONFIG,
        [
            PlannedTest("t::a[eagle3-5step]", chat),
            PlannedTest("t::b[eagle3-5step]", code),
            PlannedTest("t::c[plain]", ServerCase("plain")),
        ],
    )
    assert plan.reference_keys() == [MeasurementKey("plain", "chat", 1), MeasurementKey("plain", "code", 4)]
    assert plan.needed_keys() == [chat, code, *plan.reference_keys()]
    assert plan.max_concurrency("plain") == 4 and plan.max_concurrency("eagle3-5step") == 4
    assert plan.uses("eagle3-5step") == 2 and plan.uses("plain") == 1
    assert plan.searches == 4 * 4
    assert plan.group_order([chat, None, ServerCase("plain"), code]) == [1, -1, 0, 1]
