"""Fixtures: real simulator subprocesses for the client tests (see `simproc`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from simproc import SPEC_ARGS, SimServer, start_sim


@pytest.fixture
def sim_factory() -> Iterator[Callable[..., SimServer]]:
    """Start simulators for one test; all are stopped (TERM, then KILL) at teardown."""
    started: list[SimServer] = []

    def factory(*args: str, api_key: str | None = None, time_scale: float = 0.1) -> SimServer:
        server = start_sim(*args, api_key=api_key, time_scale=time_scale)
        started.append(server)
        return server

    yield factory
    for server in started:
        server.stop()
        server.log.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def spec_sim() -> Iterator[SimServer]:
    server = start_sim(*SPEC_ARGS, "--enable-metrics")
    yield server
    server.stop()
    server.log.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def plain_sim() -> Iterator[SimServer]:
    server = start_sim("--max-running-requests", "64")
    yield server
    server.stop()
    server.log.unlink(missing_ok=True)
