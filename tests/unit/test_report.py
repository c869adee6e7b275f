"""Renderings of a hand-built report: terminal text (golden, <= 120 columns), Markdown, BMF, JSON schema."""
# ruff: noqa: RUF001  (the golden text has an alpha column: per-draft acceptance)

from __future__ import annotations

import dataclasses
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from report_samples import CONFIG, measurement, story_measurements, story_report, sweep_measurements, sweep_report

from pytest_specperf.report import outputs
from pytest_specperf.report.analysis import build_report
from pytest_specperf.report.jsonreport import decode_report, dumps, report_document
from pytest_specperf.report.outputs import OutputPaths, bmf_document, write_outputs
from pytest_specperf.report.plots import PlotError, write_plots
from pytest_specperf.report.schema import REPORT_SCHEMA, validate
from pytest_specperf.report.terminal import (
    WIDTH,
    render_markdown,
    render_text,
    simulation_note,
    summary_blocks,
    sweep_blocks,
)
from pytest_specperf.store.file import FileStore
from pytest_specperf.verdict.stats import Estimate

STORY_TEXT = """\
store: .specperf
measured on: NVIDIA H200 x8, sglang 0.5.23, launcher sim (profile kimi-k2.5-tp8)
SIMULATED: all measurements come from pytest_specperf.sim (profile kimi-k2.5-tp8), a model of a GPU server, not a GPU;
  time scale 0.1: every delay is x0.1, so tok/s read 10x and ms 0.1x what the modelled server would show
± and [low,high]: 90% confidence intervals over n rounds; vs baseline and speedup: the ones their checks decide on
speedup = tok/s over plain (ref), same workload, same session; start-to-start spread included

server        workload  c  n  tok/s     vs baseline        speedup            τ          verdict
------------  --------  -  -  --------  -----------------  -----------------  ---------  -------
plain (ref)   chat      1  3  62.9±0.4  -                  -                  1          NEW
eagle3-2step  chat      1  3  75.9±0.6  -                  1.21x [1.15,1.26]  1.95±0.03  NEW
eagle3-5step  chat      1  3  71.0±0.4  -4.4% [-8.7,+0.2]  1.13x [1.08,1.18]  2.10±0.02  PASS

cost model (per draft-and-verify cycle, against the reference's TPOT):
server        workload  c  τ          TPOT ms     ref TPOT ms  cycle ms    τ*         τ-τ*        α
------------  --------  -  ---------  ----------  -----------  ----------  ---------  ----------  ---------
eagle3-2step  chat      1  1.95±0.03  13.15±0.08  15.89±0.09   25.60±0.50  1.61±0.04  +0.34±0.02  0.59±0.01
eagle3-5step  chat      1  2.10±0.02  14.07±0.10  15.89±0.09   29.54±0.44  1.86±0.04  +0.24±0.03  0.53±0.00
cycle = τ x TPOT; τ* = cycle / ref TPOT: the break-even accept length, speculation pays while τ > τ*
α: per-draft acceptance implied by τ for a chain of drafts; derived intervals are interval arithmetic (conservative)

verify-cost fit, chat c1, over eagle3-2step / eagle3-5step:
  cycle = 21.66 ms + 1.314 ms x draft tokens (exact fit through two points: no confidence interval)
  fixed share of the cycle: 85%, 73% — mostly fixed cost: fewer draft tokens barely shorten a cycle

environment drift since the stored baseline:
  eagle3-5step/chat/c1: NCCL_ALGO: Tree → Ring

NEW: no stored baseline yet for some measurements; store them with --specperf-update"""

SWEEP_TEXT = """\
concurrency sweep, workload chat: speedup over plain by concurrency level
c    eagle3-2step       eagle3-5step
---  -----------------  -----------------
c1   1.21x [1.15,1.26]  1.13x [1.08,1.18]
c4   1.04x [0.99,1.10]  0.89x [0.85,0.94]
c16  0.87x [0.83,0.92]  0.70x [0.67,0.73]

where the speedup crosses 1.0:
  eagle3-2step: speedup crosses 1.0 at concurrency ~5.72 (3.7 to 8.65)
  eagle3-5step: speedup crosses 1.0 at concurrency ~2.12 (1.6 to 2.79)

fastest config per level (tok/s):
  c1: eagle3-2step 75.9±0.6, clearly ahead of eagle3-5step 71.0±0.4 (intervals do not overlap)
  c4: eagle3-2step 240.0±8.1, ahead of plain 230.0±3.9 but the intervals overlap: this data cannot order them
  c16: plain 800.0±13.5, clearly ahead of eagle3-2step 700.0±23.6 (intervals do not overlap)"""


def text(report, **kwargs) -> list[str]:
    return render_text(summary_blocks(report, store=".specperf", **kwargs))


# --- terminal --------------------------------------------------------------------------------------


def test_terminal_summary_golden() -> None:
    lines = text(story_report())
    assert "\n".join(lines) == STORY_TEXT
    assert max(len(line) for line in lines) <= WIDTH


def test_a_sweep_of_the_reference_alone_prints_no_sweep_table() -> None:
    only_plain = {k: m for k, m in sweep_measurements().items() if k.server == "plain"}
    report = build_report(CONFIG, only_plain, {}, {}, {}, updating=False)
    assert report.sweeps == []
    assert not any("concurrency sweep" in line for line in text(report))


def test_sweep_section_golden() -> None:
    report = sweep_report()
    (sweep,) = report.sweeps
    assert "\n".join(render_text(sweep_blocks(sweep, "plain"))) == SWEEP_TEXT
    full = text(report)
    assert "\n".join(full).count("concurrency sweep, workload chat") == 1
    assert max(len(line) for line in full) <= WIDTH


def test_full_report_adds_percentiles_and_stays_within_width() -> None:
    short, full = text(sweep_report()), text(sweep_report(), full=True)
    assert not any("TTFT p99" in line for line in short)
    assert any("TTFT p99" in line for line in full)
    assert max(len(line) for line in full) <= WIDTH


def test_long_names_wrap_inside_their_cells() -> None:
    long_name = "eagle3-5step-with-a-very-long-config-name-for-tp8"
    measurements = story_measurements()
    renamed = {}
    for key, m in measurements.items():
        if key.server == "eagle3-5step":
            m = replace(m, key=replace(key, server=long_name))
        renamed[m.key] = m
    config = replace(CONFIG, servers={**CONFIG.servers, long_name: CONFIG.servers["eagle3-5step"]})
    lines = text(build_report(config, renamed, {}, {}, {}, updating=False), full=True)
    assert max(len(line) for line in lines) <= WIDTH
    assert any(line.startswith("eagle3-5step-with-a") for line in lines)


def test_gpu_results_are_not_called_simulated() -> None:
    report = build_report(CONFIG, story_measurements(scale=None), {}, {}, {}, updating=False)
    assert simulation_note(report) is None
    assert not any("SIMULATED" in line for line in text(report))


def test_time_scale_one_says_delays_are_as_modelled() -> None:
    report = build_report(CONFIG, story_measurements(scale="1.0"), {}, {}, {}, updating=False)
    assert "time scale 1.0 (delays as modelled)" in (simulation_note(report) or "")


# --- Markdown --------------------------------------------------------------------------------------


def test_markdown_has_github_tables_and_folded_percentiles() -> None:
    md = render_markdown(summary_blocks(sweep_report(), store=".specperf", full=True))
    assert md.startswith("## pytest-specperf\n")
    assert "| server       | workload   | c   | n   | tok/s      |" in md
    assert "|--------------|------------|-----|" in md
    assert "<details><summary>latency percentiles" in md and "</details>" in md
    assert "- eagle3-2step: speedup crosses 1.0 at concurrency ~5.72 (3.7 to 8.65)" in md
    assert "**SIMULATED:** all measurements come from pytest\\_specperf.sim" in md  # escaped: no stray emphasis


def test_markdown_escapes_pipes_in_cells() -> None:
    measurements = {}
    for key, m in story_measurements().items():
        if key.server == "eagle3-2step":
            m = replace(m, key=replace(key, workload="a|b"))
        measurements[m.key] = m
    md = render_markdown(summary_blocks(build_report(CONFIG, measurements, {}, {}, {}, updating=False)))
    assert "a\\|b" in md


# --- BMF -------------------------------------------------------------------------------------------


def test_bmf_shape() -> None:
    bmf = json.loads(dumps(bmf_document(sweep_report())))
    assert set(bmf) == {f"{s}/chat/c{c}" for s in ("plain", "eagle3-2step", "eagle3-5step") for c in (1, 4, 16)}
    spec = bmf["eagle3-5step/chat/c1"]
    assert set(spec) == {"throughput", "accept-length", "tpot", "ttft", "speedup"}
    assert set(bmf["plain/chat/c1"]) == {"throughput", "tpot", "ttft"}  # no accept length, no speedup for plain
    for benchmark in bmf.values():
        for metric in benchmark.values():
            assert set(metric) <= {"value", "lower_value", "upper_value"} and "value" in metric
            assert metric["lower_value"] <= metric["value"] <= metric["upper_value"]
    assert spec["throughput"]["value"] == pytest.approx(71.0)
    assert spec["speedup"]["value"] == pytest.approx(71.0 / 62.9)


#: no start-to-start prior: one round per side leaves a speedup's interval unknown
NO_PRIOR = dataclasses.replace(CONFIG, run_to_run_cv=0.0)


def test_bmf_leaves_unknown_bounds_out() -> None:
    one_round = {
        m.key: m
        for m in [measurement("plain", [62.9], None, [15.9]), measurement("eagle3-5step", [71.0], [2.1], [14.0])]
    }
    bmf = bmf_document(build_report(NO_PRIOR, one_round, {}, {}, {}, updating=False))
    assert bmf["eagle3-5step/chat/c1"]["throughput"] == {"value": 71.0}
    assert bmf["eagle3-5step/chat/c1"]["speedup"] == {"value": pytest.approx(71.0 / 62.9)}


# --- JSON ------------------------------------------------------------------------------------------


def test_json_report_validates_against_the_schema() -> None:
    document = json.loads(dumps(report_document(sweep_report(), store=".specperf")))
    assert validate(document) == []
    assert document["schema"] == "pytest-specperf/report" and document["schema_version"] == 1
    five = next(m for m in document["measurements"] if m["label"] == "eagle3-5step/chat/c1")
    assert five["summary"]["completed"] == 6 and five["summary"]["errors"] == 0
    assert five["summary"]["output_throughput"] == pytest.approx(71.0)
    assert five["summary"]["p99_tpot_ms"] == pytest.approx(14.07 * 1.1, rel=1e-3)
    assert five["cost_model"]["break_even_accept_length"]["value"] == pytest.approx(1.86, abs=0.01)
    assert len(five["rounds"]) == 3 and len(five["rounds"][0]["records"]) == 2
    assert document["sweeps"][0]["configs"][0]["crossover"]["kind"] == "crosses"


def test_schema_is_valid_draft_2020_12_when_jsonschema_is_available() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator.check_schema(REPORT_SCHEMA)
    jsonschema.Draft202012Validator(REPORT_SCHEMA).validate(json.loads(dumps(report_document(story_report()))))


def test_validator_names_what_is_wrong() -> None:
    document = json.loads(dumps(report_document(story_report())))
    del document["measurements"][0]["verdict"]
    document["measurements"][1]["rounds"][0]["output_throughput"] = "fast"
    document["warnings"] = "none"
    problems = validate(document)
    assert "$.measurements[0]: missing required key 'verdict'" in problems
    assert "$.measurements[1].rounds[0].output_throughput: expected number, got str" in problems
    assert "$.warnings: expected array, got str" in problems


def test_unbounded_intervals_are_null_and_read_back_as_infinite() -> None:
    one_round = {
        m.key: m
        for m in [measurement("plain", [62.9], None, [15.9]), measurement("eagle3-5step", [71.0], [2.1], [14.0])]
    }
    document = json.loads(dumps(report_document(build_report(NO_PRIOR, one_round, {}, {}, {}, updating=False))))
    assert validate(document) == []
    speedup = document["measurements"][1]["estimates"]["speedup"]
    assert speedup["low"] is None and speedup["high"] is None and speedup["bounded"] is False
    row = decode_report(document).rows[1]
    assert row.speedup == Estimate(row.speedup.value, -math.inf, math.inf, 1, 0.9)


def test_json_round_trip_is_lossless_for_the_report() -> None:
    report = story_report()
    document = json.loads(dumps(report_document(report, created="t", host="h")))
    again = decode_report(document)
    assert json.loads(dumps(report_document(again, created="t", host="h"))) == document
    assert text(again) == text(report)


def test_secrets_never_reach_the_json() -> None:
    measurements = story_measurements()
    key = next(iter(measurements))
    measurements[key].warnings.append("server said: --api-key sk-abcdefghijklmnopqrstuvwx")
    document = dumps(report_document(build_report(CONFIG, measurements, {}, {}, {}, updating=False)))
    assert "sk-abcdefghijklmnopqrstuvwx" not in document and "<redacted>" in document


# --- the session's outputs -------------------------------------------------------------------------


def output_args(tmp_path: Path, **paths: str | None) -> dict[str, object]:
    """`write_outputs`' arguments beside the report: where each output goes, and the store."""
    return {"paths": OutputPaths(**paths), "store": tmp_path / ".specperf"}


def test_write_outputs_writes_each_file_and_the_step_summary(tmp_path: Path, monkeypatch) -> None:
    step_summary = tmp_path / "step.md"
    step_summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step_summary))
    paths = output_args(
        tmp_path, json=str(tmp_path / "r.json"), markdown=str(tmp_path / "r.md"), bmf=str(tmp_path / "b.json")
    )
    lines = write_outputs(story_report(), **paths)  # type: ignore[arg-type]
    assert lines == [
        f"specperf: wrote JSON report to {tmp_path / 'r.json'}",
        f"specperf: wrote Markdown summary to {tmp_path / 'r.md'}",
        f"specperf: appended the Markdown summary to $GITHUB_STEP_SUMMARY ({step_summary})",
        f"specperf: wrote Bencher Metric Format JSON to {tmp_path / 'b.json'}",
    ]
    assert validate(json.loads((tmp_path / "r.json").read_text())) == []
    markdown = (tmp_path / "r.md").read_text()
    assert step_summary.read_text() == "earlier step\n" + markdown + "\n"
    assert "eagle3-5step/chat/c1" in json.loads((tmp_path / "b.json").read_text())


def test_an_unwritable_output_is_reported_not_raised(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    lines = write_outputs(story_report(), **output_args(tmp_path, json=str(blocker / "r.json")))  # type: ignore[arg-type]
    assert len(lines) == 1 and lines[0].startswith(f"specperf: ERROR: could not write JSON report to {blocker}")


def test_plots_without_matplotlib_say_how_to_install(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(PlotError, match=r"pip install pytest-specperf\[plot\]"):
        write_plots(story_report(), tmp_path)
    lines = write_outputs(story_report(), **output_args(tmp_path, plots=str(tmp_path / "plots")))  # type: ignore[arg-type]
    assert "pip install pytest-specperf[plot]" in lines[0]


def test_plots_of_a_sweep(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    written = write_plots(sweep_report(), tmp_path)
    assert [p.name for p in written] == [
        "throughput.png",
        "accept_length.png",
        "cycle_time.png",
        "speedup_vs_concurrency-chat.png",
    ]
    for path in written:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_outputs_module_has_no_matplotlib_import() -> None:
    source = Path(outputs.__file__).read_text()
    assert "import matplotlib" not in source


def test_saved_baselines_round_trip(tmp_path: Path) -> None:
    measurements = story_measurements()
    store = FileStore(tmp_path)
    saved = {key: store.save(m, suite_dir=None) for key, m in measurements.items()}
    report = build_report(CONFIG, measurements, {}, {}, saved, updating=True)
    document = json.loads(dumps(report_document(report)))
    assert validate(document) == []
    assert document["saved_baselines"][0]["new"]["output_throughput"] == pytest.approx(75.9)
    assert decode_report(document).saved == report.saved
    expected = "  plain/chat/c1: none → 62.9 (plain/chat-c1.jsonl; segment 0, 1 runs)"
    assert any(line.startswith(expected) for line in text(report))


def test_a_github_actions_job_gets_the_step_summary_without_asking(tmp_path: Path, monkeypatch) -> None:
    step_summary = tmp_path / "step.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step_summary))
    lines = write_outputs(story_report(), **output_args(tmp_path))  # type: ignore[arg-type]
    assert lines == [f"specperf: appended the Markdown summary to $GITHUB_STEP_SUMMARY ({step_summary})"]
    assert "eagle3-5step" in step_summary.read_text()


def test_cycle_plot_of_one_speculative_config_fits_title_and_legend() -> None:
    """With one bar the figure is narrow: its title and legend must still be inside the picture."""
    pytest.importorskip("matplotlib")
    from report_samples import CONFIG, story_measurements

    from pytest_specperf.report.analysis import build_report
    from pytest_specperf.report.plots import cycle_figure

    measurements = {k: v for k, v in story_measurements().items() if k.server in ("plain", "eagle3-5step")}
    report = build_report(CONFIG, measurements, {}, {}, {}, updating=False)
    figure = cycle_figure(report, "SIMULATED (pytest_specperf.sim, time scale 0.1)")
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(figure)
    canvas.draw()  # layout happens on draw, as when the PNG is saved
    renderer = canvas.get_renderer()
    width, height = canvas.get_width_height()
    boxes = [
        figure.axes[0].title.get_window_extent(renderer),
        *(lg.get_window_extent(renderer) for lg in figure.legends),
    ]
    for box in boxes:
        assert box.x0 >= 0 and box.x1 <= width and box.y0 >= 0 and box.y1 <= height, (box, width, height)


# --- history: trend column, change points, not stored -------------------------------------------------


def test_history_rows_show_the_last_runs_as_a_trend_within_width() -> None:
    from report_samples import history_report

    lines = text(history_report())
    header = next(line for line in lines if line.startswith("server"))
    assert "last 5" in header and header.index("last 5") < header.index("verdict")
    five = next(line for line in lines if line.startswith("eagle3-5step"))
    assert "▆▇▂▁▁" in five  # two nights at 71, then -8%: the step reads as one
    plain = next(line for line in lines if line.startswith("plain (ref)"))
    assert "▄▄▄▄▄" in plain  # 0.2% wobble stays flat
    assert any(line.startswith("last 5: tok/s of the last 5 runs") for line in lines)
    assert max(len(line) for line in lines) <= WIDTH
    assert not any("last 5" in line for line in text(story_report()))  # no stored history: no column
    markdown = render_markdown(summary_blocks(history_report(), store=".specperf"))
    assert "| last 5 " in markdown and "| ▆▇▂▁▁ " in markdown


def test_trend_column_worst_case_stays_within_width() -> None:
    """A long server name, a wide interval, INCONCLUSIVE: names wrap earlier, the table fits."""
    from report_samples import history_report

    report = history_report()
    long_name = "eagle3-5step-with-a-very-long-config-name"
    rows = [
        replace(r, measurement=replace(r.measurement, key=replace(r.key, server=long_name)))
        if r.key.server == "eagle3-5step"
        else r
        for r in report.rows
    ]
    lines = text(replace(report, rows=rows), full=True)
    assert max(len(line) for line in lines) <= WIDTH


def test_trend_scale_spans_at_least_five_percent() -> None:
    from pytest_specperf.report.analysis import Row
    from pytest_specperf.report.terminal import trend
    from pytest_specperf.verdict.trends import Point

    def row(values: list[float]) -> Row:
        points = tuple(
            Point(Estimate.exact(v), None if i == len(values) - 1 else "2026-11-01", None, 0, i == len(values) - 1)
            for i, v in enumerate(values)
        )
        base = story_report().rows[0]
        return replace(base, history={"output_throughput": points})

    assert trend(row([100.0, 100.5, 99.5, 100.0, 100.2])) == "▄▄▄▄▄"  # round noise stays on the middle level
    assert trend(row([100.0, 100.0, 100.0, 100.0, 96.0])) == "▄▄▄▄▂"  # -4% within the ±5% scale
    assert trend(row([100.0, 100.0, 100.0, 100.0, 90.0])) == "▄▄▄▄▁"  # beyond it: the scale grows
    assert trend(row([100.0])) == "-"


def test_json_report_carries_history_change_points_and_why_a_run_was_not_stored() -> None:
    from report_samples import history_report

    from pytest_specperf.measure.records import MeasurementKey

    why = "a check MISSED (REGRESSION)"
    report = history_report({MeasurementKey("eagle3-5step", "chat", 1): why})
    document = json.loads(dumps(report_document(report, created="t", host="h")))
    assert validate(document) == []
    five = next(m for m in document["measurements"] if m["label"] == "eagle3-5step/chat/c1")
    assert five["not_stored"] == why
    assert sorted(five["history"]) == ["accept_length", "mean_tpot_ms", "output_throughput", "speedup"]
    throughput = five["history"]["output_throughput"]
    assert len(throughput) == 11 and throughput[-1]["tonight"] and throughput[-1]["created"] is None
    assert throughput[0] == {
        "created": "2026-11-10T01:00:00+00:00",
        "commit": "c0aaaaaaaa",
        "segment": 0,
        "tonight": False,
        "status": "accepted",
        "value": throughput[0]["value"],
    }
    assert [c["metric"] for c in five["change_points"]] == ["output_throughput", "speedup"]
    change = five["change_points"][0]
    assert (change["index"], change["runs"], change["since"], change["commit"], change["tonight"]) == (
        6,
        9,
        "2026-11-18T01:00:00+00:00",
        "c8aaaaaaaa",
        False,
    )
    assert change["ratio"]["low"] < change["ratio"]["value"] < change["ratio"]["high"] < 0.93
    assert change["description"].startswith("eagle3-5step chat c1 throughput -8.0% [")
    assert change["description"].endswith("since the run of 2026-11-18 (commit c8aaaaa)")
    plain = next(m for m in document["measurements"] if m["label"] == "plain/chat/c1")
    assert plain["not_stored"] is None and "speedup" not in plain["history"] and plain["change_points"] == []
    again = decode_report(document)
    assert json.loads(dumps(report_document(again, created="t", host="h"))) == document
    assert text(again) == text(report)


def test_a_report_of_an_older_version_without_history_still_reads() -> None:
    document = json.loads(dumps(report_document(story_report())))
    for entry in document["measurements"]:
        for key in ("history", "change_points", "not_stored"):
            del entry[key]
    assert validate(document) == []
    assert all(row.history == {} and row.changes == () for row in decode_report(document).rows)


def test_history_plots_one_figure_per_row_with_a_history(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from report_samples import history_report

    from pytest_specperf.report.plots import history_figure

    written = [p.name for p in write_plots(history_report(), tmp_path)]
    assert "history-eagle3-5step-chat-c1.png" in written and "history-plain-chat-c1.png" in written
    report = history_report()
    five = next(r for r in report.rows if r.key.server == "eagle3-5step")
    figure = history_figure(five, "")
    assert len(figure.axes) == 4  # throughput, TPOT, accept length, speedup
    throughput = figure.axes[0]
    changes = [line for line in throughput.get_lines() if line.get_label().startswith("change point: -8.0%")]
    assert changes and changes[0].get_xdata()[0] == pytest.approx(7.5)  # between the run of 11-17 and of 11-18
    labels = [t.get_text() for t in figure.axes[-1].get_xticklabels()]
    assert labels[0] == "11-10 c0aaaaa" and labels[-1] == "tonight"
    assert any(t.get_text() == "new segment" for t in throughput.texts)
    assert history_figure(story_report().rows[0], "") is None  # no stored history, no figure
