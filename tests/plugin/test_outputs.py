"""Outputs of a real session on the simulator: terminal summary, JSON, Markdown, BMF, JUnit XML, plots.

The suites check accept length, which the simulator's counts decide, not a speedup: at the time scale
these tests run at (0.02), what a busy machine's scheduler does to a round outweighs the modelled
delays, so a speedup's size here says nothing (its fidelity is a benchmark: benchmarks/sim_fidelity.py).
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET

import pytest
from plugin_suites import TWO_LEVEL_WORKLOAD

from pytest_specperf.report.schema import validate

SPEEDUP_TEST = """
import pytest

@pytest.mark.specperf(accept_length=(1.0, None))
def test_speedup(specperf):
    assert specperf.speedup is not None and specperf.speedup > 0
"""


def test_every_output_of_one_session(make_suite, monkeypatch) -> None:
    suite = make_suite(SPEEDUP_TEST)
    out = suite.pytester.path
    step_summary = out / "step-summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step_summary))
    result = suite.run(
        f"--specperf-json={out / 'report.json'}",
        f"--specperf-markdown={out / 'summary.md'}",
        f"--specperf-bmf={out / 'bmf.json'}",
        f"--junitxml={out / 'junit.xml'}",
        "-v",  # the cost model is a detail of the summary: -v
    )
    result.assert_outcomes(passed=2)

    # terminal: the summary, marked as simulated at its time scale, within 120 columns
    text = result.stdout.str()
    section = text[text.index("= specperf =") :].splitlines()[1:]
    assert any(line.startswith("SIMULATED: all measurements come from pytest_specperf.sim") for line in section)
    assert section[0] == "store: .specperf"  # as the user would type it, from the directory pytest ran in
    assert "time scale 0.02: every delay is x0.02" in text
    assert any(line.startswith("eagle3-5step  default   1") for line in section)
    assert "cost model (per draft-and-verify cycle" in text
    summary = [line for line in section if not line.startswith(("specperf: wrote", "specperf: appended", "=="))]
    assert max(len(line) for line in summary) <= 120

    # JSON: valid against the schema, with raw rounds and the simulator's fingerprint
    document = json.loads((out / "report.json").read_text())
    assert validate(document) == []
    assert document["simulated"] is True
    labels = {m["label"]: m for m in document["measurements"]}
    assert set(labels) == {"plain/default/c1", "eagle3-5step/default/c1", "eagle3-2step/default/c1"}
    five = labels["eagle3-5step/default/c1"]
    rounds = len(five["rounds"])  # 2, or more when a check was inconclusive (adaptive rounds)
    assert rounds >= 2 and len(five["rounds"][0]["records"]) == 4
    assert five["summary"]["completed"] == 4 * rounds and five["summary"]["errors"] == 0
    assert five["fingerprint"]["identity"]["sim_time_scale"] == "0.02"
    assert five["estimates"]["speedup"]["value"] > 0 and five["cost_model"]["cycle_ms"]["value"] > 0
    assert document["verify_cost_fits"][0]["servers"] == ["eagle3-2step", "eagle3-5step"]

    # Markdown, also appended to the GitHub step summary
    markdown = (out / "summary.md").read_text()
    assert markdown.startswith("## pytest-specperf") and "| eagle3-5step" in markdown
    assert step_summary.read_text() == markdown + "\n"

    # BMF
    bmf = json.loads((out / "bmf.json").read_text())
    assert set(bmf["eagle3-5step/default/c1"]) == {"throughput", "accept-length", "tpot", "ttft", "speedup"}
    assert bmf["plain/default/c1"]["throughput"]["value"] > 0

    # JUnit XML: the properties plugin.py records on each test
    cases = ET.parse(out / "junit.xml").getroot().iter("testcase")
    properties = {case.get("name"): {p.get("name"): p.get("value") for p in case.iter("property")} for case in cases}
    five_props = properties["test_speedup[eagle3-5step]"]
    assert float(five_props["specperf_output_throughput"]) > 0
    assert float(five_props["specperf_accept_length"]) > 1
    assert float(five_props["specperf_speedup"]) == pytest.approx(five["estimates"]["speedup"]["value"], abs=6e-5)
    assert five_props["specperf_verdict"] in ("PASS", "NEW", "INCONCLUSIVE")

    # the files are named at the end of the summary
    for line in (f"specperf: wrote JSON report to {out / 'report.json'}", "specperf: appended the Markdown summary"):
        assert line in text


def test_plots_and_sweep_of_a_session(make_suite) -> None:
    pytest.importorskip("matplotlib")
    suite = make_suite(SPEEDUP_TEST, workloads=TWO_LEVEL_WORKLOAD)
    plots = suite.pytester.path / "plots"
    result = suite.run(f"--specperf-plot={plots}", f"--specperf-json={suite.pytester.path / 'r.json'}", "-v")
    result.assert_outcomes(passed=4)
    text = result.stdout.str()
    assert "concurrency sweep, workload default: speedup over plain by concurrency level" in text
    assert "where the speedup crosses 1.0:" in text and "fastest config per level (tok/s):" in text
    names = sorted(p.name for p in plots.glob("*.png"))
    assert names == [
        "accept_length.png",
        "cycle_time.png",
        "speedup_vs_concurrency-default.png",
        "throughput.png",
    ]
    assert f"specperf: wrote 4 plots to {plots}" in text
    sweep = json.loads((suite.pytester.path / "r.json").read_text())["sweeps"][0]
    assert sweep["levels"] == [1, 2] and {c["server"] for c in sweep["configs"]} == {"eagle3-2step", "eagle3-5step"}


def test_plot_without_matplotlib_is_a_usage_error_before_any_server_starts(make_suite, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    suite = make_suite(SPEEDUP_TEST)
    result = suite.run(f"--specperf-plot={suite.pytester.path / 'plots'}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--specperf-plot needs matplotlib*pip install pytest-specperf[[]plot[]]*"])
    assert suite.starts() == []


def test_a_night_with_no_server_still_writes_its_report(make_suite, one_spec_server, tmp_path) -> None:
    suite = make_suite(
        "import pytest\n\n@pytest.mark.specperf(server='eagle3-5step')\ndef test_x(specperf):\n    pass\n",
        servers=one_spec_server('sim_args = ["--sim-fail-at-startup"]'),
    )
    report = tmp_path / "night.json"
    result = suite.run(f"--specperf-json={report}")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*ERROR eagle3-5step/default/c1: server 'eagle3-5step' exited with code 1*"])
    assert any(w.startswith("ERROR eagle3-5step/default/c1") for w in json.loads(report.read_text())["warnings"])


@pytest.mark.parametrize(
    ("verbosity", "server_lines", "round_lines"),
    [("-q", False, False), (None, True, False), ("-v", True, True)],
    ids=["quiet", "default", "verbose"],
)
def test_progress_lines_follow_pytests_verbosity(make_suite, verbosity, server_lines, round_lines) -> None:
    """A line per round only under -v (as pytest shows a line per test only then); under -q nothing but
    pytest's own lines, the table and the verdicts; no line of ours glued to pytest's dots."""
    suite = make_suite(SPEEDUP_TEST)
    result = suite.run(*([verbosity] if verbosity else []), "--specperf-record")
    result.assert_outcomes(passed=2)
    lines = result.outlines
    ours = [line for line in lines if "[specperf]" in line]
    assert all(line.startswith("[specperf] ") for line in ours), ours  # each on a line of its own
    assert any(" ready after " in line for line in ours) == server_lines, ours
    assert any(": round 1/" in line for line in ours) == round_lines, ours
    assert any(": warmup, " in line for line in ours) == round_lines, ours
    assert any(line.startswith("server ") and line.endswith("verdict") for line in lines)  # the table, always
