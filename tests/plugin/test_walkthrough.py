"""The example suite's walk-through, steps 2 and 3, replayed on a copy of example_suite/.

Both steps compare against the committed baselines, so they also prove those baselines still load
and are comparable with what this checkout measures.
"""

from __future__ import annotations

import importlib.util
import shutil
import tomllib
from pathlib import Path

import pytest

from pytest_specperf.sim.profile_files import load_profile

EXAMPLE = Path(__file__).resolve().parents[2] / "example_suite"


@pytest.fixture
def example(pytester: pytest.Pytester) -> pytest.Pytester:
    for item in EXAMPLE.iterdir():
        if item.name in ("README.md", "__pycache__"):
            continue
        target = pytester.path / item.name
        if item.is_dir():
            shutil.copytree(item, target)
        else:
            shutil.copy(item, target)
    return pytester


def test_step2_tuning_variables_are_reported_as_environment_drift(
    example: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL128", "NCCL_MIN_NCHANNELS": "16"}.items():
        monkeypatch.setenv(name, value)
    # The step is about the drift report. The committed history was recorded on an idle machine, and at
    # time scale 0.1 a starved CPU's overhead per request compresses the speedup toward 1x (1.195x ->
    # 1.092x at a load of 10 on 2 cores: a REGRESSION of the speedup at 5%); 15% leaves that to the node.
    tests = example.path / "test_speculation.py"
    marked = 'workload="code", throughput=(65, None), max_regression=0.05)'
    assert marked in tests.read_text()
    tests.write_text(tests.read_text().replace(marked, marked.replace("0.05", "0.15")))
    result = example.runpytest("-p", "no:randomly", "-k", "code")
    result.assert_outcomes(passed=1)
    # the modelled +43% is credibly more than the tolerance (how closely the simulator's clock follows
    # the profile is a benchmark: benchmarks/sim_step_effects.py)
    result.stdout.re_match_lines([r"plain \(ref\) +code +1 .* \+\d+\.\d% .* IMPROVED"])
    result.stdout.fnmatch_lines(
        ["environment drift since the stored baseline:", "*plain/code/c1: NCCL_ALGO: unset → Ring*"]
    )


def test_step3_a_slower_draft_is_a_regression_with_its_interval(example: pytest.Pytester) -> None:
    toml = example.path / "specperf.toml"
    text = toml.read_text()
    marker = 'num_draft_tokens = 6\nargs = ["--tp-size", "8", "--trust-remote-code"]\n'
    assert marker in text
    toml.write_text(text.replace(marker, marker + 'sim_args = ["--sim-draft-slowdown", "8"]\n'))
    result = example.runpytest("-p", "no:randomly", "-k", "eagle3-5step and chat")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*REGRESSION eagle3-5step/chat/c1:*",
            "*output_throughput: * [[]*] tok/s (15 rounds on 2 server starts) vs baseline * ("
            "11 recorded runs, run-to-run CV *): ratio 0.* [[]*], allowed -5%: REGRESSION*",
            "*confirmed on a second server start (the first start alone: -*",
        ]
    )
    result.stdout.fnmatch_lines(["*server.flag --sim-draft-slowdown: unset → 8*"])


def test_the_examples_absolute_thresholds_hold_on_the_modelled_gpu_node() -> None:
    """On the GPU node the tests stay as they are: their tok/s and ms bounds are the node's (the profile
    at time scale 1, with 10% to spare for prefill and night-to-night spread), so the 10x-fast
    simulator clears them too; simulated units (600 tok/s, 2 ms) would fail every real night."""
    spec = importlib.util.spec_from_file_location("example_tests", EXAMPLE / "test_speculation.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = tomllib.loads((EXAMPLE / "specperf.toml").read_text())["specperf"]
    profile = load_profile(config["sim_profile"])
    checked = []
    for name, test in vars(module).items():
        for mark in getattr(test, "pytestmark", []):
            bounds = {k: mark.kwargs[k] for k in ("throughput", "tpot_ms") if k in mark.kwargs}
            if not bounds:
                continue
            server = config["servers"][mark.kwargs["server"]]
            steps, topk, tokens = server["num_steps"], server["eagle_topk"], server["num_draft_tokens"]
            tpot = profile.cycle_ms(steps, topk, tokens, 1) / profile.expected_accept_length(steps, topk, tokens)
            low, high = bounds.get("throughput", (None, None))
            if low is not None:
                assert low <= 0.9 * 1000 / tpot, (name, low, 1000 / tpot)
            low, high = bounds.get("tpot_ms", (None, None))
            if high is not None:
                assert high >= 1.1 * tpot, (name, high, tpot)
            checked.append(name)
    assert sorted(checked) == ["test_code_throughput", "test_speculation_is_lossless"]


def test_step5_the_dry_run_of_the_gpu_node_edit_compares_with_the_committed_baselines(example: pytest.Pytester) -> None:
    """The edits specperf.toml's comments ask for on a GPU node (launcher, python, startup_timeout) leave
    every fingerprint as it was, so `--specperf-launcher sim` compares with .specperf/sim/ instead of
    failing as INCOMPARABLE."""
    toml = example.path / "specperf.toml"
    text = toml.read_text()
    assert 'launcher = "sim"\n' in text and "startup_timeout = 120\n" in text
    text = text.replace('launcher = "sim"\n', 'launcher = "sglang"\npython = "/opt/sglang/.venv/bin/python"\n')
    # the comparison is what is tested, not tonight's speed against the committed baselines' (measured on
    # an idle machine): a tolerance of 90% keeps a busy machine's slower rounds from deciding the verdict
    text = text.replace("startup_timeout = 120\n", "startup_timeout = 3600\nmax_regression = 0.9\n")
    toml.write_text(text)
    result = example.runpytest("-p", "no:randomly", "--specperf-launcher", "sim", "-k", "code_throughput")
    result.assert_outcomes(passed=1)
    result.stdout.re_match_lines([r"eagle3-2step +code +1 .*%.* (PASS|IMPROVED|INCONCLUSIVE)$"])
    assert "INCOMPARABLE" not in result.stdout.str()
