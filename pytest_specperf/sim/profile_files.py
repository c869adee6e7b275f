"""Simulator profile files: a profile's TOML (shipped in ``sim/profiles/``, or any path) read into a
`Profile` (profile.py), every key checked, every error naming the file, the table and the key."""

from __future__ import annotations

import math
import tomllib
from importlib import resources
from pathlib import Path

from .profile import (
    DEFAULT_PROFILE,
    AcceptanceModel,
    NcclTuning,
    OutputModel,
    Profile,
    ProfileError,
    ServerDefaults,
    StepCostModel,
)


def available_profiles() -> list[str]:
    """Names of the profiles shipped with the simulator."""
    root = resources.files("pytest_specperf.sim") / "profiles"
    return sorted(p.name.removesuffix(".toml") for p in root.iterdir() if p.name.endswith(".toml"))


def load_profile(name_or_path: str | Path = DEFAULT_PROFILE) -> Profile:
    """Load a shipped profile by name, or a profile TOML file by path."""
    text, source = _read_profile_text(str(name_or_path))
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{source}: invalid TOML: {exc}") from None
    return _parse_profile(data, source)


def _read_profile_text(name_or_path: str) -> tuple[str, str]:
    path = Path(name_or_path)
    if name_or_path.endswith(".toml") or path.is_file():
        try:
            return path.read_text(encoding="utf-8"), str(path)
        except OSError as exc:
            raise ProfileError(f"cannot read simulator profile {path}: {exc.strerror}") from None
    res = resources.files("pytest_specperf.sim") / "profiles" / f"{name_or_path}.toml"
    if not res.is_file():
        known = ", ".join(available_profiles())
        raise ProfileError(f"unknown simulator profile {name_or_path!r} (known: {known}; or give a .toml path)")
    return res.read_text(encoding="utf-8"), f"profile {name_or_path}"


class _Table:
    """Reads one TOML table, naming file and key in every error and refusing unknown keys."""

    def __init__(self, data: object, where: str) -> None:
        if not isinstance(data, dict):
            raise ProfileError(f"{where}: expected a table")
        self.data, self.where = data, where
        self.used: set[str] = set()

    def get(self, key: str, kind: type | tuple[type, ...], default: object = ...) -> object:
        self.used.add(key)
        if key not in self.data:
            if default is ...:
                raise ProfileError(f"{self.where}: missing key {key!r}")
            return default
        value = self.data[key]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            raise ProfileError(f"{self.where}.{key}: expected {getattr(kind, '__name__', kind)}, got {value!r}")
        return value

    def number(self, key: str, lo: float = 0.0, hi: float = math.inf, default: object = ...) -> float:
        value = self.get(key, float, default)
        assert isinstance(value, float)
        if not lo <= value <= hi:
            raise ProfileError(f"{self.where}.{key}: {value} is outside [{lo}, {hi}]")
        return value

    def integer(self, key: str, lo: int = 1, default: object = ...) -> int:
        value = self.get(key, int, default)
        assert isinstance(value, int)
        if value < lo:
            raise ProfileError(f"{self.where}.{key}: {value} must be >= {lo}")
        return value

    def pair(self, key: str, kind: type) -> tuple:
        value = self.get(key, list)
        assert isinstance(value, list)
        if len(value) != 2 or not all(isinstance(v, (int, float)) for v in value) or value[0] > value[1]:
            raise ProfileError(f"{self.where}.{key}: expected [low, high], got {value!r}")
        return (kind(value[0]), kind(value[1]))

    def done(self) -> None:
        unknown = sorted(set(self.data) - self.used)
        if unknown:
            raise ProfileError(f"{self.where}: unknown key(s) {', '.join(unknown)}")


def _parse_profile(data: dict, source: str) -> Profile:
    top = _Table(data, source)
    name = top.get("name", str)
    description = top.get("description", str, "")
    server = _parse_server(_Table(top.get("server", dict), f"{source}: [server]"))
    cost = _parse_cost(_Table(top.get("cost", dict), f"{source}: [cost]"))
    nccl = _parse_nccl(_Table(top.get("nccl", dict), f"{source}: [nccl]"))
    acc_tables = top.get("acceptance", dict)
    assert isinstance(acc_tables, dict)
    acceptance = {
        family: _parse_acceptance(_Table(t, f"{source}: [acceptance.{family}]")) for family, t in acc_tables.items()
    }
    if "default" not in acceptance:
        raise ProfileError(f"{source}: missing table [acceptance.default]")
    out = _Table(top.get("output", dict), f"{source}: [output]")
    output = OutputModel(out.pair("natural_tokens", int))
    out.done()
    top.done()
    assert isinstance(name, str) and isinstance(description, str)
    return Profile(name, description, source, server, cost, nccl, acceptance, output)


def _parse_server(t: _Table) -> ServerDefaults:
    s = ServerDefaults(
        model_path=str(t.get("model_path", str)),
        draft_model_path=str(t.get("draft_model_path", str)),
        architecture=str(t.get("architecture", str)),
        accelerator=str(t.get("accelerator", str)),
        tp_size=t.integer("tp_size"),
        max_running_requests=t.integer("max_running_requests"),
        cuda_graph_max_bs_decode=t.integer("cuda_graph_max_bs_decode"),
        mem_fraction_static=t.number("mem_fraction_static", 0.0, 1.0),
        context_length=t.integer("context_length"),
        max_total_num_tokens=t.integer("max_total_num_tokens"),
    )
    t.done()
    return s


def _parse_cost(t: _Table) -> StepCostModel:
    share = {"hi": 1.0}
    c = StepCostModel(
        plain_step_ms=t.number("plain_step_ms"),
        plain_per_request_ms=t.number("plain_per_request_ms"),
        draft_step_ms=t.number("draft_step_ms"),
        draft_per_token_ms=t.number("draft_per_token_ms"),
        verify_fixed_ms=t.number("verify_fixed_ms"),
        verify_per_token_ms=t.number("verify_per_token_ms"),
        cycle_overhead_ms=t.number("cycle_overhead_ms"),
        prefill_fixed_ms=t.number("prefill_fixed_ms"),
        prefill_per_token_ms=t.number("prefill_per_token_ms"),
        no_cuda_graph_penalty=t.number("no_cuda_graph_penalty", 1.0),
        plain_comm_share=t.number("plain_comm_share", **share),
        draft_comm_share=t.number("draft_comm_share", **share),
        verify_comm_share=t.number("verify_comm_share", **share),
        prefill_comm_share=t.number("prefill_comm_share", **share),
    )
    t.done()
    return c


def _parse_nccl(t: _Table) -> NcclTuning:
    env = t.get("env", dict, {})
    assert isinstance(env, dict)
    bad = [k for k, v in env.items() if not isinstance(v, str)]
    if bad:
        raise ProfileError(f"{t.where}.env: values must be strings (quote them): {', '.join(bad)}")
    n = NcclTuning(dict(env), t.number("comm_factor", 0.0, 1.0))
    t.done()
    return n


def _parse_acceptance(t: _Table) -> AcceptanceModel:
    rates = t.get("position_rates", list)
    assert isinstance(rates, list)
    if not rates or not all(isinstance(r, (int, float)) and 0.0 <= r <= 1.0 for r in rates):
        raise ProfileError(f"{t.where}.position_rates: expected a non-empty list of numbers in [0, 1]")
    a = AcceptanceModel(
        tuple(float(r) for r in rates), t.pair("difficulty", float), t.number("max_rate", 0.0, 1.0, 0.98)
    )
    t.done()
    return a
