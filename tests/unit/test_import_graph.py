"""The package's imports follow the data flow: no circle, and no stage imports a later one.

Data flows config → engines → servers → measure → store → verdict → report (docs/architecture.md);
a module may import its own stage and earlier ones. Below every stage sit the cross-cutting modules
(errors, redaction, JSON files, the readiness probe), which import no stage; above them all the
application: the pytest plugin, the session, the command line. The simulator stands apart: standard
library only. Every import counts, wherever it is written: at the top, inside a function (a circle
held apart by a late import is still a circle) or under `if TYPE_CHECKING:` (a type is a dependency).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest_specperf

PACKAGE = Path(pytest_specperf.__file__).parent
STAGES = ("config", "engines", "servers", "measure", "store", "verdict", "report")
CROSS_CUTTING = frozenset({"errors", "common"})
APPLICATION = len(STAGES)

#: Arrows that run against the stage order on purpose, each with its reason. A new one fails the test.
ALLOWED_BACK_ARROWS = {
    # the validated config carries each engine's flag table, found when the engines check it; the
    # table is a leaf record (it imports no stage), imported for its type only
    ("pytest_specperf.config.settings", "pytest_specperf.engines.flags"),
}

Graph = Mapping[str, set[str]]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, name: str, known: Iterable[str]) -> set[str]:
    """The package's modules `path` imports, anywhere in it; `from package import module` names the module."""
    known = set(known)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([base] if base else [])])
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def package_graph() -> dict[str, set[str]]:
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: imported(path, name, paths) - {"pytest_specperf"} for name, path in paths.items()}


def stage(module: str) -> int | str:
    """A module's place in the order: a stage's index, -1 below every stage, APPLICATION above, or "sim"."""
    top = module.split(".")[1] if "." in module else ""
    if top in STAGES:
        return STAGES.index(top)
    if top in CROSS_CUTTING:
        return -1
    return "sim" if top == "sim" else APPLICATION


def back_arrows(graph: Graph) -> set[tuple[str, str]]:
    """Imports of a later stage (or of the application) by an earlier one."""
    arrows = set()
    for module, targets in graph.items():
        here = stage(module)
        for target in targets:
            there = stage(target)
            if isinstance(here, int) and isinstance(there, int) and there > here:
                arrows.add((module, target))
    return arrows


def circles(graph: Graph) -> list[list[str]]:
    """Groups of modules that import each other, directly or around a circle (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in graph.get(module, ()):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph)))
    try:
        for module in sorted(graph):
            if module not in index:
                visit(module)
    finally:
        sys.setrecursionlimit(limit)
    return found


def test_the_package_has_no_import_circle() -> None:
    assert circles(package_graph()) == []


def test_no_stage_imports_a_later_one() -> None:
    arrows = back_arrows(package_graph())
    assert arrows - ALLOWED_BACK_ARROWS == set(), "imports against config → engines → servers → measure → store → …"
    assert len(ALLOWED_BACK_ARROWS) <= 2


def test_the_simulator_imports_the_standard_library_only() -> None:
    """`python -m pytest_specperf.sim` runs where only Python is installed (a dry run on a login node)."""
    outside = {}
    for path in (PACKAGE / "sim").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            for name in names:
                if name.split(".")[0] not in sys.stdlib_module_names and name != "__future__":
                    outside[f"{path.name}: {name}"] = True
    assert list(outside) == []


def test_the_cross_cutting_modules_import_no_stage() -> None:
    graph = package_graph()
    assert {(m, t) for m, ts in graph.items() if stage(m) == -1 for t in ts if stage(t) != -1} == set()


def test_the_checks_see_a_new_circle_and_a_new_back_arrow() -> None:
    """The checks above pass on the package; they must fail on the mistakes they are there for."""
    graph = {
        "pytest_specperf.config.settings": {"pytest_specperf.verdict.stats"},  # config importing a later stage
        "pytest_specperf.verdict.stats": {"pytest_specperf.measure.records"},
        "pytest_specperf.measure.records": {"pytest_specperf.verdict.stats"},  # a circle through a late import
        "pytest_specperf.report.terminal": {"pytest_specperf.verdict.stats", "pytest_specperf.errors"},
    }
    assert circles(graph) == [["pytest_specperf.measure.records", "pytest_specperf.verdict.stats"]]
    assert back_arrows(graph) == {
        ("pytest_specperf.config.settings", "pytest_specperf.verdict.stats"),
        ("pytest_specperf.measure.records", "pytest_specperf.verdict.stats"),
    }


def test_a_late_or_type_only_import_is_an_import(tmp_path: Path) -> None:
    source = tmp_path / "mod.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from pytest_specperf.verdict.stats import Estimate\n"
        "def f():\n    from pytest_specperf.report import terminal\n"
        "from . import records\n"
    )
    known = {"pytest_specperf.verdict.stats", "pytest_specperf.report.terminal", "pytest_specperf.measure.records"}
    assert imported(source, "pytest_specperf.measure.mod", known) == known


def test_no_module_is_longer_than_600_lines() -> None:
    """A module past 600 lines holds more than one concept: split it by concept."""
    long = {
        p.relative_to(PACKAGE).as_posix(): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 600
    }
    assert long == {}


#: what starts a process or opens a socket: a test that uses one belongs beside its stage, not in tests/unit
IMPURE_MODULES = frozenset({"subprocess", "socket", "multiprocessing", "http.server", "psutil", "requests"})


def test_unit_tests_start_no_process_and_open_no_socket() -> None:
    """tests/unit/ is pure logic: no module there imports a way to start a process or reach a socket, or
    asks for `pytester` (a pytest run in a subprocess); those tests live beside the stage they test."""
    impure = {}
    for path in sorted((Path(__file__).parent).glob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        used = sorted(names & IMPURE_MODULES)
        if "pytester" in {a.arg for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) for a in n.args.args}:
            used.append("pytester")
        if used:
            impure[path.name] = used
    assert impure == {}
