"""Where a concurrency sweep's speedup crosses 1.0, measured on the simulator against the profile.

Runs a sweep suite (concurrency 1, 2, 4, 8; qa prompts, 16 requests of 32 tokens, time scale 0.1) with
pytest and the plugin, reads each speculative config's crossover from the JSON report, and prints it
next to the range the profile's two limiting models predict: steady-state decoding (a full batch all
the time) and the closed-loop round model (prefills stall decoding), each moved by the models' own
error (MODEL_ERROR, from benchmarks/sim_fidelity.py). The measured interval should overlap that range.

Usage: python benchmarks/sweep_crossover.py [--time-scale 0.1]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from pytest_specperf.report.sweep import find_crossover
from pytest_specperf.sim.profile import SpecConfig
from pytest_specperf.sim.profile_files import load_profile
from pytest_specperf.verdict.stats import Estimate

LEVELS = (1, 2, 4, 8)
#: How far the engine's measured throughput strays from the profile's analytic models: up to 3% in
#: benchmarks/sim_fidelity.py (ratios 0.972-0.999), so a speedup (a ratio of two) is within ~3%.
MODEL_ERROR = 0.03
SUITE = """
[specperf]
launcher = "sim"
model = "sim/kimi-k2.5"
sim_profile = "kimi-k2.5-tp8"
sim_time_scale = {scale}
rounds = 3
run_to_run_cv = 0

[specperf.servers.plain]

[specperf.servers.eagle3-5step]
algorithm = "EAGLE3"
draft_model = "sim/kimi-k2.5-eagle3"
num_steps = 5
eagle_topk = 1
num_draft_tokens = 6

[specperf.servers.eagle3-2step]
algorithm = "EAGLE3"
draft_model = "sim/kimi-k2.5-eagle3"
num_steps = 2
eagle_topk = 1
num_draft_tokens = 3

[specperf.workloads.default]
prompts = "builtin:qa"
num_requests = 16
max_new_tokens = 32
ignore_eos = true
concurrency = [1, 2, 4, 8]
warmup = 2
"""
TESTS = """
import pytest

@pytest.mark.specperf(accept_length=(1.0, None))
def test_sweep(specperf):
    pass
"""


def analytic_crossovers(steps: int, draft_tokens: int, prompt_tokens: int) -> tuple[float, float]:
    """The range of crossovers the profile predicts, interpolated like the measurement.

    Steady-state decoding (no prefill, a full batch all the time) and the closed-loop round model
    (prefills stall decoding, a round starts with every client at once) bracket what the engine does;
    each curve is also moved by the models' own error (MODEL_ERROR) before it is interpolated.
    """
    profile = load_profile("kimi-k2.5-tp8")
    spec = SpecConfig("EAGLE3", steps, 1, draft_tokens)
    decode, rounds = {}, {}
    for level in LEVELS:
        decode[level] = Estimate.exact(
            profile.predicted_decode_throughput(spec, level) / profile.predicted_decode_throughput(None, level)
        )
        shape = {"concurrency": level, "prompt_tokens": prompt_tokens, "output_tokens": 32, "num_requests": 16}
        ratio = profile.predicted_round_throughput(spec, **shape) / profile.predicted_round_throughput(None, **shape)
        rounds[level] = Estimate.exact(ratio)
    ends = [
        find_crossover({level: Estimate.exact(e.value * factor) for level, e in curve.items()}).concurrency
        for curve in (decode, rounds)
        for factor in (1 - MODEL_ERROR, 1 + MODEL_ERROR)
    ]
    return min(ends), max(ends)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--time-scale", type=float, default=0.1)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        suite = Path(folder)
        (suite / "specperf.toml").write_text(SUITE.format(scale=args.time_scale))
        (suite / "test_sweep.py").write_text(textwrap.dedent(TESTS))
        report = suite / "report.json"
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--specperf-json={report}"],
            cwd=suite,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            print(done.stdout[-3000:], file=sys.stderr)
            return 1
        sweep = json.loads(report.read_text())["sweeps"][0]
    print(f"profile kimi-k2.5-tp8, time scale {args.time_scale:g}; crossover of speedup 1.0, concurrency")
    print(f"{'config':<14}{'measured':>10}{'90% interval':>18}{'profile range':>18}  overlap")
    for name, steps, draft in (("eagle3-5step", 5, 6), ("eagle3-2step", 2, 3)):
        found = next(c for c in sweep["configs"] if c["server"] == name)["crossover"]
        lower, upper = analytic_crossovers(steps, draft, prompt_tokens=20)  # qa prompts; prefill ~ fixed cost
        value, low, high = found.get("concurrency"), found.get("low"), found.get("high")
        overlap = low is not None and high is not None and low <= upper and lower <= high
        interval = f"[{low:.2f}, {high:.2f}]" if low is not None and high is not None else "-"
        shown = f"{value:.2f}" if value is not None else found.get("kind", "-")
        print(f"{name:<14}{shown:>10}{interval:>18}{f'[{lower:.2f}, {upper:.2f}]':>18}  {overlap}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
