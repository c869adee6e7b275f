"""Helpers for end-to-end tests: a suite on the simulator, run by a real pytest (pytester).

Every suite gets a unique model path, so the simulator processes it starts can be told apart
from any other on the machine when a test inspects the process table.
"""

from __future__ import annotations

import subprocess
import textwrap
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from plugin_suites import ONE_SPEC_SERVER, SPEC_SERVERS, config_text

from pytest_specperf.config.settings import ServerConfig, SpecperfConfig
from pytest_specperf.servers.launch import ServerProcess, build_launch


@pytest.fixture
def three_servers() -> Callable[[str], str]:
    """`plain`, `eagle3-5step` (with extra lines, e.g. a fault switch) and `eagle3-2step`."""
    return lambda extra: SPEC_SERVERS.replace("num_draft_tokens = 6\n", f"num_draft_tokens = 6\n{extra}\n", 1)


@pytest.fixture
def one_spec_server() -> Callable[[str], str]:
    """The reference plus one EAGLE-3 server, with extra lines (`sim_args = [...]`) for the latter."""
    return lambda extra: ONE_SPEC_SERVER + extra + "\n"


@dataclass
class Suite:
    """A generated test suite and how to find what it left behind."""

    pytester: pytest.Pytester
    token: str

    @property
    def run_dir(self) -> Path:
        return self.pytester.path / "specperf-run"

    def run(self, *args: str, subprocess: bool = False) -> pytest.RunResult:
        """Run the suite's pytest with its server logs in `run_dir`."""
        run = self.pytester.runpytest_subprocess if subprocess else self.pytester.runpytest
        return run(f"--specperf-run-dir={self.run_dir}", "-p", "no:randomly", *args)

    def log_files(self) -> list[Path]:
        return sorted(self.run_dir.glob("*.log")) if self.run_dir.is_dir() else []

    def starts(self) -> list[str]:
        """Server names, one per start, read from the log files the plugin wrote."""
        return sorted(p.name.removesuffix(".log").split("~")[0] for p in self.log_files())

    def processes(self) -> list[psutil.Process]:
        """Live simulator processes started for this suite."""
        found = []
        for proc in psutil.process_iter(["cmdline", "status"]):
            try:
                cmdline = proc.info["cmdline"] or []
                if proc.info["status"] != psutil.STATUS_ZOMBIE and any(self.token in part for part in cmdline):
                    found.append(proc)
            except psutil.Error:
                continue
        return found


@pytest.fixture(autouse=True)
def _private_machine_lock(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sessions run by these tests take a measurement lock of their own, not the machine's in /tmp."""
    monkeypatch.setenv("SPECPERF_LOCK_DIR", str(tmp_path_factory.mktemp("machine-locks")))


@pytest.fixture
def make_suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Suite]]:
    """Write specperf.toml (+ test files) into a fresh directory; returns the Suite.

    Each suite gets its own machine measurement lock (SPECPERF_LOCK_DIR), so tests running in
    parallel do not queue behind each other's measurements. After the test, it also proves the
    plugin left no simulator process behind.
    """
    monkeypatch.setenv("SPECPERF_LOCK_DIR", str(pytester.path / "machine-locks"))
    suites: list[Suite] = []

    def make(tests: str | dict[str, str] = "", **config: str) -> Suite:
        token = uuid.uuid4().hex[:12]
        pytester.makefile(".toml", specperf=config_text(token, **config))
        files = {"test_suite": tests} if isinstance(tests, str) else tests
        for name, text in files.items():
            if text:
                pytester.makepyfile(**{name: textwrap.dedent(text)})
        suite = Suite(pytester, token)
        suites.append(suite)
        return suite

    yield make
    leftovers = [p.pid for suite in suites for p in suite.processes()]
    for pid in leftovers:
        psutil.Process(pid).kill()
    assert not leftovers, f"simulator processes left behind: {leftovers}"


@dataclass
class StandaloneServer:
    url: str
    proc: subprocess.Popen[bytes]


@pytest.fixture
def sim_server(tmp_path: Path) -> Iterator[StandaloneServer]:
    """A simulator started by the test itself (not by the plugin), e.g. to attach to."""
    config = SpecperfConfig(launcher="sim", model="sim/attached", sim_time_scale=0.02, startup_timeout=60)
    process = ServerProcess(build_launch(ServerConfig(name="attached"), config, run_dir=tmp_path))
    process.start()
    try:
        process.wait_ready()
        assert process.proc is not None
        yield StandaloneServer(process.plan.url, process.proc)
    finally:
        process.stop(timeout=10)
