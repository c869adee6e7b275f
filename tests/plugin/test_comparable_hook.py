"""`pytest_specperf_comparable` (hookspec.py): a suite's conftest.py decides which fingerprint changes
still compare, and one that returns None leaves it to the plugin's rule (an identity change is
INCOMPARABLE)."""

from __future__ import annotations

from plugin_suites import ONE_MEASURED_TEST

#: the GPU driver as an identity entry, as `nvidia-smi` names it on a GPU node (the simulator has none)
DRIVER_IN_IDENTITY = """
import os

def pytest_specperf_update_fingerprint(identity):
    identity["gpu.driver"] = os.environ["SITE_DRIVER"]
"""

DRIVER_UPDATES_COMPARE = (
    DRIVER_IN_IDENTITY
    + """
def pytest_specperf_comparable(drift):
    if {change.name for change in drift.identity} == {"gpu.driver"}:
        return True
    return None
"""
)

UNDECIDED = (
    DRIVER_IN_IDENTITY
    + """
def pytest_specperf_comparable(config, baseline, current, drift):
    with open(os.environ["SITE_ASKED"], "a") as asked:
        asked.write(f"{baseline.identity['gpu.driver']} -> {current.identity['gpu.driver']}\\n")
    return None
"""
)


def test_a_conftest_makes_a_driver_update_comparable(make_suite, monkeypatch) -> None:
    """The driver changed between the stored night and tonight: by the plugin's rule an identity change is
    INCOMPARABLE; the suite's rule holds a driver update to the same numbers, so tonight is judged."""
    # judged, not compared closely: a 50% tolerance, so that a busy machine's slow night cannot fail it
    suite = make_suite(
        {"test_suite": ONE_MEASURED_TEST, "conftest": DRIVER_UPDATES_COMPARE}, extra="max_regression = 0.5\n"
    )
    monkeypatch.setenv("SITE_DRIVER", "550.54.15")
    suite.run("--specperf-update").assert_outcomes(passed=1)
    monkeypatch.setenv("SITE_DRIVER", "560.35.03")
    tonight = suite.run()
    tonight.assert_outcomes(passed=1)
    assert "INCOMPARABLE" not in tonight.stdout.str()
    tonight.stdout.fnmatch_lines(["*gpu.driver: 550.54.15 → 560.35.03*"])


def test_a_conftest_that_returns_none_leaves_it_to_the_plugins_rule(make_suite, monkeypatch) -> None:
    suite = make_suite({"test_suite": ONE_MEASURED_TEST, "conftest": UNDECIDED})
    asked = suite.pytester.path / "asked.txt"
    monkeypatch.setenv("SITE_ASKED", str(asked))
    monkeypatch.setenv("SITE_DRIVER", "550.54.15")
    suite.run("--specperf-update").assert_outcomes(passed=1)
    monkeypatch.setenv("SITE_DRIVER", "560.35.03")
    tonight = suite.run()
    tonight.assert_outcomes(failed=1)
    tonight.stdout.fnmatch_lines(["*INCOMPARABLE eagle3-5step/default/c1*", "*gpu.driver: 550.54.15 → 560.35.03*"])
    assert "550.54.15 -> 560.35.03" in asked.read_text().splitlines()
