"""What the `specperf` subcommands share: opening a store, and how a measurement reads in a table."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from pytest_specperf.cli.exits import EXIT_CODES as EXIT_CODES  # the subcommands import them from here
from pytest_specperf.cli.exits import FAILED as FAILED
from pytest_specperf.cli.exits import OK as OK
from pytest_specperf.cli.exits import REGRESSED as REGRESSED
from pytest_specperf.config.location import StoreLocation, shown_setting
from pytest_specperf.errors import SpecperfError
from pytest_specperf.measure.fingerprint import UNSET, Fingerprint
from pytest_specperf.measure.records import Measurement
from pytest_specperf.report.blocks import pm
from pytest_specperf.store import Store, open_store
from pytest_specperf.verdict.stats import mean_estimate

STORE_LAYOUT = "stored baselines live in <store>/<server>/*.json, the simulator's in <store>/sim/<server>/*.json"


@contextlib.contextmanager
def opened_store(setting: str) -> Iterator[Store]:
    """The store `setting` names, ready to read (a git store fetched into a temporary work tree)."""
    location = StoreLocation.parse(setting, base=Path.cwd(), where="store")
    if location.path is not None and not location.path.is_dir():
        raise SpecperfError(f"{Path(setting)}: no such store directory ({STORE_LAYOUT})")
    store = open_store(location)
    try:
        store.prepare()
        yield store
    finally:
        store.close()


def shown(setting: str) -> str:
    """The store setting as the command's lines name it (config/location.py `shown_setting`)."""
    return shown_setting(setting)


def mean_pm(m: Measurement, metric: str, digits: int) -> str:
    samples = m.samples(metric)
    return pm(mean_estimate(samples), digits) if samples else "-"


def fingerprint_line(fingerprint: object) -> str:
    """The fingerprint's summary, plus the simulator's time scale (it scales every number)."""
    if not isinstance(fingerprint, Fingerprint):
        return "-"
    scale = fingerprint.identity.get("sim_time_scale", UNSET)
    return fingerprint.summary() + ("" if scale == UNSET else f", time scale {scale}")
