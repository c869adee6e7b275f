"""The simulator's night-shape and session-noise flags (sim/nights.py draws from them).

Why a module of its own: the shapes of a start's speed (night, heavy tails, correlated nights, node
pools, drifts, steps) and the noise a session shares or an engine mode makes (the node's speed, eager
mode's round spread, a warm-up ramp at high concurrency) are one concept, the noise of real nights,
and sim/cli.py parses everything else. Standard library only.
"""

from __future__ import annotations

import argparse
import math


def add_night_flags(group: argparse._ArgumentGroup) -> None:
    """The --sim-night flags and the session-noise flags, on the simulator's argument group."""
    group.add_argument(
        "--sim-night",
        type=int,
        metavar="N",
        help="which night this start belongs to: the start's speed then comes from the night shapes below "
        "(sim/nights.py) with --sim-run-jitter as their spread; without it and them, the plain draw",
    )
    group.add_argument(
        "--sim-run-jitter-df",
        type=float,
        default=math.inf,
        metavar="DF",
        help="heavy tails: start offsets from a Student t with DF degrees of freedom (> 2)",
    )
    group.add_argument(
        "--sim-night-rho",
        type=float,
        default=0.0,
        metavar="R",
        help="nights' offsets AR(1)-correlated at R; a night's starts share it",
    )
    group.add_argument(
        "--sim-pool-share",
        type=float,
        default=0.0,
        metavar="P",
        help="a mixed node pool: a start lands on the slow pool with probability P",
    )
    group.add_argument(
        "--sim-pool-slowdown",
        type=float,
        default=0.0,
        metavar="F",
        help="how much slower the slow pool is (0.12 = 12%%)",
    )
    group.add_argument(
        "--sim-drift-per-night",
        type=float,
        default=0.0,
        metavar="D",
        help="a slow drift: log speed change per night (-0.003 = -0.3%% a night)",
    )
    group.add_argument("--sim-step-at-night", type=int, metavar="N", help="a level shift from night N on")
    group.add_argument("--sim-step", type=float, default=0.0, metavar="F", help="its size (-0.1 = 10%% slower)")
    group.add_argument(
        "--sim-node-swing",
        type=float,
        default=0.0,
        metavar="SD",
        help="the node's speed, shared by every server of a session (give them one --sim-node-seed): log-normal "
        "with this SD per --sim-night, clipped at x3 either way (0.5: the swings of shared CPU runners)",
    )
    group.add_argument("--sim-node-seed", type=int, default=0, metavar="N", help="the node's seed (default 0)")
    group.add_argument(
        "--sim-eager",
        action="store_true",
        help="round spread of eager mode (no CUDA graphs): a CV of 19%% at concurrency 1, falling with the batch",
    )
    group.add_argument(
        "--sim-warmup-ramp",
        type=float,
        default=0.0,
        metavar="F",
        help="at concurrency 8 and more the first round runs F slower, the next ones less (0.4: 40%%)",
    )


def session_noise_problems(args: argparse.Namespace) -> list[str]:
    """What is wrong with the session-noise flags, one sentence each (sim/cli.py raises them)."""
    problems = []
    if not 0.0 <= args.sim_node_swing <= 1.0:
        problems.append(f"--sim-node-swing must be a log SD in [0, 1] (got {args.sim_node_swing})")
    if not 0.0 <= args.sim_warmup_ramp < 1.0:
        problems.append(f"--sim-warmup-ramp must be in [0, 1) (got {args.sim_warmup_ramp})")
    return problems
