"""From a server config to a running, ready process, and back to nothing.

A real start costs 15+ minutes, so this module fails fast (a dead process is reported within
a second, with its exit code and a diagnosis), shows the start's milestones while waiting, writes
the server's output through the redactor (servers/logrelay.py), and tears the whole process tree
down by every exit path in the order its engine stops itself (servers/teardown.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pytest_specperf.common.redact import is_secret_name, redact_args, redact_text
from pytest_specperf.common.transport import probe
from pytest_specperf.config.settings import DEFAULT_ENGINE, SIM_LAUNCHER, ServerConfig, SpecperfConfig
from pytest_specperf.engines import Engine, EngineFlags
from pytest_specperf.engines.base import default_engine, is_warning
from pytest_specperf.engines.suite import ServerPlan
from pytest_specperf.errors import ConfigError, ServerError
from pytest_specperf.servers.diagnosis import Diagnosis, LogWatch, describe_exit, diagnose, is_echo
from pytest_specperf.servers.gpus import GpuWatch
from pytest_specperf.servers.teardown import Teardown, describe_process, terminate_tree

LOG_TAIL_LINES = 40
PROGRESS_INTERVAL_S = 10.0
#: Seconds to let the log relay write the last lines of a server that exited (its children may still hold the pipe).
LOG_DRAIN_S = 3.0
#: Seconds a server that logged a fatal start-up line gets to exit by itself (and finish its log) before
#: it is stopped; then SIGTERM, and SIGKILL of its group after `FATAL_STOP_S` if it ignores that.
FATAL_GRACE_S = 5.0
FATAL_STOP_S = 5.0
_PROBE_INTERVAL_S = 0.25
_POLL_INTERVAL_S = 0.1

SIM_PROGRAM = (sys.executable, "-m", "pytest_specperf.sim")
RELAY_PROGRAM = (sys.executable, "-m", "pytest_specperf.servers.logrelay")
LOCAL_HOSTS = ("127.0.0.1", "localhost", "0.0.0.0", "::1", "::")


@dataclass(frozen=True)
class LaunchPlan:
    """Everything needed to start one server: argv, environment, address, log file, its engine."""

    server: str
    argv: tuple[str, ...] = field(repr=False)  # may hold the API key: show `display_command` instead
    env_overrides: Mapping[str, str]
    host: str
    port: int
    log_path: Path
    startup_timeout: float
    api_key: str | None = field(default=None, repr=False)
    cwd: Path | None = None
    launcher: str = DEFAULT_ENGINE
    remote: bool = False  # a `command` template that runs the server on another host (srun): no local GPU checks
    template_argv: tuple[str, ...] | None = field(default=None, repr=False)  # a dry run's rendered `command`
    engine: Engine = field(default_factory=default_engine, repr=False, compare=False)  # the server plan's

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def simulated(self) -> bool:
        return self.launcher == SIM_LAUNCHER

    @property
    def display_command(self) -> str:
        """The command line with the API key hidden, for logs, errors and reports."""
        return self.redact(shlex.join(redact_args(self.argv)))

    def redact(self, text: str) -> str:
        """Text that may quote the command or the server's own log, with every secret hidden.

        A cluster `command` template can bury the key inside one quoted token (`bash -c "..."`),
        and servers log their own arguments: the literal key is replaced wherever it appears.
        """
        text = redact_text(text)
        return text.replace(self.api_key, "<redacted>") if self.api_key else text

    def child_env(self) -> dict[str, str]:
        """The server's environment; unbuffered, so a crash loses no line of its log (a config may override)."""
        return {**os.environ, "PYTHONUNBUFFERED": "1", **self.env_overrides}

    def secrets(self, env: Mapping[str, str]) -> list[str]:
        """Literal values the log relay hides besides the known shapes: the API key, and the values
        of secret-named variables the server runs with (HF_TOKEN=...)."""
        found = [self.api_key] if self.api_key else []
        found += [value for name, value in env.items() if is_secret_name(name) and len(value) >= 8]
        return found


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on right now (the kernel picks it).

    For a server on another node (a cluster `command` with `host`), the port can only be checked
    here; pick one on this machine, which is the best guess available without a remote probe.
    """
    for address in (host, "127.0.0.1"):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((address, 0))
            except OSError:
                continue
            return sock.getsockname()[1]
    raise ServerError(f"no free port to bind on {host} or 127.0.0.1")


def server_args(server: ServerConfig, config: SpecperfConfig, port: int, max_concurrency: int = 1) -> list[str]:
    """The engine's launch arguments for a server config (for SGLang, the same for the simulator)."""
    return ServerPlan.of(config, server).engine.launch_args(server, config, port, max_concurrency)


def build_launch(
    server: ServerConfig,
    config: SpecperfConfig,
    *,
    run_dir: Path,
    port: int | None = None,
    max_concurrency: int = 1,
    engine: Engine | None = None,
) -> LaunchPlan:
    """The launch plan of `server`: its engine's command, a cluster command, or the simulator. `engine`
    is its server plan's (the pool resolves each config's once); without it, the config's own."""
    port = port or free_port(server.host)
    engine = engine or ServerPlan.of(config, server).engine
    flags = config.engine_flags.get(engine.name)
    args = engine.launch_args(server, config, port, max_concurrency)
    rendered = render_command(server, config, args, port) if server.command else None
    simulated = config.launcher == SIM_LAUNCHER
    if simulated:
        argv = [*SIM_PROGRAM, *args, *sim_args(server, config), *sim_flag_table(flags, run_dir)]
    elif rendered is not None:
        argv = rendered
    else:
        argv = engine.launch_argv(config.python, args, flags)
    return LaunchPlan(
        server=server.name,
        argv=tuple(argv),
        env_overrides={**config.env, **server.env},
        host=server.host,
        port=port,
        log_path=reserve_log_path(run_dir, server.name),
        startup_timeout=server.startup_timeout or config.startup_timeout,
        api_key=config.api_key_for(server),
        cwd=run_dir if engine.run_from_run_dir and not simulated and not server.command else None,
        launcher=config.launcher,
        remote=not simulated and server.command is not None and server.host not in LOCAL_HOSTS,
        template_argv=tuple(rendered) if rendered is not None and simulated else None,
        engine=engine,
    )


def sim_flag_table(flags: EngineFlags | None, run_dir: Path) -> list[str]:
    """`--sim-sglang-flags FILE` when the installed engine's own flags are known: a dry run on the
    node then accepts exactly what the installed SGLang accepts (new flags and algorithms too)."""
    if flags is None or not flags.installed:
        return []
    path = run_dir / ".engine-flags" / f"{flags.engine}-{flags.version or 'unknown'}.txt"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text("\n".join(flags.to_lines()) + "\n")
        os.replace(tmp, path)
    return ["--sim-sglang-flags", str(path)]


def render_command(server: ServerConfig, config: SpecperfConfig, args: list[str], port: int) -> list[str]:
    """A server's `command` template with its placeholders filled, split into words.

    Raises ConfigError naming the server when the template cannot be rendered or split (an
    unbalanced quote), so a dry run finds what would otherwise fail on the cluster.
    """
    assert server.command is not None
    where = f"server {server.name!r} command"
    try:
        text = server.command.format(
            python=config.python,
            args=shlex.join(args),
            host=server.host,
            port=port,
            model=shlex.quote(config.model_of(server) or ""),
            name=server.name,
        )
    except (KeyError, IndexError, AttributeError, ValueError) as exc:
        raise ConfigError(where, f"cannot be rendered: {exc!r}") from None
    try:
        argv = shlex.split(text)
    except ValueError as exc:
        raise ConfigError(where, f"does not split into words ({exc}): {text}") from None
    if not argv:
        raise ConfigError(where, "renders to an empty command")
    return argv


#: What a dry run (`--specperf-launcher sim`) cannot check about a `command` template.
DRY_RUN_LIMITS = (
    "the simulator ran in its place, so the allocation (srun/sbatch limits), the remote node, its GPUs, "
    "its network to this machine and the model files are not checked"
)


def check_command_templates(config: SpecperfConfig) -> None:
    """Render every `command` template and check that its program exists here, before any start.

    In a dry run (`launcher = "sim"`) the simulator runs instead of the template, so a broken
    wrapper (a misspelt `srun`, an unbalanced quote) would otherwise pass the dry run and fail
    the first night on the cluster; with the real launcher it fails now instead of at its turn.
    """
    for server in config.servers.values():
        if server.command is None or server.is_attached:
            continue
        if config.model_of(server) is None:
            continue  # reported when the server starts
        argv = render_command(server, config, server_args(server, config, 30000), 30000)
        if shutil.which(argv[0]) is None:
            raise ConfigError(
                f"server {server.name!r} command",
                f"program {argv[0]!r} is not found on PATH here; a dry run renders every `command` template and "
                "checks its program (run the dry run where the program exists, e.g. the cluster's login node)",
            )


def reserve_log_path(run_dir: Path, name: str) -> Path:
    """A new log file for one start: `NAME.log`, then `NAME~2.log`, ... (unique across xdist workers)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    attempt = 1
    while True:
        path = run_dir / (f"{name}.log" if attempt == 1 else f"{name}~{attempt}.log")
        try:
            path.open("x").close()
            return path
        except FileExistsError:
            attempt += 1


def sim_args(server: ServerConfig, config: SpecperfConfig) -> list[str]:
    args = ["--sim-time-scale", repr(config.sim_time_scale)]
    if config.sim_profile:
        profile = config.sim_profile
        if config.source is not None and (config.source.parent / profile).is_file():
            profile = str(config.source.parent / profile)
        args += ["--sim-profile", profile]
    return [*args, *config.sim_args, *server.sim_args]


# --------------------------------------------------------------------------------------------
# Processes


def _parent_death_signal() -> Callable[[], None] | None:
    """A preexec hook asking Linux to SIGTERM the process if pytest dies without cleaning up."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def hook() -> None:
        prctl(pr_set_pdeathsig, signal.SIGTERM)

    return hook


_PDEATHSIG_HOOK = _parent_death_signal()


class ServerProcess:
    """One launched server process group, the relay that writes its log, and its teardown."""

    def __init__(self, plan: LaunchPlan, *, parent_death_signal: bool = True) -> None:
        self.plan = plan
        self.parent_death_signal = parent_death_signal
        self.proc: subprocess.Popen[bytes] | None = None
        self.relay: subprocess.Popen[bytes] | None = None
        self.env: dict[str, str] = {}  # what the server was really started with (fingerprints read it)
        self.gpus: GpuWatch | None = None  # the devices it uses and their memory before the start
        self.failure: Diagnosis | None = None  # why the start failed, once it has
        self.log_watch = LogWatch(plan.log_path, plan.engine)
        self._teardown: Teardown | None = None  # how it was stopped, once it has been
        self.stopped_on_fatal = False  # it logged a fatal start-up line, did not exit, and was stopped

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def stopped(self) -> bool:
        """Stopped by `stop` already (a process that exited on its own is not, until then)."""
        return self._teardown is not None

    def start(self) -> None:
        self.plan.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.plan.log_path.open("wb") as log:
            log.write(f"# specperf: {self.plan.display_command}\n".encode())
            if self.plan.template_argv is not None:
                template = self.plan.redact(shlex.join(redact_args(self.plan.template_argv)))
                log.write(f"# specperf: dry run of the command template: {template}\n".encode())
                log.write(f"# specperf: {DRY_RUN_LIMITS}\n".encode())
        self.env = self.plan.child_env()
        self.gpus = self._gpu_watch()
        hook = _PDEATHSIG_HOOK if self.parent_death_signal else None
        read_end, write_end = os.pipe()
        try:
            self.relay = self._start_relay(read_end, hook)
            try:
                self.proc = subprocess.Popen(
                    self.plan.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=write_end,
                    stderr=subprocess.STDOUT,
                    env=self.env,
                    cwd=self.plan.cwd,
                    start_new_session=True,
                    preexec_fn=hook,
                )
            except OSError as exc:
                raise ServerError(
                    f"server {self.plan.server!r}: could not run {self.plan.argv[0]!r}: {exc}\n"
                    f"  command: {self.plan.display_command}"
                ) from None
        finally:
            os.close(read_end)
            os.close(write_end)  # the server and its children hold the only write ends: EOF when all are gone

    def _start_relay(self, read_end: int, hook: Callable[[], None] | None) -> subprocess.Popen[bytes]:
        """The process that writes the server's output to its log through the redactor; the
        secrets reach it through a pipe of their own, never its argv or environment."""
        secrets_read, secrets_write = os.pipe()
        try:
            with self.plan.log_path.open("ab") as errors:
                relay = subprocess.Popen(
                    [*RELAY_PROGRAM, str(self.plan.log_path), "--secrets-fd", str(secrets_read)],
                    stdin=read_end,
                    stdout=subprocess.DEVNULL,
                    stderr=errors,
                    pass_fds=(secrets_read,),
                    start_new_session=True,
                    preexec_fn=hook,
                )
            os.write(secrets_write, "\0".join(self.plan.secrets(self.env)).encode())
        finally:
            os.close(secrets_read)
            os.close(secrets_write)
        return relay

    def _gpu_watch(self) -> GpuWatch | None:
        if self.plan.simulated:
            return None
        if self.plan.remote:
            return GpuWatch([], {}, skipped="GPU release not checked: the server runs on another host")
        return GpuWatch.of(self.plan.engine.local_gpu_ids(self.plan.argv), self.env)

    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def wait_ready(self, progress: Callable[[str], None] | None = None) -> float:
        """Block until the engine's readiness path answers 200; seconds it took.

        Fails fast: on the process's exit, and on a fatal line in its log (a failed bind, a model that
        is not there) even when the launcher does not exit, which would otherwise hold the night for
        the whole `startup_timeout`."""
        started = time.monotonic()
        deadline = started + self.plan.startup_timeout
        next_probe = next_progress = started
        fatal_seen: float | None = None
        shown_error: str | None = None
        while True:
            now = time.monotonic()
            self._check_alive(now - started)
            self.log_watch.poll()
            if fatal_seen is None and self.log_watch.fatal is not None:
                fatal_seen = now
            if now >= next_probe:
                if probe(self.plan.url, self.plan.engine.readiness_path, timeout=5):
                    return now - started
                next_probe = time.monotonic() + _PROBE_INTERVAL_S
            if progress and (now >= next_progress or self.log_watch.newest_error != shown_error):
                shown_error = self.log_watch.newest_error  # a new error line is shown at once
                progress(f"starting {self.plan.server}: {now - started:.0f} s | {self.last_log_line()}")
                next_progress = now + PROGRESS_INTERVAL_S
            if fatal_seen is not None and now - fatal_seen >= FATAL_GRACE_S:
                self._stop_after_fatal(fatal_seen - started)
            if now >= deadline:
                self.stop(timeout=10)
                raise ServerError(
                    f"server {self.plan.server!r} was not ready after its startup_timeout of "
                    f"{self.plan.startup_timeout:g} s; it was stopped: {self.diagnosis()}\n{self.describe()}"
                )
            time.sleep(_POLL_INTERVAL_S)

    def _stop_after_fatal(self, logged_at: float) -> None:
        """The log said the start cannot succeed and the process is still there: stop it and say why."""
        teardown = self.stop(timeout=FATAL_STOP_S)
        self.stopped_on_fatal = True
        how = "it was stopped" if teardown.graceful else "it ignored SIGTERM and was killed"
        raise ServerError(
            f"server {self.plan.server!r} logged a fatal error {logged_at:.1f} s into its start and had not "
            f"exited {FATAL_GRACE_S:g} s later; {how}: {self.diagnosis()}\n{self.describe()}"
        )

    def _check_alive(self, elapsed: float) -> None:
        code = self.exit_code()
        if code is not None:
            self.drain_log()
            died, meaning = describe_exit(code)
            raise ServerError(
                f"server {self.plan.server!r} {died} after {elapsed:.1f} s, before it was ready: "
                + (f"{meaning}; " if meaning else "")
                + f"{self.diagnosis()}\n{self.describe()}"
            )

    def drain_log(self, timeout: float = LOG_DRAIN_S) -> None:
        """Let the relay write what the server printed last (it ends when every writer is gone)."""
        if self.relay is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.relay.wait(timeout=timeout)

    def diagnosis(self) -> str:
        """One line: the likely cause, the first error of the first failing rank, and the log path.

        It is the first line of the error, so the terminal summary, JSON and Markdown reports,
        which keep only that line, all carry it."""
        self.failure = diagnose(self.plan.log_path, self.plan.engine)
        return self.plan.redact(self.failure.one_line())

    def describe(self) -> str:
        """Command, log path and log tail: what a person needs to see why a server failed."""
        tail = self.log_tail()
        return (
            f"  command: {self.plan.display_command}\n  log: {self.plan.log_path}\n"
            f"  last {len(tail)} log lines:\n" + "\n".join(f"    | {self.plan.redact(line)}" for line in tail)
        )

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> list[str]:
        try:
            with self.plan.log_path.open("r", errors="replace") as fh:
                return [line.rstrip("\n") for line in deque(fh, maxlen=lines)]
        except OSError:
            return []

    def last_log_line(self) -> str:
        """What a long start is doing: its newest milestone (loading weights, capturing CUDA graphs,
        ...; never a warning that mentions one), else its newest line that is neither an echo of the
        launch nor a warning, else its newest line; an error since the newest milestone is added."""
        tail = [line for line in self.log_tail(200) if line.strip() and not is_echo(line, self.plan.engine)]
        milestones = [line for line in tail if any(p.search(line) for p in self.plan.engine.startup_milestones)]
        news = [line for line in tail if not is_warning(line)]
        chosen = next((lines[-1] for lines in (milestones, news, tail) if lines), None)
        line = progress_line(self.plan.redact(chosen)) if chosen else "(no output yet)"
        error = self.log_watch.newest_error
        if error is not None and error != chosen:
            line += " | newest error: " + progress_line(self.plan.redact(error.strip()))
        return line

    def stop(self, timeout: float = 60.0, gpu_timeout: float | None = None) -> Teardown:
        """SIGTERM the launcher, wait up to `timeout`, then SIGKILL the whole tree; then wait
        (bounded) for its GPUs to return to their memory use before the start."""
        if self.proc is None:
            return Teardown(self.plan.server)
        if self._teardown is not None:  # stopped already (a fatal start): one stop, one record
            return self._teardown
        result = terminate_tree(
            self.proc.pid, timeout, gpus=self.gpus, server=self.plan.server, gpu_timeout=gpu_timeout
        )
        try:
            self.proc.wait(timeout=REAP_TIMEOUT_S)  # a process in uninterruptible sleep must not hang the night
        except subprocess.TimeoutExpired:
            if not result.stuck:
                result.stuck.append(describe_process(self.proc.pid))
        self._stop_relay()
        self._teardown = result
        return result

    def _stop_relay(self) -> None:
        if self.relay is None:
            return
        self.drain_log()
        if self.relay.poll() is None:  # a writer survived SIGKILL (stuck): the log ends here
            self.relay.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.relay.wait(timeout=REAP_TIMEOUT_S)


#: Seconds to wait for a SIGKILLed process to be reaped (a process in uninterruptible sleep never is).
REAP_TIMEOUT_S = 10.0


#: flags a progress line keeps when it shortens a launch command: what tells two configs apart
_KEPT_FLAGS = ("--model-path", "--speculative-", "--tp-size", "--tp")
PROGRESS_WIDTH = 120


def progress_line(line: str, width: int = PROGRESS_WIDTH) -> str:
    """A log line short enough for a progress line.

    The first lines of a log are the launch command; cutting it at a width hides exactly the
    speculative flags that tell configs apart. So a long command keeps its program, the model and
    every `--speculative-*` flag with its value (dropped parts become "…"); any other long line
    keeps its end, where the news is.
    """
    if len(line) <= width:
        return line
    words = line.split()
    if not any(w.startswith("--speculative-") or w == "--model-path" for w in words):
        return "…" + line[-(width - 1) :]
    kept: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        takes_value = i + 1 < len(words) and not words[i + 1].startswith("--")
        if word.startswith("--") and word.split("=")[0].startswith(_KEPT_FLAGS):
            kept += words[i : i + 2] if takes_value else [word]
        elif kept and kept[-1] != "…" and not (word == "#" or word.endswith(":")):
            kept.append("…")
        elif not kept:
            kept.append(word)
        i += 2 if word.startswith("--") and takes_value else 1
    return " ".join(kept)
