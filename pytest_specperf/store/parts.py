"""A key's history in parts: the file a night appends to stays small, and git pairs it with its past.

Why: a history of a year is about 330 KB of lines. Appending tonight's line to that one file makes a
git store hash and compress the whole file again (1,000 keys: 330 MB a night), and makes the push look
for a delta base for 1,000 files of that size. Git also looks for that base only among the objects
whose paths end alike: it sorts them by a hash of the path's last 16 characters and tries the 10
nearest. Every server's folder holds the same file names (``workload-00-c1.jsonl``), so the previous
version of a history sat among the other servers' files and was often not tried: a night added 12 MB
to the branch instead of 0.1 MB. So a history is its named file and then parts of `PART_LINES` lines::

    <store>/<server>/<workload>-c<level>.jsonl                    the first `PART_LINES` lines (all of an
                                                                  earlier release's history), read first
    <store>/<server>/<workload>-c<level>.parts/00001.<tag>.jsonl  the next `PART_LINES` lines
    <store>/<server>/<workload>-c<level>.parts/00002.<tag>.jsonl  the next ones; a night appends to the last
    <store>/<server>/<workload>-c<level>.parts/records.<tag>.json the newest run's per-request records

A night appends to the last file, or starts the next part when the last holds `PART_LINES` lines; a
full file is never changed again, so git stores it once. `<tag>` is 8 hex digits of the sha256 of
``<server>/<workload>-c<level>.jsonl``: it ends the name of every file a night changes after the
first month, so each key's files differ in their last 16 characters and git tries a file's previous
version first. The history keeps its name (what `FileStore.path_for` says and `read_log` reads). A
history rewritten whole (an acceptance, a retention) is written into its named file at once and its
parts removed after, so a rewrite cut short reads as the history before it (a run read twice is kept
once, its first line: the rewritten one).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

#: The suffix of a history's file (and the name a history is known by).
LOG_SUFFIX = ".jsonl"
#: The folder beside a history's name that holds its parts.
PARTS_SUFFIX = ".parts"
#: Lines a part holds before the next one is started: a month of nights. A night re-hashes at most this
#: many lines per key; a year is a dozen files per key.
PART_LINES = 32
#: Hex digits of a history's tag (see the module docstring).
TAG_CHARS = 8
_PART = re.compile(r"^(\d{5,})\.[0-9a-f]+\.jsonl$")


def parts_dir(history: Path) -> Path:
    """The folder holding the parts of the history named `history` (``...-c<level>.jsonl``)."""
    return history.with_name(history.name.removesuffix(LOG_SUFFIX) + PARTS_SUFFIX)


def history_of_parts(folder: Path) -> Path:
    """The name of the history whose parts are in `folder` (inverse of `parts_dir`)."""
    return folder.with_name(folder.name.removesuffix(PARTS_SUFFIX) + LOG_SUFFIX)


def tag_of(history: Path) -> str:
    """The tag that ends the names of a history's files: the digest of its server folder and name, so
    the same history has the same tag in every copy of the store (a work tree, a clone, a folder)."""
    name = f"{history.parent.name}/{history.name}"
    return hashlib.sha256(name.encode("utf-8")).hexdigest()[:TAG_CHARS]


def part_path(history: Path, number: int) -> Path:
    return parts_dir(history) / f"{number:05d}.{tag_of(history)}{LOG_SUFFIX}"


def records_path(history: Path) -> Path:
    """Where the newest run's per-request records go (in the parts folder, ending with the tag)."""
    return parts_dir(history) / f"records.{tag_of(history)}.json"


def legacy_records_path(history: Path) -> Path:
    """Where the records were kept before parts: ``<workload>-c<level>.records.json`` beside the lines."""
    return history.with_name(history.name.removesuffix(LOG_SUFFIX) + ".records.json")


def parts_of(history: Path) -> list[Path]:
    """The history's parts, oldest first (by their number; files of any other name are not parts)."""
    folder = parts_dir(history)
    if not folder.is_dir():
        return []
    found = [(int(m[1]), p) for p in folder.iterdir() if (m := _PART.match(p.name)) is not None]
    return [p for _, p in sorted(found)]


def history_files(history: Path) -> list[Path]:
    """Every file holding lines of the history, in the order they are read: the file written before
    parts (when there is one), then the parts."""
    return ([history] if history.is_file() else []) + parts_of(history)


def has_history(history: Path) -> bool:
    return history.is_file() or bool(parts_of(history))


def next_file(history: Path, last_lines: int) -> Path:
    """The file tonight's line goes to: the history's last file (the named one while it has no parts),
    or the next part when that holds `PART_LINES` lines (`last_lines`: how many it holds)."""
    parts = parts_of(history)
    if last_lines < PART_LINES:
        return parts[-1] if parts else history
    number = int(_PART.match(parts[-1].name)[1]) if parts else 0  # type: ignore[index]
    return part_path(history, number + 1)
