"""`specperf tune` end to end: the real command against real simulator servers over HTTP.

The simulator runs a profile written for these tests whose answers are far apart (so no machine's
load can flip them): drafts are accepted 90% of the time at every position, so at concurrency 1 the
deepest chain wins by more than 30%; verify costs 2 ms per verified token, so at concurrency 8 plain
decoding wins by more than 20%. Small time scale, few requests.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from pytest_specperf.sim.profile_files import load_profile

PROFILE = """
name = "tune-test"
description = "far-apart answers for specperf tune's end-to-end tests"

[server]
model_path = "test/model"
draft_model_path = "test/draft"
architecture = "DeepseekV3ForCausalLM"
accelerator = "NVIDIA H200"
tp_size = 1
max_running_requests = 256
cuda_graph_max_bs_decode = 128
mem_fraction_static = 0.85
context_length = 32768
max_total_num_tokens = 1048576

[cost]
plain_step_ms = 15.0
plain_per_request_ms = 0.6
draft_step_ms = 0.2
draft_per_token_ms = 0.004
verify_fixed_ms = 20.0
verify_per_token_ms = 2.0
cycle_overhead_ms = 0.2
prefill_fixed_ms = 20.0
prefill_per_token_ms = 0.05
no_cuda_graph_penalty = 1.6
plain_comm_share = 0.4
draft_comm_share = 0.4
verify_comm_share = 0.4
prefill_comm_share = 0.25

[nccl]
comm_factor = 1.0

[acceptance.default]
position_rates = [0.9, 0.9, 0.9, 0.9, 0.9, 0.9]
difficulty = [0.97, 1.03]

[output]
natural_tokens = [96, 480]
"""

CONFIG = """
[specperf]
launcher = "sim"
model = "{model}"
sim_profile = "tune-test.toml"
sim_time_scale = 0.05
rounds = 2

[specperf.servers.plain]

[specperf.servers.eagle3]
algorithm = "EAGLE3"
draft_model = "test/draft"
num_steps = 3
eagle_topk = 1
num_draft_tokens = 4

[specperf.workloads.chat]
prompts = "builtin:qa"
num_requests = 8
max_new_tokens = 48
ignore_eos = true
concurrency = [1, 8]
warmup = 1

[specperf.tune]
base = "eagle3"
workloads = ["chat"]
num_steps = [1, 2, 6]
eagle_topk = [1]
num_draft_tokens = "valid"
budget = {budget}
"""


@pytest.fixture
def suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """A folder with the profile and a config naming a model no other process on the machine has."""
    model = f"test/tune-{uuid.uuid4().hex[:10]}"
    (tmp_path / "tune-test.toml").write_text(PROFILE)
    monkeypatch.setenv("SPECPERF_LOCK_DIR", str(tmp_path / "locks"))  # not queued behind other sessions
    return tmp_path, model


def write_config(folder: Path, model: str, budget: int) -> None:
    (folder / "specperf.toml").write_text(CONFIG.format(model=model, budget=budget))


def tune(folder: Path, *args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    return subprocess.Popen(
        [sys.executable, "-m", "pytest_specperf.cli", "tune", "--run-dir", str(folder / "run"), *args],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def servers_of(model: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if model in " ".join(proc.info["cmdline"] or ()) and proc.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def test_the_profile_answers_are_far_apart(tmp_path: Path) -> None:
    """What the end-to-end test relies on, from the profile's own prediction."""
    (tmp_path / "p.toml").write_text(PROFILE)
    from pytest_specperf.sim.profile import SpecConfig

    profile = load_profile(tmp_path / "p.toml")

    def speedup(steps: int | None, level: int) -> float:
        spec = None if steps is None else SpecConfig("EAGLE3", steps, 1, steps + 1)
        shape = {"concurrency": level, "prompt_tokens": 20, "output_tokens": 48, "num_requests": 8}
        return profile.predicted_round_throughput(spec, **shape) / profile.predicted_round_throughput(None, **shape)

    assert speedup(6, 1) > 1.3 * max(speedup(1, 1), speedup(2, 1))
    assert max(speedup(s, 8) for s in (1, 2, 6)) < 0.85


def test_tune_finds_each_levels_winner_and_reports_it(suite: tuple[Path, str]) -> None:
    folder, model = suite
    write_config(folder, model, budget=4)
    proc = tune(folder, "--json", "tune.json", "--plot", "tune.png")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err + out
    assert not servers_of(model)  # every server it started is stopped
    lines = out.splitlines()
    starts = [line for line in lines if line.startswith("start ")]
    assert starts[0] == "start 1/4: plain (no speculation): the reference: every speedup is over it"
    assert starts[1].startswith("start 2/4: s6-k1-n7 (num_steps 6, eagle_topk 1, num_draft_tokens 7): the deepest")
    doc = json.loads((folder / "tune.json").read_text())
    # the deepest chain and a shallow one (for the cost fit) settle both levels, and 2 steps is not started:
    # on a quiet machine. A busy one widens the spread the model is told, and the last start may be spent
    # on it; which configs win, and why, must not change.
    assert len(starts) in (3, 4) and doc["starts"] == len(starts) and doc["grid"] == 4
    assert f"tune: {len(starts)} server starts of 4 (a full grid: 4 starts, the reference and 3 configs)" in out
    if len(starts) == 3:
        # settled before the budget: the leaders are known, or no config is left that could beat them
        assert re.search(
            r"stopped: (every leader is ahead of every other config with 90% confidence"
            r"|no config left that could beat the leaders)",
            out,
        ), out
        skipped = next(c for c in doc["candidates"] if c["config"] == "s2-k1-n3")
        assert not skipped["started"]
        # why, in the report's words: ruled out (< 1%), or a small chance left when the leaders were known
        assert re.fullmatch(
            r"ruled out by the model \(chance to beat a leader < 1%\)"
            r"|the leaders were known first \(chance to beat a leader \d+%\)"
            r"|its expected improvement was below 0.01% \(chance to beat a leader \d+%\)",
            skipped["why_not_started"],
        ), skipped["why_not_started"]
    best = {b["concurrency"]: b for b in doc["best"]}
    assert best[1]["config"] == "s6-k1-n7" and best[1]["server"]["num_steps"] == 6 and best[1]["speedup"] > 1.5
    # at c8 plain decoding wins by about 20% on a quiet machine (docs/benchmarks.md); a busy one slows the
    # simulators' many streams unevenly, so only that the level has a winner, and why, is asserted here
    assert best[8]["config"] in {c["config"] for c in doc["candidates"]} | {"plain"}
    # the acceptance per position comes from the servers' histograms (at temperature 0: not timing)
    rates = doc["model"]["acceptance"][0]["rates"]
    assert [r["value"] for r in rates[:4]] == pytest.approx([0.9] * 4, abs=0.05)
    assert "[specperf.servers.tuned-s6-k1-n7]" in out and "num_draft_tokens = 7" in out
    assert "chat c8: " in out  # its reason's words depend on how sure a busy machine let it be
    assert (folder / "tune.png").stat().st_size > 10_000
    assert len(list((folder / "run").glob("*.log"))) == len(starts)


def test_sigterm_stops_every_server_it_started(suite: tuple[Path, str]) -> None:
    folder, model = suite
    write_config(folder, model, budget=4)
    proc = tune(folder)
    assert proc.stdout is not None
    for line in proc.stdout:  # wait until the second server is being measured
        if "tune-s6-k1-n7/chat/c1: warmup" in line:
            break
    assert servers_of(model)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    assert "interrupted; every server it started is stopped" in err
    deadline = time.monotonic() + 10
    while servers_of(model) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not servers_of(model)
