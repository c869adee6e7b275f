"""How faithfully does the simulator follow its own profile? Measured vs predicted, per concurrency.

Starts ``python -m pytest_specperf.sim`` twice (plain, then one speculative config), runs closed-loop
rounds of streamed ``/generate`` requests (temperature 0, ignore_eos, fixed output length) at each
concurrency, and prints measured output tok/s and token-weighted accept length (Σ completion_tokens /
Σ spec_verify_ct) next to the profile's prediction.

Predictions (time scale 1 figures multiplied by --time-scale):
- accept length: Σ N / Σ expected verify cycles, each at its prompt's difficulty factor (a fixed function of
  the prompt text, as in the engine); what remains is the luck of the acceptance draws.
- concurrency 1: exact in expectation: for each request its prefill (TTFT) + expected verify cycles x cycle
  time; throughput = Σ N / Σ predicted e2e.
- concurrency > 1: ``Profile.predicted_round_throughput``, which replays the engine's schedule with the
  mean expected steps (see its docstring).
- "timing" ratio: measured / predicted with the *measured* verify counts, i.e. the engine's clock alone,
  independent of how lucky the acceptance draws were.

Usage: python benchmarks/sim_fidelity.py [--profile kimi-k2.5-tp8] [--time-scale 1.0] [--requests 16]
       [--concurrency 1,8,32] [--max-new-tokens 256] [--spec 5,1,6] [--tuned]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import requests

from pytest_specperf.sim.profile import Profile, SpecConfig
from pytest_specperf.sim.profile_files import load_profile
from pytest_specperf.sim.text import SimPrompt


@dataclass
class Rec:
    text: str
    start: float
    first: float
    last: float
    prompt_tokens: int
    tokens: int
    verify: int


@dataclass
class Row:
    config: str
    concurrency: int
    requests: int
    tput: float
    pred_tput: float
    tau: float
    pred_tau: float
    timing_ratio: float


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def simulator(args: list[str], env: dict[str, str]) -> Iterator[str]:
    """A running simulator (stderr to a temp file); yields its base URL and always stops it."""
    port = free_port()
    cmd = [sys.executable, "-m", "pytest_specperf.sim", "--port", str(port), *args]
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, stdin=subprocess.DEVNULL)
        try:
            url = f"http://127.0.0.1:{port}"
            wait_ready(proc, url, log)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def wait_ready(proc: subprocess.Popen, url: str, log, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            raise SystemExit(f"simulator exited with {proc.returncode}:\n{log.read().decode(errors='replace')}")
        with contextlib.suppress(requests.RequestException):
            if requests.get(url + "/health_generate", timeout=2).status_code == 200:
                return
        time.sleep(0.05)
    raise SystemExit("simulator not ready in time")


def stream_one(session: requests.Session, url: str, text: str, max_new: int) -> Rec:
    body = {
        "text": text,
        "stream": True,
        "sampling_params": {"max_new_tokens": max_new, "temperature": 0, "ignore_eos": True},
    }
    start = time.perf_counter()
    first = None
    meta: dict = {}
    with session.post(url + "/generate", json=body, stream=True, timeout=600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if line.startswith(b"data: {"):
                first = first or time.perf_counter()
                meta = json.loads(line[6:])["meta_info"]
    last = time.perf_counter()
    return Rec(
        text,
        start,
        first or last,
        last,
        meta["prompt_tokens"],
        meta["completion_tokens"],
        meta.get("spec_verify_ct", 0),
    )


def run_round(url: str, prompts: list[str], max_new: int, concurrency: int) -> list[Rec]:
    """Closed loop: ``concurrency`` workers, each sending its next request when the previous one ends."""
    sessions = [requests.Session() for _ in range(concurrency)]
    with ThreadPoolExecutor(concurrency) as pool:
        futures = [
            pool.submit(lambda i=i, p=p: stream_one(sessions[i % concurrency], url, p, max_new))
            for i, p in enumerate(prompts)
        ]
        return [f.result() for f in futures]


def expected_steps(profile: Profile, spec: SpecConfig | None, text: str, max_new: int) -> float:
    """Expected decode steps of one request: N - 1 plain steps, or the expected verify cycles at this
    prompt's difficulty factor (a fixed function of the prompt's hash, as in the engine)."""
    if spec is None:
        return float(max_new - 1)
    model = profile.acceptance_for(spec.algorithm)
    difficulty = model.difficulty_at(SimPrompt.from_text(text).unit("difficulty"))
    return profile.expected_verify_steps(spec, max_new, difficulty=difficulty)


def predict(
    profile: Profile,
    spec: SpecConfig | None,
    recs: list[Rec],
    max_new: int,
    concurrency: int,
    tuned: bool,
    scale: float,
) -> tuple[float, float, float]:
    """(predicted tok/s, predicted accept length, predicted wall seconds given the measured verify counts)."""
    total = sum(r.tokens for r in recs)
    steps = [expected_steps(profile, spec, r.text, max_new) for r in recs]
    pred_tau = 1.0 if spec is None else total / sum(steps)
    step_ms = profile.step_ms(spec, 1, tuned)
    if concurrency == 1:  # sequential: each request's TTFT, then its expected steps at batch 1
        e2e_ms = sum(
            profile.predicted_ttft_ms(r.prompt_tokens, tuned=tuned) + v * step_ms
            for r, v in zip(recs, steps, strict=True)
        )
        pred_tput = total / (e2e_ms * scale / 1000)
    else:
        mean_prompt = round(sum(r.prompt_tokens for r in recs) / len(recs))
        pred_tput = (
            profile.predicted_round_throughput(
                spec,
                concurrency=concurrency,
                prompt_tokens=mean_prompt,
                output_tokens=max_new,
                num_requests=len(recs),
                tuned=tuned,
            )
            / scale
        )
    # The clock alone: every request's TTFT plus its *measured* number of steps at batch 1.
    measured_steps = [r.verify if spec is not None else r.tokens - 1 for r in recs]
    timed_ms = sum(
        profile.predicted_ttft_ms(r.prompt_tokens, tuned=tuned) + v * step_ms
        for r, v in zip(recs, measured_steps, strict=True)
    )
    return pred_tput, pred_tau, timed_ms * scale / 1000


def measure_config(
    name: str, spec: SpecConfig | None, args: argparse.Namespace, profile: Profile, env: dict[str, str]
) -> list[Row]:
    levels = [int(c) for c in args.concurrency.split(",")]
    launch = [
        "--model-path",
        profile.server.model_path,
        "--tp-size",
        str(profile.server.tp_size),
        "--sim-profile",
        args.profile,
        "--sim-time-scale",
        str(args.time_scale),
        "--max-running-requests",
        str(max(256, *levels)),
    ]
    if spec is not None:
        launch += [
            "--speculative-algorithm",
            spec.algorithm,
            "--speculative-draft-model-path",
            profile.server.draft_model_path,
            "--speculative-num-steps",
            str(spec.steps),
            "--speculative-eagle-topk",
            str(spec.topk),
            "--speculative-num-draft-tokens",
            str(spec.draft_tokens),
        ]
    rows = []
    with simulator(launch, env) as url:
        run_round(url, ["warmup one", "warmup two"], 8, 2)
        for c in levels:
            n_req = max(args.requests, 2 * c)
            prompts = [
                f"Fidelity prompt {i}: summarise the trade-offs of speculative decoding, part {i}."
                for i in range(n_req)
            ]
            if requests.post(url + "/flush_cache", params={"timeout": 30}, timeout=60).status_code != 200:
                raise SystemExit("flush_cache failed")
            recs = run_round(url, prompts, args.max_new_tokens, c)
            wall = max(r.last for r in recs) - min(r.start for r in recs)
            total = sum(r.tokens for r in recs)
            tau = total / sum(r.verify for r in recs) if spec is not None else 1.0
            pred_tput, pred_tau, timed_s = predict(
                profile, spec, recs, args.max_new_tokens, c, args.tuned, args.time_scale
            )
            timing = (wall / timed_s) if c == 1 else float("nan")
            rows.append(Row(name, c, n_req, total / wall, pred_tput, tau, pred_tau, timing))
            print(
                f"  {name} c={c}: {total / wall:.2f} tok/s (pred {pred_tput:.2f}), tau {tau:.3f} (pred {pred_tau:.3f})",
                file=sys.stderr,
                flush=True,
            )
    return rows


def print_table(rows: list[Row], args: argparse.Namespace) -> None:
    print(
        f"\nprofile={args.profile} time_scale={args.time_scale} max_new_tokens={args.max_new_tokens} "
        f"tuned={args.tuned} (tok/s in wall-clock terms at this time scale)"
    )
    head = (
        f"{'config':<14}{'conc':>5}{'reqs':>6}{'meas tok/s':>12}{'pred tok/s':>12}{'ratio':>8}"
        f"{'meas tau':>10}{'pred tau':>10}{'ratio':>8}{'clock ratio':>13}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        clock = f"{r.timing_ratio:.4f}" if r.timing_ratio == r.timing_ratio else "-"
        print(
            f"{r.config:<14}{r.concurrency:>5}{r.requests:>6}{r.tput:>12.2f}{r.pred_tput:>12.2f}"
            f"{r.tput / r.pred_tput:>8.4f}{r.tau:>10.3f}{r.pred_tau:>10.3f}{r.tau / r.pred_tau:>8.4f}{clock:>13}"
        )
    print("clock ratio = measured wall time / (Σ predicted TTFT + measured verify steps x cycle), concurrency 1 only")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", default="kimi-k2.5-tp8")
    p.add_argument("--time-scale", type=float, default=1.0)
    p.add_argument("--requests", type=int, default=16, help="requests per round (at least 2 x concurrency)")
    p.add_argument("--concurrency", default="1,8,32")
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--spec", default="5,1,6", help="steps,topk,draft_tokens of the speculative config")
    p.add_argument("--algorithm", default="EAGLE3")
    p.add_argument("--tuned", action="store_true", help="set the profile's NCCL tuning variables")
    args = p.parse_args(argv)
    if args.time_scale <= 0:
        p.error("--time-scale must be > 0 (throughput is undefined at 0)")
    profile = load_profile(args.profile)
    steps, topk, tokens = (int(x) for x in args.spec.split(","))
    spec = SpecConfig(args.algorithm, steps, topk, tokens)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    if args.tuned:
        env.update(profile.nccl.env)
    rows = measure_config("plain", None, args, profile, env)
    rows += measure_config(f"{args.algorithm.lower()}-{steps}-{topk}-{tokens}", spec, args, profile, env)
    print_table(rows, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
