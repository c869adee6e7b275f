"""Fault switches: each failure path a launcher or a measurement must survive, made real."""

from __future__ import annotations

import threading
import time

import pytest
import requests


def test_fail_at_startup(run_sim_cli):
    res = run_sim_cli(["--sim-fail-at-startup"])
    assert res.returncode not in (0, 2)
    assert "torch.OutOfMemoryError: CUDA out of memory" in res.stderr
    assert "ready to roll" not in res.stderr


def test_startup_seconds_then_ready(sim_factory):
    t0 = time.monotonic()
    sim = sim_factory(["--sim-time-scale", "0", "--sim-startup-seconds", "0.6"], wait=False)
    seen: list[tuple[int | None, ...]] = []
    while time.monotonic() < t0 + 20:
        assert sim.proc.poll() is None, sim.log()
        try:
            probe = (
                requests.get(sim.url + "/health_generate", timeout=2).status_code,
                requests.get(sim.url + "/ready", timeout=2).status_code,
                requests.post(sim.url + "/generate", json={"text": "x"}, timeout=2).status_code,
            )
        except requests.ConnectionError:
            probe = (None, None, None)
        seen.append(probe)
        if probe[0] == 200:
            break
        time.sleep(0.02)  # poll interval
    ready_after = time.monotonic() - t0
    assert (503, 503, 503) in seen  # HTTP is up during startup, but neither healthy nor serving
    assert seen[-1] == (200, 200, 200)
    assert ready_after >= 0.6


def test_never_ready(sim_factory):
    sim = sim_factory(["--sim-time-scale", "0", "--sim-never-ready"], wait=False)
    sim.wait_ready(path="/server_info")  # HTTP is up...
    for _ in range(5):
        assert sim.get("/health_generate").status_code == 503  # ...but never healthy
        assert sim.get("/ready").status_code == 503
        assert sim.get("/health").status_code == 503
    assert sim.get("/server_info").json()["status"] == "starting"
    assert sim.proc.poll() is None
    assert "never finishes" in sim.log()


def test_exit_after_requests_cuts_in_flight_streams(sim_factory):
    sim = sim_factory(["--sim-time-scale", "0.05", "--sim-exit-after-requests", "3"])
    chunks: list[bytes] = []
    started = threading.Event()

    def long_stream() -> None:
        body = {"text": "long", "stream": True, "sampling_params": {"max_new_tokens": 2000, "ignore_eos": True}}
        try:
            with requests.post(sim.url + "/generate", json=body, stream=True, timeout=30) as r:
                for line in r.iter_lines():
                    chunks.append(line)
                    started.set()
        except requests.RequestException:
            pass
        started.set()

    t = threading.Thread(target=long_stream)
    t.start()
    assert started.wait(10)
    for i in range(3):
        assert sim.generate(f"short {i}", max_new_tokens=2)["meta_info"]["completion_tokens"] == 2
    assert sim.proc.wait(10) != 0
    t.join(10)
    assert chunks and b"data: [DONE]" not in chunks  # the in-flight stream was cut
    with pytest.raises(requests.ConnectionError):
        requests.get(sim.url + "/health", timeout=2)
    assert "simulated by --sim-exit-after-requests 3" in sim.log()


def _statuses(sim, n: int) -> list[int]:
    return [
        sim.post("/generate", json={"text": f"e{i}", "sampling_params": {"max_new_tokens": 1}}).status_code
        for i in range(n)
    ]


def test_error_rate_is_seeded(sim_factory):
    args = ["--sim-time-scale", "0", "--sim-error-rate", "0.3", "--sim-seed", "11"]
    first = _statuses(sim_factory(args), 40)
    second = _statuses(sim_factory(args), 40)
    assert first == second
    assert set(first) == {200, 500}
    assert 4 <= first.count(500) <= 20


def test_error_rate_applies_to_openai_endpoints(sim_factory):
    sim = sim_factory(["--sim-time-scale", "0", "--sim-error-rate", "1"])
    assert sim.post("/v1/completions", json={"prompt": "x"}).status_code == 500
    assert sim.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]}).status_code == 500
    r = sim.post("/generate", json={"text": "x"})
    assert r.status_code == 500 and "sim-error-rate" in r.json()["error"]["message"]
    assert sim.get("/health_generate").status_code == 200  # health checks are not generation calls


def test_lossy_rate_makes_outputs_diverge(sim_factory, plain_sim, spec_args):
    lossy = sim_factory(["--sim-time-scale", "0", "--sim-lossy-rate", "1", *spec_args])
    prompts = [f"lossy {i}" for i in range(5)]
    for p in prompts:
        ref = plain_sim.generate(p, max_new_tokens=40, ignore_eos=True)["output_ids"]
        out = lossy.generate(p, max_new_tokens=40, ignore_eos=True)["output_ids"]
        assert out != ref
        first_diff = next(i for i, (a, b) in enumerate(zip(ref, out, strict=True)) if a != b)
        assert first_diff >= 1  # the prefill token comes from the target model
