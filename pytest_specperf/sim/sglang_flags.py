"""SGLang 0.5.23's command-line flags, and how its argparse resolves an abbreviated one.

SGLang parses its flags with argparse and keeps `allow_abbrev`: `--tp 8` is `--tp-size 8`,
`--po 30999` is `--port 30999`, `--cuda-graph-max-bs` is an ambiguous abbreviation (exit 2),
and an unknown flag ends the launch with "unrecognized arguments" (exit 2). The simulator and
the plugin's config checks both resolve flags here, so a typo fails a dry run in seconds and
an abbreviation cannot slip past a check that compares whole flags.

The list (`sglang_flags.txt`, one argparse action per line) is generated from SGLang's own
source by `scripts/sglang_flags.py`. Standard library only: the simulator imports this module.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

SGLANG_VERSION = "0.5.23"
SGLANG_FLAGS_FILE = Path(__file__).with_name("sglang_flags.txt")


@dataclass(frozen=True)
class FlagTable:
    """Option strings of one argparse parser, each mapped to its action's primary name."""

    actions: dict[str, str]  # option string -> first option string of its action

    def resolve(self, flag: str) -> str | list[str] | None:
        """argparse's reading of `flag` (no `=value`): the full option string it stands for,
        the candidates when the abbreviation is ambiguous, or None when nothing matches."""
        if flag in self.actions:
            return flag
        if not flag.startswith("--") or len(flag) < 3:
            return None
        matches = sorted(name for name in self.actions if name.startswith(flag))
        if len(matches) == 1:
            return matches[0]
        return matches or None

    def primary(self, flag: str) -> str:
        """The action's first option string (`--tensor-parallel-size` -> `--tp-size`)."""
        return self.actions[flag]


def load_flag_file(path: str) -> tuple[FlagTable, tuple[str, ...] | None]:
    """A flag file in the format above, with its `# algorithms: A B C` line if it has one: the plugin
    writes the installed SGLang's own flags this way for a dry run (`--sim-sglang-flags`)."""
    lines = Path(path).read_text().splitlines()
    algorithms = next((line.split(":", 1)[1].split() for line in lines if line.startswith("# algorithms:")), None)
    return parse_flag_lines(lines), tuple(algorithms) if algorithms is not None else None


def parse_flag_lines(lines: list[str]) -> FlagTable:
    actions: dict[str, str] = {}
    for line in lines:
        names = line.split()
        if not names or names[0].startswith("#"):
            continue
        for name in names:
            actions[name] = names[0]
    return FlagTable(actions)


@functools.cache
def sglang_flags() -> FlagTable:
    """SGLang 0.5.23's server flags, as shipped in `sglang_flags.txt`."""
    return parse_flag_lines(SGLANG_FLAGS_FILE.read_text().splitlines())


def ambiguous_message(flag: str, candidates: list[str]) -> str:
    """argparse's own wording, so a user can search for it."""
    return f"ambiguous option: {flag} could match {', '.join(candidates)}"
