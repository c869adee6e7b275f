"""vLLM's real CPU server behind the same markers: measure, judge and report like an SGLang suite.

Server starts dominate the lane's time (about a minute each on two cores, mostly imports in three
processes), so each start is made to count: the four configs start once in one session, which also
ends on a failing test under `-x`; SIGTERM and Ctrl-C go to two sessions started side by side.
"""

from __future__ import annotations

import json
import re
import signal
import sys
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
    rounds = specperf.result.rounds
    records = [rec for r in rounds for rec in r.records]
    # the workload has no warmup: the server's counters since its start are exactly these requests'
    url = specperf.server.url
    assert prometheus(url, "vllm:spec_decode_num_drafts_total") == sum(r.verify_ct for r in records)
    assert prometheus(url, "vllm:spec_decode_num_accepted_tokens_total") == sum(r.accepted_drafts for r in records)
    for r in rounds:  # the plugin's own /metrics deltas around each round: the same counts, so the same τ
        counts = (sum(x.verify_ct for x in r.records), sum(x.accepted_drafts for x in r.records))
        assert r.accept_length_source == "responses"
        assert (r.spec_counters.drafts, r.spec_counters.accepted) == counts, (r.spec_counters, counts)
        assert r.spec_counters.draft_tokens == sum(x.proposed_drafts for x in r.records)
        assert r.spec_counters.accept_length == pytest.approx(r.accept_length, rel=1e-15)
    per_round = [r.spec_counters for r in rounds]
    assert len(set(per_round)) == 1, per_round  # deterministic: every round accepts the same drafts


@pytest.mark.specperf(server="self-draft", accept_length=(3.99, 4.01))
def test_target_as_its_own_draft_accepts_everything(specperf):
    assert specperf.result.acceptance_per_position == (1.0, 1.0, 1.0)


@pytest.mark.specperf(server="noisy-draft", accept_length=(1.5, 3.5))
def test_noisy_draft_accepts_about_half(specperf):
    rates = specperf.result.acceptance_per_position
    assert len(rates) == 3 and rates[0] >= rates[1] >= rates[2] > 0, rates


# the last test of the last server: -x ends the session here, with that server's tree up
@pytest.mark.specperf(server="self-draft")
def test_fails(specperf):
    assert False, "boom"


# its server is never started: -x stopped the session before it
@pytest.mark.specperf(server="never")
def test_never_runs(specperf):
    pass
"""


NEVER = """
[specperf.servers.never]
args = ["--enforce-eager", "--max-num-seqs", "4"]
"""


def test_a_vllm_suite_measures_judges_and_reports(vllm_suite) -> None:
    """Also the teardown after a pass of servers (stopped when no test needs them), a failing test,
    and `-x` with a server up (vllm_suite proves afterwards that no vLLM process is left)."""
    suite = vllm_suite(SUITE, more_servers=NEVER, extra="max_servers = 1")
    report = suite.pytester.path / "report.json"
    started = time.monotonic()
    result = suite.run(f"--specperf-json={report}", "-p", "no:cacheprovider", "-x", "-v")  # -v: by draft position
    elapsed = time.monotonic() - started
    result.assert_outcomes(passed=6, failed=1)  # test_never_runs did not run
    result.stdout.fnmatch_lines(["*stopping after 1 failures*"])
    assert suite.starts() == ["ngram", "noisy-draft", "plain", "self-draft"]  # each config starts once
    out = result.stdout.str()
    assert "vllm 0.32.0, launcher vllm" in out
    assert "self-draft/default/c1: 1.00 1.00 1.00" in out  # acceptance by draft position
    assert "no speculative algorithm is configured" not in out  # ngram's raw speculative_config speculates
    assert "outside the versions this plugin supports" not in out
    document = json.loads(report.read_text())
    rows = {m["label"]: m for m in document["measurements"]}
    assert rows["self-draft/default/c1"]["estimates"]["accept_length"]["value"] == pytest.approx(4.0)
    assert rows["self-draft/default/c1"]["acceptance_per_position"] == [1.0, 1.0, 1.0]
    for row in rows.values():
        assert row["fingerprint"]["identity"]["engine"] == "vllm"
        assert row["fingerprint"]["environment"]["vllm.version"] == "0.32.0"
        assert row["accept_length_source"] == (None if row["server"] == "plain" else "responses")
    print(f"vLLM suite: 4 servers, 7 tests (-x) in {elapsed:.0f} s")


#: pytest as a terminal's foreground job runs it, where Ctrl-C raises KeyboardInterrupt: a shell's background
#: job (a CI script's `cmd &`) ignores SIGINT, its children inherit that, and the SIGINT below would be lost
FOREGROUND_PYTEST = (
    "import signal, sys, pytest; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "sys.argv[0] = 'pytest'; sys.exit(pytest.console_main())"
)

BLOCKING = """
import threading
import pytest

@pytest.mark.parametrize("specperf_server", ["plain"], indirect=True)
def test_block(specperf_server):
    print("SERVER-UP", flush=True)
    threading.Event().wait(300)
"""


def test_sigterm_and_ctrl_c_to_pytest_stop_the_whole_server_tree(vllm_suite) -> None:
    """Two sessions, each blocked in a test with its server up (started side by side: the starts
    overlap), one sent SIGTERM and one SIGINT (Ctrl-C)."""
    plain = '[specperf.servers.plain]\nargs = ["--enforce-eager"]\n'
    sessions = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        suite = vllm_suite(BLOCKING, servers=plain, where=sig.name)
        args = ["-s", "-p", "no:cacheprovider", f"--specperf-run-dir={suite.run_dir}"]
        command = [sys.executable, "-c", FOREGROUND_PYTEST, *args]
        proc = suite.pytester.popen(command, stdout=-1, stderr=-2, cwd=suite.path)
        sessions.append((sig, suite, proc))
    trees = {}
    try:
        for sig, suite, proc in sessions:
            assert proc.stdout is not None
            for line in proc.stdout:
                if b"SERVER-UP" in line:
                    break
            trees[sig.name] = suite.processes()
            assert len(trees[sig.name]) >= 3, (sig.name, trees)  # API server, engine core, worker, resource tracker
            proc.send_signal(sig)
        for _, _, proc in sessions:
            proc.wait(timeout=120)
    finally:
        for _, _, proc in sessions:
            if proc.poll() is None:
                proc.kill()
    for name, tree in trees.items():
        _, alive = psutil.wait_procs(tree, timeout=30)
        assert alive == [], (name, alive)


def test_a_bad_flag_is_refused_by_the_installed_vllm_and_a_failed_start_fails_fast(vllm_suite) -> None:
    """A typo is refused at collection against the installed vLLM's own parser (no 20-minute start on
    a GPU node); a value only vLLM's startup refuses fails the start within seconds, with the log tail."""
    test = "import pytest\n\n@pytest.mark.specperf(server='plain')\ndef test_x(specperf):\n    pass\n"
    typo = vllm_suite(test, servers='[specperf.servers.plain]\nargs = ["--enforce-eagr"]\n')
    result = typo.run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    refused = "unrecognized argument --enforce-eagr: the installed vLLM 0.32.0 does not have it"
    assert refused in result.stderr.str() and "did you mean '--enforce-eager'?" in result.stderr.str()
    assert not typo.starts()
    suite = vllm_suite(
        test, servers='[specperf.servers.plain]\nargs = ["--enforce-eager", "--max-model-len", "99999999"]\n'
    )
    started = time.monotonic()
    result = suite.run()
    elapsed = time.monotonic() - started
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*server 'plain' exited with code 1*before it was ready*ValidationError during start-up*"]
    )
    result.stdout.fnmatch_lines(["*User-specified max_model_len (99999999) is greater than the derived*"])
    assert elapsed < 60
    assert re.search(r"log: .*plain\.log", result.stdout.str())
