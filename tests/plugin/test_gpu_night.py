"""What would spoil a first night on a GPU node, end to end against real simulator processes:
a speedup that compares more than speculation, a dead reference, a recorded topk SGLang overrode,
an API key on disk, a `--no-*` flag, a sampling seed SGLang ignores."""

from __future__ import annotations

import json
from pathlib import Path

from pytest_specperf.report.schema import validate

ONE_SPEEDUP_TEST = """
import pytest

@pytest.mark.specperf(server="eagle3-5step", min_speedup=0.5)
def test_speedup(specperf):
    pass
"""


def backends(reference: str, speculative: str) -> str:
    return f"""
[specperf.servers.plain]
args = ["--attention-backend", "{reference}"]

[specperf.servers.eagle3-5step]
algorithm = "EAGLE3"
draft_model = "sim/kimi-k2.5-eagle3"
num_steps = 5
eagle_topk = 1
num_draft_tokens = 6
args = ["--attention-backend", "{speculative}"]
"""


def test_a_speedup_between_different_attention_backends_names_the_difference(make_suite, tmp_path: Path) -> None:
    """On a CPU build of SGLang the plain server ran torch_native and the speculative one intel_amx: the
    "2.0x" was mostly the backend. The speedup must say so, on its row and in the test's message."""
    suite = make_suite(ONE_SPEEDUP_TEST, servers=backends("torch_native", "intel_amx"))
    report = tmp_path / "night.json"
    result = suite.run(f"--specperf-json={report}", "-W", "always::UserWarning")
    result.assert_outcomes(passed=1)  # the difference is shown, like a drift line; it fails only under --strict
    difference = "server.attention_backend: torch_native → intel_amx"
    result.stdout.fnmatch_lines([f"*the reference and this server differ besides speculation*{difference}*"])
    document = json.loads(report.read_text())
    assert validate(document) == []
    rows = {m["label"]: m for m in document["measurements"]}
    unlike = rows["eagle3-5step/default/c1"]["unlike_reference"]
    assert unlike == [{"name": "server.attention_backend", "old": "torch_native", "new": "intel_amx"}]
    assert any("compares more than speculation" in w for w in document["warnings"])
    assert rows["plain/default/c1"]["unlike_reference"] == []

    strict = suite.run("--specperf-strict")
    strict.assert_outcomes(failed=1)
    strict.stdout.fnmatch_lines([f"*{difference}*--specperf-strict fails it*"])


#: compared with the reference by its outputs (losslessness), which the simulator's counts decide: under
#: --specperf-strict a speedup on a busy machine may not be credible, and that is not what is tested here
ONE_LOSSLESS_TEST = ONE_SPEEDUP_TEST.replace("min_speedup=0.5", "lossless=True")


def test_servers_that_differ_only_in_speculation_say_nothing(make_suite, tmp_path: Path) -> None:
    suite = make_suite(ONE_LOSSLESS_TEST, servers=backends("fa3", "fa3"))
    report = tmp_path / "night.json"
    suite.run(f"--specperf-json={report}", "--specperf-strict").assert_outcomes(passed=1)
    rows = {m["label"]: m for m in json.loads(report.read_text())["measurements"]}
    assert rows["eagle3-5step/default/c1"]["unlike_reference"] == []


DEAD_REFERENCE = """
[specperf.servers.plain]
sim_args = ["--sim-error-rate", "1.0"]

[specperf.servers.eagle3-5step]
algorithm = "EAGLE3"
draft_model = "sim/kimi-k2.5-eagle3"
num_steps = 5
eagle_topk = 1
num_draft_tokens = 6
"""

SPECULATIVE_ONLY = """
import pytest

@pytest.mark.specperf(server="eagle3-5step", min_speedup=1.0)
def test_speedup(specperf):
    pass

@pytest.mark.specperf(server="eagle3-5step", accept_length=(1.0, None))
def test_acceptance(specperf):
    pass
"""


def test_a_reference_whose_requests_all_fail_is_an_error_not_a_regression(make_suite, tmp_path: Path) -> None:
    """Every request of the reference failed: its row is ERROR naming the server and the first failure
    (never REGRESSION at 0.0 tok/s), the speedup that lost its reference says so, the speculative
    measurement stays reported and its own checks still decide its other test; the night is red."""
    suite = make_suite(SPECULATIVE_ONLY, servers=DEAD_REFERENCE)
    report = tmp_path / "night.json"
    result = suite.run(f"--specperf-json={report}", "--specperf-servers=eagle3-5step")
    result.assert_outcomes(failed=1, passed=1)
    assert result.ret != 0
    result.stdout.fnmatch_lines(
        ["*min_speedup of eagle3-5step/default/c1 cannot be checked: the reference server 'plain' was not measured*"]
    )
    document = json.loads(report.read_text())
    assert validate(document) == []
    errors = {e["label"]: e["reason"] for e in document["errors"]}
    assert (
        "server 'plain': all " in errors["plain/default/c1"]
        and "requests of plain/default/c1 failed" in (errors["plain/default/c1"])
    )
    assert "HTTP 500" in errors["plain/default/c1"]  # the first failure is named
    rows = {m["label"]: m for m in document["measurements"]}
    assert "plain/default/c1" not in rows  # nothing was measured: no 0.0 tok/s row
    speculative = rows["eagle3-5step/default/c1"]
    assert speculative["estimates"]["output_throughput"]["value"] > 0
    assert speculative["estimates"]["speedup"] is None
    assert "REGRESSION" not in result.stdout.str()


NGRAM = """
[specperf.servers.plain]

[specperf.servers.ngram]
algorithm = "NGRAM"
"""


def test_the_ngram_fingerprint_records_the_topk_the_server_reports(make_suite, tmp_path: Path) -> None:
    """SGLang overwrites NGRAM's topk with its BFS breadth (10) and picks 12 draft tokens: the fingerprint
    and the row record what ran, not what was asked (nothing)."""
    suite = make_suite(
        'import pytest\n\n@pytest.mark.specperf(server="ngram")\ndef test_ngram(specperf):\n    pass\n', servers=NGRAM
    )
    report = tmp_path / "night.json"
    suite.run(f"--specperf-json={report}").assert_outcomes(passed=1)
    row = {m["label"]: m for m in json.loads(report.read_text())["measurements"]}["ngram/default/c1"]
    assert (row["eagle_topk"], row["num_draft_tokens"]) == (10, 12)
    identity = row["fingerprint"]["identity"]
    assert (identity["eagle_topk"], identity["num_draft_tokens"], identity["num_steps"]) == ("10", "12", "1")


def test_ngram_topk_is_refused_at_collection(make_suite) -> None:
    suite = make_suite("def test_x():\n    pass\n", servers=NGRAM + "eagle_topk = 4\n")
    result = suite.run()
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*ngram] eagle_topk: SGLang overwrites it for NGRAM*"])


KEY = "Run-Key-4d9f2c7e81b3"
HF = "hf_" + "QwErTy7uIoP3aSdF9gHjK2lZxC5vBnM8qW"


def test_no_file_the_run_leaves_contains_the_api_key(make_suite, tmp_path: Path, monkeypatch) -> None:
    """SGLang prints its arguments (the key among them) at every start and reports the key in
    /server_info: the server's output goes through the redactor before it reaches the log."""
    monkeypatch.setenv("SPECPERF_API_KEY", KEY)
    monkeypatch.setenv("HF_TOKEN", HF)
    suite = make_suite(ONE_SPEEDUP_TEST, extra='env = { SGLANG_HF_AUTH = "' + HF + '" }\n')
    report, markdown = suite.run_dir / "night.json", suite.run_dir / "night.md"
    result = suite.run(f"--specperf-json={report}", f"--specperf-markdown={markdown}", "--specperf-update")
    result.assert_outcomes(passed=1)
    files = [p for p in (*suite.run_dir.rglob("*"), *(suite.pytester.path / ".specperf").rglob("*")) if p.is_file()]
    assert len([p for p in files if p.suffix == ".log"]) == 2 and report in files
    logs = "".join(p.read_text(errors="replace") for p in files if p.suffix == ".log")
    assert "server_args=" in logs and "'api_key': '<redacted>'" in logs  # the echo is there, without the key
    for path in files:
        text = path.read_text(errors="replace")
        assert KEY not in text and HF not in text, path
    assert KEY not in result.stdout.str() + result.stderr.str()


NO_FORM = """
[specperf.servers.plain]
args = ["--no-enable-tf32-matmul"]
"""


def test_a_no_form_of_an_sglang_boolean_is_accepted(make_suite) -> None:
    """`--enable-tf32-matmul` is an argparse.BooleanOptionalAction in SGLang 0.5.23: its `--no-` twin exists."""
    suite = make_suite(
        'import pytest\n\n@pytest.mark.specperf(server="plain")\ndef test_plain(specperf):\n    pass\n', servers=NO_FORM
    )
    suite.run().assert_outcomes(passed=1)
    log = next(p for p in suite.log_files() if p.name.startswith("plain")).read_text()
    assert "--no-enable-tf32-matmul" in log


SAMPLED = """
[specperf.workloads.default]
prompts = "builtin:chat"
num_requests = 4
max_new_tokens = 24
warmup = 1
temperature = 0.7
"""


def test_a_seed_sglang_ignores_is_a_collection_time_warning(make_suite) -> None:
    suite = make_suite(
        'import pytest\n\n@pytest.mark.specperf(server="plain")\ndef test_plain(specperf):\n    pass\n',
        servers="[specperf.servers.plain]\n",
        workloads=SAMPLED,
    )
    result = suite.run("--collect-only", "-W", "always::UserWarning")
    result.stdout.fnmatch_lines(["*server 'plain': workload(s) default sample at temperature > 0*"])
    result.stdout.fnmatch_lines(["*unless the server runs with --enable-deterministic-inference*"])
    quiet = make_suite(
        'import pytest\n\n@pytest.mark.specperf(server="plain")\ndef test_plain(specperf):\n    pass\n',
        servers='[specperf.servers.plain]\nargs = ["--enable-deterministic-inference"]\n',
        workloads=SAMPLED,
    )
    assert "deterministic-inference" not in quiet.run("--collect-only").stdout.str()
