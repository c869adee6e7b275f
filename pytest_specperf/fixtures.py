"""The fixtures a suite's tests use: `specperf` (a test's measurement, its reference and its checks) and
`specperf_server` (the running server of a test's config).

A marked test is parametrized over its cases by the plugin (plugin.py `pytest_generate_tests`): the
`specperf_server` parameter is a `MeasurementKey` (server, workload, level) or, for a test that only
needs a server, a `ServerCase`. The measurement is made before the test body runs; its checks run
right after it (plugin.py), so a test fails for what it measured, with the evidence in the message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NoReturn

import pytest

from pytest_specperf.errors import SpecperfError
from pytest_specperf.measure.records import Measurement, MeasurementKey
from pytest_specperf.servers.pool import RunningServer
from pytest_specperf.session import SpecperfSession
from pytest_specperf.verdict.checks import CheckResult
from pytest_specperf.verdict.history import speedup_estimate
from pytest_specperf.verdict.markers import Case, ServerCase, SpecperfMarker

#: The parameter the plugin parametrizes a marked test with (indirect: the fixture of that name).
TARGET_PARAM = "specperf_server"
#: The session of this pytest process, once a config was found (the plugin sets it at session start).
SESSION_KEY = pytest.StashKey[SpecperfSession]()
#: A test's result, for the checks that run after its body.
RESULT_KEY = pytest.StashKey["SpecperfResult"]()


@dataclass
class SpecperfResult:
    """What the `specperf` fixture gives a test: its measurement and how it compares."""

    server: RunningServer
    key: MeasurementKey  # what was measured: server, workload, concurrency
    result: Measurement
    reference: Measurement | None = None
    marker: SpecperfMarker | None = None
    checks: list[CheckResult] = field(default_factory=list)

    @property
    def speedup(self) -> float | None:
        """This server's throughput over the reference's, same workload and session: the point value of
        the interval `min_speedup` decides on and the table shows (verdict/history.py `speedup_estimate`,
        the ratio of the starts' log-mean levels), so a test body and the report never disagree."""
        if self.reference is None:
            return None
        current = self.result.start_samples("output_throughput")
        reference = self.reference.start_samples("output_throughput")
        if not current or not reference or min(min(s) for s in (*current, *reference)) <= 0.0:
            return None
        return speedup_estimate(current, reference, 0.0).value


def fail(message: str) -> NoReturn:
    """Fail the test with `message` alone: not chained to the exception being handled, which would
    print the same error a second time ("During handling of the above exception...")."""
    __tracebackhide__ = True
    raise pytest.fail.Exception(message, pytrace=False) from None


def case_of(value: object) -> Case | None:
    """A parametrized value as a case; users parametrize `specperf_server` with plain names."""
    if isinstance(value, str):
        return ServerCase(value)
    return value if isinstance(value, ServerCase | MeasurementKey) else None


def item_case(item: pytest.Item) -> Case | None:
    callspec = getattr(item, "callspec", None)
    if callspec is None or TARGET_PARAM not in callspec.params:
        return None
    return case_of(callspec.params[TARGET_PARAM])


def _session(request: pytest.FixtureRequest) -> SpecperfSession:
    session = request.config.stash.get(SESSION_KEY, None)
    if session is None:
        pytest.fail("pytest-specperf is not configured: no specperf.toml found", pytrace=False)
    return session


@pytest.fixture
def specperf_server(request: pytest.FixtureRequest) -> RunningServer:
    """The running server of this test's config (`.name`, `.url`, `.config`, `.log_path`).

    Parametrized over every server config by default; narrow it with
    `@pytest.mark.parametrize("specperf_server", ["plain"], indirect=True)`.
    """
    session = _session(request)
    case = case_of(getattr(request, "param", None))
    if case is None:
        pytest.fail("specperf_server needs a server: parametrize it or use @pytest.mark.specperf", pytrace=False)
    if case.server not in session.config.servers:
        pytest.fail(f"unknown server config {case.server!r}", pytrace=False)
    try:
        return session.server(case.server)
    except SpecperfError as exc:
        fail(str(exc))


@pytest.fixture
def specperf(request: pytest.FixtureRequest, specperf_server: RunningServer) -> SpecperfResult:
    """This test's measurement, its reference measurement and its checks (measured before the body runs)."""
    session = _session(request)
    key = request.node.callspec.params[TARGET_PARAM]
    if not isinstance(key, MeasurementKey):
        pytest.fail("the specperf fixture needs @pytest.mark.specperf on the test", pytrace=False)
    try:
        result = session.measurement(key)
        reference = session.reference_measurement(key)
        if not session.options.update:
            session.baseline(result.key)
    except SpecperfError as exc:
        session.record_error(key, str(exc))
        fail(str(exc))
    value = SpecperfResult(
        server=specperf_server,
        key=key,
        result=result,
        reference=reference,
        marker=session.plan.marker(request.node.nodeid),
    )
    request.node.stash[RESULT_KEY] = value
    return value


@pytest.fixture(autouse=True)
def _specperf_marked(request: pytest.FixtureRequest) -> None:
    """A marked test is a complete performance test even with an empty body."""
    if request.node.get_closest_marker("specperf") is not None and TARGET_PARAM in getattr(
        getattr(request.node, "callspec", None), "params", {}
    ):
        request.getfixturevalue("specperf")
