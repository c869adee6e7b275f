"""`specperf bisect` against real vLLM servers: two setups of one model differing in four settings,
one of which costs throughput (`--max-num-seqs 1` serves four concurrent streams one at a time); bisect
starts real servers with subsets of the differences and names that flag.

vLLM's CPU build on a shared 2-core machine is noisy (round-to-round CV of 15% and more at two
rounds), so the suite measures four rounds of longer answers and bisects with a 40% tolerance:
serving four streams one at a time costs about two thirds of the throughput, and a start of the
harmless differences has read up to a third slow here (-37% and, repeated, -29% in one CI run, when
the tolerance was 20%). A start can still read further off: a good-setup start that does makes every
start of the search read bad, and bisect measures the good setup again and searches against the new
start; a harmless half's start that does sends the search into that half, and the answer's check (the
other differences at their bad values) finds the flag that costs throughput after all. The bad setup
is started first (reproduced); no start count is asserted, a busy machine repeats unclear starts."""

from __future__ import annotations

import json
import subprocess
import sys

SERVERS = """
[specperf.servers.plain]
args = ["--enforce-eager"{bad_args}]
{bad_env}

[specperf.workloads.wide]
prompts = "builtin:qa"
num_requests = 8
max_new_tokens = 64
ignore_eos = true
concurrency = 4
warmup = 1
"""
GOOD = SERVERS.format(bad_args="", bad_env="")
BAD = SERVERS.format(
    bad_args=', "--seed", "7", "--max-num-seqs", "1"',
    bad_env='env = { VLLM_SPECPERF_HARMLESS_A = "1", VLLM_SPECPERF_HARMLESS_B = "2" }',
)
TEST = "import pytest\n\n@pytest.mark.specperf(server='plain', workload='wide')\ndef test_wide(specperf):\n    pass\n"


def test_bisect_names_the_flag_that_costs_throughput_among_four_differences(vllm_suite) -> None:
    # this machine's start-to-start spread (10-15%), not the 2% default: a start near the tolerance is
    # then unclear and measured once more, instead of judged on one noisy start
    suite = vllm_suite(TEST, servers=GOOD, extra="confirm = false\nmax_regression = 0.4\nrun_to_run_cv = 0.1")
    config = suite.path / "specperf.toml"
    config.write_text(config.read_text().replace("rounds = 2", "rounds = 4"))
    suite.run("--specperf-update").assert_outcomes(passed=1)
    config.write_text(config.read_text().replace(GOOD, BAD))
    # other launch flags make another setup (INCOMPARABLE): stored as a history of its own, on purpose
    suite.run("--specperf-update-force")
    command = [sys.executable, "-m", "pytest_specperf.cli", "bisect", "plain/wide/c4", "--good", "1", "--bad", "2"]
    command += ["--json", "bisect.json"]
    done = subprocess.run(command, cwd=suite.path, capture_output=True, text=True, timeout=1200, check=False)
    assert done.returncode in (0, 4), done.stdout + done.stderr  # 4: named, a start stayed unclear
    document = json.loads((suite.path / "bisect.json").read_text())
    applicable = [d["name"] for d in document["differences"] if d["applicable"]]
    assert len(applicable) == 4, applicable
    assert [c["name"] for c in document["causes"]] == ["server.flag --max-num-seqs"], done.stdout
    assert document["starts"][0]["bad_values"] == applicable  # the bad setup first: reproduced
    assert "restore:" in done.stdout and "--max-num-seqs" in done.stdout.split("restore:")[1]
