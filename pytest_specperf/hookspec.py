"""Hooks a suite's `conftest.py` (or another plugin) implements to extend pytest-specperf.

    # conftest.py
    def pytest_specperf_update_fingerprint(config, server, key, identity, environment):
        environment["site.fabric"] = "InfiniBand NDR"
        environment["site.driver_branch"] = os.environ.get("DRIVER_BRANCH", "unknown")

    def pytest_specperf_update_json(config, report, document):
        document["site"] = {"cluster": os.environ.get("CLUSTER", "unknown")}

    def pytest_specperf_comparable(drift):
        if {change.name for change in drift.identity} == {"gpu.driver"}:
            return True  # this site holds a driver update to the same numbers
        return None  # the plugin's rule decides the rest

Each is called with keyword arguments; a hook implementation may take any subset of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pytest_specperf.measure.fingerprint import Fingerprint
    from pytest_specperf.measure.records import MeasurementKey
    from pytest_specperf.report.analysis import Report
    from pytest_specperf.servers.pool import RunningServer
    from pytest_specperf.verdict.drift import FingerprintDiff


@pytest.hookspec
def pytest_specperf_update_fingerprint(
    config: pytest.Config,
    server: RunningServer,
    key: MeasurementKey,
    identity: dict[str, str],
    environment: dict[str, str],
) -> None:
    """Add a site's own facts to the fingerprint of a measurement, in place, when it is captured.

    Facts the plugin cannot see are often what explains a number: the network fabric, a driver
    branch, a cluster's scheduler variables. `environment` entries are drift: shown next to the
    verdict when they differ from the baseline's, the comparison is still made. `identity` entries
    make numbers comparable at all: when one differs from the baseline's, the comparison is not
    made (INCOMPARABLE, unless `pytest_specperf_comparable` allows it) — add to it only what no night
    may change unnoticed. Prefix your names
    (`site.fabric`) so they never collide with the plugin's. Values are stored as strings, and pass
    the same redaction as every other entry: a secret never reaches a stored file or a report.

    `server` is the running server (`.name`, `.url`, `.config`, `.launch_env`); `key` is what is
    measured (server, workload, concurrency). Under pytest-xdist the hook runs on the worker that
    measures.
    """


@pytest.hookspec
def pytest_specperf_update_json(config: pytest.Config, report: Report, document: dict[str, Any]) -> None:
    """Change the JSON report (`--specperf-json`) before it is written, in place.

    `document` is the report as docs/json-schema.md describes it; `report` is the model it was
    made from. Add keys of your own at the top level (`document["site"] = {...}`): the schema allows
    them (`specperf merge` leaves them out of a merged report). Changing the plugin's own keys makes a
    report that `specperf diff`, `specperf merge` or another site's tools may refuse or misread.
    """


@pytest.hookspec(firstresult=True)
def pytest_specperf_comparable(
    config: pytest.Config, baseline: Fingerprint, current: Fingerprint, drift: FingerprintDiff
) -> bool | None:
    """Decide whether numbers measured on `current` may be held against a history measured on
    `baseline`: True compares them, False makes the verdict INCOMPARABLE, None leaves it to the next
    implementation. The first answer that is not None decides (`firstresult`).

    The plugin's own rule answers last (`trylast`, `verdict.drift.default_comparable`): comparable
    unless an identity entry differs. `drift` holds what differs, `drift.identity` and
    `drift.environment` (lists of changes with `.name`, `.old`, `.new`). Identity changes a rule allows
    are listed with the report's drift. The rule decides every comparison of the session (a test's
    verdict, its report row, the recorded speedups); `specperf` commands outside pytest judge by the
    plugin's rule alone. Under pytest-xdist it runs where the comparison is made: the workers that
    judge tests and the controller that builds the report.
    """
