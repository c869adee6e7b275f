"""Two effects on the simulator's step time, measured against its profile: NCCL tuning and eager decode.

- NCCL tuning: the same plain requests on a server started with the tuning variables (NCCL_ALGO,
  NCCL_PROTO, NCCL_MIN_NCHANNELS) and on one without; the profile says every step's communication part
  shrinks, so TPOT untuned / tuned should be `plain_step_ms(1) / plain_step_ms(1, tuned=True)` (1.43 for
  kimi-k2.5-tp8: the phantom baseline's 90 vs 62.9 tok/s).
- Eager decode: with `--cuda-graph-max-bs-decode 1`, a batch of 2 runs without CUDA graphs; TPOT of a
  pair over TPOT alone should be `plain_step_ms(2, cuda_graph_max_bs=1) / plain_step_ms(1)` (1.66),
  not the batch slope alone (1.04).

Timing fidelity is wall-clock: it belongs here, not in the tests (a busy machine's scheduler adds to
every step). Usage: python benchmarks/sim_step_effects.py [--time-scale 0.2] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

from sim_fidelity import Rec, run_round, simulator

from pytest_specperf.sim.profile_files import load_profile

TUNED_ENV = {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL128", "NCCL_MIN_NCHANNELS": "16"}


def tpot(rec: Rec) -> float:
    return (rec.last - rec.first) / (rec.tokens - 1)


def mean_tpot(url: str, prompts: list[str], tokens: int, concurrency: int = 1) -> float:
    return statistics.fmean(tpot(r) for r in run_round(url, prompts, tokens, concurrency))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--time-scale", type=float, default=0.2)
    parser.add_argument("--repeats", type=int, default=3, help="rounds per measured ratio")
    args = parser.parse_args(argv)
    profile = load_profile("kimi-k2.5-tp8")
    base = ["--model-path", profile.server.model_path, "--sim-time-scale", str(args.time_scale)]
    env = dict(os.environ)
    prompts = [f"step effects {i}" for i in range(3)]
    tuned_ratios, eager_ratios = [], []
    for _ in range(args.repeats):
        with simulator(base, env) as untuned, simulator(base, {**env, **TUNED_ENV}) as tuned:
            tuned_ratios.append(mean_tpot(untuned, prompts, 40) / mean_tpot(tuned, prompts, 40))
        with simulator([*base, "--cuda-graph-max-bs-decode", "1"], env) as url:
            alone = mean_tpot(url, ["graph alone"], 60)
            eager_ratios.append(mean_tpot(url, ["graph a", "graph b"], 60, concurrency=2) / alone)
    expected_tuned = profile.plain_step_ms(1) / profile.plain_step_ms(1, tuned=True)
    expected_eager = profile.plain_step_ms(2, cuda_graph_max_bs=1) / profile.plain_step_ms(1)
    print(f"profile kimi-k2.5-tp8, time scale {args.time_scale:g}, {args.repeats} repeats (mean [min, max])")
    for name, ratios, expected in (
        ("TPOT untuned / tuned (NCCL tuning)", tuned_ratios, expected_tuned),
        ("TPOT batch 2 / batch 1 (eager above max bs 1)", eager_ratios, expected_eager),
    ):
        mean = statistics.fmean(ratios)
        print(
            f"{name:<48} measured {mean:.3f} [{min(ratios):.3f}, {max(ratios):.3f}]  "
            f"profile {expected:.3f}  measured/profile {mean / expected:.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
