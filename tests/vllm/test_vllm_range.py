"""The oldest end of the supported vLLM range, on a real server: a speculative server starts, and τ
comes from wherever the installed vLLM gives it.

CI runs this file on the oldest vLLM CPU build that installs there (`bash .ci/vllm-venv 0.27.0`),
which, like 0.26.0, has no `--per-request-spec-decode-metrics`: the plugin leaves the flag out and
reads τ from the `/metrics` counters. On a vLLM that has the flag (0.32.0) it is passed and τ comes
from the responses. vLLM 0.26.0 itself is replayed from its wheel (tests/engines/test_self_added_flags.py).
"""

from __future__ import annotations

import json
import os

from pytest_specperf.engines import engine_for
from pytest_specperf.engines.vllm import PER_REQUEST_METRICS

SERVERS = """
[specperf.servers.plain]
args = ["--enforce-eager"]

[specperf.servers.ngram]
args = ["--enforce-eager"]
speculative_config = {{ method = "ngram", num_speculative_tokens = 3, prompt_lookup_max = 4, prompt_lookup_min = 2 }}
"""

SUITE = """
import pytest


@pytest.mark.specperf(server="ngram", min_speedup=0.05, lossless=1.0)
def test_ngram(specperf):
    rounds = specperf.result.rounds
    assert all(r.spec_counters is not None and r.spec_counters.drafts > 0 for r in rounds)
    assert all(r.accept_length == r.spec_counters.accept_length for r in rounds)
"""


def test_a_speculative_server_starts_and_tau_comes_from_where_this_vllm_gives_it(vllm_suite) -> None:
    python = os.environ["SPECPERF_VLLM_PYTHON"]
    flags = engine_for("vllm").flags(python, {})
    assert flags.installed, flags.fallback_reason
    has_flag = PER_REQUEST_METRICS in flags.options
    suite = vllm_suite(SUITE, servers=SERVERS)
    report = suite.pytester.path / "report.json"
    result = suite.run(f"--specperf-json={report}", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert suite.starts() == ["ngram", "plain"]  # no start was lost to "unrecognized arguments"
    ngram_log = (suite.run_dir / "ngram.log").read_text()
    assert (PER_REQUEST_METRICS in ngram_log.splitlines()[0]) is has_flag  # the command the plugin ran
    document = json.loads(report.read_text())
    assert not any("outside the versions" in w for w in document["warnings"])  # inside the supported range
    row = {m["label"]: m for m in document["measurements"]}["ngram/default/c1"]
    assert row["fingerprint"]["environment"]["vllm.version"].split("+")[0] == flags.version.split("+")[0]
    assert row["accept_length_source"] == ("responses" if has_flag else "prometheus")
    assert row["estimates"]["accept_length"]["value"] > 1.0
    assert len(row["acceptance_per_position"]) == 3
    print(
        f"vLLM {flags.version}: {PER_REQUEST_METRICS} {'passed' if has_flag else 'left out'}; τ from "
        f"{row['accept_length_source']} = {row['estimates']['accept_length']['value']:.3f}"
    )
