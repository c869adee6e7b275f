"""Server configs, launching and sharing, end to end: real pytest runs against simulator processes."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import psutil
import pytest
import requests

TEN_TESTS = [
    '@pytest.mark.parametrize("specperf_server", ["plain"], indirect=True)\ndef test_plain_{i}(specperf_server):\n'
    '    assert specperf_server.name == "plain"\n',
    '@pytest.mark.parametrize("specperf_server", ["eagle3-5step"], indirect=True)\n'
    "def test_five_{i}(specperf_server):\n"
    '    assert specperf_server.url.startswith("http://127.0.0.1:")\n',
    '@pytest.mark.parametrize("specperf_server", ["eagle3-2step"], indirect=True)\ndef test_two_{i}(specperf_server):\n'
    '    assert specperf_server.log_path.name.startswith("eagle3-2step")\n',
]


def shuffled_ten_tests(seed: int = 7) -> str:
    """Ten functional tests over three configs, in an order that interleaves the configs."""
    bodies = [TEN_TESTS[i % 3].format(i=i) for i in range(10)]
    random.Random(seed).shuffle(bodies)
    return "import pytest\n\n" + "\n\n".join(bodies)


def test_three_configs_ten_tests_start_three_servers(make_suite) -> None:
    suite = make_suite(shuffled_ten_tests())
    result = suite.run("-v")
    result.assert_outcomes(passed=10)
    assert suite.starts() == ["eagle3-2step", "eagle3-5step", "plain"]
    # the reference server's tests run first, then each config's tests together
    order = [line.split("::")[1].split("[")[0] for line in result.outlines if "PASSED" in line]
    groups = [name.split("_")[1] for name in order]
    assert groups[:4] == ["plain"] * 4
    assert len([g for i, g in enumerate(groups) if i == 0 or g != groups[i - 1]]) == 3


def test_xdist_starts_each_config_once(make_suite) -> None:
    pytest.importorskip("xdist")
    suite = make_suite(shuffled_ten_tests())
    result = suite.run("-n", "2", subprocess=True)
    result.assert_outcomes(passed=10)
    assert suite.starts() == ["eagle3-2step", "eagle3-5step", "plain"]


def test_max_servers_one_never_runs_two(make_suite) -> None:
    suite = make_suite(shuffled_ten_tests(), extra="max_servers = 1\n")
    peak = 0
    done = threading.Event()

    def watch() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, len(suite.processes()))
            done.wait(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        result = suite.run(subprocess=True)
    finally:
        done.set()
        watcher.join()
    result.assert_outcomes(passed=10)
    assert peak == 1


def test_startup_crash_is_reported_fast_with_exit_code_and_log(make_suite, three_servers) -> None:
    suite = make_suite(
        """
        import pytest

        @pytest.mark.parametrize("specperf_server", ["eagle3-5step"], indirect=True)
        def test_a(specperf_server):
            pass

        @pytest.mark.parametrize("specperf_server", ["eagle3-5step"], indirect=True)
        def test_b(specperf_server):
            pass

        @pytest.mark.parametrize("specperf_server", ["plain"], indirect=True)
        def test_plain(specperf_server):
            pass
        """,
        servers=three_servers('sim_args = ["--sim-fail-at-startup"]'),
    )
    result = suite.run()
    result.assert_outcomes(passed=1, errors=2)
    result.stdout.fnmatch_lines(["*server 'eagle3-5step' exited with code 1*before it was ready*", "*| *"])
    assert "eagle3-5step.log" in result.stdout.str()
    assert suite.starts().count("eagle3-5step") == 1  # not retried for the second test
    assert "startup_timeout" not in result.stdout.str()  # failed when the process exited, not at the timeout


def test_never_ready_fails_at_the_startup_timeout(make_suite, three_servers) -> None:
    suite = make_suite(
        """
        import pytest

        @pytest.mark.parametrize("specperf_server", ["eagle3-5step"], indirect=True)
        def test_a(specperf_server):
            pass
        """,
        servers=three_servers('sim_args = ["--sim-never-ready"]').replace(
            "num_draft_tokens = 6\n", "num_draft_tokens = 6\nstartup_timeout = 3\n", 1
        ),
    )
    result = suite.run()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*was not ready after its startup_timeout of 3 s; it was stopped*"])


def test_server_dying_mid_session_errors_its_tests_only(make_suite, three_servers) -> None:
    suite = make_suite(
        """
        import pytest, requests

        def test_a(specperf_server):
            body = {"text": "hi", "sampling_params": {"max_new_tokens": 2}}
            requests.post(specperf_server.url + "/generate", json=body)
            if "--sim-exit-after-requests" in specperf_server.config.sim_args:
                specperf_server.process.proc.wait(timeout=30)  # the fault switch kills it after one request

        def test_b(specperf_server):
            pass
        """,
        servers=three_servers('sim_args = ["--sim-exit-after-requests", "1"]'),
    )
    result = suite.run("-v")
    # plain: a and b pass; eagle3-5step: a kills the server, b errors; eagle3-2step: all pass
    result.assert_outcomes(passed=5, errors=1)
    result.stdout.fnmatch_lines(["*test_b?eagle3-5step? ERROR*"])
    result.stdout.fnmatch_lines(["*server 'eagle3-5step' died during the session*"])


BLOCKING_TEST = """
import pytest, time

@pytest.mark.parametrize("specperf_server", ["eagle3-5step"], indirect=True)
def test_block(specperf_server):
    print("SERVER-UP", flush=True)
    for _ in range(6000):  # ten minutes, in short sleeps: a signal another thread took is seen within 0.1 s
        time.sleep(0.1)
"""


#: how long a signalled pytest may take to stop its servers and exit: a bound, not an expectation (on a
#: busy machine a server's graceful stop alone may take its stop_timeout, 10 s in these suites)
EXIT_WAIT_S = 180


#: pytest as a terminal's foreground job runs it: Ctrl-C raises KeyboardInterrupt. A shell's background
#: job (`cmd &`, as a CI script may start this suite) ignores SIGINT, children inherit that, and Python then
#: installs no handler: the SIGINT a test sends would be lost, whatever the plugin does.
FOREGROUND_PYTEST = (
    "import signal, sys, pytest; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "sys.argv[0] = 'pytest'; sys.exit(pytest.console_main())"
)


@dataclass
class BlockedPytest:
    """A pytest process blocked in a test body with a ready server, and everything it printed."""

    proc: subprocess.Popen[bytes]
    output: list[bytes]

    def signal(self, sig: signal.Signals) -> int:
        """Send `sig`, wait for pytest to exit; a hang fails with what it printed (not a bare timeout)."""
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            printed = b"".join(self.output).decode(errors="replace")
            pytest.fail(f"pytest did not exit within {EXIT_WAIT_S} s of {sig.name}; it printed:\n{printed}")


@contextlib.contextmanager
def pytest_blocked_in_a_test(suite, *args: str) -> Iterator[BlockedPytest]:
    """A pytest process whose test body waits with a ready server; killed at the end if still alive.

    Its output is read to the end by a thread of its own: a process whose pipe nobody reads blocks
    once the pipe is full, and a failure can say what the process printed."""
    proc = suite.pytester.popen(
        [sys.executable, "-c", FOREGROUND_PYTEST, "-s", "-p", "no:cacheprovider", *args, str(suite.pytester.path)],
        stdout=-1,
        stderr=-2,
    )
    output: list[bytes] = []
    try:
        for line in proc.stdout:  # the test body runs only once the server is ready
            output.append(line)
            if b"SERVER-UP" in line:
                break
        assert len(suite.processes()) == 1
        drain = threading.Thread(target=lambda: output.extend(proc.stdout), daemon=True)
        drain.start()
        yield BlockedPytest(proc, output)
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_to_pytest_leaves_no_server(make_suite, sig: signal.Signals) -> None:
    suite = make_suite(BLOCKING_TEST)
    with pytest_blocked_in_a_test(suite) as blocked:
        blocked.signal(sig)
    assert suite.processes() == []


def test_attach_mode_uses_a_running_server_and_never_stops_it(make_suite, sim_server) -> None:
    suite = make_suite(
        """
        import pytest

        @pytest.mark.parametrize("specperf_server", ["plain"], indirect=True)
        def test_attached(specperf_server):
            assert specperf_server.attached
        """
    )
    result = suite.run(f"--specperf-attach=plain={sim_server.url}")
    result.assert_outcomes(passed=1)
    assert suite.starts() == []
    assert sim_server.proc.poll() is None


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"extra": "max_rounds = 1\n"}, "specperf.toml [specperf] max_rounds: must be >= 2, got 1"),
        (
            {"extra": "max_server = 1\n"},
            "specperf.toml [specperf] max_server: unknown key (did you mean 'max_servers'?)",
        ),
        (
            {"extra": 'reference = "eagle3-5step"\n'},
            "specperf.toml [specperf] reference: server 'eagle3-5step' is speculative",
        ),
    ],
)
def test_config_errors_are_usage_errors(make_suite, config: dict[str, str], expected: str) -> None:
    suite = make_suite("def test_x():\n    pass\n", **config)
    result = suite.run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"ERROR: pytest-specperf: {expected}" in result.stderr.str()
    assert "Traceback" not in result.stderr.str() + result.stdout.str()


def test_marker_without_config_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("import pytest\n\n@pytest.mark.specperf(min_speedup=1.1)\ndef test_x(specperf):\n    pass\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*test_x: uses @pytest.mark.specperf or specperf_server, but no config was found*"])


def test_exitfirst_on_a_failure_leaves_no_server(make_suite) -> None:
    suite = make_suite(
        """
        import pytest

        @pytest.mark.parametrize("specperf_server", ["eagle3-5step"], indirect=True)
        def test_fails(specperf_server):
            assert False, "boom"

        @pytest.mark.parametrize("specperf_server", ["eagle3-2step"], indirect=True)
        def test_never_runs(specperf_server):
            pass
        """
    )
    result = suite.run("-x")
    result.assert_outcomes(failed=1)
    assert suite.processes() == []  # (make_suite checks again after the test)


def test_pytest_killed_outright_takes_its_servers_along(make_suite) -> None:
    suite = make_suite(BLOCKING_TEST)
    with pytest_blocked_in_a_test(suite) as blocked:
        servers = suite.processes()
        blocked.signal(signal.SIGKILL)  # no cleanup code of pytest runs
        _, alive = psutil.wait_procs(servers, timeout=30)  # the kernel's parent-death signal stops it
    assert alive == []


def test_keep_servers_leaves_them_running_and_says_how_to_attach(make_suite) -> None:
    suite = make_suite(
        """
        import pytest

        @pytest.mark.parametrize("specperf_server", ["plain"], indirect=True)
        def test_x(specperf_server):
            pass
        """
    )
    result = suite.run("--specperf-keep-servers", subprocess=True)
    try:
        result.assert_outcomes(passed=1)
        result.stdout.fnmatch_lines(
            ["*kept plain running (pid *) at http://127.0.0.1:*; attach with --specperf-attach*"]
        )
        url = next(line for line in result.outlines if "kept plain running" in line).split(" at ")[1].split(";")[0]
        assert requests.get(f"{url}/health", timeout=10).status_code == 200  # alive after pytest exited
        assert len(suite.processes()) == 1
    finally:
        for proc in suite.processes():
            proc.kill()
        psutil.wait_procs(suite.processes(), timeout=10)


FAKE_TP8_SERVER = """\
import os, sys
print("unbuffered=" + os.environ.get("PYTHONUNBUFFERED", "unset"))
for rank in range(8):
    print(f"[2026-12-01 01:00:00 TP{rank}] Load weight begin. avail mem=78.10 GB")
print("[2026-12-01 01:00:09 TP3] Scheduler hit an exception: Traceback (most recent call last):")
print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.00 GiB. GPU 3 has 2.06 GiB free.")
for rank in (0, 1, 2, 4, 5, 6, 7):
    print(f"[2026-12-01 01:00:10 TP{rank}] RuntimeError: NCCL communicator was aborted on rank {rank}")
print("shutdown noise\\n" * 60, end="")
sys.exit(1)
"""


def test_a_failed_start_is_diagnosed_in_the_error_summary_json_and_markdown(make_suite) -> None:
    """On TP8 the cause scrolls away under seven ranks' shutdown noise: the first error of the first failing rank,
    a one-line diagnosis and the log path must reach every place a failed night is read."""
    suite = make_suite(
        "import pytest\n\n@pytest.mark.specperf(server='plain')\ndef test_x(specperf):\n    pass\n",
        servers=f'[specperf.servers.plain]\ncommand = "{sys.executable} fake_tp8.py {{args}}"\n',
    )
    (suite.pytester.path / "fake_tp8.py").write_text(FAKE_TP8_SERVER)
    json_path, md_path = suite.pytester.path / "night.json", suite.pytester.path / "night.md"
    result = suite.run("--specperf-launcher=sglang", f"--specperf-json={json_path}", f"--specperf-markdown={md_path}")
    result.assert_outcomes(errors=1)
    diagnosis = "GPU out of memory: another process holds GPU memory"
    first_error = "first error (TP3): torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.00 GiB"
    result.stdout.fnmatch_lines([f"server 'plain' exited with code 1 *{diagnosis}*{first_error}*; log: *plain.log"])
    result.stdout.fnmatch_lines(["*ERROR plain/default/c1: server 'plain' exited with code 1 *: GPU out of memory*"])
    warnings = json.loads(json_path.read_text())["warnings"]
    assert any(diagnosis in w and first_error in w and "plain.log" in w for w in warnings), warnings
    assert diagnosis in md_path.read_text() and first_error in md_path.read_text()
    log = next(p for p in suite.log_files() if p.name == "plain.log").read_text()
    assert "unbuffered=1" in log  # a crash loses no buffered line


def test_startup_progress_is_visible_under_xdist(make_suite) -> None:
    """A 20-minute start without a line of output looks like a hang: xdist workers' progress must reach the user."""
    pytest.importorskip("xdist")
    suite = make_suite(
        "import pytest\n\n"
        '@pytest.mark.parametrize("specperf_server", ["plain"], indirect=True)\n'
        "def test_x(specperf_server):\n    pass\n"
    )
    result = suite.run("-n", "1", subprocess=True)
    result.assert_outcomes(passed=1)
    output = result.stdout.str() + result.stderr.str()
    assert "[specperf gw0] starting plain:" in output and "[specperf gw0] plain ready after" in output


def test_gpu_memory_left_behind_by_a_server_is_in_the_report(make_suite, monkeypatch, tmp_path) -> None:
    """The next server would die of OOM: a stop that did not free the GPUs must be in the night's report."""
    from pytest_specperf.servers import teardown

    calls, bin_dir = tmp_path / "calls", tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(
        f"#!/bin/sh\nn=$(cat {calls} 2>/dev/null || echo 0); echo $((n+1)) > {calls}\n"
        '[ "$n" -lt 1 ] && echo "0, 500" || echo "0, 70000"\n'
    )
    (bin_dir / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setattr(teardown, "GPU_RELEASE_TIMEOUT_S", 0.0)
    suite = make_suite(
        "import pytest\n\n@pytest.mark.specperf(server='plain')\ndef test_x(specperf):\n    pass\n",
        servers=f'[specperf.servers.plain]\ncommand = "{sys.executable} -m pytest_specperf.sim {{args}}"\n',
    )
    report = tmp_path / "night.json"
    result = suite.run("--specperf-launcher=sglang", f"--specperf-json={report}")
    result.assert_outcomes(passed=1)
    expected = "teardown: stopped plain, GPU 0 not released after 0 s: GPU 0 holds 69500 MiB more than before the start"
    assert expected in json.loads(report.read_text())["warnings"]
    result.stdout.fnmatch_lines(["*teardown: stopped plain, GPU 0 not released*"])


def test_a_port_taken_before_the_server_binds_it_gets_one_restart_on_a_fresh_port(make_suite, monkeypatch) -> None:
    """The port is chosen long before a real server binds it; another process may take it meanwhile."""
    import socket

    from pytest_specperf.servers import launch

    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    taken = squatter.getsockname()[1]
    ports = iter([taken])
    real_free_port = launch.free_port
    monkeypatch.setattr(launch, "free_port", lambda host="127.0.0.1": next(ports, None) or real_free_port(host))
    suite = make_suite(
        "import pytest\n\n@pytest.mark.specperf(server='plain')\ndef test_x(specperf):\n    pass\n",
        servers="[specperf.servers.plain]\n",
    )
    try:
        result = suite.run(f"--specperf-json={suite.pytester.path / 'night.json'}")
    finally:
        squatter.close()
    result.assert_outcomes(passed=1)
    notice = f"plain: port {taken} was taken by another process before the server bound it"
    result.stdout.fnmatch_lines([f"*{notice}*restarted once on a fresh port*"])
    assert any(notice in w for w in json.loads((suite.pytester.path / "night.json").read_text())["warnings"])
    assert suite.starts() == ["plain", "plain"]


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("sruun -N1 --gres=gpu:8 {python} -m sglang.launch_server {args}", "program 'sruun' is not found on PATH"),
        ("bash -c '{python} -m sglang.launch_server {args}", "does not split into words (No closing quotation)"),
    ],
)
def test_a_dry_run_renders_and_checks_every_command_template(make_suite, command: str, expected: str) -> None:
    """`--specperf-launcher sim` runs the simulator in the template's place: a broken srun wrapper must still fail."""
    suite = make_suite(
        'import pytest\n\n@pytest.mark.parametrize("specperf_server", ["plain"], indirect=True)\n'
        "def test_x(specperf_server):\n    pass\n",
        servers=f'[specperf.servers.plain]\ncommand = "{command}"\n',
    )
    result = suite.run()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"ERROR: pytest-specperf: server 'plain' command: {expected}" in result.stderr.str()
    assert suite.starts() == []


def test_a_dry_run_says_what_it_rendered_and_what_it_cannot_check(make_suite) -> None:
    suite = make_suite(
        "import pytest\n\n"
        '@pytest.mark.parametrize("specperf_server", ["plain"], indirect=True)\n'
        "def test_x(specperf_server):\n    pass\n",
        servers='[specperf.servers.plain]\ncommand = "env NCCL_DEBUG=INFO {python} -m sglang.launch_server {args}"\n',
    )
    result = suite.run()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["specperf: dry run: the `command` templates of plain were rendered*not checked*"])
    log = suite.log_files()[0].read_text()
    assert "# specperf: dry run of the command template: env NCCL_DEBUG=INFO python3 -m sglang.launch_server" in log
    assert "--model-path sim/kimi-k2.5-" in log.splitlines()[1]  # the same launch arguments the simulator got
