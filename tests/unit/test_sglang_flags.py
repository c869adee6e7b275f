"""The shipped list of SGLang's flags agrees with every flag the plugin and the simulator rely on."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_specperf.config.settings import ServerConfig, SpecperfConfig
from pytest_specperf.engines.sglang.rules import REMOVED_CUDA_GRAPH_FLAG, RESERVED_FLAGS
from pytest_specperf.servers.launch import server_args
from pytest_specperf.sim.cli import build_parser
from pytest_specperf.sim.sglang_flags import SGLANG_FLAGS_FILE, SGLANG_VERSION, sglang_flags


def test_the_list_is_the_generated_one_and_counts_itself():
    lines = SGLANG_FLAGS_FILE.read_text().splitlines()
    header = "\n".join(line for line in lines if line.startswith("#"))
    actions = [line for line in lines if line and not line.startswith("#")]
    assert f"SGLang {SGLANG_VERSION}" in header and "scripts/sglang_flags.py" in header
    assert f"{len(actions)} actions" in header
    names = [name for line in actions for name in line.split()]
    assert len(names) == len(set(names)), "an option string is listed twice"
    assert all(re.fullmatch(r"--?[a-z0-9][a-z0-9-]*", name) for name in names)


def test_every_flag_the_plugin_emits_is_an_sglang_flag():
    server = ServerConfig(
        name="eagle",
        algorithm="EAGLE3",
        draft_model="d",
        num_steps=3,
        eagle_topk=1,
        num_draft_tokens=4,
        api_key="k",
    )
    argv = server_args(server, SpecperfConfig(model="m"), 30000, max_concurrency=64)
    assert "--max-running-requests" in argv  # concurrency above SGLang's speculative cap of 48
    for flag in (token for token in argv if token.startswith("--")):
        assert sglang_flags().resolve(flag) == flag, flag


def test_reserved_flags_are_sglang_flags_and_the_removed_one_is_ambiguous():
    for flag in RESERVED_FLAGS:
        assert sglang_flags().resolve(flag) == flag, flag
    assert sglang_flags().resolve(REMOVED_CUDA_GRAPH_FLAG) == [
        "--cuda-graph-max-bs-decode",
        "--cuda-graph-max-bs-prefill",
    ]


def test_the_boolean_optional_flags_have_their_no_forms():
    """SGLang 0.5.23 registers 12 booleans with argparse.BooleanOptionalAction: each has a `--no-` twin."""
    lines = [line.split() for line in SGLANG_FLAGS_FILE.read_text().splitlines() if line.startswith("--")]
    twins = [names for names in lines if any(name.startswith("--no-") for name in names)]
    assert len(twins) == 12
    assert ["--enable-multi-layer-eagle", "--no-enable-multi-layer-eagle"] not in twins  # a plain store_true
    for names in twins:
        assert all(f"--no-{name[2:]}" in names for name in names if not name.startswith("--no-"))


def test_every_flag_the_simulator_models_is_an_sglang_flag():
    modelled = [
        name for action in build_parser()._actions for name in action.option_strings if not name.startswith("--sim-")
    ]
    assert "--tp-size" in modelled
    for name in modelled:
        assert sglang_flags().resolve(name) == name, name


@pytest.mark.parametrize(
    "flag,expected",
    [
        ("--tp", "--tp-size"),
        ("--po", "--port"),
        ("--speculative-algo", "--speculative-algorithm"),
        ("--tensor-parallel", "--tensor-parallel-size"),
        ("--no-such-flag", None),
    ],
)
def test_abbreviations_resolve_like_argparse(flag, expected):
    assert sglang_flags().resolve(flag) == expected
    if isinstance(expected, str):
        assert sglang_flags().primary(expected) in ("--tp-size", expected)


def test_the_generator_reads_flags_from_source(tmp_path: Path):
    """The generator's rules on a miniature SGLang tree: annotated fields, cli_name, aliases, no_cli, manual flags."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen", Path(__file__).parents[2] / "scripts" / "sglang_flags.py")
    assert spec and spec.loader
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    fields = tmp_path / "srt" / "arg_groups" / "fields"
    fields.mkdir(parents=True)
    (fields / "a.py").write_text(
        "class Par:\n"
        "    tp_size: A[int, Arg(help='x', aliases=['--tensor-parallel-size'])] = 1\n"
        "    port: A[int, 'the port'] = 30000\n"
        "    hidden: A[int, Arg(no_cli=True)] = 0\n"
        "    renamed_thing: A[str, Arg(cli_name='--other-name')] = ''\n"
        "    plain: int = 0\n"
        "    overlap: A[Optional[bool], Arg(help='x', action=argparse.BooleanOptionalAction)] = None\n"
    )
    (tmp_path / "srt" / "server_args.py").write_text(
        "class ServerArgs:\n"
        "    @staticmethod\n"
        "    def add_cli_args(parser):\n"
        "        parser.add_argument('--config', type=str)\n"
    )
    assert gen.collect(tmp_path) == [
        ["--config"],
        ["-h", "--help"],
        ["--other-name"],
        ["--overlap", "--no-overlap"],
        ["--port"],
        ["--tp-size", "--tensor-parallel-size"],
    ]
