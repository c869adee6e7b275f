"""`specperf show [STORE]`: the stored baselines of a store as a table (the newest run of each key)."""

from __future__ import annotations

import argparse

from pytest_specperf.cli.common import OK, fingerprint_line, mean_pm, opened_store, shown
from pytest_specperf.cli.setup import Setup, StoreArgument
from pytest_specperf.report.terminal import text_table
from pytest_specperf.store.records import StoredBaseline

SHOW_HEADERS = ("server", "workload", "c", "tok/s", "τ", "rounds", "stored", "fingerprint")
SHOW_WIDTHS = (20, 12, None, None, None, None, None, 52)


def run_show(args: argparse.Namespace) -> int:
    root = shown(args.store)
    with opened_store(args.store) as store:
        entries = store.entries()
    if not entries:
        print(f"no stored baselines in {root}")
        return OK
    print(f"stored baselines in {root}:")
    for line in text_table(SHOW_HEADERS, [show_cells(e) for e in entries], SHOW_WIDTHS):
        print(line)
    return OK


SETUP = Setup(run_show, [StoreArgument(positional=True)])


def show_cells(entry: StoredBaseline) -> list[str]:
    m = entry.measurement
    return [
        m.key.server,
        m.key.workload,
        str(m.key.concurrency),
        mean_pm(m, "output_throughput", 1),
        mean_pm(m, "accept_length", 2),
        str(len(m.rounds)),
        entry.provenance.created[:10],
        fingerprint_line(m.fingerprint),
    ]
