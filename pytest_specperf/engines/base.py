"""The engine interface: what the launcher, the HTTP client and the fingerprint need from an engine."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

if TYPE_CHECKING:
    from pytest_specperf.config.settings import ServerConfig, SpecperfConfig
    from pytest_specperf.config.workloads import Prompt
    from pytest_specperf.measure.http import SamplingParams
    from pytest_specperf.measure.records import SpecCounters

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


def count_list(value: Any) -> tuple[int, ...] | None:
    """A histogram as a server sends it (a JSON list of non-negative integers), else None."""
    if not isinstance(value, list) or not value:
        return None
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
        return None
    return tuple(value)


@dataclass(frozen=True)
class EngineRequest:
    path: str
    payload: dict[str, Any]
    mode: StreamMode


class Engine(ABC):
    """One serving engine's contract, as the plugin relies on it (see docs/engines/)."""

    name: ClassVar[str]
    #: versions this plugin was checked against; another version is measured and named in the report
    known_versions: ClassVar[tuple[str, ...]]
    #: GET path that answers 200 once the server can serve (polled while watching the process)
    readiness_path: ClassVar[str]
    #: POST path that clears the prefix cache before each round, or None where the server has none
    flush_path: ClassVar[str | None]
    #: `python -m MODULE` that starts a server
    module: ClassVar[str]
    #: flags the plugin sets itself (or that have a key of their own): refused in a server's `args`
    reserved_flags: ClassVar[Mapping[str, str]]
    #: fingerprint keys whose unset value can be read back from the server's info answer, and where
    #: (servers attached by URL: the config does not say what they run)
    resolved_from_info: ClassVar[Mapping[str, str]] = {}
    #: resolved settings in the info answer that change numbers without changing the config (drift)
    info_fields: ClassVar[tuple[str, ...]] = ()

    @abstractmethod
    def check_server(self, server: ServerConfig, where: str) -> None:
        """Refuse, at configure time, what this engine cannot run (ConfigError naming the key)."""

    @abstractmethod
    def launch_args(self, server: ServerConfig, config: SpecperfConfig, port: int, max_concurrency: int) -> list[str]:
        """The engine's own launch arguments (model, address, speculative settings, extra args)."""

    @abstractmethod
    def request(self, prompt: Prompt, sampling: SamplingParams, model: str | None) -> EngineRequest:
        """The streamed request for one prompt."""

    @abstractmethod
    def spec_counts(self, final: Mapping[str, Any], mode: StreamMode) -> SpecCounts | None:
        """Speculation counts from the last event that carries them, None for a plain answer."""

    def reported_env(self, info: Mapping[str, Any]) -> Mapping[str, Any]:
        """Environment variables the server reports it runs with (they win over what we started it with)."""
        return {}

    def version_path(self) -> str | None:
        """GET path whose JSON has the server's `version` (when `/server_info` has none)."""
        return None

    #: GET path of the Prometheus text whose speculation counters `spec_counters` reads, or None
    counters_path: ClassVar[str | None] = None

    def spec_counters(self, metrics_text: str) -> SpecCounters | None:
        """The server's cumulative speculation counters from its Prometheus text (None: it has none)."""
        return None

    def version_note(self, version: object) -> str | None:
        """A note when the server's version is not one this plugin was checked against.

        A local suffix (`0.5.23+specperf-sim`, `0.32.0+cpu`) is the same release; an unknown or
        absent version says nothing.
        """
        if not isinstance(version, str) or not version.strip():
            return None
        if version.split("+", 1)[0] in self.known_versions:
            return None
        return (
            f"{self.name} {version} is not a version this plugin was checked against "
            f"(known: {', '.join(self.known_versions)}); it is measured as usual, but its endpoints, "
            f"streams or counters may differ from docs/engines/{self.name}.md"
        )


def engine_names() -> tuple[str, ...]:
    return tuple(_ENGINES)


def engine_for(name: str) -> Engine:
    """The engine called `name` ("sglang", "vllm")."""
    return _ENGINES[name]()


def _sglang() -> Engine:
    from pytest_specperf.engines.sglang import SGLang

    return SGLang()


def _vllm() -> Engine:
    from pytest_specperf.engines.vllm import VLLM

    return VLLM()


_ENGINES = {"sglang": _sglang, "vllm": _vllm}
