"""The engine interface: everything the rest of the plugin needs to know about a serving engine.

An engine is resolved once from a server config (`engine_for(config.engine_name(server))`) and
carried as an object from then on (`LaunchPlan.engine`, `RunningServer.engine`): launch flags and
their rules, readiness, how a failed start reads, request and stream formats, where speculation is
reported, which server-info fields mean what, GPU accounting and teardown. Nothing outside
`engines/` branches on an engine's name, so a new engine is one module registered here plus its tests.
"""

from __future__ import annotations

import importlib
import re
import shlex
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pytest_specperf.engines.flags import EngineFlags
from pytest_specperf.engines.tuning import Candidate
from pytest_specperf.errors import ConfigError

if TYPE_CHECKING:
    from pytest_specperf.config.settings import ServerConfig, SpecperfConfig
    from pytest_specperf.config.workloads import Prompt, SamplingParams, WorkloadConfig

#: How a response streams: SGLang's native `/generate`, OpenAI chat, or OpenAI text completions.
StreamMode = Literal["generate", "chat", "completions"]


@dataclass(frozen=True)
class SpecCounts:
    """What one finished request says about speculation.

    `verify_steps` are forward passes of the target model that verified drafts; `spec_tokens` the
    tokens those steps emitted (accepted drafts plus one bonus token each), where the engine says so;
    None means the engine's own definition is completion tokens per verify step (SGLang).
    `histogram[a]` counts the verify steps that accepted exactly `a` drafts, where the engine reports
    it (SGLang's `spec_correct_drafts_histogram`, vLLM's `acceptance_histogram`): per-position
    acceptance, which `specperf tune` fits its acceptance model to.
    """

    verify_steps: int
    accepted_drafts: int | None = None
    proposed_drafts: int | None = None
    spec_tokens: int | None = None
    histogram: tuple[int, ...] | None = None


def is_int(value: Any) -> bool:
    """A JSON integer as a server sends it: `True` is an int to Python, never a count to a server."""
    return isinstance(value, int) and not isinstance(value, bool)


def openai_sampling(sampling: SamplingParams) -> dict[str, Any]:
    """A workload's sampling params as OpenAI request fields, the wire shape of every engine's OpenAI
    routes (`ignore_eos` is an extension both SGLang and vLLM read there).

    The seed goes in OpenAI's own `seed` field. docs/engines/sglang.md does not list it, but
    SGLang's `ChatCompletionRequest` declares `seed: Optional[int]` and `to_sampling_params`
    forwards it as `sampling_seed` (srt/entrypoints/openai/protocol.py), so it is the same seed.
    """
    params: dict[str, Any] = {
        "max_tokens": sampling.max_new_tokens,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "ignore_eos": sampling.ignore_eos,
    }
    if sampling.seed is not None:
        params["seed"] = sampling.seed
    return params


def count_list(value: Any) -> tuple[int, ...] | None:
    """A histogram as a server sends it (a JSON list of non-negative integers), else None."""
    if not isinstance(value, list) or not value:
        return None
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
        return None
    return tuple(value)


def draft_depth(algorithm: str | None, num_steps: int | None, num_draft_tokens: int | None) -> int | None:
    """The most drafts one verify step can accept: the draft positions acceptance by position spans.

    The server's resolved sizes say it, not the histograms: a histogram of accepted drafts ends at the
    deepest acceptance its request saw (SGLang's `[63]`: 63 steps that accepted nothing), so only the
    draft's shape says how many positions were drafted and missed. An EAGLE-style tree (a chain is the
    tree of topk 1) is `num_steps` deep and holds `num_draft_tokens - 1` drafts besides its root, so no
    path is longer than either. An n-gram draft is a lookup of up to `num_draft_tokens - 1` tokens whose
    `num_steps` is no depth (SGLang reports `num_draft_tokens // topk`, 1 for its defaults of 12 and 10).
    None when the sizes are unknown (a plain server)."""
    tokens = num_draft_tokens - 1 if num_draft_tokens is not None and num_draft_tokens > 1 else None
    if algorithm is not None and algorithm.upper() == "NGRAM" and tokens is not None:
        return tokens
    if num_steps is None:
        return tokens
    return num_steps if tokens is None else min(num_steps, tokens)


@dataclass(frozen=True, slots=True)
class SpecCounters:
    """A server's cumulative speculation counters (vLLM's Prometheus `vllm:spec_decode_*_total`), or
    their change over one round (`after - before`; rounds never overlap, so the change is the round's).

    `drafts` counts verify steps that had drafts, `draft_tokens` the drafts proposed, `accepted` the
    drafts accepted, and `accepted_per_position[i]` those accepted at draft position i (0-based).
    """

    drafts: int
    draft_tokens: int
    accepted: int
    accepted_per_position: tuple[int, ...] = ()

    def __sub__(self, before: SpecCounters) -> SpecCounters:
        positions = len(self.accepted_per_position)
        earlier = before.accepted_per_position + (0,) * (positions - len(before.accepted_per_position))
        return SpecCounters(
            drafts=self.drafts - before.drafts,
            draft_tokens=self.draft_tokens - before.draft_tokens,
            accepted=self.accepted - before.accepted,
            accepted_per_position=tuple(a - b for a, b in zip(self.accepted_per_position, earlier, strict=False)),
        )

    @property
    def accept_length(self) -> float | None:
        """τ over these steps: 1 + accepted / steps (tokens per verify step, bonus included)."""
        return 1 + self.accepted / self.drafts if self.drafts > 0 else None

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted over proposed drafts."""
        return self.accepted / self.draft_tokens if self.draft_tokens > 0 else None

    @property
    def acceptance_per_position(self) -> tuple[float, ...]:
        """Per draft position i: the share of verify steps whose draft was accepted at least to i."""
        return tuple(a / self.drafts for a in self.accepted_per_position) if self.drafts > 0 else ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "drafts": self.drafts,
            "draft_tokens": self.draft_tokens,
            "accepted": self.accepted,
            "accepted_per_position": list(self.accepted_per_position),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SpecCounters:
        return cls(
            drafts=int(data["drafts"]),
            draft_tokens=int(data["draft_tokens"]),
            accepted=int(data["accepted"]),
            accepted_per_position=tuple(int(a) for a in data.get("accepted_per_position", ())),
        )


@dataclass(frozen=True)
class NativeEvent:
    """One event of an engine's own (non-OpenAI) stream: cumulative text and the counts so far."""

    text: str
    finish: str | None  # the finish type ("length", "stop", "abort"), None while running
    finish_detail: Any
    prompt_tokens: Any
    completion_tokens: Any
    cached_tokens: Any


@dataclass(frozen=True)
class EngineRequest:
    path: str
    payload: dict[str, Any]
    mode: StreamMode


@dataclass(frozen=True)
class ReportedSettings:
    """What the server says it runs (its info answer), which may differ from what was asked:
    auto-chosen speculative sizes, SGLang's NGRAM topk, the CUDA-graph batch limit."""

    algorithm: str | None = None
    num_steps: int | None = None
    eagle_topk: int | None = None
    num_draft_tokens: int | None = None
    cuda_graph_max_bs: int | None = None
    max_running_requests: int | None = None
    gpu_count: int | None = None


@dataclass(frozen=True)
class LikeForLike:
    """What an engine says makes no difference between a speedup's reference and its speculative
    server (verdict/drift.py `unlike_reference`), each from the engine's own rules:

    * `forced`: settings the engine sets for speculation itself (fingerprint entry -> value): a
      speculative server that reports the value without asking for it got it from the engine;
    * `automatic`: settings the engine resolves from the machine when nobody asks (free memory);
    * `resolved`: settings whose `auto` stands for another fingerprint entry (the model's dtype);
    * `inert`: per device, entries that cannot act there (CUDA graphs on a CPU);
    * `effects`: launch flags whose effect the server reports under other entries (fnmatch patterns).
    """

    forced: Mapping[str, str] = field(default_factory=dict)
    automatic: tuple[str, ...] = ()
    resolved: Mapping[str, str] = field(default_factory=dict)
    inert: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    effects: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


_RELEASE = re.compile(r"\s*v?(\d+(?:\.\d+)*)")


def release(version: str) -> tuple[int, ...] | None:
    """A version's release numbers (`0.26.0+cpu` -> (0, 26, 0), `0.0.0.dev0` -> (0, 0, 0)); None
    when it does not begin with one."""
    found = _RELEASE.match(version)
    return tuple(int(part) for part in found.group(1).split(".")) if found else None


@dataclass(frozen=True)
class VersionRange:
    """The releases of an engine the plugin supports, both ends included: from `oldest` up to
    every release that begins with `newest` ("0.32" takes 0.32.0 and any 0.32.x).

    Each end is one the project runs: docs/engines/ say how (a CI lane on that release, or its
    parser replayed from its wheel), and a release outside is measured but named once per session.
    """

    oldest: str
    newest: str

    def __contains__(self, version: object) -> bool:
        found = release(version) if isinstance(version, str) else None
        low, high = release(self.oldest), release(self.newest)
        if found is None or low is None or high is None:
            return False
        return low <= found and found[: len(high)] <= high

    def __str__(self) -> str:
        newest = self.newest if release(self.newest) == release(self.oldest) else f"{self.newest}.x"
        return self.oldest if newest == self.oldest else f"{self.oldest} to {newest}"


#: A log line that warns or reports an error, whatever the engine: a logger's level word (vLLM's
#: `WARNING 12-04 18:40:02 [vllm.py:1164] ...`, behind a `(EngineCore pid=1)` prefix or not), a
#: Python warning (`x.py:52: UserWarning: ...` and its `warnings.warn(` line), a raised exception.
NOT_PROGRESS = (
    r"(?-i:.*?(?:\b(?:WARNING|WARN|ERROR|CRITICAL|FATAL)\b|\w*(?:Warning|Error|Exception)\b:"
    r"|warnings\.warn\())"
)
_NOT_PROGRESS = re.compile(NOT_PROGRESS)


def is_warning(line: str) -> bool:
    """A line that warns or reports an error: never a start's progress (`NOT_PROGRESS`)."""
    return _NOT_PROGRESS.match(line) is not None


def milestone(pattern: str) -> re.Pattern[str]:
    """A start-up milestone: a log line matching `pattern` (case-insensitive) that is not a warning
    or an error. vLLM's `WARNING 12-04 18:40:02 [vllm.py:1164] Enforce eager set, disabling
    torch.compile ...` names a compile step that never happens; a progress line that took it for
    one would show a step the start skips, and would count it as progress past an earlier error."""
    return re.compile(rf"^(?!{NOT_PROGRESS})(?=.*?(?:{pattern}))", re.IGNORECASE)


#: A start-up failure's log pattern (case-insensitive) and its one-line diagnosis with the usual fix.
StartupFailure = tuple[re.Pattern[str], str]

# fmt: off
#: How every Python engine's start fails the same way, read the same whatever the engine: argparse
#: refusing a flag or its value, a port another process took, a model that is not there, a failed
#: import. An engine's `startup_failures` lists these among its own causes, in the order it matches.
UNKNOWN_FLAG = (
    r"error: unrecognized arguments",
    "the engine does not know a flag in the launch arguments (check `args`)",
)
REFUSED_VALUE = (r"error: argument --", "the engine refused a flag's value (check `args`)")
PORT_IN_USE = "address already in use: another process took the server's port"
PORT_TAKEN = (r"address already in use|errno 98\b", PORT_IN_USE)
MODEL_NOT_FOUND = "model not found: check `model`/`draft_model` (a local path or a Hugging Face repo id)"
IMPORT_FAILED = r"ModuleNotFoundError|ImportError|undefined symbol"
#: Lines after which no Python engine's start becomes ready: a failed bind, a native abort.
FATAL_BIND = r"error while attempting to bind on address|address already in use|\berrno 98\b"
FATAL_ABORT = r"^terminate called after throwing|^Fatal Python error:"
# fmt: on


def not_installed(package: str, engine: str) -> tuple[str, str]:
    """The engine's own package missing from the configured interpreter (before any other import failure)."""
    return (rf"No module named '?{package}\b", f"{engine} is not installed for the configured `python`")


def startup_failures(*causes: tuple[str, str]) -> tuple[StartupFailure, ...]:
    """An engine's `startup_failures` from (pattern, diagnosis) pairs, first match first."""
    return tuple((re.compile(pattern, re.IGNORECASE), diagnosis) for pattern, diagnosis in causes)


def fatal_startup(*patterns: str) -> tuple[re.Pattern[str], ...]:
    """An engine's `fatal_startup`: its own patterns between the bind failure and the native abort."""
    return tuple(re.compile(p, re.IGNORECASE) for p in (FATAL_BIND, *patterns, FATAL_ABORT))


class Engine(ABC):
    """One serving engine's contract, as the plugin relies on it (see docs/engines/)."""

    name: ClassVar[str]
    #: versions this plugin was checked against (where an engine states no `supported_versions`)
    known_versions: ClassVar[tuple[str, ...]] = ()
    #: the releases this plugin supports (docs/engines/ say which and how each end is run); a server
    #: of another release is measured as usual and named once in the session's report
    supported_versions: ClassVar[VersionRange | None] = None
    #: GET path that answers 200 once the server can serve (polled while watching the process)
    readiness_path: ClassVar[str]
    #: POST path that clears the prefix cache before each round, or None where the server has none
    flush_path: ClassVar[str | None]
    #: GET paths of the server's resolved settings (the first that exists answers)
    info_paths: ClassVar[tuple[str, ...]] = ()
    #: GET path of the server's accelerator report, or None
    loads_path: ClassVar[str | None] = None
    #: `python -m MODULE` that starts a server
    module: ClassVar[str]
    #: flags the plugin sets itself (or that have a key of their own): refused in a server's `args`
    reserved_flags: ClassVar[Mapping[str, str]]
    #: fingerprint keys whose unset value can be read back from the server's info answer, and where
    #: (servers attached by URL: the config does not say what they run)
    resolved_from_info: ClassVar[Mapping[str, str]] = {}
    #: resolved settings in the info answer that change numbers without changing the config (drift)
    info_fields: ClassVar[tuple[str, ...]] = ()
    #: GET path of the Prometheus text whose speculation counters `spec_counters` reads, or None
    counters_path: ClassVar[str | None] = None
    #: the built-in simulator speaks this engine's contract, so `launcher = "sim"` can dry-run it
    simulated: ClassVar[bool] = False
    #: start the server from the run directory (`python -m` puts the working directory on sys.path)
    run_from_run_dir: ClassVar[bool] = False
    #: fingerprint keys (fnmatch patterns) that belong to speculation: a speedup compares the rest
    speculation_keys: ClassVar[tuple[str, ...]] = (
        "algorithm",
        "draft_model",
        "num_steps",
        "eagle_topk",
        "num_draft_tokens",
        "speculative_config",
    )
    #: what the engine says makes no difference to a speedup's like-for-like check (`LikeForLike`)
    like_for_like: ClassVar[LikeForLike] = LikeForLike()
    #: log lines that echo the launch (its arguments, its command line): never the cause of a failure
    launch_echo: ClassVar[tuple[re.Pattern[str], ...]] = ()
    #: known causes of a failed start: (log pattern, one-line diagnosis with the usual fix)
    startup_failures: ClassVar[tuple[StartupFailure, ...]] = ()
    #: log lines after which a start never becomes ready, though the launcher may not exit (SGLang's
    #: stays "Waiting for application shutdown." after a failed bind): the wait for it ends at once
    fatal_startup: ClassVar[tuple[re.Pattern[str], ...]] = ()
    #: start-up milestones worth showing in a progress line (loading weights, capturing graphs, ...)
    startup_milestones: ClassVar[tuple[re.Pattern[str], ...]] = ()
    #: the `[specperf.tune]` keys this engine's candidates vary (none: `specperf tune` cannot search it)
    tune_axes: ClassVar[tuple[str, ...]] = ()
    #: where its per-position acceptance is read, as tune's plan names it
    acceptance_source: ClassVar[str] = "accept lengths"

    # ---- flags and configuration ----------------------------------------------------------------

    @abstractmethod
    def flags(self, python: str, env: Mapping[str, str]) -> EngineFlags:
        """The engine's flags as the interpreter `python` has them installed (or the shipped list)."""

    def spell_out(self, args: Sequence[str], where: str, flags: EngineFlags) -> tuple[str, ...]:
        """`args` with every flag written as the engine reads it, so whole-flag checks see real names."""
        return tuple(args)

    @abstractmethod
    def check_server(self, server: ServerConfig, where: str, flags: EngineFlags) -> None:
        """Refuse, at configure time, what this engine cannot run (ConfigError naming the key)."""

    def check_args(self, server: ServerConfig, where: str, flags: EngineFlags) -> None:  # noqa: B027
        """Refuse flags the installed engine does not know (a typo fails at collection, not at night)."""

    def config_warnings(self, server: ServerConfig, workloads: Sequence[WorkloadConfig]) -> list[str]:
        """Collection-time warnings: settings that run but make the numbers noisier than they look."""
        return []

    @abstractmethod
    def launch_args(self, server: ServerConfig, config: SpecperfConfig, port: int, max_concurrency: int) -> list[str]:
        """The engine's own launch arguments (model, address, speculative settings, extra args)."""

    def launch_argv(self, python: str, args: Sequence[str], flags: EngineFlags | None) -> list[str]:
        """The command that starts a server: `PYTHON -m MODULE ARGS` by default."""
        return [*shlex.split(python), "-m", self.module, *args]

    def identity_extras(self, server: ServerConfig) -> dict[str, Any]:
        """Fingerprint identity keys of this engine besides the portable ones (none for SGLang, whose
        baselines predate other engines)."""
        return {"engine": self.name}

    # ---- specperf tune ---------------------------------------------------------------------------

    def tune_candidates(
        self, base: ServerConfig, axes: Mapping[str, tuple[Any, ...]], where: str, flags: EngineFlags
    ) -> list[Candidate]:
        """The configs a search over `axes` (validated values of `tune_axes`) may start: the `base`
        server with one combination each, every one a config this engine runs (engines/tuning.py)."""
        raise ConfigError(f"{where} base", f"server {base.name!r} runs {self.name}, which has no tune search space")

    def speculative_settings(self, server: ServerConfig) -> dict[str, Any]:
        """A server's speculative settings as this engine reads them (the tune document's `server`)."""
        if server.speculative_config is not None:
            return dict(server.speculative_config)
        return {
            "algorithm": server.algorithm,
            "draft_model": server.draft_model,
            "num_speculative_tokens": server.num_steps,
        }

    # ---- GPUs --------------------------------------------------------------------------------------

    def gpu_count(self, args: Sequence[str]) -> int:
        """GPUs one server uses in all, from its launch arguments."""
        return 1

    def local_gpu_ids(self, args: Sequence[str]) -> range:
        """Logical device ids the server uses on this node (before CUDA_VISIBLE_DEVICES mapping)."""
        return range(self.gpu_count(args))

    # ---- requests and streams ------------------------------------------------------------------

    @abstractmethod
    def request(self, prompt: Prompt, sampling: SamplingParams, model: str | None) -> EngineRequest:
        """The streamed request for one prompt."""

    def native_event(self, obj: Mapping[str, Any]) -> NativeEvent:
        """One event of the engine's own stream format (requests whose mode is "generate")."""
        raise NotImplementedError(f"{self.name} has no native stream")

    @abstractmethod
    def spec_counts(self, final: Mapping[str, Any], mode: StreamMode) -> SpecCounts | None:
        """Speculation counts from the last event that carries them, None for a plain answer."""

    # ---- server state ------------------------------------------------------------------------------

    def reported_env(self, info: Mapping[str, Any]) -> Mapping[str, Any]:
        """Environment variables the server reports it runs with (they win over what we started it with)."""
        return {}

    def reported(self, info: Mapping[str, Any]) -> ReportedSettings:
        """What the server says it runs (empty where its info answer has no such fields)."""
        return ReportedSettings()

    def device(self, info: Mapping[str, Any], args: Sequence[str]) -> str | None:
        """The kind of device the server runs on ("cuda", "cpu", ...), where it can be told: the info
        answer's `device`, else a `--device` flag, else a CPU build's version suffix (`0.32.0+cpu`)."""
        reported = info.get("device")
        if isinstance(reported, str) and reported:
            return reported
        for i, arg in enumerate(args):
            name, eq, value = arg.partition("=")
            if name == "--device":
                return value if eq else (args[i + 1] if i + 1 < len(args) else None)
        version = info.get("version")
        return "cpu" if isinstance(version, str) and version.endswith("+cpu") else None

    def version_path(self) -> str | None:
        """GET path whose JSON has the server's `version` (when no info path has one)."""
        return None

    def spec_counters(self, metrics_text: str) -> SpecCounters | None:
        """The server's cumulative speculation counters from its Prometheus text (None: it has none)."""
        return None

    def version_note(self, version: object) -> str | None:
        """A line naming a server version outside the releases this plugin supports (said once per
        session, in the report's warnings).

        A local suffix (`0.5.23+specperf-sim`, `0.32.0+cpu`) is the same release; an unknown or
        absent version says nothing.
        """
        if not isinstance(version, str) or not version.strip():
            return None
        supported = self.supported_versions
        if supported is not None:
            if version in supported:
                return None
            return (
                f"{self.name} {version} is outside the versions this plugin supports ({self.name} {supported}); "
                f"it is measured as usual, but its flags, endpoints, streams or counters may differ from "
                f"docs/engines/{self.name}.md"
            )
        if version.split("+", 1)[0] in self.known_versions:
            return None
        return (
            f"{self.name} {version} is not a version this plugin was checked against "
            f"(known: {', '.join(self.known_versions)}); it is measured as usual, but its endpoints, "
            f"streams or counters may differ from docs/engines/{self.name}.md"
        )

    def adds_flag(self, flag: str, flags: EngineFlags | None, *, when_unknown: bool) -> bool:
        """Whether a flag the plugin adds by itself goes on the command line: only where the engine's
        parser has it (a release without it exits with "unrecognized arguments", and the server is
        lost for a number it can read elsewhere). Where the installed parser could not be read, the
        engine decides (`when_unknown`): yes for a flag every supported release has, no for one that
        only some have."""
        if flags is None or not flags.installed:
            return when_unknown
        return flag in flags.options


# --------------------------------------------------------------------------------------------
# The registry


#: engine name -> "module:Class" (imported on first use) or a factory
_ENGINES: dict[str, str | Callable[[], Engine]] = {
    "sglang": "pytest_specperf.engines.sglang:SGLang",
    "vllm": "pytest_specperf.engines.vllm:VLLM",
}
_INSTANCES: dict[str, Engine] = {}


def register_engine(name: str, factory: str | Callable[[], Engine]) -> None:
    """Make an engine available under `name` ("module:Class" or a callable returning the engine)."""
    _ENGINES[name] = factory
    _INSTANCES.pop(name, None)


def unregister_engine(name: str) -> None:
    _ENGINES.pop(name, None)
    _INSTANCES.pop(name, None)


def engine_names() -> tuple[str, ...]:
    return tuple(_ENGINES)


def engine_for(name: str) -> Engine:
    """The engine called `name` (one instance per process: engines hold no per-server state)."""
    engine = _INSTANCES.get(name)
    if engine is None:
        factory = _ENGINES[name]
        if isinstance(factory, str):
            module, _, cls = factory.partition(":")
            engine = getattr(importlib.import_module(module), cls)()
        else:
            engine = factory()
        _INSTANCES[name] = engine
    return engine


def default_engine() -> Engine:
    """The engine of a server config that names none (`DEFAULT_ENGINE`): what a client or a fingerprint
    built without a server's engine speaks."""
    from pytest_specperf.config.settings import DEFAULT_ENGINE

    return engine_for(DEFAULT_ENGINE)


def simulated_engines() -> tuple[str, ...]:
    return tuple(name for name in _ENGINES if engine_for(name).simulated)
