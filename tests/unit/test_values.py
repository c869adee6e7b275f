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
    from pytest_specperf.config.loading import _Getter
    from pytest_specperf.config.workloads import parse_workload

    in_config = message(_Getter({"rounds": True}, "[specperf]").integer, "rounds", 5, minimum=2)
    in_workload = message(parse_workload, "w", {"warmup": True}, "f.toml", tmp_path)
    assert in_config.endswith("rounds: must be an integer, got boolean True")
    assert in_workload.endswith("warmup: must be an integer, got boolean True")
