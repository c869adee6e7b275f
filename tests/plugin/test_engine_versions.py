"""A server of a release outside the plugin's supported range is measured, and the report names the
release once per session (one warning line, not a note on every row)."""

from __future__ import annotations

import json
import re

import pytest

from pytest_specperf.engines import engine_for
from pytest_specperf.engines.base import VersionRange


def test_an_unsupported_sglang_version_is_named_once_in_the_terminal_and_the_json(make_suite) -> None:
    suite = make_suite(
        """
        import pytest

        @pytest.mark.specperf(server="eagle3-5step")
        def test_perf(specperf):
            assert specperf.result.notes == []  # a row carries no note of the session's engine
        """,
        extra='sim_args = ["--sim-sglang-version", "0.5.99"]\n',  # both servers, so two rows run on it
    )
    report = suite.pytester.path / "report.json"
    result = suite.run(f"--specperf-json={report}", "--specperf-update")
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line("*not stored*")  # another version is named, and its run still becomes a baseline
    warning = "sglang 0.5.99+specperf-sim is outside the versions this plugin supports (sglang 0.5.23)"
    out = re.sub(r"\s+", " ", result.stdout.str())
    assert out.count(warning) == 1
    assert f"/c1: {warning}" not in out  # the session's line, not a row's
    document = json.loads(report.read_text())
    assert [w for w in document["warnings"] if warning in w] == [
        f"{warning}; it is measured as usual, but its "
        "flags, endpoints, streams or counters may differ "
        "from docs/engines/sglang.md"
    ]
    assert not any("supports" in n for m in document["measurements"] for n in m["notes"])
    assert list((suite.pytester.path / ".specperf" / "sim" / "eagle3-5step").glob("default-c1.*"))  # stored


def test_a_supported_version_says_nothing(make_suite) -> None:
    suite = make_suite(
        """
        import pytest

        @pytest.mark.specperf(server="eagle3-5step")
        def test_perf(specperf):
            pass
        """
    )
    report = suite.pytester.path / "report.json"
    suite.run(f"--specperf-json={report}").assert_outcomes(passed=1)
    assert not any("supports" in w for w in json.loads(report.read_text())["warnings"])


def test_version_note() -> None:
    sglang, vllm = engine_for("sglang"), engine_for("vllm")
    assert sglang.version_note("0.5.23") is None
    assert sglang.version_note("0.5.23+specperf-sim") is None  # a local build of a supported release
    assert vllm.version_note("0.32.0+cpu") is None
    assert vllm.version_note("0.26.0") is None  # the oldest: the release of the H200 night
    assert vllm.version_note("0.29.1rc1") is None
    assert vllm.version_note(None) is None and vllm.version_note("") is None  # unknown says nothing
    message = vllm.version_note("0.33.1")
    assert message is not None and message.startswith(
        "vllm 0.33.1 is outside the versions this plugin supports (vllm 0.26.0 to 0.32.x)"
    )
    assert "docs/engines/vllm.md" in message
    assert vllm.version_note("0.25.1") is not None
    assert sglang.version_note("0.0.0.dev0") is not None  # a source snapshot without a release


@pytest.mark.parametrize(
    ("version", "inside"),
    [
        ("0.26.0", True),
        ("0.26.0+cpu", True),
        ("0.32.0", True),
        ("0.32.7", True),
        ("0.25.9", False),
        ("0.33.0", False),
        ("v0.30.1", True),
        ("0.0.0.dev0", False),
        ("main", False),
    ],
)
def test_version_range(version: str, inside: bool) -> None:
    supported = VersionRange("0.26.0", "0.32")
    assert (version in supported) is inside
    assert str(supported) == "0.26.0 to 0.32.x"
    assert str(VersionRange("0.5.23", "0.5.23")) == "0.5.23"
