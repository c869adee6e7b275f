"""vLLM 0.33 and later: `vllm serve` where its CLI works, tree drafts where the installed vLLM has
`speculative_token_tree`, and short flags (`-tp 8`) read for GPU accounting and the reserved flags."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_specperf.config.loading import parse_server
from pytest_specperf.config.settings import ServerConfig, SpecperfConfig
from pytest_specperf.engines import EngineFlags, engine_for
from pytest_specperf.engines.suite import EngineFlagsOf, check_server
from pytest_specperf.engines.vllm import VLLM, shipped_flags, token_tree
from pytest_specperf.errors import ConfigError
from pytest_specperf.servers.launch import build_launch

VLLM_ENGINE = engine_for("vllm")
assert isinstance(VLLM_ENGINE, VLLM)


def installed(version: str = "0.33.0", *, serve_cli: bool, tree: bool) -> EngineFlags:
    """What the probe reads from an installed vLLM (a few of its options)."""
    fields = ["method", "model", "num_speculative_tokens", *(["speculative_token_tree"] if tree else [])]
    return EngineFlags.from_probe(
        "vllm",
        {
            "version": version,
            "allow_abbrev": True,
            "actions": [
                {"options": ["--model"], "takes_value": True},
                {"options": ["--host"], "takes_value": True},
                {"options": ["--port"], "takes_value": True},
                {"options": ["--tensor-parallel-size", "-tp"], "takes_value": True},
                {"options": ["--data-parallel-size", "-dp"], "takes_value": True},
                {"options": ["--speculative-config", "-sc"], "takes_value": True},
                {"options": ["--enforce-eager", "--no-enforce-eager"], "takes_value": False},
                {"options": ["--api-key"], "takes_value": True},
                {"options": ["--per-request-spec-decode-metrics"], "takes_value": True},
            ],
            "extras": {"speculative_config_fields": fields, "serve_cli": serve_cli},
        },
    )


def config(flags: EngineFlags | None) -> SpecperfConfig:
    return SpecperfConfig(
        engine="vllm",
        launcher="vllm",
        python="/opt/vllm/bin/python",
        model="/models/target",
        engine_flags={"vllm": flags} if flags else {},
    )


def test_vllm_serve_where_the_installed_cli_works(tmp_path: Path) -> None:
    server = ServerConfig(name="plain", engine="vllm", args=("--tensor-parallel-size", "2"))
    argv = build_launch(server, config(installed(serve_cli=True, tree=False)), run_dir=tmp_path, port=8000).argv
    assert argv[:6] == ("/opt/vllm/bin/python", "-m", "vllm.entrypoints.cli.main", "serve", "/models/target", "--host")
    assert "--model" not in argv  # 0.33 deprecates `--model` for serve: the model is its positional argument


@pytest.mark.parametrize("flags", [installed(serve_cli=False, tree=False), None], ids=["cpu-wheel", "unknown"])
def test_the_module_entrypoint_where_vllm_serve_is_unusable(tmp_path: Path, flags: EngineFlags | None) -> None:
    """The CPU wheel's `vllm` CLI asks for a "vllm" distribution's metadata it does not have."""
    server = ServerConfig(name="plain", engine="vllm")
    argv = build_launch(server, config(flags), run_dir=tmp_path, port=8000).argv
    assert argv[:5] == ("/opt/vllm/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/models/target")


@pytest.mark.parametrize("flags", [installed(serve_cli=True, tree=False), shipped_flags("no vLLM here")])
def test_short_flags_are_read_as_vllm_reads_them(flags: EngineFlags) -> None:
    args = VLLM_ENGINE.spell_out(("-tp", "8", "-dp=2", "--enforce_eager"), "where", flags)
    assert args == ("--tensor-parallel-size", "8", "--data-parallel-size=2", "--enforce-eager")
    assert VLLM_ENGINE.gpu_count(args) == 16 and len(VLLM_ENGINE.local_gpu_ids(args)) == 16
    with pytest.raises(ConfigError, match=r"-sc \(vLLM reads it as --speculative-config\) is not allowed here"):
        VLLM_ENGINE.spell_out(("-sc", "{}"), "where", flags)


def test_a_tree_becomes_speculative_token_tree_where_vllm_has_it() -> None:
    table = {"algorithm": "EAGLE3", "draft_model": "d", "num_steps": 2, "eagle_topk": 2, "num_draft_tokens": 5}

    def Flags(flags: EngineFlags) -> EngineFlagsOf:
        known = EngineFlagsOf("/opt/vllm/bin/python", {})
        known.found["vllm"] = flags
        return known

    def parse(name: str, table: dict[str, object], flags: EngineFlags) -> ServerConfig:
        return check_server(parse_server(name, table, "where", engine="vllm"), "where", Flags(flags), "vllm")

    server = parse("tree", dict(table), installed(serve_cli=True, tree=True))
    spec = VLLM_ENGINE.speculative_config(server)
    assert spec == {
        "method": "eagle3",
        "model": "d",
        "num_speculative_tokens": 4,
        "speculative_token_tree": "[(0,), (1,), (0, 0), (0, 1)]",
    }
    args = VLLM_ENGINE.launch_args(server, config(None), 8000, 1)
    assert json.loads(args[args.index("--speculative-config") + 1]) == spec
    with pytest.raises(ConfigError, match=r"eagle_topk: the installed vLLM 0.33.0 has no tree drafts"):
        parse("tree", dict(table), installed(serve_cli=True, tree=False))
    raw = {"speculative_config": {"method": "eagle3", "model": "d", "speculative_token_tree": "[(0,), (1,)]"}}
    with pytest.raises(ConfigError, match=r"speculative_config: the installed vLLM 0.33.0 has no tree drafts"):
        parse("raw", raw, installed(serve_cli=True, tree=False))


def test_token_tree_is_breadth_first() -> None:
    assert token_tree(3, 1, 3) == [(0,), (0, 0), (0, 0, 0)]  # a chain
    assert token_tree(2, 3, 5) == [(0,), (1,), (2,), (0, 0), (0, 1)]
