"""`specperf backtest`: public series replayed through the verdict engine, and bad input named exactly."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from pytest_specperf.cli import main
from pytest_specperf.verdict.backtest import read_series, replay, summary
from pytest_specperf.verdict.stats import Tolerance
from pytest_specperf.verdict.verdicts import Verdict

DATA = Path(__file__).resolve().parent.parent / "data" / "real-series"
TIGERBEETLE = DATA / "tigerbeetle_load_accepted.csv"


@pytest.mark.slow
def test_tigerbeetles_step_is_flagged_on_its_first_night_and_named_since_it_by_the_second(tmp_path: Path) -> None:
    """Run 15 is a -11.8% step (TigerBeetle's benchmark changed its workload): REGRESSION at once, and
    the night after it says the change began at run 15, not "since tonight"."""
    out = tmp_path / "tb.json"
    assert (
        main(["backtest", str(TIGERBEETLE), "--commit", "tigerbeetle_commit", "--time", "utc_time", "--json", str(out)])
        == 0
    )
    nights = {n["run"]: n for n in json.loads(out.read_text())["nights"]}
    assert nights[15]["outcome"] == "REGRESSION" and nights[15]["change_point"] == 15
    assert nights[16]["outcome"] == "REGRESSION" and nights[16]["change_point"] == 15
    assert nights[10]["outcome"] == "REGRESSION" and nights[11]["outcome"] == "PASS"  # one bad run, then back
    assert all(nights[i]["outcome"] == "PASS" for i in range(1, 10))
    assert nights[16]["commit"].startswith("c6f40a1")


def test_a_stable_series_raises_no_false_regression() -> None:
    """MongoDB's series: two known outliers (runs 4 and 90) and nothing else; TigerBeetle between its
    changes, acknowledged with an update the night after each."""
    _, rows, _ = read_series(DATA / "mongodb_real_series.csv")
    result = replay(rows, Tolerance(0.05))
    flagged = [n.row.index for n in result.nights if n.outcome in (Verdict.REGRESSION, Verdict.SUSPECT)]
    assert flagged == [90]
    assert summary(result, Tolerance(0.05))["cannot_see_tolerance"] is False


def test_a_bimodal_series_is_reported_as_unable_to_see_the_tolerance() -> None:
    _, rows, _ = read_series(DATA / "rocksdb_2023-09_ops_per_s.csv", value="revrange.t1")
    facts = summary(replay(rows, Tolerance(0.05)), Tolerance(0.05))
    assert facts["cannot_see_tolerance"] is True


def test_per_round_values_and_updates_are_read(tmp_path: Path) -> None:
    path = tmp_path / "series.csv"
    rows = [["night", "rounds", "update"]] + [[str(i), "100;101;99", "0"] for i in range(6)]
    rows += [["6", "90;91;89", "0"], ["7", "90;90.5;89.5", "1"], ["8", "90;91;89", "0"]]
    with path.open("w", newline="") as handle:
        csv.writer(handle).writerows(rows)
    column, series, _ = read_series(path, value="night", rounds="rounds", update="update")
    assert column == "night" and series[0].samples == (100.0, 101.0, 99.0) and series[7].update
    outcomes = [n.outcome for n in replay(series, Tolerance(0.05)).nights]
    assert outcomes[6] is Verdict.REGRESSION and outcomes[7] is Verdict.NEW and outcomes[8] is Verdict.PASS


@pytest.mark.parametrize(
    ("rows", "args", "message"),
    [
        ([["a"], ["1"]], [], "1 row(s); a backtest needs at least 2"),
        ([["name", "tok_s"], ["x", "1"], ["y", "fast"]], [], "no numeric column to replay"),
        (
            [["tok_s", "ttft"], ["10", "20"], ["12", "23"]],
            [],
            "several numeric columns (tok_s, ttft); choose one with --value",
        ),
        ([["tok_s"], ["10"], ["fast"]], ["--value", "tok_s"], "row 3, column 'tok_s': 'fast' is not a positive number"),
        ([["tok_s"], ["10"], ["-2"]], ["--value", "tok_s"], "row 3, column 'tok_s': '-2' is not a positive number"),
        ([["tok_s"], ["10"], ["12"]], ["--value", "ttft"], "no column 'ttft' (--value); the columns are tok_s"),
        ([["tok_s", "u"], ["10", "0"], ["12", "maybe"]], ["--update", "u"], "row 3, column 'u': 'maybe' is not 1 or 0"),
    ],
)
def test_bad_input_is_one_line_naming_the_file_row_and_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rows: list[list[str]], args: list[str], message: str
) -> None:
    path = tmp_path / "bad.csv"
    with path.open("w", newline="") as handle:
        csv.writer(handle).writerows(rows)
    assert main(["backtest", str(path), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"specperf: error: {path}: ") and message in err and "\n" not in err


def write(path: Path, rows: list[list[str]]) -> Path:
    with path.open("w", newline="") as handle:
        csv.writer(handle).writerows(rows)
    return path


@pytest.mark.parametrize(
    ("runs", "message"),
    [
        (["0", "1", "1", "2"], "rows 3 and 4 are both run 1"),
        (["0", "2", "1", "3"], "rows 3 and 4 go back from run 2 to 1"),
        (["0", "1", "3", "4"], "rows 3 and 4 skip from run 1 to 3"),
    ],
)
def test_the_run_column_must_count_up_one_by_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], runs: list[str], message: str
) -> None:
    """Rows out of order judge each night against the wrong past: duplicates, steps back and gaps are
    named by their rows (row 1 is the header), before anything is replayed."""
    path = write(tmp_path / "s.csv", [["run", "tok_s"], *([r, "100"] for r in runs)])
    assert main(["backtest", str(path)]) == 2
    assert message in capsys.readouterr().err


def test_gaps_are_accepted_when_asked_for_and_named_by_their_run_numbers(tmp_path: Path) -> None:
    path = write(tmp_path / "s.csv", [["run", "tok_s"], ["0", "100"], ["1", "101"], ["5", "99"], ["6", "100"]])
    out = tmp_path / "s.json"
    assert main(["backtest", str(path), "--allow-gaps", "--json", str(out)]) == 0
    assert [n["run"] for n in json.loads(out.read_text())["nights"]] == [0, 1, 5, 6]


def test_a_bad_cell_is_named_by_its_row_without_value_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One typo among many numbers: the row is named, not "no numeric column"."""
    rows = [["tok_s"], *([str(100 + i % 3)] for i in range(20)), ["10O"]]
    assert main(["backtest", str(write(tmp_path / "s.csv", rows))]) == 2
    assert "row 22, column 'tok_s': '10O' is not a positive number" in capsys.readouterr().err


@pytest.mark.parametrize("value", [[], ["--value", "tok_s"]], ids=["found", "named"])
def test_an_empty_cell_is_a_night_without_a_value_reported_and_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: list[str]
) -> None:
    """A nightly job that failed leaves an empty cell: the night is skipped and named (in the summary and
    the JSON), the nights after it are judged as usual, and the column is still found as the numeric one."""
    rows = [["run", "commit", "tok_s"], ["0", "a", "100"], ["1", "b", "101"], ["2", "c", ""], ["3", "d", "99"]]
    rows += [["4", "e", "100"]]
    out = tmp_path / "s.json"
    assert main(["backtest", str(write(tmp_path / "s.csv", rows)), *value, "--json", str(out)]) == 0
    assert "1 night(s) without a value (an empty cell), skipped: run(s) 2" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["missing"] == [2] and [n["run"] for n in data["nights"]] == [0, 1, 3, 4]


def test_a_series_of_empty_cells_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [["tok_s"], ["100"], [""], [""]]
    assert main(["backtest", str(write(tmp_path / "s.csv", rows)), "--value", "tok_s"]) == 2
    assert "1 row(s) with a value in 'tok_s'; a backtest needs at least 2" in capsys.readouterr().err


def test_exit_status_says_whether_the_last_night_is_a_regression(tmp_path: Path) -> None:
    quiet = [["tok_s"], *([f"{100 + (i % 3) * 0.5}"] for i in range(12))]
    assert main(["backtest", str(write(tmp_path / "ok.csv", quiet))]) == 0
    assert main(["backtest", str(write(tmp_path / "bad.csv", [*quiet, ["80"]]))]) == 1


@pytest.mark.slow
def test_compare_puts_a_t_test_and_a_band_beside_the_plugin(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """TigerBeetle's run 15 (-11.8%) right after a -41% run: the plain t-test, whose spread that one run
    inflated, misses it; the plugin (which rejects the lone run) flags it, and says what it compared with."""
    out = tmp_path / "tb.json"
    assert (
        main(["backtest", str(TIGERBEETLE), "--value", "load_accepted_tx_per_s", "--compare", "--json", str(out)]) == 0
    )
    nights = {n["run"]: n for n in json.loads(out.read_text())["nights"]}
    assert nights[15]["outcome"] == "REGRESSION" and nights[15]["plain"] == {"t-test": False, "band": True}
    text = capsys.readouterr().out
    line = next(line for line in text.splitlines() if line.lstrip().startswith("15 "))
    assert "t-test -  band red" in line and "against level 26738 of runs 0-14 (14 runs)" in line
    assert "the plain gates on the same nights: a t-test (99%, newest 30 runs) red on 3" in text


@pytest.mark.slow
def test_plot_draws_the_replay(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "tb.png"
    assert main(["backtest", str(TIGERBEETLE), "--value", "load_accepted_tx_per_s", "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
