"""`[specperf.tune]`: the space it spans, and one-line errors naming the key, before any server starts."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from suite_tables import tune_config

from pytest_specperf.cli import main
from pytest_specperf.engines.sglang.tuning import valid_draft_tokens
from pytest_specperf.engines.suite import load_suite
from pytest_specperf.errors import ConfigError
from pytest_specperf.tune.space import load_space

SGLANG = tune_config()

VLLM = """
[specperf]
engine = "vllm"
model = "/models/target"

[specperf.servers.plain]

[specperf.servers.ngram]
speculative_config = { method = "ngram", num_speculative_tokens = 3, prompt_lookup_max = 4, prompt_lookup_min = 2 }

[specperf.tune]
base = "ngram"
"""


def space_of(tmp_path: Path, text: str, **kwargs):
    path = tmp_path / "specperf.toml"
    path.write_text(text)
    return load_space(load_suite(path, "specperf"), **kwargs)


def error_of(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as info:
        space_of(tmp_path, text)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_valid_draft_tokens_are_what_sglang_runs() -> None:
    assert list(valid_draft_tokens(3, 1)) == [4]  # a chain: steps + 1
    assert list(valid_draft_tokens(2, 4)) == list(range(2, 10))  # a tree: up to steps x topk + 1


def test_every_valid_combination_is_a_candidate(tmp_path: Path) -> None:
    space = space_of(
        tmp_path, SGLANG + 'num_steps = [1, 2, 3, 4, 5, 6]\neagle_topk = [1, 2, 4]\nnum_draft_tokens = "valid"\n'
    )
    assert len(space.candidates) == 132
    assert [o.label for o in space.objectives] == ["chat c1", "chat c8"]
    chain = space.candidate("s2-k1-n3")
    assert (chain.server.num_steps, chain.server.eagle_topk, chain.server.num_draft_tokens) == (2, 1, 3)
    assert chain.server.draft_model == "org/kimi-k2.5-eagle3" and chain.server.name == "tune-s2-k1-n3"
    assert chain.draft.depth == 2 and chain.draft.width == 1.0
    tree = space.candidate("s3-k4-n10")
    assert tree.draft.depth == 3 and tree.draft.width == 3.0  # 9 tree nodes over 3 depths
    assert space.budget == 6 and space.rounds == 2 and space.confidence == 0.9


def test_a_list_keeps_the_combinations_sglang_runs(tmp_path: Path) -> None:
    space = space_of(tmp_path, SGLANG + "num_steps = [2, 3]\neagle_topk = [1, 2]\nnum_draft_tokens = [3, 4, 6]\n")
    labels = sorted(c.label for c in space.candidates)
    assert labels == ["s2-k1-n3", "s2-k2-n3", "s2-k2-n4", "s3-k1-n4", "s3-k2-n3", "s3-k2-n4", "s3-k2-n6"]


@pytest.mark.parametrize(
    ("extra", "key", "says"),
    [
        ("num_steps = []", "num_steps", "empty list"),
        ("eagle_topk = [0]", "eagle_topk", "must be >= 1"),
        ("num_steps = [2]\neagle_topk = [1]\nnum_draft_tokens = [3, 9]", "num_draft_tokens", "9 is valid for no"),
        ("num_draft_tokens = 4", "num_draft_tokens", 'or "valid"'),
        ("budget = 2", "budget", "must be >= 3 server starts"),
        ("num_speculative_tokens = [1, 2]", "num_speculative_tokens", "is a vllm key"),
        ("num_step = [1, 2]", "num_step", "did you mean 'num_steps'"),
        ("confidence = 1.5", "confidence", "must be"),
        ("rounds = 1", "rounds", "must be >= 2"),
    ],
)
def test_bad_input_is_one_line_naming_the_key(tmp_path: Path, extra: str, key: str, says: str) -> None:
    message = error_of(tmp_path, SGLANG + extra + "\n")
    assert message.startswith(f"specperf.toml [specperf.tune] {key}:") or f"[specperf.tune] {key}:" in message
    assert says in message


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ('base = "plain"', "does not speculate"),
        ('base = "eagle"', "did you mean 'eagle3'"),
        ('base = "eagle3"\nworkloads = ["nope"]', "names workload 'nope'"),
    ],
)
def test_the_base_and_workloads_must_exist(tmp_path: Path, table: str, says: str) -> None:
    text = SGLANG.split("[specperf.tune]")[0] + "[specperf.tune]\n" + table + "\n"
    assert says in error_of(tmp_path, text)


def test_no_table_is_an_error(tmp_path: Path) -> None:
    assert "no such table" in error_of(tmp_path, SGLANG.split("[specperf.tune]")[0])


def test_vllm_candidates_edit_the_speculative_config(tmp_path: Path) -> None:
    space = space_of(tmp_path, VLLM + "num_speculative_tokens = [1, 2, 3, 4, 5, 6]\nprompt_lookup_max = [2, 4]\n")
    assert len(space.candidates) == 12
    cand = space.candidate("s5-lmax2")
    assert dict(cand.server.speculative_config or {}) == {
        "method": "ngram",
        "num_speculative_tokens": 5,
        "prompt_lookup_max": 2,
        "prompt_lookup_min": 2,
    }
    assert (cand.draft.steps, cand.draft.topk, cand.draft.draft_tokens) == (5, 1, 6)
    assert cand.group != space.candidate("s5-lmax4").group  # another lookup: its own acceptance


def test_vllm_refuses_sglang_keys_and_an_empty_lookup_range(tmp_path: Path) -> None:
    assert "is a sglang key" in error_of(tmp_path, VLLM + "eagle_topk = [1, 2]\n")
    message = error_of(tmp_path, VLLM + "prompt_lookup_max = [2]\nprompt_lookup_min = [3]\n")
    assert "[specperf.tune] prompt_lookup_min: is above every prompt_lookup_max" in message


def test_the_command_refuses_bad_input_with_exit_2_before_any_start(tmp_path: Path, capsys, monkeypatch) -> None:
    (tmp_path / "specperf.toml").write_text(SGLANG + "budget = 2\n")
    monkeypatch.chdir(tmp_path)
    code = main(["tune", "--run-dir", str(tmp_path / "run")])
    _, err = capsys.readouterr()
    assert code == 2
    assert err.strip() == (
        "specperf: error: specperf.toml [specperf.tune] budget: must be >= 3 server starts (the reference, one config "
        "to learn from, one the model chooses), got 2"
    )
    assert not (tmp_path / "run").exists()


def test_dry_run_prints_the_plan_and_starts_nothing(tmp_path: Path, capsys, monkeypatch) -> None:
    table = 'num_steps = [1, 2, 3, 4, 5, 6]\neagle_topk = [1, 2, 4]\nnum_draft_tokens = "valid"\n'
    (tmp_path / "specperf.toml").write_text(SGLANG + table)
    monkeypatch.chdir(tmp_path)
    code = main(["tune", "--dry-run", "--run-dir", str(tmp_path / "run")])
    out, _ = capsys.readouterr()
    assert code == 0
    assert "space: 132 configs" in out and "objectives: chat c1, chat c8" in out
    assert "  a full grid: 133 starts, the reference and 132 configs\n" in out  # the run counts the same way
    lines = out.splitlines()
    first = lines.index("  first starts:")
    assert lines[first + 1].startswith("    1. plain (no speculation): the reference")
    assert lines[first + 2].startswith("    2. s6-k1-n7 (num_steps 6, eagle_topk 1, num_draft_tokens 7): the deepest")
    assert "fitted as fixed + per draft token x draft tokens" in out
    assert not (tmp_path / "run").exists()


def test_a_plot_without_matplotlib_is_refused_before_any_start(tmp_path: Path, capsys, monkeypatch) -> None:
    (tmp_path / "specperf.toml").write_text(SGLANG + 'num_steps = [1, 2]\nnum_draft_tokens = "valid"\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    code = main(["tune", "--plot", "tune.png", "--run-dir", str(tmp_path / "run")])
    _, err = capsys.readouterr()
    assert code == 2
    assert err.strip() == (
        "specperf: error: --plot: needs matplotlib, which is not installed: pip install pytest-specperf[plot]"
    )
    assert not (tmp_path / "run").exists()
