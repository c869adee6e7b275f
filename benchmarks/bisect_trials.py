"""Seeded trials of `specperf bisect` on the simulator: the seed's story, N times over.

Why: bisect is only worth its GPU starts if it names the right difference in few of them, on servers
whose starts differ by a few percent. Each trial is a fresh suite in a temporary folder (two servers,
the simulator with 2% start-to-start and 1% round-to-round spread, its own `--sim-seed`): a night with
the three NCCL tuning variables stored as the level, a night that lost `--lost` of them among ten
harmless `SGLANG_*` changes recorded after it, then `specperf bisect` on the speculative key. The
simulator counts a server as tuned only with all three, so each lost variable is a cause on its own.
A trial counts when bisect names exactly the lost variables; the starts it used are reported.

    python benchmarks/bisect_trials.py               # 20 trials, one variable lost (figures in docs/bisect.md)
    python benchmarks/bisect_trials.py --lost 3 --trials 10
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

TUNING = {"NCCL_ALGO": "Ring", "NCCL_MIN_NCHANNELS": "16", "NCCL_PROTO": "LL128"}
TUNED = ", ".join(f'{name} = "{value}"' for name, value in TUNING.items())
HARMLESS = ", ".join(f'SGLANG_HARMLESS_{i} = "{i}"' for i in range(10))
KEY = "eagle3/default/c1"


def config(seed: int, env: str) -> str:
    return textwrap.dedent(f"""\
        [specperf]
        launcher = "sim"
        model = "moonshotai/Kimi-K2.5"
        sim_time_scale = 0.1
        sim_args = ["--sim-run-jitter", "0.02", "--sim-round-jitter", "0.01", "--sim-seed", "{seed}"]
        env = {{ {env} }}

        [specperf.servers.plain]

        [specperf.servers.eagle3]
        algorithm = "EAGLE3"
        draft_model = "lightseekorg/kimi-k2.5-eagle3"
        num_steps = 2
        eagle_topk = 1
        num_draft_tokens = 3

        [specperf.workloads.default]
        prompts = "builtin:chat"
        num_requests = 8
        max_new_tokens = 128
        """)


TEST = 'import pytest\n\n\n@pytest.mark.specperf(min_speedup=1.0)\ndef test_speedup(specperf):\n    """A night."""\n'


def lost_night(lost: int) -> str:
    """The env of the night that lost the first `lost` tuning variables among the harmless changes."""
    kept = [f'{name} = "{value}"' for name, value in list(TUNING.items())[lost:]]
    return ", ".join([*kept, HARMLESS])


def trial(seed: int, lost: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="specperf-bisect-trial-") as folder:
        here = Path(folder)
        (here / "test_perf.py").write_text(TEST)
        (here / "specperf.toml").write_text(config(seed, TUNED))
        pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"]
        subprocess.run([*pytest, "--specperf-update"], cwd=here, capture_output=True, check=True)
        (here / "specperf.toml").write_text(config(seed, lost_night(lost)))
        subprocess.run([*pytest, "--specperf-record"], cwd=here, capture_output=True, check=False)
        command = [sys.executable, "-m", "pytest_specperf.cli", "bisect", KEY, "--good", "1", "--json", "out.json"]
        done = subprocess.run(command, cwd=here, capture_output=True, text=True, check=False)
        if done.returncode not in (0, 1):
            raise RuntimeError(f"seed {seed}: specperf bisect failed:\n{done.stdout}\n{done.stderr}")
        document = json.loads((here / "out.json").read_text())
    causes = [c["name"] for c in document["causes"]]
    applicable = sum(1 for d in document["differences"] if d["applicable"])
    return {
        "seed": seed,
        "causes": causes,
        "starts": document["server_starts"],
        "differences": applicable,
        "found": sorted(causes) == sorted(TUNING)[:lost],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--lost", type=int, choices=(1, 2, 3), default=1, help="NCCL variables the night lost")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    results = [trial(seed, args.lost) for seed in range(args.first_seed, args.first_seed + args.trials)]
    for r in results:
        print(f"seed {r['seed']}: {', '.join(r['causes']) or 'no cause'} in {r['starts']} starts")  # type: ignore[arg-type]
    found = sum(1 for r in results if r["found"])
    count = int(results[0]["differences"])  # type: ignore[call-overload]
    starts = sorted(int(r["starts"]) for r in results)  # type: ignore[call-overload]
    summary = f"{args.lost} of the NCCL variables lost, {count} differences: exactly those named in {found} of "
    summary += f"{len(results)} trials; starts min/median/max {starts[0]}/{statistics.median(starts):g}/{starts[-1]}"
    if args.lost == 1:  # one cause: the good setup, ⌈log₂ N⌉ halvings and the answer's check
        bound = math.ceil(math.log2(count)) + 2
        within = sum(1 for r in results if r["found"] and int(r["starts"]) <= bound)  # type: ignore[call-overload]
        summary += f"; in at most {bound} starts (⌈log₂ {count}⌉ + 2) in {within}"
    print(f"{summary}; {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
