"""`specperf backtest` on public CI performance series: false alarms on stable nights, known changes.

Why: a gate is judged on noise nobody here wrote. tests/data/real-series/ holds three public series
(see its README for sources and licences): TigerBeetle's CI benchmark (365 runs, known changes),
eight RocksDB db_bench series (99 hourly runs, no change bigger than the noise: an A/A test) and one
MongoDB series (132 runs, two known outliers). Each is replayed night by night with the plugin's
defaults (tolerance 5%, history 30 nights); a team acknowledges an intended change with
--specperf-update on the night after it is flagged, which the TigerBeetle replay does at the known
changes. A "stable" night is one that is not a known event or an update.

    python benchmarks/backtest_public.py
"""

from __future__ import annotations

import csv
import sys
import tempfile
from pathlib import Path

from pytest_specperf.backtest import read_series, replay, summary
from pytest_specperf.verdict.nightly import Tolerance
from pytest_specperf.verdict.verdicts import Verdict

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "real-series"
TOLERANCE = Tolerance(0.05)

#: Known events (runs a stable-night count leaves out) and the runs a team would --specperf-update at.
TIGERBEETLE_EVENTS = (10, 15, 61, 71, 95)
TIGERBEETLE_UPDATES = (16, 62, 72, 96)
MONGODB_EVENTS = (4, 90)


def with_updates(path: Path, updates: tuple[int, ...], folder: Path) -> Path:
    """A copy of the CSV with an `update` column: 1 at the runs a team acknowledges a change at."""
    rows = list(csv.DictReader(path.open(newline="", encoding="utf-8")))
    target = folder / path.name
    with target.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, [*rows[0].keys(), "update"])
        writer.writeheader()
        for i, row in enumerate(rows):
            writer.writerow({**row, "update": "1" if i in updates else "0"})
    return target


def judge(name: str, path: Path, value: str | None, events: tuple[int, ...], **columns: str) -> str:
    _, rows = read_series(path, value=value, **columns)
    result = replay(rows, TOLERANCE)
    skipped = set(events) | {r.index for r in rows if r.update} | {0}
    stable = [n for n in result.nights if n.row.index not in skipped]
    regressions = sum(n.outcome is Verdict.REGRESSION for n in stable)
    suspect = sum(n.outcome is Verdict.SUSPECT for n in stable)
    known = {n.row.index: n.outcome.value for n in result.nights if n.row.index in events}
    facts = summary(result, TOLERANCE)
    sees = facts["detectable_change"]
    blind = "cannot see 5%" if facts["cannot_see_tolerance"] else ""
    return (
        f"| {name} | {len(stable)} | {regressions} ({100 * regressions / len(stable):.1f}%) "
        f"| {suspect} ({100 * suspect / len(stable):.1f}%) | {facts['restarts']} "
        f"| {facts['run_to_run_cv']:.1%} | {'-' if sees is None else f'{sees:+.1%}'} {blind} "
        f"| {', '.join(f'{k}: {v}' for k, v in known.items()) or '-'} |"
    )


def main() -> int:
    print("| series | stable nights | false REGRESSION | SUSPECT | second starts asked | run-to-run CV (end) "
          "| smallest change seen (80%) | known events |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        tigerbeetle = with_updates(DATA / "tigerbeetle_load_accepted.csv", TIGERBEETLE_UPDATES, Path(folder))
        print(judge("TigerBeetle load_accepted", tigerbeetle, None, TIGERBEETLE_EVENTS,
                    commit="tigerbeetle_commit", time="utc_time", update="update"))  # fmt: skip
    print(judge("MongoDB", DATA / "mongodb_real_series.csv", None, MONGODB_EVENTS))
    rocksdb = DATA / "rocksdb_2023-09_ops_per_s.csv"
    header = next(csv.reader(rocksdb.open(encoding="utf-8")))
    for test in header[3:]:
        print(judge(f"RocksDB {test}", rocksdb, test, (), commit="rocksdb_commit", time="utc_time_of_first_test"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
