"""docs/architecture.md names every module of the package, in the row of the room it lives in, and
names no module that is not there.

The page is where a newcomer looks a module up: a module it leaves out cannot be found from it, and
a module it names in the wrong room (or one that moved away) sends them to a file that is not there.
A package is named by its folder (`verdict/`), so `__init__.py` needs no row of its own; a nested
package by its folder in its parent's row (`sglang/` in the `engines/` row), with its modules.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest_specperf

PACKAGE = Path(pytest_specperf.__file__).parent
DOC = PACKAGE.parent / "docs" / "architecture.md"
ROOMS_HEADING = "## Rooms"
CODE = re.compile(r"`([^`]+)`")
#: files of a user's suite the page speaks of, not of the package
SUITE_FILES = frozenset({"conftest.py"})


@dataclass(frozen=True)
class Row:
    """One row of the Rooms table: the names in its first cell, and every name it spells in backticks."""

    rooms: frozenset[str]
    names: frozenset[str]


def rooms_table(text: str) -> list[Row]:
    """The rows of the table under "## Rooms" (its header and rule left out)."""
    section = text.split(ROOMS_HEADING, 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = line.split("|")
        if len(cells) < 4 or set(cells[1].strip()) <= {"-"} or cells[1].strip() == "where":
            continue
        rooms = frozenset(CODE.findall(cells[1]))
        rows.append(Row(rooms, frozenset(name for cell in cells[1:] for name in CODE.findall(cell))))
    return rows


def room_of(relative: Path) -> str:
    """The name a module's row is found by: its top folder (`verdict/`) or, at the top, its file."""
    return f"{relative.parts[0]}/" if len(relative.parts) > 1 else relative.name


def unnamed_modules(rows: list[Row], package: Path) -> list[str]:
    """Modules of `package` not named in the row of their room (a nested package's folder named there too)."""
    missing = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package)
        if relative == Path("__init__.py"):
            continue
        names = [f"{part}/" for part in relative.parts[1:-1]]
        if relative.name != "__init__.py" or len(relative.parts) == 1:
            names.append(relative.name)
        row = next((row for row in rows if room_of(relative) in row.rooms), None)
        if row is None or not set(names) <= row.names:
            missing.append(relative.as_posix())
    return missing


def named_but_absent(rows: list[Row], package: Path) -> list[str]:
    """Modules and folders a row names that are not there: looked for in the row's own room, then as a
    path from the package (another room, `config/location.py`) or from the repository (a benchmark)."""
    absent = []
    for row in rows:
        folders = [package / room for room in row.rooms if room.endswith("/")]
        for name in sorted(row.names - SUITE_FILES):
            if not name.endswith((".py", "/")) or " " in name:
                continue
            relative = name.rstrip("/")
            found = (package / relative).exists() or (package.parent / relative).exists()
            if not found and "/" not in relative:
                found = any(next(folder.rglob(relative), None) for folder in folders)
            if not found:
                absent.append(name)
    return absent


def test_every_module_is_named_in_its_room() -> None:
    assert unnamed_modules(rooms_table(DOC.read_text()), PACKAGE) == []


def test_every_module_the_rooms_name_exists_there() -> None:
    assert named_but_absent(rooms_table(DOC.read_text()), PACKAGE) == []


def test_a_module_moved_to_another_room_is_reported(tmp_path: Path) -> None:
    """The check itself: a module at the top that the doc places in `common/`, and one the doc never names."""
    (tmp_path / "common").mkdir()
    for name in ("__init__.py", "errors.py", "common/__init__.py", "common/redact.py", "redact.py", "new.py"):
        (tmp_path / name).write_text("")
    doc = (
        "## Rooms\n\n| where | what |\n|---|---|\n| `common/` | `redact.py` secrets, `jsonfile.py` files |\n"
        "| `errors.py` | error types |\n\n## Words\n"
    )
    rows = rooms_table(doc)
    assert unnamed_modules(rows, tmp_path) == ["new.py", "redact.py"]
    assert named_but_absent(rows, tmp_path) == ["jsonfile.py"]
