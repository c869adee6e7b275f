"""The simulator over several nodes, as SGLang's multi-node serving: rank 0 turns ready only once every
rank has joined it at --dist-init-addr, a rank that dies takes the server down, a rank 0 that is gone
ends the others, and a rank that never joins fails the start naming it. Real processes on 127.0.0.1."""

from __future__ import annotations

import subprocess

import pytest
import requests
from simharness import sim_command

from pytest_specperf.servers.launch import free_port
from pytest_specperf.sim.cli import SimConfigError, parse_config


def launch(rank: int, nodes: int, http: int, dist: int, *extra: str) -> subprocess.Popen[str]:
    argv = ["--model-path", "m", "--port", str(http), "--sim-time-scale", "0", "--nnodes", str(nodes)]
    argv += ["--node-rank", str(rank), "--dist-init-addr", f"127.0.0.1:{dist}", *extra]
    return subprocess.Popen(sim_command(argv), stderr=subprocess.PIPE, text=True, bufsize=1)


def wait_for(proc: subprocess.Popen[str], words: str) -> list[str]:
    """The log lines up to the first that holds `words` (the process's stderr, read as it is written)."""
    seen = []
    assert proc.stderr is not None
    for line in proc.stderr:
        seen.append(line)
        if words in line:
            return seen
    raise AssertionError(f"the log ended without {words!r}:\n{''.join(seen)}")


@pytest.fixture
def ports() -> tuple[int, int]:
    """Rank 0's HTTP port and its --dist-init-addr port: two ports, never the same one twice."""
    http = free_port()
    dist = free_port()
    while dist == http:
        dist = free_port()
    return http, dist


def test_rank_0_is_ready_only_once_the_other_rank_joined_and_goes_down_when_it_dies(ports) -> None:
    http, dist = ports
    zero = launch(0, 2, http, dist)
    try:
        wait_for(zero, "waiting for node rank(s) 1 to join at 127.0.0.1:")
        assert requests.get(f"http://127.0.0.1:{http}/health_generate", timeout=5).status_code == 503
        one = launch(1, 2, http, dist)
        wait_for(zero, "The server is fired up and ready to roll!")
        assert requests.get(f"http://127.0.0.1:{http}/health_generate", timeout=5).status_code == 200
        one.kill()
        one.wait(timeout=30)
        lines = wait_for(zero, "node rank 1 left")
        assert "the server cannot serve without it" in lines[-1]
        assert zero.wait(timeout=30) == 1
    finally:
        for proc in (zero, locals().get("one")):
            if proc is not None and proc.poll() is None:
                proc.kill()


def test_the_other_ranks_exit_once_rank_0_is_gone(ports) -> None:
    http, dist = ports
    zero, one = launch(0, 2, http, dist), launch(1, 2, http, dist)
    try:
        wait_for(zero, "The server is fired up and ready to roll!")
        zero.terminate()
        assert zero.wait(timeout=30) == 0
        wait_for(one, "rank 0 at 127.0.0.1:")
        assert one.wait(timeout=30) == 1
    finally:
        for proc in (zero, one):
            if proc.poll() is None:
                proc.kill()


def test_a_rank_that_never_joins_fails_the_start_naming_it_and_the_address(ports) -> None:
    http, dist = ports
    zero = launch(0, 3, http, dist, "--dist-timeout", "1")
    try:
        lines = wait_for(zero, "did not join")
        assert f"node rank(s) 1, 2 did not join at 127.0.0.1:{dist} within 1 s" in lines[-1]
        assert zero.wait(timeout=30) == 1
    finally:
        if zero.poll() is None:
            zero.kill()


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["--nnodes", "2"], "--nnodes > 1 needs --dist-init-addr HOST:PORT"),
        (["--nnodes", "2", "--node-rank", "2", "--dist-init-addr", "h:1"], "--node-rank must be in [0, --nnodes)"),
        (["--nnodes", "2", "--dist-init-addr", "h"], "--dist-init-addr must be HOST:PORT, got 'h'"),
    ],
)
def test_bad_multi_node_arguments_are_refused(argv: list[str], error: str) -> None:
    with pytest.raises(SimConfigError, match=error.replace("[", r"\[").replace(")", r"\)")):
        parse_config(["--model-path", "m", *argv])


def test_a_stop_while_waiting_for_the_other_ranks_is_a_clean_exit(ports) -> None:
    """SIGTERM during the join (a teardown before the server was ready) is no failure of the server."""
    http, dist = ports
    zero = launch(0, 2, http, dist)
    try:
        wait_for(zero, "waiting for node rank(s) 1 to join")
        zero.terminate()
        assert zero.wait(timeout=30) == 0
    finally:
        if zero.poll() is None:
            zero.kill()
