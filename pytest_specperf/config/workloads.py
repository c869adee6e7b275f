"""Workloads: which prompts are sent, how many, with which sampling params and at what load.

A workload is validated completely at configure time (`parse_workload`, `load_prompts`), before any
server starts: a typo found after a 15-minute server start is a wasted night.

Prompt sources (`WorkloadConfig.prompts`):

- ``builtin:<set>``: prompt sets written for this project and shipped as JSONL under
  ``pytest_specperf/prompts/`` (one file per category). ``chat`` holds conversations (`messages`:
  an optional system prompt, user turns, some earlier assistant turns; short and long user turns
  as in real traffic), sent through the chat endpoint so the server applies the model's chat
  template, as the draft model saw it in training; its 76 conversations are more than a default round
  (32 requests) or any round of the example suite, so such a round never repeats one. ``code``, ``math``, ``qa`` and
  ``summarization`` are raw text (24 or fewer each), sent to ``/generate`` without a template: for
  completion-style workloads. ``builtin:mixed`` interleaves all categories round-robin, so any prefix
  of it is balanced across categories (and mixes both kinds of request).
- a path to a JSONL file (relative paths are resolved against the config file's folder), one object
  per line: ``{"prompt": "..."}`` (sent to ``/generate`` as raw text) or
  ``{"messages": [{"role": ..., "content": ...}, ...]}`` (sent to ``/v1/chat/completions`` so the
  server applies the model's chat template). Optional keys: ``id`` (string or integer, unique) and
  ``category`` (default: the file's stem). Other keys are ignored, so rows may carry notes.
- a path to a ShareGPT JSON file: a list of ``{"conversations": [{"from": ..., "value": ...}]}``.
  Each entry becomes a *messages* prompt holding the conversation up to and including its first
  ``human`` turn (``system`` -> system, ``human`` -> user, ``gpt`` -> assistant). Chat data is sent
  as chat so the draft model sees the chat template it was trained on, which matters for accept
  length. Entries without a non-empty human turn are skipped (ShareGPT dumps contain many); a file
  with none left is an error. Detected by a ``.json`` suffix, or, for a file that is not ``.jsonl``,
  by a first character ``[``.

`workload_hash` deliberately leaves out the workload's name, the prompt *source* (a path differs per
machine; the prompt *contents* are hashed instead), the concurrency levels (each measurement is keyed
by its own level, so adding a level keeps the baselines of the others) and `max_error_rate` (a verdict
threshold, not something that changes the measured numbers).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from pytest_specperf.config import values as check
from pytest_specperf.errors import ConfigError, did_you_mean

BUILTIN_PREFIX = "builtin:"
BUILTIN_CATEGORIES: tuple[str, ...] = ("chat", "code", "math", "summarization", "qa")
BUILTIN_SETS: tuple[str, ...] = (*BUILTIN_CATEGORIES, "mixed")
#: Built-in categories shipped as chat `messages` (the others are raw text).
BUILTIN_CHAT_CATEGORIES: tuple[str, ...] = ("chat",)
HASH_VERSION = 1
_SHAREGPT_ROLES = {"system": "system", "human": "user", "user": "user", "gpt": "assistant"}


@dataclass(frozen=True, slots=True)
class Prompt:
    """One prompt: raw `text` (sent to /generate) or chat `messages` (sent to /v1/chat/completions)."""

    id: str
    text: str | None
    messages: tuple[dict[str, str], ...] | None
    category: str

    def content(self) -> Any:
        """What the server sees; the part of a prompt that changes results (hashed, compared)."""
        if self.messages is not None:
            return [[m["role"], m["content"]] for m in self.messages]
        return self.text


@dataclass(frozen=True, slots=True)
class WorkloadConfig:
    """A named workload (docs/architecture.md): prompts + sampling params + load shape + request counts."""

    name: str
    prompts: str = "builtin:mixed"
    num_requests: int = 32
    max_new_tokens: int = 256
    concurrency: tuple[int, ...] = (1,)
    request_rate: float | None = None
    temperature: float = 0.0
    top_p: float = 1.0
    ignore_eos: bool = False
    warmup: int = 4
    seed: int = 0
    max_error_rate: float = 0.0
    request_timeout: float | None = None
    stall_timeout: float = 60.0

    @property
    def effective_request_timeout(self) -> float:
        """Seconds one request may take: `request_timeout`, else 60 s plus 0.5 s per output token.

        0.5 s a token is ten times slower than the slowest decode seen on a busy GPU server at high
        concurrency, so only a server that is stuck hits it; a hang is caught sooner by `stall_timeout`.
        """
        return self.request_timeout or 60.0 + 0.5 * self.max_new_tokens

    @property
    def is_open_loop(self) -> bool:
        """Poisson arrivals at `request_rate` instead of `concurrency` always-busy workers."""
        return self.request_rate is not None


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """Sampling params of a workload, engine-neutral; each engine writes them in its own request
    (engines/base.py `openai_sampling` for the OpenAI fields, engines/sglang `sampling_params`).

    `sampling_seed` seeds the server's sampler so a run at temperature > 0 may draw the same tokens
    again (SGLang honours it only with --enable-deterministic-inference: engines/sglang). It is
    sent only when set and the temperature is above 0: greedy decoding draws nothing.
    """

    max_new_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    ignore_eos: bool = False
    sampling_seed: int | None = None

    @classmethod
    def from_workload(cls, cfg: WorkloadConfig) -> SamplingParams:
        """The workload's params; its `seed` also seeds sampling when it samples (temperature > 0)."""
        seed = cfg.seed if cfg.temperature > 0 else None
        return cls(cfg.max_new_tokens, cfg.temperature, cfg.top_p, cfg.ignore_eos, seed)

    @property
    def seed(self) -> int | None:
        """The seed to send: only when sampling (temperature > 0)."""
        return self.sampling_seed if self.temperature > 0 else None


DEFAULT_WORKLOAD = WorkloadConfig(
    name="default", prompts="builtin:mixed", num_requests=16, max_new_tokens=128, warmup=2
)


# ----------------------------------------------------------------------------------------------
# parse_workload: one validator per key, each told where the value came from


def _positive_int(raw: Any, where: str) -> int:
    return check.integer(raw, where, minimum=1)


def _count(raw: Any, where: str) -> int:
    return check.integer(raw, where, minimum=0)


def _positive(raw: Any, where: str) -> float:
    return check.number(raw, where, minimum=0, exclusive_min=True)


def _check_concurrency(raw: Any, where: str) -> tuple[int, ...]:
    """A single level or a list of levels; levels are sorted so reports read low to high."""
    levels = raw if isinstance(raw, list | tuple) else [raw]
    if not levels:
        raise ConfigError(where, "must list at least one concurrency level")
    checked: list[int] = []
    for level in levels:
        if isinstance(level, bool) or not isinstance(level, int):
            raise ConfigError(where, f"must be a positive integer or a list of them, got {check.given(level)}")
        if level < 1:
            raise ConfigError(where, f"levels must be >= 1, got {level}")
        if level in checked:
            raise ConfigError(where, f"level {level} is listed twice")
        checked.append(level)
    return tuple(sorted(checked))


#: How each workload key is checked (config.values) and turned into a field value.
_KEYS: dict[str, Callable[[Any, str], Any]] = {
    "prompts": check.string,
    "num_requests": _positive_int,
    "max_new_tokens": _positive_int,
    "concurrency": _check_concurrency,
    "request_rate": _positive,
    "temperature": lambda raw, where: check.number(raw, where, minimum=0),
    "top_p": lambda raw, where: check.number(raw, where, minimum=0, maximum=1, exclusive_min=True),
    "ignore_eos": check.boolean,
    "warmup": _count,
    "seed": _count,
    "max_error_rate": lambda raw, where: check.setting("max_error_rate", raw, where),
    "request_timeout": _positive,
    "stall_timeout": _positive,
}


def parse_workload(name: str, table: Mapping[str, Any], where: str, base_dir: Path) -> WorkloadConfig:
    """Validate one workload table into a `WorkloadConfig`.

    `where` names the table as the file spells it (``"<file> [tool.specperf.workloads.<name>]"``
    in a pyproject.toml); every problem raises `ConfigError` naming it and the key. A relative
    prompts path is resolved against `base_dir` and stored absolute, so the config is
    self-contained wherever pytest runs from.
    """
    table_where = where
    if not isinstance(table, Mapping):
        raise ConfigError(table_where, f"must be a table, got {check.type_name(table)}")
    if not name or not isinstance(name, str):
        raise ConfigError(table_where, "a workload needs a non-empty name")
    values: dict[str, Any] = {}
    check.known_keys(table, _KEYS, table_where)
    for key, raw in table.items():
        values[key] = _KEYS[key](raw, f"{table_where} {key}")
    if "prompts" in values:
        values["prompts"] = _check_prompts_spec(values["prompts"], base_dir, f"{table_where} prompts")
    return WorkloadConfig(name=name, **values)


def _check_prompts_spec(spec: str, base_dir: Path, where: str) -> str:
    if spec.startswith(BUILTIN_PREFIX):
        _check_builtin_name(spec[len(BUILTIN_PREFIX) :], where)
        return spec
    path = Path(spec).expanduser()
    if not path.is_absolute():
        path = base_dir / path
    if not path.is_file():
        raise ConfigError(
            where,
            f"prompt file {str(path)!r} does not exist (use a path or builtin:<set>; "
            f"builtin sets: {', '.join(BUILTIN_SETS)})",
        )
    return str(path.resolve())


def _check_builtin_name(name: str, where: str) -> None:
    if name not in BUILTIN_SETS:
        hint = did_you_mean(name, BUILTIN_SETS)
        raise ConfigError(where, f"unknown builtin prompt set {name!r}{hint}; sets: {', '.join(BUILTIN_SETS)}")


# ----------------------------------------------------------------------------------------------
# load_prompts


def load_prompts(spec: str, base_dir: Path) -> list[Prompt]:
    """The prompts named by a workload's `prompts` value; raises `ConfigError` naming file and line."""
    if spec.startswith(BUILTIN_PREFIX):
        name = spec[len(BUILTIN_PREFIX) :]
        _check_builtin_name(name, f"prompts {spec!r}")
        return _load_builtin(name)
    path = Path(spec).expanduser()
    if not path.is_absolute():
        path = base_dir / path
    if not path.is_file():
        raise ConfigError(str(path), "prompt file does not exist")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), f"cannot read prompt file: {exc}") from exc
    suffix = path.suffix.lower()
    if suffix == ".json" or (suffix != ".jsonl" and text.lstrip().startswith("[")):
        return _parse_sharegpt(text, path)
    return _parse_jsonl(text, path, category=path.stem)


def _load_builtin(name: str) -> list[Prompt]:
    if name != "mixed":
        return _read_builtin_category(name)
    per_category = [_read_builtin_category(c) for c in BUILTIN_CATEGORIES]
    longest = max(len(p) for p in per_category)
    return [p[i] for i in range(longest) for p in per_category if i < len(p)]


def _read_builtin_category(category: str) -> list[Prompt]:
    resource = resources.files("pytest_specperf") / "prompts" / f"{category}.jsonl"
    text = resource.read_text(encoding="utf-8")
    return _parse_jsonl(text, Path(f"<builtin>/{category}.jsonl"), category=category)


def _parse_jsonl(text: str, path: Path, category: str) -> list[Prompt]:
    prompts: list[Prompt] = []
    first_line_of: dict[str, int] = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(where, f"invalid JSON: {exc.msg} (column {exc.colno})") from exc
        prompt = _prompt_from_row(row, where, default_id=f"{category}-{lineno}", category=category)
        if prompt.id in first_line_of:
            raise ConfigError(where, f"duplicate id {prompt.id!r} (first on line {first_line_of[prompt.id]})")
        first_line_of[prompt.id] = lineno
        prompts.append(prompt)
    if not prompts:
        raise ConfigError(str(path), "prompt file has no prompts (empty file)")
    return prompts


def _prompt_from_row(row: Any, where: str, default_id: str, category: str) -> Prompt:
    if not isinstance(row, dict):
        raise ConfigError(where, f"each line must be a JSON object, got {check.type_name(row)}")
    has_prompt, has_messages = "prompt" in row, "messages" in row
    if has_prompt == has_messages:
        problem = "both" if has_prompt else "neither"
        raise ConfigError(where, f"a row needs exactly one of 'prompt' or 'messages', it has {problem}")
    prompt_id = _row_id(row, where, default_id)
    row_category = row.get("category", category)
    if not isinstance(row_category, str) or not row_category:
        raise ConfigError(where, f"'category' must be a non-empty string, got {row_category!r}")
    if has_prompt:
        text = row["prompt"]
        if not isinstance(text, str) or not text.strip():
            raise ConfigError(where, f"'prompt' must be a non-empty string, got {check.type_name(text)}")
        return Prompt(prompt_id, text, None, row_category)
    return Prompt(prompt_id, None, _check_messages(row["messages"], where), row_category)


def _row_id(row: dict[str, Any], where: str, default: str) -> str:
    if "id" not in row:
        return default
    value = row["id"]
    if isinstance(value, bool) or not isinstance(value, str | int) or value == "":
        raise ConfigError(where, f"'id' must be a non-empty string or an integer, got {value!r}")
    return str(value)


def _check_messages(messages: Any, where: str) -> tuple[dict[str, str], ...]:
    if not isinstance(messages, list) or not messages:
        raise ConfigError(where, '\'messages\' must be a non-empty array of {"role", "content"} objects')
    checked = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or set(message) - {"role", "content", "name"}:
            raise ConfigError(where, f"messages[{i}] must be an object with 'role' and 'content'")
        role, content = message.get("role"), message.get("content")
        if not isinstance(role, str) or not role:
            raise ConfigError(where, f"messages[{i}].role must be a non-empty string, got {role!r}")
        if not isinstance(content, str):
            raise ConfigError(where, f"messages[{i}].content must be a string, got {check.type_name(content)}")
        checked.append({"role": role, "content": content})
    return tuple(checked)


def _parse_sharegpt(text: str, path: Path) -> list[Prompt]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}:{exc.lineno}", f"invalid JSON: {exc.msg} (column {exc.colno})") from exc
    if not isinstance(data, list):
        raise ConfigError(str(path), f"a ShareGPT file must hold a JSON array, got {check.type_name(data)}")
    prompts: list[Prompt] = []
    seen: set[str] = set()
    for i, entry in enumerate(data):
        where = f"{path} entry [{i}]"
        messages = _sharegpt_messages(entry, where)
        if messages is None:
            continue
        prompt_id = _row_id(entry, where, default=f"{path.stem}-{i}")
        if prompt_id in seen:
            raise ConfigError(where, f"duplicate id {prompt_id!r}")
        seen.add(prompt_id)
        prompts.append(Prompt(prompt_id, None, messages, path.stem))
    if not prompts:
        raise ConfigError(str(path), "ShareGPT file has no conversation with a non-empty human turn")
    return prompts


def _sharegpt_messages(entry: Any, where: str) -> tuple[dict[str, str], ...] | None:
    """The conversation up to and including its first human turn; None if it has no human turn."""
    if not isinstance(entry, dict) or not isinstance(entry.get("conversations"), list):
        raise ConfigError(where, "each entry must be an object with a 'conversations' array")
    messages: list[dict[str, str]] = []
    for j, turn in enumerate(entry["conversations"]):
        if not isinstance(turn, dict) or not isinstance(turn.get("from"), str):
            raise ConfigError(f"{where} conversations[{j}]", "each turn needs a string 'from' and 'value'")
        value = turn.get("value")
        if not isinstance(value, str):
            raise ConfigError(f"{where} conversations[{j}]", f"'value' must be a string, got {value!r}")
        role = _SHAREGPT_ROLES.get(turn["from"])
        if role is None:
            continue  # tool/function turns and other extensions are not part of the prompt
        messages.append({"role": role, "content": value})
        if role == "user":
            return tuple(messages) if value.strip() else None
    return None


# ----------------------------------------------------------------------------------------------
# plans and hashing


def request_plan(cfg: WorkloadConfig, prompts: Sequence[Prompt]) -> list[Prompt]:
    """The `num_requests` prompts of one round: the set cycled in order from its start.

    Every round sends the same prompts in the same order, so rounds are samples of one thing.
    """
    if not prompts:
        raise ValueError("a workload needs at least one prompt")
    return [prompts[i % len(prompts)] for i in range(cfg.num_requests)]


def warmup_count(cfg: WorkloadConfig, concurrency: int) -> int:
    """How many warm-up requests go before the first round at `concurrency`: `warmup`, but at least
    `concurrency` (sent together, they form a batch of that size), unless `warmup = 0` turns it off.

    An engine warms up per batch size (kernels chosen and compiled, CUDA graphs, allocator pools): two
    warm-up requests never form a batch of 8, and on a real H200 the rounds at concurrency 8 after them
    rose 1017 → 1281 → 1686 tok/s.
    """
    return max(cfg.warmup, concurrency) if cfg.warmup > 0 else 0


def warmup_plan(cfg: WorkloadConfig, prompts: Sequence[Prompt], concurrency: int = 1) -> list[Prompt]:
    """The warm-up prompts sent before the rounds at `concurrency` (`warmup_count`): taken from the
    *end* of the set, backwards.

    A round starts at the set's first prompt; warming up on those would leave their prefixes in the
    radix cache (if no flush follows) and flatter the first requests' TTFT. Taking the last prompts
    keeps warmup and round starts disjoint whenever the set has at least `warmup` prompts more than
    the round's first requests need; a one-prompt set cannot avoid repeating itself.
    """
    if not prompts:
        raise ValueError("a workload needs at least one prompt")
    n = len(prompts)
    return [prompts[(n - 1 - i) % n] for i in range(warmup_count(cfg, concurrency))]


def workload_hash(cfg: WorkloadConfig, prompts: Sequence[Prompt]) -> str:
    """sha256 over the prompt contents and every parameter that changes measured results.

    Prompt ids and categories are labels, not contents: renaming them keeps stored baselines valid.

    Canonical JSON (sorted keys, ASCII, fixed separators; floats as Python's shortest repr, which is
    stable across versions) so the value is the same on every machine and Python. See the module
    docstring for what is left out on purpose.
    """
    payload = {
        "version": HASH_VERSION,
        "params": {
            "num_requests": cfg.num_requests,
            "max_new_tokens": cfg.max_new_tokens,
            "request_rate": None if cfg.request_rate is None else float(cfg.request_rate),
            "temperature": float(cfg.temperature),
            "top_p": float(cfg.top_p),
            "ignore_eos": bool(cfg.ignore_eos),
            "warmup": cfg.warmup,
            "seed": cfg.seed,
        },
        "prompts": [p.content() for p in prompts],
    }
    encoded = json.dumps(payload, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    return hashlib.sha256(encoded.encode("ascii")).hexdigest()
