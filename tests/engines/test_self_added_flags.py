"""A flag the plugin adds by itself goes on the command line only where the installed engine's parser
has it; elsewhere the documented fallback stands (vLLM: τ from the `/metrics` counters).

vLLM 0.26.0's parser is replayed from its wheel (tests/data/vllm-0.26.0/README.md): it has no
`--per-request-spec-decode-metrics`, and every speculative server the plugin started on it exited
with "unrecognized arguments".
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_specperf.config.settings import ServerConfig, SpecperfConfig
from pytest_specperf.engines import EngineFlags, engine_for
from pytest_specperf.engines.sglang import shipped_flags as sglang_shipped
from pytest_specperf.engines.vllm import PER_REQUEST_METRICS
from pytest_specperf.engines.vllm import shipped_flags as vllm_shipped
from pytest_specperf.servers.diagnosis import diagnose
from pytest_specperf.servers.launch import build_launch

DATA = Path(__file__).parent.parent / "data" / "vllm-0.26.0"
PARSER_026: dict[str, Any] = json.loads((DATA / "parser.json").read_text())
NGRAM = ServerConfig(
    name="ngram",
    engine="vllm",
    speculative_config={"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2},
    args=("--enforce-eager",),
)


def replayed_parser(dump: dict[str, Any]) -> argparse.ArgumentParser:
    """An argparse parser with exactly the actions the dump lists (names, value or switch, choices)."""
    parser = argparse.ArgumentParser(prog="api_server.py", allow_abbrev=dump["allow_abbrev"], add_help=False)
    parser.add_argument("model_tag", nargs="?")  # `vllm serve MODEL`: the one positional argument
    for action in dump["actions"]:
        if action["takes_value"]:
            parser.add_argument(*action["options"], choices=action["choices"])
        else:
            parser.add_argument(*action["options"], action="store_true")
    return parser


def vllm_config(flags: EngineFlags | None) -> SpecperfConfig:
    return SpecperfConfig(
        engine="vllm",
        launcher="vllm",
        python="/nonexistent/bin/python",  # never asked: the flags are given
        model="/models/target",
        engine_flags={"vllm": flags} if flags is not None else {},
    )


def launch_args(flags: EngineFlags, tmp_path: Path, server: ServerConfig = NGRAM) -> list[str]:
    argv = build_launch(server, vllm_config(flags), run_dir=tmp_path, port=8000).argv
    assert argv[1:3] == ("-m", "vllm.entrypoints.openai.api_server")  # 0.26's `vllm serve` is not asked for
    return list(argv[3:])


def test_vllm_0_26s_parser_reads_every_flag_of_a_speculative_launch(tmp_path: Path) -> None:
    flags = EngineFlags.from_probe("vllm", PARSER_026)
    assert flags.installed and flags.version == "0.26.0" and PER_REQUEST_METRICS not in flags.options
    args = launch_args(flags, tmp_path)
    parsed = replayed_parser(PARSER_026).parse_args(args)  # 0.26.0 exits 2 on a flag it does not have
    assert json.loads(parsed.speculative_config)["method"] == "ngram" and parsed.enforce_eager
    assert PER_REQUEST_METRICS not in args  # τ comes from /metrics instead


def test_the_replayed_parser_refuses_what_0_26_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The replay is faithful: the flag the night's servers died of is refused as the real parser did."""
    with pytest.raises(SystemExit) as exited:
        replayed_parser(PARSER_026).parse_args(["--model", "m", PER_REQUEST_METRICS, "summary"])
    assert exited.value.code == 2
    real = (DATA / "unrecognized-per-request-metrics.log").read_text().splitlines()[-1]
    assert real == "api_server.py: error: unrecognized arguments: --per-request-spec-decode-metrics"
    assert capsys.readouterr().err.splitlines()[-1] == real  # `summary` is read as the model tag, as vLLM reads it


def test_a_vllm_that_has_the_flag_gets_it(tmp_path: Path) -> None:
    dump = {**PARSER_026, "version": "0.32.0"}
    dump["actions"] = [*PARSER_026["actions"], {"options": [PER_REQUEST_METRICS], "takes_value": True, "choices": None}]
    args = launch_args(EngineFlags.from_probe("vllm", dump), tmp_path)
    assert args[args.index(PER_REQUEST_METRICS) + 1] == "summary"
    plain = launch_args(EngineFlags.from_probe("vllm", dump), tmp_path, ServerConfig(name="plain", engine="vllm"))
    assert PER_REQUEST_METRICS not in plain  # a server without speculation must never get it


def test_where_vllms_parser_cannot_be_read_the_flag_is_left_out(tmp_path: Path) -> None:
    """A release in the supported range may lack it: a server that starts (τ from /metrics) beats one
    that exits 2."""
    assert PER_REQUEST_METRICS not in launch_args(vllm_shipped("no vLLM here"), tmp_path)
    argv = build_launch(NGRAM, vllm_config(None), run_dir=tmp_path, port=8000).argv  # asks /nonexistent: shipped
    assert PER_REQUEST_METRICS not in argv


def test_the_real_refusal_is_diagnosed_as_an_unknown_flag(tmp_path: Path) -> None:
    found = diagnose(DATA / "unrecognized-per-request-metrics.log", engine_for("vllm"))
    assert found.cause.startswith("the engine does not know a flag")
    assert found.first_error == "api_server.py: error: unrecognized arguments: --per-request-spec-decode-metrics"


def sglang_flags(*, with_cap: bool) -> EngineFlags:
    names = ["--model-path", "--host", "--port", "--speculative-algorithm", "--speculative-num-steps"]
    names += ["--speculative-eagle-topk", "--speculative-num-draft-tokens", "--speculative-draft-model-path"]
    names += ["--max-running-requests"] if with_cap else []
    return EngineFlags.from_probe("sglang", {"version": "0.6.0", "actions": [{"options": [n]} for n in names]})


@pytest.mark.parametrize(
    ("flags", "added"),
    [(sglang_flags(with_cap=True), True), (sglang_flags(with_cap=False), False), (None, True)],
    ids=["installed-has-it", "installed-lacks-it", "not-asked"],
)
def test_sglangs_request_cap_is_lifted_only_where_its_parser_has_the_flag(
    tmp_path: Path, flags: EngineFlags | None, added: bool
) -> None:
    server = ServerConfig(
        name="eagle", algorithm="EAGLE3", draft_model="d", num_steps=3, eagle_topk=1, num_draft_tokens=4
    )
    config = SpecperfConfig(launcher="sglang", python="/opt/sglang/bin/python", model="m", engine_flags={})
    if flags is not None:
        config = SpecperfConfig(
            launcher="sglang", python="/opt/sglang/bin/python", model="m", engine_flags={"sglang": flags}
        )
    argv = build_launch(server, config, run_dir=tmp_path, port=31000, max_concurrency=64).argv
    assert ("--max-running-requests" in argv) is added
    assert "--max-running-requests" in sglang_shipped("no SGLang here").options  # every release has it
