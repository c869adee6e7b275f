"""pytest's summary at the default verbosity fits a screen; `-v` adds what explains the table; a failing
test's message says each sentence once."""

from __future__ import annotations

from importlib import resources

from plugin_suites import ONE_MEASURED_TEST, ONE_SPEC_SERVER, STEADY_WORKLOAD

DETAILS = ("cost model", "verify-cost fit", "concurrency sweep", "acceptance by draft position", "latency percentiles")


def _section(lines: list[str]) -> list[str]:
    """From the specperf section's first line to pytest's own summary line."""
    start = next(i for i, line in enumerate(lines) if line.startswith("=") and " specperf " in line)
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("=") and " in " in lines[i])
    return lines[start : end + 1]


def _suite(make_suite):
    suite = make_suite(ONE_MEASURED_TEST, servers=ONE_SPEC_SERVER, workloads=STEADY_WORKLOAD, extra="rounds = 4\n")
    profile = (resources.files("pytest_specperf.sim") / "profiles" / "kimi-k2.5-tp8.toml").read_text()
    toml = suite.pytester.path / "specperf.toml"
    toml.write_text(
        toml.read_text()
        .replace('sim_profile = "kimi-k2.5-tp8"', 'sim_profile = "gpu.toml"')
        .replace("rounds = 2\n", "")
        .replace("sim_time_scale = 0.02", "sim_time_scale = 0.1")  # the slowdown stands clear of a busy machine
    )
    (suite.pytester.path / "gpu.toml").write_text(profile)
    return suite, profile


def test_two_servers_summary_is_short_by_default_and_whole_under_v(make_suite) -> None:
    suite, _ = _suite(make_suite)
    stored = suite.run("--specperf-update")
    stored.assert_outcomes(passed=1)
    short = _section(stored.outlines)
    assert not [d for d in DETAILS if d in "\n".join(short)], short
    assert "2 measurements stored as the new baselines (--specperf-update); -v lists them" in "\n".join(short)
    assert len(short) <= 20, "\n".join(short)
    whole = suite.run("-v")
    whole.assert_outcomes(passed=1)
    text = "\n".join(_section(whole.outlines))
    assert "cost model (per draft-and-verify cycle" in text and "latency percentiles" in text
    assert "add a config differing only in draft tokens" not in text


def test_a_failing_message_says_each_sentence_once(make_suite) -> None:
    suite, profile = _suite(make_suite)
    suite.run("--specperf-update").assert_outcomes(passed=1)
    # verify x4 (cycle x3.3): a slowdown far beyond what a busy machine takes off the baseline's speed
    # (at +60% a 2-core machine at load 15 hid it: the reference read a CV of 23% on its second start)
    (suite.pytester.path / "gpu.toml").write_text(profile.replace("verify_fixed_ms = 22.5", "verify_fixed_ms = 90.0"))
    result = suite.run()
    result.assert_outcomes(failed=1)
    lines = result.outlines
    start = lines.index("REGRESSION eagle3-5step/default/c1:")  # the failure's own message, as the plugin gives it
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("="))
    message = lines[start:end]
    assert len(message) <= 25, "\n".join(message)
    # each check's line describes its own history ("1 recorded run, ..., 2 more recorded runs replace
    # it)): ratio ..."): two histories alike read alike, and where the reference moved 0.0% the speedup's
    # and the throughput's ratios are the same figure too, so those clauses are not sentences said twice
    sentences = [
        s.strip() for line in message for s in line.split("; ") if len(s.strip()) > 20 and "recorded run" not in s
    ]
    repeated = {s for s in sentences if sentences.count(s) > 1}
    assert not repeated, "\n".join(message)
    summary = "\n".join(_section(lines))
    assert ": why: " not in summary  # the message gave it; the summary does not repeat it
