"""Simulators the simulator's own tests share, from the one harness (`simharness`): a plain, a
deterministic and an EAGLE3 server running as fast as possible, and refused launches run to their end.
`sim_factory` (tests/conftest.py) starts a server a test needs for itself."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from simharness import SPEC_ARGS, Sim, run_sim, running_sim


@pytest.fixture(scope="session")
def plain_sim() -> Iterator[Sim]:
    """A plain (reference) server running as fast as possible."""
    with running_sim(["--tp-size", "8", "--sim-time-scale", "0", "--enable-metrics"]) as sim:
        yield sim


@pytest.fixture(scope="session")
def deterministic_sim() -> Iterator[Sim]:
    """A plain server with --enable-deterministic-inference: the only mode where SGLang honours sampling_seed."""
    with running_sim(["--sim-time-scale", "0", "--enable-deterministic-inference"]) as sim:
        yield sim


@pytest.fixture(scope="session")
def spec_sim() -> Iterator[Sim]:
    """An EAGLE3 5/1/6 server running as fast as possible."""
    args = ["--tp-size", "8", "--sim-time-scale", "0", "--enable-metrics", "--attention-backend", "fa3"]
    with running_sim([*args, "--trust-remote-code", *SPEC_ARGS]) as sim:
        yield sim


@pytest.fixture
def run_sim_cli() -> Callable[..., object]:
    """``run_sim_cli(args, timeout=20, env=None) -> CompletedProcess`` for launches that must exit."""
    return run_sim


@pytest.fixture(scope="session")
def spec_args() -> list[str]:
    """EAGLE3 5 steps / topk 1 / 6 draft tokens: the story's first configuration."""
    return list(SPEC_ARGS)
