"""Share servers across a whole test session: each config starts at most once.

Only one big model fits on the GPUs at once, so at most `max_servers` are alive: starting
another stops the least recently used. A start that failed is not retried for every test that
needs it (that would cost 15 minutes each); its error is raised again at once. Two failures are
retried once, because waiting is all they need: a port another process took before the server
bound it (a fresh port), and an out-of-memory start while the GPUs still hold the previous
server's memory (the driver releases it late on a busy host: wait for the release).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import subprocess
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pytest_specperf.config.settings import ServerConfig, SpecperfConfig
from pytest_specperf.engines import Engine
from pytest_specperf.engines.suite import ServerPlan, server_plans
from pytest_specperf.errors import ServerError
from pytest_specperf.servers.diagnosis import describe_exit, slurm_end
from pytest_specperf.servers.gpus import GpuWatch
from pytest_specperf.servers.launch import LaunchPlan, ServerProcess, build_launch
from pytest_specperf.servers.registry import SharedRegistry
from pytest_specperf.servers.teardown import Teardown, pid_alive, terminate_tree

#: Seconds an out-of-memory start waits for the previous server's memory before its one retry
#: (a bare kill "can hold GPU memory for minutes on a busy host", SGLang's test utilities say).
OOM_RELEASE_WAIT_S = 300.0

#: Set for every launched server: which start of its config in this session (1, then 2 after a restart).
START_VARIABLE = "SPECPERF_SERVER_START"


@dataclass
class RunningServer:
    """A server tests can talk to: launched by the pool, or attached by URL."""

    name: str
    url: str
    config: ServerConfig
    engine: Engine = field(repr=False)  # resolved once from the config, carried from here on
    log_path: Path | None = None
    api_key: str | None = field(default=None, repr=False)
    process: ServerProcess | None = field(default=None, repr=False)
    startup_seconds: float | None = None
    pid: int | None = None  # a server another xdist worker launched
    start: int = 0  # which start of this config in this process: 1 for the first, 2 after a restart

    @property
    def attached(self) -> bool:
        """Attached by URL (never started or stopped by the plugin)."""
        return self.config.is_attached

    def check_alive(self, grace: float = 0.0) -> None:
        """Raise if a launched server has died since it became ready.

        `grace`: seconds to wait for a dying process to exit, after a request failed in a way a dead
        server explains (refused, reset): the error then says it died, not "connection refused".
        """
        if self.process is not None:
            if grace and self.process.proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.process.proc.wait(timeout=grace)
            code = self.process.exit_code()
            if code is not None:
                died, meaning = describe_exit(code)
                self.process.drain_log()  # Slurm's line that it ended the step may be the last one logged
                ended = slurm_end(self.process.plan.log_path)
                why = f": {meaning}" if meaning else ""
                what = ended.after_ready(f"it {died}") if ended else f"died during the session (it {died}{why})"
                raise ServerError(f"server {self.name!r} {what}.\n{self.process.describe()}")
        elif self.pid is not None and not pid_alive(self.pid):
            ended = slurm_end(self.log_path) if self.log_path else None
            what = ended.after_ready() if ended else "died during the session"
            raise ServerError(f"server {self.name!r} {what} (log: {self.log_path})")

    launch_env: dict[str, str] = field(default_factory=dict, repr=False)


class ServerPool:
    """Running servers by config name, at most `max_servers` alive (least recently used goes).

    Under pytest-xdist a `SharedRegistry` makes the limit and the sharing machine-wide: a server
    another worker started is used, not started again, and its last user stops it.
    """

    def __init__(
        self,
        config: SpecperfConfig,
        run_dir: Path,
        *,
        keep_servers: bool = False,
        progress: Callable[[str], None] | None = None,
        max_concurrency: Callable[[str], int] = lambda name: 1,
        registry: SharedRegistry | None = None,
        still_needed: Callable[[str], bool] = lambda name: True,
        after_fork: Callable[[], None] = lambda: None,
    ) -> None:
        self.config = config
        #: each server config with its engine, resolved once for the session
        self.plans = server_plans(config)
        self.run_dir = run_dir
        self.keep_servers = keep_servers
        self.progress = progress
        self.max_concurrency = max_concurrency
        self.registry = registry
        self.still_needed = still_needed
        #: called right after each server process is started: where a signal the fork swallowed is
        #: raised again (`interrupts.check`), so the start is stopped like any interrupted one
        self.after_fork = after_fork
        self._alive: OrderedDict[str, RunningServer] = OrderedDict()
        self._failed: dict[str, ServerError] = {}
        self._started: dict[str, int] = {}
        #: processes launched and not handed out yet: an interrupt between a server's start and its
        #: hand-over must not leave it running (shutdown stops these too)
        self._launched: list[ServerProcess] = []
        #: servers this worker started and let go of while another xdist worker was using them: that
        #: worker stops them; this one reaps them at its end
        self._handed_over: list[RunningServer] = []
        self.starts: list[str] = []
        self.teardowns: list[Teardown] = []
        self.notices: list[str] = []  # what the pool did on its own that the report must say (a restart)
        self._released: tuple[str, GpuWatch] | None = None  # the last stopped server and its GPUs' memory before it

    def acquire(self, name: str) -> RunningServer:
        """The running server for config `name`, started (once) if needed."""
        if name in self._failed:
            raise self._failed[name]
        server = self._alive.get(name)
        if server is not None:
            self._alive.move_to_end(name)
            try:
                server.check_alive()
            except ServerError as exc:
                self._forget(name)
                self._failed[name] = exc
                raise
            return server
        try:
            server = self._get(self.config.servers[name])
        except ServerError as exc:
            self._failed[name] = exc
            raise
        self._started[name] = self._started.get(name, 0) + 1
        server.start = self._started[name]
        self._alive[name] = server
        self._launched = [p for p in self._launched if p is not server.process]  # handed out: _alive has it
        return server

    def current_start(self, name: str) -> int | None:
        """Which start of `name` is running now (None: none is)."""
        server = self._alive.get(name)
        return server.start if server is not None else None

    def cannot_restart(self, name: str) -> str | None:
        """Why the server of `name` cannot be stopped and started again here (None: it can)."""
        config = self.config.servers[name]
        if config.is_attached:
            return f"{name} is attached by URL: the plugin neither starts nor stops it"
        server = self._alive.get(name)
        if self.registry is not None and server is not None and server.process is None:
            return f"{name} was started by another pytest-xdist worker, which is using it"
        return None

    def restart(self, name: str, why: str) -> RunningServer:
        """Stop the server of `name` and start it again (a fresh start offset), saying `why`."""
        server = self._alive.pop(name, None)
        if server is not None:
            if self.registry is not None and not self.registry.retire(name, _pid_of(server)):
                self._alive[name] = server
                raise ServerError(f"{name}: another pytest-xdist worker is using it; it cannot be restarted now")
            self._stop(server)
        if self.progress:
            self.progress(f"{name}: restarting {why}")
        return self.acquire(name)

    def discard(self, name: str, error: ServerError) -> None:
        """Stop a server that misbehaved (e.g. hung) and fail its remaining tests at once with `error`."""
        self._failed[name] = error
        self._forget(name)

    def release(self, name: str) -> None:
        """Stop a server no remaining test needs (frees the GPUs early)."""
        if self.keep_servers:
            return
        server = self._alive.pop(name, None)
        if server is not None:
            self._let_go(server)

    def shutdown(self) -> list[RunningServer]:
        """Stop every server this process launched; with keep_servers, leave them and return them."""
        kept = []
        while self._alive:
            _, server = self._alive.popitem(last=False)
            if self.keep_servers and not server.attached:
                kept.append(server)
            elif self.registry is None or not self.still_needed(server.name):
                self._let_go(server)
            # else: another xdist worker still needs it; its last user (or the controller) stops it
        self._reap_handed_over()
        while self._launched:  # started, but interrupted before it was handed out
            process = self._launched.pop()
            if not process.stopped:
                self._record(process.stop(timeout=self.config.stop_timeout))
        return kept

    @property
    def failed(self) -> dict[str, ServerError]:
        """Configs whose server could not be started or died, with the error."""
        return dict(self._failed)

    def _get(self, server: ServerConfig) -> RunningServer:
        if server.is_attached:
            assert server.url is not None
            return RunningServer(
                server.name,
                server.url.rstrip("/"),
                server,
                self.engine_of(server),
                api_key=self.config.api_key_for(server),
            )
        if self.registry is None:
            self._make_room(self.config.max_servers - 1)
            return self._start(server)
        timeout = server.startup_timeout or self.config.startup_timeout
        claim = self.registry.claim(server.name, self.config.max_servers, timeout, self._make_way)
        if not claim.start:
            assert claim.url is not None
            return RunningServer(
                server.name,
                claim.url,
                server,
                self.engine_of(server),
                log_path=Path(claim.log_path) if claim.log_path else None,
                api_key=self.config.api_key_for(server),
                pid=claim.pid,
                launch_env={**os.environ, **self.config.env, **server.env},  # as the other worker started it
            )
        try:
            running = self._start(server)
        except ServerError as exc:
            self.registry.failed(server.name, str(exc))
            raise
        except BaseException:
            self.registry.remove(server.name)
            raise
        assert running.process is not None and running.process.pid is not None
        self.registry.ready(server.name, running.url, running.process.pid, str(running.log_path))
        return running

    def engine_of(self, server: ServerConfig) -> Engine:
        """The engine of `server` from its plan (a config the suite does not hold, such as a variant
        `specperf bisect` starts, gets a plan of its own)."""
        plan = self.plans.get(server.name)
        if plan is None or plan.server.engine != server.engine:
            plan = ServerPlan.of(self.config, server)
        return plan.engine

    def _make_way(self) -> None:
        """While waiting for a machine-wide slot, hold none: a waiting worker that keeps a server
        could wait for a worker that waits for it (with `max_servers = 1`, every speculative
        worker waits for the reference's slot).

        A server no test needs any more is stopped. Another worker's server that tests still need
        is left to its owner (this worker stops using it). This worker's own server is stopped when
        no other worker is using it, even if tests still need it: it starts again for them, which
        costs a start but can never deadlock. A server another worker is using right now stays: that
        worker is running a test, not waiting, and lets go of it when it is done.
        """
        assert self.registry is not None
        for name in list(self._alive):
            server = self._alive[name]
            if server.attached:
                continue
            if not self.still_needed(name):
                self._let_go(self._alive.pop(name))
            elif server.process is None:
                self._alive.pop(name)
                self.registry.leave(name)
            elif self.registry.retire(name, _pid_of(server)):
                if self.progress:
                    self.progress(f"stopping {name} to free its slot; it starts again for the tests that still need it")
                self._stop(self._alive.pop(name))

    def _let_go(self, server: RunningServer) -> None:
        """Stop a server no test of this worker needs, unless another xdist worker is using it now.

        "No test needs it" counts tests, not uses: another worker may be measuring this server as the
        reference of its speculative key right now (a reference measured again on a second start is
        such a use). The registry knows who uses it; leaving, the check and the unlisting are one locked
        step (`let_go`). When another worker uses it, this worker only stops using it, and the last user
        stops it (by its pid) when it lets go in turn.
        """
        if self.registry is None or server.attached:
            self._stop(server)
            return
        last = self.registry.let_go(server.name, _pid_of(server))
        if last or (last is None and server.process is not None):  # None: unlisted, stopped or being stopped
            self._stop(server)
        elif last is False and server.process is not None:
            self._handed_over.append(server)

    def _reap_handed_over(self) -> None:
        """At this worker's end: a server it handed over and its user stopped is reaped here (its exit
        status, log relay and teardown record); one still in use stays for its user, or the
        controller's last sweep."""
        assert self.registry is not None or not self._handed_over
        while self._handed_over:
            server = self._handed_over.pop()
            assert server.process is not None and self.registry is not None
            if server.process.exit_code() is not None or self.registry.retire(server.name, server.process.pid):
                self._stop(server)

    def _make_room(self, keep: int) -> None:
        """Stop this process's least recently used servers until at most `keep` are alive."""
        while len(self._alive) > keep:
            _, oldest = self._alive.popitem(last=False)
            self._stop(oldest)

    def _start(self, server: ServerConfig, *, retry: bool = True) -> RunningServer:
        """Start `server` and wait until it is ready; once more if waiting is all it needs.

        The port is chosen when the launch is planned, and a real server binds it only after
        loading its weights (15-30 minutes later): another process may take it meanwhile. An
        out-of-memory start while the previous server's memory is still held waits for the release.
        """
        plan = build_launch(
            server,
            self.config,
            run_dir=self.run_dir,
            max_concurrency=self.max_concurrency(server.name),
            engine=self.engine_of(server),
        )
        # which start of this config this is: the simulator draws a new start offset for a restart
        start = str(self._started.get(server.name, 0) + 1)
        plan = dataclasses.replace(plan, env_overrides={**plan.env_overrides, START_VARIABLE: start})
        # a kept server must outlive pytest; an xdist worker's server may outlive that worker
        process = ServerProcess(plan, parent_death_signal=self.registry is None and not self.keep_servers)
        self.starts.append(server.name)
        process.start()
        self._launched.append(process)
        if self.registry is not None and process.pid is not None:
            self.registry.started(server.name, process.pid)
        try:
            self.after_fork()
            seconds = process.wait_ready(self.progress)
        except ServerError:
            self._record(process.stop(timeout=self.config.stop_timeout))
            failure = process.failure
            if retry and failure is not None and failure.port_taken:
                stopped = "; it did not exit by itself and was stopped at once" if process.stopped_on_fatal else ""
                self._note(
                    f"{server.name}: port {plan.port} was taken by another process before the server bound it "
                    f"(log: {plan.log_path}{stopped}); restarted once on a fresh port"
                )
                return self._start(server, retry=False)
            if retry and failure is not None and failure.out_of_memory and self._wait_for_release(server.name, plan):
                return self._start(server, retry=False)
            raise
        except BaseException:
            self._record(process.stop(timeout=self.config.stop_timeout))
            raise
        if self.progress:
            self.progress(f"{server.name} ready after {seconds:.1f} s at {plan.url} (log: {plan.log_path})")
        return RunningServer(
            server.name,
            plan.url,
            server,
            plan.engine,
            log_path=plan.log_path,
            api_key=plan.api_key,
            process=process,
            startup_seconds=seconds,
            launch_env=process.env,
        )

    def _wait_for_release(self, name: str, plan: LaunchPlan) -> bool:
        """After an out-of-memory start: if the GPUs still hold the previous server's memory, wait
        for it (bounded) and say so; True when a retry is worth it."""
        if self._released is None:
            return False
        previous, watch = self._released
        held = watch.held()
        if not held:
            return False
        mib = ", ".join(f"GPU {d} {m} MiB" for d, m in sorted(held.items()))
        if self.progress:
            self.progress(f"{name}: out of memory while {previous}'s memory is still held ({mib}); waiting for it")
        started = time.monotonic()
        released, outcome = watch.wait_released(OOM_RELEASE_WAIT_S)
        self._note(
            f"{name}: the start failed with out of memory while the GPUs still held {previous}'s memory ({mib}; "
            f"log: {plan.log_path}); waited {time.monotonic() - started:.0f} s for the release "
            + ("and restarted once" if released else f"and restarted once anyway ({outcome})")
        )
        return True

    def _record(self, teardown: Teardown) -> None:
        """Keep how a stop went (the report lists the ones that did not finish) and say it."""
        self.teardowns.append(teardown)
        if self.progress and (teardown.gpu or teardown.stuck):
            self.progress(teardown.line())

    def _note(self, message: str) -> None:
        self.notices.append(message)
        if self.progress:
            self.progress(message)

    @property
    def report_lines(self) -> list[str]:
        """For the report's warnings: restarts, and stops that left a process or GPU memory behind."""
        return [*self.notices, *(f"teardown: {t.line()}" for t in self.teardowns if not t.ok)]

    def _forget(self, name: str) -> None:
        server = self._alive.pop(name, None)
        if server is not None:
            self._stop(server)

    def _stop(self, server: RunningServer) -> None:
        if server.process is not None:
            self._record(server.process.stop(timeout=self.config.stop_timeout))
            watch = server.process.gpus
            if watch is not None and watch.devices:
                self._released = (server.name, watch)
        elif server.pid is not None:
            self._record(terminate_tree(server.pid, self.config.stop_timeout, server=server.name))
        if self.registry is not None and not server.config.is_attached:
            self.registry.remove(server.name, _pid_of(server))


def _pid_of(server: RunningServer) -> int | None:
    """The pid the registry lists a launched server under: this process's child, or another worker's."""
    return server.process.pid if server.process is not None else server.pid
