"""Seeded trials of the `why:` line on the simulator: is a regression put on the part of the cycle that moved?

Why: an explanation that names the wrong part sends an engineer after the wrong team (the draft model's
owners for a slow node, the cluster's for a stale draft). Each trial is a fresh suite in a temporary
folder (two servers, the simulator with 2% start-to-start and 1% round-to-round spread, its own
`--sim-seed`): a night with the NCCL tuning variables stored as the level, then two nights judged
against it, neither stored:

- a draft that agrees less with the target (`--sim-draft-acceptance 0.85` on the speculative server:
  τ drops by about 11%, the cycle is unchanged): explained when the JSON report's `explanation.part`
  is `accept_length`;
- the NCCL variables lost (the target's verify and plain decoding slow alike): explained when the part
  is `target` and the causes name an NCCL variable.

    python benchmarks/explain_trials.py               # 20 trials (the figure in docs/explain.md)
    python benchmarks/explain_trials.py --trials 5
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

TUNED = 'NCCL_ALGO = "Ring", NCCL_PROTO = "LL128", NCCL_MIN_NCHANNELS = "16"'
KEY = "eagle3/default/c1"
TEST = 'import pytest\n\n\n@pytest.mark.specperf(min_speedup=1.0)\ndef test_speedup(specperf):\n    """A night."""\n'


def config(seed: int, env: str, draft_args: str = "") -> str:
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
        sim_args = [{draft_args}]

        [specperf.workloads.default]
        prompts = "builtin:chat"
        num_requests = 8
        max_new_tokens = 128
        """)


def night(here: Path, settings: str, *extra: str) -> dict[str, object] | None:
    """Run one night; the speculative key's `explanation` from the JSON report (None: none given)."""
    (here / "specperf.toml").write_text(settings)
    pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", *extra]
    subprocess.run([*pytest, "--specperf-json=night.json"], cwd=here, capture_output=True, check=False)
    document = json.loads((here / "night.json").read_text())
    (row,) = [m for m in document["measurements"] if m["label"] == KEY]
    return row.get("explanation")


def trial(seed: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="specperf-explain-trial-") as folder:
        here = Path(folder)
        (here / "test_perf.py").write_text(TEST)
        night(here, config(seed, TUNED), "--specperf-update")
        draft = night(here, config(seed, TUNED, '"--sim-draft-acceptance", "0.85"'))
        target = night(here, config(seed, ""))
    causes = (target or {}).get("causes") or []
    nccl = any(cause["name"].startswith("NCCL_") for cause in causes)  # type: ignore[attr-defined]
    return {
        "seed": seed,
        "draft": (draft or {}).get("part"),
        "target": (target or {}).get("part"),
        "draft_ok": (draft or {}).get("part") == "accept_length",
        "target_ok": (target or {}).get("part") == "target" and nccl,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--first-seed", type=int, default=1)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    results = []
    for seed in range(args.first_seed, args.first_seed + args.trials):
        results.append(trial(seed))
        r = results[-1]
        print(f"seed {seed}: a draft that accepts less: {r['draft']}; NCCL lost: {r['target']}", flush=True)
    draft = sum(1 for r in results if r["draft_ok"])
    target = sum(1 for r in results if r["target_ok"])
    print(
        f"τ drop explained as the accept length in {draft} of {len(results)} trials; "
        f"lost NCCL tuning explained as the target (an NCCL variable named) in {target} of {len(results)}; "
        f"{time.perf_counter() - started:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
