"""Where a number was measured: the `Fingerprint` record and its capture from a running server.

A throughput without its environment is a phantom (docs/story.md): plain decoding was remembered
as 90 tok/s, but that number had been measured with NCCL tuning variables that were lost on
restart. So every measurement carries a `Fingerprint` in two parts:

* `identity`: what makes two numbers comparable at all (model, speculative settings, launch args,
  workload, GPU, launcher). Any difference means the comparison must not be made: INCOMPARABLE.
* `environment`: what may drift between runs and must be shown next to the verdict (versions,
  tuning environment variables, resolved server settings). The comparison is still made.

It is captured here, where the measurement is made; comparing two fingerprints (what drifted,
what makes a speedup compare more than speculation) is the verdict's business: verdict/drift.py.
Everything here is pure except `probe_local_gpus`, which runs `nvidia-smi` once per process, and
`local_cpu_model`, which reads `/proc/cpuinfo` once.
No secret may reach a stored file or a report, so every value passes through the redaction
helpers before it enters a `Fingerprint`, and `Fingerprint.redacted()` repeats that pass for
fingerprints read from elsewhere.
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import json
import os
import platform
import re
import shlex
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest_specperf
from pytest_specperf.common.redact import REDACTED, is_secret_name, redact_args, redact_env, redact_text
from pytest_specperf.config.settings import DEFAULT_ENGINE, DEFAULT_ENV_PATTERNS
from pytest_specperf.engines.base import Engine, default_engine

UNSET = "unset"

# Launch-identity keys the caller provides (design: the plugin knows the server config).
LAUNCH_KEYS: tuple[str, ...] = (
    "launcher",
    "model",
    "draft_model",
    "algorithm",
    "num_steps",
    "eagle_topk",
    "num_draft_tokens",
    "args",
    "tp_size",
    "workload_hash",
)

#: Variables a container image fixes, recorded as one entry (`IMAGE_ENTRY`): NVIDIA's CUDA images set
#: `NVIDIA_REQUIRE_CUDA` (about 2 KB), `NVIDIA_DRIVER_CAPABILITIES`, `NVIDIA_PRODUCT_NAME`, `CUDA_VERSION`,
#: `NCCL_VERSION`, `NV_*` and `NVARCH` in their Dockerfiles, NGC's framework images `NVIDIA_BUILD_ID`,
#: `NVIDIA_PYTORCH_VERSION`, `PYTORCH_VERSION`, `CUDA_DRIVER_VERSION`, `CUDNN_VERSION`. They describe the
#: image, and change all at once with it: one drift line names them. A family list rather than a length
#: limit, so that a long tuning value (an `SGLANG_*` JSON) is never hidden in a digest.
IMAGE_VARIABLES: tuple[str, ...] = (
    "NVIDIA_*",
    "NV_*",
    "NVARCH",
    "CUDA_VERSION",
    "CUDA_DRIVER_VERSION",
    "CUDNN_VERSION",
    "NCCL_VERSION",
    "PYTORCH_VERSION",
)
#: Of those families, the variables a job or a person sets: placement and a tuning switch stay entries of
#: their own (`NVIDIA_TF32_OVERRIDE=0` changes the kernels' math).
NOT_IMAGE_VARIABLES: tuple[str, ...] = ("NVIDIA_VISIBLE_DEVICES", "NVIDIA_MIG_*", "NVIDIA_TF32_OVERRIDE")
#: The environment entry that holds them: a digest of them all, then each name with its own digest.
IMAGE_ENTRY = "image.variables"

# Flags whose value changes every run and says nothing about performance (the simulator's start seed
# stands for "another server start", which every night is).
_VOLATILE_FLAGS: frozenset[str] = frozenset({"--host", "--port", "--sim-start-seed"})

# --------------------------------------------------------------------------------------------
# Normalisation


def _text(value: object) -> str:
    """One string per value, so fingerprints compare the same however a config spelled it."""
    if value is None:
        return UNSET
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return json.dumps(value, sort_keys=True, default=str)
    if isinstance(value, Sequence):
        return shlex.join(str(v) for v in value)
    return str(value)


def _is_flag(token: str) -> bool:
    """Only long options start a group: `python3 -m sglang.launch_server` stays together."""
    return token.startswith("--") and token != "--"


def _option_groups(args: Sequence[str]) -> list[list[str]]:
    """Split argv into [flag, values...] groups; leading positionals form the first group."""
    groups: list[list[str]] = [[]]
    for token in args:
        if _is_flag(token):
            flag, eq, value = token.partition("=")
            groups.append([flag, value] if eq else [flag])
        else:
            groups[-1].append(token)
    return groups


def normalize_args(args: Sequence[str], *, drop: frozenset[str] = frozenset()) -> str:
    """A launch command as one canonical string: `--a=b` → `--a b`, options sorted by flag.

    Two configs that list the same options in another order describe the same server, so they
    must have the same identity. Options in `drop` (volatile ones like `--port`) are left out.
    """
    groups = _option_groups(redact_args(args))
    positional, options = groups[0], groups[1:]
    kept = sorted((g for g in options if g[0] not in drop), key=lambda g: g[0])
    return shlex.join([*positional, *(token for group in kept for token in group)])


def launch_flags(command: Sequence[str]) -> dict[str, str]:
    """One entry per option of a launch command (`server.flag --tp-size`: "8"), secrets redacted.

    The program part (an interpreter path, `-m sglang.launch_server`) differs between machines
    and virtualenvs without changing the server, and one long string would make a drift line
    unreadable: per-flag entries show exactly what changed (`--sim-draft-slowdown: unset → 8`).
    """
    options = _option_groups(redact_args(command))[1:]
    return {
        f"server.flag {group[0]}": shlex.join(group[1:]) or "set"
        for group in options
        if group[0] not in _VOLATILE_FLAGS
    }


def command_words(value: object) -> list[str]:
    """A launch command given as a string or a list, as a list of tokens."""
    if isinstance(value, str):
        try:
            return shlex.split(value)
        except ValueError:
            return value.split()
    if isinstance(value, Sequence):
        return [str(v) for v in value]
    return []


# --------------------------------------------------------------------------------------------
# Local probe


@dataclass(frozen=True)
class LocalGpus:
    """What `nvidia-smi` says about this host's GPUs."""

    name: str
    count: int
    driver: str | None = None
    cuda: str | None = None


def _run(argv: list[str]) -> str | None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=15, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


@functools.cache
def probe_local_gpus() -> LocalGpus | None:
    """GPU name, count, driver and CUDA version of this host, or None without `nvidia-smi`.

    Cached: the hardware does not change within a pytest session, and nvidia-smi is slow.
    """
    out = _run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"])
    rows = [[c.strip() for c in line.split(",")] for line in (out or "").splitlines() if line.strip()]
    if not rows:
        return None
    names = sorted({row[0] for row in rows})
    cuda = re.search(r"CUDA Version:\s*([\d.]+)", _run(["nvidia-smi"]) or "")
    return LocalGpus(
        name=names[0] if len(names) == 1 else " + ".join(names),
        count=len(rows),
        driver=rows[0][1] if len(rows[0]) > 1 else None,
        cuda=cuda.group(1) if cuda else None,
    )


def _visible_count(gpus: LocalGpus, server_env: Mapping[str, str]) -> int:
    """GPUs the server could see: CUDA_VISIBLE_DEVICES narrows what nvidia-smi lists."""
    visible = server_env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return gpus.count
    return len([d for d in visible.split(",") if d.strip()])


# --------------------------------------------------------------------------------------------
# Fingerprint


@dataclass(frozen=True)
class Fingerprint:
    """Where a number was measured. Values are strings; "unset" stands for absent/None.

    The mappings are plain dicts (so fingerprints pickle across xdist workers); treat them as
    read-only. Not hashable.
    """

    identity: Mapping[str, str]
    environment: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "identity", {str(k): _text(v) for k, v in self.identity.items()})
        environment = {str(k): _text(v) for k, v in self.environment.items()}
        object.__setattr__(self, "environment", compact_image_variables(environment))

    def to_dict(self) -> dict[str, dict[str, str]]:
        return {
            "identity": dict(sorted(self.identity.items())),
            "environment": dict(sorted(self.environment.items())),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Fingerprint:
        """Inverse of `to_dict`; ValueError names the part that is malformed."""
        if not isinstance(data, Mapping):
            raise ValueError(f"fingerprint must be an object, not {type(data).__name__}")
        parts = []
        for part in ("identity", "environment"):
            value = data.get(part)
            if not isinstance(value, Mapping):
                raise ValueError(f"fingerprint.{part} must be an object, got {value!r}")
            parts.append(value)
        return cls(identity=parts[0], environment=parts[1])

    def redacted(self) -> Fingerprint:
        """The same fingerprint with the redaction applied again (defence in depth)."""
        return Fingerprint(
            identity={k: redact_text(v) for k, v in self.identity.items()},
            environment=redact_env(self.environment),
        )

    def summary(self) -> str:
        """One short line for report headers, e.g. "NVIDIA H200 x8, sglang 0.5.23, launcher sglang"."""
        if self.identity.get("device") == "cpu":
            cores = self.identity.get("cpu_count", UNSET)
            hardware = f"CPU {self.identity.get('cpu', 'unknown')}" + (
                f" ({cores} cores)" if cores not in ("unknown", UNSET) else ""
            )
        else:
            gpu = self.identity.get("gpu", UNSET)
            hardware = "GPU unknown" if gpu in ("unknown", UNSET) else gpu
            count = self.identity.get("gpu_count", UNSET)
            if count not in ("unknown", UNSET):
                hardware += f" x{count}"
        engine = self.identity.get("engine", DEFAULT_ENGINE)
        version = self.environment.get(f"{engine}.version", UNSET)
        launcher = self.identity.get("launcher", UNSET)
        text = f"{hardware}, {engine} {'unknown' if version == UNSET else version}, launcher {launcher}"
        profile = self.identity.get("sim_profile")
        return f"{text} (profile {profile})" if profile not in (None, UNSET) else text


def is_image_variable(name: str) -> bool:
    """Whether a variable is one a container image fixes (`IMAGE_VARIABLES`), not a tuning one."""
    if is_secret_name(name) or any(fnmatch.fnmatchcase(name, p) for p in NOT_IMAGE_VARIABLES):
        return False
    return any(fnmatch.fnmatchcase(name, p) for p in IMAGE_VARIABLES)


def _digest(text: str, size: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:size]


def image_digests(value: str) -> dict[str, str]:
    """Each variable's digest in an `IMAGE_ENTRY` value ("3f9a0c1b7e2d CUDA_VERSION=1a2b3c4d ...")."""
    pairs = (word.partition("=") for word in value.split()[1:])
    return {name: digest for name, eq, digest in pairs if eq}


def image_entry(digests: Mapping[str, str]) -> str:
    """An `IMAGE_ENTRY` value from each variable's digest: their digest first, then each name=digest."""
    pairs = [f"{name}={digest}" for name, digest in sorted(digests.items())]
    return " ".join([_digest(" ".join(pairs), 12), *pairs])


def compact_image_variables(environment: Mapping[str, str]) -> dict[str, str]:
    """The environment with the image's variables folded into one `IMAGE_ENTRY` (a 2 KB
    `NVIDIA_REQUIRE_CUDA` would otherwise make an image change pages of drift). Fingerprints stored
    with the variables in full fold the same way when read, so they compare with new ones unchanged."""
    image = {name: value for name, value in environment.items() if is_image_variable(name)}
    if not image:
        return dict(environment)
    digests = image_digests(environment.get(IMAGE_ENTRY, ""))
    digests.update({name: _digest(value, 8) for name, value in image.items()})
    kept = {name: value for name, value in environment.items() if name not in image}
    return {**kept, IMAGE_ENTRY: image_entry(digests)}


def capture(
    *,
    launch_identity: Mapping[str, object],
    server_info: Mapping[str, Any] | None,
    loads: Mapping[str, Any] | None,
    server_env: Mapping[str, str],
    env_patterns: Sequence[str] = DEFAULT_ENV_PATTERNS,
    local: bool = True,
    gpu_probe: Callable[[], LocalGpus | None] = probe_local_gpus,
    engine: Engine | None = None,
    gpu_count: int | None = None,
) -> Fingerprint:
    """Fingerprint of one running server.

    `launch_identity` comes from the server config (see `LAUNCH_KEYS`, plus `sim_profile`);
    values left None are read back from `/server_info` when it has them (servers attached by
    URL). `server_env` is the environment the server was started with; for a server attached
    by URL pass only what is known about it (e.g. `{}`), not this process's environment.
    `local` allows the `nvidia-smi` probe (server on this host). `gpu_probe` exists for tests.
    `engine` (default: the default engine) says which info fields mean what. `gpu_count` is the
    GPUs the whole deployment uses, as its engine reads them from the launch arguments (or the
    server's info): a per-replica count such as SGLang's `/v1/loads` undercounts data parallelism.
    """
    engine = engine or default_engine()
    info = server_info or {}
    marker = info.get("simulator") if isinstance(info.get("simulator"), Mapping) else None
    gpus = gpu_probe() if local else None
    launched = _launch_identity(launch_identity, info, marker, engine)
    on_cpu = engine.device(info, command_words(launch_identity.get("args"))) == "cpu"
    identity = {
        **launched,
        **(_cpu_identity(local) if on_cpu else _gpu_identity(loads, gpus, server_env, gpu_count)),
    }
    environment = {
        **_versions(info, gpus, engine.name),
        **_server_settings(info, engine),
        **_simulator_environment(marker),
        **(_model_environment(launch_identity.get("model")) if local else {}),
        **_selected_env(server_env, engine.reported_env(info), env_patterns),
    }
    return Fingerprint(identity=identity, environment=environment).redacted()


def _launch_identity(
    launch: Mapping[str, object], info: Mapping[str, Any], marker: Mapping[str, Any] | None, engine: Engine
) -> dict[str, str]:
    identity: dict[str, str] = {}
    for key in LAUNCH_KEYS:
        value = launch.get(key)
        if value is None and key in engine.resolved_from_info:
            value = info.get(engine.resolved_from_info[key])
        if key == "args":
            identity[key] = normalize_args(command_words(value)) or UNSET
        else:
            identity[key] = redact_text(_text(value))
    for key in ("engine", "speculative_config"):  # set for engines other than SGLang only
        value = launch.get(key)
        if value is not None:
            identity[key] = json.dumps(value, sort_keys=True) if isinstance(value, Mapping) else _text(value)
    if marker is not None:
        identity["launcher"] = "sim"  # a simulator is a simulator, however it was reached
    if identity["launcher"] == "sim":
        profile = marker.get("profile") if marker else None
        if isinstance(profile, Mapping):
            profile = profile.get("name")
        identity["sim_profile"] = _text(profile if profile is not None else launch.get("sim_profile"))
        identity["sim_time_scale"] = _text(marker.get("time_scale") if marker else None)
    return identity


def _gpu_identity(
    loads: Mapping[str, Any] | None, gpus: LocalGpus | None, server_env: Mapping[str, str], gpu_count: int | None
) -> dict[str, str]:
    """GPU name and count: the name from the server's own report, then the local probe; the count
    from the launch (`gpu_count`), then the server's report, then the local probe, else unknown."""
    name = (loads or {}).get("accelerator")
    count = gpu_count if gpu_count is not None else (loads or {}).get("num_accelerators")
    if gpus is not None:
        name = name or gpus.name
        count = count if count is not None else _visible_count(gpus, server_env)
    return {
        "gpu": str(name) if name else "unknown",
        "gpu_count": str(count) if count is not None else "unknown",
    }


def _cpu_identity(local: bool) -> dict[str, str]:
    """A server that runs on the CPU: the CPU's model and core count in place of GPU keys (which
    would read "GPU unknown" and make a CPU night look like a GPU night in the history). Only CPU
    servers carry `device`, so the fingerprints of GPU servers stored before it stay comparable."""
    return {
        "device": "cpu",
        "cpu": local_cpu_model() if local else "unknown",
        "cpu_count": str(os.cpu_count() or "unknown") if local else "unknown",
    }


@functools.cache
def local_cpu_model() -> str:
    """This host's CPU model name (`/proc/cpuinfo`), else what `platform` says, else "unknown"."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            name, _, value = line.partition(":")
            if name.strip() == "model name" and value.strip():
                return " ".join(value.split())
    except OSError:
        pass
    return platform.processor() or "unknown"


def _versions(info: Mapping[str, Any], gpus: LocalGpus | None, engine: str) -> dict[str, str]:
    versions = {
        f"{engine}.version": _text(info.get("version")),
        "python.version": platform.python_version(),
        "specperf.version": pytest_specperf.__version__,
    }
    if gpus is not None:
        versions["gpu.driver"] = _text(gpus.driver)
        versions["gpu.cuda"] = _text(gpus.cuda)
    return versions


def _server_settings(info: Mapping[str, Any], engine: Engine) -> dict[str, str]:
    """Resolved settings and the redacted launch command, as reported by the server.

    A nested setting (SGLang 0.5.23's `cuda_graph_config`, one object per phase) becomes one entry per
    leaf that is set (`server.cuda_graph_config.decode.max_bs`), so a drift line names what changed.
    """
    settings: dict[str, str] = {}
    for name in engine.info_fields:
        if name in info and not is_secret_name(name):
            settings.update(_leaves(f"server.{name}", info[name]))
    if "launch_command" in info:
        settings.update(launch_flags(command_words(info["launch_command"])))
    return settings


def _leaves(prefix: str, value: object) -> dict[str, str]:
    if not isinstance(value, Mapping):
        return {prefix: _text(value)}
    found: dict[str, str] = {}
    for key, inner in value.items():
        if inner is not None and not is_secret_name(str(key)):
            found.update(_leaves(f"{prefix}.{key}", inner))
    return found


def _model_environment(model: object) -> dict[str, str]:
    """The model's own dtype (`model.dtype`), from its `config.json` when the model is a local folder.

    An engine's `dtype auto` runs the model in this dtype: a server asked for `bfloat16` and one left
    at `auto` run alike when the model is bf16 (verdict/drift.py reads `auto` as this value).
    """
    if not isinstance(model, str) or not model:
        return {}
    try:
        config = json.loads((Path(model) / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    dtype = config.get("torch_dtype", config.get("dtype")) if isinstance(config, Mapping) else None
    return {"model.dtype": dtype} if isinstance(dtype, str) else {}


def _simulator_environment(marker: Mapping[str, Any] | None) -> dict[str, str]:
    """Scalar simulator settings other than the identity ones (profile, time scale)."""
    if marker is None:
        return {}
    return {
        f"sim.{name}": REDACTED if is_secret_name(name) else _text(value)
        for name, value in marker.items()
        if name not in ("profile", "time_scale") and not isinstance(value, Mapping | list)
    }


def _selected_env(
    server_env: Mapping[str, str], reported: Mapping[str, Any], patterns: Sequence[str]
) -> dict[str, str]:
    """Variables matching `patterns`; what the server reports it runs with wins when present."""
    merged = {**server_env, **{k: _text(v) for k, v in reported.items()}}
    selected = {name: value for name, value in merged.items() if any(fnmatch.fnmatchcase(name, p) for p in patterns)}
    return redact_env(selected)
