"""Adding an engine is one module plus its tests: this module is the whole of a third engine.

"Toy" serves everything through OpenAI chat (text rows too), has no accelerator report and no
version endpoint, and is started by its own launcher (the built-in simulator standing in for its
server program). Its one tune key, `depth`, spans draft chains. Nothing outside this module knows it
exists: no branch on an engine's name, in a session or in `specperf tune`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import pytest

from pytest_specperf.cli import main
from pytest_specperf.config.settings import ServerConfig, SpecperfConfig
from pytest_specperf.config.workloads import Prompt, SamplingParams
from pytest_specperf.engines import Engine, EngineFlags, register_engine, unregister_engine
from pytest_specperf.engines.base import EngineRequest, SpecCounts, StreamMode, openai_sampling
from pytest_specperf.engines.tuning import Candidate, Shape


class Toy(Engine):
    name = "toy"
    known_versions = ("1.0",)
    readiness_path = "/ready"
    flush_path = "/flush_cache"
    info_paths = ("/server_info",)
    module = "pytest_specperf.sim"  # the toy server program
    reserved_flags: ClassVar[Mapping[str, str]] = {"--port": "the plugin picks it"}
    tune_axes = ("depth",)
    acceptance_source = "toy accept lengths"

    def flags(self, python: str, env: Mapping[str, str]) -> EngineFlags:
        return EngineFlags("toy", "1.0", "shipped", {}, fallback_reason="the toy has no parser to ask")

    def check_server(self, server: ServerConfig, where: str, flags: EngineFlags) -> None:
        pass

    def launch_args(self, server: ServerConfig, config: SpecperfConfig, port: int, max_concurrency: int) -> list[str]:
        args = ["--model-path", config.model_of(server) or "toy", "--port", str(port), "--sim-time-scale", "0.02"]
        if server.algorithm:
            steps = server.num_steps or 2
            args += ["--speculative-algorithm", server.algorithm, "--speculative-draft-model-path", "d"]
            args += ["--speculative-num-steps", str(steps), "--speculative-eagle-topk", "1"]
            args += ["--speculative-num-draft-tokens", str(steps + 1)]
        return [*args, *server.args]

    def tune_candidates(
        self, base: ServerConfig, axes: Mapping[str, tuple[Any, ...]], where: str, flags: EngineFlags
    ) -> list[Candidate]:
        """A chain per depth: the toy drafts chains only."""
        return [
            Candidate(f"depth{d}", replace(base, name=f"tune-depth{d}", num_steps=d), Shape(d, 1, d + 1), {"depth": d})
            for d in axes.get("depth", (2,))
        ]

    def request(self, prompt: Prompt, sampling: SamplingParams, model: str | None) -> EngineRequest:
        messages = [dict(m) for m in prompt.messages] if prompt.messages else [{"role": "user", "content": prompt.text}]
        payload: dict[str, Any] = {
            "messages": messages,
            **openai_sampling(sampling),
            "stream": True,
            "stream_options": {"include_usage": True},
            "return_spec_tokens_details": True,
        }
        return EngineRequest("/v1/chat/completions", payload, "chat")

    def spec_counts(self, final: Mapping[str, Any], mode: StreamMode) -> SpecCounts | None:
        block = final.get("sglext")
        spec = block.get("spec_tokens_details") if isinstance(block, Mapping) else None
        if not isinstance(spec, Mapping) or not spec.get("spec_verify_ct"):
            return None
        return SpecCounts(verify_steps=spec["spec_verify_ct"])

    def gpu_count(self, args: Sequence[str]) -> int:
        return 3  # the toy always uses three


@pytest.fixture
def toy() -> Iterator[None]:
    register_engine("toy", Toy)
    yield
    unregister_engine("toy")


CONFIG = f"""
[specperf]
engine = "toy"
python = "{sys.executable}"
model = "toy-model"
rounds = 2
run_to_run_cv = 0

[specperf.servers.plain]

[specperf.servers.fast]
algorithm = "EAGLE3"

[specperf.workloads.default]
prompts = "builtin:qa"
num_requests = 4
max_new_tokens = 24
warmup = 1
"""

TESTS = """
import pytest

@pytest.mark.specperf(server="fast", min_speedup=0.1, accept_length=(1.01, None))
def test_fast(specperf):
    assert specperf.server.engine.name == "toy"
"""


def test_a_third_engine_is_one_module(pytester: pytest.Pytester, toy: None, tmp_path: Path) -> None:
    pytester.makefile(".toml", specperf=CONFIG)
    pytester.makepyfile(test_suite=TESTS)
    report = tmp_path / "toy.json"
    result = pytester.runpytest(
        f"--specperf-json={report}", f"--specperf-run-dir={tmp_path / 'run'}", "-p", "no:randomly"
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["*launcher toy*", "*toy flags and algorithms checked against the list shipped for toy 1.0*"]
    )
    rows = {m["label"]: m for m in json.loads(report.read_text())["measurements"]}
    fast = rows["fast/default/c1"]
    assert fast["estimates"]["speedup"]["value"] > 0 and fast["estimates"]["accept_length"]["value"] > 1
    identity = fast["fingerprint"]["identity"]
    assert identity["engine"] == "toy" and identity["gpu_count"] == "3"
    assert "toy.version" in fast["fingerprint"]["environment"]


def test_the_simulator_does_not_stand_in_for_an_engine_it_does_not_speak(pytester: pytest.Pytester, toy: None) -> None:
    pytester.makefile(".toml", specperf=CONFIG)
    pytester.makepyfile(test_suite=TESTS)
    result = pytester.runpytest("--specperf-launcher=sim")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*\"sim\" simulates sglang only; server 'plain' runs toy*"])


def test_tune_plans_a_search_over_the_third_engines_own_keys(toy: None, tmp_path: Path, capsys, monkeypatch) -> None:
    table = '[specperf.tune]\nbase = "fast"\ndepth = [1, 2, 3, 4]\n'
    (tmp_path / "specperf.toml").write_text(CONFIG + table)
    monkeypatch.chdir(tmp_path)
    assert main(["tune", "--dry-run", "--run-dir", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "space: 4 configs from depth = 1, 2, 3, 4" in out
    assert "acceptance by draft position from the servers' toy accept lengths" in " ".join(out.split())
    assert "depth4 (depth 4)" in out and not (tmp_path / "run").exists()
    (tmp_path / "specperf.toml").write_text(CONFIG + table + "num_steps = [2]\n")
    assert main(["tune", "--dry-run"]) == 2
    assert "[specperf.tune] num_steps: is a sglang key; the base server runs toy, whose keys are depth" in (
        capsys.readouterr().err
    )
