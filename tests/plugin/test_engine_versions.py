"""A server of a version the plugin was not checked against is measured, and the report says so."""

from __future__ import annotations

import json
import re

from pytest_specperf.engines import engine_for


def test_an_unknown_sglang_version_is_named_in_the_terminal_and_the_json(make_suite, one_spec_server) -> None:
    suite = make_suite(
        """
        import pytest

        @pytest.mark.specperf(server="eagle3-5step")
        def test_perf(specperf):
            assert any("0.5.99+specperf-sim" in n for n in specperf.result.notes)
        """,
        servers=one_spec_server('sim_args = ["--sim-sglang-version", "0.5.99"]'),
    )
    report = suite.pytester.path / "report.json"
    result = suite.run(f"--specperf-json={report}", "--specperf-update")
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line("*not stored*")  # another version is named, and its run still becomes a baseline
    warning = "sglang 0.5.99+specperf-sim is not a version this plugin was checked against (known: 0.5.23)"
    assert f"eagle3-5step/default/c1: {warning}" in re.sub(r"\s+", " ", result.stdout.str())
    rows = {m["label"]: m for m in json.loads(report.read_text())["measurements"]}
    assert any(warning in n for n in rows["eagle3-5step/default/c1"]["notes"])
    assert not any("checked against" in n for n in rows["plain/default/c1"]["notes"])  # the default 0.5.23
    assert (suite.pytester.path / ".specperf" / "sim" / "eagle3-5step" / "default-c1.json").is_file()


def test_version_note() -> None:
    sglang, vllm = engine_for("sglang"), engine_for("vllm")
    assert sglang.version_note("0.5.23") is None
    assert sglang.version_note("0.5.23+specperf-sim") is None  # a local build of a known release
    assert vllm.version_note("0.32.0+cpu") is None
    assert vllm.version_note(None) is None and vllm.version_note("") is None  # unknown says nothing
    message = vllm.version_note("0.33.1")
    assert message is not None and message.startswith(
        "vllm 0.33.1 is not a version this plugin was checked against (known: 0.32.0)"
    )
    assert "docs/engines/vllm.md" in message
