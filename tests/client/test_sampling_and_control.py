"""Sampling seed in request bodies, and control calls whose transport fails."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
from simharness import Sim, free_port

from pytest_specperf.config.workloads import Prompt, SamplingParams, WorkloadConfig
from pytest_specperf.engines.base import openai_sampling
from pytest_specperf.engines.sglang import sampling_params
from pytest_specperf.errors import ServerError, StalledServer
from pytest_specperf.measure.http import ServerClient

SECRET = "sk-flush-0123456789abcdef"
CHAT = Prompt("c1", None, ({"role": "user", "content": "Say something random."},), "chat")


def text_prompts(n: int) -> list[Prompt]:
    return [Prompt(f"p{i}", f"Prompt {i}: say something about {i * 7}.", None, "x") for i in range(n)]


# ---------------------------------------------------------------------------------------------
# sampling seed


def test_seed_sent_only_when_sampling() -> None:
    assert "sampling_seed" not in sampling_params(SamplingParams(16))
    assert "sampling_seed" not in sampling_params(SamplingParams(16, temperature=0.0, sampling_seed=3))
    assert "seed" not in openai_sampling(SamplingParams(16, temperature=0.0, sampling_seed=3))
    sampled = SamplingParams(16, temperature=0.7, sampling_seed=3)
    assert sampling_params(sampled)["sampling_seed"] == 3
    assert openai_sampling(sampled)["seed"] == 3
    assert "sampling_seed" not in openai_sampling(sampled)  # not an OpenAI field
    assert "sampling_seed" not in sampling_params(SamplingParams(16, temperature=0.7))


def test_from_workload_seeds_sampling_only_above_temperature_zero() -> None:
    sampled = SamplingParams.from_workload(WorkloadConfig(name="w", temperature=0.7, top_p=0.9, seed=11))
    assert sampled == SamplingParams(256, 0.7, 0.9, False, 11)
    greedy = SamplingParams.from_workload(WorkloadConfig(name="w", seed=11))
    assert greedy.sampling_seed is None and greedy.temperature == 0.0


def test_seeded_sampling_is_reproducible_on_both_endpoints(sim_factory) -> None:
    """With --enable-deterministic-inference, as SGLang: without it the seed is ignored (next test)."""
    client = sim_factory(["--enable-deterministic-inference", "--sim-time-scale", "0"]).client()
    seeded = SamplingParams.from_workload(WorkloadConfig(name="w", max_new_tokens=24, temperature=0.8, seed=5))
    for prompt in (*text_prompts(2), CHAT):
        first = client.generate(prompt, seeded, 0, time.perf_counter())
        again = client.generate(prompt, seeded, 1, time.perf_counter())
        assert first.ok and again.ok, (first.error, again.error)  # the server accepts the seed key
        assert first.output_hash == again.output_hash
    a, b = (client.generate(p, seeded, 0, time.perf_counter()) for p in text_prompts(2))
    assert a.output_hash != b.output_hash  # one workload seed, yet each prompt draws its own tokens


def test_without_deterministic_inference_the_seed_does_not_fix_the_draw(plain_sim: Sim) -> None:
    """SGLang builds per-request seeds only in deterministic mode (sampling_batch_info.py): the simulator too."""
    client = plain_sim.client()
    seeded = SamplingParams.from_workload(WorkloadConfig(name="w", max_new_tokens=24, temperature=0.8, seed=5))
    prompt = text_prompts(1)[0]
    hashes = {client.generate(prompt, seeded, i, time.perf_counter()).output_hash for i in range(3)}
    assert len(hashes) == 3


# ---------------------------------------------------------------------------------------------
# flush_cache transport failures


def check_server_error(exc: pytest.ExceptionInfo[ServerError], url: str, reason: str) -> None:
    message = str(exc.value)
    assert f"{url}/flush_cache" in message and reason in message, message
    assert SECRET not in message
    assert exc.value.__cause__ is None and exc.value.__suppress_context__


def test_flush_cache_on_a_closed_port_is_a_server_error() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    client = ServerClient(url, api_key=SECRET, request_timeout=2)
    with pytest.raises(ServerError) as exc:
        client.flush_cache(timeout=1)
    check_server_error(exc, url, "connection refused")


@pytest.fixture
def silent_listener() -> Iterator[str]:
    """A port that accepts connections (kernel backlog) and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(4)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_flush_cache_timeout_is_a_server_error(silent_listener: str) -> None:
    client = ServerClient(silent_listener, api_key=SECRET)
    with pytest.raises(ServerError) as exc:  # the listener never answers: only the timeout ends the call
        client.flush_cache(timeout=1)
    check_server_error(exc, silent_listener, "timeout")
    assert isinstance(exc.value, StalledServer)  # a hung server: the session stops it


@pytest.fixture
def garbage_server() -> Iterator[str]:
    """Answers every connection with a non-HTTP line and closes it."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(4)
    sock.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(2)
                conn.recv(65536)
                conn.sendall(b"NOT HTTP AT ALL\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    stop.set()
    thread.join(timeout=5)
    sock.close()


def test_flush_cache_bad_http_answer_is_a_server_error(garbage_server: str) -> None:
    client = ServerClient(garbage_server, api_key=SECRET)
    with pytest.raises(ServerError) as exc:
        client.flush_cache(timeout=1)
    check_server_error(exc, garbage_server, "bad HTTP answer")
