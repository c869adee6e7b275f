"""An engine's command-line flags, as the installed engine itself defines them.

A flag list frozen at one release refuses what a newer release added, lets a new flag that is a
prefix of an old one be read as the old one, and misses `--no-*` forms. So at collection time
the plugin asks the configured interpreter for its engine's own argparse parser (SGLang's
`ServerArgs.add_cli_args`, vLLM's `make_arg_parser`) and reads every action from it: option
strings (booleans with their `--no-` forms), whether it takes a value, its choices, and the
engine's speculative algorithms. The answer is cached per engine version on disk, since building
a parser imports torch. Only when the engine cannot be imported there (a laptop dry run) does the
engine's shipped list stand in, and the report header says so once.

The probe runs in the configured interpreter, never in pytest's: the engine is an optional extra
that pytest itself does not need.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shlex
import subprocess
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_specperf.errors import did_you_mean

PROBE_MARK = "SPECPERF-PROBE "
#: seconds the cheap version probe and the parser dump may take (the dump imports torch)
VERSION_PROBE_TIMEOUT_S = 60.0
PARSER_PROBE_TIMEOUT_S = 600.0
CACHE_ENV = "SPECPERF_CACHE_DIR"


@dataclass(frozen=True)
class EngineFlags:
    """One engine's flags and speculative algorithms, from its installed parser or its shipped list."""

    engine: str
    version: str | None
    #: "installed": read from the engine the configured interpreter imports; "shipped": the fallback list
    source: str
    #: every option string -> the first option string of its action (`--tensor-parallel-size` -> `--tp-size`)
    options: Mapping[str, str]
    #: primary option strings whose action takes no value (store_true, BooleanOptionalAction)
    switches: frozenset[str] = frozenset()
    #: primary option string -> the values argparse allows
    choices: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: speculative algorithms the engine accepts (None: it does not say)
    algorithms: tuple[str, ...] | None = None
    allow_abbrev: bool = True
    #: engine-specific facts the probe found (e.g. vLLM's speculative-config fields)
    extras: Mapping[str, Any] = field(default_factory=dict)
    #: why the shipped list stands in (None when the installed engine answered)
    fallback_reason: str | None = None

    @property
    def installed(self) -> bool:
        return self.source == "installed"

    def describe(self) -> str:
        """One line for the report header: where flags and algorithms are checked against."""
        checked = f"{self.engine} flags and algorithms checked against"
        if self.installed:
            return f"{checked} the installed {self.engine} {self.version or '(no version)'}"
        return (
            f"{checked} the list shipped for {self.engine} {self.version}, as {self.fallback_reason} (enough for "
            f"the simulator; where the servers run, the installed {self.engine} is asked)"
        )

    def resolve(self, flag: str) -> str | list[str] | None:
        """argparse's reading of `flag` (no `=value`): the option string it stands for, the candidates
        of an ambiguous abbreviation, or None when nothing matches."""
        if flag in self.options:
            return flag
        if not self.allow_abbrev or not flag.startswith("--") or len(flag) < 3:
            return None
        matches = sorted(name for name in self.options if name.startswith(flag) and name.startswith("--"))
        if len(matches) == 1:
            return matches[0]
        return matches or None

    def primary(self, flag: str) -> str:
        return self.options.get(flag, flag)

    def suggestion(self, flag: str) -> str:
        """ " (did you mean '--tp-size'?)" for an unknown flag, or ''."""
        return did_you_mean(flag, [name for name in self.options if name.startswith("--")])

    def takes_value(self, flag: str) -> bool:
        return self.primary(flag) not in self.switches

    def to_lines(self) -> list[str]:
        """The table in the simulator's flag-file format: one action per line, option strings first."""
        by_action: dict[str, list[str]] = {}
        for name, primary in self.options.items():
            by_action.setdefault(primary, [primary])
            if name != primary:
                by_action[primary].append(name)
        lines = [f"# {self.engine} {self.version or ''} flags ({self.source})"]
        if self.algorithms is not None:
            lines.append("# algorithms: " + " ".join(self.algorithms))
        lines += [" ".join(names) for _, names in sorted(by_action.items())]
        return lines

    def to_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "version": self.version,
            "source": self.source,
            "options": dict(self.options),
            "switches": sorted(self.switches),
            "choices": {k: list(v) for k, v in self.choices.items()},
            "algorithms": list(self.algorithms) if self.algorithms is not None else None,
            "allow_abbrev": self.allow_abbrev,
            "extras": dict(self.extras),
        }

    @classmethod
    def from_probe(cls, engine: str, data: Mapping[str, Any]) -> EngineFlags:
        """From the parser dump the probe prints (or a cached copy of it)."""
        options: dict[str, str] = {}
        switches: set[str] = set()
        choices: dict[str, tuple[str, ...]] = {}
        for action in data.get("actions", []):
            names = [str(n) for n in action.get("options", [])]
            if not names:
                continue
            primary = next((n for n in names if n.startswith("--")), names[0])
            for name in names:
                options.setdefault(name, primary)
            if not action.get("takes_value", True):
                switches.add(primary)
            if action.get("choices"):
                choices[primary] = tuple(str(c) for c in action["choices"])
        algorithms = data.get("algorithms")
        return cls(
            engine=engine,
            version=data.get("version"),
            source="installed",
            options=options,
            switches=frozenset(switches),
            choices=choices,
            algorithms=tuple(str(a) for a in algorithms) if algorithms is not None else None,
            allow_abbrev=bool(data.get("allow_abbrev", True)),
            extras=dict(data.get("extras") or {}),
        )


def table_from_lines(
    engine: str, version: str, lines: Iterable[str], *, algorithms: tuple[str, ...] | None, reason: str
) -> EngineFlags:
    """A shipped list (one action per line, option strings space-separated) as an `EngineFlags`."""
    options: dict[str, str] = {}
    for line in lines:
        names = line.split()
        if not names or names[0].startswith("#"):
            continue
        for name in names:
            options.setdefault(name, names[0])
    return EngineFlags(engine, version, "shipped", options, algorithms=algorithms, fallback_reason=reason)


# --------------------------------------------------------------------------------------------
# Asking the configured interpreter


@dataclass(frozen=True)
class ParserProbe:
    """How to find an engine's parser in another interpreter.

    `package` is its import name, `distributions` the package-index names whose metadata carries
    its version, `stamp_globs` the source files (relative to the package) whose change means new
    flags, and `code` a Python snippet that sets `parser` (an argparse parser with every server
    flag), and may set `version`, `algorithms` (a list of names) and `extras` (a dict).
    """

    package: str
    distributions: tuple[str, ...]
    stamp_globs: tuple[str, ...]
    code: str


_VERSION_PROBE = r"""
import glob, importlib.metadata as md, importlib.util as iu, json, os, sys
package, dists, globs = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(",")
out = {}
try:
    spec = iu.find_spec(package)
except Exception as exc:
    spec, out["error"] = None, f"{type(exc).__name__}: {exc}"
if spec is None or not spec.submodule_search_locations:
    out.setdefault("error", f"No module named {package!r}")
else:
    root = list(spec.submodule_search_locations)[0]
    version = None
    # the distribution's name may not be the package's (a CPU build's pyproject), or a source tree
    # on sys.path may have no metadata at all: then the package's own version file says it
    owners = getattr(md, "packages_distributions", dict)().get(package, [])
    for dist in [*dists, *owners]:
        try:
            version = md.version(dist)
            break
        except md.PackageNotFoundError:
            pass
    if version is None:
        import re
        try:
            text = open(os.path.join(root, "version.py")).read()
        except OSError:
            text = ""
        found = re.search(r"__version__\s*=\s*['\"]([^'\"]+)['\"]", text)
        version = found.group(1) if found else None
    stamps = [os.stat(p).st_mtime_ns for g in globs for p in glob.glob(os.path.join(root, g))]
    out.update(version=version, root=root, stamp=max(stamps, default=0))
print("SPECPERF-PROBE " + json.dumps(out))
"""

_PARSER_PROBE_HEAD = r"""
import argparse, json, sys
parser, version, algorithms, extras = None, None, None, {}
"""

_PARSER_PROBE_TAIL = r"""
actions = []
for action in parser._actions:
    if not action.option_strings:
        continue
    try:
        choices = None if action.choices is None else [str(c) for c in action.choices]
    except TypeError:
        choices = None
    actions.append({"options": list(action.option_strings), "takes_value": action.nargs != 0, "choices": choices})
print("SPECPERF-PROBE " + json.dumps({
    "version": version, "allow_abbrev": parser.allow_abbrev, "actions": actions,
    "algorithms": algorithms, "extras": extras,
}, default=str))
"""


class ProbeFailed(Exception):
    """The configured interpreter could not show the engine's parser; the message says why."""


def cache_dir() -> Path:
    """$SPECPERF_CACHE_DIR, else $XDG_CACHE_HOME/pytest-specperf, else ~/.cache/pytest-specperf."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pytest-specperf"


def installed_flags(
    engine: str, python: str, probe: ParserProbe, shipped: Callable[[str], EngineFlags], env: Mapping[str, str]
) -> EngineFlags:
    """The engine's flags as the interpreter `python` has them, or `shipped(reason)` when it cannot say."""
    return _installed_flags(engine, python, probe, shipped, tuple(sorted(env.items())))


@functools.cache
def _installed_flags(
    engine: str,
    python: str,
    probe: ParserProbe,
    shipped: Callable[[str], EngineFlags],
    env: tuple[tuple[str, str], ...],
) -> EngineFlags:
    child_env = {**os.environ, **dict(env)}
    try:
        found = _run(
            python,
            [_VERSION_PROBE, probe.package, ",".join(probe.distributions), ",".join(probe.stamp_globs)],
            child_env,
            VERSION_PROBE_TIMEOUT_S,
        )
    except ProbeFailed as exc:
        return shipped(f"`{python}` could not be asked ({exc})")
    if "error" in found:
        if found["error"] == f"No module named {probe.package!r}":  # a laptop's dry run: nothing is wrong
            return shipped(f"`{python}` has no {probe.package} installed")
        return shipped(f"`{python}` cannot import {probe.package} ({found['error']})")
    key = hashlib.sha256(f"{python}\0{found['root']}\0{found['stamp']}".encode()).hexdigest()[:12]
    path = cache_dir() / "engine-flags" / f"{engine}-{found.get('version') or 'unknown'}-{key}.json"
    cached = _read_cache(path)
    if cached is not None:
        return EngineFlags.from_probe(engine, cached)
    from filelock import Timeout

    try:
        with _one_dump_at_a_time(path):  # sessions side by side (xdist workers, CI jobs) dump the parser once
            cached = _read_cache(path)
            if cached is not None:
                return EngineFlags.from_probe(engine, cached)
            code = _PARSER_PROBE_HEAD + probe.code + _PARSER_PROBE_TAIL
            data = _run(python, [code], child_env, PARSER_PROBE_TIMEOUT_S)
            data.setdefault("version", found.get("version"))
            _write_cache(path, data)
    except ProbeFailed as exc:
        return shipped(f"`{python}` imports {probe.package} but could not build its parser ({exc})")
    except Timeout:
        return shipped(f"another session has been asking `{python}` for {probe.package}'s parser for too long")
    return EngineFlags.from_probe(engine, data)


def _one_dump_at_a_time(path: Path) -> contextlib.AbstractContextManager[object]:
    """A file lock beside the cache file; none where the cache folder cannot be written."""
    from filelock import FileLock

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return contextlib.nullcontext()
    return FileLock(str(path) + ".lock", timeout=PARSER_PROBE_TIMEOUT_S)


def _run(python: str, argv: list[str], env: Mapping[str, str], timeout: float) -> dict[str, Any]:
    """Run `python -c CODE ARGS...` from a neutral directory and read its marked JSON line."""
    try:
        command = [*shlex.split(python), "-c", *argv]
    except ValueError as exc:
        raise ProbeFailed(f"not a command line: {exc}") from None
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd="/",
            env=dict(env),
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise ProbeFailed(str(exc) or type(exc).__name__) from None
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(PROBE_MARK):
            try:
                data = json.loads(line[len(PROBE_MARK) :])
            except json.JSONDecodeError:
                break
            if isinstance(data, dict):
                return data
    tail = [line for line in done.stderr.splitlines() if line.strip()]
    raise ProbeFailed(tail[-1].strip()[:200] if tail else f"exit code {done.returncode}, no answer")


def _read_cache(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and "actions" in data else None


def _write_cache(path: Path, data: Mapping[str, Any]) -> None:
    """Best effort: a read-only home only costs the next session another parser dump."""
    from pytest_specperf.common.jsonfile import atomic_write

    with contextlib.suppress(OSError):
        atomic_write(path, json.dumps(data, sort_keys=True))
