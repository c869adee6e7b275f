"""pytest hooks of pytest-specperf; the work itself happens in the session (session/), the fixtures
tests use are fixtures.py, the options options.py, and the hooks other plugins implement hookspec.py.

Options and markers are parsed once: the options into a frozen `Options` when pytest is configured,
each marker into a `SpecperfMarker` when its test function is parametrized (kept for its items).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import sys
import uuid
import warnings
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from pytest_specperf import __version__, fixtures, hookspec
from pytest_specperf.common import interrupts
from pytest_specperf.config.settings import SIM_LAUNCHER, SpecperfConfig
from pytest_specperf.engines.suite import server_plans
from pytest_specperf.errors import ConfigError, SpecperfError
from pytest_specperf.fixtures import RESULT_KEY, SESSION_KEY, TARGET_PARAM, SpecperfResult, fail, item_case
from pytest_specperf.measure.fingerprint import Fingerprint
from pytest_specperf.measure.records import MeasurementKey
from pytest_specperf.options import Options, add_options, load_suite_config, spaced_path_hint
from pytest_specperf.servers.launch import DRY_RUN_LIMITS
from pytest_specperf.servers.registry import SharedRegistry
from pytest_specperf.servers.teardown import terminate_tree
from pytest_specperf.session import SpecperfSession
from pytest_specperf.session.payload import WorkerPayload
from pytest_specperf.session.plan import PlannedTest
from pytest_specperf.sim import DEFAULT_PROFILE, load_profile
from pytest_specperf.sim.profile import ProfileError
from pytest_specperf.verdict.drift import FingerprintDiff, comparable_by, default_comparable
from pytest_specperf.verdict.markers import (
    MARKER_ARGUMENTS,
    Case,
    ServerCase,
    SpecperfMarker,
    measured_cases,
    parse_marker,
)
from pytest_specperf.verdict.outcome import outcome_of

SESSION_PLUGIN = "specperf-session"
#: `pytest --markers`: made from the marker's own declaration of its arguments and their values, so a new
#: one is never left out
MARKER_HELP = (
    f"specperf({', '.join(f'{key}=' for key in MARKER_ARGUMENTS)}): measure a server config and check its "
    f"performance. {'; '.join(f'{key}={values}' for key, values in MARKER_ARGUMENTS.items())}"
)


def simulated_header(config: SpecperfConfig) -> str:
    """The header's simulator line: the profile by the one name every output uses, and the GPUs it models
    when a server's launch counts other GPUs (its fingerprint counts 1 GPU under a profile of eight)."""
    name = config.sim_profile or DEFAULT_PROFILE
    try:
        modelled = load_profile(name).server.tp_size
    except ProfileError:  # the server's start names the profile's problem
        modelled = None
    counts = {plan.engine.gpu_count(plan.server.args) for plan in server_plans(config).values() if not plan.server.url}
    unlike = sorted(counts - {modelled}) if modelled is not None else []
    gpus = (
        f"; it models {modelled} GPUs, the servers are launched for {', '.join(map(str, unlike))} (their "
        "fingerprints count those; timings are the profile's)"
        if unlike
        else ""
    )
    return (
        f"specperf: SIMULATED servers (pytest_specperf.sim, profile {name}, time scale {config.sim_time_scale:g}"
        f"{gpus}): numbers model a GPU server, they are not one"
    )


class SpecperfWarning(UserWarning):
    """A result that passes but deserves a look (a SUSPECT check, a sanity warning)."""


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspec)


@pytest.hookimpl(trylast=True)
def pytest_specperf_comparable(drift: FingerprintDiff) -> bool:
    """The plugin's rule, asked last: a suite's implementation that answers decides first."""
    return default_comparable(drift)


def _comparable_by_hook(
    config: pytest.Config, baseline: Fingerprint, current: Fingerprint, drift: FingerprintDiff
) -> bool:
    """Whether two fingerprints are comparable, as the session's `pytest_specperf_comparable` says."""
    answer = config.hook.pytest_specperf_comparable(config=config, baseline=baseline, current=current, drift=drift)
    return default_comparable(drift) if answer is None else bool(answer)


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_HELP)
    config.add_cleanup(comparable_by(functools.partial(_comparable_by_hook, config)))
    if not config.pluginmanager.is_registered(fixtures):  # the fixtures tests use live in their own module
        config.pluginmanager.register(fixtures, "specperf-fixtures")
    try:
        options = Options.from_pytest_config(config)
        specperf_config = load_suite_config(
            options, Path(config.rootpath), Path(config.invocation_params.dir), config.args
        )
    except ConfigError as exc:
        raise pytest.UsageError("pytest-specperf: " + str(exc).replace("\n", "\n  pytest-specperf: ")) from None
    if options.outputs.plots:
        from pytest_specperf.report.plots import missing_matplotlib

        if problem := missing_matplotlib():  # say so before any server starts, not after the run
            raise pytest.UsageError(f"pytest-specperf: {problem}")
    plugin = SpecperfPlugin(config, options, specperf_config)
    config.pluginmanager.register(plugin, SESSION_PLUGIN)
    for message in specperf_config.warnings if specperf_config else ():
        config.issue_config_time_warning(SpecperfWarning(message), stacklevel=2)
    if specperf_config is not None and config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(XdistHooks(plugin), "specperf-xdist")


class SpecperfPlugin:
    """Hooks that need the session state; registered once per pytest process."""

    def __init__(self, config: pytest.Config, options: Options, specperf_config: SpecperfConfig | None) -> None:
        self.pytest_config = config
        self.options = options
        self.config = specperf_config
        self.usage_errors: list[str] = []
        self.markers: dict[str, SpecperfMarker] = {}  # parsed once per test function, by its node id
        self.written: list[str] = []
        self.session: SpecperfSession | None = None
        self._previous_handlers: Any = None
        self.workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
        # under xdist: the folder all workers of this session (and only of this session) share
        self.session_id: str = (self.workerinput or {}).get("specperf_session") or uuid.uuid4().hex[:12]

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """The session state is made here: the tmp_path factory (for the run dir) exists by now."""
        if self.config is None:
            return
        self.session = SpecperfSession(
            self.config,
            self.options,
            self.run_dir,
            progress=self.progress,
            detail=self.detail,
            shared_dir=self.shared_dir,
            worker=self.workerinput["workerid"] if self.workerinput else None,
            session_id=self.session_id,
            update_fingerprint=self._update_fingerprint,
        )
        self.pytest_config.stash[SESSION_KEY] = self.session
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
        if self.workerinput and "specperf_run_dir" in self.workerinput:
            return Path(self.workerinput["specperf_run_dir"])
        if self.options.run_dir:
            path = Path(self.options.run_dir).resolve()
            path.mkdir(parents=True, exist_ok=True)
            return path
        factory = self.pytest_config._tmp_path_factory  # type: ignore[attr-defined]
        return factory.mktemp("specperf", numbered=False)

    @property
    def shared_dir(self) -> Path:
        return self.run_dir / f".xdist-{self.session_id}"

    def progress(self, message: str) -> None:
        """A line about servers and the store (starting, ready, stopping, pushed): shown unless `-q`,
        since a GPU server's start takes many minutes and a silent terminal looks hung."""
        if self.pytest_config.get_verbosity() >= 0:
            self._write(message)

    def detail(self, message: str) -> None:
        """A line per warmup and measured round: only under `-v`, as pytest shows a test per line only
        then; at the default verbosity they would break pytest's own progress line of dots."""
        if self.pytest_config.get_verbosity() >= 1:
            self._write(message)

    def _write(self, message: str) -> None:
        """A progress line on the terminal, on a line of its own, even while pytest captures output.

        An xdist worker's terminal output never reaches the user; its stderr (inherited from
        the controller) does, so a worker writes there, naming itself.
        """
        reporter = self.pytest_config.pluginmanager.get_plugin("terminalreporter")
        capman = self.pytest_config.pluginmanager.get_plugin("capturemanager")
        uncaptured = capman.global_and_fixture_disabled() if capman else contextlib.nullcontext()
        if self.workerinput and sys.__stderr__ is not None:
            with uncaptured:
                sys.__stderr__.write(f"[specperf {self.workerinput['workerid']}] {message}\n")
                sys.__stderr__.flush()
        elif reporter is not None:
            with uncaptured:
                _own_line(reporter)
                reporter.write_line(f"[specperf] {message}")

    def _update_fingerprint(
        self, server: Any, key: MeasurementKey, identity: dict[str, str], environment: dict[str, str]
    ) -> None:
        self.pytest_config.hook.pytest_specperf_update_fingerprint(
            config=self.pytest_config, server=server, key=key, identity=identity, environment=environment
        )

    def _update_json(self, report: Any, document: dict[str, Any]) -> None:
        self.pytest_config.hook.pytest_specperf_update_json(config=self.pytest_config, report=report, document=document)

    def _install_signal_handlers(self) -> None:
        """SIGTERM (a CI job cancelled) becomes KeyboardInterrupt, so teardown stops servers; Ctrl-C is recorded."""
        self._previous_handlers = interrupts.install()

    def _shutdown(self) -> None:
        if self.session is None:
            return
        for server in self.session.shutdown():
            pid = server.process.pid if server.process else server.pid
            self._say_kept(server.name, pid, server.url)

    def _say_kept(self, name: str, pid: int | None, url: str | None) -> None:
        self._write(f"kept {name} running (pid {pid}) at {url}; attach with --specperf-attach {name}={url}")

    # ---- collection ----------------------------------------------------------------------

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        if self.config is None:
            return [f"specperf {__version__}: no specperf.toml found (inactive)"]
        c = self.config
        lines = [f"specperf {__version__}: config {c.source}, launcher {c.launcher}, store {c.store}"]
        if c.launcher == SIM_LAUNCHER:
            lines.append(simulated_header(c))
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
        if (mark is None and not uses_server) or _user_parametrized(metafunc, TARGET_PARAM):
            return
        nodeid = metafunc.definition.nodeid
        if self.config is None:
            self.usage_errors.append(
                f"{nodeid}: uses @pytest.mark.specperf or specperf_server, but no config was found: add "
                f"specperf.toml (or [tool.specperf] in pyproject.toml) to {metafunc.config.rootpath}, "
                "or pass --specperf-config PATH" + spaced_path_hint(metafunc.config)
            )
            return
        try:
            if mark is not None:
                marker = self._marker(nodeid, mark)
                cases: list[tuple[Case, str]] = [(c, i) for c, i in measured_cases(marker, self.config)]
            else:
                cases = [(ServerCase(name), name) for name in self.config.servers]
        except ConfigError as exc:
            self.usage_errors.append(str(exc))
            return
        cases = [(c, i) for c, i in cases if self.options.selects(c.server)]
        if TARGET_PARAM not in metafunc.fixturenames:
            metafunc.fixturenames.append(TARGET_PARAM)
        if not cases:
            skip = pytest.mark.skip(reason="not in --specperf-servers")
            metafunc.parametrize(TARGET_PARAM, [pytest.param(None, marks=skip)], indirect=True)
            return
        metafunc.parametrize(TARGET_PARAM, [c for c, _ in cases], ids=[i for _, i in cases], indirect=True)

    def _marker(self, nodeid: str, mark: pytest.Mark) -> SpecperfMarker:
        """The marker of the test function `nodeid`, parsed on first use (ConfigError names the test)."""
        if nodeid not in self.markers:
            assert self.config is not None
            self.markers[nodeid] = parse_marker(mark.args, mark.kwargs, nodeid, self.config)
        return self.markers[nodeid]

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        if self.usage_errors:
            raise pytest.UsageError("pytest-specperf:\n  " + "\n  ".join(self.usage_errors))
        if self.session is None:
            return
        found = [(item, item_case(item)) for item in items]
        keys = self.session.plan.group_order([t for _, t in found])
        order = sorted(range(len(items)), key=lambda i: keys[i])
        items[:] = [found[i][0] for i in order]
        planned = []
        try:
            for item, case in (found[i] for i in order):
                if case is not None:
                    mark = item.get_closest_marker("specperf")
                    marker = self._marker(_function_id(item), mark) if mark else None
                    planned.append(PlannedTest(item.nodeid, case, marker))
        except ConfigError as exc:
            raise pytest.UsageError(f"pytest-specperf:\n  {exc}") from None
        self.session.plan_tests(planned)

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
            fail(str(exc))
        result.checks = list(evaluation.checks)
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
        if self.session is None:
            return
        if exitstatus == pytest.ExitCode.INTERRUPTED:  # Ctrl-C, SIGTERM, a time limit: keys whose checks all ran
            self.session.storing_interrupted()
        else:
            self.session.store_results()  # every check of the session's measurements has run
        if self.session.store_failed and exitstatus != pytest.ExitCode.INTERRUPTED:  # a cut job still reads as cut
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        workeroutput = getattr(self.pytest_config, "workeroutput", None)
        if workeroutput is not None:
            workeroutput["specperf"] = self.session.worker_payload().to_json()
        elif self.session.worker is None:
            self._kill_worker_leftovers()
            if self.session.has_results():
                from pytest_specperf.report.outputs import write_outputs

                self.written = write_outputs(
                    self.session.report(),
                    self.options.outputs,
                    store=self.session.config.store,
                    update_json=self._update_json,
                )

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
        if self.session is not None:
            self._say_store_failure()
            self.session.close_store()  # after the terminal summary, which may read the histories
        interrupts.uninstall(self._previous_handlers)

    def _say_store_failure(self) -> None:
        """A store that failed is the session's last line, after pytest's `1 passed in 2.0s`: the tests
        passed, but the night is not in its history, and that is what the job must be read as."""
        line = self.session.store_failure_line() if self.session is not None and not self.workerinput else None
        reporter = self.pytest_config.pluginmanager.get_plugin("terminalreporter")
        if line is not None and reporter is not None:
            _own_line(reporter)
            reporter.write_line(line, red=True, bold=True)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.session is None or self.options.report == "none" or not self.session.has_results():
            return
        from pytest_specperf.report.terminal import terminal_summary

        full = self.options.verbose > 0 or self.options.report == "full"
        terminal_summary(terminalreporter, self.session.report(), store=self.session.config.store, full=full)
        for line in self.written:
            terminalreporter.write_line(line)


def _own_line(reporter: Any) -> None:
    """End pytest's current line (a file's dots, `[100%]`) so that what we write next is not glued to it.

    `write_line` does this only while pytest is inside a file's line of results (under -q it is not)."""
    reporter.ensure_newline()
    if reporter._tw.width_of_current_line:
        reporter._tw.line()


def _user_parametrized(metafunc: pytest.Metafunc, name: str) -> bool:
    for mark in metafunc.definition.iter_markers("parametrize"):
        names = mark.args[0] if mark.args else mark.kwargs.get("argnames", "")
        if isinstance(names, str):
            names = [n.strip() for n in names.split(",")]
        if name in names:
            return True
    return False


def _function_id(item: pytest.Item) -> str:
    """The node id of an item's test function: the item's own, less its parameter ids."""
    callspec = getattr(item, "callspec", None)
    return item.nodeid.removesuffix(f"[{callspec.id}]") if callspec is not None else item.nodeid


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
            self.plugin.session.absorb(WorkerPayload.from_json(payload))
