"""What changed between two fingerprints: drift, comparability, and what a speedup compares.

A fingerprint (measure/fingerprint.py) says where a number was measured. Here two of them are
compared: an identity difference makes a comparison with a baseline INCOMPARABLE, an environment
difference is drift shown next to the verdict, and a speculative server that differs from its
reference in more than speculation makes its speedup compare more than speculation.

Whether two fingerprints are comparable is a replaceable default: `default_comparable` is the rule
every `specperf` command judges by, and the rule of a pytest session unless a suite's
`pytest_specperf_comparable` hook (hookspec.py) answers first. The session puts its hook in force
with `comparable_by`, so every comparison it makes (a test's verdict, its report row, a second look)
asks the same rule.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pytest_specperf.config.settings import DEFAULT_ENGINE
from pytest_specperf.engines.base import LikeForLike, engine_for
from pytest_specperf.measure.fingerprint import (
    IMAGE_ENTRY,
    UNSET,
    Fingerprint,
    command_words,
    image_digests,
    launch_flags,
)

#: An engine that names nothing more than speculation as no difference.
NO_RULES = LikeForLike()


@dataclass(frozen=True)
class Change:
    """One fingerprint entry that differs; "unset" on the side where it is absent."""

    name: str
    old: str
    new: str

    def __str__(self) -> str:
        return f"{self.name}: {self.old} → {self.new}"


@dataclass(frozen=True)
class FingerprintDiff:
    """Differences between a baseline's fingerprint and the current one."""

    identity: list[Change]
    environment: list[Change]
    #: what the rule in force when they were compared said (`comparable_by`); None: no rule was, the default's
    judged: bool | None = None

    @property
    def comparable(self) -> bool:
        """Whether the numbers may be compared at all; False makes the verdict INCOMPARABLE."""
        return default_comparable(self) if self.judged is None else self.judged

    def __bool__(self) -> bool:
        return bool(self.identity or self.environment)

    def describe(self) -> str:
        """One line per change, identity first (those make the comparison impossible, unless the rule
        in force allowed them)."""
        mark = "" if self.comparable else " (not comparable)"
        lines = [f"{change}{mark}" for change in self.identity]
        lines += [str(change) for change in self.environment]
        return "\n".join(lines)


def default_comparable(drift: FingerprintDiff) -> bool:
    """The plugin's rule: numbers are comparable unless an identity entry differs (an environment entry
    is drift: shown, and compared anyway). What `pytest_specperf_comparable` returns when no suite's
    implementation answers, and what every `specperf` command (accept, diff, history) judges by."""
    return not drift.identity


#: Whether numbers measured on the second fingerprint may be held against those of the first, given
#: what differs between them: the shape of a rule `comparable_by` puts in force.
Comparability = Callable[[Fingerprint, Fingerprint, FingerprintDiff], bool]

#: The rules in force in this process, newest last (a pytest session's; nested runs stack theirs).
_RULES: list[Comparability] = []


def comparable_by(rule: Comparability) -> Callable[[], None]:
    """Judge every comparison this process makes (`diff`) by `rule` until the returned function is
    called. How a pytest session makes its `pytest_specperf_comparable` hook decide for every verdict
    and report row: the verdict is pure and sees fingerprints, not pytest's config. Rules nest (a
    pytest run inside another): the newest decides, and taking it back restores the one before."""
    _RULES.append(rule)
    return lambda: _RULES.remove(rule)


def _changes(old: Mapping[str, str], new: Mapping[str, str]) -> list[Change]:
    names = sorted(set(old) | set(new))
    return [
        _image_change(old.get(name, UNSET), new.get(name, UNSET))
        if name == IMAGE_ENTRY
        else Change(name, old.get(name, UNSET), new.get(name, UNSET))
        for name in names
        if old.get(name, UNSET) != new.get(name, UNSET)
    ]


#: At most this many image variables are named in one drift line; the rest are counted.
IMAGE_NAMES_SHOWN = 6


def _image_change(old: str, new: str) -> Change:
    """The image's variables as one line: "image variables changed (CUDA_VERSION, NVIDIA_REQUIRE_CUDA):
    digest 3f9a0c1b → 77d2e0aa", naming those whose value differs, appeared or went."""
    then, now = image_digests(old), image_digests(new)
    names = sorted(n for n in set(then) | set(now) if then.get(n) != now.get(n))
    shown = ", ".join(names[:IMAGE_NAMES_SHOWN]) + (
        f" and {len(names) - IMAGE_NAMES_SHOWN} more" if len(names) > IMAGE_NAMES_SHOWN else ""
    )

    def digest(value: str) -> str:
        return UNSET if value == UNSET else f"digest {value.split(maxsplit=1)[0][:8]}"

    return Change(f"image variables changed ({shown})", digest(old), digest(new))


def unlike_reference(
    reference: Fingerprint,
    current: Fingerprint,
    speculation_keys: Sequence[str],
    rules: LikeForLike = NO_RULES,
) -> list[Change]:
    """What differs between a speedup's reference server and the speculative one, besides speculation.

    A speedup is meant to measure speculation alone; a different attention backend, dtype,
    parallelism, memory fraction, CUDA-graph setting or environment variable makes it compare more
    than that (on a CPU build of SGLang the "2.0x" of a speculative server was mostly its other
    attention backend). Launch arguments are compared flag by flag; `speculation_keys` (fnmatch
    patterns, the engine's) name what speculation itself changes. Old value: the reference's.

    What a server runs can differ from what it was asked (SGLang falls back to `torch_native` when the
    asked backend cannot run here): where both servers report a setting, it is judged by what they
    ran, with the asked value shown beside it, and a flag whose effect both report alike is no difference.
    The engine's `rules` name the rest that is no difference: what speculation forces, what the engine
    picks when nobody asks, an `auto` that resolves to the same value, what cannot act on this device.
    """

    def view(fingerprint: Fingerprint) -> dict[str, str]:
        flat = {**fingerprint.identity, **fingerprint.environment}
        args = flat.pop("args", UNSET)
        if not any(name.startswith("server.flag ") for name in flat):  # the server did not report its command
            flat.update({name: v for name, v in launch_flags(command_words(args)).items()})
        for name, source in rules.resolved.items():  # `auto` is the value it stands for, where known
            if flat.get(name) == "auto" and flat.get(source, UNSET) != UNSET:
                flat[name] = flat[source]
        return flat

    old, new = view(reference), view(current)
    ignored = ("workload_hash", "specperf.version", "python.version")
    changes = [
        change
        for change in _changes(old, new)
        if change.name not in ignored and not any(fnmatch.fnmatchcase(change.name, p) for p in speculation_keys)
    ]
    # a flag whose effect is reported is judged by that effect: named once, by what ran, or not at all
    reported = (old.keys() & new.keys()) | {c.name for c in changes if _is_setting(c.name)}
    judged = {c.name for c in changes if c.name.startswith("server.flag --") and _reported(c.name, reported, rules)}
    device = (
        reference.identity.get("device") if reference.identity.get("device") == current.identity.get("device") else None
    )
    return [
        _with_asked(c, old, new)
        for c in changes
        if c.name not in judged and not _no_difference(c, old, new, rules, device)
    ]


def _reported(flag_entry: str, reported: set[str], rules: LikeForLike) -> bool:
    """Whether the effect of a launch flag is among the settings the servers report."""
    flag = flag_entry.removeprefix("server.flag ")
    patterns = (_setting(flag_entry), *rules.effects.get(flag, ()))
    return any(fnmatch.fnmatchcase(name, p) for name in reported for p in patterns)


def _no_difference(
    change: Change, old: Mapping[str, str], new: Mapping[str, str], rules: LikeForLike, device: str | None
) -> bool:
    """A difference the engine says does not act: it cannot act on this device, speculation forces it
    (the speculative server did not ask for it), or the engine chose it on both sides unasked."""
    if device is not None and any(fnmatch.fnmatchcase(change.name, p) for p in rules.inert.get(device, ())):
        return True
    flag = _asked_flag(change.name)
    if rules.forced.get(change.name) == change.new and flag not in new:
        return True
    return change.name in rules.automatic and flag not in old and flag not in new


def _is_setting(name: str) -> bool:
    """A setting the server reports it runs (`server.attention_backend`), not a flag it was given."""
    return name.startswith("server.") and not name.startswith("server.flag ")


def _asked_flag(setting: str) -> str:
    """`server.attention_backend` -> `server.flag --attention-backend`: the flag that asks for it."""
    return "server.flag --" + setting.removeprefix("server.").replace("_", "-")


def _with_asked(change: Change, old: Mapping[str, str], new: Mapping[str, str]) -> Change:
    """A reported setting's change with the asked value beside the one that ran, where they differ."""
    if not _is_setting(change.name):
        return change
    flag = _asked_flag(change.name)

    def shown(ran: str, asked: str | None) -> str:
        return ran if asked is None or asked == ran else f"{ran} (asked {asked})"

    return Change(change.name, shown(change.old, old.get(flag)), shown(change.new, new.get(flag)))


def _setting(flag_entry: str) -> str:
    """`server.flag --attention-backend` -> `server.attention_backend`."""
    return "server." + flag_entry.removeprefix("server.flag --").replace("-", "_")


def speedup_differences(reference: Fingerprint | None, current: Fingerprint | None) -> list[Change]:
    """`unlike_reference` with the speculation keys of the engine the fingerprints name."""
    if reference is None or current is None:
        return []
    engine = engine_for(current.identity.get("engine", DEFAULT_ENGINE))
    return unlike_reference(reference, current, engine.speculation_keys, engine.like_for_like)


def diff(baseline: Fingerprint, current: Fingerprint) -> FingerprintDiff:
    """What changed from `baseline` to `current`, split into identity and environment, and whether
    they are comparable by the rule in force (`comparable_by`; else `default_comparable`)."""
    found = FingerprintDiff(
        identity=_changes(baseline.identity, current.identity),
        environment=_changes(baseline.environment, current.environment),
    )
    if not _RULES:
        return found
    return dataclasses.replace(found, judged=_RULES[-1](baseline, current, found))
