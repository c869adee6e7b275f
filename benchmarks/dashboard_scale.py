"""How big and how slow is the dashboard of a full store? Build time, page sizes, load time in a browser.

Makes a store of 3 servers x 6 (workload, level) keys x `--nights` recorded nights each (the shape of
the example suite with a full `history`; 1.5% start-to-start spread, 0.4% round noise, 5 rounds a
night, built by the dashboard tests' own history writer), then times `specperf dashboard` on it (the
whole command: reading, the verdict engine's change points and gates, rendering) and, when Chromium is
installed, opens `suite.html` in headless Chromium and counts the points drawn and the errors.

Run: ``python benchmarks/dashboard_scale.py [--nights 30]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "dashboard"))

from browser import Browser, find_chromium  # the tests' own Chromium driver
from histories import Night, record

from pytest_specperf.cli import main as specperf
from pytest_specperf.measure.records import MeasurementKey
from pytest_specperf.store.file import FileStore

KEYS = [("chat", 1), ("code", 1), ("sweep", 1), ("sweep", 2), ("sweep", 4), ("sweep", 8)]
SERVERS = {"plain": None, "eagle3-5step": 2.1, "eagle3-2step": 1.95}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nights", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        store = FileStore(root / ".specperf")
        for server, tau in SERVERS.items():
            for workload, level in KEYS:
                nights = [Night(600.0 * level**0.8) for _ in range(args.nights)]
                record(store, MeasurementKey(server, workload, level), nights, tau=tau, spread=0.015)
        runs = sum(len(e.runs) for e in store.entries())
        started = time.perf_counter()
        cpu = time.process_time()
        assert specperf(["dashboard", "--store", str(store.root), "-o", str(root / "site")]) == 0
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        sizes = {p.name: p.stat().st_size for p in sorted((root / "site").glob("*.html"))}
        print(
            f"\n{len(SERVERS) * len(KEYS)} keys x {args.nights} nights ({runs} runs): built in {wall:.2f} s "
            f"({cpu:.2f} s CPU); " + ", ".join(f"{name} {size / 1024:.0f} KiB" for name, size in sizes.items())
        )
        executable = find_chromium()
        if executable is None:
            print("Chromium is not installed: no load time")
            return
        browser = Browser(executable, root / "profile")
        try:
            started = time.perf_counter()
            loaded = browser.open(root / "site" / "suite.html")
            load = time.perf_counter() - started
            points = browser.evaluate('document.querySelectorAll(".point").length')
        finally:
            browser.close()
        print(
            f"suite.html in headless Chromium: loaded and drawn in {load:.2f} s, {points} points, "
            f"{len(loaded.errors)} errors, {len(loaded.requests)} request(s)"
        )


if __name__ == "__main__":
    main()
