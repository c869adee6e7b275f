"""Whether two fingerprints are comparable: the plugin's rule (`default_comparable`: no identity entry
differs) and a rule put in force in its place (`comparable_by`, how a pytest session asks its
`pytest_specperf_comparable` hook). Read from the fingerprint a real SGLang server reported on a real
night (tests/data/real-nights/sglang-cpu-spec/night1-report.json). Pure: no process."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_specperf.measure.fingerprint import Fingerprint
from pytest_specperf.verdict.drift import FingerprintDiff, comparable_by, default_comparable, diff

NIGHT = Path(__file__).resolve().parent.parent / "data" / "real-nights" / "sglang-cpu-spec" / "night1-report.json"


@pytest.fixture
def stored() -> Fingerprint:
    """The speculative server's fingerprint as the real night stored it."""
    report = json.loads(NIGHT.read_text())
    return Fingerprint.from_dict(report["measurements"][0]["fingerprint"])


def moved(fingerprint: Fingerprint, **identity: str) -> Fingerprint:
    """The same server on a node where `identity` entries differ."""
    return dataclasses.replace(fingerprint, identity={**fingerprint.identity, **identity})


@pytest.fixture
def cores_compare() -> Iterator[None]:
    """A site's rule: a node with another core count holds the same numbers; the rest as the plugin says."""

    def rule(baseline: Fingerprint, current: Fingerprint, drift: FingerprintDiff) -> bool:
        return {c.name for c in drift.identity} <= {"cpu_count"}

    release = comparable_by(rule)
    yield
    release()


def test_the_plugins_rule_an_identity_change_is_incomparable(stored: Fingerprint) -> None:
    found = diff(stored, moved(stored, cpu_count="4"))
    assert not found.comparable and not default_comparable(found)
    assert found.describe() == "cpu_count: 2 → 4 (not comparable)"
    assert diff(stored, stored).comparable


@pytest.mark.usefixtures("cores_compare")
def test_a_rule_in_force_decides_instead(stored: Fingerprint) -> None:
    found = diff(stored, moved(stored, cpu_count="4"))
    assert found.comparable and found.judged is True
    assert found.describe() == "cpu_count: 2 → 4"  # still shown, no longer a reason not to compare
    assert not diff(stored, moved(stored, cpu_count="4", model="another-model")).comparable


def test_rules_nest_and_taking_one_back_restores_the_one_before(stored: Fingerprint) -> None:
    tonight = moved(stored, cpu_count="4")
    release_outer = comparable_by(lambda baseline, current, drift: True)
    try:
        release_inner = comparable_by(lambda baseline, current, drift: False)
        try:
            assert not diff(stored, stored).comparable  # the newest rule decides, even against the default
        finally:
            release_inner()
        assert diff(stored, tonight).comparable
    finally:
        release_outer()
    assert diff(stored, tonight).comparable is default_comparable(diff(stored, tonight)) is False
