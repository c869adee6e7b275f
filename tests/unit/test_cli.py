"""The `specperf` command on files written in tmp_path: show, diff, merge, and bad files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from report_samples import CONFIG, measurement, story_measurements

from pytest_specperf import cli
from pytest_specperf.cli import SUBCOMMANDS, build_parser, main
from pytest_specperf.measure.fingerprint import Fingerprint
from pytest_specperf.measure.records import Measurement, MeasurementKey
from pytest_specperf.report.analysis import build_report
from pytest_specperf.report.jsonreport import dumps, load_report, report_document, write_json
from pytest_specperf.report.schema import validate
from pytest_specperf.store.file import FileStore


def write_report(path: Path, measurements: list[Measurement], host: str = "gpu-a") -> Path:
    report = build_report(CONFIG, {m.key: m for m in measurements}, {}, {}, {}, updating=False)
    write_json(path, report_document(report, store=".specperf", host=host, created="2025-01-01T00:00:00+00:00"))
    return path


def plain(tok_s: float = 63.0, **kwargs) -> Measurement:
    return measurement("plain", [tok_s - 0.3, tok_s, tok_s + 0.3], None, [15.9] * 3, **kwargs)


def five(tok_s: float = 71.0, **kwargs) -> Measurement:
    return measurement("eagle3-5step", [tok_s - 0.3, tok_s, tok_s + 0.3], [2.1, 2.11, 2.09], [14.0] * 3, **kwargs)


def two(tok_s: float = 75.9, **kwargs) -> Measurement:
    return measurement("eagle3-2step", [tok_s - 0.4, tok_s, tok_s + 0.4], [1.95, 1.94, 1.96], [13.2] * 3, **kwargs)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# --- show ------------------------------------------------------------------------------------------


def test_show_lists_stored_baselines(tmp_path: Path, capsys) -> None:
    store = FileStore(tmp_path / ".specperf")
    for m in story_measurements().values():
        store.save(m, suite_dir=None)
    code, out, _ = run(capsys, "show", tmp_path / ".specperf")
    assert code == 0
    lines = out.splitlines()
    assert lines[1].split() == ["server", "workload", "c", "tok/s", "τ", "rounds", "stored", "fingerprint"]
    row = next(line for line in lines if line.startswith("eagle3-5step"))
    assert "71.0±0.4" in row and "2.10±0.02" in row and "  3  " in row
    assert "NVIDIA H200 x8, sglang 0.5.23, launcher sim (profile" in out and "time scale 0.1" in out
    assert max(len(line) for line in lines) <= 120


def test_history_prints_series_segments_and_change_points(tmp_path: Path, capsys) -> None:
    store = FileStore(tmp_path / ".specperf")
    nights = [71.0, 71.2, 70.9, 71.1, 71.0, 71.1, 65.3, 65.2, 65.4]  # -8% from the 7th run
    for night, tok_s in enumerate(nights):
        # the reference is stored by the same sessions (the speedup pairs) except in the first
        store.save(plain(), suite_dir=None, new_segment=night == 0, session=f"s{night}" if night else None)
        store.save(five(tok_s), suite_dir=None, new_segment=night == 0, session=f"s{night}")
    store.save(five(80.0), suite_dir=None, new_segment=True)  # an intended change
    code, out, _ = run(capsys, "history", "eagle3-5step", "--store", tmp_path / ".specperf")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == f"eagle3-5step/chat/c1: 10 runs, {tmp_path / '.specperf/sim/eagle3-5step/chat-c1.jsonl'}"
    assert "plain/chat/c1" not in out
    assert lines[1] == "speedup over plain: its runs stored by the same session"
    assert lines[2].split() == [
        "run",
        "stored",
        "commit",
        "segment",
        "status",
        "tok/s",
        "TPOT",
        "ms",
        "τ",
        "speedup",
        "rounds",
        "change",
    ]
    row = {line.split()[0]: line for line in lines[4:] if line.strip() and line.split()[0].isdigit()}
    assert "tok/s -8." in row["7"] and "speedup -8." in out and "change" not in row["6"]
    assert "14.00" in row["1"] and "2.10±0.02" in row["1"]
    assert row["1"].split()[4] == "accepted"
    assert row["1"].split()[8] == "-" and row["2"].split()[8].startswith("1.130±")  # 71.2 / 63; no partner at first
    assert "new segment (--specperf-" in row["10"]
    assert max(len(line) for line in lines[2:]) <= 120  # the table (the first line holds the file's path)
    assert run(capsys, "history", "nobody/chat", "--store", tmp_path / ".specperf")[1].startswith("no stored history")
    code, out, _ = run(capsys, "history", "plain", "--store", tmp_path / ".specperf")
    assert "speedup over" not in out  # the reference has no speedup of its own


def test_show_defaults_to_dot_specperf(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".specperf").mkdir()
    assert run(capsys, "show") == (0, "no stored baselines in .specperf\n", "")


def test_show_missing_store_is_an_error(tmp_path: Path, capsys) -> None:
    code, out, err = run(capsys, "show", tmp_path / "nowhere")
    assert code == 2 and out == ""
    assert f"{tmp_path / 'nowhere'}: no such store directory" in err


def test_show_names_a_corrupt_baseline(tmp_path: Path, capsys) -> None:
    bad = FileStore(tmp_path).save(plain(), suite_dir=None).path
    assert bad == tmp_path / "sim" / "plain" / "chat-c1.jsonl"
    bad.write_text("{ not json\n")
    code, _, err = run(capsys, "show", tmp_path)
    assert code == 2 and str(bad) in err and "not valid JSON" in err


# --- diff ------------------------------------------------------------------------------------------


def test_diff_of_equal_reports_passes(tmp_path: Path, capsys) -> None:
    old = write_report(tmp_path / "old.json", [plain(), five()])
    new = write_report(tmp_path / "new.json", [plain(), five()])
    code, out, _ = run(capsys, "diff", old, new)
    assert code == 0
    row = next(line for line in out.splitlines() if line.startswith("eagle3-5step/chat/c1"))
    assert "71.0±0.5" in row and "1.000 [" in row and row.endswith("PASS")
    assert "REGRESSION" not in out


def test_diff_finds_a_regression(tmp_path: Path, capsys) -> None:
    old = write_report(tmp_path / "old.json", [plain(), five()])
    new = write_report(tmp_path / "new.json", [plain(), five(63.0)])
    code, out, _ = run(capsys, "diff", old, new)
    assert code == 1
    row = next(line for line in out.splitlines() if line.startswith("eagle3-5step/chat/c1"))
    assert "0.887 [" in row and row.endswith("REGRESSION")
    assert out.rstrip().endswith("REGRESSION: eagle3-5step/chat/c1")


def test_diff_tolerance_is_an_option(tmp_path: Path, capsys) -> None:
    old = write_report(tmp_path / "old.json", [five()])
    new = write_report(tmp_path / "new.json", [five(63.0)])
    assert run(capsys, "diff", old, new, "--max-regression", "0.2")[0] == 0
    code, _, err = run(capsys, "diff", old, new, "--max-regression", "1.5")
    assert code == 2 and "--max-regression: must be a fraction in [0, 1) (0.05 = 5%), got 1.5" in err


def test_diff_of_baseline_files_shows_environment_drift(tmp_path: Path, capsys) -> None:
    old = FileStore(tmp_path / "old").save(five(nccl="Tree"), suite_dir=None).path
    new = FileStore(tmp_path / "new").save(five(71.2, nccl="Ring"), suite_dir=None).path
    code, out, _ = run(capsys, "diff", old, new)
    assert code == 0
    assert "fingerprint drift, old → new" in out and "NCCL_ALGO: Tree → Ring" in out


def test_diff_of_stores_pairs_by_label(tmp_path: Path, capsys) -> None:
    for name, tok_s in (("old", 71.0), ("new", 80.0)):
        store = FileStore(tmp_path / name)
        store.save(plain(), suite_dir=None)
        store.save(five(tok_s), suite_dir=None)
    code, out, _ = run(capsys, "diff", tmp_path / "old", tmp_path / "new")
    assert code == 0
    assert next(line for line in out.splitlines() if line.startswith("eagle3-5step")).endswith("IMPROVED")


def test_diff_with_another_setup_is_incomparable_not_a_regression(tmp_path: Path, capsys) -> None:
    old = write_report(tmp_path / "old.json", [five()])
    new = write_report(tmp_path / "new.json", [five(50.0, scale="0.05")])
    code, out, _ = run(capsys, "diff", old, new)
    assert code == 0
    assert "INCOMPARABLE" in out and "sim_time_scale: 0.1 → 0.05 (not comparable)" in out


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{ nope", "corrupt report: not valid JSON"),
        ("[1, 2]", "expected a JSON object, got list"),
        ('{"hello": 1}', "neither a pytest-specperf JSON report nor a stored baseline"),
        ('{"schema": "pytest-specperf/report", "schema_version": 2}', "schema_version 2 is newer than"),
        ('{"schema": "pytest-specperf/report", "schema_version": 1}', "corrupt report: $: missing required key"),
    ],
)
def test_diff_bad_files_name_the_file(tmp_path: Path, capsys, content: str, message: str) -> None:
    good = write_report(tmp_path / "good.json", [five()])
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    code, out, err = run(capsys, "diff", good, bad)
    assert code == 2 and out == ""
    assert err.startswith(f"specperf: error: {bad}: ") and message in err


def test_diff_missing_file(tmp_path: Path, capsys) -> None:
    good = write_report(tmp_path / "good.json", [five()])
    code, _, err = run(capsys, "diff", tmp_path / "missing.json", good)
    assert code == 2 and f"{tmp_path / 'missing.json'}: no such file" in err


def test_diff_reports_newer_stored_baseline(tmp_path: Path, capsys) -> None:
    path = FileStore(tmp_path).save(five(), suite_dir=None).path
    data = json.loads(path.read_text())
    data["run"]["v"] = 99
    path.write_text(json.dumps(data) + "\n")
    code, _, err = run(capsys, "diff", path, path)
    assert code == 2 and "layout 99 is newer" in err and str(path) in err


# --- merge -----------------------------------------------------------------------------------------


def test_merge_combines_shards_and_keeps_each_shards_reference(tmp_path: Path, capsys) -> None:
    a = write_report(tmp_path / "a.json", [plain(63.0), five()], host="gpu-a")
    b = write_report(tmp_path / "b.json", [plain(62.0), two()], host="gpu-b")
    merged_path = tmp_path / "all.json"
    code, out, _ = run(capsys, "merge", a, b, "-o", merged_path)
    assert code == 0
    document = json.loads(merged_path.read_text())
    assert validate(document) == []
    assert [s["host"] for s in document["sources"]] == ["gpu-a", "gpu-b"]
    labels = [m["label"] for m in document["measurements"]]
    assert labels == ["plain/chat/c1", "plain/chat/c1", "eagle3-2step/chat/c1", "eagle3-5step/chat/c1"]
    # speedups stay against each shard's own reference
    speedups = {m["label"]: m["estimates"]["speedup"]["value"] for m in document["measurements"][2:]}
    assert speedups["eagle3-5step/chat/c1"] == pytest.approx(71.0 / 63.0)
    assert speedups["eagle3-2step/chat/c1"] == pytest.approx(75.9 / 62.0)
    assert any(
        "measured as the reference in 2 shards (a.json: 63.0±0.5 tok/s, b.json: 62.0±0.5" in w
        for w in document["warnings"]
    )
    assert f"merged from: {a} (gpu-a, 2025-01-01T00:00:00+00:00)" in " ".join(out.split())  # may wrap
    assert "eagle3-2step / eagle3-5step" not in out  # measured in different sessions: no verify-cost fit across them
    assert out.rstrip().endswith(f"wrote the merged report (4 measurements from 2 reports) to {merged_path}")
    # a merged report merges again, and keeps naming the original shards
    code, _, _ = run(capsys, "merge", merged_path, "-o", tmp_path / "again.json")
    again = load_report(tmp_path / "again.json")
    assert code == 0 and [s["host"] for s in again.document["sources"]] == ["gpu-a", "gpu-b"]


def test_merge_of_the_same_report_twice_deduplicates(tmp_path: Path, capsys) -> None:
    a = write_report(tmp_path / "a.json", [plain(), five()])
    code, _, _ = run(capsys, "merge", a, a, "-o", tmp_path / "all.json")
    assert code == 0
    assert len(json.loads((tmp_path / "all.json").read_text())["measurements"]) == 2


def test_merge_refuses_conflicting_measurements(tmp_path: Path, capsys) -> None:
    a = write_report(tmp_path / "a.json", [plain(), five(71.0)])
    b = write_report(tmp_path / "b.json", [plain(), five(72.0)])
    code, out, err = run(capsys, "merge", a, b, "-o", tmp_path / "all.json")
    assert code == 2 and out == ""
    assert f"eagle3-5step/chat/c1 is in both {a} and {b} with different measurements" in err
    assert not (tmp_path / "all.json").exists()


def test_merge_names_a_bad_input(tmp_path: Path, capsys) -> None:
    a = write_report(tmp_path / "a.json", [plain(), five()])
    bad = tmp_path / "bad.json"
    bad.write_text(dumps({**json.loads(a.read_text()), "measurements": 3}))
    code, _, err = run(capsys, "merge", a, bad, "-o", tmp_path / "all.json")
    assert code == 2 and str(bad) in err and "$.measurements: expected array, got int" in err


# --- help and usage --------------------------------------------------------------------------------


def test_help_documents_exit_codes(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    out = capsys.readouterr().out
    assert exit_info.value.code == 0
    assert "exit codes:" in out and "1  diff: a measurement credibly regressed" in out
    for command in ("show", "diff", "merge", "schema"):
        assert command in out


def test_version_prints_the_installed_version(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"specperf (pytest-specperf) {cli.__version__}"


def test_help_imports_no_subcommand_module(monkeypatch, capsys) -> None:
    """`specperf --help` lists every subcommand from its declaration alone: no subcommand module (and so no
    SciPy, which the verdict engine pulls in) is imported for it, and only the named one for a subcommand."""
    imported: list[str] = []
    real_import = cli.importlib.import_module
    monkeypatch.setattr(cli.importlib, "import_module", lambda name: imported.append(name) or real_import(name))
    with pytest.raises(SystemExit):
        main(["--help"])
    listed = capsys.readouterr().out
    assert imported == [] and all(f"    {c.name}  " in listed and c.summary[:20] in listed for c in SUBCOMMANDS)
    with pytest.raises(SystemExit):
        main(["schema", "--help"])
    assert imported == ["pytest_specperf.cli.schema"]


def test_the_command_line_module_imports_nothing_heavy() -> None:
    """What `specperf --help` loads is the parser's own module and the modules it imports at the top."""
    import ast

    tree = ast.parse(Path(cli.__file__).read_text())
    imported = {node.module for node in tree.body if isinstance(node, ast.ImportFrom)}
    assert imported == {
        "__future__",
        "collections.abc",
        "dataclasses",
        "pytest_specperf",
        "pytest_specperf.cli.exits",
        "pytest_specperf.errors",
    }


@pytest.mark.parametrize("command", SUBCOMMANDS, ids=lambda command: command.name)
def test_each_subcommand_parser_says_its_declared_summary(command: cli.Subcommand) -> None:
    subparsers = next(a for a in build_parser(only=command.name)._actions if a.dest == "command")
    (summary,) = [action.help for action in subparsers._choices_actions if action.dest == command.name]
    assert summary == command.summary


def test_a_mistyped_subcommand_lists_the_valid_ones(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["shwo"])
    assert exit_info.value.code == 2 and "invalid choice: 'shwo'" in capsys.readouterr().err


def test_usage_errors_exit_2(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["merge", "a.json"])  # -o is required
    assert exit_info.value.code == 2
    assert "-o/--output" in capsys.readouterr().err


def test_schema_command_prints_the_report_schema(capsys) -> None:
    code, out, _ = run(capsys, "schema")
    assert code == 0 and json.loads(out)["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def _on_model(m: Measurement, model: str) -> Measurement:
    identity = {**m.fingerprint.identity, "model": model}
    m.fingerprint = Fingerprint(identity=identity, environment=m.fingerprint.environment)
    return m


def test_merge_warns_about_shards_of_different_models(tmp_path: Path, capsys) -> None:
    a = write_report(tmp_path / "a.json", [plain(), five()], host="gpu-a")
    b = write_report(tmp_path / "b.json", [_on_model(plain(62.0), "org/other"), _on_model(two(), "org/other")])
    code, _, _ = run(capsys, "merge", a, b, "-o", tmp_path / "all.json")
    assert code == 0
    document = json.loads((tmp_path / "all.json").read_text())
    warning = next(w for w in document["warnings"] if "different models" in w)
    assert warning.startswith("the merged reports were measured on 2 different models: moonshotai/Kimi-K2.5 (")
    assert f"org/other ({b})" in warning


def test_merge_keeps_the_errors_of_every_shard(tmp_path: Path, capsys) -> None:
    report = build_report(CONFIG, {m.key: m for m in [plain()]}, {}, {}, {}, updating=False)
    report.errors = {MeasurementKey("eagle3-5step", "chat", 1): "server 'eagle3-5step' exited with code 1"}
    a = tmp_path / "a.json"
    write_json(a, report_document(report, store=".specperf", host="gpu-a", created="2025-01-01T00:00:00+00:00"))
    b = write_report(tmp_path / "b.json", [plain(62.0), two()], host="gpu-b")
    code, out, _ = run(capsys, "merge", a, b, "-o", tmp_path / "all.json")
    assert code == 0
    document = json.loads((tmp_path / "all.json").read_text())
    assert validate(document) == []
    assert document["errors"] == [
        {
            "label": "eagle3-5step/chat/c1",
            "server": "eagle3-5step",
            "workload": "chat",
            "concurrency": 1,
            "verdict": "ERROR",
            "reason": "server 'eagle3-5step' exited with code 1",
        }
    ]
    assert "eagle3-5step  chat" in out and "ERROR" in out
