"""How well does `specperf tune` find the best speculative config, and in how many server starts?

Simulator (`python benchmarks/tune.py sim`): the kimi-k2.5-tp8 profile (Kimi-K2.5 on 8 H200, EAGLE-3),
the space num_steps 1-6 x eagle_topk {1, 2, 4} x every valid num_draft_tokens (132 configs), chat-style
raw prompts at concurrency 1 and 8, 2% start-to-start jitter (`--sim-run-jitter`), a budget of 6 starts.
Each trial is one `specperf tune` run (the library's own search, real simulator servers) with its own
seeds: `--sim-seed` (which drafts each prompt's verify steps accept) and `--sim-start-seed` per start
(each start's speed offset). Reported:

- picks: the config tune recommends per level against the true best, from the profile's own prediction
  (`Profile.predicted_round_throughput`, the numbers the simulator runs on): the true best, or within
  2% of it;
- coverage: a sample of configs (`--check`, default 40, spread over the profile's ranking) is measured
  once, one start each (the same jitter; acceptance draws of their own); for every trial, each of those
  configs the trial did not start is checked: does tune's predicted speedup interval cover the speedup
  it was measured at, over the trial's reference (as if the trial had started it; median rounds, as tune
  reads its own measurements)?
- fidelity: the checking measurements, over a reference start of their own, against the profile's
  prediction (the simulator answers what the search is judged against);
- the story: after how many starts tune rules out 2 draft steps with 3 draft tokens (the config the
  engineer hoped would halve verify time) and what its cost fit says about verify.

vLLM (`python benchmarks/tune.py vllm --python PATH`): the real vLLM CPU build on the tiny local models of
tests/vllm_models.py, ngram num_speculative_tokens 1-6 x prompt_lookup_max {2, 4}: the full grid is
measured once (every config, one reference), then tune runs with a budget of 5 starts; does it pick the
grid's best (or one the grid cannot tell from it)? A CPU shared with other work moves a start's speed by
10-20%, so tune is told `run_to_run_cv = 0.10` there.

Usage:
    python benchmarks/tune.py sim [--trials 20] [--time-scale 0.05] [--check 40] [--seed 1]
    python benchmarks/tune.py vllm [--python PATH] [--models DIR] [--trials 3]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from pytest_specperf.config.settings import SpecperfConfig
from pytest_specperf.config.workloads import load_prompts, request_plan
from pytest_specperf.engines.suite import load_suite
from pytest_specperf.sim.profile import SpecConfig
from pytest_specperf.sim.profile_files import load_profile
from pytest_specperf.sim.text import SimPrompt, chat_prompt
from pytest_specperf.tune.document import write_document
from pytest_specperf.tune.model import ModelSettings, forecast
from pytest_specperf.tune.output import winner
from pytest_specperf.tune.runner import ServerRunner
from pytest_specperf.tune.search import TuneResult, run_search
from pytest_specperf.tune.space import Candidate, Objective, TuneSpace, load_space

SIM_CONFIG = """
[specperf]
launcher = "sim"
model = "moonshotai/Kimi-K2.5"
sim_profile = "kimi-k2.5-tp8"
sim_time_scale = {time_scale}
sim_args = ["--sim-run-jitter", "{jitter}"]
run_to_run_cv = {spread}
rounds = 4

[specperf.servers.plain]

[specperf.servers.eagle3-5step]
algorithm = "EAGLE3"
draft_model = "lightseekorg/kimi-k2.5-eagle3"
num_steps = 5
eagle_topk = 1
num_draft_tokens = 6

[specperf.workloads.chat]
prompts = "builtin:qa"
num_requests = 16
max_new_tokens = 128
ignore_eos = true
concurrency = [1, 8]
warmup = 2

[specperf.tune]
base = "eagle3-5step"
workloads = ["chat"]
num_steps = [1, 2, 3, 4, 5, 6]
eagle_topk = [1, 2, 4]
num_draft_tokens = "valid"
budget = 6
"""

STORY = "s2-k1-n3"  # 2 draft steps, 3 draft tokens: the config the engineer hoped would halve verify


def say(line: str) -> None:
    print(line, flush=True)


def quiet(line: str) -> None:
    pass


# --- the simulator -------------------------------------------------------------------------------


def sim_config(folder: Path, time_scale: float, jitter: float, spread: float) -> SpecperfConfig:
    """The benchmark's config: `jitter` is the simulated node's start-to-start CV, `spread` the one tune is
    told (`run_to_run_cv`): the node's, plus what the shared machine adds to every start."""
    path = folder / "specperf.toml"
    path.write_text(SIM_CONFIG.format(time_scale=time_scale, jitter=jitter, spread=spread))
    return load_suite(path, "specperf")


def profile_speedups(config: SpecperfConfig, space: TuneSpace) -> dict[tuple[str, Objective], float]:
    """The profile's own prediction of every config's speedup at every objective (the truth)."""
    profile = load_profile(config.sim_profile or "kimi-k2.5-tp8")
    out = {}
    for objective in space.objectives:
        workload = config.workloads[objective.workload]
        plan = request_plan(workload, load_prompts(workload.prompts, Path.cwd()))
        shape = {
            "concurrency": objective.concurrency,
            "prompt_tokens": round(statistics.fmean(_sim_tokens(p) for p in plan)),
            "output_tokens": workload.max_new_tokens,
            "num_requests": workload.num_requests,
        }
        ref = profile.predicted_round_throughput(None, **shape)
        out[(space.reference.label, objective)] = 1.0
        for cand in space.candidates:
            spec = SpecConfig("EAGLE3", cand.draft.steps, cand.draft.topk, cand.draft.draft_tokens)
            out[(cand.label, objective)] = profile.predicted_round_throughput(spec, **shape) / ref
    return out


def _sim_tokens(prompt: object) -> int:
    text = prompt.text if prompt.text is not None else chat_prompt(list(prompt.messages))  # type: ignore[attr-defined]
    return SimPrompt.from_text(text).num_tokens


def seeded(space: TuneSpace, trial: int) -> TuneSpace:
    """The space with this trial's seeds on every server: acceptance draws and one speed offset per start."""

    def with_seeds(cand: Candidate, index: int) -> Candidate:
        seeds = ("--sim-seed", str(trial), "--sim-start-seed", str(trial * 1000 + index))
        return replace(cand, server=replace(cand.server, sim_args=(*cand.server.sim_args, *seeds)))

    return replace(
        space,
        reference=with_seeds(space.reference, 0),
        candidates=tuple(with_seeds(c, i) for i, c in enumerate(space.candidates, 1)),
    )


def run_trial(config: SpecperfConfig, space: TuneSpace, trial: int, folder: Path) -> TuneResult:
    trial_space = seeded(space, trial)
    runner = ServerRunner(config, trial_space, folder / f"trial-{trial}")
    try:
        return run_search(trial_space, runner, ModelSettings(run_cv=config.run_to_run_cv))
    finally:
        runner.close()


def check_grid(
    config: SpecperfConfig, space: TuneSpace, labels: list[str], seed: int, folder: Path
) -> dict[tuple[str, Objective], float]:
    """Measure `labels` (and a reference) once each: tok/s for checking, by (label, objective)."""
    grid = seeded(space, seed)
    runner = ServerRunner(config, grid, folder / "check")
    out = {}
    try:
        for number, label in enumerate([grid.reference.label, *labels]):
            cand = grid.candidate(label)
            data = runner.measure(cand, grid.rounds)
            runner.release(cand)
            for objective, level in data.items():
                out[(label, objective)] = level.level
            ref = grid.reference.label
            say(
                f"  checked {number}/{len(labels)}: {label} "
                + ", ".join(f"{o.label} {out[(label, o)] / out[(ref, o)]:.3f}x" for o in grid.objectives)
            )
    finally:
        runner.close()
    return out


def machine_spread(args: argparse.Namespace, folder: Path, pairs: int = 4) -> dict[Objective, float]:
    """The shared machine's own start-to-start CV of a speedup (no simulated jitter): plain and the true
    best config at concurrency 1, on `pairs` pairs of starts; per start, the sd of the log speedup / sqrt 2."""
    config = sim_config(folder / "spread", args.time_scale, 0.0, 0.0)
    space = load_space(config)
    logs: dict[Objective, list[float]] = {o: [] for o in space.objectives}
    for pair in range(pairs):
        grid = seeded(space, 20_000 + pair)
        runner = ServerRunner(config, grid, folder / f"spread-{pair}")
        try:
            data = {}
            for label in (grid.reference.label, "s3-k4-n10"):
                data[label] = runner.measure(grid.candidate(label), grid.rounds)
                runner.release(grid.candidate(label))
        finally:
            runner.close()
        for o in space.objectives:
            logs[o].append(math.log(data["s3-k4-n10"][o].level / data["plain"][o].level))
    return {o: statistics.stdev(v) / math.sqrt(2) for o, v in logs.items()}


def spread_sample(space: TuneSpace, truth: dict[tuple[str, Objective], float], count: int) -> list[str]:
    """`count` configs spread evenly over the profile's ranking at the first objective (all if count >= size)."""
    ranked = sorted((c.label for c in space.candidates), key=lambda label: -truth[(label, space.objectives[0])])
    if count >= len(ranked):
        return ranked
    step = (len(ranked) - 1) / (count - 1)
    return list(dict.fromkeys(ranked[round(i * step)] for i in range(count)))


def main_sim(args: argparse.Namespace) -> int:
    folder = Path(tempfile.mkdtemp(prefix="specperf-tune-bench-"))
    os.environ.setdefault("SPECPERF_LOCK_DIR", str(folder / "locks"))
    say(f"working folder (server logs, each trial's JSON): {folder}")
    config = sim_config(folder, args.time_scale, args.jitter, args.spread)
    space = load_space(config)
    truth = profile_speedups(config, space)
    labels = [space.reference.label, *(c.label for c in space.candidates)]
    say(
        f"space: {len(space.candidates)} configs, objectives {', '.join(o.label for o in space.objectives)}, "
        f"budget {space.budget}, time scale {args.time_scale}, start jitter {args.jitter:.0%}"
    )
    for o in space.objectives:
        best = max(labels, key=lambda label: truth[(label, o)])
        say(f"  true best at {o.label}: {best} {truth[(best, o)]:.3f}x (the profile's prediction)")
    (folder / "spread").mkdir()
    machine = machine_spread(args, folder)
    say(
        "the machine's own start-to-start CV (no simulated jitter, 4 pairs of starts): "
        + ", ".join(f"{o.label} {cv:.1%}" for o, cv in machine.items())
    )
    say(f"  tune is told run_to_run_cv = {args.spread:.0%} (the simulated {args.jitter:.0%} and the machine's)")
    checked: dict[tuple[str, Objective], float] = {}
    if args.check:
        sample = spread_sample(space, truth, args.check)
        say(f"measuring {len(sample)} configs once for checking (one reference start of their own)")
        checked = check_grid(config, space, sample, 10_000 + args.seed, folder)
        ref = space.reference.label
        fidelity = {
            o: [math.log(checked[(lab, o)] / checked[(ref, o)] / truth[(lab, o)]) for lab in sample]
            for o in space.objectives
        }
        for o, errs in fidelity.items():
            say(
                f"  fidelity {o.label}: measured / profile speedup: mean {math.exp(statistics.fmean(errs)):.3f}, "
                f"sd {statistics.pstdev(errs):.1%}"
            )
    rows, covered, checks, story = [], 0, 0, []
    for trial in range(args.seed, args.seed + args.trials):
        started = time.monotonic()
        result = run_trial(config, space, trial, folder)
        picks = []
        ok = True
        for o in space.objectives:
            cand, _ = winner(result, o)
            best = max(truth[(label, o)] for label in labels)
            share = truth[(cand.label, o)] / best
            ok &= share >= 0.98
            picks.append(f"{o.label}: {cand.label} {share:.1%} of best")
            trial_ref = result.observed[space.reference.label][o].level
            for label in [lab for lab, obj in checked if obj == o and lab != space.reference.label]:
                if label in result.observed:
                    continue
                p = result.forecast.outlooks[(label, o)].predicted_speedup
                measured = checked[(label, o)] / trial_ref
                hit = p is not None and p.low <= measured <= p.high
                checks += 1
                covered += hit
                if not hit and p is not None and args.misses:
                    say(
                        f"    not covered: {label} {o.label} measured {measured:.3f}x, predicted {p.value:.3f}x "
                        f"[{p.low:.3f}, {p.high:.3f}]"
                    )
        write_document(folder / f"trial-{trial}.json", result, launcher="sim")
        story.append(result.ruled_out_after(STORY))
        rows.append((len(result.starts), ok))
        say(
            f"trial {trial}: {len(result.starts)} starts, {'OK' if ok else 'MISS'}: {'; '.join(picks)} "
            f"({time.monotonic() - started:.0f} s; {result.stopped})"
        )
    hits = sum(ok for _, ok in rows)
    starts = [n for n, _ in rows]
    say("")
    say(
        f"picked the true best or within 2% at every level: {hits}/{len(rows)} trials ({hits / len(rows):.0%}); "
        f"starts: median {statistics.median(starts):g}, max {max(starts)} (full grid: {len(labels)})"
    )
    if checks:
        say(
            f"predicted speedup interval covers the measured one: {covered}/{checks} ({covered / checks:.0%}) "
            f"of the checked configs the trials did not start"
        )
    known = [s for s in story if s is not None]
    if known:
        say(
            f"{STORY} (2 steps, 3 draft tokens) ruled out after {statistics.median(known):g} starts (median; "
            f"{len(known)}/{len(story)} trials rule it out)"
        )
    _story_fit(config, space, folder)
    return 0


def _story_fit(config: SpecperfConfig, space: TuneSpace, folder: Path) -> None:
    """The cost fit after the initial design alone, and what it predicts for 2 steps / 3 tokens at c1."""
    trial_space = seeded(space, 99)
    runner = ServerRunner(config, trial_space, folder / "story")
    observed = {}
    try:
        from pytest_specperf.tune.search import initial_design

        for cand in [trial_space.reference, *(c for c, _ in initial_design(trial_space)[: space.budget - 2])]:
            observed[cand.label] = dict(runner.measure(cand, space.rounds))
            runner.release(cand)
    finally:
        runner.close()
    fc = forecast(trial_space, observed, ModelSettings(run_cv=config.run_to_run_cv))
    c1 = space.objectives[0]
    fit = fc.cost[c1]
    parts = {t: fit.coefficient(t) for t in fit.terms}
    scale = config.sim_time_scale
    text = ", ".join(f"{t} {v[0] / scale:.2f} ms" for t, v in parts.items() if v is not None)
    o = fc.outlooks[(STORY, c1)]
    p = o.predicted_speedup
    say(f"after the {len(observed)} starts of the initial design, the cost fit at {c1.label} (modelled ms): {text}")
    if p is not None:
        say(
            f"  {STORY} predicted at {p.value:.2f}x [{p.low:.2f}, {p.high:.2f}], chance to beat the leader "
            f"{o.chance:.1%}; leader {fc.leaders[c1]}"
        )


# --- vLLM ----------------------------------------------------------------------------------------

VLLM_CONFIG = """
[specperf]
engine = "vllm"
python = "{python}"
model = "{target}"
rounds = 4
startup_timeout = 300
stop_timeout = 20
run_to_run_cv = 0.10
env = {{ VLLM_CPU_KVCACHE_SPACE = "1", VLLM_HOST_IP = "127.0.0.1" }}

[specperf.servers.plain]
args = ["--enforce-eager"]

[specperf.servers.ngram]
args = ["--enforce-eager"]
speculative_config = {{ method = "ngram", num_speculative_tokens = 3, prompt_lookup_max = 4, prompt_lookup_min = 2 }}

[specperf.workloads.chat]
prompts = "builtin:qa"
num_requests = 8
max_new_tokens = 128
ignore_eos = true
concurrency = [1]
warmup = 2

[specperf.tune]
base = "ngram"
workloads = ["chat"]
num_speculative_tokens = [1, 2, 3, 4, 5, 6]
prompt_lookup_max = [2, 4]
prompt_lookup_min = [2]
budget = 5
"""


def main_vllm(args: argparse.Namespace) -> int:
    python = (
        args.python
        or subprocess.run(["bash", ".ci/vllm-venv"], check=True, capture_output=True, text=True)
        .stdout.strip()
        .splitlines()[-1]
    )
    models = Path(args.models)
    sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
    import vllm_models

    if not vllm_models.is_built(models):
        subprocess.run([python, str(Path(vllm_models.__file__)), str(models)], check=True, cwd="/")
    folder = Path(tempfile.mkdtemp(prefix="specperf-tune-vllm-"))
    os.environ.setdefault("SPECPERF_LOCK_DIR", str(folder / "locks"))
    path = folder / "specperf.toml"
    path.write_text(VLLM_CONFIG.format(python=python, target=vllm_models.model_paths(models)["target"]))
    config = load_suite(path, "specperf")
    space = load_space(config)
    say(f"vLLM grid: {len(space.candidates)} configs + the reference, measured once")
    grid = ServerRunner(config, space, folder / "grid", progress=quiet)
    measured = {}
    try:
        for cand in (space.reference, *space.candidates):
            started = time.monotonic()
            measured[cand.label] = dict(grid.measure(cand, config.rounds))
            grid.release(cand)
            o = space.objectives[0]
            say(f"  {cand.label}: {measured[cand.label][o].level:.1f} tok/s ({time.monotonic() - started:.0f} s)")
    finally:
        grid.close()
    o = space.objectives[0]
    full = forecast(space, measured, ModelSettings(run_cv=config.run_to_run_cv))
    grid_best = max(measured, key=lambda label: measured[label][o].level)
    say(f"grid best (highest measured tok/s): {grid_best}")
    tied = [label for label in measured if _indistinguishable(full, label, grid_best, o)]
    say(f"  configs the grid cannot tell from it (90%): {', '.join(sorted(tied))}")
    hits = 0
    for trial in range(args.trials):
        runner = ServerRunner(config, space, folder / f"trial-{trial}", progress=quiet)
        try:
            result = run_search(space, runner, ModelSettings(run_cv=config.run_to_run_cv), say if trial == 0 else quiet)
        finally:
            runner.close()
        cand, _ = winner(result, o)
        ok = cand.label == grid_best or cand.label in tied
        hits += ok
        say(
            f"trial {trial}: {len(result.starts)} starts, picked {cand.label} ({'OK' if ok else 'MISS'}; grid best "
            f"{grid_best}); {result.stopped}"
        )
    say(f"picked the grid's best (or one it cannot tell apart): {hits}/{args.trials}")
    return 0


def _indistinguishable(fc: object, label: str, best: str, objective: Objective) -> bool:
    """The grid's own measurements cannot order `label` and `best` with 90% confidence."""
    outlooks = fc.outlooks  # type: ignore[attr-defined]
    a, b = outlooks[(label, objective)], outlooks[(best, objective)]
    if a.throughput is None or b.throughput is None:
        return False
    return label == best or a.throughput.high >= b.throughput.low


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="lane", required=True)
    sim = sub.add_parser("sim", help="the simulated Kimi node")
    sim.add_argument("--trials", type=int, default=20)
    sim.add_argument("--time-scale", type=float, default=0.05)
    sim.add_argument("--jitter", type=float, default=0.02, help="the simulated node's start-to-start CV")
    sim.add_argument("--spread", type=float, default=0.03, help="run_to_run_cv tune is told (node + machine)")
    sim.add_argument("--check", type=int, default=40, help="configs measured once for checking (0: none)")
    sim.add_argument("--seed", type=int, default=1)
    sim.add_argument("--misses", action="store_true", help="list every checked config an interval missed")
    vllm = sub.add_parser("vllm", help="the real vLLM CPU build on tiny local models")
    vllm.add_argument("--python", help="a python with vLLM 0.32.0 (default: .ci/vllm-venv's)")
    vllm.add_argument("--models", default=str(Path.home() / ".cache/pytest-specperf/vllm-models"))
    vllm.add_argument("--trials", type=int, default=3)
    args = parser.parse_args(argv)
    return main_sim(args) if args.lane == "sim" else main_vllm(args)


if __name__ == "__main__":
    sys.exit(main())
