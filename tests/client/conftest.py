"""Simulators the client tests share, from the one harness (`simharness`): an EAGLE3 server with
metrics and a plain one, both at a tenth of real time so requests overlap as on a real server.
`sim_factory` (tests/conftest.py) starts a server a test needs for itself."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from simharness import SPEC_ARGS, TENTH_TIME, Sim, running_sim


@pytest.fixture(scope="module")
def spec_sim() -> Iterator[Sim]:
    with running_sim([*TENTH_TIME, *SPEC_ARGS, "--enable-metrics"]) as sim:
        yield sim


@pytest.fixture(scope="module")
def plain_sim() -> Iterator[Sim]:
    with running_sim([*TENTH_TIME, "--max-running-requests", "64"]) as sim:
        yield sim
