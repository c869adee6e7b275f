"""The configuration of a suite as frozen records: the suite, its server configs, their defaults.

The records hold what the file says, as strings and numbers: which engine a server runs is a name
here, and the engine's own rules (flags, speculative settings) are applied by the engines once the
file is read (engines/suite.py). Reading and validating the file is config/loading.py.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_specperf.config.location import StoreLocation
from pytest_specperf.config.workloads import WorkloadConfig

if TYPE_CHECKING:
    from pytest_specperf.engines.flags import EngineFlags

#: The engine a suite runs when it names none.
DEFAULT_ENGINE = "sglang"
#: What a speculative key's nightly verdict may be held to (`gate`): its speedup over the same-session
#: reference, or its absolute throughput.
GATES = ("speedup", "throughput")
#: The launcher that starts the built-in simulator in place of a real engine (dry runs).
SIM_LAUNCHER = "sim"
#: Seconds a server may take to become ready: SGLang's own CI allows an hour on H200 (download,
#: DeepGEMM compilation for FP8 models, CUDA-graph capture and warmup).
DEFAULT_STARTUP_TIMEOUT = 3600.0


#: Environment variables recorded in every fingerprint (`env_patterns`): the tuning and runtime
#: variables of the engines and their libraries, which change numbers without changing the config.
DEFAULT_ENV_PATTERNS: tuple[str, ...] = (
    "NCCL_*",
    "SGLANG_*",
    "VLLM_*",
    "CUDA_*",
    "TORCH_*",
    "NVIDIA_*",
    "PYTORCH_*",
    "NVSHMEM_*",
    "OMP_*",
)

HTTP_URL = re.compile(r"^https?://[^/]+")

DEFAULT_STORE = StoreLocation(path=Path(".specperf"))

#: Placeholders a `command` template may use.
COMMAND_PLACEHOLDERS = ("python", "args", "host", "port", "model", "name")


@dataclass(frozen=True)
class ServerConfig:
    """A named way to get one server: launch settings, or a URL to attach to."""

    name: str
    algorithm: str | None = None
    draft_model: str | None = None
    num_steps: int | None = None
    eagle_topk: int | None = None
    num_draft_tokens: int | None = None
    model: str | None = None
    # repr=False: these may hold secrets, and pytest prints reprs in assertion failures
    args: tuple[str, ...] = field(default=(), repr=False)
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    url: str | None = field(default=None, repr=False)
    command: str | None = field(default=None, repr=False)
    host: str = "127.0.0.1"
    startup_timeout: float | None = None
    api_key: str | None = field(default=None, repr=False)
    sim_args: tuple[str, ...] = ()
    engine: str | None = None  # the engine it runs, by name (set when the config is read; None: the suite's)
    speculative_config: Mapping[str, Any] | None = None  # vLLM's --speculative-config, passed as it is

    @property
    def is_speculative(self) -> bool:
        return self.algorithm is not None or self.speculative_config is not None

    @property
    def is_attached(self) -> bool:
        return self.url is not None

    def arg_value(self, flag: str) -> str | None:
        """Value of `flag` in the extra args (`--flag V` or `--flag=V`), if given."""
        for i, arg in enumerate(self.args):
            if arg == flag and i + 1 < len(self.args):
                return self.args[i + 1]
            if arg.startswith(flag + "="):
                return arg.split("=", 1)[1]
        return None

    @property
    def tp_size(self) -> int:
        value = self.arg_value("--tp-size") or self.arg_value("--tensor-parallel-size")
        return int(value) if value and value.isdigit() else 1


@dataclass(frozen=True)
class SpecperfConfig:
    """The whole, validated configuration of a session."""

    source: Path | None = None
    #: the table the config was read from: "specperf" in specperf.toml, "tool.specperf" in pyproject.toml
    table: str = "specperf"
    launcher: str = DEFAULT_ENGINE
    engine: str = DEFAULT_ENGINE
    python: str = "python3"
    model: str | None = None
    reference: str = "plain"
    store: StoreLocation = DEFAULT_STORE
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT
    stop_timeout: float = 60.0
    max_servers: int = 1
    rounds: int = 5
    max_rounds: int | None = None
    max_regression: float = 0.05
    max_regression_accept_length: float = 0.02
    #: retention: nights a stored history keeps (N > 0); 0, the default, keeps every night (the verdict
    #: reads the newest nights it needs: store/records.py VERDICT_NIGHTS)
    history: int = 0
    run_to_run_cv: float = 0.02
    run_to_run_cv_accept_length: float = 0.005
    #: confirm a REGRESSION or SUSPECT check on a second server start (verdict/nightly.py)
    confirm: bool = True
    #: server restarts a session may spend on confirmations
    max_restarts: int = 4
    #: the strict reading: a check passes only when credibly within its threshold (--specperf-strict)
    strict: bool = False
    #: what a speculative key's nightly verdict is held to (--specperf-gate): "speedup", its speedup over
    #: the reference measured in the same session (the node's speed cancels), or "throughput", its
    #: absolute tok/s (docs/verdicts.md, "The same-session reference as a control")
    gate: str = "speedup"
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    env_patterns: tuple[str, ...] = DEFAULT_ENV_PATTERNS
    api_key: str | None = field(default=None, repr=False)
    sim_profile: str | None = None
    sim_time_scale: float = 1.0
    #: --sim-* flags every simulated server gets (before its own `sim_args`), e.g. run-to-run jitter
    sim_args: tuple[str, ...] = ()
    servers: Mapping[str, ServerConfig] = field(default_factory=dict)
    workloads: Mapping[str, WorkloadConfig] = field(default_factory=dict)
    #: each engine's flags as the configured `python` has them installed (or its shipped list), by
    #: engine name; found when the engines check the config (engines/suite.py)
    engine_flags: Mapping[str, EngineFlags] = field(default_factory=dict, repr=False, compare=False)
    #: said once in the report header: where each engine's flags and algorithms were checked
    notes: tuple[str, ...] = field(default=(), compare=False)
    #: collection-time warnings: settings that run but make the numbers noisier than they look
    warnings: tuple[str, ...] = field(default=(), compare=False)
    #: the `[specperf.tune]` table as written: `specperf tune` validates it (pytest runs never read it)
    tune: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @property
    def effective_max_rounds(self) -> int:
        return self.max_rounds if self.max_rounds is not None else 2 * self.rounds

    @property
    def reference_server(self) -> ServerConfig | None:
        return self.servers.get(self.reference)

    @property
    def speculative_servers(self) -> list[ServerConfig]:
        return [s for s in self.servers.values() if s.is_speculative]

    def model_of(self, server: ServerConfig) -> str | None:
        return server.model or self.model

    def api_key_for(self, server: ServerConfig) -> str | None:
        """The key a server wants: its own, the global one, or $SPECPERF_API_KEY (never in a report)."""
        return server.api_key or self.api_key or os.environ.get("SPECPERF_API_KEY") or None

    def engine_name(self, server: ServerConfig) -> str:
        """The engine a server runs, by name: its own `engine`, else the suite's."""
        return server.engine or self.engine

    def where(self, table: str = "", key: str | None = None) -> str:
        """A place in the config file as errors name it: `specperf.toml [specperf.servers.x] args`,
        with the table the file really uses (`[tool.specperf...]` in a pyproject.toml)."""
        name = f"{self.table}.{table}" if table else self.table
        place = f"{display_path(self.source)} [{name}]" if self.source else f"[{name}]"
        return f"{place} {key}" if key else place


def display_path(path: Path) -> str:
    """A path as the user would type it: relative to the working directory when below it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)
