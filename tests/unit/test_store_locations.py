"""The `store` setting's forms and the backends that open them: one table each, kept in step, and every
command that names a setting asks the table instead of knowing `git:` and paths by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_specperf.cli.common import shown
from pytest_specperf.config.location import LOCATIONS, StoreLocation, form_of
from pytest_specperf.store import BACKENDS

SETTINGS = {
    ".specperf": "file",
    "/srv/perf/history": "file",
    "git:specperf-history": "git",
    "git:https://github.com/org/perf-history.git#nightly": "git",
    "postgresql://db.example.com/perf": "postgresql",
    "postgres:///perf?service=perf": "postgres",
}


def test_every_form_of_the_setting_has_a_backend_and_every_backend_a_form() -> None:
    assert {form.scheme for form in LOCATIONS} == set(BACKENDS)


@pytest.mark.parametrize(("setting", "scheme"), SETTINGS.items())
def test_a_setting_parses_into_the_scheme_its_backend_is_found_by(setting: str, scheme: str) -> None:
    assert form_of(setting).scheme == scheme
    assert StoreLocation.parse(setting, base=Path("/suite"), where="store").scheme == scheme


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ("postgresql://db.example.com/perf", "postgresql://db.example.com/perf"),
        ("postgres:///perf?service=perf", "postgres:///perf?service=perf"),
        ("git:https://github.com/org/perf-history.git#nightly", "git:https://github.com/org/perf-history.git#nightly"),
        ("results//nightly/", "results/nightly"),
    ],
)
def test_a_command_names_a_database_store_as_written_not_as_a_folded_path(setting: str, expected: str) -> None:
    """`specperf show postgresql://db.example.com/perf` once headed its table "postgresql:/db.example.com/perf"."""
    assert shown(setting) == expected
