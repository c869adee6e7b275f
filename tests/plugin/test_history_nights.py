"""Nights on a jittery simulator: a history grows, an unchanged night passes, a slower draft is a
REGRESSION against the history, and --specperf-update starts a new segment."""

from __future__ import annotations

import json

from conftest import ONE_MEASURED_TEST, ONE_SPEC_SERVER, STEADY_WORKLOAD

JITTER = 'sim_args = ["--sim-run-jitter", "0.02", "--sim-round-jitter", "0.01"]\n'
SERVERS = ONE_SPEC_SERVER.replace("[specperf.servers.plain]\n", "[specperf.servers.plain]\n" + JITTER).replace(
    "num_draft_tokens = 6\n", "num_draft_tokens = 6\n" + JITTER
)


def runs_of(suite) -> list[dict]:
    path = suite.pytester.path / ".specperf" / "sim" / "eagle3-5step" / "default-c1.json"
    return json.loads(path.read_text())["runs"]


def test_five_nights_then_unchanged_passes_and_a_slow_draft_regresses(make_suite) -> None:
    # the prior is the config's default (2%): the simulator now has run-to-run spread
    suite = make_suite(
        ONE_MEASURED_TEST, extra="rounds = 4\nrun_to_run_cv = 0.02\n", servers=SERVERS, workloads=STEADY_WORKLOAD
    )
    toml = suite.pytester.path / "specperf.toml"
    # a slower modelled clock: at 0.02 a loaded CI machine's scheduling noise would swamp the jitter
    toml.write_text(
        toml.read_text()
        .replace("run_to_run_cv = 0\n", "")
        .replace("rounds = 2\n", "")
        .replace("sim_time_scale = 0.02", "sim_time_scale = 0.2")
    )
    suite.run("--specperf-update").assert_outcomes(passed=1)
    for _ in range(4):
        night = suite.run("--specperf-record")
        night.assert_outcomes(passed=1)
        assert "not stored" not in night.stdout.str(), night.stdout.str()
    stored = runs_of(suite)
    assert [r["segment"] for r in stored] == [0] * 5
    throughputs = [r["summary"]["output_throughput"] for r in stored]
    assert len(set(throughputs)) == 5  # every start drew its own speed

    unchanged = suite.run()
    unchanged.assert_outcomes(passed=1)  # PASS, or INCONCLUSIVE with a warning: never a false REGRESSION
    assert "REGRESSION" not in unchanged.stdout.str()
    assert len(runs_of(suite)) == 5  # without --specperf-record nothing is appended

    text = toml.read_text().replace(
        'num_draft_tokens = 6\nsim_args = ["--sim-run-jitter", "0.02", "--sim-round-jitter", "0.01"]\n',
        'num_draft_tokens = 6\nsim_args = ["--sim-run-jitter", "0.02", "--sim-round-jitter", "0.01", '
        '"--sim-draft-slowdown", "8"]\n',
    )
    toml.write_text(text)
    slow = suite.run("--specperf-record")
    slow.assert_outcomes(failed=1)
    slow.stdout.fnmatch_lines(
        [
            "*REGRESSION eagle3-5step/default/c1:*",
            "*output_throughput: * tok/s (* rounds) vs baseline * (5 recorded runs, run-to-run CV *): ratio 0.*"
            "allowed -5%: REGRESSION*",
            "*server.flag --sim-draft-slowdown: unset → 8*",
        ]
    )
    slow.stdout.fnmatch_lines(["*not stored eagle3-5step/default/c1: a check MISSED (REGRESSION)*"])
    assert len(runs_of(suite)) == 5  # a regressed night never becomes part of the normal

    update = suite.run("--specperf-update")  # the slower draft is now intended
    update.assert_outcomes(passed=1)
    assert [r["segment"] for r in runs_of(suite)] == [0] * 5 + [1]
