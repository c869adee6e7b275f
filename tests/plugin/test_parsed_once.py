"""Options and markers are read once: into a frozen `Options` when pytest is configured, and each
marker when its test function is parametrized (its items share the parsed marker)."""

from __future__ import annotations

import pytest

from pytest_specperf import plugin
from pytest_specperf.options import Options

TESTS = """
import pytest

@pytest.mark.specperf(server=["plain", "eagle3-5step", "eagle3-2step"], max_regression=0.1)
def test_each(specperf):
    pass

@pytest.mark.parametrize("specperf_server", ["plain"], indirect=True)
@pytest.mark.specperf(server="plain")
def test_named(specperf_server):
    pass
"""


def test_options_and_markers_are_parsed_once(make_suite, monkeypatch: pytest.MonkeyPatch) -> None:
    markers: list[str] = []
    options: list[object] = []
    parse_marker, from_pytest_config = plugin.parse_marker, Options.from_pytest_config.__func__  # type: ignore[attr-defined]

    def counted_marker(args, kwargs, test, config):  # type: ignore[no-untyped-def]
        markers.append(test)
        return parse_marker(args, kwargs, test, config)

    def counted_options(cls, config):  # type: ignore[no-untyped-def]
        options.append(config)
        return from_pytest_config(cls, config)

    monkeypatch.setattr(plugin, "parse_marker", counted_marker)
    monkeypatch.setattr(Options, "from_pytest_config", classmethod(counted_options))
    suite = make_suite(TESTS)
    result = suite.run("--collect-only", "-q", "--specperf-servers=plain,eagle3-5step")
    assert result.ret == pytest.ExitCode.OK
    collected = {line for line in result.outlines if line.startswith("test_suite.py::")}
    # --specperf-servers, read once, selects
    assert collected == {
        "test_suite.py::test_each[plain]",
        "test_suite.py::test_each[eagle3-5step]",
        "test_suite.py::test_named[plain]",
    }
    assert markers == ["test_suite.py::test_each", "test_suite.py::test_named"]
    assert len(options) == 1
