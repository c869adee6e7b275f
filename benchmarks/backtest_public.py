"""`specperf backtest` on public CI performance series: false alarms on stable nights, known changes,
beside a plain t-test on the same nights.

Why: a gate is judged on noise nobody here wrote. tests/data/real-series/ holds six public series
(see its README for sources and licences): TigerBeetle's CI benchmark (365 runs, known changes),
eight RocksDB db_bench series (99 hourly runs, no change bigger than the noise), one MongoDB series
(132 runs, two known outliers), two hyper benchmarks from GitHub-hosted runners (a mixed runner
pool; a 20%-spread A/A series) and safetensors' load benchmark (a real -55% step, then bimodal).

Each is replayed night by night with the plugin's defaults (tolerance 5%), *attended*: a team
acknowledges each known change with --specperf-update on the night after it. A stable night is any
night but night 0, the known change nights and the update nights. Beside the plugin's verdicts, the
same nights judged by a Bencher-style t-test (the newest <= 30 runs of the current segment, every
run kept, red beyond mean ± t_0.99(n-1)·s·sqrt(1 + 1/n) on the bad side). The target: on every
series, false REGRESSION <= max(1%, the t-test's rate) and SUSPECT <= 5%.

    python benchmarks/backtest_public.py            # the table docs/benchmarks.md shows
"""

from __future__ import annotations

import csv
import sys
from dataclasses import dataclass
from pathlib import Path

from pytest_specperf.backtest import Row, read_series, replay
from pytest_specperf.verdict.nightly import Tolerance
from pytest_specperf.verdict.stats import Direction
from pytest_specperf.verdict.verdicts import Verdict

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "real-series"
TOLERANCE = 0.05


@dataclass(frozen=True)
class Series:
    """One public series, how to read it, and what is known about it."""

    name: str
    file: str
    value: str
    lower_is_better: bool = False
    events: tuple[int, ...] = ()  # runs of a known change (left out of the stable nights)
    updates: tuple[int, ...] = ()  # runs a team acknowledges a change at (--specperf-update)


ROCKSDB = "rocksdb_2023-09_ops_per_s.csv"
SERIES = (
    Series(
        "TigerBeetle load_accepted",
        "tigerbeetle_load_accepted.csv",
        "load_accepted_tx_per_s",
        events=(10, 15, 61, 71, 95),
        updates=(16, 62, 72, 96),
    ),
    Series("MongoDB", "mongodb_real_series.csv", "value", events=(4, 90)),
    *(Series(f"RocksDB {test}", ROCKSDB, test) for test in next(csv.reader((DATA / ROCKSDB).open()))[3:]),
    Series(
        "hyper http1_consecutive_x1_empty",
        "hyper_http1_consecutive_x1_empty_ns.csv",
        "ns_per_iter",
        lower_is_better=True,
        events=(11,),
        updates=(12,),
    ),
    Series("hyper http2_get", "hyper_http2_get_ns.csv", "ns_per_iter", lower_is_better=True),
    Series(
        "safetensors test_pt_sf_load_cpu",
        "safetensors_pt_sf_load_cpu_iter_per_s.csv",
        "iter_per_s",
        events=(8, 16, 84, 164, 166),
        updates=(9, 17, 85, 165, 167),
    ),
)


@dataclass(frozen=True)
class Figures:
    stable: int
    regression: int
    suspect: int
    ttest: int
    known: dict[int, str]

    def row(self, name: str) -> str:
        def share(count: int) -> str:
            return f"{count} ({100 * count / self.stable:.1f}%)"

        known = ", ".join(f"{run}: {outcome}" for run, outcome in self.known.items()) or "-"
        counts = " | ".join(share(c) for c in (self.regression, self.suspect, self.ttest))
        return f"| {name} | {self.stable} | {counts} | {known} |"


def figures(series: Series) -> Figures:
    """The series replayed attended, with the t-test beside it."""
    _, rows = read_series(DATA / series.file, value=series.value)
    rows = [Row(r.index, r.samples, r.time, r.commit, r.index in series.updates) for r in rows]
    direction = Direction.LOWER_IS_BETTER if series.lower_is_better else Direction.HIGHER_IS_BETTER
    result = replay(rows, Tolerance(TOLERANCE, direction), compare=True)
    left_out = {0, *series.events, *series.updates}
    stable = [n for n in result.nights if n.row.index not in left_out]
    known = {n.row.index: n.outcome.value for n in result.nights if n.row.index in series.events}
    return Figures(
        len(stable),
        sum(n.outcome is Verdict.REGRESSION for n in stable),
        sum(n.outcome is Verdict.SUSPECT for n in stable),
        sum(n.plain["t-test"] for n in stable),
        known,
    )


HEADER = (
    "| series | stable nights | false REGRESSION | SUSPECT | t-test red | known changes (night: verdict) |\n"
    "|---|---|---|---|---|---|"
)


def table() -> list[str]:
    lines = HEADER.splitlines()
    total = Figures(0, 0, 0, 0, {})
    for series in SERIES:
        found = figures(series)
        lines.append(found.row(series.name))
        total = Figures(
            total.stable + found.stable,
            total.regression + found.regression,
            total.suspect + found.suspect,
            total.ttest + found.ttest,
            {},
        )
    lines.append(total.row("all six"))
    return lines


def main() -> int:
    for line in table():
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
