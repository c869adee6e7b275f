"""The search loop and its report, on a stand-in runner that answers from the simulator's profile.

The stand-in is the profile's own arithmetic (no servers, no clocks): each start draws one seeded speed
offset, as a GPU node's starts do, so the decisions are tested on data whose truth is known.
"""

from __future__ import annotations

import functools
import json
import math
import random
import tomllib
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest
from suite_tables import tune_config

from pytest_specperf.config.loading import parse_server
from pytest_specperf.engines.suite import load_suite
from pytest_specperf.errors import ServerError
from pytest_specperf.sim.profile import SpecConfig, accepted_distribution
from pytest_specperf.sim.profile_files import load_profile
from pytest_specperf.tune.document import tune_document, write_document
from pytest_specperf.tune.model import ModelSettings, _Belief, _recommend
from pytest_specperf.tune.observe import LevelData
from pytest_specperf.tune.output import paste_blocks, result_lines, winner
from pytest_specperf.tune.search import initial_design, run_search
from pytest_specperf.tune.space import Candidate, Objective, Shape, TuneSpace, load_space

PROFILE = load_profile("kimi-k2.5-tp8")
TOKENS, PROMPT, REQUESTS = 128, 60, 16

CONFIG = tune_config(rounds=4, num_requests=16)


def spec_of(shape: Shape | None) -> SpecConfig | None:
    return None if shape is None else SpecConfig("EAGLE3", shape.steps, shape.topk, shape.draft_tokens)


@functools.cache
def true_throughput(shape: Shape | None, level: int) -> float:
    return PROFILE.predicted_round_throughput(
        spec_of(shape), concurrency=level, prompt_tokens=PROMPT, output_tokens=TOKENS, num_requests=REQUESTS
    )


class ProfileRunner:
    """Answers like a simulator would, from the profile: one seeded speed offset per start."""

    def __init__(
        self, space: TuneSpace, seed: int, jitter: float = 0.02, fail: str | None = None, disturbed: bool = False
    ) -> None:
        self.space, self.jitter, self.fail = space, jitter, fail
        self.disturbed = disturbed  # the reference's fourth round at concurrency 8 ran at a tenth of the speed
        self.late: set[str] = set()  # configs whose answers arrive all at once (TTFT ~ E2E)
        self.rng = random.Random(seed)
        self.rounds: dict[str, int] = {}
        self.order: list[str] = []
        self.offsets: dict[str, float] = {}
        self.released: list[str] = []

    def measure(self, cand: Candidate, rounds: int) -> Mapping[Objective, LevelData]:
        if cand.label == self.fail:
            raise ServerError(f"server {cand.server.name!r} exited during startup (exit code 1)\nlog tail ...")
        if cand.label not in self.offsets:
            self.order.append(cand.label)
            self.offsets[cand.label] = math.exp(self.rng.gauss(0.0, self.jitter))
        self.rounds[cand.label] = self.rounds.get(cand.label, 0) + rounds
        offset = self.offsets[cand.label]
        return {o: self.level(cand.shape, o.concurrency, offset, cand.label) for o in self.space.objectives}

    def level(self, shape: Shape | None, level: int, offset: float, label: str) -> LevelData:
        n = self.rounds[label]
        tp = true_throughput(shape, level) / offset
        ttft = PROFILE.prefill_ms(PROMPT)
        throughput = tuple(tp * (1 + 0.003 * ((i % 3) - 1)) for i in range(n))
        if self.disturbed and shape is None and level == 8:
            throughput = (*throughput[:3], tp / 10, *throughput[4:])
        spec = spec_of(shape)
        if spec is None:
            e2e = ttft + (TOKENS - 1) * PROFILE.plain_step_ms(level) * offset
            return LevelData(throughput, (), (), ttft, e2e, TOKENS)
        tau = PROFILE.expected_accept_length(spec.steps, spec.topk, spec.draft_tokens)
        cycle = PROFILE.cycle_ms(spec.steps, spec.topk, spec.draft_tokens, level) * offset
        model = PROFILE.acceptance_for("EAGLE3")
        points = model.difficulty_points()
        dists = [accepted_distribution(model.rates(spec, d)) for d in points]
        probs = [sum(p) / len(points) for p in zip(*dists, strict=True)]
        steps = REQUESTS * (TOKENS - 1) / tau
        histogram = tuple(steps * p for p in probs)
        verify = (TOKENS - 1) / tau
        e2e = tuple(ttft + verify * cycle * (1 + 0.003 * ((i % 3) - 1)) for i in range(n))
        seen_ttft = ttft + verify * cycle - 1.0 if label in self.late else ttft
        return LevelData(
            throughput, e2e, (verify,) * n, seen_ttft, ttft + verify * cycle, TOKENS, histogram, "responses", tau
        )

    def release(self, cand: Candidate) -> None:
        self.released.append(cand.label)


def make_space(tmp_path: Path, table: str) -> TuneSpace:
    path = tmp_path / "specperf.toml"
    path.write_text(CONFIG + table)
    return load_space(load_suite(path, "specperf"))


FULL = 'num_steps = [1, 2, 3, 4, 5, 6]\neagle_topk = [1, 2, 4]\nnum_draft_tokens = "valid"\n'


def share_of_best(space: TuneSpace, label: str, objective: Objective) -> float:
    shapes = {c.label: c.shape for c in (space.reference, *space.candidates)}
    best = max(true_throughput(s, objective.concurrency) for s in shapes.values())
    return true_throughput(shapes[label], objective.concurrency) / best


def test_the_initial_design_reaches_every_position_and_fills_the_cost_fit(tmp_path: Path) -> None:
    space = make_space(tmp_path, FULL)
    design = [c.label for c, _ in initial_design(space)]
    assert design == ["s6-k1-n7", "s6-k4-n25", "s1-k1-n2"]  # deepest chain, widest tree, a shallow config


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_search_finds_the_best_config_per_level_within_the_budget(tmp_path: Path, seed: int) -> None:
    space = make_space(tmp_path, FULL)
    runner = ProfileRunner(space, seed)
    result = run_search(space, runner, ModelSettings())
    assert len(result.starts) <= space.budget == 6
    assert runner.order[:4] == ["plain", "s6-k1-n7", "s6-k4-n25", "s1-k1-n2"]
    assert sorted(runner.released) == sorted(runner.order)  # every server is stopped once measured
    c1, c8 = space.objectives
    assert winner(result, c8)[0].label == "plain"  # speculation loses by 20% at concurrency 8
    assert share_of_best(space, winner(result, c1)[0].label, c1) >= 0.98


def test_it_stops_early_once_the_leaders_are_known(tmp_path: Path) -> None:
    """Chains only, one level where 2-3 steps clearly win: no need to spend the whole budget."""
    table = 'num_steps = [1, 2, 3, 6]\neagle_topk = [1]\nnum_draft_tokens = "valid"\nbudget = 8\n'
    path = tmp_path / "specperf.toml"
    path.write_text(CONFIG.replace("concurrency = [1, 8]", "concurrency = [8]") + table)
    space = load_space(load_suite(path, "specperf"))
    result = run_search(space, ProfileRunner(space, 7, jitter=0.005), ModelSettings(run_cv=0.005))
    assert result.settled and len(result.starts) < 8
    assert winner(result, space.objectives[0])[0].label == "plain"


def test_contention_decides_the_rounds(tmp_path: Path) -> None:
    space = make_space(tmp_path, FULL)
    runner = ProfileRunner(space, 1)
    result = run_search(space, runner, ModelSettings())
    assert runner.rounds["plain"] == space.max_rounds == 4  # the reference anchors every speedup
    assert runner.rounds["s1-k1-n2"] == space.rounds == 2  # out of contention at once
    leader = winner(result, space.objectives[0])[0].label
    assert runner.rounds.get(leader, 4) == 4


def test_a_config_that_fails_to_start_counts_and_is_reported(tmp_path: Path) -> None:
    space = make_space(tmp_path, FULL)
    result = run_search(space, ProfileRunner(space, 1, fail="s6-k4-n25"), ModelSettings())
    assert "s6-k4-n25" in result.failed and len(result.starts) <= space.budget
    error = next(s.error for s in result.starts if s.label == "s6-k4-n25")
    assert error is not None and error.startswith("server 'tune-s6-k4-n25' exited")
    text = "\n".join(result_lines(result, load_suite(tmp_path / "specperf.toml", "specperf")))
    assert "failed to start: s6-k4-n25: server 'tune-s6-k4-n25' exited during startup (exit code 1)" in text


def test_the_report_ranks_explains_and_gives_a_block_to_paste(tmp_path: Path) -> None:
    space = make_space(tmp_path, FULL)
    config = load_suite(tmp_path / "specperf.toml", "specperf")
    result = run_search(space, ProfileRunner(space, 2), ModelSettings())
    lines = result_lines(result, config)
    text = "\n".join(lines)
    assert "chat c1: ranking by best estimate" in text and "chat c8: ranking by best estimate" in text
    assert "more never started:" in text and "ruled out by the model" in text
    assert "chat c8: plain (no speculation): speculation does not pay here" in text
    block = next(b for b in paste_blocks(result, config))
    table = tomllib.loads("\n".join(block[1:]))
    name, server = next(iter(table["specperf"]["servers"].items()))
    parsed = parse_server(name, server, "pasted")
    label = winner(result, space.objectives[0])[0].label
    assert name == f"tuned-{label}" and parsed.num_steps == space.candidate(label).server.num_steps
    assert parsed.draft_model == "org/kimi-k2.5-eagle3" and parsed.algorithm == "EAGLE3"


def test_the_json_document(tmp_path: Path) -> None:
    space = make_space(tmp_path, FULL)
    result = run_search(space, ProfileRunner(space, 3), ModelSettings())
    write_document(tmp_path / "tune.json", result, launcher="sim")
    doc = json.loads((tmp_path / "tune.json").read_text())
    assert doc == tune_document(result, launcher="sim") | {"created": doc["created"]}
    assert doc["starts"] == len(result.starts) and doc["grid"] == 133
    best = {(b["workload"], b["concurrency"]): b for b in doc["best"]}
    assert set(best) == {("chat", 1), ("chat", 8)}
    c1 = best[("chat", 1)]
    assert set(c1["server"]) >= {"num_steps", "eagle_topk", "num_draft_tokens"}
    assert c1["speedup"] > 1.3 and c1["throughput"] > 0 and c1["measured"] in (True, False)
    assert best[("chat", 8)]["config"] == "plain" and best[("chat", 8)]["speedup"] == 1.0
    never = [c for c in doc["candidates"] if not c["started"]]
    assert len(never) == 133 - len(result.observed) and all(c["why_not_started"] for c in never)
    story = next(c for c in doc["candidates"] if c["config"] == "s2-k1-n3")
    assert story["ruled_out_after_starts"] == 4  # the initial design already rules 2 steps / 3 tokens out
    assert doc["model"]["cost"][0]["terms"]["fixed"]["value"] == pytest.approx(22.74, rel=0.05)


def test_a_disturbed_reference_is_measured_again_and_crowns_nothing(tmp_path: Path) -> None:
    """One reference round at concurrency 8 ran at a tenth of the speed (a busy machine): its rounds are
    measured as long again, and no speculative config is crowned by the slow reference."""
    space = make_space(tmp_path, FULL)
    runner = ProfileRunner(space, 11, disturbed=True)
    result = run_search(space, runner, ModelSettings())
    assert runner.rounds["plain"] == 2 * space.max_rounds
    assert winner(result, space.objectives[1])[0].label == "plain"


def test_speculation_must_beat_the_reference_credibly() -> None:
    rng = np.random.default_rng(0)
    ref = rng.normal(0.0, 0.05, 4000)  # a noisy reference
    close = rng.normal(0.02, 0.02, 4000)  # 2% faster, but within the reference's noise
    clear = rng.normal(0.30, 0.02, 4000)
    beliefs = {"plain": _Belief(0.0, 0.0025), "close": _Belief(0.02, 4e-4), "clear": _Belief(0.30, 4e-4)}
    draws = np.column_stack([ref, close])
    assert _recommend(["plain", "close"], draws, beliefs, ["plain", "close"], "close", 0.9)[0] == "plain"
    draws = np.column_stack([ref, clear])
    assert _recommend(["plain", "clear"], draws, beliefs, ["plain", "clear"], "clear", 0.9)[0] == "clear"


def test_answers_that_arrive_all_at_once_do_not_bend_the_cost_fit(tmp_path: Path) -> None:
    """Two configs' streams arrive in one piece (TTFT ~ E2E, as from a starved API server): their E2E is
    right, so the cost fit and the winners are as with timely streams."""
    space = make_space(tmp_path, FULL)
    runner = ProfileRunner(space, 1)
    runner.late = {"s6-k1-n7", "s1-k1-n2"}
    result = run_search(space, runner, ModelSettings())
    fit = result.forecast.cost[space.objectives[0]]
    assert {p.shape for p in fit.points} >= {space.candidate(label).draft for label in runner.late}
    for point in fit.points:
        shape = point.shape
        label = f"s{shape.steps}-k{shape.topk}-n{shape.draft_tokens}"
        truth = PROFILE.cycle_ms(shape.steps, shape.topk, shape.draft_tokens, 1) * runner.offsets[label]
        assert point.cycle_ms == pytest.approx(truth, rel=0.02)
    fixed = fit.coefficient("fixed")
    assert fixed is not None and fixed[0] == pytest.approx(22.74, rel=0.05)
    assert share_of_best(space, winner(result, space.objectives[0])[0].label, space.objectives[0]) >= 0.98


@pytest.mark.parametrize(
    ("settled", "starts", "why"),
    [
        (True, 3, "the leaders were known first"),
        (False, 4, "the budget ran out first"),
        (False, 3, "its expected improvement was below 0.01%"),  # stopped early, the budget not spent
    ],
)
def test_a_config_never_started_says_why_the_search_ended(settled: bool, starts: int, why: str) -> None:
    from types import SimpleNamespace

    from pytest_specperf.tune.output import never_started

    result = SimpleNamespace(
        settled=settled,
        starts=[object()] * starts,
        space=SimpleNamespace(budget=4),
        failed={},
        forecast=SimpleNamespace(best_chance=lambda label: 0.03),
    )
    assert never_started(result, "s2-k1-n3") == f"{why} (chance to beat a leader 3%)"  # type: ignore[arg-type]
