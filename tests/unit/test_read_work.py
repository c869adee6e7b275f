"""Reading a year of nights costs what it must, and finds what it found before.

`specperf history` of one key and `specperf dashboard` of 1,000 keys by 365 nights decode every stored
round and search every series for change points and outliers. These tests count the work per night
(never the time: a busy machine would flip them) on series made from a real SGLang night's rounds
(tests/data/real-nights/sglang-cpu-spec/night1-report.json), and hold each faster way to the plain
definition it replaces: the same medians, the same outliers, the same streak, the same two steps.
"""

from __future__ import annotations

import ast
import itertools
import json
import math
import random
import statistics
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import pytest_specperf
from pytest_specperf.measure import records
from pytest_specperf.measure.records import Measurement
from pytest_specperf.verdict import changes, history, level

NIGHT = Path(__file__).parents[1] / "data" / "real-nights" / "sglang-cpu-spec" / "night1-report.json"
PACKAGE = Path(pytest_specperf.__file__).parent
NIGHTS = 365


def real_rows() -> list[dict[str, Any]]:
    """The measurements of a real night's report, as SGLang's rounds were stored."""
    return list(json.loads(NIGHT.read_text())["measurements"])


def year_of_levels(seed: int, wild: int | None = None) -> list[float]:
    """A year of log throughputs around the real NGRAM night's (seeded night-to-night noise of 1.5%),
    with a run 25% slow at `wild`."""
    row = next(r for r in real_rows() if r["server"] == "ngram")
    base = statistics.fmean(r["output_throughput"] for r in row["rounds"])
    rng = random.Random(seed)
    logs = [math.log(base) + rng.gauss(0.0, 0.015) for _ in range(NIGHTS)]
    if wild is not None:
        logs[wild] += math.log(0.75)
    return logs


def counting(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> list[int]:
    """Count the calls of `owner.name` (a one-element list, read after the calls)."""
    original: Callable[..., Any] = getattr(owner, name)
    calls = [0]

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


def test_a_round_is_read_without_looking_its_fields_up_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rounds as a stored line holds them: per-request records live in a file of their own."""
    rows = [
        {**row, "rounds": [{k: v for k, v in r.items() if k != "records"} for r in row["rounds"]]}
        for row in real_rows()
    ]
    expected = [Measurement.from_dict(row) for row in rows]
    calls = counting(monkeypatch, records, "fields")
    read = [Measurement.from_dict(row) for row in rows]
    assert calls[0] == 0  # was one look at the dataclass's fields per round
    assert read == expected
    assert [r.metric("output_throughput") for m in read for r in m.rounds] == [
        r["output_throughput"] for row in rows for r in row["rounds"]
    ]


def test_outlier_rejection_over_a_year_computes_few_runs_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    levels = year_of_levels(seed=7, wild=200)
    everyone = max((history._deleted_residual(levels, range(NIGHTS), i) for i in range(NIGHTS)), key=lambda r: abs(r.t))
    calls = counting(monkeypatch, history, "_deleted_residual")
    found = history.reject_outliers(levels)
    assert [r.index for r in found] == [200]
    assert (found[0].t, found[0].ratio) == (everyone.t, everyone.ratio)
    assert calls[0] <= 8  # was every run against every other, each round: 729 runs, 130,000 terms a round


@pytest.mark.parametrize("seed", range(40))
def test_outlier_rejection_is_the_plain_search(seed: int) -> None:
    """The runs rejected, worst first, are those of the plain search (every run's deleted residual, the
    largest |t| out while it is beyond the Bonferroni limit), on ties, equal runs and wild runs alike."""
    rng = random.Random(seed)
    count = rng.randint(5, 90)
    levels = year_of_levels(seed)[:count]
    if seed % 4 == 1:
        levels = [round(v, 2) for v in levels]  # ties
    if seed % 4 == 2:
        levels = [levels[0]] * count  # a plain server's accept length: every run equal
    for _ in range(rng.randint(0, 3)):
        levels[rng.randrange(count)] += rng.choice((-1, 1)) * rng.uniform(0.05, 0.5)
    assert history.reject_outliers(levels) == plain_rejections(levels)


def plain_rejections(levels: list[float]) -> list[history.Rejection]:
    kept, out = list(range(len(levels))), []
    while len(kept) > history.MIN_RUNS_TO_REJECT:
        m = len(kept)
        limit = history._one_sided_t(1.0 - history.REJECT_ALPHA / (2.0 * m), m - 2)
        worst = max((history._deleted_residual(levels, kept, i) for i in kept), key=lambda r: abs(r.t))
        if not abs(worst.t) > limit:
            break
        out.append(history.Rejection(worst.index, worst.t, limit, worst.ratio))
        kept.remove(worst.index)
        if len(out) > history.MAX_OUTLIERS:
            return []
    return out


def test_isolated_outliers_take_every_run_s_neighbours_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    logs = np.asarray(year_of_levels(seed=3, wild=100))
    calls = counting(monkeypatch, np, "median")
    flagged = changes._isolated_outliers(logs)
    assert calls[0] == 2  # the spread's two; was two more per run: 728
    assert list(np.flatnonzero(flagged)) == [100]


@pytest.mark.parametrize("seed", range(40))
def test_isolated_outliers_are_the_medians_of_their_neighbours(seed: int) -> None:
    rng = random.Random(seed)
    logs = year_of_levels(seed)[: rng.randint(0, 40)]
    for _ in range(rng.randint(0, 4)) if logs else ():
        logs[rng.randrange(len(logs))] += rng.choice((-1, 1)) * rng.uniform(0.02, 0.3)
    found = changes._isolated_outliers(np.asarray(logs))
    assert list(found) == plain_isolated(logs)


def plain_isolated(logs: list[float]) -> list[bool]:
    """Each run against the median of up to two runs before it and of up to two after it."""
    n = len(logs)
    if n < 3:
        return [False] * n
    diffs = [b - a for a, b in itertools.pairwise(logs)]
    middle = float(np.median(diffs))
    sigma = max(changes._MAD * float(np.median([abs(d - middle) for d in diffs])) / math.sqrt(2.0), changes.SIGMA_FLOOR)
    out = [False] * n
    for i in range(1, n - 1):
        left = logs[i] - statistics.median(logs[max(0, i - 2) : i])
        right = logs[i] - statistics.median(logs[i + 1 : i + 3])
        out[i] = left * right > 0.0 and min(abs(left), abs(right)) > changes.OUTLIER_SIGMAS * sigma
    return out


@pytest.mark.parametrize("seed", range(30))
def test_two_steps_is_the_best_pair_of_splits(seed: int) -> None:
    """The three-level fit is the first best pair of splits, every pair tried (as a loop would)."""
    rng = random.Random(seed)
    n = rng.randint(3 * changes.MIN_SIZE, 60)
    logs = year_of_levels(seed)[:n]
    first, second = sorted(rng.sample(range(1, n), 2))
    logs = [v + (0.1 if i >= first else 0.0) - (0.06 if i >= second else 0.0) for i, v in enumerate(logs)]
    total, fitted, a, b = changes._two_steps(np.asarray(logs))
    assert (a, b) == plain_two_steps(logs)
    assert total == pytest.approx(rss(logs[:a]) + rss(logs[a:b]) + rss(logs[b:]), rel=1e-9, abs=1e-15)
    levels = [statistics.fmean(part) for part in (logs[:a], logs[a:b], logs[b:]) for _ in part]
    assert list(fitted) == pytest.approx(levels, rel=1e-12)


def plain_two_steps(logs: list[float]) -> tuple[int, int]:
    size, n = changes.MIN_SIZE, len(logs)
    pairs = [(i, j) for i in range(size, n - 2 * size + 1) for j in range(i + size, n - size + 1)]
    scores = {(i, j): rss(logs[:i]) + rss(logs[i:j]) + rss(logs[j:]) for i, j in pairs}
    best = min(scores.values())
    near = [pair for pair in pairs if scores[pair] <= best + 1e-12]
    return near[0]


def rss(part: list[float]) -> float:
    mean = math.fsum(part) / len(part)
    return math.fsum((v - mean) ** 2 for v in part)


def test_a_streak_is_tried_longest_first_and_stops_at_its_first_night(monkeypatch: pytest.MonkeyPatch) -> None:
    """A clean level of 120 nights asks each candidate streak one question, not one per night in it."""
    logs = year_of_levels(seed=11)[:120]
    calls = counting(monkeypatch, level, "_beyond")
    assert level._streak(logs, list(range(120)), 0.05) == ((), 0)
    assert calls[0] <= 60  # was every night of every candidate: 1,770


@pytest.mark.parametrize("seed", range(60))
def test_a_streak_is_the_longest_that_holds(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(4, 60)
    start = rng.randint(n // 2, n)
    logs = [v + (rng.choice((-0.2, 0.1, -0.07)) if i >= start else 0.0) for i, v in enumerate(year_of_levels(seed)[:n])]
    runs = [i for i in range(n) if rng.random() < 0.9]
    nights = None if seed % 2 else [f"night-{i // rng.choice((1, 2))}" for i in range(n)]
    assert level._streak(logs, runs, 0.05, nights) == plain_streak(logs, runs, 0.05, nights)


def plain_streak(
    logs: list[float], runs: list[int], tolerance: float, nights: list[object] | None
) -> tuple[tuple[int, ...], int]:
    """Every candidate, shortest first, the longest that holds kept."""
    best: tuple[tuple[int, ...], int] = ((), 0)
    groups = level._newest_nights(runs, nights)
    for count in range(1, len(groups) + 1):
        streak = [i for group in groups[:count] for i in group]
        if 2 * len(streak) >= len(runs):
            break
        before = [logs[i] for i in runs if i not in streak]
        sides = {
            level._beyond(statistics.fmean(logs[i] for i in g), before, tolerance, level.STREAK_QUANTILE, robust=True)
            for g in groups[:count]
        }
        if len(sides) == 1 and 0 not in sides:
            best = (tuple(sorted(streak)), sides.pop())
    return best


def module_imports(name: str) -> Iterator[str]:
    """The package's modules `name` imports when it is imported: its parents' and its own top-level
    imports (not those inside functions or under `if TYPE_CHECKING:`)."""
    parts = name.split(".")
    for depth in range(1, len(parts) + 1):
        yield ".".join(parts[:depth])
    path = PACKAGE.parent.joinpath(*parts)
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pytest_specperf"):
            for alias in node.names:
                module = f"{node.module}.{alias.name}"
                exists = PACKAGE.parent.joinpath(*module.split(".")).with_suffix(".py").exists()
                yield module if exists else node.module
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name.startswith("pytest_specperf"))


def imported_with(name: str) -> set[str]:
    seen: set[str] = set()
    todo = [name]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(m for m in module_imports(module) if m not in seen)
    return seen


def test_specperf_history_imports_no_report_model() -> None:
    """`specperf history` prints a table: it does not import the session report's model (and with it
    the terminal report, tabulate and the cost model), a fifth of a second before its first line."""
    found = imported_with("pytest_specperf.cli.history")
    assert "pytest_specperf.report.blocks" in found
    assert not found & {"pytest_specperf.report.terminal", "pytest_specperf.report.analysis"}
