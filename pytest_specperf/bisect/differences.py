"""What differs between a good run and a bad run of one key, and what of it can be applied to a start.

An environment variable (`NCCL_ALGO`) is applied by setting or unsetting it for the server; a launch
flag (`--attention-backend`) by writing it into, or taking it out of, the server's arguments. The
rest (package and driver versions, the interpreter, settings the server resolved) cannot be set by
starting a server differently: it is listed, never guessed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pytest_specperf.errors import SpecperfError
from pytest_specperf.measure.fingerprint import UNSET, Fingerprint, command_words, launch_flags
from pytest_specperf.redact import REDACTED

#: An environment variable's name, as a fingerprint records it (dotted names are the plugin's own entries).
_VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: Identity entries that make two runs different servers: bisecting across them compares nothing.
_DIFFERENT_SERVERS = ("model", "draft_model", "algorithm", "launcher", "workload_hash", "engine")
FLAG = "server.flag "


@dataclass(frozen=True)
class Difference:
    """One fingerprint entry that differs: its value in the good run and in the bad one."""

    name: str  # `NCCL_ALGO`, `server.flag --attention-backend`, `sglang.version`
    good: str
    bad: str

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
        return self.kind != "other"

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
