"""What one module of the package uses of another is public: no module imports (or reaches into) a
name with a leading underscore of another, and the band ``1 ± max_regression`` is written once, by
`verdict.stats.Tolerance`.

A private name is one a module may change without telling anyone; a second module that imports it
breaks silently when it does. What is shared is made public where it lives (the t quantile, the
Welch-Satterthwaite degrees of freedom, the tolerance's bounds). Read from the parsed source only:
nothing is imported or run.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Iterator
from pathlib import Path

import pytest

import pytest_specperf
from pytest_specperf.verdict import stats
from pytest_specperf.verdict.stats import (
    TWO_SIDED_80,
    TWO_SIDED_90,
    TWO_SIDED_95,
    TWO_SIDED_98,
    Direction,
    Tolerance,
    one_sided,
    satterthwaite,
    t_quantile,
)

PACKAGE = Path(pytest_specperf.__file__).parent
#: Names of tolerances as shares: a sum or difference of 1 and one of these is the band written by hand.
TOLERANCE_NAMES = frozenset({"max_regression", "tolerance", "max_regression_accept_length"})


def _modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        yield str(path.relative_to(PACKAGE.parent)), ast.parse(path.read_text(), str(path))


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _package_modules_bound(tree: ast.Module) -> set[str]:
    """Local names bound to a module of the package (`import pytest_specperf.x as m`, `from
    pytest_specperf.verdict import nightly`)."""
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bound |= {a.asname or a.name for a in node.names if a.name.startswith("pytest_specperf")}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pytest_specperf"):
            known = PACKAGE.parent / (node.module or "").replace(".", "/")
            bound |= {a.asname or a.name for a in node.names if (known / f"{a.name}.py").exists()}
            bound |= {a.asname or a.name for a in node.names if (known / a.name / "__init__.py").exists()}
    return bound


def private_uses(where: str, tree: ast.Module) -> list[str]:
    """Every private name `tree` takes from another module: imported by name, or read off a module."""
    found = []
    modules = _package_modules_bound(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            found += [
                f"{where}:{node.lineno}: from {node.module} import {a.name}" for a in node.names if _private(a.name)
            ]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and _private(node.attr):
            found += [f"{where}:{node.lineno}: {node.value.id}.{node.attr}"] if node.value.id in modules else []
    return found


def _names_a_tolerance(node: ast.expr) -> bool:
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
    return name in TOLERANCE_NAMES


def hand_written_bands(where: str, tree: ast.Module) -> list[str]:
    """Every ``1 - tolerance`` / ``1 + max_regression`` (either order) outside `Tolerance`."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.BinOp) or not isinstance(node.op, ast.Add | ast.Sub):
            continue
        one = [side for side in (node.left, node.right) if isinstance(side, ast.Constant) and side.value == 1]
        share = [side for side in (node.left, node.right) if _names_a_tolerance(side)]
        if one and share:
            found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_uses_a_private_name_of_another() -> None:
    found = [use for where, tree in _modules() for use in private_uses(where, tree)]
    assert not found, "private names used across modules (make them public where they live):\n" + "\n".join(found)


def test_the_tolerance_band_is_written_once() -> None:
    found = [
        band
        for where, tree in _modules()
        if not where.endswith("verdict/stats.py")
        for band in hand_written_bands(where, tree)
    ]
    assert not found, "the band 1 ± max_regression written by hand (use stats.Tolerance):\n" + "\n".join(found)


def test_the_checks_above_see_what_they_look_for() -> None:
    """The two readers find a private import, a private attribute of a module and a hand-written band."""
    tree = ast.parse(
        "from pytest_specperf.verdict.stats import _hidden\n"
        "from pytest_specperf.verdict import nightly\n"
        "x = nightly._bounds(t)\n"
        "y = 1.0 - limits.max_regression\n"
        "z = math.log(1 + tolerance)\n"
    )
    assert [u.split(": ", 1)[1] for u in private_uses("m.py", tree)] == [
        "from pytest_specperf.verdict.stats import _hidden",
        "nightly._bounds",
    ]
    assert [b.split(": ", 1)[1] for b in hand_written_bands("m.py", tree)] == [
        "1.0 - limits.max_regression",
        "1 + tolerance",
    ]


def test_the_public_statistics_api() -> None:
    """The names the verdict engine shares, and what they mean."""
    assert Tolerance(0.05).bounds == (1.0 - 0.05, 1.0 + 0.05)
    assert Tolerance(0.05, Direction.LOWER_IS_BETTER).bounds == (1.0 + 0.05, 1.0 - 0.05)
    assert Tolerance(0.05).regression_bound == 0.95 and Tolerance(0.05).improvement_bound == 1.05
    assert Tolerance(0.1).log_band == (math.log(0.9), math.log(1.1))
    assert Tolerance(0.1).moved(0.89) and Tolerance(0.1).moved(1.12) and not Tolerance(0.1).moved(1.11)
    # the two-sided constants and the one-sided bound each of their ends is
    assert [one_sided(c) for c in (TWO_SIDED_80, TWO_SIDED_90, TWO_SIDED_95, TWO_SIDED_98)] == pytest.approx(
        [0.90, 0.95, 0.975, 0.99]
    )
    assert stats.DEFAULT_CONFIDENCE == TWO_SIDED_90
    assert math.isclose(t_quantile(TWO_SIDED_90, math.inf), 1.6448536269514722)
    assert math.isclose(t_quantile(TWO_SIDED_98, 4), 3.7469473879791968)
    # Welch's df of two equal variances with 4 df each is 8; an exactly known part adds none
    assert math.isclose(satterthwaite([(1.0, 4), (1.0, 4)]), 8.0)
    assert satterthwaite([(1.0, math.inf)]) == math.inf
