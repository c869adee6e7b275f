"""vLLM's real CPU server behind the same markers: measure, judge and report like an SGLang suite."""

from __future__ import annotations

import json
import re
import signal
import time

import psutil
import pytest

SUITE = """
import re
import urllib.request

import pytest


def prometheus(url, name):
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    return sum(float(v) for v in re.findall(r"^" + re.escape(name) + r"\\{[^}]*\\} (\\S+)$", text, re.M))


@pytest.mark.specperf(server="plain")
def test_plain(specperf):
    assert specperf.result.error_count == 0


@pytest.mark.specperf(server=["ngram", "noisy-draft", "self-draft"], min_speedup=0.05, lossless=1.0)
def test_speculative(specperf):
    records = [rec for r in specperf.result.rounds for rec in r.records]
    # the workload has no warmup: the server's counters since its start are exactly these requests'
    url = specperf.server.url
    assert prometheus(url, "vllm:spec_decode_num_drafts_total") == sum(r.verify_ct for r in records)
    accepted = prometheus(url, "vllm:spec_decode_num_accepted_tokens_total")
    assert accepted == sum(r.accepted_drafts for r in records)
    per_round = [sum(rec.accepted_drafts for rec in r.records) for r in specperf.result.rounds]
    assert len(set(per_round)) == 1, per_round  # deterministic: every round accepts the same drafts
    tau = 1 + accepted / prometheus(url, "vllm:spec_decode_num_drafts_total")
    measured = [r.accept_length for r in specperf.result.rounds]
    assert all(m == pytest.approx(tau, abs=1e-9) for m in measured), (measured, tau)


@pytest.mark.specperf(server="self-draft", accept_length=(3.99, 4.01))
def test_target_as_its_own_draft_accepts_everything(specperf):
    pass


@pytest.mark.specperf(server="noisy-draft", accept_length=(1.5, 3.5))
def test_noisy_draft_accepts_about_half(specperf):
    pass
"""


def test_a_vllm_suite_measures_judges_and_reports(vllm_suite) -> None:
    suite = vllm_suite(SUITE, extra="max_servers = 1")
    report = suite.pytester.path / "report.json"
    started = time.monotonic()
    result = suite.run(f"--specperf-json={report}", "-p", "no:cacheprovider")
    elapsed = time.monotonic() - started
    result.assert_outcomes(passed=6)
    assert suite.starts() == ["ngram", "noisy-draft", "plain", "self-draft"]  # each config starts once
    out = result.stdout.str()
    assert "vllm 0.32.0, launcher vllm" in out
    document = json.loads(report.read_text())
    rows = {m["label"]: m for m in document["measurements"]}
    assert rows["self-draft/default/c1"]["estimates"]["accept_length"]["value"] == pytest.approx(4.0)
    for row in rows.values():
        assert row["fingerprint"]["identity"]["engine"] == "vllm"
        assert row["fingerprint"]["environment"]["vllm.version"] == "0.32.0"
    print(f"vLLM suite: 4 servers, 6 tests in {elapsed:.0f} s")


FAILING = """
import pytest

@pytest.mark.specperf(server="plain")
def test_fails(specperf):
    assert False, "boom"

@pytest.mark.specperf(server="plain")
def test_never_runs(specperf):
    pass
"""


def test_a_failing_test_with_x_leaves_no_process(vllm_suite) -> None:
    suite = vllm_suite(FAILING, servers='[specperf.servers.plain]\nargs = ["--enforce-eager"]\n')
    result = suite.run("-x")
    result.assert_outcomes(failed=1)  # (vllm_suite proves afterwards that no vLLM process is left)


BLOCKING = """
import threading
import pytest

@pytest.mark.parametrize("specperf_server", ["plain"], indirect=True)
def test_block(specperf_server):
    print("SERVER-UP", flush=True)
    threading.Event().wait(300)
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_a_signal_to_pytest_stops_the_whole_server_tree(vllm_suite, sig: signal.Signals) -> None:
    suite = vllm_suite(BLOCKING, servers='[specperf.servers.plain]\nargs = ["--enforce-eager"]\n')
    proc = suite.pytester.popen(
        [*suite.pytester._getpytestargs(), "-s", "-p", "no:cacheprovider", f"--specperf-run-dir={suite.run_dir}"],
        stdout=-1,
        stderr=-2,
    )
    try:
        for line in proc.stdout:
            if b"SERVER-UP" in line:
                break
        tree = suite.processes()
        assert len(tree) >= 3, tree  # API server, engine core, worker (and a resource tracker)
        proc.send_signal(sig)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    _, alive = psutil.wait_procs(tree, timeout=30)
    assert alive == []


def test_a_bad_flag_fails_within_seconds_with_the_log_tail(vllm_suite) -> None:
    suite = vllm_suite(
        "import pytest\n\n@pytest.mark.specperf(server='plain')\ndef test_x(specperf):\n    pass\n",
        servers='[specperf.servers.plain]\nargs = ["--enforce-eager", "--no-such-flag"]\n',
    )
    started = time.monotonic()
    result = suite.run()
    elapsed = time.monotonic() - started
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*server 'plain' exited with code 2*before it was ready*", "*unrecognized arguments*"])
    assert elapsed < 60
    assert re.search(r"log: .*plain\.log", result.stdout.str())
