"""One set of value checks for config keys, workload keys and marker arguments."""

from __future__ import annotations

import math

import pytest

from pytest_specperf.config import values as check
from pytest_specperf.errors import ConfigError


def message(call, *args, **kwargs) -> str:
    with pytest.raises(ConfigError) as info:
        call(*args, **kwargs)
    return str(info.value)


@pytest.mark.parametrize(
    ("call", "value", "kwargs", "expected"),
    [
        (check.integer, True, {}, "where: must be an integer, got boolean True"),
        (check.integer, "8", {"minimum": 1}, "where: must be an integer, got string '8'"),
        (check.integer, 0, {"minimum": 1}, "where: must be >= 1, got 0"),
        (check.number, math.nan, {}, "where: must be a finite number, got nan"),
        (check.number, 1, {"minimum": 0, "maximum": 1, "exclusive_max": True}, "where: must be >= 0 and < 1, got 1"),
        (check.number, 0, {"minimum": 0, "exclusive_min": True, "hint": "1.1"}, "where: must be > 0 (e.g. 1.1), got 0"),
        (check.boolean, 1, {}, "where: must be true or false, got integer 1"),
        (check.string, "  ", {}, "where: must be a non-empty string, got string '  '"),
        (check.string_map, {"A": 1}, {}, 'where.A: must be a string (quote numbers: "1")'),
        (check.table, [1], {}, "where: must be a table, got array [1]"),
    ],
)
def test_refusals_name_the_place_what_is_allowed_and_what_was_given(call, value, kwargs, expected) -> None:
    assert expected in message(call, value, "where", **kwargs)


def test_accepted_values_come_back_typed() -> None:
    assert check.number(2, "w", minimum=0) == 2.0 and isinstance(check.number(2, "w"), float)
    assert check.integer(3, "w", minimum=1) == 3
    assert check.string("  m  ", "w") == "m"
    assert check.choice("sim", "w", ("sglang", "sim")) == "sim"


def test_the_same_mistake_reads_the_same_in_config_workload_and_marker(tmp_path) -> None:
    from pytest_specperf.config.loading import Problems, _Getter
    from pytest_specperf.config.workloads import parse_workload

    problems = Problems()
    assert _Getter({"rounds": True}, "[specperf]", problems).integer("rounds", 5, minimum=2) == 5  # read on
    in_config = message(problems.raise_any)
    in_workload = message(parse_workload, "w", {"warmup": True}, "f.toml", tmp_path)
    assert in_config.endswith("rounds: must be an integer, got boolean True")
    assert in_workload.endswith("warmup: must be an integer, got boolean True")


# --- one front end: the same mistake, the same sentence, wherever it is made ------------------------------

SUITE = """
[{table}]
launcher = "sim"
model = "m"
{extra}
[{table}.servers.plain]

[{table}.servers.eagle]
algorithm = "EAGLE3"
draft_model = "d"
num_steps = 2
eagle_topk = 1
num_draft_tokens = 3
{server}
[{table}.workloads.chat]
prompts = "builtin:chat"
{workload}
"""


def suite_error(
    tmp_path, *, extra: str = "", workload: str = "", server: str = "", pyproject: bool = False
) -> ConfigError:
    from pytest_specperf.engines.suite import load_suite

    table = "tool.specperf" if pyproject else "specperf"
    path = tmp_path / ("pyproject.toml" if pyproject else "specperf.toml")
    path.write_text(SUITE.format(table=table, extra=extra, workload=workload, server=server))
    with pytest.raises(ConfigError) as info:
        load_suite(path, table)
    return info.value


def marker_error(tmp_path, **kwargs: object) -> ConfigError:
    from pytest_specperf.engines.suite import load_suite
    from pytest_specperf.verdict.markers import parse_marker

    path = tmp_path / "ok.toml"
    path.write_text(SUITE.format(table="specperf", extra="", workload="", server=""))
    with pytest.raises(ConfigError) as info:
        parse_marker((), {"workload": "chat", **kwargs}, "test_x.py::test_x", load_suite(path, "specperf"))
    return info.value


def cli_error(capsys, *argv: str) -> str:
    from pytest_specperf.cli import main

    assert main(list(argv)) == 2
    return capsys.readouterr().err.strip().removeprefix("specperf: error: ")


def option_error(tmp_path, **options: str) -> ConfigError:
    """A `--specperf-*` value as the plugin reads it: a command-line word, then the config's rule."""
    from pytest_specperf.config.loading import apply_overrides
    from pytest_specperf.engines.suite import load_suite

    path = tmp_path / "ok.toml"
    path.write_text(SUITE.format(table="specperf", extra="", workload="", server=""))
    words = {name: check.from_command_line(word) for name, word in options.items()}
    with pytest.raises(ConfigError) as info:
        apply_overrides(load_suite(path, "specperf"), **words)  # type: ignore[arg-type]
    return info.value


def test_max_regression_of_1_reads_the_same_in_config_marker_diff_and_backtest(tmp_path, capsys, monkeypatch) -> None:
    """1 would tolerate losing everything: refused with one sentence, wherever it is given."""
    monkeypatch.chdir(tmp_path)
    sentence = "must be a fraction in [0, 1) (0.05 = 5%), got 1"
    in_config = suite_error(tmp_path, extra="max_regression = 1")
    assert (in_config.where, in_config.message) == ("specperf.toml [specperf] max_regression", sentence)
    in_marker = marker_error(tmp_path, max_regression=1)
    assert (in_marker.where, in_marker.message) == ("test_x.py::test_x @specperf max_regression", sentence)
    series = tmp_path / "series.csv"
    series.write_text("value\n1\n2\n")
    assert (
        cli_error(capsys, "diff", str(series), str(series), "--max-regression", "1") == f"--max-regression: {sentence}"
    )
    assert cli_error(capsys, "backtest", str(series), "--tolerance", "1") == f"--tolerance: {sentence}"
    tau = suite_error(tmp_path, extra="max_regression_accept_length = 1.0")
    assert tau.message == "must be a fraction in [0, 1) (0.05 = 5%), got 1.0"


def test_rounds_read_the_same_in_the_config_and_on_the_command_line(tmp_path) -> None:
    for value, word, sentence in ((1, "1", "must be >= 2, got 1"), ('"x"', "x", "must be an integer, got string 'x'")):
        in_config = suite_error(tmp_path, extra=f"rounds = {value}")
        on_command_line = option_error(tmp_path, rounds=word)
        assert in_config.message == on_command_line.message == sentence
        assert on_command_line.where == "--specperf-rounds"
    scale = option_error(tmp_path, sim_time_scale="-1")
    assert (scale.where, scale.message) == ("--specperf-sim-time-scale", "must be >= 0, got -1")
    assert suite_error(tmp_path, extra="sim_time_scale = -1").message == scale.message


def test_max_error_rate_reads_the_same_in_a_workload_and_a_marker(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    in_workload = suite_error(tmp_path, workload="max_error_rate = 1.5")
    in_marker = marker_error(tmp_path, max_error_rate=1.5)
    assert in_workload.message == in_marker.message == "must be >= 0 and <= 1, got 1.5"
    assert in_workload.where == "specperf.toml [specperf.workloads.chat] max_error_rate"


def test_a_pyproject_error_names_the_table_as_the_file_spells_it(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    workload = suite_error(tmp_path, workload="num_requests = 0", pyproject=True)
    assert workload.where == "pyproject.toml [tool.specperf.workloads.chat] num_requests"
    server = suite_error(tmp_path, pyproject=True, server='args = ["--port", "1"]')  # the engine's own rule
    assert server.where == "pyproject.toml [tool.specperf.servers.eagle] args"
    engine_rule = suite_error(tmp_path, pyproject=True, extra='engine = "tgi"')
    assert engine_rule.where == "pyproject.toml [tool.specperf] engine"
    assert suite_error(tmp_path, pyproject=True, extra="rounds = 1").where == "pyproject.toml [tool.specperf] rounds"
