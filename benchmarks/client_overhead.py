"""Is the client the bottleneck? Client CPU per chunk, highest sustained request rate, tok/s agreement.

Starts the simulator (``python -m pytest_specperf.sim``) at ``--sim-time-scale 0`` in another process,
so every delay the simulator models is zero and the pipeline runs as fast as the two processes can.

Measures:

(a) client CPU per streamed chunk: this process's CPU time (``time.process_time()``, all threads)
    during a closed-loop round, divided by the chunks received. Goal: < 50 µs.
(b) the highest Poisson request rate the client sustains (1-token requests, so the simulator does as
    little as possible per request): for each offered rate, the achieved send
    rate ``(n - 1) / (last sent - first sent)`` must be >= 95% of the offered rate and the p99
    lateness of sends against the seeded schedule < 50 ms. (If the simulator itself saturates
    first, the rate reported is a lower bound for the client; the client CPU share is printed.)
(c) at concurrency 64, output tok/s as counted by the client vs by the simulator:
      client    = Σ completion_tokens / (max last_chunk - min sent)   (docs/metrics.md round throughput)
      simulator = Δ sglang:generation_tokens_total (scraped just before and after the round)
                  / the same (max last_chunk - min sent) wall interval
    The two agree when the client neither loses tokens nor delays reading them. Goal: within 2%.

Run: ``python benchmarks/client_overhead.py [--requests 512] [--tokens 256]``.
"""

from __future__ import annotations

import argparse
import random
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

from pytest_specperf.common.transport import probe
from pytest_specperf.config.workloads import Prompt, SamplingParams
from pytest_specperf.measure.http import ServerClient
from pytest_specperf.measure.load import RoundResult, run_requests

_METRIC = re.compile(r"^sglang:generation_tokens_total(?:\{[^}]*\})?\s+([0-9.eE+-]+)\s*$", re.M)


def start_simulator(max_running: int) -> tuple[subprocess.Popen[bytes], str, Path]:
    """Start the simulator with metrics on, and return once /health_generate answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = Path(tempfile.mkstemp(prefix="specperf-bench-sim-", suffix=".log")[1])
    argv = [
        sys.executable,
        "-m",
        "pytest_specperf.sim",
        "--model-path",
        "sim/bench-model",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--sim-time-scale",
        "0",
        "--enable-metrics",
        "--max-running-requests",
        str(max_running),
        "--log-level",
        "warning",
    ]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while not probe(url, "/health_generate", 2):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"simulator did not start:\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.05)
    return proc, url, log


def make_prompts(n: int) -> list[Prompt]:
    return [
        Prompt(f"b{i}", f"Benchmark prompt {i}: describe the number {i} in detail.", None, "bench") for i in range(n)
    ]


def generation_tokens(client: ServerClient) -> float:
    text = client.metrics_text() or ""
    return sum(float(v) for v in _METRIC.findall(text))


class SimCpu:
    """CPU seconds used by the simulator process (all threads), to tell who saturates first."""

    process: psutil.Process | None = None

    @classmethod
    def seconds(cls) -> float:
        if cls.process is None:
            return 0.0
        times = cls.process.cpu_times()
        return times.user + times.system


def timed_round(
    client: ServerClient, n: int, sampling: SamplingParams, concurrency: int, rate: float | None = None
) -> tuple[RoundResult, float, float]:
    """One round, the client process CPU seconds it cost, and the simulator's."""
    cpu, sim_cpu = time.process_time(), SimCpu.seconds()
    result = run_requests(client, make_prompts(n), sampling, concurrency=concurrency, request_rate=rate, seed=1)
    return result, time.process_time() - cpu, SimCpu.seconds() - sim_cpu


def cpu_per_chunk(client: ServerClient, n: int, tokens: int, concurrency: int) -> None:
    result, cpu, sim_cpu = timed_round(client, n, SamplingParams(tokens, ignore_eos=True), concurrency)
    chunks = sum(r.num_chunks for r in result.records)
    errors = sum(not r.ok for r in result.records)
    print(
        f"(a) concurrency {concurrency:>3}: {n} requests x {tokens} tokens, {chunks} chunks in {result.duration:.2f} s;"
        f" client CPU {cpu:.3f} s = {cpu / chunks * 1e6:.1f} µs/chunk ({cpu / result.duration:.0%} of one core;"
        f" simulator {sim_cpu / result.duration:.0%}), {errors} errors"
    )


def schedule(n: int, rate: float, seed: int) -> list[float]:
    rng, t, out = random.Random(seed), 0.0, []
    for _ in range(n):
        out.append(t)
        t += rng.expovariate(rate)
    return out


def rate_check(client: ServerClient, rate: float, seconds: float) -> bool:
    n = max(50, int(rate * seconds))
    result, cpu, sim_cpu = timed_round(client, n, SamplingParams(1), 512, rate)
    sent = [r.sent for r in result.records]
    late = sorted(s - e for s, e in zip(sent, schedule(n, rate, 1), strict=True))
    p99 = late[min(len(late) - 1, int(0.99 * len(late)))]
    achieved = (n - 1) / (max(sent) - min(sent))
    errors = sum(not r.ok for r in result.records)
    ok = achieved >= 0.95 * rate and p99 < 0.05 and errors == 0
    verdict = "sustained" if ok else "NOT sustained"
    print(
        f"(b) offered {rate:>6.0f} req/s: achieved {achieved:>7.1f} req/s, p99 send lateness {p99 * 1e3:6.1f} ms,"
        f" CPU: client {cpu / result.duration:.0%}, simulator {sim_cpu / result.duration:.0%} of one core;"
        f" {errors} errors -> {verdict}"
    )
    return ok


def throughput_agreement(client: ServerClient, n: int, tokens: int, concurrency: int) -> None:
    before = generation_tokens(client)
    result, _, _ = timed_round(client, n, SamplingParams(tokens, ignore_eos=True), concurrency)
    after = generation_tokens(client)
    ok = [r for r in result.records if r.ok]
    span = max(r.last_chunk or 0.0 for r in ok) - min(r.sent for r in ok)
    client_tps = sum(r.completion_tokens for r in ok) / span
    sim_tps = (after - before) / span
    print(
        f"(c) concurrency {concurrency}: client {client_tps:,.0f} tok/s, simulator {sim_tps:,.0f} tok/s over the same"
        f" {span:.3f} s -> difference {abs(client_tps - sim_tps) / sim_tps:.2%}"
        f" ({len(result.records) - len(ok)} errors; round incl. thread start/join {result.duration:.3f} s)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=512, help="requests per round for (a) and (c)")
    parser.add_argument("--tokens", type=int, default=256, help="max_new_tokens (ignore_eos) for (a) and (c)")
    parser.add_argument("--rates", default="50,100,200,400,800,1600,3200", help="offered rates for (b), req/s")
    parser.add_argument("--rate-seconds", type=float, default=2.0, help="seconds of arrivals per offered rate")
    args = parser.parse_args(argv)
    proc, url, log = start_simulator(max_running=1024)
    SimCpu.process = psutil.Process(proc.pid)
    try:
        client = ServerClient(url, request_timeout=120)
        run_requests(client, make_prompts(64), SamplingParams(32, ignore_eos=True), concurrency=16)  # warm up
        print(
            f"simulator at {url}, --sim-time-scale 0; client and simulator in separate processes;"
            f" {psutil.cpu_count()} CPUs on this machine"
        )
        for concurrency in (1, 64):
            n = args.requests if concurrency > 1 else max(16, args.requests // 16)
            cpu_per_chunk(client, n, args.tokens, concurrency)
        best = 0.0
        for rate in (float(r) for r in args.rates.split(",")):
            if not rate_check(client, rate, args.rate_seconds):
                break
            best = rate
        print(f"(b) highest sustained offered rate: {best:.0f} req/s")
        throughput_agreement(client, args.requests, args.tokens, 64)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
