"""pytest hooks and fixtures of pytest-specperf; the work itself happens in `session.py`."""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import signal
import sys
import uuid
import warnings
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import pytest

from pytest_specperf import __version__
from pytest_specperf.config.loading import apply_overrides, find_config_file, parse_attach
from pytest_specperf.config.settings import SpecperfConfig
from pytest_specperf.engines.suite import check_launcher, load_suite
from pytest_specperf.errors import ConfigError, SpecperfError
from pytest_specperf.measure.records import Measurement, MeasurementKey
from pytest_specperf.servers.launch import DRY_RUN_LIMITS, check_command_templates
from pytest_specperf.servers.pool import RunningServer
from pytest_specperf.servers.registry import SharedRegistry
from pytest_specperf.servers.teardown import terminate_tree
from pytest_specperf.session import Options, PlannedTest, SpecperfSession
from pytest_specperf.verdict.checks import CheckResult
from pytest_specperf.verdict.markers import Case, ServerCase, SpecperfMarker, measured_cases, parse_marker
from pytest_specperf.verdict.outcome import outcome_of

SESSION_PLUGIN = "specperf-session"
TARGET_PARAM = "specperf_server"
RESULT_KEY = pytest.StashKey["SpecperfResult"]()


class SpecperfWarning(UserWarning):
    """A result that passes but deserves a look (an INCONCLUSIVE check, a sanity warning)."""


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("specperf", "speculative-decoding performance (pytest-specperf)")
    add = group.addoption
    add(
        "--specperf-config",
        metavar="PATH",
        help="config file (default: specperf.toml or [tool.specperf] in the rootdir)",
    )
    add("--specperf-launcher", metavar="ENGINE|sim", help="override `launcher`: sim dry-runs a suite on the simulator")
    add("--specperf-rounds", type=int, metavar="N", help="override `rounds` (measured rounds per measurement)")
    add("--specperf-sim-time-scale", type=float, metavar="F", help="override `sim_time_scale` (simulator delays x F)")
    add(
        "--specperf-attach",
        action="append",
        default=[],
        metavar="NAME=URL",
        help="use the running server at URL for config NAME (never started or stopped)",
    )
    add("--specperf-servers", metavar="A,B", help="run only tests of these server configs (shards on several machines)")
    add(
        "--specperf-update",
        action="store_true",
        help="store this session's runs as the new normal: each starts a new segment of its history",
    )
    add(
        "--specperf-record",
        action="store_true",
        help="append this session's good runs to their histories (the nightly job passes it)",
    )
    add(
        "--specperf-update-force",
        action="store_true",
        help="like --specperf-update, but also store runs with failed checks, request errors or sanity warnings",
    )
    add(
        "--specperf-strict",
        action="store_true",
        help="pass only checks credibly within their thresholds (config strict)",
    )
    add(
        "--specperf-on-incomparable",
        choices=("fail", "skip", "warn"),
        default="fail",
        help="what a baseline from a different setup does (default: fail)",
    )
    add(
        "--specperf-run-dir",
        metavar="DIR",
        help="where server logs go (default: a specperf folder in pytest's basetemp)",
    )
    add(
        "--specperf-keep-servers",
        action="store_true",
        help="leave launched servers running at exit and print how to attach",
    )
    add(
        "--specperf-report",
        choices=("none", "short", "full"),
        default="short",
        help="terminal summary detail (default: short)",
    )
    add("--specperf-json", metavar="PATH", help="write the session's results as JSON")
    add(
        "--specperf-markdown",
        metavar="PATH",
        help="write the summary as Markdown (a GitHub Actions job also gets it in $GITHUB_STEP_SUMMARY)",
    )
    add("--specperf-bmf", metavar="PATH", help="write Bencher Metric Format JSON")
    add("--specperf-plot", metavar="DIR", help="write PNG plots (needs the `plot` extra: matplotlib)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "specperf(server=, workload=, min_speedup=, throughput=, accept_length=, tpot_ms=, ttft_ms=, "
        "max_regression=, max_regression_accept_length=, lossless=, max_error_rate=): "
        "measure a server config and check its performance",
    )
    try:
        specperf_config = _load(config)
    except ConfigError as exc:
        raise pytest.UsageError(f"pytest-specperf: {exc}") from None
    plugin = SpecperfPlugin(config, specperf_config)
    if plugin.options.plot_dir:
        from pytest_specperf.report.plots import missing_matplotlib

        if problem := missing_matplotlib():  # say so before any server starts, not after the run
            raise pytest.UsageError(f"pytest-specperf: {problem}")
    config.pluginmanager.register(plugin, SESSION_PLUGIN)
    for message in specperf_config.warnings if specperf_config else ():
        config.issue_config_time_warning(SpecperfWarning(message), stacklevel=2)
    if specperf_config is not None and config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(XdistHooks(plugin), "specperf-xdist")


def _load(config: pytest.Config) -> SpecperfConfig | None:
    found = find_config_file(Path(config.rootpath), config.getoption("specperf_config"))
    invoked = Path(config.invocation_params.dir)
    if found is None and invoked != Path(config.rootpath):
        # pytest picks its rootdir before it knows this plugin's options, so the PATH of
        # `--specperf-json PATH` (with a space) counts as a test path and can pull the rootdir
        # away from the suite: the directory pytest was run from is the suite's then
        found = find_config_file(invoked, None)
    if found is None:
        return None
    only = config.getoption("specperf_servers")
    launcher = config.getoption("specperf_launcher")
    specperf_config = apply_overrides(
        load_suite(*found),
        launcher=launcher,
        rounds=config.getoption("specperf_rounds"),
        attach=parse_attach(config.getoption("specperf_attach")),
        only_servers=[s for s in only.split(",") if s] if only else None,
        sim_time_scale=config.getoption("specperf_sim_time_scale"),
    )
    if launcher is not None:
        check_launcher(specperf_config, "--specperf-launcher")
    check_command_templates(specperf_config)
    return specperf_config


@dataclass
class SpecperfResult:
    """What the `specperf` fixture gives a test: its measurement and how it compares."""

    server: RunningServer
    key: MeasurementKey  # what was measured: server, workload, concurrency
    result: Measurement
    reference: Measurement | None = None
    marker: SpecperfMarker | None = None
    checks: list[CheckResult] = field(default_factory=list)

    @property
    def speedup(self) -> float | None:
        """Ratio of mean throughputs, this server over the reference, same workload and session."""
        if self.reference is None:
            return None
        ref = self.reference.samples("output_throughput")
        cur = self.result.samples("output_throughput")
        if not ref or not cur or sum(ref) == 0:
            return None
        return (sum(cur) / len(cur)) / (sum(ref) / len(ref))


class SpecperfPlugin:
    """Hooks that need the session state; registered once per pytest process."""

    def __init__(self, config: pytest.Config, specperf_config: SpecperfConfig | None) -> None:
        self.pytest_config = config
        self.config = specperf_config
        self.options = Options(
            update=config.getoption("specperf_update") or config.getoption("specperf_update_force"),
            record=config.getoption("specperf_record"),
            update_force=config.getoption("specperf_update_force"),
            strict=config.getoption("specperf_strict"),
            keep_servers=config.getoption("specperf_keep_servers"),
            on_incomparable=config.getoption("specperf_on_incomparable"),
            report=config.getoption("specperf_report"),
            json_path=config.getoption("specperf_json"),
            markdown_path=config.getoption("specperf_markdown"),
            bmf_path=config.getoption("specperf_bmf"),
            plot_dir=config.getoption("specperf_plot"),
            verbose=config.getoption("verbose"),
        )
        only = config.getoption("specperf_servers")
        self.only_servers = {s for s in only.split(",") if s} if only else None
        self.usage_errors: list[str] = []
        self.written: list[str] = []
        self.session: SpecperfSession | None = None
        self._previous_sigterm: Any = None
        workerinput = getattr(config, "workerinput", None) or {}
        # under xdist: the folder all workers of this session (and only of this session) share
        self.session_id: str = workerinput.get("specperf_session") or uuid.uuid4().hex[:12]

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """The session state is made here: the tmp_path factory (for the run dir) exists by now."""
        if self.config is not None:
            workerinput = getattr(self.pytest_config, "workerinput", None)
            self.session = SpecperfSession(
                self.config, self.options, self.run_dir, progress=self.progress, shared_dir=self.shared_dir,
                worker=workerinput["workerid"] if workerinput else None, session_id=self.session_id,
            )  # fmt: skip
            try:  # a shared store's remote must answer before any server starts
                self.session.prepare_store()
            except SpecperfError as exc:
                raise pytest.UsageError(f"pytest-specperf: store: {exc}") from None
            self._install_signal_handlers()
            atexit.register(self._shutdown)

    # ---- helpers -------------------------------------------------------------------------

    @functools.cached_property
    def run_dir(self) -> Path:
        """Server logs (and, under xdist, the state workers share): one folder per session."""
        workerinput = getattr(self.pytest_config, "workerinput", None)
        if workerinput and "specperf_run_dir" in workerinput:
            return Path(workerinput["specperf_run_dir"])
        explicit = self.pytest_config.getoption("specperf_run_dir")
        if explicit:
            path = Path(explicit).resolve()
            path.mkdir(parents=True, exist_ok=True)
            return path
        factory = self.pytest_config._tmp_path_factory  # type: ignore[attr-defined]
        return factory.mktemp("specperf", numbered=False)

    @property
    def shared_dir(self) -> Path:
        return self.run_dir / f".xdist-{self.session_id}"

    def progress(self, message: str) -> None:
        """A progress line on the terminal, even while pytest captures output.

        An xdist worker's terminal output never reaches the user; its stderr (inherited from
        the controller) does, so a worker writes there, naming itself.
        """
        workerinput = getattr(self.pytest_config, "workerinput", None)
        reporter = self.pytest_config.pluginmanager.get_plugin("terminalreporter")
        capman = self.pytest_config.pluginmanager.get_plugin("capturemanager")
        if workerinput and sys.__stderr__ is not None:
            with capman.global_and_fixture_disabled() if capman else contextlib.nullcontext():
                sys.__stderr__.write(f"[specperf {workerinput['workerid']}] {message}\n")
                sys.__stderr__.flush()
            return
        if reporter is None:
            return
        if capman is not None:
            with capman.global_and_fixture_disabled():
                reporter.write_line(f"[specperf] {message}")
        else:
            reporter.write_line(f"[specperf] {message}")

    def _install_signal_handlers(self) -> None:
        """SIGTERM (a CI job cancelled) becomes KeyboardInterrupt, so teardown stops servers."""
        try:
            self._previous_sigterm = signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
        except ValueError:  # not the main thread (embedded runs)
            self._previous_sigterm = None

    def _shutdown(self) -> None:
        if self.session is None:
            return
        for server in self.session.shutdown():
            pid = server.process.pid if server.process else server.pid
            self._say_kept(server.name, pid, server.url)

    def _say_kept(self, name: str, pid: int | None, url: str | None) -> None:
        self.progress(f"kept {name} running (pid {pid}) at {url}; attach with --specperf-attach {name}={url}")

    # ---- collection ----------------------------------------------------------------------

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        if self.config is None:
            return [f"specperf {__version__}: no specperf.toml found (inactive)"]
        c = self.config
        lines = [f"specperf {__version__}: config {c.source}, launcher {c.launcher}, store {c.store}"]
        if c.launcher == "sim":
            lines.append(
                f"specperf: SIMULATED servers (pytest_specperf.sim, profile {c.sim_profile or 'default'}, "
                f"time scale {c.sim_time_scale:g}): numbers model a GPU server, they are not one"
            )
            templates = sorted(s.name for s in c.servers.values() if s.command and not s.is_attached)
            if templates:
                lines.append(
                    f"specperf: dry run: the `command` templates of {', '.join(templates)} were rendered and their "
                    f"programs found; {DRY_RUN_LIMITS}"
                )
        lines += [f"specperf: {note}" for note in c.notes]
        if self.session:
            lines.append(f"specperf: server logs in {self.session.run_dir}")
        return lines

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        mark = metafunc.definition.get_closest_marker("specperf")
        uses_server = TARGET_PARAM in metafunc.fixturenames
        if mark is None and not uses_server:
            return
        if _user_parametrized(metafunc, TARGET_PARAM):
            return
        nodeid = metafunc.definition.nodeid
        if self.config is None:
            self.usage_errors.append(
                f"{nodeid}: uses @pytest.mark.specperf or specperf_server, but no config was found: add "
                f"specperf.toml (or [tool.specperf] in pyproject.toml) to {metafunc.config.rootpath}, "
                "or pass --specperf-config PATH" + _spaced_path_hint(metafunc.config)
            )
            return
        try:
            if mark is not None:
                marker = parse_marker(mark.args, mark.kwargs, nodeid, self.config)
                cases: list[tuple[Case, str]] = [(c, i) for c, i in measured_cases(marker, self.config)]
            else:
                cases = [(ServerCase(name), name) for name in self.config.servers]
        except ConfigError as exc:
            self.usage_errors.append(str(exc))
            return
        if self.only_servers is not None:
            cases = [(c, i) for c, i in cases if c.server in self.only_servers]
        if TARGET_PARAM not in metafunc.fixturenames:
            metafunc.fixturenames.append(TARGET_PARAM)
        if not cases:
            metafunc.parametrize(
                TARGET_PARAM,
                [pytest.param(None, marks=pytest.mark.skip(reason="not in --specperf-servers"))],
                indirect=True,
            )
            return
        metafunc.parametrize(TARGET_PARAM, [c for c, _ in cases], ids=[i for _, i in cases], indirect=True)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        if self.usage_errors:
            raise pytest.UsageError("pytest-specperf:\n  " + "\n  ".join(self.usage_errors))
        if self.session is None:
            return
        found = [(item, _item_case(item)) for item in items]
        keys = self.session.group_order([t for _, t in found])
        order = sorted(range(len(items)), key=lambda i: keys[i])
        items[:] = [found[i][0] for i in order]
        planned = []
        for item, case in (found[i] for i in order):
            if case is None:
                continue
            mark = item.get_closest_marker("specperf")
            marker = parse_marker(mark.args, mark.kwargs, item.nodeid, self.session.config) if mark else None
            planned.append(PlannedTest(item.nodeid, case, marker))
        self.session.plan(planned)

    # ---- running -------------------------------------------------------------------------

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, Any, Any]:
        try:
            return (yield)
        finally:
            if self.session is not None:
                self.session.finished(item.nodeid)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, Any, Any]:
        outcome = yield
        result = item.stash.get(RESULT_KEY, None)
        if result is not None and self.session is not None:
            self._check(item, result)
        return outcome

    def _check(self, item: pytest.Item, result: SpecperfResult) -> None:
        """Fail the test that regressed (not the session), with the evidence in the message."""
        assert self.session is not None
        try:
            evaluation = self.session.evaluate(item.nodeid, result.result, result.reference)
        except SpecperfError as exc:  # e.g. the server died during adaptive rounds
            self.session.record_error(result.result.key, str(exc))
            _fail(str(exc))
        result.checks = evaluation.checks
        measurement = result.result
        for name in ("output_throughput", "accept_length", "mean_tpot_ms", "mean_ttft_ms"):
            samples = measurement.samples(name)
            if samples:
                item.user_properties.append((f"specperf_{name}", round(sum(samples) / len(samples), 4)))
        item.user_properties.append(("specperf_verdict", evaluation.verdict.value))
        if result.speedup is not None:
            item.user_properties.append(("specperf_speedup", round(result.speedup, 4)))
        outcome = outcome_of(
            measurement, evaluation, on_incomparable=self.options.on_incomparable, strict=self.session.strict
        )
        for message in outcome.warnings:
            warnings.warn(SpecperfWarning(message), stacklevel=1)
        if outcome.action == "fail":
            pytest.fail(outcome.message or "", pytrace=False)
        if outcome.action == "skip":
            pytest.skip(outcome.message or "")

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self._shutdown()
        if self.session is not None:
            if exitstatus == pytest.ExitCode.INTERRUPTED:  # Ctrl-C, SIGTERM: checks never ran to the end
                self.session.storing_interrupted()
            else:
                self.session.store_results()  # every check of the session's measurements has run
            if self.session.store_failed:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        workeroutput = getattr(self.pytest_config, "workeroutput", None)
        if workeroutput is not None and self.session is not None:
            workeroutput["specperf"] = json.dumps(self.session.worker_payload())
        elif self.session is not None and self.session.worker is None:
            self._kill_worker_leftovers()
            if self.session.measurements or self.session.errors():
                from pytest_specperf.report.outputs import write_outputs

                self.written = write_outputs(self.session.report(), self.session)

    def _kill_worker_leftovers(self) -> None:
        """Controller's safety net: servers xdist workers left (still shared at their end, or a crash).

        With --specperf-keep-servers they stay, and the controller (whose output is shown) says how
        to attach to them.
        """
        if not (self.shared_dir / "servers.json").exists():
            return
        for name, entry in SharedRegistry(self.shared_dir, "controller").running().items():
            if self.options.keep_servers:
                self._say_kept(name, entry["pid"], entry.get("url"))
            else:
                terminate_tree(entry["pid"], timeout=self.config.stop_timeout if self.config else 10)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self._shutdown()
        if self._previous_sigterm is not None:
            with contextlib.suppress(ValueError):
                signal.signal(signal.SIGTERM, self._previous_sigterm)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.session is None or self.options.report == "none":
            return
        if not self.session.measurements and not self.session.errors():
            return
        from pytest_specperf.report.terminal import terminal_summary

        terminal_summary(terminalreporter, self.session)
        for line in self.written:
            terminalreporter.write_line(line)


def _fail(message: str) -> NoReturn:
    """Fail the test with `message` alone: not chained to the exception being handled, which would
    print the same error a second time ("During handling of the above exception...")."""
    __tracebackhide__ = True
    raise pytest.fail.Exception(message, pytrace=False) from None


PATH_OPTIONS = ("--specperf-json", "--specperf-markdown", "--specperf-bmf", "--specperf-plot", "--specperf-run-dir")


def _spaced_path_hint(config: pytest.Config) -> str:
    """How to fix a rootdir that a path option's value (given after a space) moved."""
    args = [str(a) for a in config.invocation_params.args]
    spaced = [a for a in args if a in PATH_OPTIONS]
    if not spaced:
        return ""
    return (
        f" (pytest chose rootdir {config.rootpath} counting the value after {spaced[0]} as a test path: "
        f"write {spaced[0]}=PATH, with '=', or pass --rootdir)"
    )


def _raise_keyboard_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _user_parametrized(metafunc: pytest.Metafunc, name: str) -> bool:
    for mark in metafunc.definition.iter_markers("parametrize"):
        names = mark.args[0] if mark.args else mark.kwargs.get("argnames", "")
        if isinstance(names, str):
            names = [n.strip() for n in names.split(",")]
        if name in names:
            return True
    return False


def _case(value: object) -> Case | None:
    """A parametrized value as a case; users parametrize `specperf_server` with plain names."""
    if isinstance(value, str):
        return ServerCase(value)
    return value if isinstance(value, ServerCase | MeasurementKey) else None


def _item_case(item: pytest.Item) -> Case | None:
    callspec = getattr(item, "callspec", None)
    if callspec is None or TARGET_PARAM not in callspec.params:
        return None
    return _case(callspec.params[TARGET_PARAM])


def _plugin(request: pytest.FixtureRequest) -> SpecperfPlugin:
    plugin = request.config.pluginmanager.get_plugin(SESSION_PLUGIN)
    if plugin is None or plugin.session is None:
        pytest.fail("pytest-specperf is not configured: no specperf.toml found", pytrace=False)
    return plugin


# ---- fixtures ----------------------------------------------------------------------------


@pytest.fixture
def specperf_server(request: pytest.FixtureRequest) -> RunningServer:
    """The running server of this test's config (`.name`, `.url`, `.config`, `.log_path`).

    Parametrized over every server config by default; narrow it with
    `@pytest.mark.parametrize("specperf_server", ["plain"], indirect=True)`.
    """
    plugin = _plugin(request)
    case = _case(getattr(request, "param", None))
    if case is None:
        pytest.fail("specperf_server needs a server: parametrize it or use @pytest.mark.specperf", pytrace=False)
    assert plugin.session is not None
    if case.server not in plugin.session.config.servers:
        pytest.fail(f"unknown server config {case.server!r}", pytrace=False)
    try:
        return plugin.session.server(case.server)
    except SpecperfError as exc:
        _fail(str(exc))


@pytest.fixture
def specperf(request: pytest.FixtureRequest, specperf_server: RunningServer) -> SpecperfResult:
    """This test's measurement, its reference measurement and its checks (measured before the body runs)."""
    plugin = _plugin(request)
    assert plugin.session is not None
    key = request.node.callspec.params[TARGET_PARAM]
    if not isinstance(key, MeasurementKey):
        pytest.fail("the specperf fixture needs @pytest.mark.specperf on the test", pytrace=False)
    planned = plugin.session.planned.get(request.node.nodeid)
    session = plugin.session
    try:
        result = session.measurement(key)
        reference = session.reference_measurement(key)
        if not plugin.options.update:
            session.baseline(result.key)
    except SpecperfError as exc:
        session.record_error(key, str(exc))
        _fail(str(exc))
    value = SpecperfResult(
        server=specperf_server, key=key, result=result, reference=reference,
        marker=planned.marker if planned else None,
    )  # fmt: skip
    request.node.stash[RESULT_KEY] = value
    return value


@pytest.fixture(autouse=True)
def _specperf_marked(request: pytest.FixtureRequest) -> None:
    """A marked test is a complete performance test even with an empty body."""
    if request.node.get_closest_marker("specperf") is not None and TARGET_PARAM in getattr(
        getattr(request.node, "callspec", None), "params", {}
    ):
        request.getfixturevalue("specperf")


class XdistHooks:
    """pytest-xdist hooks, registered only when xdist is installed (its hookspecs exist then)."""

    def __init__(self, plugin: SpecperfPlugin) -> None:
        self.plugin = plugin

    def pytest_configure_node(self, node: Any) -> None:
        """Every worker shares the controller's run directory (server registry, measurements, logs)."""
        node.workerinput["specperf_run_dir"] = str(self.plugin.run_dir)
        node.workerinput["specperf_session"] = self.plugin.session_id

    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        """With `--dist load` (the default for `-n`), keep each server's tests on one worker."""
        if config.getoption("dist") != "load" or self.plugin.config is None:
            return None
        from pytest_specperf.servers.scheduling import ServerScheduling

        return ServerScheduling(config, log, servers=self.plugin.config.servers)

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """Collect a worker's measurements and verdicts for the controller's summary."""
        payload = getattr(node, "workeroutput", {}).get("specperf")
        if payload and self.plugin.session is not None:
            self.plugin.session.absorb(json.loads(payload))
