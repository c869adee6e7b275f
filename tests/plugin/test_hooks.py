"""The extension hooks (pytest_specperf/hookspec.py), implemented by a suite's conftest.py."""

from __future__ import annotations

import json

from plugin_suites import ONE_MEASURED_TEST

from pytest_specperf.store import read_history

SITE_FACTS = """
import os

def pytest_specperf_update_fingerprint(config, server, key, identity, environment):
    environment["site.fabric"] = os.environ.get("SITE_FABRIC", "unknown")
    environment["site.token"] = "hf_abcdefghijklmnopqrstuvwxyz0123456789"  # a secret must not survive
    identity["site.cluster"] = os.environ.get("SITE_CLUSTER", "unknown")
    assert key.server == server.name
"""

JSON_SITE = """
def pytest_specperf_update_json(config, report, document):
    document["site"] = {"rows": len(report.rows), "labels": [m["label"] for m in document["measurements"]]}
"""


def test_a_site_adds_its_facts_to_every_fingerprint(make_suite, monkeypatch) -> None:
    """Environment facts are drift (shown, compared anyway); identity facts make another setup INCOMPARABLE."""
    suite = make_suite({"test_suite": ONE_MEASURED_TEST, "conftest": SITE_FACTS})
    monkeypatch.setenv("SITE_FABRIC", "InfiniBand")
    monkeypatch.setenv("SITE_CLUSTER", "a")
    report = suite.pytester.path / "r.json"
    suite.run("--specperf-update", f"--specperf-json={report}").assert_outcomes(passed=1)
    [stored] = (suite.pytester.path / ".specperf" / "sim" / "eagle3-5step").glob("*.jsonl")
    fingerprint = read_history(stored).fingerprint.to_dict()
    assert fingerprint["environment"]["site.fabric"] == "InfiniBand"
    assert fingerprint["identity"]["site.cluster"] == "a"
    written = "".join(p.read_text() for p in (suite.pytester.path / ".specperf").rglob("*") if p.is_file())
    assert "hf_abcdefghijklmnopqrstuvwxyz" not in written + report.read_text()

    monkeypatch.setenv("SITE_FABRIC", "RoCE")
    drifted = suite.run()
    drifted.stdout.fnmatch_lines(["*site.fabric: InfiniBand → RoCE*"])
    monkeypatch.setenv("SITE_CLUSTER", "b")
    other = suite.run()
    other.assert_outcomes(failed=1)
    other.stdout.fnmatch_lines(["*INCOMPARABLE eagle3-5step/default/c1*", "*site.cluster: a → b*"])


def test_a_site_changes_the_json_report_before_it_is_written(make_suite) -> None:
    suite = make_suite({"test_suite": ONE_MEASURED_TEST, "conftest": JSON_SITE})
    report = suite.pytester.path / "r.json"
    suite.run(f"--specperf-json={report}").assert_outcomes(passed=1)
    document = json.loads(report.read_text())
    assert document["site"] == {"rows": 2, "labels": ["plain/default/c1", "eagle3-5step/default/c1"]}
    assert document["schema"] == "pytest-specperf/report"
