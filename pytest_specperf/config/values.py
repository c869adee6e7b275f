"""Checked values: the one way config keys, workload keys, marker arguments and command-line
options are validated.

Why one module: a user meets the same kind of mistake (a string where a number belongs, a rate of
1.5, `true` as a count, a tolerance of 1) in `specperf.toml`, in a workload table, in a marker and
on the command line, and should get the same sentence for it. Every check raises
`ConfigError(where, message)`, where `where` names the file and key (`specperf.toml [specperf]
rounds`), the test and marker argument, or the option (`--specperf-rounds`), and the message says
what is allowed and what was given ("must be an integer, got string '8'").

A setting that more than one front end accepts is checked by its name (`setting`), so its rule and
its sentence live in one place (`SETTINGS`); a command-line word is first read as the value it
spells (`from_command_line`), so `--specperf-rounds=x` reads like `rounds = "x"` in a file.

TOML and Python both have booleans that are integers underneath; `true` is never accepted as a
count, a rate or a size.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from typing import Any

from pytest_specperf.errors import ConfigError, ConfigErrors, did_you_mean


def known_keys(table: Mapping[str, Any], allowed: Collection[str], where: str) -> None:
    """Refuse a key not in `allowed`, in one sentence for config tables, markers and tune tables alike:
    `<where> <key>: unknown key (did you mean 'rounds'?); allowed: ...`."""
    unknown = [
        ConfigError(f"{where} {key}", f"unknown key{did_you_mean(key, allowed)}; allowed: {', '.join(sorted(allowed))}")
        for key in table
        if key not in allowed
    ]
    if unknown:
        raise ConfigErrors.of(unknown)  # every unknown key of the table at once


def type_name(value: Any) -> str:
    """The TOML word for a Python value's type, as users wrote it."""
    names = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "table"}
    return names.get(type(value), type(value).__name__)


def given(value: Any) -> str:
    """'integer 3', 'string "x"': what was given, with its type (a quoted "8" is not the number 8)."""
    return f"{type_name(value)} {value!r}"


def boolean(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(where, f"must be true or false, got {given(value)}")
    return value


def string(value: Any, where: str) -> str:
    """A non-empty string, stripped of surrounding blanks."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(where, f"must be a non-empty string, got {given(value)}")
    return value.strip()


def choice(value: Any, where: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ConfigError(where, f"must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return str(value)


def integer(value: Any, where: str, *, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(where, f"must be an integer, got {given(value)}")
    if minimum is not None and value < minimum:
        raise ConfigError(where, f"must be >= {minimum}, got {value}")
    return value


def number(
    value: Any,
    where: str,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    exclusive_min: bool = False,
    exclusive_max: bool = False,
    hint: str = "",
) -> float:
    """A finite number within bounds; `hint` (e.g. "1.1 for +10%") is added to every refusal."""
    allowed = _bounds(minimum, maximum, exclusive_min, exclusive_max)
    example = f" (e.g. {hint})" if hint else ""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(where, f"must be a number{example}, got {given(value)}")
    if not math.isfinite(value):
        raise ConfigError(where, f"must be a finite number{example}, got {value!r}")
    too_low = minimum is not None and (value <= minimum if exclusive_min else value < minimum)
    too_high = maximum is not None and (value >= maximum if exclusive_max else value > maximum)
    if too_low or too_high:
        raise ConfigError(where, f"must be{allowed}{example}, got {value!r}")
    return float(value)


def fraction(value: Any, where: str) -> float:
    """A tolerated loss (`max_regression`): a fraction in [0, 1), 0.05 meaning 5%. 1 is refused: it
    would tolerate losing everything, which is no check at all."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1:
        shown = given(value) if isinstance(value, bool) or not isinstance(value, int | float) else f"{value!r}"
        raise ConfigError(where, f"must be a fraction in [0, 1) (0.05 = 5%), got {shown}")
    return float(value)


def share(value: Any, where: str) -> float:
    """A share of something (`max_error_rate`, a run-to-run CV): a number in [0, 1]."""
    return number(value, where, minimum=0, maximum=1)


def string_list(value: Any, where: str) -> list[str]:
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ConfigError(where, f"must be a list of strings, got {value!r}")
    return list(value)


def string_map(value: Any, where: str) -> dict[str, str]:
    """A table of NAME = "value"; numbers must be quoted, as environment values are strings."""
    if not isinstance(value, Mapping):
        raise ConfigError(where, f'must be a table of NAME = "value" strings, got {value!r}')
    for name, item in value.items():
        if not isinstance(item, str):
            raise ConfigError(f"{where}.{name}", f'must be a string (quote numbers: "{item}"), got {item!r}')
    return dict(value)


def table(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(where, f"must be a table, got {given(value)}")
    return dict(value)


def _bounds(minimum: float | None, maximum: float | None, exclusive_min: bool, exclusive_max: bool) -> str:
    """' >= 0 and < 1': the allowed range in words, empty when unbounded."""
    parts = []
    if minimum is not None:
        parts.append(f"{'>' if exclusive_min else '>='} {minimum:g}")
    if maximum is not None:
        parts.append(f"{'<' if exclusive_max else '<='} {maximum:g}")
    return " " + " and ".join(parts) if parts else ""


def from_command_line(text: str) -> Any:
    """A command-line word as the value it spells: an integer, a number, or the word itself (which
    the check then refuses in the words a config file's string would get)."""
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return text


#: Settings more than one front end accepts (config file, marker, command line), by name: each is
#: checked here, so the same mistake reads the same wherever it was made.
SETTINGS: dict[str, Callable[[Any, str], Any]] = {
    "rounds": lambda value, where: integer(value, where, minimum=2),
    "max_rounds": lambda value, where: integer(value, where, minimum=2),
    "history": lambda value, where: integer(value, where, minimum=0),  # 0: every night
    "max_regression": fraction,
    "max_regression_accept_length": fraction,
    "max_error_rate": share,
    "run_to_run_cv": share,
    "run_to_run_cv_accept_length": share,
    "sim_time_scale": lambda value, where: number(value, where, minimum=0),
}


def setting(name: str, value: Any, where: str) -> Any:
    """`value` of the setting `name`, checked by its one rule (`SETTINGS`); `where` names the place."""
    return SETTINGS[name](value, where)
