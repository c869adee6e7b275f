"""The fault campaign as tests: each fault, end to end, asserts the error text, pytest's exit code, the
report row (JSON), the stored files and an empty process table afterwards (`make_suite` checks that)."""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest
from plugin_suites import TWO_LEVEL_WORKLOAD
from test_servers import pytest_blocked_in_a_test

from pytest_specperf.cli import main as specperf

SPEC_TEST = """
import pytest

@pytest.mark.specperf(server="eagle3-5step", min_speedup=0.5)
def test_speedup(specperf):
    pass
"""


def report_rows(path: Path) -> dict[str, dict]:
    """The JSON report's measurement entries and errors, by `server/workload/cLEVEL`."""
    document = json.loads(path.read_text())
    rows = {f"{m['server']}/{m['workload']}/c{m['concurrency']}": m for m in document["measurements"]}
    for error in document.get("errors", []):
        rows.setdefault(f"{error['server']}/{error['workload']}/c{error['concurrency']}", error)
    return rows


def test_many_failed_measurements_are_all_reported(make_suite, one_spec_server) -> None:
    """Two or more failed measurements used to crash the session end ('<' between MeasurementKeys)."""
    suite = make_suite(
        SPEC_TEST, servers=one_spec_server('sim_args = ["--sim-fail-at-startup"]'), workloads=TWO_LEVEL_WORKLOAD
    )
    report = suite.pytester.path / "report.json"
    result = suite.run(f"--specperf-json={report}")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(errors=2)
    text = result.stdout.str()
    assert "TypeError" not in text and "INTERNALERROR" not in text
    result.stdout.fnmatch_lines(
        ["*ERROR eagle3-5step/default/c1: *exited with code 1*", "*ERROR eagle3-5step/default/c2: *exited with code 1*"]
    )
    rows = report_rows(report)
    assert rows["eagle3-5step/default/c1"]["verdict"] == "ERROR"
    assert rows["eagle3-5step/default/c2"]["verdict"] == "ERROR"


PLAIN_TEST = """
import pytest

@pytest.mark.specperf(server="plain")
def test_plain(specperf):
    pass
"""


def stored_baseline(suite) -> Path:
    """Measure and store the plain baseline once; the path of the stored file."""
    suite.run("--specperf-update").assert_outcomes(passed=1)
    (path,) = (suite.pytester.path / ".specperf" / "sim" / "plain").glob("*.jsonl")
    return path


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda text: text[: len(text) // 2], "corrupt history: no complete run line"),
        (lambda text: text.replace('"v":3', '"v":99'), "layout 99 is newer"),
    ],
    ids=["truncated", "newer-schema"],
)
def test_unreadable_baseline_errors_the_test_and_its_row(make_suite, damage, reason: str) -> None:
    suite = make_suite(PLAIN_TEST)
    path = stored_baseline(suite)
    path.write_text(damage(path.read_text()))
    report = suite.pytester.path / "report.json"
    result = suite.run(f"--specperf-json={report}")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(errors=1)
    assert reason in result.stdout.str()
    assert "Traceback" not in result.stdout.str()
    rows = report_rows(report)
    assert rows["plain/default/c1"]["verdict"] == "ERROR"
    assert reason in rows["plain/default/c1"]["reason"]
    assert any(line.startswith("plain (ref)") and line.rstrip().endswith("ERROR") for line in result.outlines)


def test_update_keeps_a_corrupt_baseline_aside_and_says_so(make_suite) -> None:
    suite = make_suite(PLAIN_TEST)
    path = stored_baseline(suite)
    path.write_text("{ truncated")
    result = suite.run("--specperf-update", "-v")  # -v lists each stored run, old → new
    result.assert_outcomes(passed=1)
    (kept,) = path.parent.glob(f"{path.name}.unreadable-*")
    assert kept.read_text() == "{ truncated"
    assert f"the previous file was unreadable, kept as {kept.name}" in " ".join(result.stdout.str().split())
    assert "none →" in result.stdout.str()


def test_unwritable_store_fails_the_session_last_and_keeps_the_night_for_later(make_suite, capsys) -> None:
    suite = make_suite(PLAIN_TEST, extra='store = "not-a-directory"\n')
    store = suite.pytester.path / "not-a-directory"
    store.mkdir()  # the store can be written (checked before any server starts), its simulator's folder not:
    blocker = store / "sim"
    blocker.write_text("a file where the store's folder of the simulator's histories should be")
    report = suite.pytester.path / "report.json"
    result = suite.run("--specperf-update", f"--specperf-json={report}")
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # the test passed, but its run could not be stored
    result.assert_outcomes(passed=1)
    text = " ".join(result.stdout.str().split())  # the summary wraps long lines
    assert "cannot write the baseline (Not a directory: " in text
    assert "a file stands where the store's folder" in text  # the advice that fits: not "make it writable"
    assert text.count("cannot write the baseline") == 2  # the ERROR line of the summary, and the last line
    assert "Traceback" not in text and "PermissionError" not in text and "NotADirectoryError" not in text
    assert report_rows(report)["plain/default/c1"]["verdict"] == "ERROR"
    # the last line says so, not "1 passed"; it names the file that keeps the night and how to store it
    last = result.outlines[-1]
    assert last.startswith("pytest-specperf: tonight's runs were NOT stored: "), result.outlines[-3:]
    (kept,) = store.glob("unstored/*/runs.json")  # beside the store, where later sessions leave it alone
    assert f"kept in {kept}" in last and f"`specperf store {kept}`" in last

    blocker.unlink()  # the store is fixed
    for _ in range(2):  # a second time adds nothing: the run's id is in the history already
        assert specperf(["store", str(kept)]) == 0
        assert f"stored the 1 run of {kept}" in capsys.readouterr().out
        assert specperf(["history", "--store", str(store)]) == 0
        history = capsys.readouterr().out
        assert "plain/default/c1: 1 run, " in history, history


SPEC_TESTS_BOTH = """
import pytest

@pytest.mark.specperf(server="plain")
def test_plain(specperf):
    pass
""" + "".join(
    f"""
@pytest.mark.specperf(server="{server}", min_speedup=0.5)
def test_{server.replace("-", "_")}_{i}(specperf):
    pass
"""
    for server in ("eagle3-5step", "eagle3-2step")
    for i in range(3)
)  # the speculative groups are larger: xdist used to hand them out first


@pytest.mark.parametrize("workers", ["2", "3"])
def test_xdist_with_one_server_slot_never_deadlocks(make_suite, workers: str) -> None:
    """Speculative groups used to wait for the reference's slot while holding it from each other."""
    pytest.importorskip("xdist")
    suite = make_suite(SPEC_TESTS_BOTH, extra="max_servers = 1\n")
    result = suite.run("-n", workers, subprocess=True)
    result.assert_outcomes(passed=7)
    assert "no free server slot" not in result.stdout.str()


def test_xdist_any_distribution_finishes_with_one_server_slot(make_suite) -> None:
    """`--dist loadfile` ignores the plugin's scheduler: a waiting worker then gives up its own idle
    reference server (it starts again for its tests) rather than wait for a worker that waits for it."""
    pytest.importorskip("xdist")
    files = {
        "test_a_spec": "import pytest\n"
        + "".join(
            f'\n@pytest.mark.specperf(server="eagle3-5step", min_speedup=0.5)\ndef test_{i}(specperf):\n    pass\n'
            for i in range(2)
        ),
        "test_b_spec": "import pytest\n"
        + "".join(
            f'\n@pytest.mark.specperf(server="eagle3-2step", min_speedup=0.5)\ndef test_{i}(specperf):\n    pass\n'
            for i in range(2)
        ),
        "test_c_plain": PLAIN_TEST,
    }
    suite = make_suite(files, extra="max_servers = 1\n")
    result = suite.run("-n", "2", "--dist", "loadfile", subprocess=True)
    result.assert_outcomes(passed=5)


def test_hung_server_fails_its_measurement_after_the_stall_timeout(make_suite, three_servers) -> None:
    """A server that stops answering mid-round (kill -STOP) used to hold the night for 600 s, silently."""
    suite = make_suite(
        """
        import pytest

        @pytest.mark.specperf(server="eagle3-5step", min_speedup=0.5)
        def test_hung(specperf):
            pass

        @pytest.mark.specperf(server="eagle3-5step", workload="other")
        def test_hung_too(specperf):
            pass

        @pytest.mark.specperf(server="eagle3-2step", min_speedup=0.5)
        def test_fine(specperf):
            pass
        """,
        servers=three_servers('sim_args = ["--sim-stop-after-requests", "3"]'),
        workloads=TINY_WORKLOAD_WITH_STALL,
    )
    report = suite.pytester.path / "report.json"
    result = suite.run(f"--specperf-json={report}")
    result.assert_outcomes(passed=1, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*server 'eagle3-5step' (workload 'default', concurrency 1): made no progress for ? s (stall_timeout 2 s)"
            " with requests in flight*hung*the measurement failed and the server is stopped*",
        ]
    )
    rows = report_rows(report)
    assert rows["eagle3-5step/default/c1"]["verdict"] == "ERROR"
    assert "made no progress" in rows["eagle3-5step/default/c1"]["reason"]
    assert rows["eagle3-2step/default/c1"]["verdict"] == "NEW"  # measured, no baseline yet


#: Only the stall watchdog can end a hung request here: a request timeout of an hour would hang the
#: test instead of passing it, so no wall-clock assertion is needed to tell the two apart.
TINY_WORKLOAD_WITH_STALL = """
[specperf.workloads.default]
prompts = "builtin:chat"
num_requests = 4
max_new_tokens = 24
warmup = 1
stall_timeout = 2
request_timeout = 3600

[specperf.workloads.other]
prompts = "builtin:code"
num_requests = 4
max_new_tokens = 24
warmup = 1
stall_timeout = 2
request_timeout = 3600
"""


def json_report(suite: Any, *args: str, subprocess: bool = False) -> tuple[Any, dict[str, Any]]:
    """Run the suite with a JSON report; the report must exist whatever happened."""
    path = Path(suite.pytester.path) / "report.json"
    result = suite.run(f"--specperf-json={path}", *args, subprocess=subprocess)
    assert path.exists(), result.stdout.str()[-3000:]
    return result, json.loads(path.read_text())


def error_lines(report: dict[str, Any]) -> list[str]:
    return [w for w in report.get("warnings", []) if str(w).startswith("ERROR ")]


# ---- server faults: one case per row of the matrix -------------------------------------------------

MATRIX_TESTS = """
import pytest

@pytest.mark.specperf(server="eagle3-5step")
def test_perf(specperf):
    pass

@pytest.mark.parametrize("specperf_server", ["plain"], indirect=True)
def test_plain(specperf_server):
    assert specperf_server.url
"""


@dataclass(frozen=True)
class Fault:
    """A fault switch on the speculative server and what the session must show for it."""

    sim_args: tuple[str, ...] = ()
    server_keys: str = ""
    pytest_args: tuple[str, ...] = ()
    exit_code: int = pytest.ExitCode.TESTS_FAILED
    outcomes: dict[str, int] = field(default_factory=dict)
    text: str = ""  # fnmatch pattern of a line in pytest's output
    error: str | None = None  # start of the report's "ERROR <label>: ..." line for eagle3-5step
    verdict: str | None = None  # the eagle3-5step row's verdict (None: no row, nothing was measured)
    stored: tuple[str, ...] | None = ("plain",)  # servers with a stored baseline after --specperf-update


FAULTS = {
    "startup-crash": Fault(
        sim_args=("--sim-fail-at-startup",),
        outcomes={"passed": 1, "errors": 1},
        text="*server 'eagle3-5step' exited with code 1 after * s, before it was ready*",
        error="server 'eagle3-5step' exited with code 1 after",
    ),
    "never-ready": Fault(
        sim_args=("--sim-never-ready",),
        server_keys="startup_timeout = 3",
        outcomes={"passed": 1, "errors": 1},
        text="*server 'eagle3-5step' was not ready after its startup_timeout of 3 s; it was stopped*",
        error="server 'eagle3-5step' was not ready after its startup_timeout of 3 s",
    ),
    "exit-mid-run": Fault(
        sim_args=("--sim-exit-after-requests", "3"),
        outcomes={"passed": 1, "errors": 1},
        text="*server 'eagle3-5step' died during the session*",
        error="server 'eagle3-5step' died during the session",
    ),
    "http-500-share": Fault(
        sim_args=("--sim-error-rate", "0.5", "--sim-seed", "3"),
        outcomes={"passed": 1, "failed": 1},
        text="*errors: * of 8 requests failed (*%), allowed 0.0%; first error: HTTP 500*",
        verdict="REGRESSION",  # a failed check; its reason is the text above
        stored=None,  # whether a run with failed requests is stored is the update policy's business
    ),
    "exitfirst": Fault(
        sim_args=("--sim-fail-at-startup",),
        pytest_args=("-x",),
        outcomes={"passed": 1, "errors": 1},
        text="*stopping after 1 failures*",
        error="server 'eagle3-5step' exited with code 1 after",
    ),
}


@pytest.mark.parametrize("fault", FAULTS.values(), ids=FAULTS.keys())
def test_server_fault(make_suite, one_spec_server, fault: Fault) -> None:
    """Error text, exit code, report row, stored files; `make_suite` then checks the process table."""
    keys = "\n".join(filter(None, [f"sim_args = {json.dumps(list(fault.sim_args))}", fault.server_keys]))
    suite = make_suite(MATRIX_TESTS, servers=one_spec_server(keys))
    result, report = json_report(suite, "--specperf-update", *fault.pytest_args)
    output = result.stdout.str()
    assert result.ret == fault.exit_code, output[-3000:]
    result.assert_outcomes(**fault.outcomes)
    result.stdout.fnmatch_lines([fault.text])
    errors = [e for e in error_lines(report) if e.startswith("ERROR eagle3-5step/")]
    if fault.error is None:
        assert errors == []
    else:
        assert errors and errors[0].startswith(f"ERROR eagle3-5step/default/c1: {fault.error}"), errors
    rows = {m["server"]: m["verdict"] for m in report["measurements"]}
    assert rows.get("eagle3-5step") == fault.verdict
    if fault.stored is not None:
        store = suite.pytester.path / ".specperf" / "sim"
        stored = sorted(p.name for p in store.iterdir() if p.is_dir()) if store.is_dir() else []
        assert stored == sorted(fault.stored)
    assert suite.processes() == []


# ---- pytest itself interrupted or killed -----------------------------------------------------------


#: a measured test whose body blocks (BLOCKING_TEST's handshake): measurements exist when the signal comes
MEASURED_BLOCKING_TEST = """
import pytest, time

@pytest.mark.specperf(server="eagle3-5step")
def test_block(specperf):
    print("SERVER-UP", flush=True)
    for _ in range(6000):  # ten minutes, in short sleeps: a signal another thread took is seen within 0.1 s
        time.sleep(0.1)
"""


@pytest.mark.parametrize(
    ("sig", "exit_code", "reported"),
    [
        (signal.SIGINT, pytest.ExitCode.INTERRUPTED, True),
        (signal.SIGTERM, pytest.ExitCode.INTERRUPTED, True),  # turned into KeyboardInterrupt by the plugin
        (signal.SIGKILL, -signal.SIGKILL, False),  # no code of pytest runs
    ],
    ids=["SIGINT", "SIGTERM", "SIGKILL"],
)
def test_signal_to_pytest(make_suite, sig: signal.Signals, exit_code: int, reported: bool) -> None:
    """A signal while a test holds a server: exit code, report, store, and no server left behind."""
    suite = make_suite(MEASURED_BLOCKING_TEST)
    report_path = suite.pytester.path / "report.json"
    with pytest_blocked_in_a_test(suite, f"--specperf-json={report_path}", "--specperf-update") as blocked:
        servers = suite.processes()
        returncode = blocked.signal(sig)
        _, alive = psutil.wait_procs(servers, timeout=30)
    assert alive == []
    assert returncode == exit_code
    assert report_path.exists() == reported
    if reported:
        report = json.loads(report_path.read_text())
        assert {m["server"] for m in report["measurements"]} == {"plain", "eagle3-5step"}
    store = suite.pytester.path / ".specperf" / "sim"
    stored = sorted(p.name for p in store.iterdir() if p.is_dir()) if store.is_dir() else []
    # a session cut short stores the keys whose checks all ran: the reference's (complete, no test of its
    # own), not the blocked test's, whose checks never ran; a killed session leaves the store as it was
    assert stored == (["plain"] if reported else [])
    assert suite.processes() == []
