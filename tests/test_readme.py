"""The manual is the reference: every option, key, marker argument, verdict and hook the code has is on
its reference page (docs/reference.md), the benchmark figures on its benchmarks page are what the
benchmark prints, and the README's two set-up commands are the ones CI runs."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import pytest

from pytest_specperf.config.loading import GLOBAL_KEYS, SERVER_KEYS
from pytest_specperf.config.workloads import WorkloadConfig
from pytest_specperf.tune.space import tune_keys
from pytest_specperf.verdict.checks import Verdict
from pytest_specperf.verdict.markers import MARKER_KEYS

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"


def reference_section() -> str:
    return (DOCS / "reference.md").read_text()


def test_readme_opens_with_the_two_commands_ci_runs() -> None:
    commands = re.search(r"```bash\n(.*?)\n```", README, re.S)
    assert commands is not None and README.index("```bash") < README.index("\n## ")
    lines = commands.group(1).splitlines()
    assert len(lines) == 2
    ci = (ROOT / ".ci" / "run").read_text()
    for line in lines:
        assert line in ci
    assert "example_suite" in lines[0] and "pytest tests" in lines[1]


def test_every_command_line_option_is_documented(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    options = set(re.findall(r"(--specperf-[a-z-]+)", result.stdout.str()))
    assert len(options) > 10
    missing = sorted(o for o in options if f"`{o}" not in reference_section())
    assert not missing, missing


@pytest.mark.parametrize(
    "keys",
    [
        pytest.param(sorted(GLOBAL_KEYS - {"servers", "workloads"}), id="global"),
        pytest.param(sorted(SERVER_KEYS), id="server"),
        pytest.param(sorted(f.name for f in fields(WorkloadConfig) if f.name != "name"), id="workload"),
        pytest.param(sorted(MARKER_KEYS), id="marker"),
        pytest.param(sorted({k for keys in tune_keys().values() for k in keys}), id="tune"),
    ],
)
def test_every_key_is_documented(keys: list[str]) -> None:
    missing = [key for key in keys if f"`{key}`" not in reference_section()]
    assert not missing, missing


def test_every_verdict_is_documented() -> None:
    section = reference_section()
    assert all(f"| {v.value} |" in section for v in Verdict)


def test_every_hook_is_documented() -> None:
    from pytest_specperf import hookspec

    hooks = [name for name in vars(hookspec) if name.startswith("pytest_specperf_")]
    assert len(hooks) == 3
    guide = (DOCS / "hooks.md").read_text()
    missing = [name for name in hooks if f"`{name}(" not in reference_section() or f"`{name}(" not in guide]
    assert not missing, missing


def test_the_real_series_table_is_what_the_benchmark_prints() -> None:
    """The manual's verdict figures on public series (docs/benchmarks.md) are not typed by hand: the
    benchmark prints them, and a change to the verdict engine that moves one fails here until the page
    says so."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("backtest_public", ROOT / "benchmarks" / "backtest_public.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    page = (DOCS / "benchmarks.md").read_text()
    shown = page[page.index("<!-- backtest_public -->\n") : page.index("<!-- /backtest_public -->")]
    assert shown.splitlines()[1:] == module.table()
