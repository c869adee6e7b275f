"""A speculative key whose speedup fell asks for a second start, and the reference is started again
with it: the second look divides the speculative server's second start by the reference's second
start, a second draw of the speedup (verdict/control.py `paired_speedups`, session/looks.py)."""

from __future__ import annotations

import json

from plugin_suites import ONE_MEASURED_TEST, ONE_SPEC_SERVER, STEADY_WORKLOAD


def test_a_fallen_speedup_is_confirmed_on_a_second_start_of_both_servers(make_suite) -> None:
    suite = make_suite(ONE_MEASURED_TEST, extra="rounds = 4\n", servers=ONE_SPEC_SERVER, workloads=STEADY_WORKLOAD)
    toml = suite.pytester.path / "specperf.toml"
    # a slower modelled clock: at 0.02 a loaded machine's scheduling noise would swamp a night's rounds
    base = toml.read_text().replace("rounds = 2\n", "").replace("sim_time_scale = 0.02", "sim_time_scale = 0.2")
    toml.write_text(base)
    suite.run("--specperf-update").assert_outcomes(passed=1)

    # a draft 30x slower to draft with: the speedup falls far beyond the 5% tolerance
    slower = 'num_draft_tokens = 6\nsim_args = ["--sim-draft-slowdown", "30"]\n'
    toml.write_text(base.replace("num_draft_tokens = 6\n", slower))
    report = suite.pytester.path / "report.json"
    slow = suite.run("--specperf-record", f"--specperf-json={report}")
    slow.assert_outcomes(failed=1)
    document = json.loads(report.read_text())
    restarted = {entry["server"]: entry["measurements"] for entry in document["second_starts"]}
    assert restarted == {"plain": ["plain/default/c1"], "eagle3-5step": ["eagle3-5step/default/c1"]}
    slow.stdout.fnmatch_lines(["*second server start of plain: one restart for 1 measurement*"])
