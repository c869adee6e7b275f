"""From a server config to a running, ready process, and back to nothing.

A real start costs 15+ minutes, so this module fails fast (a dead process is reported within
a second, with its exit code and log tail), shows progress while waiting, and tears the whole
process tree down by every exit path: SGLang spawns a scheduler per TP rank and a detokenizer,
and an orphaned one keeps the GPUs' memory.
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

import psutil

from pytest_specperf.config.settings import ServerConfig, SpecperfConfig
from pytest_specperf.engines import engine_for
from pytest_specperf.errors import ConfigError, ServerError
from pytest_specperf.redact import redact_args, redact_text
from pytest_specperf.servers.diagnosis import Diagnosis, diagnose
from pytest_specperf.transport import probe

LOG_TAIL_LINES = 40
GPU_RELEASE_TIMEOUT_S = 60.0
PROGRESS_INTERVAL_S = 10.0
_PROBE_INTERVAL_S = 0.25
_POLL_INTERVAL_S = 0.1

SIM_PROGRAM = (sys.executable, "-m", "pytest_specperf.sim")
LOCAL_HOSTS = ("127.0.0.1", "localhost", "0.0.0.0", "::1", "::")


@dataclass(frozen=True)
class LaunchPlan:
    """Everything needed to start one server: argv, environment, address, log file."""

    server: str
    argv: tuple[str, ...] = field(repr=False)  # may hold the API key: show `display_command` instead
    env_overrides: Mapping[str, str]
    host: str
    port: int
    log_path: Path
    startup_timeout: float
    api_key: str | None = field(default=None, repr=False)
    readiness_path: str = "/health_generate"
    cwd: Path | None = None
    launcher: str = "sglang"
    remote: bool = False  # a `command` template that runs the server on another host (srun): no local GPU checks
    template_argv: tuple[str, ...] | None = field(default=None, repr=False)  # a dry run's rendered `command`

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

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
    return engine_for(config.engine_of(server)).launch_args(server, config, port, max_concurrency)


def api_key_for(server: ServerConfig, config: SpecperfConfig) -> str | None:
    """The key a server wants: its own, the global one, or $SPECPERF_API_KEY."""
    return server.api_key or config.api_key or os.environ.get("SPECPERF_API_KEY") or None


def build_launch(
    server: ServerConfig,
    config: SpecperfConfig,
    *,
    run_dir: Path,
    port: int | None = None,
    max_concurrency: int = 1,
) -> LaunchPlan:
    """The launch plan of `server`: `python -m sglang.launch_server ...`, a cluster command, or the simulator."""
    port = port or free_port(server.host)
    engine = engine_for(config.engine_of(server))
    args = engine.launch_args(server, config, port, max_concurrency)
    rendered = render_command(server, config, args, port) if server.command else None
    if config.launcher == "sim":
        argv = [*SIM_PROGRAM, *args, *sim_args(server, config)]
    elif rendered is not None:
        argv = rendered
    else:
        argv = [*shlex.split(config.python), "-m", engine.module, *args]
    return LaunchPlan(
        server=server.name,
        argv=tuple(argv),
        env_overrides={**config.env, **server.env},
        host=server.host,
        port=port,
        log_path=reserve_log_path(run_dir, server.name),
        startup_timeout=server.startup_timeout or config.startup_timeout,
        api_key=api_key_for(server, config),
        readiness_path=engine.readiness_path,
        # vLLM: `python -m` puts the cwd on sys.path, and a stray module there (`concurrent.py`) broke torch
        cwd=run_dir if engine.name == "vllm" and config.launcher != "sim" and not server.command else None,
        launcher=config.launcher,
        remote=config.launcher != "sim" and server.command is not None and server.host not in LOCAL_HOSTS,
        template_argv=tuple(rendered) if rendered is not None and config.launcher == "sim" else None,
    )


def render_command(server: ServerConfig, config: SpecperfConfig, args: list[str], port: int) -> list[str]:
    """A server's `command` template with its placeholders filled, split into words.

    Raises ConfigError naming the server when the template cannot be rendered or split (an
    unbalanced quote), so a dry run finds what would otherwise fail on the cluster.
    """
    assert server.command is not None
    where = f"server {server.name!r} command"
    try:
        text = server.command.format(
            python=config.python, args=shlex.join(args), host=server.host, port=port,
            model=shlex.quote(config.model_of(server) or ""), name=server.name,
        )  # fmt: skip
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
    """A preexec hook asking Linux to SIGTERM the server if pytest dies without cleaning up."""
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
    """One launched server process group, its log file, and its teardown."""

    def __init__(self, plan: LaunchPlan, *, parent_death_signal: bool = True) -> None:
        self.plan = plan
        self.parent_death_signal = parent_death_signal
        self.proc: subprocess.Popen[bytes] | None = None
        self.env: dict[str, str] = {}  # what the server was really started with (fingerprints read it)
        self.gpus: GpuWatch | None = None  # the devices it uses and their memory before the start
        self.failure: Diagnosis | None = None  # why the start failed, once it has

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self) -> None:
        self.plan.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.plan.log_path.open("wb") as log:
            log.write(f"# specperf: {self.plan.display_command}\n".encode())
            if self.plan.template_argv is not None:
                template = self.plan.redact(shlex.join(redact_args(self.plan.template_argv)))
                log.write(f"# specperf: dry run of the command template: {template}\n".encode())
                log.write(f"# specperf: {DRY_RUN_LIMITS}\n".encode())
            log.flush()
            self.env = self.plan.child_env()
            self.gpus = GpuWatch.before_start(self.plan, self.env)
            try:
                self.proc = subprocess.Popen(
                    self.plan.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=self.env,
                    cwd=self.plan.cwd,
                    start_new_session=True,
                    preexec_fn=_PDEATHSIG_HOOK if self.parent_death_signal else None,
                )
            except OSError as exc:
                raise ServerError(
                    f"server {self.plan.server!r}: could not run {self.plan.argv[0]!r}: {exc}\n"
                    f"  command: {self.plan.display_command}"
                ) from None

    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def wait_ready(self, progress: Callable[[str], None] | None = None) -> float:
        """Block until the engine's readiness path answers 200; seconds it took. Fails fast on exit."""
        started = time.monotonic()
        deadline = started + self.plan.startup_timeout
        next_probe = next_progress = started
        while True:
            now = time.monotonic()
            self._check_alive(now - started)
            if now >= next_probe:
                if probe(self.plan.url, self.plan.readiness_path, timeout=5):
                    return now - started
                next_probe = time.monotonic() + _PROBE_INTERVAL_S
            if progress and now >= next_progress:
                progress(f"starting {self.plan.server}: {now - started:.0f} s | {self.last_log_line()}")
                next_progress = now + PROGRESS_INTERVAL_S
            if now >= deadline:
                self.stop(timeout=10)
                raise ServerError(
                    f"server {self.plan.server!r} was not ready after its startup_timeout of "
                    f"{self.plan.startup_timeout:g} s; it was stopped: {self.diagnosis()}\n{self.describe()}"
                )
            time.sleep(_POLL_INTERVAL_S)

    def _check_alive(self, elapsed: float) -> None:
        code = self.exit_code()
        if code is not None:
            raise ServerError(
                f"server {self.plan.server!r} exited with code {code} after {elapsed:.1f} s, "
                f"before it was ready: {self.diagnosis()}\n{self.describe()}"
            )

    def diagnosis(self) -> str:
        """One line: the likely cause, the first error of the first failing rank, and the log path.

        It is the first line of the error, so the terminal summary, JSON and Markdown reports,
        which keep only that line, all carry it."""
        self.failure = diagnose(self.plan.log_path)
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
        tail = [line for line in self.log_tail(5) if line.strip()]
        return progress_line(self.plan.redact(tail[-1])) if tail else "(no output yet)"

    def stop(self, timeout: float = 60.0) -> Teardown:
        """SIGTERM the process group, wait up to `timeout`, then SIGKILL the whole tree; then wait
        (bounded) for its GPUs to return to their memory use before the start."""
        if self.proc is None:
            return Teardown(self.plan.server)
        result = terminate_tree(self.proc.pid, timeout, gpus=self.gpus, server=self.plan.server)
        try:
            self.proc.wait(timeout=REAP_TIMEOUT_S)  # a process in uninterruptible sleep must not hang the night
        except subprocess.TimeoutExpired:
            if not result.stuck:
                result.stuck.append(_describe_process(self.proc.pid))
        return result


#: Seconds to wait for a SIGKILLed process to be gone (a process in uninterruptible sleep never is).
REAP_TIMEOUT_S = 10.0
#: A device counts as released within this many MiB of its use before the start (other tenants drift).
GPU_RELEASE_SLACK_MIB = 1024


@dataclass
class Teardown:
    """How stopping one server went: processes that would not die, and whether its GPUs were freed."""

    server: str
    stuck: list[str] = field(default_factory=list)  # "pid 123 (disk-sleep): python -m sglang..."
    gpu: str | None = None  # the GPU wait's outcome, or None when there was nothing to wait for
    gpu_released: bool = True

    @property
    def ok(self) -> bool:
        return not self.stuck and self.gpu_released

    def line(self) -> str:
        parts = [f"stopped {self.server}"]
        if self.stuck:
            parts.append(f"{len(self.stuck)} process(es) did not exit after SIGKILL: {'; '.join(self.stuck)}")
        if self.gpu:
            parts.append(self.gpu)
        return ", ".join(parts)


def terminate_tree(pid: int, timeout: float, *, gpus: GpuWatch | None = None, server: str = "") -> Teardown:
    """Stop a server started in its own process group: SIGTERM, wait, then SIGKILL every descendant,
    then wait until its GPUs are back to their memory use before the start (the next server would
    fail with OOM otherwise). Every wait is bounded; what did not finish is in the result.

    The descendants are listed before and after the SIGTERM: once the parent dies they are
    re-parented and can no longer be found from it (SGLang spawns schedulers and a detokenizer).
    """
    result = Teardown(server or str(pid))
    tree = _tree(pid)
    if any(_is_running(p) for p in tree.values()):
        _signal_group(pid, signal.SIGTERM)
        _signal_group(pid, signal.SIGCONT)  # a stopped (hung, kill -STOP) process handles SIGTERM only once resumed
        root = tree.get(pid)
        if root is not None:
            psutil.wait_procs([root], timeout=timeout)
    tree.update(_tree(pid))
    _signal_group(pid, signal.SIGKILL)
    alive = [p for p in tree.values() if _is_running(p)]
    for proc in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    _, stuck = psutil.wait_procs(alive, timeout=REAP_TIMEOUT_S)
    result.stuck = [_describe_process(p.pid) for p in stuck if _is_running(p)]
    if gpus is not None:
        result.gpu_released, result.gpu = gpus.wait_released(GPU_RELEASE_TIMEOUT_S)
    return result


def _describe_process(pid: int) -> str:
    try:
        proc = psutil.Process(pid)
        return f"pid {pid} ({proc.status()}): {shlex.join(proc.cmdline())[:120]}"
    except psutil.Error:
        return f"pid {pid}"


# --------------------------------------------------------------------------------------------
# GPUs


def gpu_memory_used() -> dict[int, int] | None:
    """MiB in use per GPU index on this host (`nvidia-smi`), or None where there is no NVIDIA GPU.

    Memory per device, not processes: inside a container the driver reports host pids, which
    match no pid the plugin knows, so a wait on pids returns at once.
    """
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=15, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    used = {}
    for line in out.splitlines():
        index, _, mib = (part.strip() for part in line.partition(","))
        if index.isdigit() and mib.isdigit():
            used[int(index)] = int(mib)
    return used or None


def sglang_gpu_count(argv: tuple[str, ...] | list[str]) -> int:
    """GPUs an SGLang launch uses: tp_size x pp_size (data-parallel replicas multiply it too)."""

    def value(*flags: str) -> int:
        for i, arg in enumerate(argv):
            name, eq, inline = arg.partition("=")
            if name in flags:
                text = inline if eq else (argv[i + 1] if i + 1 < len(argv) else "")
                return int(text) if text.isdigit() else 1
        return 1

    tp = value("--tp-size", "--tensor-parallel-size")
    return tp * value("--pp-size", "--pipeline-parallel-size") * value("--dp-size", "--data-parallel-size")


def sglang_base_gpu_id(argv: tuple[str, ...] | list[str]) -> int:
    for i, arg in enumerate(argv):
        name, eq, inline = arg.partition("=")
        if name == "--base-gpu-id":
            text = inline if eq else (argv[i + 1] if i + 1 < len(argv) else "")
            return int(text) if text.isdigit() else 0
    return 0


def server_gpus(argv: tuple[str, ...] | list[str], env: Mapping[str, str]) -> list[int]:
    """nvidia-smi indices of the GPUs a server uses: SGLang's device ids, mapped through
    CUDA_VISIBLE_DEVICES (nvidia-smi ignores it and lists physical indices)."""
    logical = range(sglang_base_gpu_id(argv), sglang_base_gpu_id(argv) + sglang_gpu_count(argv))
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return list(logical)
    ids = [part.strip() for part in visible.split(",") if part.strip()]
    if not all(part.isdigit() for part in ids):
        return []  # UUIDs or MIG names: which index is which is not knowable here
    return [int(ids[i]) for i in logical if i < len(ids)]


@dataclass
class GpuWatch:
    """The GPUs one server uses and their memory use before it started."""

    devices: list[int]
    before: dict[int, int]
    skipped: str | None = None  # why the release cannot be checked

    @classmethod
    def before_start(cls, plan: LaunchPlan, env: Mapping[str, str]) -> GpuWatch | None:
        """None where there is no nvidia-smi (the simulator's machines); a skipped watch where
        this host is not the server's (a cluster `command` on another node)."""
        if plan.launcher == "sim":
            return None
        if plan.remote:
            return cls([], {}, skipped="GPU release not checked: the server runs on another host")
        used = gpu_memory_used()
        if used is None:
            return None
        devices = [d for d in server_gpus(plan.argv, env) if d in used]
        if not devices:
            return cls([], {}, skipped="GPU release not checked: its devices are unknown (CUDA_VISIBLE_DEVICES)")
        return cls(devices, {d: used[d] for d in devices})

    def wait_released(self, timeout: float) -> tuple[bool, str | None]:
        """Poll until every device is back within GPU_RELEASE_SLACK_MIB of its use before the start.

        The driver frees a dead process's memory asynchronously, so "the process is gone" is not
        yet "the GPUs are free" (SGLang's own tests wait the same way before the next launch).
        """
        if self.skipped:
            return True, self.skipped
        started = time.monotonic()
        names = ",".join(map(str, self.devices))
        while True:
            used = gpu_memory_used() or {}
            held = {d: used.get(d, 0) - self.before[d] for d in self.devices}
            held = {d: mib for d, mib in held.items() if mib > GPU_RELEASE_SLACK_MIB}
            elapsed = time.monotonic() - started
            if not held:
                return True, f"GPU {names} released after {elapsed:.1f} s"
            if elapsed >= timeout:
                excess = ", ".join(f"GPU {d} holds {mib} MiB more than before the start" for d, mib in held.items())
                return False, f"GPU {names} not released after {timeout:g} s: {excess}"
            time.sleep(1.0)


def _tree(pid: int) -> dict[int, psutil.Process]:
    try:
        root = psutil.Process(pid)
        return {p.pid: p for p in [root, *root.children(recursive=True)]}
    except psutil.NoSuchProcess:
        return {}


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _is_running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def pid_alive(pid: int) -> bool:
    """True while the process exists and is not a zombie (a dead child nobody reaped yet)."""
    try:
        return _is_running(psutil.Process(pid))
    except psutil.NoSuchProcess:
        return False


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
