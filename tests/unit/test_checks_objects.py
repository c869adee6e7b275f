"""Each check of a test is an object built from the marker, and the evaluation is built from what they
found, once: `accept_per_position=True` is a check of its own (not an empty tuple of floors), the checks
come in the order a failure names them, and an evaluation cannot be changed after it was built."""

from __future__ import annotations

import dataclasses

import pytest
from report_samples import CONFIG, measurement

from pytest_specperf.config.workloads import WorkloadConfig
from pytest_specperf.errors import ConfigError
from pytest_specperf.verdict.checks import (
    InRange,
    Limits,
    Lossless,
    MinSpeedup,
    PositionFloors,
    PositionsAgainstHistory,
    evaluate,
    marker_checks,
)
from pytest_specperf.verdict.markers import AGAINST_HISTORY, AgainstHistory, SpecperfMarker, parse_marker

LIMITS = Limits(max_regression=0.05, max_regression_accept_length=0.02, max_error_rate=0.0)
SUITE = dataclasses.replace(CONFIG, workloads={"default": WorkloadConfig("default")})


def marker(**kw: object) -> SpecperfMarker:
    return SpecperfMarker(servers=("eagle3-5step",), workloads=("chat",), **kw)  # type: ignore[arg-type]


def test_accept_per_position_true_is_a_check_against_the_history_not_an_empty_tuple() -> None:
    parsed = parse_marker((), {"server": "eagle3-5step", "accept_per_position": True}, "t", SUITE)
    assert parsed.accept_per_position is AGAINST_HISTORY and isinstance(parsed.floors_at(1), AgainstHistory)
    assert marker_checks(parsed, 1) == [PositionsAgainstHistory()]
    floors = parse_marker((), {"server": "eagle3-5step", "accept_per_position": (0.6, 0.4)}, "t", SUITE)
    assert marker_checks(floors, 1) == [PositionFloors((0.6, 0.4))]
    with pytest.raises(ConfigError, match="must be True"):
        parse_marker((), {"server": "eagle3-5step", "accept_per_position": ()}, "t", SUITE)


def test_a_markers_checks_come_in_the_order_a_failure_names_them() -> None:
    declared = marker(
        min_speedup={1: 1.1},
        ranges={"accept_length": (2.0, None), "throughput": (60.0, None)},
        accept_per_position=(0.5,),
        lossless=0.9,
    )
    assert marker_checks(declared, 1) == [
        MinSpeedup(1.1),
        InRange("throughput", 60.0, None),
        InRange("accept_length", 2.0, None),
        PositionFloors((0.5,)),
        Lossless(0.9),
    ]
    assert marker_checks(declared, 4)[0] == InRange("throughput", 60.0, None)  # no min_speedup at c4


def test_an_evaluation_is_built_once_and_cannot_be_changed() -> None:
    tonight = measurement("eagle3-5step", [70.8, 71.3, 70.9], [2.10, 2.11, 2.09], [14.1, 14.0, 14.1])
    reference = measurement("plain", [62.6, 63.1, 63.0], None, [15.95, 15.85, 15.87])
    evaluation = evaluate(tonight, reference, marker(min_speedup=1.05), LIMITS, None, updating=False)
    assert [c.name for c in evaluation.checks] == ["errors", "min_speedup"]
    assert isinstance(evaluation.checks, tuple) and isinstance(evaluation.changes, tuple)
    with pytest.raises(dataclasses.FrozenInstanceError):
        evaluation.explanation = None  # type: ignore[misc]
