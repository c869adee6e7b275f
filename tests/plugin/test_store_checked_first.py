"""A session that will record finds out before any server starts that its store cannot be written:
a folder store nobody can write is a usage error, not a night measured for nothing."""

from __future__ import annotations

import pytest
from plugin_suites import ONE_MEASURED_TEST


def test_a_store_that_cannot_be_written_fails_before_any_server_starts(make_suite) -> None:
    suite = make_suite(ONE_MEASURED_TEST, extra='store = "history"\n')
    (suite.pytester.path / "history").write_text("a file where the store's folder should be")
    result = suite.run("--specperf-record")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    text = " ".join((result.stdout.str() + result.stderr.str()).split())
    assert "pytest-specperf: store: " in text and "cannot write the store" in text, text
    assert "nothing was measured" in text and "file stands where the store's folder" in text
    assert "Traceback" not in text
    assert suite.starts() == []  # no server was started


def test_a_session_that_only_reads_does_not_need_a_writable_store(make_suite) -> None:
    suite = make_suite(ONE_MEASURED_TEST, extra='store = "history"\n')
    (suite.pytester.path / "history").write_text("a file where the store's folder should be")
    result = suite.run()
    assert result.ret != pytest.ExitCode.USAGE_ERROR  # nothing is stored: the store is only read
    assert suite.starts() != []
