"""What differs between a good run and a bad run of one key, and what of it can be applied to a start.

An environment variable (`NCCL_ALGO`) is applied by setting or unsetting it for the server; a launch
flag by writing it into, or taking it out of, the argument list that carries it (`placed`): the
server's `args` (`--attention-backend`), or an engine's own list (the simulator's `--sim-*` flags
live in `sim_args`, the suite's and the server's). A flag the plugin writes from a config key
(`--model-path`, `--speculative-num-steps`, `--sim-time-scale`) cannot be set by a start without
becoming another server; it is listed, like package and driver versions, the interpreter and
settings the server resolved, never tried (engine builds are bisected with `--builds`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pytest_specperf.common.redact import REDACTED
from pytest_specperf.config.settings import SIM_LAUNCHER, SpecperfConfig
from pytest_specperf.errors import SpecperfError
from pytest_specperf.measure.fingerprint import UNSET, Fingerprint, command_words, launch_flags
from pytest_specperf.servers.launch import server_args, sim_args

#: An environment variable's name, as a fingerprint records it (dotted names are the plugin's own entries).
_VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: Identity entries that make two runs different servers: bisecting across them compares nothing.
_DIFFERENT_SERVERS = ("model", "draft_model", "algorithm", "launcher", "workload_hash", "engine")
FLAG = "server.flag "
#: Where a difference is applied: the environment, the server's `args`, the simulator's `sim_args`;
#: FIXED for a flag written from a config key (and for what is not a flag nor a variable).
ENV, ARGS, SIM_ARGS, FIXED = "env", "args", "sim_args", ""


@dataclass(frozen=True)
class Difference:
    """One fingerprint entry that differs: its value in the good run and in the bad one."""

    name: str  # `NCCL_ALGO`, `server.flag --attention-backend`, `sglang.version`
    good: str
    bad: str
    carrier: str = ARGS  # for a flag: the argument list a start writes it into (`placed`)

    @property
    def kind(self) -> str:
        """ "env" or "flag" (applicable), else "other"."""
        if REDACTED in (self.good, self.bad):
            return "other"  # a secret's value is not known here
        if self.name.startswith(FLAG):
            return "flag"
        return "env" if _VARIABLE.match(self.name) else "other"

    @property
    def applicable(self) -> bool:
        return self.kind == "env" or (self.kind == "flag" and self.carrier != FIXED)

    @property
    def why_not(self) -> str:
        """Why a start cannot set it, in the words the listing uses."""
        if self.kind == "flag":
            return "written from a config key: another server, not a start's setting"
        if self.name.endswith(".version"):
            return "a build: bisect builds with --builds"
        return "cannot be set by a start"

    @property
    def flag(self) -> str:
        return self.name.removeprefix(FLAG)

    def setting(self, bad: bool) -> str:
        """The setting that puts this difference at its good (or bad) value, as a person would type it."""
        value = self.bad if bad else self.good
        if self.kind == "flag":
            if value == UNSET:
                return f"no {self.flag}"
            return self.flag if value == "set" else f"{self.flag} {value}"
        return f"unset {self.name}" if value == UNSET else f"{self.name}={value}"

    def __str__(self) -> str:
        return f"{self.name}: {self.good} → {self.bad}"


def differences(good: Fingerprint, bad: Fingerprint) -> list[Difference]:
    """Every entry that differs between the runs: the launch arguments flag by flag, then the rest.

    Raises SpecperfError when the runs are of different servers (model, draft, algorithm, launcher,
    workload): what made one slower than the other is not a question bisect can answer."""
    for name in _DIFFERENT_SERVERS:
        old, new = good.identity.get(name, UNSET), bad.identity.get(name, UNSET)
        if old != new:
            raise SpecperfError(
                f"the two runs are of different servers ({name}: {old} → {new}); bisect compares "
                "two runs of one server config"
            )
    then, now = _flat(good), _flat(bad)
    names = sorted(set(then) | set(now), key=_order)
    return [
        Difference(name, then.get(name, UNSET), now.get(name, UNSET))
        for name in names
        if then.get(name, UNSET) != now.get(name, UNSET)
    ]


def _flat(fingerprint: Fingerprint) -> dict[str, str]:
    """One entry per variable, flag and other setting (the launch arguments split into flags)."""
    flat = {k: v for k, v in {**fingerprint.identity, **fingerprint.environment}.items() if k != "args"}
    if not any(name.startswith(FLAG) for name in flat):
        flat.update(launch_flags(command_words(fingerprint.identity.get("args", ""))))
    return flat


def _order(name: str) -> tuple[int, str]:
    """Variables first, then flags, then the rest: applicable differences lead, as the search takes them."""
    if name.startswith(FLAG):
        return 1, name
    return (0 if _VARIABLE.match(name) else 2), name


def placed(found: Sequence[Difference], config: SpecperfConfig, server: str) -> list[Difference]:
    """Each launch flag of `found` with the argument list that carries it in `config`'s `server`:
    a list that holds it already, else `sim_args` for a simulator flag on the simulator, else `args`
    unless the plugin writes the flag from a config key (FIXED: not applicable)."""
    target = config.servers[server]
    simulated = config.launcher == SIM_LAUNCHER
    lists = {ARGS: target.args, SIM_ARGS: (*config.sim_args, *target.sim_args) if simulated else ()}
    holding = {flag: name for name, words in lists.items() for flag in launch_flags(["x", *words])}
    written = _written_flags(config, server) - holding.keys()
    return [
        d if d.kind != "flag" else dataclasses.replace(d, carrier=_carrier(d, holding, written, simulated))
        for d in found
    ]


def _carrier(difference: Difference, holding: Mapping[str, str], written: set[str], simulated: bool) -> str:
    if difference.name in holding:
        return holding[difference.name]
    if difference.name in written:
        return FIXED
    return SIM_ARGS if simulated and difference.flag.startswith("--sim-") else ARGS


def _written_flags(config: SpecperfConfig, server: str) -> set[str]:
    """The flags the plugin writes from config keys for `server` (its lists emptied), as entries."""
    target = dataclasses.replace(config.servers[server], args=(), sim_args=())
    bare = dataclasses.replace(config, servers={**config.servers, server: target}, sim_args=())
    words = server_args(target, bare, port=1)
    if bare.launcher == SIM_LAUNCHER:
        words += sim_args(target, bare)
    return set(launch_flags(["x", *words]))


def apply_flags(args: Sequence[str], flags: Mapping[str, str]) -> tuple[str, ...]:
    """`args` with each flag of `flags` set to its value ("set": a switch; "unset": taken out)."""
    groups: list[list[str]] = []
    for token in args:
        if token.startswith("--"):
            name, eq, value = token.partition("=")
            groups.append([name, value] if eq else [name])
        elif groups:
            groups[-1].append(token)
        else:
            groups.append([token])
    kept = [g for g in groups if g[0] not in flags]
    for flag, value in flags.items():
        if value != UNSET:
            kept.append([flag] if value == "set" else [flag, *command_words(value)])
    return tuple(token for group in kept for token in group)
