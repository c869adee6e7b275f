"""Config loading and validation: every error names the file, the key and what is allowed."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from pytest_specperf.config.loading import SERVER_KEYS, apply_overrides, find_config_file, parse_attach
from pytest_specperf.engines.suite import load_suite
from pytest_specperf.errors import ConfigError
from pytest_specperf.tune.space import load_space
from pytest_specperf.verdict.markers import parse_marker

BASE = """
[specperf]
launcher = "sim"
model = "m"

[specperf.servers.plain]

[specperf.servers.eagle]
algorithm = "EAGLE3"
draft_model = "d"
num_steps = 2
eagle_topk = 1
num_draft_tokens = 3
"""


def write(tmp_path: Path, text: str, name: str = "specperf.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def load(tmp_path: Path, text: str):
    return load_suite(write(tmp_path, text), "specperf")


def error(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, text)
    return str(info.value)


def test_loads_the_documented_shape(tmp_path: Path) -> None:
    config = load(tmp_path, BASE + '\n[specperf.workloads.chat]\nprompts = "builtin:chat"\nconcurrency = 2\n')
    assert config.launcher == "sim"
    assert [s.name for s in config.speculative_servers] == ["eagle"]
    assert config.reference_server is not None and not config.reference_server.is_speculative
    assert config.servers["eagle"].num_draft_tokens == 3
    assert config.workloads["chat"].concurrency == (2,)
    assert "default" in config.workloads
    assert config.store.path == tmp_path / ".specperf" and not config.store.is_git
    assert config.effective_max_rounds == 2 * config.rounds


def test_pyproject_table_is_found(tmp_path: Path) -> None:
    write(tmp_path, BASE.replace("[specperf", "[tool.specperf"), "pyproject.toml")
    found = find_config_file(tmp_path, None)
    assert found is not None and found[1] == "tool.specperf"
    assert load_suite(*found).servers["eagle"].algorithm == "EAGLE3"


def test_no_config_file_means_inactive(tmp_path: Path) -> None:
    assert find_config_file(tmp_path, None) is None


def test_explicit_missing_file_names_the_option(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--specperf-config: file not found"):
        find_config_file(tmp_path, str(tmp_path / "nope.toml"))


def test_unknown_key_gets_a_hint(tmp_path: Path) -> None:
    message = error(tmp_path, BASE.replace('model = "m"', 'model = "m"\nround = 3'))
    assert "specperf.toml [specperf] round: unknown key (did you mean 'rounds'?)" in message


def test_unknown_server_key_gets_a_hint(tmp_path: Path) -> None:
    message = error(tmp_path, BASE + "num_draft_token = 3\n")
    assert "[specperf.servers.eagle] num_draft_token: unknown key (did you mean 'num_draft_tokens'?)" in message


def test_every_mistake_of_a_file_is_named_at_once(tmp_path: Path) -> None:
    """Three mistakes in the suite's table and two in a server's: one error names all five, each on its own
    line with its place, so one run is enough to fix them."""
    text = BASE.replace('model = "m"', 'model = "m"\nround = 3\nrounds = true\nmax_servers = 0')
    text += "num_draft_token = 3\nenv = { OMP_NUM_THREADS = 1 }\n"
    lines = error(tmp_path, text).splitlines()
    assert sorted(line.split(": ", 1)[0].rsplit("] ", 1)[-1] for line in lines) == [
        "env.OMP_NUM_THREADS",
        "max_servers",
        "num_draft_token",
        "round",
        "rounds",
    ]
    assert any(
        line.endswith(
            "[specperf.servers.eagle] num_draft_token: unknown key (did you mean 'num_draft_tokens'?)"
            "; allowed: " + ", ".join(sorted(SERVER_KEYS))
        )
        for line in lines
    )


def test_every_servers_engine_mistake_is_named_at_once(tmp_path: Path) -> None:
    text = BASE.replace("num_steps = 2", 'num_steps = 2\nengine = "tgi"')
    text += '\n[specperf.servers.other]\nengine = "trt"\n'
    message = error(tmp_path, text)
    assert "[specperf.servers.eagle] engine: must be one of" in message
    assert "[specperf.servers.other] engine: must be one of" in message


@pytest.mark.parametrize(
    ("replace", "expected"),
    [
        ("max_servers = 0", "max_servers: must be >= 1, got 0"),
        ("rounds = true", "rounds: must be an integer, got boolean True"),
        ('launcher = "docker"', "launcher: must be one of 'sglang', 'vllm', 'sim', got 'docker'"),
        ("env = { NCCL_MIN_NCHANNELS = 16 }", 'env.NCCL_MIN_NCHANNELS: must be a string (quote numbers: "16")'),
        ("startup_timeout = -1", "startup_timeout: must be > 0"),
    ],
)
def test_wrong_types_and_ranges(tmp_path: Path, replace: str, expected: str) -> None:
    text = (
        BASE.replace('launcher = "sim"', replace)
        if "launcher" in replace
        else BASE.replace('model = "m"', f'model = "m"\n{replace}')
    )
    assert expected in error(tmp_path, text)


@pytest.mark.parametrize(
    ("sizes", "expected"),
    [
        ("num_steps = 2", "must be given all together or not at all"),
        (
            "num_steps = 2\neagle_topk = 1\nnum_draft_tokens = 6",
            "with eagle_topk = 1 it must be num_steps + 1 = 3, got 6",
        ),
        ("num_steps = 2\neagle_topk = 2\nnum_draft_tokens = 6", "6 is more than num_steps * eagle_topk + 1 = 5"),
    ],
)
def test_sglang_speculative_rules_are_refused(tmp_path: Path, sizes: str, expected: str) -> None:
    text = BASE + f'\n[specperf.servers.bad]\nalgorithm = "EAGLE3"\ndraft_model = "d"\n{sizes}\n'
    message = error(tmp_path, text)
    assert "[specperf.servers.bad]" in message and expected in message


def test_unknown_algorithm_lists_the_known_ones(tmp_path: Path) -> None:
    message = error(tmp_path, BASE + '\n[specperf.servers.x]\nalgorithm = "MEDUSA"\n')
    assert "unknown speculative algorithm 'MEDUSA'" in message and "EAGLE3" in message


def test_eagle3_needs_a_draft_model(tmp_path: Path) -> None:
    assert "draft_model: is required for algorithm EAGLE3" in error(
        tmp_path, BASE + '\n[specperf.servers.x]\nalgorithm = "EAGLE3"\n'
    )


def test_reference_must_be_plain(tmp_path: Path) -> None:
    message = error(tmp_path, BASE.replace('model = "m"', 'model = "m"\nreference = "eagle"'))
    assert "reference: server 'eagle' is speculative" in message


def test_reference_must_exist(tmp_path: Path) -> None:
    message = error(tmp_path, BASE.replace('model = "m"', 'model = "m"\nreference = "plian"'))
    assert "names server 'plian', which is not defined (did you mean 'plain'?)" in message


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ('["--port", "1"]', "--port is not allowed here: the plugin picks a free port"),
        ('["--cuda-graph-max-bs", "8"]', "use --cuda-graph-max-bs-decode"),
        ('["--api-key", "x"]', "never lands in a report"),
        ('["--speculative-num-steps=3"]', "use the `num_steps` key"),
    ],
)
def test_reserved_flags_in_args(tmp_path: Path, args: str, expected: str) -> None:
    assert expected in error(
        tmp_path, BASE.replace("[specperf.servers.plain]", f"[specperf.servers.plain]\nargs = {args}")
    )


def test_attached_server_cannot_have_launch_settings(tmp_path: Path) -> None:
    text = BASE.replace(
        "[specperf.servers.plain]", '[specperf.servers.plain]\nurl = "http://h:1"\nargs = ["--tp-size", "8"]'
    )
    assert "an attached server (url = ...) is never launched" in error(tmp_path, text)


def test_command_template_placeholders(tmp_path: Path) -> None:
    bad = BASE.replace("[specperf.servers.plain]", '[specperf.servers.plain]\ncommand = "srun {pyhton} {args}"')
    assert "unknown placeholder {pyhton}" in error(tmp_path, bad)
    missing = BASE.replace("[specperf.servers.plain]", '[specperf.servers.plain]\ncommand = "srun {python}"')
    assert "must contain {args}" in error(tmp_path, missing)


def test_invalid_toml_names_the_file(tmp_path: Path) -> None:
    assert "specperf.toml: not valid TOML" in error(tmp_path, "[specperf\n")


def test_command_line_overrides(tmp_path: Path) -> None:
    config = load(tmp_path, BASE)
    changed = apply_overrides(config, launcher="sglang", rounds=3, attach={"plain": "http://127.0.0.1:9"})
    assert changed.launcher == "sglang" and changed.rounds == 3
    assert changed.servers["plain"].url == "http://127.0.0.1:9"
    with pytest.raises(ConfigError, match="--specperf-attach: unknown server 'plian'"):
        apply_overrides(config, attach={"plian": "http://x:1"})
    with pytest.raises(ConfigError, match="--specperf-rounds: must be >= 2"):
        apply_overrides(config, rounds=1)
    with pytest.raises(ConfigError, match="expected NAME=URL"):
        parse_attach(["plain"])


def _plain_args(args: str) -> str:
    return BASE.replace("[specperf.servers.plain]", f"[specperf.servers.plain]\nargs = {args}")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ('["--po", "30999"]', "args: --po (SGLang reads it as --port) is not allowed here: the plugin picks"),
        ('["--speculative-algo", "EAGLE"]', "--speculative-algo (SGLang reads it as --speculative-algorithm)"),
        ('["--api=k"]', "--api (SGLang reads it as --api-key) is not allowed here"),
        ('["--mo", "x"]', "ambiguous option: --mo could match --model, --model-checksum, --model-config-parser"),
    ],
)
def test_abbreviated_flags_are_read_as_sglang_reads_them(tmp_path: Path, args: str, expected: str) -> None:
    """SGLang's argparse accepts unique prefixes: a check that compares whole flags would let them through."""
    message = error(tmp_path, _plain_args(args))
    assert "[specperf.servers.plain] args" in message
    assert expected in message


def test_abbreviations_are_spelled_out_so_identity_and_tp_size_see_them(tmp_path: Path) -> None:
    server = load(tmp_path, _plain_args('["--tp", "8", "--mem-fraction=0.8", "--trust-remote-code"]')).servers["plain"]
    assert server.args == ("--tp-size", "8", "--mem-fraction-static=0.8", "--trust-remote-code")
    assert server.tp_size == 8


def test_suite_sim_args_take_only_simulator_flags(tmp_path: Path) -> None:
    config = load(tmp_path, BASE.replace('model = "m"', 'model = "m"\nsim_args = ["--sim-run-jitter", "0.02"]'))
    assert config.sim_args == ("--sim-run-jitter", "0.02")
    text = BASE.replace('model = "m"', 'model = "m"\nsim_args = ["--tp-size", "8"]')
    assert "[specperf] sim_args: --tp-size: only --sim-* flags belong here" in error(tmp_path, text)


@pytest.mark.parametrize(
    ("value", "branch", "url"),
    [
        ("git:specperf-history", "specperf-history", None),
        ("git:nightly/gpu", "nightly/gpu", None),
        ("git:https://github.com/org/perf-history.git#main", "main", "https://github.com/org/perf-history.git"),
        ("git:git@github.com:org/perf-history.git#main", "main", "git@github.com:org/perf-history.git"),
        ("git:../history.git#main", "main", "HISTORY"),  # a local path, relative to the config file
    ],
)
def test_a_git_store_is_a_branch_of_a_repository(tmp_path: Path, value: str, branch: str, url: str | None) -> None:
    (tmp_path / "suite").mkdir()
    text = BASE.replace('model = "m"', f'model = "m"\nstore = "{value}"')
    config = load_suite(write(tmp_path / "suite", text), "specperf")
    assert config.store.is_git and config.store.path is None
    assert config.store.branch == branch
    assert config.store.url == (str(tmp_path / "history.git") if url == "HISTORY" else url)
    assert config.store.base == tmp_path / "suite" and config.store.offline is None
    assert str(config.store) == (value if url != "HISTORY" else f"git:{tmp_path / 'history.git'}#main")


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        ('store = "git:"', "store: 'git:' does not name a valid git branch; write git:<branch>"),
        ('store = "git:a..b"', "does not name a valid git branch"),
        ('store = "git:#main"', "has an empty URL before '#'"),
        (
            'store = "git:https://x-access-token:ghs_abc123@github.com/o/r.git#main"',
            "the URL of 'git:https://github.com/o/r.git#main' carries credentials; remove them",
        ),
        ('store = "git:https://ghp_abcdefghijklmnopqrstuvwx@github.com/o/r.git#main"', "carries credentials"),
        ('store = ".specperf"\noffline_store = ".local"', 'offline_store: applies to a git store only (store = "git:'),
    ],
)
def test_bad_store_settings_are_refused_with_the_key(tmp_path: Path, lines: str, expected: str) -> None:
    message = error(tmp_path, BASE.replace('model = "m"', f'model = "m"\n{lines}'))
    assert expected in message and "[specperf]" in message
    assert "abc123" not in message and "ghp_" not in message  # a credential is never repeated back


def test_offline_store_is_relative_to_the_config_file(tmp_path: Path) -> None:
    config = load(tmp_path, BASE.replace('model = "m"', 'model = "m"\nstore = "git:h"\noffline_store = "local"'))
    assert config.store.offline == tmp_path / "local"


def test_an_unknown_key_reads_the_same_in_a_table_a_workload_a_marker_and_a_tune_table(tmp_path: Path) -> None:
    """One sentence, whichever front end met the key: `<where> <key>: unknown key (did you mean ...); allowed: ...`."""
    workload = error(tmp_path, BASE + '\n[specperf.workloads.chat]\nprompts = "builtin:chat"\nnum_request = 3\n')
    tune = error_of_tune(tmp_path, BASE + '\n[specperf.tune]\nbase = "eagle"\nnum_step = [1, 2]\n')
    with pytest.raises(ConfigError) as marker:
        parse_marker((), {"min_sped": 1.1}, "test_x", load(tmp_path, BASE))
    sentences = {
        "specperf.toml [specperf.workloads.chat] num_request": (workload, "num_requests"),
        "specperf.toml [specperf.tune] num_step": (tune, "num_steps"),
        "test_x @specperf min_sped": (str(marker.value), "min_speedup"),
    }
    for where, (message, meant) in sentences.items():
        assert f"{where}: unknown key (did you mean '{meant}'?); allowed: " in message, message
        allowed = message.split("; allowed: ")[1].split(", ")
        assert allowed == sorted(allowed) and meant in allowed


def error_of_tune(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as info:
        load_space(load(tmp_path, text))
    return str(info.value)
